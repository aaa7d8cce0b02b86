"""Context fidelity across processes (issue 12, items 6 and 7): compaction re-emits by session,
not by process; a resume whose transcript already holds the digest (or the nudge) adds nothing.

Every hook runs as the real CLI below a real fake-harness process named ``claude`` or
``codex``; a "new process of the same session" is a second fake harness, the first one
closed (as ``claude -p --resume`` and ``codex exec resume`` do). Transcripts are written in
the formats the pinned CLIs wrote in a trial (see ``supervisor/session/_transcript.py``).
"""

from __future__ import annotations

import json
import os
import subprocess
import time
from pathlib import Path

import pytest

from fake_harness import FakeHarness, Harnesses, HookRun
from supervisor.session._nudge import NUDGE_TEXT
from supervisor.session import _transcript

CONFIG = """\
budget = 30
grace = 0.2
[[stages]]
name = "alpha"
run = ["sh", "-c", "echo ALPHA mode=$SUPERVISE_MODE source=[$SUPERVISE_SOURCE]"]
reemit = true
[[stages]]
name = "fleet"
run = ["sh", "-c", "echo FLEET-EXCLUSIVE >> fleet.log; echo FLEET-EXCLUSIVE"]
exclusive = true
[[stages]]
name = "context"
run = ["sh", "-c", "if [ -f slow ]; then sleep 30; fi; echo CONTEXT-FULL-ONLY"]
"""



@pytest.fixture
def project(git_repo: Path) -> Path:
    (git_repo / "supervise.toml").write_text(CONFIG)
    return git_repo


def hook(h: FakeHarness, project: Path, source: str, *args: str, sid: str = "s1",
         transcript: Path | None = None) -> HookRun:
    data: dict[str, object] = {"session_id": sid, "cwd": str(project),
                               "hook_event_name": "SessionStart", "source": source}
    if transcript is not None:
        data["transcript_path"] = str(transcript)
    run = h.run(["hook", *args], cwd=project, stdin=json.dumps(data).encode())
    assert run.returncode == 0, run.stderr
    return run


def context_of(run: HookRun) -> str:
    """The additionalContext a Claude/Codex registration printed."""
    return json.loads(run.stdout)["hookSpecificOutput"]["additionalContext"]


def fleet_runs(project: Path) -> int:
    log = project / "fleet.log"
    return log.read_text().count("FLEET-EXCLUSIVE") if log.exists() else 0


def lock(project: Path) -> dict[str, object]:
    return json.loads((project / ".supervise" / "lock.json").read_text())


def is_reemit(text: str) -> bool:
    return (text.startswith("SESSION START (CONTEXT RE-EMIT") and "ALPHA mode=reemit" in text
            and "FLEET-EXCLUSIVE" not in text and "CONTEXT-FULL-ONLY" not in text)


# -- item 7: compaction re-emits by session ---------------------------------------------------------

@pytest.mark.parametrize("name", ["claude", "codex"])
def test_compact_in_a_new_process_of_a_completed_session_reemits(
        name: str, project: Path, harnesses: Harnesses) -> None:
    first = harnesses(name)
    assert "CONTEXT-FULL-ONLY" in context_of(hook(first, project, "startup", name))
    before = lock(project)
    first.close()  # `claude -p --resume` / `codex exec resume`: the old process is gone
    second = harnesses(name)
    text = context_of(hook(second, project, "compact", name))
    assert is_reemit(text), text
    assert fleet_runs(project) == 1, "the exclusive stage re-ran at compact"
    assert lock(project) == before, "a re-emit neither takes nor renews the lock"


def test_compact_of_another_session_in_a_new_process_runs_full(project: Path,
                                                                harnesses: Harnesses) -> None:
    first = harnesses()
    hook(first, project, "startup", sid="A")
    first.close()
    second = harnesses()
    run = hook(second, project, "compact", sid="B")
    assert "CONTEXT-FULL-ONLY" in run.text and "RE-EMIT" not in run.text
    assert lock(project)["session_id"] == "B"


def test_compact_needs_the_same_harness_for_the_same_session_id(project: Path,
                                                                 harnesses: Harnesses) -> None:
    first = harnesses("claude")
    hook(first, project, "startup", "claude", sid="same")
    first.close()
    other = harnesses("codex")
    assert "CONTEXT-FULL-ONLY" in context_of(hook(other, project, "compact", "codex", sid="same"))


def test_compact_without_a_session_id_is_never_proven_by_session(project: Path,
                                                                  harnesses: Harnesses) -> None:
    first = harnesses()
    hook(first, project, "startup", sid="")
    first.close()
    second = harnesses()
    assert "CONTEXT-FULL-ONLY" in hook(second, project, "compact", sid="").text


def test_an_incomplete_start_is_not_remembered(project: Path, harnesses: Harnesses) -> None:
    (project / "supervise.toml").write_text(CONFIG.replace("budget = 30", "budget = 1"))
    (project / "slow").write_text("")
    first = harnesses()
    assert "SESSION_START_COMPLETION: not recorded" in hook(first, project, "startup").text
    first.close()
    (project / "slow").unlink()
    second = harnesses()
    run = hook(second, project, "compact")
    assert "CONTEXT-FULL-ONLY" in run.text and "RE-EMIT" not in run.text


def test_compact_while_a_live_foreign_session_holds_the_lock_stays_read_only(
        project: Path, harnesses: Harnesses) -> None:
    a = harnesses()
    hook(a, project, "startup", sid="A")
    a.close()
    b = harnesses()
    hook(b, project, "startup", sid="B")
    assert fleet_runs(project) == 2
    a2 = harnesses()  # A resumed in a new process while B holds the helm
    run = hook(a2, project, "compact", sid="A")
    assert run.text.startswith("READ-ONLY SESSION"), run.text
    assert fleet_runs(project) == 2 and lock(project)["session_id"] == "B"


def test_compact_after_the_foreign_owner_died_reemits_for_a_started_session(
        project: Path, harnesses: Harnesses) -> None:
    a = harnesses()
    hook(a, project, "startup", sid="A")
    a.close()
    b = harnesses()
    hook(b, project, "startup", sid="B")
    b.close()
    a2 = harnesses()
    assert is_reemit(hook(a2, project, "compact", sid="A").text)
    assert fleet_runs(project) == 2


def test_a_later_incomplete_start_of_the_same_session_wins(project: Path, harnesses: Harnesses) -> None:
    first = harnesses()
    hook(first, project, "startup")
    (project / "supervise.toml").write_text(CONFIG.replace("budget = 30", "budget = 1"))
    (project / "slow").write_text("")
    # "new", not a second "startup": that would be an idempotent repeat of the first start
    assert "SESSION_START_COMPLETION: not recorded" in hook(first, project, "new").text
    first.close()
    (project / "slow").unlink()
    # The first, complete start's config again: the compact must be a full start because of
    # the later incomplete one, not because a 1 s budget cut it (its stages get 0.55 s: on a
    # loaded host `context` may not have printed by then) or because the config changed;
    # a re-emit of the first start is what a wrong answer would look like.
    (project / "supervise.toml").write_text(CONFIG)
    second = harnesses()
    run = hook(second, project, "compact")
    assert "CONTEXT-FULL-ONLY" in run.text and "RE-EMIT" not in run.text


@pytest.mark.parametrize("damage", ["corrupt", "symlink", "huge"])
def test_a_damaged_ledger_means_a_full_start(damage: str, project: Path, harnesses: Harnesses,
                                             tmp_path: Path) -> None:
    first = harnesses()
    hook(first, project, "startup")
    first.close()
    ledger = project / ".supervise" / "sessions.json"
    ledger.unlink()
    if damage == "corrupt":
        ledger.write_text("{not json")
    elif damage == "symlink":
        target = tmp_path / "elsewhere.json"
        target.write_text(json.dumps({"starts": [{"harness": "claude", "session_id": "s1"}]}))
        ledger.symlink_to(target)
    else:
        ledger.write_text(json.dumps({"starts": [{"harness": "claude", "session_id": "s1"}],
                                      "pad": "x" * 400_000}))
    second = harnesses()
    run = hook(second, project, "compact")
    assert run.returncode == 0 and "CONTEXT-FULL-ONLY" in run.text


def test_the_ledger_is_bounded(project: Path, harnesses: Harnesses) -> None:
    from supervisor.session import _ledger

    state = project / ".supervise"
    state.mkdir()
    for i in range(_ledger.MAX_STARTS + 5):
        _ledger.record_start(state, "claude", f"s{i}", "n")
    for i in range(_ledger.MAX_DELIVERED + 5):
        _ledger.record_delivery(state, f"text {i}", "digest")
    doc = json.loads((state / "sessions.json").read_text())
    assert len(doc["starts"]) == _ledger.MAX_STARTS
    assert len(doc["delivered"]) == _ledger.MAX_DELIVERED
    assert _ledger.started(state, "claude", "s0") is None
    assert _ledger.started(state, "claude", f"s{_ledger.MAX_STARTS + 4}") == "n"


# -- item 6: no duplicates on resume -----------------------------------------------------------------

def claude_context(text: str) -> dict[str, object]:
    return {"type": "attachment", "attachment": {"type": "hook_additional_context", "content": [text],
                                                 "hookName": "SessionStart", "hookEvent": "SessionStart"}}


def claude_user(text: str) -> dict[str, object]:
    return {"type": "user", "message": {"role": "user", "content": text}}


CLAUDE_BOUNDARY = {"type": "system", "subtype": "compact_boundary", "content": "Conversation compacted"}


def codex_context(text: str) -> dict[str, object]:
    return {"type": "response_item", "payload": {
        "type": "message", "role": "developer", "content": [{"type": "input_text", "text": text}],
        "internal_chat_message_metadata_passthrough": {"content_item_kinds": ["hooks.additional_context"]}}}


def codex_user(text: str) -> dict[str, object]:
    return {"type": "response_item", "payload": {
        "type": "message", "role": "user", "content": [{"type": "input_text", "text": text}],
        "internal_chat_message_metadata_passthrough": {"content_item_kinds": ["user.text"]}}}


CODEX_BOUNDARY = {"type": "compacted", "payload": {"message": "summary"}}
FORMATS = {"claude": (claude_context, claude_user, CLAUDE_BOUNDARY),
           "codex": (codex_context, codex_user, CODEX_BOUNDARY)}


def write_transcript(path: Path, entries: list[dict[str, object]]) -> Path:
    path.write_text("".join(json.dumps(e) + "\n" for e in entries) + "not json at all\n")
    return path


def started_session(project: Path, harnesses: Harnesses, name: str) -> str:
    """A completed start in a harness process that is gone; returns the context it printed."""
    first = harnesses(name)
    text = context_of(hook(first, project, "startup", name))
    first.close()
    return text


@pytest.mark.parametrize("name", ["claude", "codex"])
def test_resume_with_the_digest_in_the_transcript_is_silent(name: str, project: Path,
                                                            harnesses: Harnesses, tmp_path: Path) -> None:
    ctx, user, _ = FORMATS[name]
    digest = started_session(project, harnesses, name)
    transcript = write_transcript(tmp_path / "t.jsonl", [ctx(digest), user("turn 1")])
    run = hook(harnesses(name), project, "resume", name, transcript=transcript)
    assert run.stdout == b"", run.text


@pytest.mark.parametrize("name", ["claude", "codex"])
def test_resume_with_the_reemit_after_the_last_compaction_is_silent(
        name: str, project: Path, harnesses: Harnesses, tmp_path: Path) -> None:
    ctx, user, boundary = FORMATS[name]
    digest = started_session(project, harnesses, name)
    reemit = context_of(hook(harnesses(name), project, "compact", name))
    assert is_reemit(reemit)
    transcript = write_transcript(tmp_path / "t.jsonl", [ctx(digest), user("1"), boundary,
                                                         user("summary"), ctx(reemit), user("2")])
    assert hook(harnesses(name), project, "resume", name, transcript=transcript).stdout == b""


@pytest.mark.parametrize("name", ["claude", "codex"])
def test_resume_with_the_digest_only_before_the_last_compaction_nudges(
        name: str, project: Path, harnesses: Harnesses, tmp_path: Path) -> None:
    ctx, user, boundary = FORMATS[name]
    digest = started_session(project, harnesses, name)
    transcript = write_transcript(tmp_path / "t.jsonl", [ctx(digest), user("1"), boundary, user("2")])
    run = hook(harnesses(name), project, "resume", name, transcript=transcript)
    assert context_of(run) == NUDGE_TEXT


@pytest.mark.parametrize("name", ["claude", "codex"])
def test_nudges_never_accumulate(name: str, project: Path, harnesses: Harnesses, tmp_path: Path) -> None:
    ctx, user, _ = FORMATS[name]
    transcript = write_transcript(tmp_path / "t.jsonl", [user("1")])
    first = hook(harnesses(name), project, "resume", name, transcript=transcript)
    assert context_of(first) == NUDGE_TEXT
    write_transcript(transcript, [user("1"), ctx(context_of(first)), user("2")])
    assert hook(harnesses(name), project, "resume", name, transcript=transcript).stdout == b""


def test_a_foreign_session_start_text_is_not_our_digest(project: Path, harnesses: Harnesses,
                                                         tmp_path: Path) -> None:
    started_session(project, harnesses, "claude")
    transcript = write_transcript(tmp_path / "t.jsonl", [claude_context("another plugin's context"),
                                                         claude_user("1")])
    assert context_of(hook(harnesses(), project, "resume", "claude", transcript=transcript)) == NUDGE_TEXT


def test_another_projects_digest_is_not_ours(project: Path, harnesses: Harnesses, tmp_path: Path) -> None:
    other = tmp_path / "other"
    other.mkdir()
    (other / "supervise.toml").write_text(CONFIG.replace("ALPHA", "OTHER"))
    subprocess.run(["git", "init", "-q", str(other)], check=True, timeout=60)
    theirs = started_session(other, harnesses, "claude")
    transcript = write_transcript(tmp_path / "t.jsonl", [claude_context(theirs), claude_user("1")])
    assert context_of(hook(harnesses(), project, "resume", "claude", transcript=transcript)) == NUDGE_TEXT


def test_codex_compaction_as_the_last_entry_leaves_the_resume_to_the_compact_hook(
        project: Path, harnesses: Harnesses, tmp_path: Path) -> None:
    """Codex order (observed): compaction, then SessionStart(resume), then SessionStart(compact)
    in the same process; the resume adds nothing, the compact hook's re-emit follows."""
    digest = started_session(project, harnesses, "codex")
    transcript = write_transcript(tmp_path / "t.jsonl", [codex_context(digest), codex_user("1"),
                                                         CODEX_BOUNDARY])
    h = harnesses("codex")
    assert hook(h, project, "resume", "codex", transcript=transcript).stdout == b""
    assert is_reemit(context_of(hook(h, project, "compact", "codex")))


@pytest.mark.parametrize("kind", ["missing", "fifo", "directory", "binary"])
def test_an_unusable_transcript_means_the_nudge(kind: str, project: Path, harnesses: Harnesses,
                                                tmp_path: Path) -> None:
    started_session(project, harnesses, "claude")
    path = tmp_path / "t.jsonl"
    if kind == "fifo":
        os.mkfifo(path)  # nobody writes it: opening or reading it must not block the hook
    elif kind == "directory":
        path.mkdir()
    elif kind == "binary":
        path.write_bytes(b"\xff\x00" * 1000 + b"\n{\"type\": \"attachment\"\n")
    run = hook(harnesses(), project, "resume", "claude", transcript=path)
    assert context_of(run) == NUDGE_TEXT


def test_a_transcript_longer_than_the_scan_without_a_compaction_is_unknown(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_transcript, "MAX_SCAN", 4096)
    path = write_transcript(tmp_path / "t.jsonl", [claude_context("old digest")]
                            + [claude_user("x" * 100)] * 100 + [claude_context("recent")])
    assert _transcript.session_contexts(path, "claude") is None
    write_transcript(path, [claude_context("old")] + [claude_user("x" * 100)] * 100
                     + [CLAUDE_BOUNDARY, claude_context("recent")])
    view = _transcript.session_contexts(path, "claude")
    assert view is not None and view.contexts == ("recent",) and view.compacted


def test_unknown_transcript_formats_are_not_read(tmp_path: Path) -> None:
    path = write_transcript(tmp_path / "t.jsonl", [claude_context("x")])
    assert _transcript.session_contexts(path, "gemini") is None
    assert _transcript.session_contexts(None, "claude") is None


def test_the_ledger_keeps_fingerprints_not_text(project: Path, harnesses: Harnesses) -> None:
    started_session(project, harnesses, "claude")
    doc = json.loads((project / ".supervise" / "sessions.json").read_text())
    assert [e["kind"] for e in doc["delivered"]] == ["digest"]
    assert all(len(e["sha256"]) == 64 and e["at"] <= time.time() for e in doc["delivered"])
    assert "ALPHA" not in json.dumps(doc), "only fingerprints are kept, never the text"


@pytest.mark.parametrize("chunk", [7, 64, 1 << 20])
def test_the_backward_reader_joins_lines_across_chunks(chunk: int, tmp_path: Path,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """Read backwards in chunks: a line split by a chunk edge is whole again, the file's last
    line may lack its newline, and the first line of the file is read too."""
    monkeypatch.setattr(_transcript, "_CHUNK", chunk)
    path = tmp_path / "t.jsonl"
    path.write_text(json.dumps(claude_context("first é")) + "\n" + json.dumps(claude_user("u" * 300))
                    + "\n" + json.dumps(claude_context("last")))
    view = _transcript.session_contexts(path, "claude")
    assert view is not None and view.contexts == ("first é", "last") and not view.compacted


@pytest.mark.parametrize("name", ["gemini", "qwen"])
def test_a_resume_that_drops_the_context_gets_the_reemit(name: str, project: Path,
                                                         harnesses: Harnesses) -> None:
    """Gemini ``-r`` and Qwen Code ``-c`` (0.24.4) resend the earlier turns without their hook
    context (the harness table's ``resume_drops_context``): the resume is served as a re-emit
    of the digest, never the nudge. Qwen's resume got the nudge before (its row did not say
    so), and the resumed session had no digest at all."""
    started_session(project, harnesses, name)
    text = context_of(hook(harnesses(name), project, "resume", name))
    assert is_reemit(text), text
    assert NUDGE_TEXT not in text
