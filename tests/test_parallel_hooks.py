"""Per-event hooks fired together deliver once (issue 22, item 6): Claude runs several
``Read`` tools of one turn in parallel and fires ``PostToolUse`` for each at once; several
prompt hooks of one session can overlap too. Each hook here is a real ``supervise hook``
process; all of them are started and waiting on stdin before any gets its payload, so
they race for real.

The old code counted a nested file or a refreshed instruction file as delivered only once
the envelope went out (issue 11), after the ledger's lock was released: a hook that took the
lock in that window saw "not delivered yet" and injected the same text again."""

from __future__ import annotations

import fcntl
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from helpers import supervise_cmd

CONFIG = """\
budget = 30
[[stages]]
name = "instructions"
builtin = "instructions"
"""


def _env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if k != "SUPERVISE_STATE_DIR"}


def _small_pipe() -> tuple[int, int]:
    """A pipe that holds one page: a hook's envelope bigger than that waits for its reader,
    as behind a harness that reads its hooks' output one after the other."""
    read, write = os.pipe()
    fcntl.fcntl(read, fcntl.F_SETPIPE_SZ, 4096)
    return read, write


def _race(project: Path, argv: list[str], payloads: list[bytes]) -> list[str]:
    """Start one process per payload, then hand every payload over at once; read their
    outputs one after the other; the contexts."""
    procs = []
    for _ in payloads:
        read, write = _small_pipe()
        procs.append(subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=write,
                                      stderr=subprocess.PIPE, cwd=project, env=_env()))
        os.close(write)
        procs[-1].stdout = os.fdopen(read, "rb")  # type: ignore[misc]
    try:
        for proc, data in zip(procs, payloads):
            assert proc.stdin is not None
            proc.stdin.write(data)
        for proc in procs:
            assert proc.stdin is not None
            proc.stdin.close()
        outs = []
        for proc in procs:
            assert proc.stdout is not None and proc.stderr is not None
            out, err = proc.stdout.read(), proc.stderr.read()
            assert proc.wait(timeout=60) == 0, err
            outs.append(out)
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
            for stream in (proc.stdout, proc.stderr):
                if stream is not None:
                    stream.close()
    return [str(json.loads(o)["hookSpecificOutput"]["additionalContext"]) if o.strip() else ""
            for o in outs]


@pytest.fixture
def project(git_repo: Path) -> Path:
    (git_repo / "supervise.toml").write_text(CONFIG)
    (git_repo / "AGENTS.md").write_text("root rule\n")
    sub = git_repo / "pkg"
    sub.mkdir()
    # bigger than the pipe (_small_pipe): its envelope waits for the reader
    (sub / "AGENTS.md").write_text("NESTED-RULE: tabs only\n" + "indent with tabs\n" * 500)
    for i in range(8):
        (sub / f"f{i}.txt").write_text(f"{i}\n")
    old = time.time() - 60
    for path in (git_repo / "AGENTS.md", sub / "AGENTS.md"):
        os.utime(path, (old, old))
    return git_repo


def _start(project: Path, sid: str) -> None:
    run = subprocess.run(supervise_cmd("hook", "claude"), cwd=project, env=_env(), timeout=60,
                         capture_output=True,
                         input=json.dumps({"hook_event_name": "SessionStart", "source": "startup",
                                           "session_id": sid, "cwd": str(project)}).encode())
    assert run.returncode == 0, run.stderr


def test_parallel_post_tool_hooks_inject_a_nested_file_once(project: Path) -> None:
    """Eight parallel reads of eight files below ``pkg/``: ``pkg/AGENTS.md`` once."""
    payloads = [json.dumps({"hook_event_name": "PostToolUse", "tool_name": "Read",
                            "tool_input": {"file_path": str(project / "pkg" / f"f{i}.txt")},
                            "session_id": "par-1", "cwd": str(project)}).encode()
                for i in range(8)]
    texts = _race(project, supervise_cmd("hook", "claude", "--event", "post-tool"), payloads)
    assert sum(t.count("NESTED-RULE") for t in texts) == 1, texts
    # and it stays delivered: a later read adds nothing
    assert _race(project, supervise_cmd("hook", "claude", "--event", "post-tool"),
                 payloads[:1]) == [""]


def test_parallel_prompt_hooks_refresh_a_changed_file_once(project: Path) -> None:
    """The instruction-change note has the same race: six prompt hooks of one session."""
    _start(project, "par-2")
    (project / "AGENTS.md").write_text("root rule\nRACED-RULE\n" + "keep it short\n" * 500)
    payload = json.dumps({"hook_event_name": "UserPromptSubmit", "prompt": "go",
                          "session_id": "par-2", "cwd": str(project)}).encode()
    texts = _race(project, supervise_cmd("hook", "claude", "--event", "prompt"), [payload] * 6)
    assert sum(t.count("RACED-RULE") for t in texts) == 1, texts
    assert _race(project, supervise_cmd("hook", "claude", "--event", "prompt"), [payload]) == [""]


def test_a_killed_holders_mark_is_void(project: Path) -> None:
    """A hook killed between its pick and its envelope leaves an in-flight mark: the next
    read must inject the file all the same (nothing lost), since the mark's process is gone."""
    script = f"""
import os, sys
sys.path.insert(0, {str(Path(__file__).resolve().parent.parent)!r})
from supervisor.config._context import SessionContext
from supervisor.session._nested import handle_post_tool
from supervisor.state._delivery import open_delivery
ctx = SessionContext.for_project({str(project)!r}, harness="claude", session_id="par-3")
payload = {{"tool_name": "Read", "tool_input": {{"file_path": {str(project / "pkg" / "f0.txt")!r}}},
           "session_id": "par-3", "cwd": {str(project)!r}}}
from supervisor._record import replace
with open_delivery(ctx.state_dir) as delivery:  # the delivery is passed, never ambient
    assert "NESTED-RULE" in handle_post_tool(payload, replace(ctx, delivery=delivery))
    os.kill(os.getpid(), 9)
"""
    killed = subprocess.run([sys.executable, "-c", script], cwd=project, env=_env(), timeout=60,
                            capture_output=True)
    assert killed.returncode == -9, killed.stderr
    payload = json.dumps({"hook_event_name": "PostToolUse", "tool_name": "Read",
                          "tool_input": {"file_path": str(project / "pkg" / "f1.txt")},
                          "session_id": "par-3", "cwd": str(project)}).encode()
    texts = _race(project, supervise_cmd("hook", "claude", "--event", "post-tool"), [payload])
    assert texts[0].count("NESTED-RULE") == 1
