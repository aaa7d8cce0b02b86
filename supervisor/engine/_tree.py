"""The watchdog: who belongs to which stage, continuous reaping, caps, and a bounded kill.

Follows the design rules of ``docs/engine.md`` (brief: supervisor.md §3, rules 3, 7-11) and
issue 10 ("the watchdog holds under stress"):

- **Membership** comes from one process table per scan (:mod:`supervisor.engine._proctable`): a
  process is a member of a stage when it is in the stage's session or process group, descends
  from a member, or carries the stage's token (read only for our unclaimed descendants with
  the subreaper, for unclaimed processes without it). Scans run in a worker thread under a
  deadline and are shared by every stage (:class:`Watch`); nothing unbounded runs on the
  event loop.
- **Reaping**: with the child subreaper, orphans adopted from stages are reaped while the
  digest runs (:meth:`Watch.reap`), never with ``waitpid(-1)`` and never a pid we spawned
  ourselves (the engine reaps those, :mod:`supervisor.engine._spawn`).
- **The kill** (:func:`kill_stage`) has a hard wall-clock bound: TERM + CONT, grace, then
  freeze (cgroup ``cgroup.freeze``, else SIGSTOP to the process group and to each member
  outside it, repeated on fresh scans until nothing new appears), then SIGKILL per process
  group before per process (``cgroup.kill`` when there is a cgroup). ``killpg`` is used only
  while the group id is provably ours (pgid-reuse guard); a pid is signalled only while its
  start stamp is the one we saw (pid-reuse guard).
"""

from __future__ import annotations

import math
import os
import signal
import time
from collections import deque
from collections.abc import Callable, Iterable
from functools import partial
from pathlib import Path

from .._record import field, mutable_record, record
from . import _cgroup, _loop, _proctable
from ._proctable import (Gone, Row, environ_of, environ_value, name_of, scan, start_stamp, stat,
                         stdio_pipes)
from ._reaper import (HARD_PHASE, KILL_WAIT, MONITOR_MAX_PERIOD, POLL, REAP_BATCH, TOKEN_VAR,
                      our_children, subreaper_enabled)

from ..config._context import DETACH_VAR as DETACH_VAR  # honoured here, set by a stage

FULL_SCAN_PERIOD = 5.0
"""On the portable path (psutil rows), the watchdog's periodic scans are incremental (new
pids, plus every stage's members for the caps) and read the whole table again at most
this often, in seconds (a pid reused in between keeps its old row until then)."""
MONITOR_FIRST = 0.1
"""Seconds from the watchdog's start to its first scan (the shortest period between two),
with the subreaper: the stages of most session starts end sooner, and their leftover checks
then need no scan (:meth:`Watch._listed`), so such a digest reads the process table not once
(a few milliseconds per hundred processes); a cap is still checked no later than between two
periodic scans. Without the subreaper the first scan comes at once: the leftover checks scan
anyway, and a first full scan inside one (psutil rows on the portable path, slow on a loaded
host) could outlast its deadline."""
READ_TAKEN = 64
"""Most processes the kill takes from the token cache at its SIGKILL (:meth:`Watch._take_read`),
newest first: what a scan still running had found of the stage."""
LEFTOVER_SCANS = 6
"""Most rounds of scans that look for leftovers of a stage whose leader exited. Each round is
two fresh scans in one worker thread, repeated there up to ``LEFTOVER_SCANS - 2`` more times
while they see churn (:meth:`Watch.refresh`, ``again`` and ``settle``); without churn two
fresh scans settle it."""


def _live(pid: int, start: float | None = None) -> bool:
    row = stat(pid)
    return row is not None and not row.zombie and (start is None or row.start == start)


def group_is_ours(leader_unreaped: bool, members: Iterable[int], pgid: int) -> bool:
    """Whether ``killpg(pgid)`` can only hit our stage (design rule 10).

    A process group id cannot be reissued while its leader's pid is unreaped or while any
    member is still in the group; only then is the group id provably still ours.
    ``members`` are pids; each is checked now.
    """
    if leader_unreaped:
        return True
    for pid in members:
        row = stat(pid)
        if row is not None and not row.zombie and row.pgid == pgid:
            return True
    return False


def _killpg(pgid: int, sig: int) -> bool:
    try:
        os.killpg(pgid, sig)
        return True
    except (ProcessLookupError, PermissionError):
        return False


def _kill_checked(pid: int, start: float, sig: int) -> None:
    """Signal ``pid`` only while it is still the process we saw (same start stamp)."""
    if start_stamp(pid) != start:
        return
    try:
        os.kill(pid, sig)
    except (ProcessLookupError, PermissionError):
        pass


@mutable_record
class StageTree:
    """One running stage as the watchdog knows it.

    ``leader`` is the leader's pid (= its process group and session id: stages run with
    ``setsid``); ``leader_unreaped()`` is True until the engine has reaped it; ``token`` is its
    ``SUPERVISE_STAGE_TOKEN``; ``cgroup`` its cgroup, if any; ``max_tasks`` and ``max_memory``
    (bytes) its caps, None for none.
    """

    leader: int
    leader_unreaped: Callable[[], bool]
    token: str
    cgroup: Path | None = None
    max_tasks: int | None = None
    max_memory: int | None = None
    members: dict[int, Row] = field(default_factory=dict)
    """Live members at the last scan (pid -> row)."""
    group_verified: bool = False
    """The process group was provably ours when the current kill began (pgid-reuse guard)."""
    over_cap: str | None = None
    """Set by the watchdog: which cap the stage went over (``"max_tasks"``/``"max_memory"``)."""
    on_cap: Callable[[], None] | None = None
    detach_mark: str | None = None
    """For a built-in stage, its name: a child that left the stage's session and carries
    ``SUPERVISE_DETACHED_FROM=<name>`` (:data:`DETACH_VAR`) is not a member, nor are its
    descendants. None (configured commands): nothing detaches."""
    pipes: frozenset[int] = frozenset()
    """Inode numbers of the pipes the stage's leader writes its stdout and stderr to: a
    process holding one as its own stdin, stdout or stderr inherited it from this stage, so
    an adopted orphan that left every other mark (``env -i setsid -f``) is still told to be
    this stage's (:meth:`Watch._pipe_owner`)."""
    adopts_all: bool = False
    """``supervise run``'s one command (and a digest's end-of-run orphan sweep): every child
    the subreaper adopted that is no other stage's leader, no excluded pid and no built-in's
    detach is a member, with its descendants, token or not. An orphan that cleared its
    environment (``env -i``) and left its session (``setsid``) carries nothing of its stage;
    with one command it can only be that command's."""


class _ScanJob:
    """One scan's thread as the watchdog tracks it, from its start to its end (an abandoned
    one too): ``cut`` set ends it at its next row; ``background`` marks the periodic scans
    (the monitor's, ``supervise run``'s prefetch), which a kill or a leftover check may cut."""

    __slots__ = ("cut", "background")

    def __init__(self, background: bool) -> None:
        self.cut = False
        self.background = background


class _SharedListing:
    """One listing of our children, taken once for the stages that asked in one tick: the
    adoptees and whether the listing was complete (:meth:`Watch._listed`)."""

    __slots__ = ("event", "rows", "complete")

    def __init__(self) -> None:
        self.event = _loop.Event()
        self.rows: list[tuple[Row, str | None]] | None = None
        self.complete = False


@record
class KillReport:
    """What a kill did: members found, how many needed SIGKILL (alive when the hard phase
    began), how many survived it, and its duration in seconds."""

    members: int
    hard_killed: int
    survivors: int
    seconds: float

    @property
    def notable(self) -> bool:
        """Whether it is worth a log line: SIGKILL was needed or something survived it."""
        return bool(self.hard_killed or self.survivors)

    def describe(self) -> str:
        """One line: ``the kill reached 3 processes: 2 needed SIGKILL, 1 survived it
        (1.25 s)``."""
        survived = (f", {self.survivors} SURVIVED it (still running: see `ps`)"
                    if self.survivors else ", none survived it")
        return (f"the kill reached {self.members} process(es): {self.hard_killed} needed "
                f"SIGKILL{survived} ({self.seconds:.2f} s)")

    def as_dict(self) -> dict[str, float]:
        """``{"members", "hard_killed", "survivors", "seconds"}`` for a JSON document."""
        return {"members": self.members, "hard_killed": self.hard_killed,
                "survivors": self.survivors, "seconds": round(self.seconds, 3)}


class Watch:
    """The watchdog of one digest: shared scans, continuous reaping, caps, membership.

    Create one per digest (inside its event loop), :meth:`add` each stage after its spawn,
    run :meth:`monitor` in the digest's task group while it runs. ``exclude`` returns pids
    that are never members (deferred runners).
    """

    def __init__(self, exclude: Callable[[], set[int]] = set) -> None:
        self.stages: dict[str, StageTree] = {}
        self.protected: set[int] = set()
        """Pids this process spawned itself (stage leaders): the engine reaps them, never us."""
        self._leaders: set[int] = set()
        """Every stage leader's pid :meth:`add` was given (the rest of :attr:`protected` is the
        guardian's, alive until the digest's end)."""
        self.spawning = 0
        """Spawns in flight: until they return, a new leader's pid is not yet protected."""
        self.exclude = exclude
        self.table: dict[int, Row] = {}
        self.listed: set[int] = set()
        """The pids the scan of :attr:`table` listed, read or not (a scan cut short read only
        some): where the portable path's newest pids begin (:func:`_proctable._last_pid`)."""
        self.scanned_at = -math.inf
        self.scan_seconds = 0.0
        self.reaped = 0
        self.last_complete = False
        self.last_churn = 0
        """New processes the last applied scan found gone before it could classify them."""
        self.full_at = -math.inf
        """When the last applied full scan began (the loop's clock), complete or cut short by
        its deadline: the monitor's scans stay incremental from its table for
        :data:`FULL_SCAN_PERIOD` seconds after it. Counting only complete ones made every
        periodic scan of a starved portable host a full one, each cut short in turn (a
        psutil row costs ~10 ms at load 16: 60 of 150 rows a second), so no scan ever read
        a fork-and-exit chain's new generation in time."""
        self.began: deque[float] = deque(maxlen=64)
        """When each of the last applied scans began (the loop's clock), oldest first."""
        self._tokens: dict[tuple[int, float], str | None] = {}
        self._ever: dict[int, str] = {}
        self._ever_tokens: set[str] = set()
        self._sticky: dict[tuple[int, float], str] = {}
        self._detach: dict[tuple[int, float], bool] = {}
        """Processes seen to be a built-in stage's deliberate detach (positive answers only)."""
        self.focus: set[str] = set()
        self.freezing: set[str] = set()
        """Tokens of the stages in their freeze phase: every scan stops their members at once."""
        self._tg: _loop.TaskGroup | None = None
        """Tokens of the stages being killed or checked right now."""
        self._inflight: tuple[_loop.Event, float, _ScanJob] | None = None
        self._jobs: set[_ScanJob] = set()
        """Scans whose thread still runs, abandoned ones included (added on the loop, removed
        by the thread at its end): a new scan waits for them, never two at once."""
        self._listing: _SharedListing | None = None
        """The children listing the leftover checks of this tick wait for (:meth:`adopted_shared`)."""
        self._held: dict[str, dict[int, float]] = {}
        """Processes a scan's thread stopped as members of a stage in its freeze (token ->
        pid -> start stamp), before any applied scan listed them: the kill's SIGKILL reaches
        them whatever becomes of that scan's result (an abandoned or a dropped one's)."""
        self._killed: dict[str, StageTree] = {}
        """Stages whose kill has reached its SIGKILL: a scan's thread that finds a process of
        one of them later kills it on sight (a scan still running when the kill returned)."""
        self._pipes: dict[int, str] = {}
        """Inode of every watched stage's output pipe -> its token (kept after the stage's end:
        a pipe's inode is not reused while a process still holds it)."""
        self.by_pipe: dict[str, dict[int, tuple[Row, str]]] = {}
        """Adopted orphans told to be a stage's by its output pipe alone (token -> pid ->
        (row, name)): the stage's log names them when the stage's sweep kills them."""
        self._me = os.getpid()
        self.swept_orphans: list[tuple[Row, str]] = []
        """What :meth:`sweep_orphans` killed: each orphan's row and name."""

    # -- membership ---------------------------------------------------------------------
    def add(self, tree: StageTree) -> None:
        """Watch a freshly spawned stage."""
        self.stages[tree.token] = tree
        self.protected.add(tree.leader)
        self._leaders.add(tree.leader)
        for inode in tree.pipes:
            self._pipes[inode] = tree.token

    def discard(self, tree: StageTree) -> None:
        """Stop watching a stage (its leader is reaped, its tree swept)."""
        self.stages.pop(tree.token, None)

    def _attribute(self, rows: dict[int, Row], limit: float, sessions: dict[int, str],
                   exclude: set[int]) -> dict[str, dict[int, Row]]:
        known = set(sessions.values())
        owner: dict[int, str] = {}
        children: dict[int, list[int]] = {}
        for row in rows.values():
            children.setdefault(row.ppid, []).append(row.pid)
            if row.pid in exclude or row.zombie:
                continue
            token = sessions.get(row.sid) or sessions.get(row.pgid) or self._sticky.get(
                (row.pid, row.start)) or (self._ever.get(row.ppid) if row.ppid not in rows else None)
            if token is not None:
                owner[row.pid] = token
        # Escapees (setsid, then maybe a double fork): find them by token.
        candidates: list[int] = []
        if subreaper_enabled():
            # our descendants, and orphans whose parent is gone (on their way to us)
            stack = list(children.get(self._me, ()))
            stack += [r.pid for r in rows.values() if r.ppid not in rows and r.ppid > 1]
            while stack:
                pid = stack.pop()
                if pid in owner or pid in exclude:
                    continue
                candidates.append(pid)
                stack.extend(children.get(pid, ()))
        else:
            candidates = [pid for pid in rows if pid not in owner and pid not in exclude]
        # The newest first (by start stamp, not pid: pids wrap around), so a scan that runs
        # out of time has read the likeliest escapees.
        candidates.sort(key=lambda pid: rows[pid].start, reverse=True)
        for pid in candidates:
            row = rows[pid]
            if row.zombie:
                continue
            key = (pid, row.start)
            if key not in self._tokens:
                if time.monotonic() > limit:
                    break
                self._tokens[key] = environ_value(pid, TOKEN_VAR)
            token = self._tokens[key]
            if token in known:
                owner[pid] = token
        # With one command (``adopts_all``), each adopted child is its (env -i + setsid).
        sole = next((t.token for t in list(self.stages.values()) if t.adopts_all), None)
        if sole is not None and subreaper_enabled():
            for pid in children.get(self._me, ()):
                if (pid not in owner and pid not in exclude and pid not in self.protected
                        and not rows[pid].zombie):
                    owner[pid] = sole
        # An adopted child that left every mark but holds a stage's output pipe is its.
        if subreaper_enabled() and self._pipes:
            for pid in children.get(self._me, ()):
                if (pid not in owner and pid not in exclude and pid not in self.protected
                        and not rows[pid].zombie):
                    token = self._pipe_owner(pid, rows[pid])
                    if token is not None and token in known:
                        owner[pid] = token
        # Descendants of a member are members (a child that cleared its environment).
        stack = list(owner)
        while stack:
            pid = stack.pop()
            for child in children.get(pid, ()):
                if child not in owner and child not in exclude and not rows[child].zombie:
                    owner[child] = owner[pid]
                    stack.append(child)
        self._release_detached(owner, rows, children)
        found: dict[str, dict[int, Row]] = {token: {} for token in known}
        for pid, token in owner.items():
            if token not in found:  # sticky from a stage no longer watched (discarded)
                continue
            found[token][pid] = rows[pid]
            self._ever[pid] = token  # its children outlive it: they are members too
            self._sticky[(pid, rows[pid].start)] = token  # once a member, always (re-parented)
            if pid not in sessions:
                self._ever_tokens.add(token)  # the stage had more than its leader
        if len(self._ever) > 65536:
            self._ever.clear()
            self._sticky.clear()
        if len(self._tokens) > 65536:
            self._tokens.clear()
            self._detach.clear()
        return found

    def _pipe_owner(self, pid: int, row: Row) -> str | None:
        """The token of the stage whose output pipe ``pid`` (an adopted child, its ``row``)
        holds as its stdin, stdout or stderr (:func:`~._proctable.stdio_pipes`), noted in
        :attr:`by_pipe`; None for none. Three ``readlink`` calls; never raises."""
        for inode in stdio_pipes(pid):
            token = self._pipes.get(inode)
            if token is not None:
                self.by_pipe.setdefault(token, {}).setdefault(pid, (row, name_of(pid)))
                return token
        return None

    def _release_detached(self, owner: dict[int, str], rows: dict[int, Row],
                          children: dict[int, list[int]]) -> None:
        """Drop from ``owner`` (pid -> token) each built-in stage's deliberate detach and its
        descendants: a member out of the stage's session whose environment carries
        :data:`DETACH_VAR` set to the stage's name. Checked on every scan, not only the first:
        a scan that lands between the detaching child's fork and its ``setsid``/``exec`` sees it
        in the stage's session with the stage's environment (and makes it a sticky member), so
        only a positive answer is cached."""
        # This runs in the scan's worker thread while the event loop adds and discards
        # stages: copy the dict in one C-level step (no bytecode runs in between, so the loop
        # cannot mutate it mid-copy), and iterate the copy.
        marked = {t.token: t for t in list(self.stages.values()) if t.detach_mark is not None}
        if not marked:
            return
        for pid, token in list(owner.items()):
            tree = marked.get(token)
            row = rows[pid]
            if tree is None or owner.get(pid) != token:
                continue
            key = (pid, row.start)
            if key not in self._detach:  # a known detach stays one (this row may be stale)
                if row.sid == tree.leader or environ_value(pid, DETACH_VAR) != tree.detach_mark:
                    continue
                self._detach[key] = True
            stack = [pid]
            while stack:
                gone = stack.pop()
                if owner.get(gone) == token:
                    del owner[gone]
                    self._sticky.pop((gone, rows[gone].start), None)
                    self._ever.pop(gone, None)
                    stack.extend(children.get(gone, ()))

    def _drop_detached(self, tree: StageTree) -> None:
        """Drop from ``tree.members`` each built-in stage's deliberate detach and its
        descendants, judged now, before a leftover check or a kill acts on the members.
        The members come from the last scan, which may have caught the detaching child
        between its fork and its ``exec`` (in the stage's session, with the stage's token,
        without :data:`DETACH_VAR`): a sticky member until a later scan releases it, and
        the kill's first TERM goes to the members as they are. A fresh row (out of the
        stage's session) and the mark in its environment release it first
        (:meth:`_detached`). Bounded by the members; never raises."""
        if tree.detach_mark is None or len(tree.members) <= 1:
            return
        released: set[int] = set()
        for pid, row in list(tree.members.items()):
            if pid == tree.leader:
                continue
            if not self._detach.get((pid, row.start)):
                fresh = stat(pid)  # the member's row may predate its exec
                if (fresh is None or fresh.start != row.start
                        or not self._detached(fresh, tree.token)):
                    continue
            released.add(pid)
        grew = bool(released)
        while grew:  # its descendants (by the members' own rows) go with it
            grew = False
            for pid, row in tree.members.items():
                if pid not in released and row.ppid in released:
                    released.add(pid)
                    grew = True
        for pid in released:
            row = tree.members.pop(pid)
            self._sticky.pop((pid, row.start), None)
            self._ever.pop(pid, None)

    def _scan_sync(self, limit: float, sessions: dict[int, str], exclude: set[int],
                   previous: dict[int, Row] | None, reread: set[int], first: set[int],
                   began: float, job: _ScanJob | None = None) -> tuple[bool, int | None]:
        """The scan itself (in a worker thread). It applies its own result, so a scan whose
        waiter gave up at its deadline still updates the members when it completes (under a
        heavy load a scan can outlast every short wait); a result older than the one already
        applied is dropped. Returns ``(complete, churn)``: whether this scan read the whole
        table **and** its result was applied, and the new processes it found gone before it
        could classify them (None when its result was dropped: a scan another thread began
        later, e.g. an abandoned one of an earlier :meth:`refresh`, had applied its own, so
        this one neither updated the members nor says anything about churn now)."""
        t0 = time.monotonic()
        churn = _proctable.CHURN[0]
        # Without the subreaper an escapee is found only by its token: read it as soon as
        # the row is read, newest first, and freeze a member of a stage being killed at once
        # (a fork-and-exit chain's generation lives a few ms: reading every row first and
        # the tokens after let it fork and exit in between).
        classify = None if subreaper_enabled() else partial(self._classify, exclude)
        if classify is not None and self.freezing:
            self._hunt(limit, job, exclude)
        listing = _proctable.list_pids()
        rows, complete = scan(limit, previous, reread, first, classify,
                              None if job is None else (lambda: job.cut), listing,
                              self.listed if previous is not None else None)
        churn = _proctable.CHURN[0] - churn
        found = self._attribute(rows, limit, sessions, exclude)
        for token in list(self.freezing):
            # Freeze as found, in this thread: a fork-and-exit chain's head lives a few ms,
            # and handing it to the event loop first can take longer than that on a starved
            # host.
            for row in found.get(token, {}).values():
                if not row.stopped:
                    self._hold(row.pid, row.start, token)
        for token in list(self._killed):
            # A scan begun before that stage's kill sent SIGKILL, applied (or dropped) after
            # it: what it found of the stage dies now, not never (the stage is discarded).
            for row in found.get(token, {}).values():
                if not self._detach.get((row.pid, row.start)):
                    _kill_checked(row.pid, row.start, signal.SIGKILL)
        if began < self.scanned_at:
            return False, None
        self.table = rows
        self.listed = set(rows if listing is None else listing)
        if previous is None:
            self.scan_seconds = time.monotonic() - t0
        self.scanned_at = began
        self.began.append(began)
        self.last_complete = complete
        self.last_churn = churn
        if previous is None:
            self.full_at = began
        for token, members in found.items():
            tree = self.stages.get(token)
            if tree is not None:
                if not complete:  # cut by its deadline: members it did not read stay members
                    members = {**{pid: r for pid, r in tree.members.items() if pid not in rows},
                               **members}
                tree.members = members
        return complete, churn

    def _classify(self, exclude: set[int], row: Row) -> bool:
        """Read the token of a freshly read process at once (in the scan's thread, without
        the subreaper) and SIGSTOP it when it belongs to a stage in its freeze phase.
        Returns False when the process is gone (a zombie, or exited before its read)."""
        if row.zombie:
            return False
        if row.pid in exclude:
            return True
        key = (row.pid, row.start)
        if key not in self._tokens:
            try:
                self._tokens[key] = environ_of(row.pid, TOKEN_VAR)
            except Gone:
                now = stat(row.pid)  # a kernel thread has no environment either, yet lives
                if now is None or now.zombie or now.start != row.start:
                    return False
                self._tokens[key] = None
        token = self._tokens[key]
        if (token is not None and (token in self.freezing or token in self._killed)
                and not row.stopped and not self._detached(row, token)):
            self._hold(row.pid, row.start, token)
        return True

    def _hold(self, pid: int, start: float, token: str) -> None:
        """From a scan's thread: SIGSTOP a member of a stage in its freeze and note it in
        :attr:`_held` for the kill's SIGKILL; SIGKILL it when that stage's kill has reached
        its SIGKILL already (checked after the note: the kill sets :attr:`_killed` before it
        takes the notes, so one of the two reaches it)."""
        _kill_checked(pid, start, signal.SIGSTOP)
        self._held.setdefault(token, {})[pid] = start
        if token in self._killed:
            _kill_checked(pid, start, signal.SIGKILL)

    def _hunt(self, limit: float, job: _ScanJob | None, exclude: set[int]) -> None:
        """Without the subreaper, while a stage is in its freeze (a scan's thread, before its
        rows are read): list the table, read only the start stamp and token of each pid the
        last applied table lacks, newest first, and stop each process of a stage in its
        freeze at once (:meth:`_hold`); list again while a round stopped one (its successor
        may have been forked just before), up to 16 rounds, ``limit`` (``time.monotonic``)
        or a cut. A fork-and-exit chain's generation lives a few ms; a full psutil row costs
        ~0.15 ms of CPU, and on a starved host (4% of a core at load 16) the rows of the
        processes newer than it took longer than its life, so no scan stopped it (the chain
        survived 8 of 10 kills at load 16). Reading the tokens first costs a third of that.
        Never raises."""
        probed: set[int] = set()
        known, before = self.table, self.listed or None
        for _ in range(16):
            pids = _proctable.list_pids()
            if pids is None:
                return
            stopped = False
            for pid in _proctable.newest_first(pids, known, before):
                if time.monotonic() > limit or (job is not None and job.cut):
                    return
                if pid in probed or pid in exclude:
                    continue
                probed.add(pid)
                got = _proctable.marks(pid, (TOKEN_VAR, DETACH_VAR))
                if got is None:
                    continue
                start, (token, mark) = got
                self._tokens[(pid, start)] = token  # the row's classification reuses it
                if token is None or not (token in self.freezing or token in self._killed):
                    continue
                stage = self.stages.get(token) or self._killed.get(token)
                if (stage is not None and stage.detach_mark is not None
                        and mark == stage.detach_mark):
                    try:
                        if os.getsid(pid) != stage.leader:
                            continue  # a built-in's deliberate detach (judged on its row later)
                    except OSError:
                        continue
                self._hold(pid, start, token)
                stopped = True
            if not stopped:
                return

    def _detached(self, row: Row, token: str | None) -> bool:
        """Whether ``row``, attributed to the stage of ``token`` by a sticky membership or
        a cached token read, is that built-in stage's deliberate detach: out of the stage's
        session with :data:`DETACH_VAR` naming it now (remembered). A scan or a token read
        that caught the detaching child between its fork and its ``exec`` saw the stage's
        session and environment; both outlive the ``exec`` in our caches (the start stamp
        does not change), so the current mark decides. Never raises."""
        key = (row.pid, row.start)
        if self._detach.get(key):
            return True
        stage = (self.stages.get(token) or self._killed.get(token)) if token is not None else None
        if (stage is None or stage.detach_mark is None or row.sid == stage.leader
                or environ_value(row.pid, DETACH_VAR) != stage.detach_mark):
            return False
        self._detach[key] = True
        return True

    async def refresh(self, deadline: float, max_age: float = 0.0,
                      started_after: float | None = None, incremental: bool = False,
                      every_member: bool = False, again: int = 0, settle: int = 0,
                      background: bool = False) -> bool:
        """Scan the process table in a worker thread and update every stage's members.

        ``deadline`` is an the loop's clock value: the scan returns partial by then, and this call
        returns by then whatever happens (a scan still running is abandoned). Concurrent
        callers share one scan unless it started before ``started_after`` (the loop's clock); a
        table younger than ``max_age`` seconds is reused. ``incremental`` reads only new pids
        and the members of the stages being killed or checked (of every stage with
        ``every_member``: the caps need their sizes; see :func:`supervisor.engine._proctable.scan`).
        ``again`` more incremental scans follow the first one at once in the same worker
        thread, then up to ``settle`` more while the last one saw churn (a new process gone
        before it was read, :data:`supervisor.engine._proctable.CHURN`)
        (:meth:`_scan_settled`): a scan that must follow a scan costs no round trip through
        the event loop (tens of ms on a loaded host, whose other processes churn all the
        time).
        ``background`` marks a periodic scan (the monitor's): a caller that is not one and
        needs a scan begun later than the one in flight cuts it at its next row (its partial
        result is applied) instead of waiting for its end, and one scan thread runs at a time,
        an abandoned one included (on a starved portable host a full psutil scan takes a
        second: a kill's freeze waited behind the monitor's, and scans started beside
        abandoned ones halved each other's share of the CPU).
        Returns True when a complete scan (or a shared one) updated the members by the
        deadline; a scan cut short keeps the members it did not read, and a scan whose result
        was dropped (a later one had been applied) does not count.
        """
        complete, _ = await self._refresh(deadline, max_age, started_after, incremental,
                                          every_member, again, settle, background)
        return complete

    async def _refresh(self, deadline: float, max_age: float = 0.0,
                       started_after: float | None = None, incremental: bool = False,
                       every_member: bool = False, again: int = 0,
                       settle: int = 0, background: bool = False) -> tuple[bool, int | None]:
        """:meth:`refresh`, returning ``(complete, churn)``: ``churn`` is the churn of the
        last scan this call applied itself (:meth:`_scan_settled`), of the shared scan's when
        it joined one, None when it applied none (never another thread's scan's count read
        after the fact: an abandoned scan of an earlier call may apply its result meanwhile)."""
        if _loop.current_time() - self.scanned_at <= max_age:
            return True, self.last_churn
        complete: tuple[bool, int | None] = (False, None)
        with _loop.move_on_at(deadline):
            while self._inflight is not None:
                event, began, job = self._inflight
                fresh = started_after is None or began >= started_after
                if not fresh and not background and job.background:
                    job.cut = True
                await event.wait()
                if fresh:
                    return self.last_complete, self.last_churn
            while self._jobs:  # an abandoned scan's thread still runs: it ends at its deadline
                if not background:
                    for running in list(self._jobs):
                        running.cut |= running.background
                await _loop.sleep(0.005)
            event = _loop.Event()
            job = _ScanJob(background)
            self._inflight = (event, _loop.current_time(), job)
            try:
                remaining = max(0.0, deadline - _loop.current_time())
                limit = time.monotonic() + remaining
                sessions = {t.leader: t.token for t in self.stages.values()}
                exclude = set(self.exclude()) | {self._me}
                previous = self.table if incremental and self.table else None
                # Re-read only the stages being killed or checked (their members' states
                # matter); the others keep their rows (a member's group and session
                # attribution stays right even when stale).
                focus = [t for t in self.stages.values() if every_member or t.token in self.focus]
                reread = {pid for t in focus for pid in t.members}
                reread.update(t.leader for t in focus)
                first = set(sessions) | {pid for t in self.stages.values() for pid in t.members}
                self._jobs.add(job)
                try:
                    complete = await _loop.run_sync_in_thread(
                        self._scan_settled, limit, sessions, exclude, previous, reread, first,
                        self._inflight[1], again, settle, job, abandon_on_cancel=True)
                except _loop.Cancelled:
                    raise  # abandoned: its thread runs on and leaves ``_jobs`` at its end
                except BaseException:
                    self._jobs.discard(job)  # no thread could start (or it raised)
                    raise
            finally:
                self._inflight = None
                event.set()
        return complete

    def _scan_settled(self, limit: float, sessions: dict[int, str], exclude: set[int],
                      previous: dict[int, Row] | None, reread: set[int], first: set[int],
                      began: float, again: int, settle: int,
                      job: _ScanJob | None = None) -> tuple[bool, int | None]:
        """:meth:`_scan_sync`, then (worker thread) ``again`` more incremental scans and up
        to ``settle`` more while the last one saw churn, each begun after the one before it
        ended, until ``limit`` (``time.monotonic``). Returns ``(complete, churn)``: whether
        one of them read the whole table and had its result applied, and the churn of the
        last one applied (None when none was). Only this thread's own scans count: a scan
        whose result was dropped (another thread, e.g. an abandoned earlier round, applied
        a later one) neither completes the round nor settles it, and the churn tested is
        the local count, never ``last_churn``, which that other thread may have written.
        ``job`` ends the round at its next row when cut, and leaves :attr:`_jobs` at the end."""
        try:
            t0 = time.monotonic()
            complete, churn = self._scan_sync(limit, sessions, exclude, previous, reread,
                                              first, began, job)
            for extra in range(again + settle):
                if ((extra >= again and churn == 0) or time.monotonic() >= limit
                        or (job is not None and job.cut)):
                    break
                done, churn = self._scan_sync(limit, sessions, exclude, self.table, reread,
                                              first, began + (time.monotonic() - t0), job)
                complete |= done
            return complete, churn
        finally:
            if job is not None:
                self._jobs.discard(job)

    # -- reaping ------------------------------------------------------------------------
    def reap(self) -> int:
        """Reap zombie children adopted from stages (subreaper only); return how many.

        A child is reaped only when it is not a pid we spawned (the engine reaps those: reaping
        one here would yield "returncode 255"). ``waitid(WNOWAIT)`` peeks at one zombie
        without reaping it; when the first zombie is one of ours, the last table names the
        others. Bounded: at most :data:`REAP_BATCH` per call. Never raises.
        """
        if not subreaper_enabled():
            return 0
        count = 0
        blocked = False
        flags = os.WEXITED | os.WNOHANG | os.WNOWAIT
        while count < REAP_BATCH:
            try:
                info = os.waitid(os.P_ALL, 0, flags)
            except (ChildProcessError, OSError):
                break
            if info is None or info.si_pid == 0:
                break
            if not self._may_reap(info.si_pid):
                blocked = True
                break
            count += self._reap_one(info.si_pid)
        if blocked:
            for row in list(self.table.values()):
                if row.ppid == self._me and row.zombie and self._may_reap(row.pid):
                    count += self._reap_one(row.pid)
        self.reaped += count
        return count

    def _may_reap(self, pid: int) -> bool:
        if pid in self.protected:
            return False
        if self.spawning:
            row = stat(pid)  # a leader not yet protected is a session leader
            return row is not None and row.sid != pid
        return True

    @staticmethod
    def _reap_one(pid: int) -> int:
        try:
            got, _ = os.waitpid(pid, os.WNOHANG)
        except (ChildProcessError, OSError):
            return 0
        return 1 if got else 0

    async def reaper(self) -> None:
        """Reap adopted orphans every :data:`POLL` seconds until cancelled (subreaper only)."""
        if not subreaper_enabled():
            return
        while True:
            self.reap()
            await _loop.sleep(POLL)

    # -- caps ---------------------------------------------------------------------------
    async def monitor(self) -> None:
        """Scan periodically (off the loop) and enforce ``max_tasks`` / ``max_memory``.

        With the subreaper the first scan comes :data:`MONITOR_FIRST` seconds in (at once
        without it); then the period adapts to the
        scan's cost (four times its duration, at least 0.1 s, at most
        :data:`MONITOR_MAX_PERIOD`), so on an idle host the watchdog takes at most about a
        fifth of a core. A stage over a cap gets
        ``over_cap`` set and its ``on_cap`` called once. Runs until cancelled.
        """
        async with _loop.create_task_group() as tg:
            self._tg = tg
            try:
                await self._monitor()
            finally:
                self._tg = None

    async def _monitor(self) -> None:
        if subreaper_enabled():  # else the leftover checks scan: the first full scan goes first
            await _loop.sleep(MONITOR_FIRST)
        while True:
            if self.stages:
                now = _loop.current_time()
                # psutil rows cost milliseconds each on a starved host: read only new pids
                # and the stages' members, and the whole table now and then.
                cheap = not _proctable.PROCFS and now - self.full_at < FULL_SCAN_PERIOD
                await self.refresh(now + 1.0, incremental=cheap, every_member=cheap,
                                   background=True)
                for tree in list(self.stages.values()):
                    self._check_caps(tree)
            await _loop.sleep(min(max(0.1, 4 * self.scan_seconds), MONITOR_MAX_PERIOD))

    def _check_caps(self, tree: StageTree) -> None:
        if tree.over_cap is not None:
            return
        which = None
        if tree.cgroup is not None:
            which = _cgroup.over_cap(tree.cgroup)
        if which is None:
            live = [r for r in tree.members.values() if not r.zombie]
            if tree.max_tasks is not None and sum(r.threads for r in live) > tree.max_tasks:
                which = "max_tasks"
            elif tree.max_memory is not None and sum(r.rss for r in live) > tree.max_memory:
                which = "max_memory"
        if which is not None:
            tree.over_cap = which
            if tree.on_cap is not None:
                tree.on_cap()

    # -- the kill -----------------------------------------------------------------------
    def _group_ok(self, tree: StageTree) -> bool:
        if tree.group_verified and _killpg(tree.leader, 0):
            # Verified ours when this kill began, and not empty since: the kernel keeps a pid
            # number while any process still has it as its process group, so the id cannot
            # have been reissued in between (a reissue needs the group emptied first and the
            # whole pid space cycled within this bounded kill).
            return True
        in_group = [r.pid for r in self.table.values() if r.pgid == tree.leader]
        return group_is_ours(tree.leader_unreaped(), [*tree.members, *in_group], tree.leader)

    def _scan_soon(self, deadline: float) -> None:
        """Start a scan in the background (bounded by ``deadline``) unless one is under way."""
        if self._inflight is not None or self._tg is None:
            return
        try:
            self._tg.start_soon(self.refresh, deadline)
        except RuntimeError:  # the watchdog's task group is closing (a cancelled digest)
            pass

    def adopted(self, tree: StageTree) -> list[Row]:
        """Live processes of ``tree`` among this process's direct children (subreaper only):
        with the subreaper every orphan of a stage becomes our child the moment its parent
        exits, so a fork-and-exit chain's current generation is found here with one small
        read instead of a scan of the whole table (which a generation living a few ms can
        outrun on a starved host). A child belongs to ``tree`` when a scan made it a member
        or it carries the stage's token; stage leaders, excluded pids (deferred runners) and
        built-in detaches never do. A fresh listing on every call (the kill sequence's
        polls); :meth:`adopted_shared` shares one among the stages asking in the same tick.
        Bounded by the number of children; never raises."""
        return [row for row, token in self._adoptees()
                if token == tree.token or (token is None and tree.adopts_all)]

    async def adopted_shared(self, tree: StageTree) -> list[Row]:
        """:meth:`adopted`, with one listing of our children for every caller that asks in
        the same event-loop tick (:meth:`_listed_shared`). The listing is taken after every
        joiner asked, so it is as fresh for each as its own would have been (its leader has
        exited before it asked); with 500 stages ending together this is one read of 500
        children per tick instead of one per stage (issue 13: the quadratic part of the
        leftover checks)."""
        if not subreaper_enabled():
            return []
        _, rows = await self._listed_shared()
        return [row for row, token in rows
                if token == tree.token or (token is None and tree.adopts_all)]

    async def _listed_shared(self) -> tuple[bool, list[tuple[Row, str | None]]]:
        """:meth:`_listed`, once for every caller that asks in the same event-loop tick: the
        first caller yields once, so that every stage whose leftover check starts in this
        tick joins it, then lists for all of them. A caller cancelled while it holds the
        listing still takes it for the others; a joiner whose holder took none lists for
        itself."""
        shared = self._listing
        if shared is None:
            shared = self._listing = _SharedListing()
            try:
                await _loop.checkpoint()
            finally:
                self._listing = None
                shared.complete, shared.rows = self._listed()
                shared.event.set()
        else:
            await shared.event.wait()
        if shared.rows is None:
            return self._listed()
        return shared.complete, shared.rows

    def _adoptees(self) -> list[tuple[Row, str | None]]:
        """Our live direct children that are neither stage leaders, excluded pids nor a
        built-in stage's detach, each with the stage token it belongs to (sticky membership
        first, else its ``SUPERVISE_STAGE_TOKEN``; None for none). One listing; [] without
        the subreaper. Never raises."""
        return self._listed()[1]

    def _listed(self) -> tuple[bool, list[tuple[Row, str | None]]]:
        """``(complete, adoptees)``: :meth:`_adoptees` from one listing of our children, and
        whether that listing tells every live process of our stages whose leader was reaped:
        with the subreaper such a process is re-parented to us before its parent becomes a
        zombie, so it is our child or a descendant of one (a ``setsid`` daemon, a double
        fork, each generation of a fork-and-exit chain: the one that forks stays listed, a
        zombie, until it is reaped). No adoptee in a complete listing: nothing of any stage
        is left but what its unreaped leader holds, without a scan of the process table.
        Not complete without the subreaper or a listing (not Linux, no
        ``CONFIG_PROC_CHILDREN``), or when a child has the pid of a leader already reaped
        (reused: neither a leader nor known). Never raises."""
        if not subreaper_enabled():
            return False, []
        excluded = self.exclude()
        children = our_children()
        complete = children is not None
        unreaped = {t.leader for t in self.stages.values() if t.leader_unreaped()}
        found: list[tuple[Row, str | None]] = []
        for pid in children or ():
            if pid in self.protected:
                if pid in self._leaders and pid not in unreaped:
                    complete = False  # a reaped leader's pid, reissued
                continue
            if pid in excluded:
                continue
            row = stat(pid)
            if row is None or row.zombie:
                continue
            key = (pid, row.start)
            if self._detach.get(key):
                continue
            token = self._sticky.get(key)
            if token is None:
                if key not in self._tokens:
                    self._tokens[key] = environ_value(pid, TOKEN_VAR)
                token = self._tokens[key]
            if token is None and self._pipes:
                token = self._pipe_owner(pid, row)
            if self._detached(row, token):
                continue
            found.append((row, token))
        return complete, found

    async def sweep_orphans(self, grace: float, deadline: float,
                            spare: Iterable[str] = ()) -> KillReport | None:
        """At a digest's end (every stage ended): kill each adopted child no stage claimed,
        with its descendants, by the kill sequence (``grace`` seconds, returning by
        ``deadline``, the loop's clock). These are the orphans that left every mark of their
        stage (``env -i setsid -f sleep 30``: no token, a session of their own, re-parented to
        us); nothing can tell which stage they came from, so they die with the digest. A
        child whose :data:`DETACH_VAR` names one of ``spare`` (the digest's built-in stages:
        the memory stage's consolidation wrapper) is a deliberate detach and lives on.
        Returns the kill's report, None when there was nothing to kill (one listing of our
        children; subreaper only)."""
        if not subreaper_enabled():
            return None
        names = set(spare)
        live = set(self.stages)
        orphans: list[Row] = []
        for row, token in self._adoptees():
            if token is not None and token in live:
                continue
            if names and environ_value(row.pid, DETACH_VAR) in names:
                self._detach[(row.pid, row.start)] = True
                continue
            orphans.append(row)
        if not orphans:
            return None
        self.swept_orphans = [(row, name_of(row.pid)) for row in orphans]
        tree = StageTree(orphans[0].pid, lambda: False, os.urandom(16).hex(), adopts_all=True)
        tree.members = {row.pid: row for row in orphans}
        self.stages[tree.token] = tree
        try:
            return await self.kill_stage(tree, grace, deadline)
        finally:
            self.discard(tree)

    def _outside_group(self, tree: StageTree) -> list[Row]:
        return [r for r in tree.members.values() if r.pgid != tree.leader]

    def _anything_alive(self, tree: StageTree, since: float | None = None) -> bool:
        """Cheap: stops at the first live member found (cgroup, leader, members, group).

        ``since`` (the loop's clock, the SIGKILL's time): the process group being not empty counts
        as alive until a complete scan begun after it has read the group's rows. A group
        member no scan has read yet (the portable path under load: its scans cut by their
        deadlines) is otherwise invisible here, and the kill returned with a TERM-ignoring
        member still dying (``test_caller_cancellation_kills_the_stages``, portable, 4 of 10
        loaded runs)."""
        if tree.cgroup is not None and _cgroup.pids(tree.cgroup):
            return True
        if tree.leader_unreaped() and _live(tree.leader):
            return True
        if any(_live(r.pid, r.start) for r in tree.members.values()):
            return True
        if self.adopted(tree):
            return True
        # kill(0) also succeeds for zombies: then ask the last table which are live.
        if not (_killpg(tree.leader, 0) and self._group_ok(tree)):
            return False
        if since is not None and not (self.last_complete and self.scanned_at >= since):
            return True
        return any(r.pgid == tree.leader and _live(r.pid, r.start) for r in self.table.values())

    def _signal(self, tree: StageTree, sig: int, rows: Iterable[Row] | None = None) -> None:
        """``sig`` to the process group (when provably ours) and to each member outside it."""
        group = self._group_ok(tree)
        if group:
            _killpg(tree.leader, sig)
        for row in (tree.members.values() if rows is None else rows):
            if group and row.pgid == tree.leader and rows is None:
                continue
            if self._detach.get((row.pid, row.start)):
                continue  # a built-in's detach (a scan applied late may have listed it)
            _kill_checked(row.pid, row.start, sig)

    async def _freeze(self, tree: StageTree, until: float, seen: dict[int, Row]) -> None:
        """SIGSTOP every member, rescanning (incrementally, off the loop) until the fixpoint
        or ``until``. A fork in flight when SIGSTOP is sent can still attach a child after a
        scan has listed ``/proc``; so the fixpoint is two complete scans in a row that find no
        new member while every member seen is stopped (a stopped process cannot fork)."""
        frozen: set[int] = set()
        quiet = 0
        self.freezing.add(tree.token)
        try:
            await self._freeze_rounds(tree, until, seen, frozen, quiet)
        finally:
            self.freezing.discard(tree.token)

    async def _freeze_rounds(self, tree: StageTree, until: float, seen: dict[int, Row],
                             frozen: set[int], quiet: int) -> None:
        while True:
            fresh = [r for pid, r in tree.members.items() if pid not in frozen]
            self._signal(tree, signal.SIGSTOP, fresh)
            frozen.update(r.pid for r in fresh)
            seen.update(tree.members)
            if _loop.current_time() >= until or tree.cgroup is not None:
                return
            if self._stop_adopted(tree, frozen, seen):
                quiet = 0
            complete, churn = await self._refresh(until, started_after=_loop.current_time(),
                                                  incremental=True)
            # Without the subreaper a new process gone before its token was read may have
            # been a chain's generation whose successor the listing missed: not settled.
            settled = complete and all(
                pid in frozen and (r.stopped or r.zombie) for pid, r in tree.members.items()
            ) and (subreaper_enabled() or churn == 0)
            quiet = quiet + 1 if settled else 0
            if quiet >= 2 or (settled and churn == 0 and self._empty(tree)):
                return

    def _empty(self, tree: StageTree) -> bool:
        """Whether nothing of ``tree`` is left to freeze: no member (the complete scan just
        applied found none), no other member ever seen (its token), the leader not alive, the
        process group empty (``killpg(leader, 0)`` fails) and no adopted child of the stage.
        Then one complete scan without churn settles the freeze: the second scan of the
        fixpoint guards against a fork in flight when SIGSTOP landed, and with no process
        there was nothing to stop and nothing forking (a stage whose leader exited cleanly
        but whose leftover check was not settled paid two scans here, seconds on a loaded
        portable host)."""
        return (not tree.members and tree.token not in self._ever_tokens
                and not (tree.leader_unreaped() and _live(tree.leader))
                and not _killpg(tree.leader, 0) and not self.adopted(tree))

    def _stop_adopted(self, tree: StageTree, frozen: set[int], seen: dict[int, Row]) -> bool:
        """SIGSTOP the stage's adopted children (:meth:`adopted`) until a round finds none
        new (at most 64 rounds, each one small read); they join ``seen`` and ``frozen``.
        Returns whether any was new."""
        new_any = False
        for _ in range(64):
            fresh = [r for r in self.adopted(tree) if r.pid not in frozen or not r.stopped]
            if not fresh:
                break
            for row in fresh:
                _kill_checked(row.pid, row.start, signal.SIGSTOP)
                frozen.add(row.pid)
                seen[row.pid] = row
                tree.members.setdefault(row.pid, row)
            new_any = True
        return new_any

    async def kill_stage(self, tree: StageTree, grace: float, deadline: float) -> KillReport:
        """Kill every member of ``tree``, returning by ``deadline`` (the loop's clock) whatever
        the stage does.

        TERM + CONT to the group and each member; poll every 20 ms up to ``grace`` seconds
        (ending early when nothing is alive); then freeze (``cgroup.freeze``, else SIGSTOP
        to the group and to every member found, repeated on fresh bounded scans until none
        is new), SIGKILL (``cgroup.kill``, the group, then each member outside it), and wait
        for them to be gone. The hard phase starts no later than ``deadline`` minus
        :data:`HARD_PHASE`. Cancellation-safe: call it inside a shielded scope.
        """
        self.focus.add(tree.token)
        try:
            return await self._kill_stage(tree, grace, deadline)
        finally:
            self.focus.discard(tree.token)

    async def _kill_stage(self, tree: StageTree, grace: float, deadline: float) -> KillReport:
        t0 = _loop.current_time()
        now = _loop.current_time
        hard_at = max(t0, min(t0 + grace, deadline - HARD_PHASE))
        self._drop_detached(tree)  # never a TERM to a detach a stale scan made a member
        tree.group_verified = self._group_ok(tree)
        if not tree.members:  # a scan under way applies its result when done (no wait here)
            self._scan_soon(hard_at)
        if tree.cgroup is not None:
            _cgroup.signal_all(tree.cgroup, signal.SIGTERM)
        for sig in (signal.SIGTERM, signal.SIGCONT):
            self._signal(tree, sig)
        termed = set(tree.members)
        while now() < hard_at and self._anything_alive(tree):
            await _loop.sleep(POLL)
            if now() - self.scanned_at > 0.1 and not self._inflight:
                # members born during the grace get their TERM too (scan off the loop)
                await self.refresh(min(hard_at, now() + 0.1),
                                   incremental=not _proctable.PROCFS)
                new = [r for pid, r in tree.members.items() if pid not in termed]
                self._signal(tree, signal.SIGTERM, new)
                self._signal(tree, signal.SIGCONT, new)
                termed.update(r.pid for r in new)
        # Hard phase. A stopped process cannot fork: freeze first, so a fork-and-exit chain
        # or a fork bomb cannot outrun the kill, then kill the frozen set whole.
        seen: dict[int, Row] = dict(tree.members)
        if tree.cgroup is not None:
            _cgroup.freeze(tree.cgroup)
        kill_by = deadline - HARD_PHASE / 3
        await self._freeze(tree, kill_by, seen)
        # From here a scan's thread kills what it finds of this stage; what the threads
        # stopped before is in the notes (:meth:`_hold`).
        self._killed[tree.token] = tree
        self._take_held(tree, seen)
        self._take_read(tree, seen)
        # Counted before the SIGKILL, not after (by then most are gone): every process alive
        # past the grace needed it, the leader too when no scan listed it yet.
        hard = sum(1 for r in seen.values() if _live(r.pid, r.start))
        if tree.leader not in seen and tree.leader_unreaped() and _live(tree.leader):
            hard += 1
        if tree.cgroup is not None:
            _cgroup.kill(tree.cgroup)
        self._signal(tree, signal.SIGKILL)
        self._signal(tree, signal.SIGKILL, list(seen.values()))
        killed_at = now()
        while now() < deadline and self._anything_alive(tree, killed_at):
            self.reap()
            await _loop.sleep(0.005)
            adopted = self.adopted(tree)  # one that outran the freeze: kill it too
            for row in adopted:
                _kill_checked(row.pid, row.start, signal.SIGKILL)
                seen.setdefault(row.pid, row)
            for row in self._take_held(tree, seen):
                _kill_checked(row.pid, row.start, signal.SIGKILL)
            if now() - self.scanned_at > 0.05:
                await self.refresh(deadline, incremental=True)
                late = [r for pid, r in tree.members.items() if pid not in seen]
                seen.update(tree.members)
                self._signal(tree, signal.SIGKILL, late)
        self.reap()
        survivors = sum(1 for r in seen.values() if _live(r.pid, r.start))
        return KillReport(len(seen), hard, survivors, now() - t0)

    def _take_read(self, tree: StageTree, seen: dict[int, Row]) -> None:
        """Add to ``seen`` and the members every process whose token a scan's thread read as
        ``tree``'s (:attr:`_tokens`) and no applied scan listed yet: on a starved host the
        scan that read it can still be running when the kill reaches its SIGKILL (its
        deadline passed before the kill began: the kill had no time to scan), and the kill
        then killed nothing of a ``setsid`` daemon it had found (1 of 10 portable kills at
        load 36). Only the newest :data:`READ_TAKEN` of them that are alive now (a fork-and-
        exit chain leaves hundreds of dead generations there; its live one is the newest); a
        built-in stage's deliberate detach is left out (judged on a fresh row). Never
        raises."""
        read = sorted(((start, pid) for (pid, start), token in list(self._tokens.items())
                       if token == tree.token and pid not in seen
                       and not self._detach.get((pid, start))), reverse=True)
        for start, pid in read[:READ_TAKEN]:
            fresh = stat(pid)
            if (fresh is None or fresh.zombie or fresh.start != start
                    or (tree.detach_mark is not None and self._detached(fresh, tree.token))):
                continue
            row = Row(pid, 0, -1, -1, False, start, 0)
            seen[pid] = row
            tree.members.setdefault(pid, row)

    def _take_held(self, tree: StageTree, seen: dict[int, Row]) -> list[Row]:
        """The processes scan threads stopped for ``tree`` (:attr:`_held`) and no scan listed
        yet, as rows (pid and start stamp; the rest unknown), added to its members and to
        ``seen``; the notes are cleared."""
        taken: list[Row] = []
        for pid, start in self._held.pop(tree.token, {}).items():
            if pid in seen:
                continue
            row = Row(pid, 0, -1, -1, False, start, 0, stopped=True)
            seen[pid] = row
            tree.members.setdefault(pid, row)
            taken.append(row)
        return taken

    async def has_leftovers(self, tree: StageTree, deadline: float) -> bool:
        """Whether a stage whose leader has exited left anything behind: its cgroup or process
        group is not empty; else, with the subreaper, False when a complete listing of our
        children shows no adoptee at all (:meth:`_listed`: then nothing of any reaped
        leader's tree is alive, with no scan of the process table); else a scan ever saw
        another member, or one of two fresh incremental scans (bounded by ``deadline``) sees
        one. There a member seen counts even if it is gone now: a fork-and-exit chain's
        generation lives shorter than a scan, but its successor is alive (issue 10, example
        4); the kill sequence then finds it. True also when no scan in the check read the
        whole table before ``deadline``: "nothing left" needs one that did (a portable scan
        of ~3,400 rows at load 10-16 read a third of them and missed a live chain)."""
        self.focus.add(tree.token)
        try:
            return await self._has_leftovers(tree, deadline)
        finally:
            self.focus.discard(tree.token)

    async def _has_leftovers(self, tree: StageTree, deadline: float) -> bool:
        if tree.cgroup is not None and _cgroup.pids(tree.cgroup):
            return True
        self._drop_detached(tree)
        if _killpg(tree.leader, 0):
            # The leader is reaped and its group is not empty: members are left (zombies are
            # reaped within a tick). The group id stays ours while it is not empty (the kernel
            # keeps a pid number while any process has it as its process group).
            tree.group_verified = True
            return True
        if subreaper_enabled():
            complete, adoptees = await self._listed_shared()
            if complete and not adoptees:
                return False  # a member seen earlier and alive now would be listed
        settled = False
        since = _loop.current_time()
        for _ in range(LEFTOVER_SCANS):
            if any(pid != tree.leader for pid in tree.members) or tree.token in self._ever_tokens:
                return True
            if await self.adopted_shared(tree):
                return True
            if _loop.current_time() >= deadline:
                break
            # Two fresh scans, the second begun after the first ended, in one worker thread
            # (no round trip through the event loop between them), repeated there while they
            # see churn: a new process that died between the listing and its read may have
            # been a generation of a chain whose successor the listing missed.
            done, churn = await self._refresh(
                deadline, started_after=_loop.current_time(), incremental=True, again=1,
                settle=LEFTOVER_SCANS - 2)
            settled |= done
            # A scan shared with another caller may have been a single one: settled once two
            # scans begun since this check started were applied, the last this round applied
            # saw no churn (its own count, not ``last_churn``: an abandoned scan of an earlier
            # round may have written that) and one read the whole table.
            if (settled and churn == 0
                    and sum(1 for b in list(self.began) if b >= since) >= 2):
                break
        # Only a scan that read the whole table can show that nothing is left: when every one
        # was cut short by its deadline (a large table on a starved host; on the portable path
        # a row costs psutil several calls), the answer is "maybe", and the kill sequence,
        # bounded and cheap on an empty tree, settles it with its own scans.
        return (any(pid != tree.leader for pid in tree.members)
                or tree.token in self._ever_tokens or not settled)
