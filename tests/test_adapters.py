"""Output envelopes per harness, the inline cap, and the hook fed recorded payload shapes.

Cursor and Qwen have no offline CLI here (brief: harnesses.md sections 3 and 7), so their
end-to-end check is the real ``supervise hook`` process fed the payload shapes the brief
records, with the exact envelope and exit 0 asserted.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from helpers import run_cli
from supervisor.adapters import ADAPTERS, fit_inline, inline_cap, is_foreign, render
from supervisor.adapters._inline import split_sections


def _context(out: bytes) -> str:
    return json.loads(out)["hookSpecificOutput"]["additionalContext"]


@pytest.mark.parametrize("harness", ["claude", "codex", "gemini", "qwen"])
def test_hook_specific_envelope_is_the_json_alone(harness: str, tmp_path: Path) -> None:
    out = render(harness, "## Repo\nclean\n", state_dir=tmp_path)
    assert out == (b'{"hookSpecificOutput": {"hookEventName": "SessionStart", '
                   b'"additionalContext": "## Repo\\nclean\\n"}}\n')


def test_cursor_envelope(tmp_path: Path) -> None:
    assert render("cursor", "hi\n", state_dir=tmp_path) == b'{"additional_context": "hi\\n"}\n'


@pytest.mark.parametrize(("harness", "event"), [("claude", "UserPromptSubmit"), ("codex", "UserPromptSubmit"),
                                                ("gemini", "BeforeAgent"), ("qwen", "UserPromptSubmit")])
def test_prompt_kind_uses_the_per_prompt_event(harness: str, event: str, tmp_path: Path) -> None:
    out = render(harness, "late result", state_dir=tmp_path, kind="prompt")
    assert json.loads(out)["hookSpecificOutput"]["hookEventName"] == event


def test_post_tool_kind_for_claude(tmp_path: Path) -> None:
    out = render("claude", "nested AGENTS.md", state_dir=tmp_path, kind="post-tool")
    assert json.loads(out)["hookSpecificOutput"]["hookEventName"] == "PostToolUse"


def test_grok_is_plain_text_nudge_tier(tmp_path: Path) -> None:
    assert ADAPTERS["grok"].tier == "nudge"
    assert render("grok", "run it", state_dir=tmp_path, kind="nudge") == b"run it\n"


@pytest.mark.parametrize("harness", [*ADAPTERS, "unknown-harness"])
@pytest.mark.parametrize("text", ["{not json", "[1, 2", '  {"a": 1}', "plain", "é\u2063 \ud800 x"])
def test_never_prints_json_lookalike_that_does_not_parse(harness: str, text: str, tmp_path: Path) -> None:
    out = render(harness, text, state_dir=tmp_path).decode("utf-8")  # always valid UTF-8
    if out.lstrip()[:1] in ("{", "["):
        json.loads(out)  # looks like JSON, so it must be JSON
    else:
        assert ADAPTERS.get(harness) is None or ADAPTERS[harness].envelope == "plain"


@pytest.mark.parametrize("harness", ["claude", "cursor", "grok"])
def test_lone_surrogates_become_the_replacement_character(harness: str, tmp_path: Path) -> None:
    """A file name that is not UTF-8 (decoded with surrogateescape) reaches the model as
    U+FFFD, as the docstring says and as invalid UTF-8 in stage output does (it was `?`, a
    real character); a surrogate pair becomes the character it encodes."""
    data = render(harness, "file a\udcffb.md \ud83d\ude00\n", state_dir=tmp_path, kind="digest")
    text = data.decode("utf-8")
    if harness != "grok":
        doc = json.loads(text)
        text = doc.get("additional_context") or doc["hookSpecificOutput"]["additionalContext"]
    assert text == "file a\ufffdb.md \U0001f600\n"


def test_the_bridge_document_replaces_lone_surrogates_alike() -> None:
    from supervisor.bridges._protocol import BridgeResult

    doc = json.loads(BridgeResult("ready", text="a\udcffb").to_json())
    assert doc["text"] == "a\ufffdb"


@pytest.mark.parametrize("harness", list(ADAPTERS))
def test_blank_text_prints_nothing(harness: str, tmp_path: Path) -> None:
    assert render(harness, "", state_dir=tmp_path) == b""
    assert render(harness, " \n\n", state_dir=tmp_path) == b""


def test_unknown_kind_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="unknown output kind"):
        render("claude", "x", state_dir=tmp_path, kind="bogus")


def test_inline_caps_and_config_override() -> None:
    assert inline_cap("claude") == 9_000
    assert inline_cap("claude", {"claude": 5_000}) == 5_000
    assert inline_cap("codex", {"claude": 5_000}) == ADAPTERS["codex"].inline_cap
    assert inline_cap("nope") > 0


def test_timeout_units() -> None:
    assert ADAPTERS["gemini"].timeout_value(180) == 180_000
    assert ADAPTERS["qwen"].timeout_value(180) == 180_000
    assert ADAPTERS["claude"].timeout_value(180) == 180
    assert ADAPTERS["gemini"].timeout_seconds(30_000) == 30.0


def test_fit_inline_under_cap_is_unchanged_and_writes_nothing(tmp_path: Path) -> None:
    text = fit_inline([("a", "## A\none\n"), ("b", "## B\ntwo\n")], 9_000, tmp_path, notices="NOTE\n")
    assert text == "NOTE\n## A\none\n## B\ntwo\n"
    assert not (tmp_path / "digests").exists()


def test_fit_inline_over_cap_keeps_notices_first_cuts_stages_and_saves_everything(tmp_path: Path) -> None:
    parts = [("small", "## Small\nSMALL-MARK\n"), ("big", "## Big\n" + "B" * 12_000 + "\nBIG-END\n"),
             ("tail", "## Tail\nTAIL-MARK\n")]
    text = fit_inline(parts, 9_000, tmp_path, notices="STARTUP TRUNCATED banner\n")
    assert len(text) <= 9_000
    saved = list((tmp_path / "digests").glob("digest-*.txt"))
    assert len(saved) == 1
    whole = saved[0].read_text("utf-8")
    assert "BIG-END" in whole and "SMALL-MARK" in whole and whole.startswith("STARTUP TRUNCATED")
    assert text.index(str(saved[0])) < text.index("STARTUP TRUNCATED") < text.index("SMALL-MARK")
    assert "BIG-END" not in text
    cut = [line for line in text.splitlines() if "stage 'big'" in line]
    assert len(cut) == 1 and f"{len(parts[1][1]):,} characters" in cut[0] and str(saved[0]) in cut[0]
    assert text.index("SMALL-MARK") < text.index("stage 'big'") < text.index("TAIL-MARK")


def test_fit_inline_many_stages_collapse_to_one_line(tmp_path: Path) -> None:
    parts = [(f"s{i}", "x" * 200) for i in range(100)]
    text = fit_inline(parts, 1_000, tmp_path)
    assert len(text) <= 1_000
    assert "digests/digest-" in text


def test_fit_inline_huge_notices_are_cut_with_a_pointer(tmp_path: Path) -> None:
    text = fit_inline([("a", "A" * 100)], 2_000, tmp_path, notices="N" * 5_000)
    assert len(text) <= 2_000
    assert "notices cut: read" in text
    assert text.index("N" * 10) < text.index("notices cut")


def test_fit_inline_unwritable_state_dir_still_says_where_to_look(tmp_path: Path) -> None:
    blocker = tmp_path / "state"
    blocker.write_text("a file, not a folder")
    text = fit_inline([("a", "A" * 3_000), ("b", "B" * 3_000)], 4_000, blocker)
    assert len(text) <= 4_000
    assert "could not be saved" in text and "supervise digest" in text


def test_render_over_cap_splits_at_stage_headings_and_moves_the_banner_first(tmp_path: Path) -> None:
    digest = ("## One\nONE-MARK\n" + "## Two\n" + "t" * 20_000 + "\n"
              + "=" * 40 + "\nSTARTUP TRUNCATED: budget 3s; stage 'three' did not finish\n")
    text = _context(render("claude", digest, state_dir=tmp_path))
    assert len(text) <= 9_000
    assert text.index("STARTUP TRUNCATED") < text.index("ONE-MARK") < text.index("stage 'Two'")
    saved = next((tmp_path / "digests").glob("digest-*.txt")).read_text("utf-8")
    assert "t" * 20_000 in saved and "ONE-MARK" in saved


def test_split_sections_without_headings_is_one_part() -> None:
    parts, notices = split_sections("just text\n")
    assert parts == [("digest", "just text\n")] and notices == ""


def test_same_digest_saved_twice_is_one_file(tmp_path: Path) -> None:
    parts = [("a", "A" * 5_000), ("b", "B" * 5_000)]
    first = fit_inline(parts, 9_000, tmp_path)
    assert fit_inline(parts, 9_000, tmp_path) == first
    assert len(list((tmp_path / "digests").iterdir())) == 1


@pytest.mark.parametrize("plant", ["link", "fifo", "hardlink"])
def test_the_spilled_digest_is_written_fresh_through_no_link(tmp_path: Path, plant: str) -> None:
    """Issue 20: the file the model is told to read is written fresh, through no link, before
    it is named: a planted link, FIFO or hard link at its (predictable, content-addressed) name
    is replaced, never written through nor read back."""
    import hashlib
    import os

    parts = [("a", "A" * 5_000), ("b", "B" * 5_000)]
    full = "".join(text + "\n" for _, text in parts)  # each part ends its line
    name = f"digest-{hashlib.sha256(full.encode()).hexdigest()[:12]}.txt"
    folder = tmp_path / "state" / "digests"
    folder.mkdir(parents=True)
    victim = tmp_path / "victim.txt"
    victim.write_text("the user's own file\n")
    if plant == "link":
        (folder / name).symlink_to(victim)
    elif plant == "fifo":
        os.mkfifo(folder / name)
    else:
        os.link(victim, folder / name)
    text = fit_inline(parts, 9_000, tmp_path / "state")
    assert str(folder / name) in text
    assert not (folder / name).is_symlink() and (folder / name).is_file()
    assert (folder / name).read_text() == full
    assert victim.read_text() == "the user's own file\n"


def test_is_foreign() -> None:
    assert is_foreign("claude", {}, {"GROK_HOOK_EVENT": "SessionStart"})
    assert is_foreign("claude", {"cursor_version": "1.7"}, {})
    assert not is_foreign("cursor", {"cursor_version": "1.7"}, {})
    assert not is_foreign("claude", {"source": "startup"}, {})


# -- recorded payload shapes, through the real hook process ---------------------------------
CURSOR_PAYLOAD = {  # brief: harnesses.md section 3 (DOC + public CLI spike): no source, no cwd
    "conversation_id": "c-1", "generation_id": "g-1", "model": "gpt-5", "hook_event_name": "sessionStart",
    "cursor_version": "1.7.2", "workspace_roots": [], "user_email": "u@example.invalid",
    "transcript_path": None, "session_id": "c-1", "is_background_agent": False, "composer_mode": "agent",
}
QWEN_PAYLOAD = {  # brief: harnesses.md section 7 (DOC): Claude-shaped plus permission_mode, model
    "session_id": "q-1", "transcript_path": "/tmp/q.jsonl", "cwd": "", "hook_event_name": "SessionStart",
    "source": "startup", "permission_mode": "default", "model": "qwen3-coder",
}


@pytest.fixture
def marked_repo(git_repo: Path) -> Path:
    (git_repo / "supervise.toml").write_text(
        'budget = 20\n[[stages]]\nname = "mark"\nrun = ["sh", "-c", "echo MARK-$SUPERVISE_HARNESS-$SUPERVISE_SOURCE"]\n')
    return git_repo


def test_cursor_payload_gets_additional_context_json(marked_repo: Path) -> None:
    payload = {**CURSOR_PAYLOAD, "workspace_roots": [str(marked_repo)]}
    proc = run_cli("hook", "cursor", "--source", "startup", cwd=marked_repo,
                   input=json.dumps(payload).encode(), env={"CURSOR_PROJECT_DIR": str(marked_repo)})
    assert proc.returncode == 0, proc.stderr
    obj = json.loads(proc.stdout)
    assert list(obj) == ["additional_context"]
    assert "MARK-cursor-startup" in obj["additional_context"]
    assert proc.stdout.count(b"\n") == 1  # the JSON alone on stdout


def test_qwen_payload_gets_hook_specific_json(marked_repo: Path) -> None:
    payload = {**QWEN_PAYLOAD, "cwd": str(marked_repo)}
    proc = run_cli("hook", "qwen", cwd=marked_repo, input=json.dumps(payload).encode(),
                   env={"QWEN_PROJECT_DIR": str(marked_repo)})
    assert proc.returncode == 0, proc.stderr
    obj = json.loads(proc.stdout)
    assert obj["hookSpecificOutput"]["hookEventName"] == "SessionStart"
    assert "MARK-qwen-startup" in obj["hookSpecificOutput"]["additionalContext"]
    assert proc.stdout.count(b"\n") == 1


def test_qwen_prompt_hook_with_nothing_pending_prints_nothing(marked_repo: Path) -> None:
    payload = {**QWEN_PAYLOAD, "hook_event_name": "UserPromptSubmit", "prompt": "hi", "cwd": str(marked_repo)}
    proc = run_cli("hook", "qwen", "--event", "prompt", cwd=marked_repo, input=json.dumps(payload).encode())
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == b""


def test_cursor_hook_with_no_payload_still_exits_zero(marked_repo: Path) -> None:
    proc = run_cli("hook", "cursor", "--source", "startup", cwd=marked_repo, input=b"",
                   env={k: v for k, v in os.environ.items() if k != "CURSOR_PROJECT_DIR"})
    assert proc.returncode == 0
    assert "MARK-cursor-startup" in json.loads(proc.stdout)["additional_context"]


def test_render_without_stage_headings_keeps_a_prefix_and_names_the_rest(tmp_path: Path) -> None:
    digest = "FIRST-MARK\n" + ("z" * 99 + "\n") * 300 + "LAST-MARK\n"
    text = _context(render("claude", digest, state_dir=tmp_path))
    assert len(text) <= 9_000 and "FIRST-MARK" in text and "LAST-MARK" not in text
    rest = [line for line in text.splitlines() if "the rest of the digest" in line]
    assert len(rest) == 1
    saved = next((tmp_path / "digests").glob("digest-*.txt"))
    assert str(saved) in rest[0] and saved.read_text("utf-8") == digest


def test_config_inline_cap_is_honoured(tmp_path: Path) -> None:
    """`inline_cap = {claude = N}` in supervise.toml caps the inline text of the hook."""
    import json as _json
    import subprocess as _sp
    import sys as _sys

    (tmp_path / "supervise.toml").write_text(
        "[inline_cap]\nclaude = 2000\n[[stages]]\nname = \"big\"\n"
        "run = [\"python3\", \"-c\", \"print('z' * 6000)\"]\n")
    payload = _json.dumps({"session_id": "s", "cwd": str(tmp_path), "source": "startup",
                           "hook_event_name": "SessionStart"}).encode()
    proc = _sp.run([_sys.executable, "-m", "supervisor", "hook", "claude"], input=payload,
                   capture_output=True, cwd=tmp_path, timeout=60)
    assert proc.returncode == 0
    text = _json.loads(proc.stdout)["hookSpecificOutput"]["additionalContext"]
    assert len(text) <= 2000 and "2,000-character inline limit" in text
    saved = next((tmp_path / ".supervise" / "digests").glob("digest-*.txt"))
    assert "z" * 6000 in saved.read_text() and str(saved) in text


def test_over_cap_digest_is_cut_at_stage_boundaries_not_headings(tmp_path: Path) -> None:
    """A stage without a `## ` heading after a large stage is kept (or named), never merged
    into the large stage and lost (new-user report)."""
    import json as _json
    import subprocess as _sp
    import sys as _sys

    (tmp_path / "supervise.toml").write_text(
        '[[stages]]\nname = "big"\nrun = ["python3", "-c", "print(\'## Big\'); print(\'x\' * 20000)"]\n'
        '[[stages]]\nname = "small"\nrun = ["echo", "small-after"]\n')
    payload = _json.dumps({"session_id": "s", "cwd": str(tmp_path), "source": "startup"}).encode()
    proc = _sp.run([_sys.executable, "-m", "supervisor", "hook", "claude"], input=payload,
                   capture_output=True, cwd=tmp_path, timeout=60)
    text = _json.loads(proc.stdout)["hookSpecificOutput"]["additionalContext"]
    assert len(text) <= 9000
    assert "small-after" in text
    assert "stage 'big'" in text and "x" * 9000 not in text


@pytest.mark.parametrize("parts", [[(f"s{i}", "x" * 200) for i in range(100)],
                                   [("digest", "y" * 5_000)]])
def test_inline_cut_never_cuts_the_pointer_to_the_saved_digest(tmp_path: Path,
                                                               parts: list[tuple[str, str]]) -> None:
    """Even when the state dir path is long and the cap small, the line naming the saved file
    is printed whole (a path cut in half is a pointer to nowhere)."""
    from supervisor.adapters._inline import fit_prefix

    deep = tmp_path.joinpath(*(c * 200 for c in "defgh"))  # a state dir path over the cap
    if parts[0][0] == "digest":
        text = fit_prefix(parts[0][1], 1_000, deep, notices="NOTE\n")
    else:
        text = fit_inline(parts, 1_000, deep, notices="NOTE\n")
    saved = next((deep / "digests").glob("digest-*.txt"))
    assert str(saved) in text
