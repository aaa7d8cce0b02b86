"""A hook or bridge started with fd 1 closed (``supervise hook claude --event prompt >&-``)
delivers nothing, so it records nothing as delivered: a pending deferred result stays pending,
a session start records no completion, fingerprint or refresh baseline; one line on stderr;
exit 0. (Before, fd 1 was pointed at /dev/null and every write "succeeded".)"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

from helpers import configure_deferred, supervise_cmd, write_result


def _closed(argv: list[str], cwd: Path, stdin: bytes) -> subprocess.CompletedProcess[bytes]:
    """Run ``argv`` with fd 1 closed (``>&-``), stderr captured."""
    return subprocess.run(["sh", "-c", 'exec "$@" >&-', "sh", *argv], cwd=cwd, input=stdin,
                          stderr=subprocess.PIPE, timeout=60)


def _payload(project: Path, event: str, **extra: object) -> bytes:
    return json.dumps({"session_id": "s1", "cwd": str(project), "hook_event_name": event,
                       **extra}).encode()


def test_prompt_hook_with_stdout_closed_keeps_the_result_pending(git_repo: Path) -> None:
    configure_deferred(git_repo, "net")
    folder = git_repo / ".supervise" / "deferred" / "net"
    result = write_result(folder, "1-a", {"status": "ok", "seconds": 0.1, "output": "NET"})
    run = _closed(supervise_cmd("hook", "claude", "--event", "prompt"), git_repo,
                  _payload(git_repo, "UserPromptSubmit", prompt="hi"))
    assert run.returncode == 0
    assert result.exists() and not list(folder.glob("delivered-*")), list(folder.iterdir())
    lines = run.stderr.decode().splitlines()
    assert len([line for line in lines if "NOT delivered" in line]) == 1, lines


def test_session_start_with_stdout_closed_records_nothing(git_repo: Path) -> None:
    (git_repo / "supervise.toml").write_text(
        'budget = 30\n[[stages]]\nname = "alpha"\nrun = ["echo", "ALPHA"]\n')
    run = _closed(supervise_cmd("hook", "claude"), git_repo,
                  _payload(git_repo, "SessionStart", source="startup"))
    assert run.returncode == 0 and b"NOT delivered" in run.stderr, run.stderr
    state = git_repo / ".supervise"
    assert not (state / "complete.json").exists()
    assert not list((state / "refresh").glob("*.json")) if (state / "refresh").exists() else True


def test_bridge_with_stdout_closed_records_nothing(git_repo: Path) -> None:
    (git_repo / "supervise.toml").write_text(
        'budget = 30\n[[stages]]\nname = "alpha"\nrun = ["echo", "ALPHA"]\n')
    run = _closed(supervise_cmd("bridge", "--harness", "pi", "--source", "startup",
                                "--cwd", str(git_repo)), git_repo, b"")
    assert run.returncode == 0 and b"NOT delivered" in run.stderr, run.stderr
    assert not (git_repo / ".supervise" / "complete.json").exists()
