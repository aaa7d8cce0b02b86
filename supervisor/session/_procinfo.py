"""Process facts for the hook's hot path: ``/proc`` on Linux, psutil elsewhere.

The ancestry walk reads four facts per hop (parent, start time, name, argv). On Linux they
come straight from ``/proc/<pid>/stat`` and ``/proc/<pid>/cmdline``, cheaper than psutil per
hop, and psutil's import stays off the hook (``tests/test_exports.py``). ``create_time`` is
computed exactly as psutil computes it (boot time from ``/proc/stat`` plus the start time in
clock ticks), so identities recorded by either agree.
"""

from __future__ import annotations

import os
import sys
from .._record import record
from functools import cache

from ..engine._reaper import PORTABLE  # SUPERVISE_PORTABLE: psutil, as off Linux

_LINUX = sys.platform.startswith("linux") and os.path.isdir("/proc/self") and not PORTABLE


@record
class ProcInfo:
    """One live process: ``pid``, parent ``ppid``, ``create_time`` (seconds since the epoch),
    ``name`` (the kernel's short name) and ``cmdline`` (argv; empty when unreadable)."""

    pid: int
    ppid: int
    create_time: float
    name: str
    cmdline: tuple[str, ...]


@cache
def _boot_time() -> float:
    with open("/proc/stat", "rb") as f:
        for line in f:
            if line.startswith(b"btime"):
                return float(line.split()[1])
    raise OSError("no btime in /proc/stat")


@cache
def _clock_ticks() -> int:
    return os.sysconf("SC_CLK_TCK")


def _linux(pid: int) -> ProcInfo | None:
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read()
    except OSError:
        return None
    # comm may contain spaces and parentheses: it ends at the LAST ')'.
    left, right = stat.find(b"("), stat.rfind(b")")
    name = stat[left + 1:right].decode("utf-8", "replace")
    fields = stat[right + 2:].split()
    state, ppid, starttime = fields[0], int(fields[1]), int(fields[19])
    if state in (b"Z", b"X"):
        return None  # a zombie counts as dead
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            raw = f.read()
        cmdline = tuple(a.decode("utf-8", "surrogateescape") for a in raw.split(b"\0") if a)
    except OSError:
        cmdline = ()
    return ProcInfo(pid, ppid, _boot_time() + starttime / _clock_ticks(), name, cmdline)


def _psutil(pid: int) -> ProcInfo | None:
    import psutil

    try:
        proc = psutil.Process(pid)
        with proc.oneshot():
            if proc.status() == psutil.STATUS_ZOMBIE:
                return None
            try:
                cmdline = tuple(proc.cmdline())
            except psutil.AccessDenied:
                cmdline = ()
            return ProcInfo(pid, proc.ppid(), proc.create_time(), proc.name(), cmdline)
    except (psutil.Error, OSError):
        return None


def proc_info(pid: int) -> ProcInfo | None:
    """Facts about live process ``pid``; None when it is gone, a zombie, or unreadable.
    Never raises."""
    try:
        return _linux(pid) if _LINUX else _psutil(pid)
    except (OSError, ValueError, IndexError):
        return None


ENVIRON_CAP = 256 * 1024
"""Bytes of ``/proc/<pid>/environ`` read at most (a larger environment is cut there)."""


def environ_value(pid: int, name: str) -> str | None:
    """The value of variable ``name`` in process ``pid``'s initial environment, or None when
    it is unset or unreadable (another user's process, no ``/proc``: psutil is tried).
    Never raises."""
    try:
        if _LINUX:
            with open(f"/proc/{pid}/environ", "rb") as f:
                raw = f.read(ENVIRON_CAP)
            prefix = name.encode() + b"="
            for item in raw.split(b"\0"):
                if item.startswith(prefix):
                    return item[len(prefix):].decode("utf-8", "replace")
            return None
        import psutil

        return psutil.Process(pid).environ().get(name)
    except Exception:  # noqa: BLE001 - psutil.Error, OSError, ValueError: all "unknown"
        return None


@cache
def namespace_identity() -> tuple[str, str]:
    """``(pid namespace, boot id)`` of this process: ``readlink /proc/self/ns/pid``
    (``pid:[4026531836]``) and ``/proc/sys/kernel/random/boot_id``; ``""`` for what cannot
    be read (no ``/proc``: macOS). Two processes can judge each other's liveness by pid only
    when both match. Never raises."""
    try:
        pid_ns = os.readlink("/proc/self/ns/pid")
    except OSError:
        pid_ns = ""
    try:
        with open("/proc/sys/kernel/random/boot_id", "rb") as f:
            boot_id = f.read(64).decode("ascii", "replace").strip()
    except OSError:
        boot_id = ""
    return pid_ns, boot_id


INIT_PID_NS = "pid:[4026531836]"
"""The initial pid namespace (the kernel's fixed ``PROC_PID_INIT_INO``, 0xEFFFFFFC): namespace
inode numbers are global, so a process whose ``/proc/self/ns/pid`` reads this is on the host,
where every process of every pid namespace of this kernel has a ``/proc`` entry."""


def _nspid_last(pid: str) -> int | None:
    with open(f"/proc/{pid}/status", "rb") as f:
        for line in f:
            if line.startswith(b"NSpid:"):
                parts = line.split()[1:]
                return int(parts[-1]) if parts else None
    return None


def _proc_hides_pids() -> bool:
    """True when ``/proc`` is mounted with ``hidepid`` (other users' processes hidden)."""
    try:
        with open("/proc/self/mountinfo", "rb") as f:
            for line in f:
                fields = line.split()
                if len(fields) > 4 and fields[4] == b"/proc" and b"hidepid=" in line:
                    opt = line.split(b"hidepid=", 1)[1].split(b",")[0].split()[0]
                    return opt not in (b"0", b"off")
    except (OSError, IndexError):
        return True
    return False


def _start_time(pid: str, boot: float) -> float | None:
    """Process ``pid``'s start (seconds since the epoch) from ``/proc/<pid>/stat``, which every
    user may read; None when it is gone, a zombie or unreadable."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read()
        fields = stat[stat.rfind(b")") + 2:].split()
        if fields[0] in (b"Z", b"X"):
            return None
        return boot + int(fields[19]) / _clock_ticks()
    except (OSError, IndexError, ValueError):
        return None


def find_in_namespace(pid_ns: str, ns_pid: int, create_time: float,
                      tolerance: float = 1.0) -> tuple[bool, int | None]:
    """Look, from the host, for the process that is ``ns_pid`` inside pid namespace ``pid_ns``
    and started at ``create_time`` (seconds since the epoch, within ``tolerance`` seconds).

    Returns ``(True, host pid)`` when found, ``(True, None)`` when no such process runs on this
    kernel (that namespace, or that process in it, is gone), and ``(False, None)`` when this
    process cannot tell: it is not in the initial pid namespace (:data:`INIT_PID_NS`; a
    container's own ``/proc`` shows only its own processes), ``/proc`` hides pids
    (``hidepid``), or a process started at that moment belongs to another user (its
    namespace link cannot be read). Only processes started within ``tolerance`` of
    ``create_time`` are examined (``/proc/<pid>/stat`` is readable by everyone), so a
    root-owned daemon does not make the answer unknown. Only called for a lock taken in
    another pid namespace. Never raises."""
    try:
        if os.readlink("/proc/self/ns/pid") != INIT_PID_NS or _proc_hides_pids():
            return False, None
        boot = _boot_time()
        with os.scandir("/proc") as entries:
            for entry in entries:
                if not entry.name.isdigit():
                    continue
                started = _start_time(entry.name, boot)
                if started is None or abs(started - create_time) > tolerance:
                    continue
                try:
                    if (os.readlink(f"/proc/{entry.name}/ns/pid") == pid_ns
                            and _nspid_last(entry.name) == ns_pid):
                        return True, int(entry.name)
                except FileNotFoundError:
                    continue  # exited while we looked
                except (OSError, ValueError):
                    return False, None  # a candidate we cannot examine: cannot tell
        return True, None
    except (OSError, ValueError):
        return False, None


def boot_time() -> float:
    """This kernel's boot time (seconds since the epoch), or 0.0 when unknown. Never raises."""
    try:
        if _LINUX:
            return _boot_time()
        import psutil

        return float(psutil.boot_time())
    except Exception:  # noqa: BLE001 - unknown
        return 0.0
