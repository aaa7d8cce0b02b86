"""A bounded snapshot of the process table: ``/proc`` on Linux, psutil elsewhere.

The watchdog (:mod:`supervisor.engine._tree`) attributes processes to stages from one table per
scan instead of asking psutil per process: on Linux one read of ``/proc/<pid>/stat`` gives
the parent, process group, session, state, start time and resident set of a process, where
psutil's recursive ``children()`` plus ``environ()`` costs several calls per process (seconds
over thousands of processes: docs/benchmarks.md, the stress rows). A scan takes a ``deadline`` and returns what it has read
by then, so its cost is bounded by design; it is meant to run in a worker thread.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable, Collection
from .._record import record
from ._reaper import PORTABLE

TYPE_CHECKING = False  # not `typing.TYPE_CHECKING`: importing typing costs the hot path
if TYPE_CHECKING:
    from typing import Any

_LINUX = (sys.platform.startswith("linux") and os.path.isdir("/proc/self")) and not PORTABLE
PROCFS = _LINUX
"""Whether rows come from ``/proc`` (one read each) rather than psutil (the portable path:
several calls per process)."""
_PAGE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096


CHURN = [0]
"""Processes an incremental scan listed as new but found gone when it read them: a fork-and-
exit chain's generations (a caller compares the count before and after a scan)."""


@record
class Row:
    """One process: ``pid``, ``ppid``, process group ``pgid``, session ``sid``, ``zombie``
    (exited, not yet reaped), ``start`` (an opaque start stamp: equal stamps = same process,
    the pid-reuse check), ``rss`` (resident bytes; 0 when unknown) and ``threads`` (its tasks,
    1 for a single-threaded process: what cgroup ``pids.max`` counts)."""

    pid: int
    ppid: int
    pgid: int
    sid: int
    zombie: bool
    start: float
    rss: int
    stopped: bool = False
    """Stopped by a signal (``T``): it cannot fork until continued."""
    threads: int = 1
    """Threads (kernel tasks) of the process: ``max_tasks`` counts these, like ``pids.max``,
    so a thread bomb is capped like a fork bomb (both spend the kernel's pids)."""


def _parse_stat(pid: int, raw: bytes) -> Row | None:
    right = raw.rfind(b")")  # comm may contain spaces and parentheses: it ends at the LAST ')'
    fields = raw[right + 2:].split()
    if len(fields) < 22:
        return None
    state = fields[0]
    return Row(pid, int(fields[1]), int(fields[2]), int(fields[3]), state in (b"Z", b"X"),
               float(fields[19]), int(fields[21]) * _PAGE, state in (b"T", b"t"),
               max(int(fields[17]), 1))


def stat(pid: int) -> Row | None:
    """The row of ``pid`` now, or None when it is gone or unreadable. Never raises."""
    if _LINUX:  # a descriptor, not a file object: a scan reads this for every process
        try:
            fd = os.open(f"/proc/{pid}/stat", os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
        except OSError:
            return None
        try:
            return _parse_stat(pid, os.read(fd, 4096))  # one line, far below a page
        except (OSError, ValueError, IndexError):
            return None
        finally:
            os.close(fd)
    return _psutil_row(pid)


def _threads(proc: Any) -> int:
    """Threads of a psutil process (inside ``oneshot()``: on macOS the same task-info call as
    its memory; on Linux, where this is the forced portable test mode, one more read of
    ``/proc/<pid>/status``, within the noise of a psutil row), so the portable run tests what
    a Mac counts."""
    try:
        return max(int(proc.num_threads()), 1)
    except Exception:  # noqa: BLE001 - unknown: count the process once
        return 1


def _psutil_row(pid: int) -> Row | None:
    """The portable row (psutil: ``sysctl(KERN_PROC_PID)`` and ``proc_pidinfo`` on macOS).
    A fact another user's process withholds (macOS refuses its resident set, its session
    may be refused) is left unknown (``rss`` 0, ``pgid``/``sid`` -1: no stage's) rather than
    dropping the row: only a process that is gone has no row, so a scan tells the two apart
    (an unreadable row would look new, and gone, on every scan)."""
    import psutil

    try:
        proc = psutil.Process(pid)
        with proc.oneshot():
            status: str = "?"
            try:
                status = proc.status()
            except psutil.AccessDenied:
                pass
            zombie = status == psutil.STATUS_ZOMBIE
            try:
                rss = 0 if zombie else proc.memory_info().rss
            except psutil.AccessDenied:
                rss = 0
            ppid, start = proc.ppid(), proc.create_time()
            threads = _threads(proc) if not zombie else 1
    except psutil.ZombieProcess:  # macOS refuses most facts of a zombie
        return Row(pid, 0, -1, -1, True, 0.0, 0)
    except (psutil.Error, OSError):
        return None
    try:
        pgid, sid = os.getpgid(pid), os.getsid(pid)
    except ProcessLookupError:
        return None
    except OSError:  # EPERM (macOS may refuse another session's): not ours
        pgid = sid = -1
    return Row(pid, ppid, pgid, sid, zombie, start, rss, status == psutil.STATUS_STOPPED,
               threads)


def start_stamp(pid: int) -> float | None:
    """The start stamp of ``pid`` (:attr:`Row.start`), or None when it is gone: the
    pid-reuse check before a signal, one read (``/proc/<pid>/stat``; psutil's
    ``create_time``, cached by its constructor, elsewhere). Never raises."""
    if _LINUX:
        row = stat(pid)
        return None if row is None else row.start
    import psutil

    try:
        return psutil.Process(pid).create_time()
    except (psutil.Error, OSError):
        return None


def stamp_now() -> float:
    """Now, in the units of :attr:`Row.start` (Linux: clock ticks since boot, as
    ``/proc/<pid>/stat`` counts a process's start; elsewhere psutil's seconds since the
    epoch): a process whose stamp is at most this started before now."""
    if _LINUX:
        return time.clock_gettime(time.CLOCK_BOOTTIME) * os.sysconf("SC_CLK_TCK")
    return time.time()


STAMP_SLACK = 2.0 if _LINUX else 0.05
"""How far two stamps of :func:`stamp_now` and :attr:`Row.start` may disagree for one
instant (two clock ticks; psutil's rounding)."""


def stdio_pipes(pid: int) -> tuple[int, ...]:
    """The inode numbers of the pipes ``pid`` holds as its stdin, stdout or stderr (Linux:
    the ``/proc/<pid>/fd/0``-``2`` links ``pipe:[N]``, readable for this user's processes);
    ``()`` on the portable path, which lists no other process's descriptors. A process that
    holds a stage's output pipe there inherited it from the stage: an orphan that cleared
    its environment and left its session is still told by it. Never raises."""
    if not _LINUX:
        return ()
    found: list[int] = []
    for fd in (0, 1, 2):
        try:
            link = os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:
            continue
        if link.startswith("pipe:[") and link.endswith("]") and link[6:-1].isdigit():
            found.append(int(link[6:-1]))
    return tuple(found)


def name_of(pid: int) -> str:
    """The process's name (``comm``; psutil's name elsewhere), or ``"?"``. Never raises."""
    if _LINUX:
        try:
            with open(f"/proc/{pid}/comm", "rb") as f:
                return f.read(64).decode("utf-8", "replace").strip() or "?"
        except OSError:
            return "?"
    import psutil

    try:
        return str(psutil.Process(pid).name()) or "?"
    except (psutil.Error, OSError):
        return "?"


_PID_SPACE = 1 << 22  # above any pid_max; a modulus that keeps the order of the newest


def _last_pid(pids: list[int], previous: Collection[int] | None) -> int:
    """The pid the kernel handed out last: ``/proc/loadavg``'s last field on Linux; on the
    portable path (no ``/proc``) the newest of the pids new since ``previous`` (the pids an
    earlier listing held): pids are handed out in increasing order and wrap around, so new
    pids below the largest listed one mean the allocator wrapped since that one was handed
    out, and the largest of those is the newest. ``previous`` must be a whole listing, not
    the rows of a scan cut short: an old pid that scan did not read looks new, below the
    largest, and was taken for the newest (the newest pids were then read last)."""
    if _LINUX:
        try:
            with open("/proc/loadavg", "rb") as f:
                return int(f.read().split()[-1])
        except (OSError, ValueError, IndexError):
            return _PID_SPACE - 1
    if previous:
        top = max(previous)
        new = [pid for pid in pids if pid not in previous]
        wrapped = [pid for pid in new if pid < top]
        return max(wrapped or new or [top])
    return _PID_SPACE - 1


def list_pids() -> list[int] | None:
    """Every pid visible now (``/proc``'s numeric entries; ``psutil.pids()`` elsewhere), in
    no order, or None when the table cannot be listed. Never raises."""
    if _LINUX:
        try:
            names = os.listdir("/proc")
        except OSError:
            return None
        return [int(name) for name in names if name.isdigit()]
    import psutil

    try:
        return list(psutil.pids())
    except (psutil.Error, OSError):
        return None


def newest_first(pids: list[int], known: Collection[int],
                 before: Collection[int] | None) -> list[int]:
    """The pids of ``pids`` not in ``known`` (an earlier scan's table), the newest first (the
    order of an incremental :func:`scan`; ``before``: the listing that scan read, or None)."""
    last = _last_pid(pids, known if before is None else before)
    return sorted((pid for pid in pids if pid not in known),
                  key=lambda pid: (last - pid) % _PID_SPACE)


def marks(pid: int, names: tuple[str, ...]) -> tuple[float, tuple[str | None, ...]] | None:
    """``(start stamp, values)`` of ``pid``: its :attr:`Row.start` and the values of the
    environment variables ``names`` (None: absent or unreadable), read without the rest of its
    row (one ``/proc/<pid>/stat`` and one ``environ`` read; psutil's ``create_time`` and
    ``environ`` elsewhere: about a third of a portable row's cost). None when it is gone or a
    zombie. Never raises."""
    if _LINUX:
        row = stat(pid)
        if row is None or row.zombie:
            return None
        try:
            return row.start, tuple(environ_of(pid, name) for name in names)
        except Gone:
            return None
    import psutil

    try:
        proc = psutil.Process(pid)
        start = proc.create_time()
        env = proc.environ()
    except psutil.AccessDenied:
        try:
            return psutil.Process(pid).create_time(), tuple(None for _ in names)
        except (psutil.Error, OSError):
            return None
    except (psutil.Error, OSError):  # gone, a zombie (ZombieProcess is a NoSuchProcess)
        return None
    return start, tuple(env.get(name) for name in names)


def scan(deadline: float | None = None, previous: dict[int, Row] | None = None,
         reread: set[int] | frozenset[int] = frozenset(),
         first: set[int] | frozenset[int] = frozenset(),
         classify: Callable[[Row], bool] | None = None,
         cut: Callable[[], bool] | None = None, listing: list[int] | None = None,
         before: Collection[int] | None = None) -> tuple[dict[int, Row], bool]:
    """Every process visible now, as ``({pid: Row}, complete)``.

    ``deadline`` is a :func:`time.monotonic` value: the scan stops there and returns what it
    has read with ``complete`` False. With ``previous`` (an earlier scan), only pids new since
    then and those in ``reread`` are read again (an incremental scan: a fork-and-exit chain's
    new generations are new pids); the others keep their earlier rows. Pids in ``first``
    (the stages' leaders and known members) are read before the others, then the newest pids:
    a scan cut short by its deadline (a starved host) has read what matters most.
    ``classify`` is called on each row as soon as it is read (before the next pid is read:
    the watchdog reads the stage token there, and freezes a member at once); it returns
    False when the process turned out to be gone (a zombie too). A new pid gone by the time
    it is read or classified counts in :data:`CHURN`: it may have been a chain's generation
    whose successor this listing missed. ``cut`` is asked before each row: True ends the
    scan there, as its deadline does (a caller that needs a scan begun later). The deadline
    is checked before each row too: a psutil row costs milliseconds on a starved host, so a
    check every few rows let a scan run a third of a second past it. ``listing`` is the
    table's pids as the caller listed them (:func:`list_pids`; None: listed here), and
    ``before`` the listing of the scan ``previous`` comes from (where the portable path's
    newest pids begin, :func:`_last_pid`; None: ``previous``'s pids). Never raises.
    """
    rows: dict[int, Row] = {}
    listed = list_pids() if listing is None else listing
    if listed is None:
        return rows, False
    pids = list(listed)
    order: Callable[[int], object]
    if _LINUX or previous:
        last = _last_pid(pids, previous if before is None else before)
        order = lambda pid: (last - pid) % _PID_SPACE  # noqa: E731 - pids wrap: newest first
    else:
        # A first scan without /proc: the pids handed out after the oldest stage leader's
        # (the stages' processes) come first, before every older process, whatever wrapped.
        anchor = min(first, default=0)
        order = lambda pid: (pid - anchor) % _PID_SPACE  # noqa: E731
    if previous is not None:  # incremental on both paths: a chain's new generations are new pids
        for pid in pids:
            old = previous.get(pid)
            if old is not None and pid not in reread:
                rows[pid] = old
        pids = [pid for pid in pids if pid not in rows]
    pids.sort(key=lambda pid: (pid not in first, order(pid)))
    read = stat if _LINUX else _psutil_row
    for pid in pids:
        if ((deadline is not None and time.monotonic() > deadline)
                or (cut is not None and cut())):
            return rows, False
        row = read(pid)
        new = previous is None or pid not in previous
        if row is not None:
            rows[pid] = row
            if classify is not None and not classify(row) and new:
                CHURN[0] += 1  # exited between the listing and its classification
        elif new:
            CHURN[0] += 1  # born after the last scan and gone before this read
    return rows, True


class Gone(Exception):
    """The process is gone (or a zombie): raised by :func:`environ_of`."""


def environ_of(pid: int, name: str) -> str | None:
    """The value of environment variable ``name`` in process ``pid`` as it was started, or
    None (absent, not ours to read: another user's process). ``/proc/<pid>/environ`` on
    Linux; psutil elsewhere (``sysctl(KERN_PROCARGS2)`` on macOS, readable for this user's
    processes). Raises :class:`Gone` when the process has exited (a zombie has no
    environment left to read)."""
    if _LINUX:
        try:
            with open(f"/proc/{pid}/environ", "rb") as f:
                raw = f.read(1 << 20)
        except (FileNotFoundError, ProcessLookupError):
            raise Gone(pid) from None
        except OSError:
            return None
        key = name.encode() + b"="
        for item in raw.split(b"\0"):
            if item.startswith(key):
                return item[len(key):].decode("utf-8", "replace")
        return None
    import psutil

    try:
        return psutil.Process(pid).environ().get(name)
    except psutil.NoSuchProcess:  # ZombieProcess too
        raise Gone(pid) from None
    except (psutil.Error, OSError):
        return None


def environ_value(pid: int, name: str) -> str | None:
    """Like :func:`environ_of`, with None for a process that is gone. Never raises."""
    try:
        return environ_of(pid, name)
    except Gone:
        return None
