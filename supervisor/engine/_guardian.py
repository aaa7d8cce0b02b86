"""The guardian: a stage never outlives a SIGKILLed supervisor by more than a moment.

A supervisor that is killed outright (the harness ending the hook at its registered timeout,
the OOM killer, ``kill -9``) runs no kill sequence: its stages live on for their natural life,
and a deferred runner's stage loses its deadline. So the process that runs stages (the
``supervise`` CLI, the deferred runner: :func:`supervisor.engine._reaper.enable_subreaper`
marks it as owning all of its children) forks, per digest, one small guardian before the
first stage starts. The guardian leaves the session (a kill of the hook's process group does
not reach it), holds nothing of ours (stdio on ``/dev/null``, every other descriptor closed:
no pipe of our caller, no lock) but the read end of one pipe, whose write end only the
supervisor holds (close-on-exec, never passed to a stage).

The supervisor writes one line per stage about to start (``T TOKEN [CGROUP]``), per stage
start (``+ PID START TOKEN [CGROUP]``, ``-`` for an unknown START) and end (``- PID``), and
``end`` when the digest is over. When the guardian reads end of file
without ``end`` first, the supervisor is gone: it stops and kills, by SIGSTOP then SIGKILL,
every process of each stage still registered (its process group while its leader, the same
start stamp, lives; every process carrying its ``SUPERVISE_STAGE_TOKEN``; the descendants of
those; its cgroup by ``cgroup.kill``), rescanning until a round finds nothing new, then exits.
Linux reads ``/proc``; elsewhere psutil (the portable path's listing, rows and environment
reads of :mod:`._proctable`; ``SUPERVISE_PORTABLE=1`` forces them on Linux, and
``tests/test_portable.py`` runs ``tests/test_guardian.py`` so: the macOS code path, short of
``launchd``).

A fork, not a new interpreter: it costs one ``fork`` (about a millisecond: the pages are
shared copy-on-write) and no CPU while it waits; the child runs only this module's loop and
``os._exit``.
"""

from __future__ import annotations

import os
import sys

from ._reaper import TOKEN_VAR

TYPE_CHECKING = False  # not `typing.TYPE_CHECKING`: `supervise run` imports this module
if TYPE_CHECKING:
    import signal
else:
    try:  # CPython's `_signal`: `signal`'s functions and numbers without its three IntEnums
        import _signal as signal  # (and enum, functools, collections), built at every import
    except ImportError:
        import signal

UNKNOWN = -1.0
"""The start stamp of a leader registered without one (:meth:`Guardian.watch` with
``start=None``): its token tells it from a process that took its pid since."""
ROUNDS = 6
"""Most scan rounds of the kill (each stops what it finds; done when one finds nothing new)."""


def _one_thread() -> bool:
    """Whether this process runs one thread (``/proc/self/task``; False when unknown)."""
    try:
        return len(os.listdir("/proc/self/task")) == 1
    except OSError:
        return False


class Guardian:
    """The supervisor's side: the pipe's write end and the guardian's pid.

    :meth:`start` forks it (None where it cannot: no ``fork``, the pipe or the fork failed).
    :meth:`watch` and :meth:`forget` register a stage's start and end, :meth:`close` ends it
    (the digest is over: the guardian exits without killing anything). Writes never block
    and never raise: a full pipe drops a line (a guardian that missed a stage start cannot
    kill it; the supervisor's own kill sequence still does while it lives).
    """

    def __init__(self, pid: int, fd: int) -> None:
        self.pid = pid
        self._fd: int | None = fd

    @classmethod
    def start(cls, first: tuple[str, str | None] | None = None) -> Guardian | None:
        """Fork the guardian; its :class:`Guardian` handle, or None.

        ``first`` (``supervise run``'s lean path, :mod:`supervisor.engine._runwait`): the
        ``(token, cgroup or None)`` of a command about to be spawned, known to the guardian
        from the fork on; the caller then passes the leader with ``start=None``, so it pays
        for the fork alone (no ``/proc`` read, no :mod:`._proctable` import), and the
        guardian does nothing but read its pipe until it must kill."""
        if not hasattr(os, "fork"):
            return None
        try:
            r, w = os.pipe()
        except OSError:
            return None
        try:
            if sys.version_info < (3, 12) or _one_thread():  # no fork warning to silence
                pid = os.fork()  # (nor `warnings` to import: `supervise run` forks us first)
            else:
                import warnings

                with warnings.catch_warnings():
                    warnings.simplefilter("ignore", DeprecationWarning)  # fork with threads
                    pid = os.fork()
        except OSError:
            os.close(r)
            os.close(w)
            return None
        if pid == 0:  # pragma: no cover - the child never returns
            _child(r, w, first)
        os.close(r)
        os.set_blocking(w, False)
        return cls(pid, w)

    def _send(self, line: str) -> None:
        if self._fd is None:
            return
        try:
            os.write(self._fd, line.encode("utf-8", "replace") + b"\n")
        except OSError:  # full (a guardian that stopped reading) or gone
            pass

    def watch(self, pid: int, start: float | None, token: str, cgroup: str | None = None) -> None:
        """Register a stage's leader ``pid`` (its start stamp ``start``), token and cgroup.
        ``start`` None (no ``/proc`` read here): the guardian takes ``pid`` for the leader
        while it carries ``token`` (a process that took its pid since does not)."""
        stamp = "-" if start is None else repr(start)
        self._send(f"+ {pid} {stamp} {token}" + (f" {cgroup}" if cgroup else ""))

    def expect(self, token: str, cgroup: str | None = None) -> None:
        """A stage is about to be spawned with ``token`` (and ``cgroup``): from now on a
        SIGKILL of the supervisor kills what carries the token, even before :meth:`watch`
        names its leader (the spawn and that line can be far apart on a loaded host)."""
        self._send(f"T {token}" + (f" {cgroup}" if cgroup else ""))

    def forget(self, pid: int) -> None:
        """The stage led by ``pid`` ended and was swept: nothing of it to kill any more."""
        self._send(f"- {pid}")

    def close(self) -> None:
        """The digest is over: the guardian exits without killing; reaped if already gone
        (else the CLI's final reap, or init, takes it)."""
        if self._fd is None:
            return
        self._send("end")
        fd, self._fd = self._fd, None
        os.close(fd)
        try:
            os.waitpid(self.pid, os.WNOHANG)
        except ChildProcessError:
            pass


def _child(r: int, w: int, first: tuple[str, str | None] | None = None,
           ) -> None:  # pragma: no cover - runs in the forked child
    """The guardian's life: never returns."""
    try:
        os.close(w)
        signal.set_wakeup_fd(-1)
        for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGCHLD,
                    signal.SIGPIPE, signal.SIGQUIT, signal.SIGALRM):
            signal.signal(sig, signal.SIG_DFL)
        signal.pthread_sigmask(signal.SIG_SETMASK, set())
        os.setsid()
        null = os.open(os.devnull, os.O_RDWR)
        for fd in (0, 1, 2):
            os.dup2(null, fd)
        keep = r
        os.closerange(3, keep)
        os.closerange(keep + 1, 1 << 20)
        stages: dict[int, tuple[float, str, str | None]] = {}
        anonymous = 0  # keys of the stages known by their token alone: -1, -2, ...
        if first is not None:  # known by its token until its leader's line comes
            anonymous -= 1
            stages[anonymous] = (UNKNOWN, first[0], first[1])
        buf = b""
        while True:
            try:
                data = os.read(keep, 65536)
            except InterruptedError:
                continue
            if not data:
                break
            buf += data
            *lines, buf = buf.split(b"\n")
            for line in lines:
                parts = line.decode("utf-8", "replace").split(" ")
                if parts[0] == "end":
                    os._exit(0)
                try:
                    if parts[0] == "+" and len(parts) >= 4:
                        pid = int(parts[1])
                        stamp = UNKNOWN if parts[2] == "-" else float(parts[2])
                        if pid > 0:
                            stages[pid] = (stamp, parts[3], parts[4] if len(parts) > 4 else None)
                    elif parts[0] == "T" and len(parts) >= 2:
                        anonymous -= 1
                        stages[anonymous] = (UNKNOWN, parts[1],
                                             parts[2] if len(parts) > 2 else None)
                    elif parts[0] == "-" and len(parts) >= 2:
                        gone = stages.pop(int(parts[1]), None)
                        if gone is not None:  # and its token-only entry
                            for key in [k for k, v in stages.items() if k < 0 and v[1] == gone[1]]:
                                del stages[key]
                except ValueError:
                    continue
        if stages:
            kill_all(stages)
    except BaseException:  # noqa: BLE001 - the guardian never returns into our caller's code
        pass
    os._exit(0)


def kill_all(stages: dict[int, tuple[float, str, str | None]], var: str = TOKEN_VAR) -> int:
    """Stop, then kill, every process of ``stages`` (leader pid -> (start stamp, token,
    cgroup or None)): each round scans, SIGSTOPs what it finds (a stopped process cannot
    fork) and the groups of the leaders still alive, until a round finds nothing new or
    :data:`ROUNDS`; then SIGKILL to all of them and ``cgroup.kill``. Returns how many
    processes it killed. An entry of a pid below 1 is known by its token (and cgroup) alone; a
    leader registered with the stamp :data:`UNKNOWN` is one while it carries its token
    (a process that took its pid since does not). The token is the environment variable
    ``var`` (the stage token; a deferred run's ``RUN_VAR`` for a run whose runner is
    gone: :func:`supervisor.engine._deferred.launch_all`). Never raises."""
    from ._proctable import environ_value, start_stamp

    leaders = {pid for pid, (start, token, _) in stages.items()
               if pid > 0 and (start_stamp(pid) == start if start != UNKNOWN
                               else environ_value(pid, var) == token)}
    tokens = {token for _, token, _ in stages.values()}
    found: dict[int, float] = {}
    for _ in range(ROUNDS):
        for pid in leaders:
            _signal_group(pid, signal.SIGSTOP)
        new = {pid: start for pid, start in _members(stages, leaders, tokens, var).items()
               if found.get(pid) != start}
        for pid in new:
            _signal(pid, signal.SIGSTOP)
        found.update(new)
        if not new:
            break
    for pid in leaders:
        _signal_group(pid, signal.SIGKILL)
    for pid, start in found.items():
        if start_stamp(pid) == start:
            _signal(pid, signal.SIGKILL)
    for _, _, cgroup in stages.values():
        if cgroup:
            try:
                with open(os.path.join(cgroup, "cgroup.kill"), "w") as f:
                    f.write("1")
            except OSError:
                pass
    return len(found)


def _signal(pid: int, sig: int) -> None:
    try:
        os.kill(pid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def _signal_group(pgid: int, sig: int) -> None:
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def _members(stages: dict[int, tuple[float, str, str | None]], leaders: set[int],
             tokens: set[str], var: str = TOKEN_VAR) -> dict[int, float]:
    """pid -> start stamp of every live process of ``stages``: in the session or group of a
    live leader, carrying a token, or descending from one of those."""
    from ._proctable import environ_value, stat

    me = os.getpid()
    rows = {}
    for pid in _pids():
        if pid == me:
            continue
        row = stat(pid)
        if row is not None and not row.zombie:
            rows[pid] = row
    owned: set[int] = set()
    children: dict[int, list[int]] = {}
    for row in rows.values():
        children.setdefault(row.ppid, []).append(row.pid)
        if row.sid in leaders or row.pgid in leaders or row.pid in leaders:
            owned.add(row.pid)
    for pid in rows:
        if pid not in owned and environ_value(pid, var) in tokens:
            owned.add(pid)
    stack = list(owned)
    while stack:
        for child in children.get(stack.pop(), ()):
            if child not in owned and child in rows:
                owned.add(child)
                stack.append(child)
    return {pid: rows[pid].start for pid in owned}


def _pids() -> list[int]:
    from ._proctable import PROCFS

    if PROCFS:  # /proc; psutil's listing on the portable path (macOS, SUPERVISE_PORTABLE)
        try:
            return [int(name) for name in os.listdir("/proc") if name.isdigit()]
        except OSError:
            return []
    try:
        import psutil

        return list(psutil.pids())
    except Exception:  # noqa: BLE001 - no listing: the groups alone are killed
        return []
