"""Who runs us: an ancestry walk, one harness matcher, process identities.

A process is identified by ``(pid, create_time)``, never by pid alone, so a recycled pid is
not mistaken for the process that took the lock (a known weakness of pid-only lock files).
``create_time`` is psutil's definition (seconds since the epoch, derived from boot time; read
from ``/proc`` on Linux by :mod:`supervisor.session._procinfo`); two readings
of the same process are compared with :data:`CREATE_TIME_TOLERANCE` seconds of slack because
the boot time psutil derives can drift by a clock tick on some kernels (WSL2, NTP steps).

The walk (:func:`ancestry`) climbs parent by parent; a vanished, zombie or unreadable parent,
or a "parent" younger than its child (the pid was reused: psutil's ``parent()`` guard),
simply ends it. :func:`find_harness` applies one matcher to every hop (first
:data:`HARNESS_HOPS` parents) and the **nearest** harness ancestor owns the session. One
exception: Claude Code can run hooks from helper processes that are themselves named
``claude`` (hook shell -> bg-pty-host -> claude -> claude). A ``claude`` process is a helper
of *our* session when its environment carries ``CLAUDE_CODE_SESSION_ID`` equal to our
session id (Claude sets it for every process it spawns; the session process itself, started
by a user or a host, does not carry its own id: LAB, claude-code 2.1.197), and only then does
the walk climb to its ``claude`` parent. So a host process above the harness (the desktop
app named ``Claude``, or a ``claude`` that ran ``claude -p``) never becomes the owner
(issue 12, item 4).
"""

from __future__ import annotations

import os

from .._harnesses import ROWS
from .._record import record

from ._procinfo import ProcInfo, proc_info

HARNESS_HOPS = 16
"""Parents examined when looking for the harness process."""
OWNER_HOPS = 64
"""Parents examined when checking whether a lock owner is one of our ancestors."""
NUDGE_HOPS = 8
"""Parents examined by the nudge's "the digest already ran here" check."""
CREATE_TIME_TOLERANCE = 1.0
"""Seconds two ``create_time`` readings of one process may differ by."""

HARNESSES: dict[str, str] = {process: row.name for row in ROWS for process in row.processes}
"""Executable name -> harness name (``SUPERVISE_HARNESS``), from the harness table."""

_PACKAGES: dict[str, str] = {package: row.name for row in ROWS for package in row.packages}
"""npm packages whose entry script a ``node``/``bun`` process runs, from the harness table."""

_RUNTIMES = frozenset({"node", "nodejs", "bun", "deno"})


def _versioned(argv0: str) -> str | None:
    """Claude's native installer runs ``.../claude/versions/2.1.197``: the process name is the
    version, the harness is the folder two levels up. (String ops: ``re`` stays off the hook's
    hot path, ``tests/test_exports.py``.)"""
    parts = argv0.rstrip("/").split("/")
    if len(parts) >= 3 and parts[-2] == "versions" and parts[-1] and parts[-3] in HARNESSES:
        return HARNESSES[parts[-3]]
    return None


@record
class ProcessId:
    """One process: ``pid`` and its ``create_time`` (seconds since the epoch)."""

    pid: int
    create_time: float

    def same(self, other: ProcessId) -> bool:
        """Same pid and the same start (within :data:`CREATE_TIME_TOLERANCE` seconds)."""
        return self.pid == other.pid and abs(self.create_time - other.create_time) <= CREATE_TIME_TOLERANCE


@record
class HarnessProcess:
    """The harness process that owns a session: identity, harness name, process name."""

    ident: ProcessId
    harness: str
    name: str


def _basename(path: str) -> str:
    return path.rstrip("/").rsplit("/", 1)[-1]


def match_harness(name: str, cmdline: list[str] | tuple[str, ...]) -> str | None:
    """The harness a process is, from its name and argv, or ``None``.

    Matches: the process name or ``argv[0]``'s basename is a harness executable
    (:data:`HARNESSES`, ``claude*`` too, but not the desktop app ``Claude``, a host); ``argv[0]`` is Claude's versioned native binary;
    or a ``node``/``bun``/``deno`` process runs a harness package or a script named like one.
    """
    argv0 = cmdline[0] if cmdline else ""
    for candidate in (name, _basename(argv0)):
        if candidate in HARNESSES:
            return HARNESSES[candidate]
        if candidate.startswith("claude"):  # not "Claude": the desktop app hosts sessions
            return "claude"
    found = _versioned(argv0)
    if found:
        return found
    if name in _RUNTIMES or _basename(argv0) in _RUNTIMES:
        for arg in cmdline[1:4]:
            for package, harness in _PACKAGES.items():
                if f"/{package}/" in arg or arg.startswith(package + "/"):
                    return harness
            base = _basename(arg)
            if base in HARNESSES:
                return HARNESSES[base]
    return None


def identify(pid: int) -> ProcessId | None:
    """``(pid, create_time)`` of a live, non-zombie process, else ``None``."""
    info = proc_info(pid)
    return None if info is None else ProcessId(pid, info.create_time)


def is_alive(ident: ProcessId) -> bool:
    """True when the process ``ident`` names still runs (same pid and the same start time)."""
    now = identify(ident.pid)
    return now is not None and now.same(ident)


def ancestry(hops: int = OWNER_HOPS, start: int | None = None) -> list[ProcInfo]:
    """``start`` (default: us) then up to ``hops`` parents, stopping at a vanished,
    unreadable, repeated or younger-than-its-child process. Never raises."""
    chain: list[ProcInfo] = []
    info = proc_info(os.getpid() if start is None else start)
    seen: set[int] = set()
    while info is not None and info.pid not in seen and len(chain) <= hops:
        chain.append(info)
        seen.add(info.pid)
        if info.ppid <= 0:
            break
        parent = proc_info(info.ppid)
        if parent is not None and parent.create_time > info.create_time + CREATE_TIME_TOLERANCE:
            break  # pid reuse: that process is newer than its "child"
        info = parent
    return chain


def ancestor_ids(chain: list[ProcInfo]) -> list[ProcessId]:
    """Identities of ``chain``."""
    return [ProcessId(p.pid, p.create_time) for p in chain]


CLAUDE_SESSION_ENV = "CLAUDE_CODE_SESSION_ID"
"""The variable Claude Code sets, to its session id, in every process it spawns."""


def session_ids(session_id: str = "") -> frozenset[str]:
    """The ids naming *our* session: the payload's ``session_id`` and our own
    ``CLAUDE_CODE_SESSION_ID`` (empty ones dropped)."""
    return frozenset(s for s in (session_id, os.environ.get(CLAUDE_SESSION_ENV, "")) if s)


def _claude_helper(proc: ProcInfo, ours: frozenset[str]) -> bool:
    """``proc`` (a ``claude`` process) was spawned by our own Claude session."""
    if not ours:
        return False
    from ._procinfo import environ_value

    return environ_value(proc.pid, CLAUDE_SESSION_ENV) in ours


def find_harness(chain: list[ProcInfo], session_id: str = "") -> HarnessProcess | None:
    """The harness owning this session among the first :data:`HARNESS_HOPS` parents of ``chain``.

    ``chain[0]`` (ourselves) is not examined. The nearest harness process owns; a ``claude``
    match climbs to its ``claude`` parent only while it is a helper of our session (its
    ``CLAUDE_CODE_SESSION_ID`` is one of :func:`session_ids` of ``session_id``), so a host
    above the harness is never the owner.
    """
    ours = session_ids(session_id)
    found: HarnessProcess | None = None
    for proc in chain[1:HARNESS_HOPS + 1]:
        harness = match_harness(proc.name, proc.cmdline)
        if found is not None:
            if harness != "claude":
                break
        elif harness is None:
            continue
        assert harness is not None
        found = HarnessProcess(ProcessId(proc.pid, proc.create_time), harness, proc.name)
        if harness != "claude" or not _claude_helper(proc, ours):
            break
    return found


_VERSIONS: dict[tuple[str, int], str] = {}
"""``{(package.json path, its mtime in ns): version}`` read in this process."""
_PACKAGE_CAP = 256 * 1024
"""Bytes of a harness's ``package.json`` read at most."""


def _package_version(start: str, packages: tuple[str, ...]) -> str:
    """The ``version`` of the nearest ``package.json`` at or above ``start``'s folder (at most
    five levels) whose ``name`` is one of ``packages``; "" when there is none. Each is read
    guarded (:func:`supervisor.state._fsutil.read_small_file`: never blocking on a FIFO, a
    regular file of at most ``_PACKAGE_CAP`` bytes)."""
    from .. import _jsontext
    from .._errors import ConfigError
    from ..state._fsutil import read_small_file

    folder = os.path.dirname(start)
    for _ in range(5):
        path = os.path.join(folder, "package.json")
        try:
            st = os.stat(path)
        except OSError:
            st = None
        if st is not None:
            key = (path, st.st_mtime_ns)
            if key not in _VERSIONS:
                version = ""
                try:
                    raw = read_small_file(path, _PACKAGE_CAP, missing_ok=True) or b""
                    doc = _jsontext.loads(raw)
                    if isinstance(doc, dict) and doc.get("name") in packages:
                        version = str(doc.get("version") or "")
                except (ConfigError, ValueError, RecursionError, MemoryError):
                    pass  # a FIFO, huge, deep or broken package.json names no version
                _VERSIONS[key] = version if _plain_version(version) else ""
            if _VERSIONS[key]:
                return _VERSIONS[key]
        parent = os.path.dirname(folder)
        if parent == folder:
            break
        folder = parent
    return ""


def _plain_version(text: str) -> bool:
    """Dotted digits with an optional ``-tag`` (``2.1.332``, ``1.0.0-beta.1``), at most 64."""
    head = text.split("-", 1)[0]
    return 0 < len(text) <= 64 and all(part.isdigit() for part in head.split(".")) \
        and text.isprintable() and " " not in text


def installed_version(pid: int, harness: str) -> str:
    """The version of harness ``harness`` that process ``pid`` runs, learned without running
    it: Claude's native installer runs ``.../versions/<version>``; otherwise the
    ``package.json`` of the harness's npm package (the harness table's ``packages``) at or
    above the process's executable or the script a ``node``/``bun`` process runs, read once
    per path and mtime. "" when it cannot be told (no ``/proc``, an unknown layout); the
    harness table's rules then take the floor's behaviour. Never raises."""
    from .._harnesses import BY_NAME

    row = BY_NAME.get(harness)
    if row is None or not row.packages:
        return ""
    starts: list[str] = []
    try:
        starts.append(os.readlink(f"/proc/{pid}/exe"))
    except OSError:
        pass
    info = proc_info(pid)
    if info is not None:
        starts += [arg for arg in info.cmdline[:3] if arg.startswith("/")]
    for start in starts:
        parts = start.rstrip("/").split("/")
        if len(parts) >= 3 and parts[-2] == "versions" and _plain_version(parts[-1]):
            return parts[-1]
        found = _package_version(start, row.packages)
        if found:
            return found
    return ""
