"""An orphan that leaves every mark of its stage dies with it (issue 27, item 1):
``sh -c 'env -i setsid -f sleep ...; echo done'`` leaves a daemon with no token, a session of its
own and no parent but our child subreaper. Under ``supervise run`` (one command: every orphan
adopted is its) it is swept when the command ends, and our caller's pipe is released; in a
digest it dies with its stage when it still holds the stage's output pipe (inherited: the
one mark it kept), else at the digest's end. Before, it outlived both, and under ``run`` it
held the caller's pipe for its whole life."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from helpers import supervise_cmd

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"),
                                reason="the child subreaper is Linux's")

HOLD = 300
"""Seconds the escapee would live: far past the test's timeout, so a held pipe fails it."""


def _escapee_command(pidfile: Path, detached_stdio: bool = False,
                     ignore_term: bool = False, linger: float = 0.0) -> list[str]:
    """A leader that starts, with an empty environment, a daemon in a new session (``setsid
    -f`` forks it first), which writes its own pid and becomes ``sleep`` (ignoring SIGTERM
    when ``ignore_term``); the leader waits for the pid, prints and exits. ``detached_stdio``:
    the daemon first points its stdin, stdout and stderr at ``/dev/null`` (no pipe of its
    stage left). ``linger``: seconds the leader stays after the daemon wrote its pid, so a
    stage that ``needs`` it begins well past the daemon's start stamp (stamps are clock
    ticks, compared with two ticks of slack)."""
    daemon = pidfile.with_suffix(".sh")
    redirect = "exec </dev/null >/dev/null 2>&1\n" if detached_stdio else ""
    trap = "trap '' TERM\n" if ignore_term else ""
    daemon.write_text(f"{redirect}{trap}echo $$ > '{pidfile}.tmp'\nmv '{pidfile}.tmp' '{pidfile}'\n"
                      f"exec sleep {HOLD}\n")
    return ["sh", "-c", f"env -i setsid -f /bin/sh '{daemon}'; "
            f"while [ ! -s '{pidfile}' ]; do sleep 0.01; done; "
            + (f"sleep {linger}; " if linger else "") + "echo done"]


def _running_sleep(pid: int) -> bool:
    """Whether ``pid`` is still the escapee (a live ``sleep``; not a zombie)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            state = f.read().rpartition(b")")[2].split()[0]
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            cmd = f.read()
    except OSError:
        return False
    return state not in (b"Z", b"X") and cmd.startswith(b"sleep\0")


def _starting(script: Path) -> list[int]:
    """Pids of the live processes still running the daemon's ``script`` (before its pid file
    and its ``exec sleep``): found by command line, the escapee carries no token."""
    found = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/cmdline", "rb") as f:
                if str(script).encode() in f.read().split(b"\0"):
                    found.append(int(name))
        except OSError:
            continue
    return found


def _check_gone(pidfile: Path) -> None:
    # A test that failed early (the supervisor killed by our timeout) may reach this while
    # the escapee is still starting: no pid file yet, and no token for the leak fixture to
    # find it by. End every process running its script (by pid) until its pid file exists
    # or none has been seen for 0.5 s (bounded), then check the pid the file names.
    script = pidfile.with_suffix(".sh")
    end = time.monotonic() + 10.0
    quiet = time.monotonic()
    while not pidfile.exists() and time.monotonic() - quiet < 0.5 and time.monotonic() < end:
        for pid in _starting(script):
            quiet = time.monotonic()
            try:
                os.kill(pid, signal.SIGKILL)  # a process this test started
            except OSError:
                pass
        time.sleep(0.02)
    pid = int(pidfile.read_text()) if pidfile.exists() else 0
    if not pid:
        return
    try:
        end = time.monotonic() + 5.0  # a kill in flight: /proc may lag (a lower bound only)
        while _running_sleep(pid) and time.monotonic() < end:
            time.sleep(0.02)
        assert not _running_sleep(pid), f"the env -i setsid escapee {pid} outlived its supervisor"
    finally:
        if _running_sleep(pid):  # the process this test started: end it by pid
            os.kill(pid, signal.SIGKILL)


def test_run_sweeps_an_escapee_that_cleared_its_environment(tmp_path: Path) -> None:
    """``supervise run`` piped: the caller's read ends when the command does (the escapee
    held the pipe for its whole life) and the escapee is gone."""
    pidfile = tmp_path / "daemon.pid"
    try:
        proc = subprocess.run(supervise_cmd("run", "--budget", "60", "--",
                                            *_escapee_command(pidfile)),
                              capture_output=True, stdin=subprocess.DEVNULL, timeout=40)
        assert proc.returncode == 0, proc.stderr
        assert proc.stdout == b"done\n"
    finally:
        _check_gone(pidfile)


def test_an_escapee_holding_its_stages_pipe_dies_with_the_stage(tmp_path: Path) -> None:
    """The daemon keeps the stage's stdout (inherited): that pipe tells it is the stage's,
    so the stage's own sweep kills it, before the stage that needs it starts, and its log
    names it. Before, nothing told its stage: it lived until the digest's end, beside every
    later stage."""
    pidfile = tmp_path / "daemon.pid"
    import json

    check = (f"pid=$(cat '{pidfile}'); i=0; while [ $i -lt 100 ]; do "
             f"s=$(cut -d' ' -f3 /proc/$pid/stat 2>/dev/null); "
             f"if [ -z \"$s\" ] || [ \"$s\" = Z ]; then echo GONE; exit 0; fi; "
             f"sleep 0.05; i=$((i+1)); done; echo ALIVE")
    (tmp_path / "supervise.toml").write_text(
        f"[[stages]]\nname = \"esc\"\nrun = {json.dumps(_escapee_command(pidfile))}\n"
        f"[[stages]]\nname = \"later\"\nrun = {json.dumps(['sh', '-c', check])}\n"
        "needs = [\"esc\"]\n")
    try:
        proc = subprocess.run(supervise_cmd("digest"), cwd=tmp_path, capture_output=True,
                              stdin=subprocess.DEVNULL, timeout=40)
        assert proc.returncode == 0, proc.stderr
        assert b"done\n" in proc.stdout, proc.stdout
        assert b"GONE" in proc.stdout, proc.stdout  # killed by esc's sweep, before `later`
        pid = pidfile.read_text().strip()
        esc = (tmp_path / ".supervise" / "logs" / "esc.log").read_text()
        assert f"pid {pid} (sleep)" in esc and "held its output pipe" in esc, esc
    finally:
        _check_gone(pidfile)


def test_a_digest_kills_an_escapee_that_cleared_its_environment(tmp_path: Path) -> None:
    """The same leader as a digest stage, beside another stage, its daemon holding no pipe
    of the stage either (stdio on ``/dev/null``): nothing tells its stage, so it dies by the
    digest's end, and the digest returns."""
    pidfile = tmp_path / "daemon.pid"
    import json

    (tmp_path / "supervise.toml").write_text(
        f"[[stages]]\nname = \"esc\"\n"
        f"run = {json.dumps(_escapee_command(pidfile, True, linger=0.2))}\n"
        "[[stages]]\nname = \"other\"\nrun = [\"sleep\", \"0.3\"]\nneeds = [\"esc\"]\n")
    try:
        proc = subprocess.run(supervise_cmd("digest"), cwd=tmp_path, capture_output=True,
                              stdin=subprocess.DEVNULL, timeout=40)
        assert proc.returncode == 0, proc.stderr
        assert b"done\n" in proc.stdout, proc.stdout
        # Attributed: it started while `esc` alone ran (`other` waits for it), so the line
        # naming it is in esc's log and only there (`supervise status` shows the logs).
        logs = tmp_path / ".supervise" / "logs"
        pid = pidfile.read_text().strip()
        esc = (logs / "esc.log").read_text()
        assert f"pid {pid} (sleep)" in esc and "this stage alone ran" in esc, esc
        assert not (logs / "other.log").exists() or pid not in (logs / "other.log").read_text()
    finally:
        _check_gone(pidfile)


def test_an_escapee_that_needed_sigkill_is_reported_in_its_stage_log(tmp_path: Path) -> None:
    """The digest's end kills a TERM-ignoring escapee with SIGKILL: the kill's report (how
    many needed SIGKILL, whether any survived) follows the line naming it in its stage's log.
    The sweep's report was computed and dropped."""
    pidfile = tmp_path / "daemon.pid"
    import json

    (tmp_path / "supervise.toml").write_text(
        "grace = 0.2\n[[stages]]\nname = \"esc\"\n"
        f"run = {json.dumps(_escapee_command(pidfile, detached_stdio=True, ignore_term=True))}\n")
    try:
        proc = subprocess.run(supervise_cmd("digest"), cwd=tmp_path, capture_output=True,
                              stdin=subprocess.DEVNULL, timeout=40)
        assert proc.returncode == 0, proc.stderr
        assert b"SIGKILL" not in proc.stdout  # the log's, never the model's
        esc = (tmp_path / ".supervise" / "logs" / "esc.log").read_text()
        pid = pidfile.read_text().strip()
        assert f"pid {pid} (sleep)" in esc and "1 needed SIGKILL" in esc, esc
    finally:
        _check_gone(pidfile)
