"""A per-event hook that exits at once without reading its payload, through the real CLIs.

The per-event shim (``supervisor/hook-fast.sh``) skips the drain of a long payload only for the
harnesses proved here (issue 13): Claude Code 2.1.197 (``UserPromptSubmit`` and
``PostToolUse``), Codex 0.171.0 and Gemini CLI 0.61.0 (their prompt hooks, the only per-event
hooks ``supervise install`` registers there). Each case registers two hooks on the event: one
prints an additional-context marker and exits 0 without reading stdin; the other saves the
payload, which proves it far larger than a pipe (64 KiB) or the socket pair the CLI writes
through (about 208 KiB here). The harness's write of the rest then fails with ``EPIPE``
(seen with ``strace``: Claude ``sendto`` on a socket, Gemini ``write`` on a socket, Codex
``write`` on a pipe); the case passes only when the session completes, the marker printed
before the early exit reaches the model, and no error is shown or sent (Claude's transcript
holds no hook error attachment, Codex's and Gemini's output names no failed hook).

Every harness's check is shown able to fail: the same hook exiting 1 after printing the
marker is reported by the same check (a hook the harness treats as failed).
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from conftest import RUN_TIMEOUT, FakeModel, Project, clean_env, harness_bin
from test_claude import claude_env

pytestmark = pytest.mark.e2e

FAR_LARGER = 200_000
"""Bytes a payload must exceed: three pipes, and near a socket pair's send buffer (208 KiB);
Claude's Read is capped at 256 KiB, so its payload is about 250 KB; a prompt is 1 MB."""
PROMPT = "y" * 1_000_000
"""A prompt of 1 MB: its prompt-hook payload is more than any pipe or socket buffer holds."""
ERROR_SIGNS = ("EPIPE", "Broken pipe", "broken pipe", "closed stdin", "failed to write hook stdin",
               "hook exited with code", "failed for event", "Hook system message")
"""Text that, in a CLI's output or a model request, would mean the early exit was noticed."""


def early(event: str, mark: str, status: int) -> str:
    """A hook command that prints ``mark`` as additional context and exits ``status`` at once,
    its stdin never read."""
    envelope = json.dumps({"hookSpecificOutput": {"hookEventName": event, "additionalContext": mark}},
                          separators=(",", ":"))
    return f"printf '%s\\n' '{envelope}'; exit {status}"


def hooks(events: dict[str, str], mark: str, status: int, saved: Path) -> dict[str, object]:
    """The hook registration: per event (name -> matcher or ""), the early hook and a hook
    that saves the payload as ``saved``-EVENT."""
    out: dict[str, object] = {}
    for event, matcher in events.items():
        group: dict[str, object] = {"hooks": [
            {"type": "command", "command": early(event, f"{mark}-{event}", status)},
            {"type": "command", "command": f"cat > '{saved}-{event}'"}]}
        if matcher:
            group["matcher"] = matcher
        out[event] = [group]
    return {"hooks": out}


def signs(*texts: str) -> list[str]:
    return [sign for sign in ERROR_SIGNS for text in texts if sign in text]


def run(argv: list[str], cwd: Path, env: dict[str, str], prompt: str) -> subprocess.CompletedProcess[str]:
    """One CLI invocation with ``prompt`` on its stdin."""
    return subprocess.run(argv, cwd=cwd, env=env, input=prompt, capture_output=True, text=True,
                          timeout=RUN_TIMEOUT)


def claude_problems(project: Project, fake: FakeModel, status: int) -> list[str]:
    """What went wrong in a Claude session whose UserPromptSubmit and PostToolUse hooks exit
    ``status`` without reading a 1 MB prompt payload and a 250 KB Read payload."""
    big = project.path / "big.txt"
    big.write_text(("x" * 99 + "\n") * 2500)  # 250,000 bytes: under Read's 256 KiB cap
    saved = project.path.parent / "payload"
    (project.path / ".claude").mkdir(exist_ok=True)
    (project.path / ".claude" / "settings.json").write_text(json.dumps(hooks(
        {"UserPromptSubmit": "", "PostToolUse": "Read"}, project.mark, status, saved)))
    proc = run([str(harness_bin("claude")), "-p", "--allowedTools", "Read", "--output-format",
                "stream-json", "--verbose"], project.path, claude_env(fake),
               f"FAKE_READ {big}\n{PROMPT}")
    problems = [f"exit status {proc.returncode}"] if proc.returncode else []
    lines = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
    result = [line for line in lines if line.get("type") == "result"]
    if not result or result[-1].get("subtype") != "success" or result[-1].get("is_error"):
        problems.append(f"no successful result: {result[-1:]!r}"[:500])
    for event, least in (("UserPromptSubmit", len(PROMPT)), ("PostToolUse", FAR_LARGER)):
        size = Path(f"{saved}-{event}").stat().st_size if Path(f"{saved}-{event}").exists() else 0
        assert size > least, f"the {event} payload ({size} bytes) is not larger than {least}"
        if not fake.seen(f"{project.mark}-{event}"):
            problems.append(f"the {event} hook's context never reached the model")
    sid = result[-1]["session_id"] if result else ""
    for transcript in Path(clean_env()["HOME"], ".claude", "projects").rglob(f"{sid}.jsonl"):
        for line in transcript.read_text("utf-8").splitlines():
            attachment = json.loads(line).get("attachment") or {}
            kind = str(attachment.get("type", ""))
            if kind.startswith("hook") and ("error" in kind or attachment.get("exitCode") not in (0, None)):
                problems.append(f"transcript: {kind} {str(attachment.get('stderr'))[:200]}")
    problems += signs(proc.stderr, *fake.bodies())
    return problems


def codex_problems(project: Project, fake: FakeModel, status: int, home: Path) -> list[str]:
    """What went wrong in a ``codex exec`` turn whose UserPromptSubmit hook exits ``status``
    without reading a 1 MB prompt payload."""
    saved = project.path.parent / "payload"
    home.mkdir(exist_ok=True)
    (home / "config.toml").write_text(
        'model = "fake-model"\nmodel_provider = "fake"\ncheck_for_update_on_startup = false\n\n'
        f'[model_providers.fake]\nname = "fake"\nbase_url = "{fake.url}/v1"\n'
        'wire_api = "responses"\nenv_key = "FAKE_API_KEY"\n\n'
        f'[projects."{project.path}"]\ntrust_level = "trusted"\n\n[analytics]\nenabled = false\n')
    (project.path / ".codex").mkdir(exist_ok=True)
    (project.path / ".codex" / "hooks.json").write_text(json.dumps(hooks(
        {"UserPromptSubmit": ""}, project.mark, status, saved)))
    proc = run([str(harness_bin("codex")), "exec", "--dangerously-bypass-hook-trust",
                "--skip-git-repo-check", "--json", "-"], project.path,
               clean_env(CODEX_HOME=str(home), FAKE_API_KEY="dummy"), PROMPT)
    problems = [f"exit status {proc.returncode}"] if proc.returncode else []
    events = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
    if not any(event.get("type") == "turn.completed" for event in events):
        problems.append("the turn never completed")
    size = Path(f"{saved}-UserPromptSubmit").stat().st_size
    assert size > len(PROMPT), f"the payload ({size} bytes) is not larger than the prompt"
    if not fake.seen(f"{project.mark}-UserPromptSubmit"):
        problems.append("the hook's context never reached the model")
    return problems + signs(proc.stdout, proc.stderr, *fake.bodies())


def gemini_problems(project: Project, fake: FakeModel, status: int) -> list[str]:
    """What went wrong in a ``gemini`` turn whose BeforeAgent hook exits ``status`` without
    reading a 1 MB prompt payload."""
    import os

    saved = project.path.parent / "payload"
    home = Path(os.environ["HOME"])  # isolated per test by the root conftest
    (home / ".gemini").mkdir(exist_ok=True)
    (home / ".gemini" / "settings.json").write_text(json.dumps({
        "security": {"auth": {"selectedType": "gemini-api-key"}, "folderTrust": {"enabled": False}},
        "privacy": {"usageStatisticsEnabled": False}, "telemetry": {"enabled": False},
        "general": {"disableAutoUpdate": True, "disableUpdateNag": True}}))
    (project.path / ".gemini").mkdir(exist_ok=True)
    (project.path / ".gemini" / "settings.json").write_text(json.dumps(hooks(
        {"BeforeAgent": ""}, project.mark, status, saved)))
    proc = run([str(harness_bin("gemini")), "-m", "fake-model", "-o", "json"], project.path,
               clean_env(GEMINI_API_KEY="dummy", GOOGLE_GEMINI_BASE_URL=fake.url), PROMPT)
    problems = [f"exit status {proc.returncode}"] if proc.returncode else []
    start = proc.stdout.find("{")
    reply = json.loads(proc.stdout[start:]) if start >= 0 else {}
    if "FAKE-REPLY" not in str(reply.get("response")):
        problems.append(f"no reply: {proc.stdout[-300:]!r}")
    size = Path(f"{saved}-BeforeAgent").stat().st_size
    assert size > len(PROMPT), f"the payload ({size} bytes) is not larger than the prompt"
    if not fake.seen(f"{project.mark}-BeforeAgent"):
        problems.append("the hook's context never reached the model")
    return problems + signs(proc.stderr, *fake.bodies())


@pytest.mark.parametrize("status", [0, 1], ids=["exits-0", "control-exits-1"])
def test_claude_tolerates_an_unread_payload(project: Project, fake_model: FakeModel, status: int) -> None:
    problems = claude_problems(project, fake_model, status)
    assert bool(problems) == bool(status), problems


@pytest.mark.parametrize("status", [0, 1], ids=["exits-0", "control-exits-1"])
def test_codex_tolerates_an_unread_payload(project: Project, fake_model: FakeModel, tmp_path: Path,
                                           status: int) -> None:
    problems = codex_problems(project, fake_model, status, tmp_path / "codex-home")
    assert bool(problems) == bool(status), problems


@pytest.mark.parametrize("status", [0, 1], ids=["exits-0", "control-exits-1"])
def test_gemini_tolerates_an_unread_payload(project: Project, fake_model: FakeModel, status: int) -> None:
    problems = gemini_problems(project, fake_model, status)
    assert bool(problems) == bool(status), problems


def test_claude_installed_shim_on_a_large_read_shows_no_error(project: Project, fake_model: FakeModel) -> None:
    """The registered shim answering "nothing to do" for a 250 KB Read (no instruction file on
    the way) leaves the payload unread: the session completes and no hook error is recorded."""
    harness_bin("claude")
    project.install("claude")
    big = project.path / "src" / "big.txt"  # FAKE_READ takes a path without spaces
    big.parent.mkdir()
    big.write_text(("x" * 99 + "\n") * 2500)
    proc = run([str(harness_bin("claude")), "-p", "--allowedTools", "Read", "--output-format", "json"],
               project.path, claude_env(fake_model), f"FAKE_READ {big}")
    assert proc.returncode == 0, proc.stderr[-2000:]
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert result.get("subtype") == "success" and not result.get("is_error"), result
    assert fake_model.seen("xxxxxxxxxx"), "the Read never reached the model"
    transcripts = list(Path(clean_env()["HOME"], ".claude", "projects").rglob(f"{result['session_id']}.jsonl"))
    assert transcripts
    kinds = [str((json.loads(line).get("attachment") or {}).get("type", ""))
             for line in transcripts[0].read_text("utf-8").splitlines()]
    assert "hook_success" in kinds and not [k for k in kinds if k.startswith("hook") and "error" in k], kinds
    assert not signs(proc.stderr, *fake_model.bodies())
