"""No stage outlives a SIGKILLed supervisor (issue 27, item 2): a supervisor killed outright
(the harness ending the hook at its timeout, the OOM killer, ``kill -9``) ran no kill
sequence, so its stages lived their natural life, and a SIGKILLed deferred runner left its
stage running without a deadline. The digest's guardian (``supervisor/engine/_guardian.py``)
reads end of file on its pipe and kills every registered stage tree: its process group, the
processes carrying its token (a ``setsid`` escapee) and their descendants."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

from helpers import alive_and_ours, supervise_cmd

HOLD = 300
"""Seconds every process of the stages would live: far past the test's own bound."""


def _stage(name: str, pids: Path, body: str) -> str:
    return (f"[[stages]]\nname = \"{name}\"\nrun = {json.dumps(['sh', '-c', body])}\n"
            f"timeout = {HOLD}\n")


def _hostile(pids: Path, tag: str) -> str:
    """A TERM-ignoring leader with a TERM-ignoring child in its group and a ``setsid``
    grandchild (out of the group and session, carrying the stage's token), each writing its
    own pid into ``pids/<tag>-<role>`` (each is a script of its own, so ``$$`` is its pid)."""
    def note(role: str) -> str:
        return (f"echo $$ > '{pids}/{tag}-{role}.tmp' && "
                f"mv '{pids}/{tag}-{role}.tmp' '{pids}/{tag}-{role}'")

    escapee = pids / f"{tag}-escapee.sh"
    escapee.write_text(f"{note('escapee')}\nexec sleep {HOLD}\n")
    child = pids / f"{tag}-child.sh"
    child.write_text(f"trap '' TERM\n{note('child')}\nsetsid sh '{escapee}' &\n"
                     f"exec sleep {HOLD}\n")
    return f"trap '' TERM; {note('leader')}; sh '{child}' & exec sleep {HOLD}"


def _wait_for(paths: list[Path], bound: float = 30.0) -> list[int]:
    end = time.monotonic() + bound
    while not all(p.exists() for p in paths):
        assert time.monotonic() < end, [p.name for p in paths if not p.exists()]
        time.sleep(0.02)
    return [int(p.read_text()) for p in paths]


def _all_gone(pids: list[int], bound: float = 5.0) -> list[int]:
    """The pids still alive (and ours) after waiting up to ``bound`` seconds for them to go
    (a lower bound for a kill in flight on a loaded host, never a timing claim)."""
    end = time.monotonic() + bound
    while True:
        alive = [pid for pid in pids if alive_and_ours(pid)]
        if not alive or time.monotonic() > end:
            return alive
        time.sleep(0.02)


def _end(pids: list[int]) -> None:
    for pid in pids:  # processes this test started: end them by pid
        if alive_and_ours(pid):
            os.kill(pid, signal.SIGKILL)


ROLES = ("leader", "child", "escapee")


def test_a_sigkilled_digest_takes_its_stages_with_it(tmp_path: Path) -> None:
    """Two running stages (TERM ignored, a child in the group, a ``setsid`` escapee): kill -9
    of the digest, and every one of their processes is gone."""
    pids = tmp_path / "pids"
    pids.mkdir()
    (tmp_path / "supervise.toml").write_text(
        f"budget = {HOLD}\n" + _stage("a", pids, _hostile(pids, "a"))
        + _stage("b", pids, _hostile(pids, "b")))
    digest = subprocess.Popen(supervise_cmd("digest"), cwd=tmp_path, stdin=subprocess.DEVNULL,
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    started: list[int] = []
    try:
        started = _wait_for([pids / f"{tag}-{role}" for tag in "ab" for role in ROLES])
        assert len(set(started)) == 2 * len(ROLES), started  # six processes, six pids
        time.sleep(0.2)  # every start registered (a lower bound)
        digest.kill()
        digest.wait(timeout=30)
        assert _all_gone(started) == [], "stage processes outlived the SIGKILLed digest"
    finally:
        if digest.poll() is None:
            digest.kill()
            digest.wait()
        _end(started)


def test_a_sigkilled_deferred_runner_takes_its_stage_with_it(tmp_path: Path) -> None:
    """A deferred stage's runner killed with SIGKILL: its stage (and the stage's escapee)
    are gone at once, not at the end of their natural life."""
    pids = tmp_path / "pids"
    pids.mkdir()
    (tmp_path / "supervise.toml").write_text(
        _stage("late", pids, _hostile(pids, "d")) + "deferred = true\n")
    proc = subprocess.run(supervise_cmd("digest", "--session-start"), cwd=tmp_path,
                          stdin=subprocess.DEVNULL, capture_output=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    started: list[int] = []
    runner = 0
    try:
        started = _wait_for([pids / f"d-{role}" for role in ROLES])
        running = tmp_path / ".supervise" / "deferred" / "late" / "running.json"
        runner = int(json.loads(running.read_text())["pid"])
        assert alive_and_ours(runner)
        time.sleep(0.2)  # the start registered (a lower bound)
        os.kill(runner, signal.SIGKILL)
        assert _all_gone(started) == [], "the deferred stage outlived its SIGKILLed runner"
    finally:
        _end([*started, runner] if runner else started)


def test_a_sigkilled_run_takes_its_command_with_it(tmp_path: Path) -> None:
    """``supervise run``'s lean path (its own guardian, forked after the spawn): kill -9 of
    ``run`` while its command runs (TERM ignored, a child in its group, a ``setsid``
    escapee), and every one of their processes is gone. Before, the lean path had no
    guardian: the whole tree lived on for its natural life."""
    pids = tmp_path / "pids"
    pids.mkdir()
    run = subprocess.Popen(supervise_cmd("run", "--budget", str(HOLD), "--", "sh", "-c",
                                         _hostile(pids, "r")),
                           cwd=tmp_path, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                           stderr=subprocess.DEVNULL)
    started: list[int] = []
    try:
        started = _wait_for([pids / f"r-{role}" for role in ROLES])
        assert len(set(started)) == len(ROLES), started  # three processes, three pids
        run.kill()
        run.wait(timeout=30)
        assert _all_gone(started) == [], "the command outlived its SIGKILLed `supervise run`"
    finally:
        if run.poll() is None:
            run.kill()
            run.wait()
        _end(started)


def test_a_new_run_stops_an_earlier_run_its_runner_left(tmp_path: Path) -> None:
    """A deferred stage whose runner and the runner's guardian were both SIGKILLed (nothing
    left to kill its stage): the next digest found the runner dead and started a second run
    beside the first, which ran on with no deadline. Now the new launch finds the earlier
    run's processes by its run id (``SUPERVISE_DEFERRED_RUN``), kills them, names the run
    LOST, and then starts the new one."""
    import psutil

    from helpers import end_our_processes

    log = tmp_path / "runs.log"
    body = f"trap '' TERM; echo $$ >> '{log}'; exec sleep {HOLD}"
    (tmp_path / "supervise.toml").write_text(
        f"[[stages]]\nname = \"late\"\nrun = {json.dumps(['sh', '-c', body])}\n"
        f"timeout = {HOLD}\ndeferred = true\n")

    def runs(count: int) -> list[int]:
        end = time.monotonic() + 30
        while True:
            lines = log.read_text().split() if log.exists() else []
            if len(lines) >= count:
                return [int(x) for x in lines]
            assert time.monotonic() < end, lines
            time.sleep(0.02)

    try:
        first = subprocess.run(supervise_cmd("digest", "--session-start"), cwd=tmp_path,
                               stdin=subprocess.DEVNULL, capture_output=True, timeout=60)
        assert first.returncode == 0, first.stderr
        stage = runs(1)[0]
        running = tmp_path / ".supervise" / "deferred" / "late" / "running.json"
        runner = psutil.Process(int(json.loads(running.read_text())["pid"]))
        time.sleep(0.2)  # the stage registered with the guardian (a lower bound)
        guardians = [child for child in runner.children()  # a fork of the runner: its argv
                     if child.cmdline() == runner.cmdline()]
        assert len(guardians) == 1, guardians
        guardians[0].kill()
        runner.kill()
        assert _all_gone([guardians[0].pid, runner.pid]) == []
        time.sleep(0.5)  # the premise: nothing killed the stage (a lower bound)
        assert alive_and_ours(stage), "the premise failed: the earlier run's stage is gone"
        second = subprocess.run(supervise_cmd("digest", "--session-start"), cwd=tmp_path,
                                stdin=subprocess.DEVNULL, capture_output=True, timeout=60)
        assert second.returncode == 0, second.stderr
        assert _all_gone([stage]) == [], "a second run started beside the live first one"
        text = second.stdout.decode()
        assert "LOST: deferred stage 'late'" in text and "was stopped" in text, text
        assert alive_and_ours(runs(2)[1])  # the new run is running
    finally:
        end_our_processes()


def test_a_run_sigkilled_as_its_command_starts_takes_it_with_it(tmp_path: Path) -> None:
    """A SIGKILL to ``run`` in its command's first moments: the command stops ``run`` (its
    parent) before anything else, writes its pid, then forks a TERM-ignoring child and a
    ``setsid`` escapee; the test kills the stopped ``run``. The guardian was forked once the
    command had run 10 ms, so a kill sooner left the whole tree running; it is forked before
    the spawn now."""
    pids = tmp_path / "pids"
    pids.mkdir()
    body = "kill -STOP $PPID; " + _hostile(pids, "f")
    run = subprocess.Popen(supervise_cmd("run", "--budget", str(HOLD), "--", "sh", "-c", body),
                           cwd=tmp_path, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                           stderr=subprocess.DEVNULL)
    started: list[int] = []
    try:
        started = _wait_for([pids / f"f-{role}" for role in ROLES])
        with open(f"/proc/{run.pid}/stat", "rb") as f:
            state = f.read().rsplit(b")", 1)[1].split()[0]
        assert state in (b"T", b"t"), "the premise: run is stopped by its command's first act"
        run.kill()
        run.wait(timeout=30)
        assert _all_gone(started) == [], "the command outlived its SIGKILLed `supervise run`"
    finally:
        if run.poll() is None:
            run.kill()
            run.wait()
        _end(started)
