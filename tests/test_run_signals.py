"""``supervise run`` forwards the signals GNU ``timeout`` forwards (issue 27, item 3): TERM,
INT, HUP, QUIT and ALRM to us reach the command's process group, so its own handlers run (a
Python command's ``KeyboardInterrupt`` and ``finally``); the exit status is the command's
(128+n when the signal killed it); a command still running ``--grace`` seconds later has its
whole tree killed (128+n). Before, every one of them became SIGTERM to the tree (QUIT and
ALRM killed the supervisor itself, leaving the command running). Both paths: the lean one
and the engine's (``SUPERVISE_PORTABLE=1``)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from helpers import alive_and_ours, supervise_cmd

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"),
                                reason="the lean run path (posix_spawn, subreaper) is Linux's")


@pytest.fixture(params=["lean", "portable"], autouse=True)
def path(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Each test on the lean path and on the engine's path (``SUPERVISE_PORTABLE=1``, the
    macOS stand-in: the engine runs CMD)."""
    if request.param == "portable":
        monkeypatch.setenv("SUPERVISE_PORTABLE", "1")
    else:
        monkeypatch.delenv("SUPERVISE_PORTABLE", raising=False)
    return str(request.param)

FORWARDED = ("SIGTERM", "SIGINT", "SIGHUP", "SIGQUIT", "SIGALRM")

HANDLER = """
import os, signal, sys, time
sig = getattr(signal, sys.argv[1])
def handler(n, frame):
    print("handled", signal.Signals(n).name, flush=True)
    sys.exit(3)
if sig != signal.SIGINT:
    signal.signal(sig, handler)
try:
    print("ready", flush=True)  # inside the try: an INT right after it is caught
    time.sleep(60)
except KeyboardInterrupt:
    print("KeyboardInterrupt", flush=True)
finally:
    print("finally ran", flush=True)
"""


def _run_and_signal(argv: list[str], sig: int, *extra: str) -> tuple[int, str]:
    """Start ``supervise run [extra] -- argv``, wait for its ``ready`` line, send ``sig`` to the
    supervisor; its exit status and everything the command printed."""
    proc = subprocess.Popen(supervise_cmd("run", "--budget", "60", *extra, "--", *argv),
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            stdin=subprocess.DEVNULL)
    assert proc.stdout is not None
    try:
        first = proc.stdout.readline()
        assert first == b"ready\n", first
        proc.send_signal(sig)
        rest, _ = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        proc.stdout.close()
    return proc.returncode, (first + rest).decode()


@pytest.mark.parametrize("name", FORWARDED)
def test_a_forwarded_signal_runs_the_commands_own_handler(tmp_path: Path, name: str) -> None:
    """Each forwarded signal reaches the command: its handler (``KeyboardInterrupt`` for
    INT) and its ``finally`` run, and the status is the command's own."""
    script = tmp_path / "handler.py"
    script.write_text(HANDLER)
    code, out = _run_and_signal([sys.executable, str(script), name], getattr(signal, name),
                                "--grace", "30")  # it ends by itself: grace only bounds it
    if name == "SIGINT":
        assert "KeyboardInterrupt" in out and "finally ran" in out, out
        assert code == 0, (code, out)
    else:
        assert f"handled {name}" in out and "finally ran" in out, out
        assert code == 3, (code, out)


def test_a_signal_the_command_does_not_handle_kills_it_with_that_signal(tmp_path: Path) -> None:
    """HUP without a handler: the command dies of it, and the status says so (128 + 1)."""
    code, out = _run_and_signal(["sh", "-c", "echo ready; exec sleep 60"], signal.SIGHUP)
    assert code == 128 + signal.SIGHUP, (code, out)


def test_a_command_that_ignores_it_is_killed_whole_after_grace(tmp_path: Path) -> None:
    """TERM ignored by the command and its child: after ``--grace`` the whole tree is killed
    and the status is 128 + TERM."""
    pidfile = tmp_path / "child.pid"
    code, out = _run_and_signal(
        ["sh", "-c", f"trap '' TERM; sh -c 'trap \"\" TERM; echo $$ > {pidfile}; exec sleep 60' & "
         f"while [ ! -s {pidfile} ]; do sleep 0.01; done; echo ready; wait"],
        signal.SIGTERM, "--grace", "0.5")
    assert code == 128 + signal.SIGTERM, (code, out)
    assert not alive_and_ours(int(pidfile.read_text()))
