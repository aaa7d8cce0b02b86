"""Delivery is recorded only after delivery (issue 11, items 5 and 6).

Regression for: ``supervise hook claude >/dev/full`` wrote ``complete.json`` (the next compact
only re-emitted a digest nobody received); a prompt hook writing to ``/dev/full`` renamed a
pending deferred result to ``delivered-…`` (delivered zero times); a non-blocking stdout with a
slow reader got exactly 4,096 bytes of a 6 KB envelope. Invariant: the completion record, the
handoff count, the nested-instructions ledger and a deferred claim are committed only after the
envelope was written whole; a failed write leaves them as they were and says so on stderr.
"""

from __future__ import annotations

import fcntl
import json
import os
import signal
import subprocess
import sys
import termios
import time
from pathlib import Path

import pytest

from helpers import run_cli, supervise_cmd

BIG = "x" * 120

CONFIG = """\
budget = 30
grace = 0.2
[[stages]]
name = "alpha"
run = ["sh", "-c", "echo ALPHA; i=0; while [ $i -lt 50 ]; do echo {big}; i=$((i+1)); done"]
reemit = true
""".format(big=BIG)


@pytest.fixture
def project(git_repo: Path) -> Path:
    (git_repo / "supervise.toml").write_text(CONFIG)
    return git_repo


def _payload(project: Path, source: str = "startup", sid: str = "s1") -> bytes:
    return json.dumps({"session_id": sid, "cwd": str(project), "source": source,
                       "hook_event_name": "SessionStart"}).encode()


def _hook_to(stdout: object, project: Path, *args: str, stdin: bytes = b"",
             harness: str = "claude") -> subprocess.CompletedProcess[bytes]:
    """Run the hook with ``stdout`` as given (a file object or fd); stderr captured."""
    return subprocess.run(supervise_cmd("hook", harness, *args), cwd=project, input=stdin,
                          stdout=stdout, stderr=subprocess.PIPE, timeout=60)  # type: ignore[call-overload]


def _state(project: Path) -> Path:
    return project / ".supervise"


def _plant_result(project: Path, stage: str = "net", run: str = "1-abc",
                  output: str = "NET RESULT") -> Path:
    folder = _state(project) / "deferred" / stage
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"result-{run}.json"
    path.write_text(json.dumps({"name": stage, "title": stage, "run_id": run, "status": "ok",
                                "seconds": 0.1, "finished": time.time(), "output": output}))
    return path


# -- the completion record ---------------------------------------------------------------------

@pytest.mark.parametrize("harness", ["claude", "codex"])
def test_full_start_to_dev_full_records_no_completion(project: Path, harness: str) -> None:
    with open("/dev/full", "wb") as full:
        run = _hook_to(full, project, "--take-lock", stdin=_payload(project), harness=harness)
    assert run.returncode == 0
    assert b"NOT delivered" in run.stderr and b"ENOSPC" in run.stderr, run.stderr
    assert (_state(project) / "lock.json").exists()
    assert not (_state(project) / "complete.json").exists()
    # The next compact runs a full start, not a re-emit of what nobody received.
    again = run_cli("hook", harness, "--take-lock", cwd=project,
                    input=_payload(project, "compact"))
    assert "CONTEXT RE-EMIT" not in again.stdout.decode()
    assert "ALPHA" in again.stdout.decode()
    assert (_state(project) / "complete.json").exists()
    third = run_cli("hook", harness, "--take-lock", cwd=project, input=_payload(project, "compact"))
    assert "CONTEXT RE-EMIT" in third.stdout.decode()


def test_full_start_into_a_closed_pipe_records_no_completion(project: Path) -> None:
    r, w = os.pipe()
    os.close(r)  # the reader is gone: EPIPE (Python ignores SIGPIPE)
    try:
        run = _hook_to(w, project, "--take-lock", stdin=_payload(project))
    finally:
        os.close(w)
    assert run.returncode == 0
    assert b"EPIPE" in run.stderr, run.stderr
    assert not (_state(project) / "complete.json").exists()


def _fill_level(fd: int) -> int:
    buf = bytearray(4)
    fcntl.ioctl(fd, termios.FIONREAD, buf)
    return int.from_bytes(buf, sys.byteorder)


def test_hook_killed_while_writing_records_nothing(project: Path) -> None:
    """A hook killed mid-envelope (the reader stalled) leaves no completion record."""
    r, w = os.pipe()
    size = fcntl.fcntl(w, 1031, 4096)  # F_SETPIPE_SZ: a 4 KiB pipe, as for users over the limit
    proc = subprocess.Popen(supervise_cmd("hook", "claude", "--take-lock"), cwd=project,
                            stdin=subprocess.PIPE, stdout=w, stderr=subprocess.DEVNULL)
    os.close(w)
    try:
        assert proc.stdin is not None
        proc.stdin.write(_payload(project))
        proc.stdin.close()
        deadline = time.monotonic() + 30
        while _fill_level(r) < size and time.monotonic() < deadline:  # the hook is now writing
            time.sleep(0.02)
        assert _fill_level(r) == size
        time.sleep(0.2)
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=10)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        os.close(r)
    assert (_state(project) / "lock.json").exists()
    assert not (_state(project) / "complete.json").exists()


# -- a non-blocking stdout ---------------------------------------------------------------------

@pytest.mark.parametrize("harness", ["claude", "codex", "cursor"])
def test_non_blocking_small_pipe_gets_the_whole_envelope(project: Path, harness: str) -> None:
    r, w = os.pipe()
    fcntl.fcntl(w, 1031, 4096)  # F_SETPIPE_SZ
    os.set_blocking(w, False)  # the file description the hook inherits is non-blocking
    proc = subprocess.Popen(supervise_cmd("hook", harness, "--take-lock"), cwd=project,
                            stdin=subprocess.PIPE, stdout=w, stderr=subprocess.PIPE)
    os.close(w)
    chunks = []
    try:
        assert proc.stdin is not None
        proc.stdin.write(_payload(project))
        proc.stdin.close()
        time.sleep(1.0)  # a slow reader: the pipe is full long before we read
        while True:
            chunk = os.read(r, 1000)  # and a slow one: small reads
            if not chunk:
                break
            chunks.append(chunk)
        assert proc.stderr is not None
        err = proc.stderr.read()
        proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        if proc.stderr is not None:
            proc.stderr.close()
        os.close(r)
    data = b"".join(chunks)
    assert proc.returncode == 0
    assert len(data) > 4096
    doc = json.loads(data)  # whole, valid JSON
    text = doc.get("additional_context") or doc["hookSpecificOutput"]["additionalContext"]
    assert text.count(BIG) == 50
    assert b"NOT delivered" not in err
    assert (_state(project) / "complete.json").exists()


# -- deferred results: two-phase claim ---------------------------------------------------------

@pytest.mark.parametrize("harness", ["claude", "codex"])
def test_prompt_hook_to_dev_full_keeps_the_result_pending(project: Path, harness: str) -> None:
    result = _plant_result(project)
    with open("/dev/full", "wb") as full:
        run = _hook_to(full, project, "--event", "prompt", harness=harness)
    assert run.returncode == 0
    assert b"per-prompt context (deferred results, refreshed instructions) was NOT delivered" \
        in run.stderr, run.stderr
    assert result.exists()
    assert not list(result.parent.glob("delivered-*")) and not list(result.parent.glob("reserved-*"))
    got = run_cli("hook", harness, "--event", "prompt", cwd=project)
    assert "NET RESULT" in got.stdout.decode()
    assert not result.exists() and len(list(result.parent.glob("delivered-*"))) == 1
    again = run_cli("hook", harness, "--event", "prompt", cwd=project)
    assert again.stdout == b""  # exactly once


def test_reservation_of_a_killed_hook_is_taken_back(project: Path) -> None:
    result = _plant_result(project, run="2-def")
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    orphan = result.with_name(f"reserved-{dead.pid}-2-def.json")
    os.rename(result, orphan)  # what a hook killed between reserve and settle leaves
    got = run_cli("hook", "claude", "--event", "prompt", cwd=project)
    assert "NET RESULT" in got.stdout.decode()
    assert not orphan.exists() and len(list(result.parent.glob("delivered-*"))) == 1


def test_bridge_into_dev_full_records_no_completion(project: Path) -> None:
    result = _plant_result(project, run="3-ghi")
    with open("/dev/full", "wb") as full:
        run = subprocess.run(supervise_cmd("bridge", "--harness", "pi", "--source", "startup",
                                           "--cwd", str(project)),
                             cwd=project, stdout=full, stderr=subprocess.PIPE, timeout=60)
    assert run.returncode == 0
    assert b"NOT delivered" in run.stderr, run.stderr
    assert not (_state(project) / "complete.json").exists()
    assert result.exists()


# -- the memory stage's handoff count ----------------------------------------------------------

MEMORY_CONFIG = """\
budget = 30
[[stages]]
name = "memory"
builtin = "memory"
"""


def _memory_project(git_repo: Path) -> Path:
    (git_repo / "supervise.toml").write_text(MEMORY_CONFIG)
    store = git_repo / ".remember"
    store.mkdir()
    (store / "remember.md").write_text("HANDOFF: finish the parser\n")
    (git_repo / ".git" / "info" / "exclude").write_text(".remember/\n.supervise/\n")
    return git_repo


def _count(project: Path) -> str | None:
    record = _state(project) / "memory" / "handoff.delivered"
    if not record.exists():
        return None
    fields = dict(line.split("=", 1) for line in record.read_text().splitlines()
                  if "=" in line and not line.startswith("#"))
    return fields.get("deliveries")


@pytest.mark.parametrize("how", ["dev-full", "epipe"])
def test_handoff_count_only_after_delivery(git_repo: Path, how: str) -> None:
    project = _memory_project(git_repo)
    if how == "dev-full":
        with open("/dev/full", "wb") as full:
            run = _hook_to(full, project, "--take-lock", stdin=_payload(project))
    else:
        r, w = os.pipe()
        os.close(r)
        try:
            run = _hook_to(w, project, "--take-lock", stdin=_payload(project))
        finally:
            os.close(w)
    assert b"NOT delivered" in run.stderr, run.stderr
    assert _count(project) is None
    assert not list((_state(project) / "staged").glob("*"))
    ok = run_cli("hook", "claude", "--take-lock", cwd=project, input=_payload(project))
    assert "HANDOFF: finish the parser" in ok.stdout.decode()
    assert "Already delivered" not in ok.stdout.decode()
    assert _count(project) == "1"
    second = run_cli("hook", "claude", "--take-lock", cwd=project, input=_payload(project))
    assert "Already delivered 1 time" in second.stdout.decode()
    assert _count(project) == "2"


# -- the nested-instructions ledger ------------------------------------------------------------

def test_post_tool_to_dev_full_injects_again_next_time(git_repo: Path) -> None:
    sub = git_repo / "pkg"
    sub.mkdir()
    (sub / "AGENTS.md").write_text("NESTED RULES\n")
    (sub / "mod.py").write_text("x = 1\n")
    payload = json.dumps({"session_id": "s9", "cwd": str(git_repo), "tool_name": "Read",
                          "hook_event_name": "PostToolUse",
                          "tool_input": {"file_path": str(sub / "mod.py")}}).encode()
    with open("/dev/full", "wb") as full:
        run = _hook_to(full, git_repo, "--event", "post-tool", stdin=payload)
    assert b"NOT delivered" in run.stderr, run.stderr
    got = run_cli("hook", "claude", "--event", "post-tool", cwd=git_repo, input=payload)
    assert "NESTED RULES" in got.stdout.decode()
    again = run_cli("hook", "claude", "--event", "post-tool", cwd=git_repo, input=payload)
    assert again.stdout == b""  # once per epoch, now that it was delivered


# -- write_whole as a unit ---------------------------------------------------------------------

def test_write_whole_reports_a_reader_that_never_reads() -> None:
    from supervisor._delivery import WriteFailed, write_whole

    r, w = os.pipe()
    try:
        os.set_blocking(w, False)
        with pytest.raises(WriteFailed, match=r"took only \d+ of 200000 bytes"):
            write_whole(w, b"y" * 200_000, deadline=0.3)
    finally:
        os.close(r)
        os.close(w)


def test_fast_path_starts_python_for_an_orphaned_reservation(project: Path) -> None:
    """The sh fast path must not answer "nothing to do" while a killed hook's reservation
    holds the only pending result: Python takes it back and delivers it."""
    from supervisor.commands.install import FAST_PATH, SHELL

    run_cli("hook", "claude", "--take-lock", cwd=project, input=_payload(project))  # arms it
    result = _plant_result(project, run="4-jkl")
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    orphan = result.with_name(f"reserved-{dead.pid}-4-jkl.json")
    os.rename(result, orphan)
    payload = json.dumps({"session_id": "s1", "cwd": str(project)},
                         separators=(",", ":")).encode()  # compact, as harnesses send it
    run = subprocess.run([SHELL, str(FAST_PATH), sys.executable, "-P", "-m", "supervisor",
                          "hook", "claude", "--event", "prompt"], input=payload,
                         capture_output=True, cwd=project, timeout=60)
    assert run.returncode == 0, run.stderr
    assert "NET RESULT" in run.stdout.decode()
    assert not orphan.exists()
