"""The engine's portable path (what runs on macOS: no child subreaper, no ``/proc``, no cgroup;
psutil scans and the token sweep), forced on Linux with ``SUPERVISE_PORTABLE=1`` and run
against the same hostile-tree tests as the Linux path: all of ``tests/test_engine.py`` and
the watchdog's process-tree tests in ``tests/test_watchdog.py`` (fork-and-exit chains, CPU
starvation, a fork bomb over ``max_tasks``, a hog over ``max_memory``, foreign signals, the
deferred runner's descriptors), each hostile one also under the synthetic CPU load, and the
guardian's tests (``tests/test_guardian.py``: a SIGKILLed digest, deferred runner and
``run``; there the guardian lists, reads and kills through psutil, macOS's calls). Left
out: the config-number tests and the CLI's own signal handling (``early_signal``,
``test_a_signal_*``: no process tree, the same code on both paths, about a third of the
run's time under load) and the two tests of adopted orphans (their reaping, and one
listing of our children shared by the leftover checks), which need the subreaper (without
it they are init's; docs/engine.md, "Platforms"). The switch is read at import,
and a child subreaper cannot be turned off again in a process, so each run is a fresh
pytest process, one per file: the run's time is the sum of its tests' budgets and graces
(about 60 tests, 1-4 s each under load), so each file's run is bounded and reported on
its own."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

PROBE = """
from supervisor.engine import _cgroup, _proctable, _reaper
from supervisor.session import _procinfo
assert _reaper.PORTABLE and not _proctable._LINUX and not _procinfo._LINUX
assert _reaper.enable_subreaper() is False
assert _cgroup.cgroup_root() is None
print("portable")
"""


def _env(**extra: str) -> dict[str, str]:
    return {**os.environ, "SUPERVISE_PORTABLE": "1", **extra}


def test_the_switch_forces_every_portable_branch() -> None:
    proc = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True,
                          env=_env(), timeout=60)
    assert proc.returncode == 0 and proc.stdout.strip() == "portable", proc.stderr
    off = subprocess.run([sys.executable, "-c", "from supervisor.engine import _reaper as p; "
                          "print(p.PORTABLE)"], capture_output=True, text=True, timeout=60,
                         env={**os.environ, "SUPERVISE_PORTABLE": "0"})
    assert off.stdout.strip() == "False"


LEFT_OUT = ("not adopted_orphans_are_reaped and not share_one_children_listing"
            " and not non_finite and not early_signal and not test_a_signal_")
"""Deselected in the portable runs (see the module's docstring)."""


@pytest.mark.timeout(600)
@pytest.mark.parametrize("tests", ["tests/test_engine.py", "tests/test_watchdog.py",
                                   "tests/test_guardian.py"])
def test_hostile_trees_on_the_portable_path(tests: str) -> None:
    """Every hostile-tree test passes with the portable path forced (pytest in a fresh
    process; its own conftest still fails any test that leaves a process behind)."""
    from supervisor.engine._reaper import reap_zombie_children

    # The orphans of the inner run (a fork-and-exit chain's exited generations) are
    # re-parented to the nearest child subreaper above it: this pytest, once a test here has
    # turned the subreaper on. On macOS they go to launchd, which reaps them at once; so this
    # process reaps them while it waits, as launchd would. (Without that, CI's run failed both
    # chain tests: hundreds of unreaped generations under a non-reaping ancestor, a state the
    # portable path never meets on the platform it stands for. Named in docs/engine.md.)
    proc = subprocess.Popen([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                             tests, "-k", LEFT_OUT],
                            cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=_env())
    deadline = time.monotonic() + 580
    while True:
        try:
            out, err = proc.communicate(timeout=0.05)
            break
        except subprocess.TimeoutExpired:
            reap_zombie_children(keep={proc.pid})
            if time.monotonic() > deadline:
                proc.kill()
                out, err = proc.communicate()
                break
    tail = out[-4000:] + err[-2000:]
    assert proc.returncode == 0, tail
    assert " passed" in out and " failed" not in out, tail


def _sleeper(env: dict[str, str] | None = None,
             new_session: bool = False) -> subprocess.Popen[bytes]:
    return subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"],
                            stdin=subprocess.DEVNULL, env=env, start_new_session=new_session)


def test_a_first_portable_scan_reads_the_stages_processes_before_older_ones(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Without ``/proc/loadavg`` a first scan cannot know the newest pid; the largest pid
    first read a stage's double-forked daemon after every older process (pids wrap), and a
    scan cut by its deadline on a starved host missed it. The pids handed out after the
    oldest stage leader's come first."""
    from supervisor.engine import _proctable

    monkeypatch.setattr(_proctable, "_LINUX", False)  # psutil rows, as on macOS
    leader = _sleeper()
    child = _sleeper()
    while child.pid < leader.pid:  # the pids wrapped between the two: spawn them again
        for p in (leader, child):
            p.kill()
            p.wait()
        leader, child = _sleeper(), _sleeper()
    order: list[int] = []

    def classify(row: _proctable.Row) -> bool:
        order.append(row.pid)
        return True

    try:
        rows, complete = _proctable.scan(first={leader.pid}, classify=classify)
    finally:
        for p in (leader, child):  # processes this test started: end them by pid
            p.kill()
            p.wait()
    assert complete and order[0] == leader.pid and child.pid in rows
    older = [pid for pid in (1, os.getpid(), os.getppid()) if pid in order]
    assert older and all(order.index(child.pid) < order.index(pid) for pid in older), order


def test_a_scan_cut_by_its_deadline_keeps_the_members_it_did_not_read() -> None:
    """A starved host's scan can be cut before it reads a stage's processes: that must not
    drop them from the stage's members (the kill then spared a double-forked daemon)."""
    import math
    import time
    import uuid

    from supervisor.engine import _loop
    from supervisor.engine._reaper import TOKEN_VAR
    from supervisor.engine._tree import StageTree, Watch

    token = uuid.uuid4().hex
    proc = _sleeper({**os.environ, TOKEN_VAR: token}, new_session=True)
    try:
        watch = Watch()
        tree = StageTree(proc.pid, lambda: proc.poll() is None, token)
        watch.add(tree)

        async def until_member() -> None:
            while proc.pid not in tree.members:  # the handshake: a scan has seen it
                await watch.refresh(_loop.current_time() + 5.0)

        _loop.run(until_member)
        complete, _ = watch._scan_sync(time.monotonic() - 1.0, {proc.pid: token}, set(), None,
                                       set(), set(), math.inf)
        assert not complete
        assert proc.pid in tree.members
    finally:
        proc.kill()
        proc.wait()


def test_a_process_of_a_killed_stage_found_later_is_killed_on_sight(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """On a starved portable host a scan's thread can outlive the kill it served: it found
    a fork-and-exit chain's live generation and stopped it after the kill had sent its
    SIGKILL and returned, and the generation stayed stopped (or, unstopped, forked on). Once
    a stage's kill has reached its SIGKILL, a scan that reads a process carrying its token
    kills it."""
    import uuid

    from supervisor.engine import _loop, _proctable, _tree
    from supervisor.engine._reaper import TOKEN_VAR

    monkeypatch.setattr(_proctable, "_LINUX", False)  # psutil rows, as on macOS
    monkeypatch.setattr(_tree, "subreaper_enabled", lambda: False)  # the token sweep
    token = uuid.uuid4().hex
    leader = _sleeper({**os.environ, TOKEN_VAR: token}, new_session=True)
    late: subprocess.Popen[bytes] | None = None
    try:
        watch = _tree.Watch()
        tree = _tree.StageTree(leader.pid, lambda: leader.poll() is None, token)
        watch.add(tree)

        async def kill() -> None:
            await watch.kill_stage(tree, 0.0, _loop.current_time() + 5.0)

        _loop.run(kill)
        assert leader.wait(timeout=10) < 0
        watch.discard(tree)
        late = _sleeper({**os.environ, TOKEN_VAR: token}, new_session=True)
        deadline = time.monotonic() + 30
        while late.poll() is None and time.monotonic() < deadline:
            watch._scan_sync(time.monotonic() + 5.0, {}, set(), None, set(), set(),
                             time.monotonic())
            try:
                late.wait(timeout=0.2)
            except subprocess.TimeoutExpired:
                pass
        assert late.poll() == -9
    finally:
        for p in (leader, late):  # processes this test started: end them by pid
            if p is not None and p.poll() is None:
                p.kill()
                p.wait()


def test_the_newest_pids_come_first_after_a_scan_cut_short(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Without ``/proc/loadavg`` an incremental scan finds the newest pid from the last
    listing: an old pid a scan cut by its deadline never read looked new, below the largest
    known, and was taken for the newest after a wrap, so the pids born since were read
    last (a chain's live generation among them: it forked on while older rows were read).
    The listing the scan read, not the rows it kept, says which pids are new. (The table is
    this test's processes alone: another process's pid above them, from before a wrap, would
    make every new pid look wrapped and hide the fault.)"""
    import psutil

    from supervisor.engine import _proctable, _tree

    monkeypatch.setattr(_proctable, "_LINUX", False)  # psutil rows, as on macOS
    monkeypatch.setattr(_tree, "subreaper_enabled", lambda: False)
    ours = {os.getpid()}
    every = psutil.pids
    monkeypatch.setattr(psutil, "pids", lambda: [pid for pid in every() if pid in ours])
    old, later = _sleeper(), _sleeper()
    born: subprocess.Popen[bytes] | None = None
    try:
        while later.pid < old.pid:  # the pids wrapped between the two: spawn them again
            for p in (old, later):
                p.kill()
                p.wait()
            old, later = _sleeper(), _sleeper()
        ours.update((old.pid, later.pid))
        watch = _tree.Watch()
        rows, complete = _proctable.scan()
        assert complete and later.pid in rows
        watch.table = {pid: row for pid, row in rows.items() if pid != old.pid}  # cut short
        watch.listed = set(rows)
        born = _sleeper()
        ours.add(born.pid)
        order: list[int] = []

        def classify(exclude: set[int], row: _proctable.Row) -> bool:
            order.append(row.pid)
            return True

        monkeypatch.setattr(watch, "_classify", classify)
        watch._scan_sync(time.monotonic() + 30, {}, set(), watch.table, set(), set(),
                         time.monotonic())
        assert born.pid in order and old.pid in order
        assert order.index(born.pid) < order.index(old.pid), order
    finally:
        for p in (old, later, born):
            if p is not None:
                p.kill()
                p.wait()


def test_a_full_scan_cut_short_still_makes_the_next_ones_incremental() -> None:
    """The monitor reads the whole table at most every ``FULL_SCAN_PERIOD`` seconds on the
    portable path; counting only full scans that completed made every periodic scan of a
    starved host a full one (none completed: a psutil row costs milliseconds there), so no
    scan read new processes in time. A full scan cut by its deadline counts too."""
    from supervisor.engine import _tree

    watch = _tree.Watch()
    complete, _ = watch._scan_sync(time.monotonic() - 1.0, {}, set(), None, set(), set(), 5.0)
    assert not complete
    assert watch.full_at == 5.0


def test_a_kill_begun_past_its_deadline_kills_what_a_scan_had_read(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """On a starved host the kill can begin after its deadline (the event loop got no CPU),
    with no time to scan, while the one scan that had read a ``setsid`` daemon's token was
    still running (its result applied, or dropped, only after the kill returned): the kill
    signalled nothing of the daemon, which outlived the digest (1 of 10 portable kills at
    load 36). What a scan's thread read of the stage is killed at the SIGKILL."""
    import math
    import uuid

    from supervisor.engine import _loop, _proctable, _tree
    from supervisor.engine._reaper import TOKEN_VAR

    monkeypatch.setattr(_proctable, "_LINUX", False)  # psutil rows, as on macOS
    monkeypatch.setattr(_tree, "subreaper_enabled", lambda: False)  # the token sweep
    token = uuid.uuid4().hex
    env = {**os.environ, TOKEN_VAR: token}
    leader = _sleeper(env, new_session=True)
    daemon = _sleeper(env, new_session=True)  # out of the leader's group and session
    try:
        watch = _tree.Watch()
        tree = _tree.StageTree(leader.pid, lambda: leader.poll() is None, token)
        watch.add(tree)
        watch.scanned_at = 1.0  # a later scan was applied: this one's result is dropped
        deadline = time.monotonic() + 30
        while not any(key[0] == daemon.pid for key in watch._tokens):  # the handshake
            assert time.monotonic() < deadline, "no scan read the daemon's token"
            watch._scan_sync(time.monotonic() + 5.0, {leader.pid: token}, set(), None, set(),
                             set(), 0.0)
        assert daemon.pid not in tree.members  # the premise: no applied scan listed it
        watch.scanned_at = -math.inf

        async def kill() -> None:
            await watch.kill_stage(tree, 0.0, _loop.current_time() - 1.0)

        _loop.run(kill)
        assert daemon.wait(timeout=10) == -9
    finally:
        for p in (leader, daemon):  # processes this test started: end them by pid
            if p.poll() is None:
                p.kill()
                p.wait()
