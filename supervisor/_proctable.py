"""A bounded snapshot of the process table: ``/proc`` on Linux, psutil elsewhere.

The watchdog (:mod:`supervisor._tree`) attributes processes to stages from one table per
scan instead of asking psutil per process: on Linux one read of ``/proc/<pid>/stat`` gives
the parent, process group, session, state, start time and resident set of a process (about
15 µs), where psutil's recursive ``children()`` plus ``environ()`` took seconds over thousands
of processes (issue 10, example 2). A scan takes a ``deadline`` and returns what it has read
by then, so its cost is bounded by design; it is meant to run in a worker thread.
"""

from __future__ import annotations

import os
import sys
import time
from dataclasses import dataclass
from typing import Any

PORTABLE_VAR = "SUPERVISE_PORTABLE"
"""Set to ``1`` to force the engine's portable path on Linux (the test suite's macOS stand-in):
no ``/proc`` (psutil rows), no child subreaper, no cgroup. Read once, at import."""
PORTABLE = os.environ.get(PORTABLE_VAR, "").strip().lower() not in ("", "0", "no", "false", "off")
"""Whether :data:`PORTABLE_VAR` forces the portable path in this process."""
_LINUX = (sys.platform.startswith("linux") and os.path.isdir("/proc/self")) and not PORTABLE
_PAGE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096


CHURN = [0]
"""Processes an incremental scan listed as new but found gone when it read them: a fork-and-
exit chain's generations (a caller compares the count before and after a scan)."""


@dataclass(frozen=True)
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
    if _LINUX:
        try:
            with open(f"/proc/{pid}/stat", "rb") as f:
                return _parse_stat(pid, f.read())
        except (OSError, ValueError, IndexError):
            return None
    return _psutil_row(pid)


def _threads(proc: Any) -> int:
    """Threads of a psutil process where that is free inside ``oneshot()`` (macOS: the same
    task-info call as its memory); 1 elsewhere, where the psutil path is only the forced
    portable test mode on Linux and an extra ``/proc/<pid>/status`` read per process would
    slow the scans that must keep up with fork-and-exit chains."""
    if sys.platform != "darwin":
        return 1
    try:
        return max(int(proc.num_threads()), 1)
    except Exception:  # noqa: BLE001 - unknown: count the process once
        return 1


def _psutil_row(pid: int) -> Row | None:
    import psutil

    try:
        proc = psutil.Process(pid)
        with proc.oneshot():
            zombie = proc.status() == psutil.STATUS_ZOMBIE
            rss = 0 if zombie else proc.memory_info().rss
            return Row(pid, proc.ppid(), os.getpgid(pid), os.getsid(pid), zombie,
                       proc.create_time(), rss, proc.status() == psutil.STATUS_STOPPED,
                       _threads(proc) if not zombie else 1)
    except (psutil.Error, OSError):
        return None


_PID_SPACE = 1 << 22  # above any pid_max; a modulus that keeps the order of the newest


def _last_pid() -> int:
    """The pid the kernel handed out last (``/proc/loadavg``'s last field), or the largest
    possible one when unknown (then the order is simply the highest pid first)."""
    try:
        with open("/proc/loadavg", "rb") as f:
            return int(f.read().split()[-1])
    except (OSError, ValueError, IndexError):
        return _PID_SPACE - 1


def scan(deadline: float | None = None, previous: dict[int, Row] | None = None,
         reread: set[int] | frozenset[int] = frozenset(),
         first: set[int] | frozenset[int] = frozenset()) -> tuple[dict[int, Row], bool]:
    """Every process visible now, as ``({pid: Row}, complete)``.

    ``deadline`` is a :func:`time.monotonic` value: the scan stops there and returns what it
    has read with ``complete`` False. With ``previous`` (an earlier scan), only pids new since
    then and those in ``reread`` are read again (an incremental scan: a fork-and-exit chain's
    new generations are new pids); the others keep their earlier rows. Pids in ``first``
    (the stages' leaders and known members) are read before the others, then the newest pids:
    a scan cut short by its deadline (a starved host) has read what matters most. Never
    raises.
    """
    rows: dict[int, Row] = {}
    if _LINUX:
        try:
            names = os.listdir("/proc")
        except OSError:
            return rows, False
        pids = [int(name) for name in names if name.isdigit()]
    else:
        import psutil

        try:
            pids = psutil.pids()
        except (psutil.Error, OSError):
            return rows, False
    if previous is not None:  # incremental on both paths: a chain's new generations are new pids
        for pid in pids:
            old = previous.get(pid)
            if old is not None and pid not in reread:
                rows[pid] = old
        pids = [pid for pid in pids if pid not in rows]
    last = _last_pid()  # pids wrap around: the newest are just below the last one handed out
    pids.sort(key=lambda pid: (pid not in first, (last - pid) % _PID_SPACE))
    read = stat if _LINUX else _psutil_row
    for i, pid in enumerate(pids):
        if deadline is not None and i % 32 == 0 and time.monotonic() > deadline:
            return rows, False
        row = read(pid)
        if row is not None:
            rows[pid] = row
        elif previous is not None and pid not in previous:
            CHURN[0] += 1  # born after the last scan and gone before this read
    return rows, True


def environ_value(pid: int, name: str) -> str | None:
    """The value of environment variable ``name`` in process ``pid`` as it was started, or
    None (absent, gone, a zombie, not ours to read). Never raises."""
    if _LINUX:
        try:
            with open(f"/proc/{pid}/environ", "rb") as f:
                raw = f.read(1 << 20)
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
    except (psutil.Error, OSError):
        return None
