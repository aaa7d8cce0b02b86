"""What the engine and ``supervise run``'s lean path share: the timing table of a kill, the
switches read from the environment, the child subreaper, the listing of our children and the
zombie reaper.

Stdlib only (``os``, ``sys``; ``_ctypes`` only when the subreaper is switched on), so that
``supervise run`` (:mod:`supervisor.engine._runwait`) imports it without the engine's loop,
and the engine (:mod:`supervisor.engine._stage`, :mod:`supervisor.engine._tree`) reads the
same numbers: this module is their one home.
"""

from __future__ import annotations

import os
import sys

TYPE_CHECKING = False  # not `typing.TYPE_CHECKING`: importing typing costs the hot path
if TYPE_CHECKING:
    from collections.abc import Iterable, Sequence
    from typing import Any

TOKEN_VAR = "SUPERVISE_STAGE_TOKEN"
"""Every process of a stage (and of ``supervise run``'s command) inherits this variable; the
sweep finds escapees by it."""
RUN_VAR = "SUPERVISE_DEFERRED_RUN"
"""Set to a deferred stage's run id in its environment (so in every process of its tree
that keeps its environment): a run whose runner died is still found by it
(:func:`supervisor.engine._deferred.launch_all`)."""
PORTABLE_VAR = "SUPERVISE_PORTABLE"
"""Set to ``1`` to force the engine's portable path on Linux (the test suite's macOS stand-in):
no ``/proc`` (psutil rows), no child subreaper, no cgroup. Read once, at import."""
PORTABLE = os.environ.get(PORTABLE_VAR, "").strip().lower() not in ("", "0", "no", "false", "off")
"""Whether :data:`PORTABLE_VAR` forces the portable path in this process."""

# -- the timing table (seconds; bytes for READ_SIZE) -----------------------------------------
KILL_MARGIN = 0.25
"""Seconds reserved, beyond the grace period, for SIGKILL, the drain and the banner: a stage or
a ``supervise run`` command killed at its deadline is over by deadline + grace + this."""
DRAIN_RESERVE = 0.08
"""Seconds of :data:`KILL_MARGIN` kept after the kill sequence for the drain and the banner."""
DRAIN = 0.2
"""Seconds a pipe is still read after its process ended before our side is closed: never read
to EOF, a leftover may hold the pipe (design rule 6)."""
READ_SIZE = 1 << 19
"""Bytes asked for per read of a pipe: whatever the transport has buffered (up to 256 KiB per
wakeup) comes in one piece, so a flood costs few loop iterations. Not more: with glibc's
allocator a freed 1 MiB read and its 1 MiB escaped copy (``--format json``) leave more free
at the heap's top than it keeps, so every chunk's pages went back to the kernel and were
faulted in again (about 200,000 minor faults per GiB; at this size, 5,000)."""
POLL = 0.02
"""Seconds between liveness polls during the grace period, and between reaper ticks."""
KILL_WAIT = 1.0
"""Seconds a kill with no digest deadline (``supervise run``'s own tree) waits after SIGKILL."""
HARD_PHASE = 0.12
"""Seconds reserved after the grace period for freeze + SIGKILL + confirmation."""
MONITOR_MAX_PERIOD = 0.5
"""Longest pause between two watchdog scans, in seconds (a starved host's slow scans would
otherwise space them out past a short digest's whole life)."""
REAP_BATCH = 4096
"""Most zombies reaped per reaper tick or wakeup (a tick stays bounded whatever the stages
do)."""

_PR_SET_CHILD_SUBREAPER = 36
_subreaper: bool | None = None


def enable_subreaper() -> bool:
    """Make this process a child subreaper (Linux >= 3.4); idempotent.

    Orphaned descendants of our stages (double forks, ``setsid`` daemons) are then re-parented
    to us instead of init, so the sweep can find them and the reaper reaps them. Returns False
    where unsupported (macOS, old kernels, :data:`PORTABLE`); the sweep then reads every
    process's token. Call it only in a process that owns all of its children (the CLI, the
    deferred runner).
    """
    global _subreaper
    if _subreaper is None:
        _subreaper = False
        if sys.platform.startswith("linux") and not PORTABLE:  # forced off: the macOS path
            try:
                _subreaper = _prctl(_PR_SET_CHILD_SUBREAPER, 1) == 0
            except (OSError, AttributeError, TypeError):
                _subreaper = False
    return _subreaper


def _prctl(option: int, arg: int) -> int:
    """``prctl(option, arg, 0, 0, 0)`` of the C library; its return value (-1 on failure).

    Called through ``_ctypes``, the C half of ``ctypes``, with the one C type it needs (an
    ``int`` result): ``ctypes`` itself defines about fifty classes and imports ``struct`` at
    import, several times what this one call costs. Falls back to ``ctypes`` where ``_ctypes``
    is not what is expected.

    Raises:
        OSError: the C library cannot be opened; AttributeError: no ``prctl`` in it.
    """
    call: Any
    try:
        import _ctypes

        c: Any = _ctypes  # typeshed types it as ctypes' own internals

        class _CInt(c._SimpleCData):  # type: ignore[misc]
            _type_ = "i"

        class _CFunction(c.CFuncPtr):  # type: ignore[misc]
            _flags_ = c.FUNCFLAG_CDECL | c.FUNCFLAG_USE_ERRNO
            _restype_ = _CInt

        class _Library:
            _handle = c.dlopen(None, os.RTLD_NOW)

        call = _CFunction(("prctl", _Library()))
    except (ImportError, AttributeError, TypeError):  # pragma: no cover - another ctypes
        import ctypes

        call = ctypes.CDLL(None, use_errno=True).prctl
    return int(call(option, arg, 0, 0, 0))


def owns_children() -> bool:
    """Whether this process declared it owns all of its children (:func:`enable_subreaper`
    was called, whatever its answer): the CLI and the deferred runner. Only such a process
    reaps adopted orphans and forks a guardian (:mod:`supervisor.engine._guardian`)."""
    return _subreaper is not None


def subreaper_enabled() -> bool:
    """Whether :func:`enable_subreaper` succeeded in this process."""
    return bool(_subreaper)


def our_children() -> list[int] | None:
    """Pids of this process's direct children, read from ``/proc/self/task/*/children``
    (Linux with ``CONFIG_PROC_CHILDREN``): cheap (one small read per thread), unlike a scan of
    the whole process table. None when the listing is unknown (not Linux, :data:`PORTABLE`,
    ``/proc`` unreadable, a thread's list unreadable): a caller asking "is anything left?"
    must then assume yes. A thread that ended meanwhile is skipped. Never raises."""
    if PORTABLE or not sys.platform.startswith("linux"):
        return None
    pids: list[int] = []
    try:
        tasks = os.listdir("/proc/self/task")
    except OSError:
        return None
    main = str(os.getpid())
    for tid in tasks:
        try:
            with open(f"/proc/self/task/{tid}/children", "rb") as f:
                pids.extend(int(x) for x in f.read().split())
        except FileNotFoundError:
            if tid == main:  # the main thread runs us: a kernel without CONFIG_PROC_CHILDREN
                return None
            continue  # a thread that ended
        except (OSError, ValueError):
            return None
    return pids


def reap_zombie_children(keep: Iterable[int] = (), limit: int | None = None) -> int:
    """Reap zombie children of this process, stopping at the first one in ``keep`` (a pid its
    owner still waits for) and after ``limit`` (None: no bound); return how many.

    ``waitid(WNOWAIT)`` peeks at a zombie before ``waitpid`` reaps it, so a pid of ``keep`` is
    never reaped. Only for a process that owns all of its children (the ``supervise`` CLI, the
    deferred runner): an embedding program's own children must be left to it. Never raises.
    """
    skip = set(keep)
    count = 0
    while limit is None or count < limit:
        try:
            info = os.waitid(os.P_ALL, 0, os.WEXITED | os.WNOHANG | os.WNOWAIT)
        except (ChildProcessError, OSError):
            break
        if info is None or info.si_pid == 0 or info.si_pid in skip:
            break
        try:
            os.waitpid(info.si_pid, os.WNOHANG)
            count += 1
        except (ChildProcessError, OSError):
            break
    return count


ENOEXEC_SHELL = "/bin/sh"
"""The shell a file without a ``#!`` line is run with (execvp's ``ENOEXEC`` rule)."""


def shell_fallback(path: str, argv: Sequence[str]) -> list[str]:
    """The argv that runs ``path`` (the file ``argv[0]`` named, found) with
    :data:`ENOEXEC_SHELL` when exec refused it with ``ENOEXEC`` (no ``#!`` line):
    ``[ENOEXEC_SHELL, path, *argv[1:]]``, as glibc's ``execvp``, GNU ``timeout``, ``env`` and
    the shells do; for ``supervise run`` and for stages (:mod:`supervisor.engine._spawn`)."""
    return [ENOEXEC_SHELL, path, *argv[1:]]
