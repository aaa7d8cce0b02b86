"""Whole-tree kill for one stage: TERM + CONT, grace, re-snapshot, KILL every survivor.

Follows the design rules of ``docs/engine.md`` (brief: supervisor.md §3, rules 3, 7-10): the
snapshot is the union of the leader's descendants, the processes still in the stage's process
group, and (with the child subreaper on Linux, else a global scan) any process carrying the
stage's token; escalation looks at every member, never only the leader (the coreutils
``timeout`` / supervisord #1101 / circus bug); zombies count as dead; ``killpg`` is used only
while the group id is provably still ours (pgid-reuse guard); orphans re-parented to us are
reaped per pid, never with ``waitpid(-1)`` (which would steal asyncio's reaps).
"""

from __future__ import annotations

import ctypes
import os
import signal
import sys
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

import anyio
import psutil

from . import _cgroup

TOKEN_VAR = "SUPERVISE_STAGE_TOKEN"
"""Every process of a stage inherits this variable; the sweep finds escapees by it."""

POLL = 0.02
"""Seconds between liveness polls during the grace period."""
KILL_WAIT = 1.0
"""Seconds we wait for SIGKILLed members to disappear before giving up on them."""

_PR_SET_CHILD_SUBREAPER = 36
_subreaper: bool | None = None


def enable_subreaper() -> bool:
    """Make this process a child subreaper (Linux >= 3.4); idempotent.

    Orphaned descendants of our stages (double forks, ``setsid`` daemons) are then re-parented
    to us instead of init, so the sweep can find them. Returns False where unsupported (macOS,
    old kernels); the sweep then falls back to a global token scan.
    """
    global _subreaper
    if _subreaper is None:
        _subreaper = False
        if sys.platform.startswith("linux"):
            try:
                libc = ctypes.CDLL(None, use_errno=True)
                _subreaper = libc.prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0
            except (OSError, AttributeError):
                _subreaper = False
    return _subreaper


def subreaper_enabled() -> bool:
    """Whether :func:`enable_subreaper` succeeded in this process."""
    return bool(_subreaper)


def alive(proc: psutil.Process) -> bool:
    """True while ``proc`` runs; a zombie counts as dead (we never wait for init to reap)."""
    try:
        return bool(proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE)
    except psutil.Error:
        return False


def _pgid(pid: int) -> int | None:
    try:
        return os.getpgid(pid)
    except (ProcessLookupError, PermissionError):
        return None


SCAN_TTL = 0.02
"""Seconds a scan of our descendants is shared by every stage that asks (many stages being
killed at once would otherwise each rescan ``/proc`` and every environment)."""

_scan_cache: tuple[float, list[tuple[psutil.Process, int | None, str | None]]] | None = None


def _scan(fresh: bool) -> list[tuple[psutil.Process, int | None, str | None]]:
    """``(process, pgid, stage token)`` of every candidate: our descendants with the subreaper,
    every process without it. Shared for :data:`SCAN_TTL` seconds unless ``fresh``."""
    global _scan_cache
    now = time.monotonic()
    if not fresh and _scan_cache is not None and now - _scan_cache[0] < SCAN_TTL:
        return _scan_cache[1]
    pool: Iterable[psutil.Process]
    if subreaper_enabled():
        try:
            pool = psutil.Process().children(recursive=True)
        except psutil.Error:
            pool = ()
    else:
        pool = psutil.process_iter()
    me = os.getpid()
    rows: list[tuple[psutil.Process, int | None, str | None]] = []
    for proc in pool:
        if proc.pid == me:
            continue
        try:
            token = proc.environ().get(TOKEN_VAR)
        except (psutil.Error, OSError):
            token = None
        rows.append((proc, _pgid(proc.pid), token))
    _scan_cache = (now, rows)
    return rows


def snapshot(leader_pid: int | None, pgid: int, token: str,
             exclude: Iterable[int] = (), cgroup: Path | None = None,
             fresh: bool = False) -> dict[int, psutil.Process]:
    """The members of a stage right now, as ``{pid: psutil.Process}``.

    Args:
        leader_pid: the stage leader's pid while it is unreaped (None once reaped: its pid may
            then belong to an unrelated process).
        pgid: the stage's process group id (= the leader's pid).
        token: the stage's ``SUPERVISE_STAGE_TOKEN`` value.
        exclude: pids never to include (other stages' leaders, deferred runners).
        cgroup: the stage's cgroup (rule 11), whose processes are all members.
        fresh: scan now instead of reusing a scan up to :data:`SCAN_TTL` seconds old.

    Never raises for vanished or inaccessible processes; they are simply not members.
    """
    skip = set(exclude)
    skip.add(os.getpid())
    found: dict[int, psutil.Process] = {}
    if leader_pid is not None:
        try:
            leader = psutil.Process(leader_pid)
            found[leader.pid] = leader
            for child in leader.children(recursive=True):
                found[child.pid] = child
        except psutil.Error:
            pass
    if cgroup is not None:
        for pid in _cgroup.pids(cgroup):
            if pid not in found and pid not in skip:
                try:
                    found[pid] = psutil.Process(pid)
                except psutil.Error:
                    pass
    for proc, proc_pgid, proc_token in _scan(fresh):
        if proc.pid in found or proc.pid in skip:
            continue
        if proc_pgid == pgid or proc_token == token:
            found[proc.pid] = proc
    return found


def group_is_ours(leader_unreaped: bool, members: Iterable[psutil.Process], pgid: int) -> bool:
    """Whether ``killpg(pgid)`` can only hit our stage (design rule 10).

    A process group id cannot be reissued while its leader's pid is unreaped or while any
    member is still in the group; only then is the group id provably still ours.
    """
    if leader_unreaped:
        return True
    for proc in members:
        if alive(proc) and _pgid(proc.pid) == pgid:
            return True
    return False


def _signal_all(members: Iterable[psutil.Process], pgid: int, sig: int, group_ok: bool) -> None:
    if group_ok:
        try:
            os.killpg(pgid, sig)
        except (ProcessLookupError, PermissionError):
            pass
    for proc in members:
        try:
            proc.send_signal(sig)  # psutil checks for pid reuse before signalling
        except psutil.Error:
            pass


def reap_orphans(pids: Iterable[int], managed: Callable[[int], bool] = lambda pid: False) -> None:
    """``waitpid(pid, WNOHANG)`` each pid that is our child and not managed by anyio."""
    for pid in pids:
        if managed(pid):
            continue
        try:
            os.waitpid(pid, os.WNOHANG)
        except (ChildProcessError, OSError):
            pass


@dataclass(frozen=True)
class KillReport:
    """What a kill did: members found, how many needed SIGKILL, how many survived it."""

    members: int
    hard_killed: int
    survivors: int
    seconds: float


async def kill_stage(leader_pid: int, leader_unreaped: Callable[[], bool], token: str,
                     grace: float, exclude: Iterable[int] = (),
                     cgroup: Path | None = None) -> KillReport:
    """Kill every member of a stage: TERM + CONT, up to ``grace`` seconds, freeze, KILL.

    Args:
        leader_pid: the stage leader's pid (= its pgid; stages run with ``setsid``).
        leader_unreaped: returns True while the leader has not been reaped.
        token: the stage's token value.
        grace: seconds between TERM and KILL; polling every 20 ms ends the wait early when
            every member is gone.
        exclude: pids that are never members.
        cgroup: the stage's cgroup, if it has one: its processes are members, and the KILL
            phase also writes ``cgroup.kill``.

    Cancellation-safe: call it inside a shielded, bounded scope.
    """
    t0 = time.monotonic()
    exclude = frozenset(exclude)

    def members_now(fresh: bool = False) -> dict[int, psutil.Process]:
        return snapshot(leader_pid if leader_unreaped() else None, leader_pid, token, exclude,
                        cgroup, fresh)

    members = members_now()
    ok = group_is_ours(leader_unreaped(), members.values(), leader_pid)
    for sig in (signal.SIGTERM, signal.SIGCONT):
        _signal_all(members.values(), leader_pid, sig, ok)
    while time.monotonic() - t0 < grace and any(alive(p) for p in members.values()):
        await anyio.sleep(POLL)
    # Hard phase: freeze, then kill. A member that forks and exits faster than a signal
    # reaches it (a fork-and-exit chain) escapes any single snapshot; SIGSTOP freezes every
    # member found, so repeated fresh snapshots reach a fixpoint, and SIGKILL then takes the
    # frozen set at once (a stopped process cannot fork).
    end = time.monotonic() + KILL_WAIT
    frozen: set[int] = set()
    while True:
        members.update(members_now(fresh=True))
        fresh = [p for pid, p in members.items() if pid not in frozen and alive(p)]
        if not fresh or time.monotonic() >= end:
            break
        _signal_all(fresh, leader_pid, signal.SIGSTOP, group_is_ours(leader_unreaped(), fresh, leader_pid))
        frozen.update(p.pid for p in fresh)
    live = [p for p in members.values() if alive(p)]
    if cgroup is not None and _cgroup.pids(cgroup):
        _cgroup.kill(cgroup)  # whatever the snapshots saw, the cgroup holds them all
    if live:
        _signal_all(live, leader_pid, signal.SIGKILL, group_is_ours(leader_unreaped(), live, leader_pid))
    end = time.monotonic() + KILL_WAIT
    while (any(alive(p) for p in live) or (cgroup is not None and _cgroup.pids(cgroup))) \
            and time.monotonic() < end:
        await anyio.sleep(0.005)
    reap_orphans(p for p in members if p != leader_pid)
    survivors = sum(1 for p in members.values() if alive(p))
    return KillReport(len(members), len(live), survivors, time.monotonic() - t0)


def has_leftovers(leader_pid: int, token: str, exclude: Iterable[int] = (),
                  cgroup: Path | None = None) -> bool:
    """Whether any member of a stage whose leader is already reaped is still alive."""
    if cgroup is not None and _cgroup.pids(cgroup):
        return True
    return any(alive(p) for p in snapshot(None, leader_pid, token, exclude, cgroup).values())


def reap_zombie_children(keep: Iterable[int] = ()) -> int:
    """Reap every zombie child of this process except ``keep``; return how many.

    Only for a process that owns all of its children (the ``supervise`` CLI, the deferred
    runner): an embedding program's own children must be left to it.
    """
    skip = set(keep)
    count = 0
    try:
        children = psutil.Process().children()
    except psutil.Error:
        return 0
    for child in children:
        if child.pid in skip:
            continue
        try:
            if child.status() == psutil.STATUS_ZOMBIE:
                os.waitpid(child.pid, os.WNOHANG)
                count += 1
        except (psutil.Error, ChildProcessError, OSError):
            continue
    return count
