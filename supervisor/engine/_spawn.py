"""Start a stage's leader in its own session and wait for it, without asyncio's subprocess
machinery (issue 13: the engine's own overheads).

:func:`spawn` starts the leader with ``os.posix_spawn(..., setsid=True)`` (``vfork`` and
``exec``: no copy of this process's page tables, no Python-level error pipe) when the stage
runs in this process's working directory and this process holds no inheritable descriptor above
2 (``posix_spawn`` in Python 3.11 can neither change directory nor close inherited
descriptors). Otherwise it falls back to :class:`subprocess.Popen` (``fork``, ``chdir``,
``close_fds``), with the same result. Either way the caller gets a :class:`Child`: the pid, the
read ends of its pipes (non-blocking, read with ``anyio.wait_readable``), and a :meth:`Child.wait`
that sleeps on a pidfd (Linux 5.3+) or polls ``waitpid`` with a short backoff elsewhere
(macOS). The leader is reaped by :meth:`Child.wait`/:meth:`Child.poll` only: until then its pid
cannot be reused, which the watchdog's process-group guard relies on (design rule 10).
"""

from __future__ import annotations

import errno
import os
import select
import signal
import subprocess
import threading
from collections.abc import Callable, Mapping, Sequence
from typing import Literal

import anyio
import anyio.to_thread

from ._reaper import shell_fallback

Stderr = Literal["stdout", "pipe", "null", "inherit"]

PIDFD = hasattr(os, "pidfd_open")
"""Whether :meth:`Child.wait` may sleep on a pidfd (Linux); tests turn it off to run the
portable ``waitpid`` polling."""
_RESTORE = tuple(getattr(signal, name) for name in ("SIGPIPE", "SIGXFZ", "SIGXFSZ")
                 if hasattr(signal, name))
POLL_MAX = 0.02
"""Longest pause, in seconds, between two ``waitpid`` polls where there is no pidfd."""


class Child:
    """A spawned stage leader (its own session and process group).

    ``pid``: its pid; ``returncode``: None until reaped, then the exit status, or ``-N`` for
    death by signal N (as :attr:`subprocess.Popen.returncode`); ``stdout`` and ``stderr``: the
    read ends of its pipes as non-blocking descriptors, or None (not piped, or closed).
    """

    def __init__(self, pid: int, stdout: int | None, stderr: int | None) -> None:
        self.pid = pid
        self.returncode: int | None = None
        self.stdout = stdout
        self.stderr = stderr
        self._pidfd: int | None = None
        if PIDFD:
            try:
                self._pidfd = os.pidfd_open(pid)  # unreaped: the pid is still ours
            except OSError:  # ENOSYS (kernel < 5.3), EMFILE: poll instead
                self._pidfd = None

    def poll(self) -> int | None:
        """Reap the leader if it has exited (never blocks); its return code or None."""
        if self.returncode is None:
            try:
                pid, status = os.waitpid(self.pid, os.WNOHANG)
            except ChildProcessError:  # reaped by someone else: its status is lost
                self.returncode = 255
            else:
                if pid:
                    self.returncode = os.waitstatus_to_exitcode(status)
        return self.returncode

    async def wait(self) -> int:
        """Wait (cancellably) until the leader exits, reap it, return its return code."""
        delay = 0.001
        while self.poll() is None:
            if self._pidfd is not None:
                await anyio.wait_readable(self._pidfd)
            else:
                await anyio.sleep(delay)
                delay = min(delay * 2, POLL_MAX)
        assert self.returncode is not None
        return self.returncode

    def close_stdout(self) -> None:
        """Close our read end of the leader's stdout pipe (idempotent)."""
        if self.stdout is not None:
            fd, self.stdout = self.stdout, None
            os.close(fd)

    def close(self) -> None:
        """Close every descriptor still held (pipes, pidfd); idempotent. Does not reap."""
        self.close_stdout()
        for name in ("stderr", "_pidfd"):
            fd = getattr(self, name)
            if fd is not None:
                setattr(self, name, None)
                os.close(fd)


def spawn(argv: Sequence[str], *, cwd: str | os.PathLike[str], env: Mapping[str, str],
          capture: bool = True, stderr: Stderr = "stdout", vfork: bool = True) -> Child:
    """Start ``argv`` in a new session (``setsid``) with stdin from ``/dev/null``.

    Args:
        argv: the command; ``argv[0]`` without a slash is looked up in ``env``'s ``PATH``
            (as :class:`subprocess.Popen` does with ``env``).
        cwd: its working directory.
        env: its whole environment.
        capture: True: stdout is a pipe (:attr:`Child.stdout`); False: the leader inherits
            this process's stdin, stdout and stderr (``supervise run`` without capture, like
            GNU ``timeout``) and ``stderr`` is ignored.
        stderr: ``"stdout"`` merged into the stdout pipe, ``"pipe"`` its own pipe
            (:attr:`Child.stderr`), ``"null"`` to ``/dev/null``.
        vfork: False forces the ``fork`` path; pass :func:`may_vfork`'s answer, computed
            once per digest.

    Returns:
        A :class:`Child`.

    Raises:
        OSError: the command or the directory cannot be used (``filename`` names which, as
            with :class:`subprocess.Popen`).
    """
    fds: list[int] = []  # every pipe end we created, closed on failure
    out_r: int | None = None
    out_w: int | None = None
    err_r: int | None = None
    err_w: int | None = None
    try:
        if capture:
            out_r, out_w = os.pipe()
            fds += (out_r, out_w)
            if stderr == "pipe":
                err_r, err_w = os.pipe()
                fds += (err_r, err_w)
        try:
            pid = _start(argv, cwd, env, out_w, err_w, capture, stderr, vfork)
        except OSError as err:
            if err.errno != errno.ENOEXEC:
                raise
            # execvp's rule: a file the kernel cannot execute (a script without `#!`) is
            # run by the shell
            pid = _start(shell_fallback(_resolve(argv[0], env), argv), cwd, env, out_w,
                         err_w, capture, stderr, vfork)
    except BaseException:
        for fd in fds:
            os.close(fd)
        raise
    for end in (out_w, err_w):
        if end is not None:
            os.close(end)
    for end in (out_r, err_r):
        if end is not None:
            os.set_blocking(end, False)
    return Child(pid, out_r, err_r)


def _start(argv: Sequence[str], cwd: str | os.PathLike[str], env: Mapping[str, str],
           out_w: int | None, err_w: int | None, capture: bool, stderr: Stderr,
           vfork: bool) -> int:
    if vfork and _same_directory(cwd):
        try:
            return _posix_spawn(argv, env, out_w, err_w, capture, stderr)
        except NotImplementedError:  # no POSIX_SPAWN_SETSID here (macOS < 10.15)
            pass
    return _popen(argv, cwd, env, out_w, err_w, capture, stderr)


def may_vfork() -> bool:
    """Whether :func:`spawn` may use ``posix_spawn``: this process holds no inheritable
    descriptor above 2 (``posix_spawn`` keeps every inheritable descriptor open in the child;
    descriptors Python opens are non-inheritable, PEP 446, but a parent may pass us some, and
    a stage must not hold them). One listing of the open descriptors."""
    return not _inheritable_fds()


def own_descriptors() -> None:
    """Make every descriptor above 2 that this process inherited non-inheritable (what
    :class:`subprocess.Popen`'s ``close_fds`` did for each stage), so that :func:`may_vfork`
    holds. Only for a process that owns all of its children (the ``supervise`` CLI): an
    embedding program may mean to pass a descriptor to its own children. Never raises."""
    for fd in _inheritable_fds():
        try:
            os.set_inheritable(fd, False)
        except OSError:
            pass


def _same_directory(cwd: str | os.PathLike[str]) -> bool:
    try:
        here, there = os.stat("."), os.stat(cwd)
    except OSError:
        return False  # Popen names the directory in its error
    return (here.st_dev, here.st_ino) == (there.st_dev, there.st_ino)


def _inheritable_fds() -> list[int]:
    for folder in ("/proc/self/fd", "/dev/fd"):
        try:
            names = os.listdir(folder)
        except OSError:
            continue
        found = []
        for name in names:
            fd = int(name)
            if fd > 2:
                try:
                    if os.get_inheritable(fd):
                        found.append(fd)
                except OSError:  # the listing's own descriptor, closed by now
                    continue
        return found
    return [-1]  # cannot tell: never posix_spawn


_found: dict[tuple[str, str | None], str] = {}


def _resolve(argv0: str, env: Mapping[str, str], cached: bool = True) -> str:
    """``argv0`` as a path, looked up in ``env``'s ``PATH`` when it has no slash (the last
    answer per name and ``PATH`` is reused: a digest of many stages runs few commands)."""
    if "/" in argv0:
        return argv0
    key = (argv0, env.get("PATH"))
    if cached and key in _found:
        return _found[key]
    for folder in os.get_exec_path(dict(env)):
        path = os.path.join(folder, argv0)
        if os.access(path, os.X_OK) and not os.path.isdir(path):
            if len(_found) > 256:
                _found.clear()
            _found[key] = path
            return path
    raise FileNotFoundError(errno.ENOENT, os.strerror(errno.ENOENT), argv0)


def _posix_spawn(argv: Sequence[str], env: Mapping[str, str], out_w: int | None,
                 err_w: int | None, capture: bool, stderr: Stderr) -> int:
    path = _resolve(argv[0], env)
    if path != argv[0] and not os.access(path, os.X_OK):
        path = _resolve(argv[0], env, cached=False)  # gone since: look again
    actions: list[tuple[int, ...] | tuple[int, int, str, int, int]] = []
    if capture:
        assert out_w is not None
        actions.append((os.POSIX_SPAWN_OPEN, 0, os.devnull, os.O_RDONLY, 0))
        actions.append((os.POSIX_SPAWN_DUP2, out_w, 1))
        if stderr == "stdout":
            actions.append((os.POSIX_SPAWN_DUP2, out_w, 2))
        elif stderr == "pipe":
            assert err_w is not None
            actions.append((os.POSIX_SPAWN_DUP2, err_w, 2))
        else:
            actions.append((os.POSIX_SPAWN_OPEN, 2, os.devnull, os.O_WRONLY, 0))
    try:
        # Python ignores SIGPIPE and SIGXFSZ; an ignored signal stays ignored across exec, so
        # reset them as subprocess.Popen does (restore_signals): `yes | head` must end.
        return os.posix_spawn(path, list(argv), env, file_actions=actions, setsid=True,
                              setsigdef=_RESTORE)
    except OSError as err:
        if err.filename is None:
            err.filename = argv[0]
        raise


def _popen(argv: Sequence[str], cwd: str | os.PathLike[str], env: Mapping[str, str],
           out_w: int | None, err_w: int | None, capture: bool, stderr: Stderr) -> int:
    if capture:
        err_to: int | None = {"stdout": subprocess.STDOUT, "pipe": err_w,
                              "null": subprocess.DEVNULL}.get(stderr, subprocess.STDOUT)
        proc = subprocess.Popen(list(argv), stdin=subprocess.DEVNULL, stdout=out_w,
                                stderr=err_to, cwd=cwd, env=dict(env), start_new_session=True)
    else:
        proc = subprocess.Popen(list(argv), cwd=cwd, env=dict(env), start_new_session=True)
    # The Child reaps it: Popen must neither poll it (it could reap it first) nor track it.
    proc.returncode = 0
    return proc.pid


PIPE_DEFAULT = 65536
"""Bytes a pipe holds by default (Linux, macOS): a read that returns this much found it full."""
PIPE_WIDE = 1 << 20
"""Bytes :func:`widen` asks a full pipe to hold (Linux's default ``pipe-max-size``)."""


def widen(fd: int) -> None:
    """Let the pipe ``fd`` hold :data:`PIPE_WIDE` bytes (Linux ``F_SETPIPE_SZ``), so a stage
    that floods it costs fewer wakeups; a no-op where unsupported or refused."""
    import fcntl

    setter = getattr(fcntl, "F_SETPIPE_SZ", None)
    if setter is not None:
        try:
            if fcntl.fcntl(fd, fcntl.F_GETPIPE_SZ) < PIPE_WIDE:
                fcntl.fcntl(fd, setter, PIPE_WIDE)
        except OSError:  # EPERM past the user's pipe quota: keep the default
            pass


class Discard:
    """Count and discard what is left in a pipe, in a worker thread: a stage past its output
    cap no longer costs the event loop a wakeup per read. On Linux the bytes are spliced to
    ``/dev/null`` (never copied into this process); elsewhere they are read in 1 MiB pieces.

    :meth:`run` hands the descriptor to the thread (which closes it) and returns at end of
    file; :meth:`stop` (idempotent) makes the thread take what the pipe holds now, close it
    and return, whether or not :meth:`run` was cancelled. The count is reported once, by
    whichever of the two ends it.
    """

    STOP_WAIT = 0.05
    """Seconds :meth:`stop` waits for the thread's last gulp before reporting the count."""

    def __init__(self) -> None:
        self._wake: int | None = None
        self._done = threading.Event()
        self._counted = [0]
        self._count: Callable[[int], None] | None = None

    async def run(self, fd: int, count: Callable[[int], None]) -> None:
        """Drain ``fd`` (non-blocking, now owned by the drain) to its end of file; ``count(n)``
        gets the bytes discarded, on the event loop, once (here at end of file, or from
        :meth:`stop`)."""
        try:
            wake_r, self._wake = os.pipe()
        except OSError:
            os.close(fd)
            raise
        self._count = count
        await anyio.to_thread.run_sync(_discard, fd, wake_r, self._counted, self._done,
                                       abandon_on_cancel=True, limiter=anyio.CapacityLimiter(1))
        self._settle()

    async def stop(self) -> None:
        """End the drain: the thread takes what the pipe holds now (never waiting for more:
        design rule 6), closes its descriptors and returns; the count is reported after it
        did, or after :data:`STOP_WAIT` seconds. A no-op when no drain runs."""
        if self._wake is not None:
            wake, self._wake = self._wake, None
            try:
                os.write(wake, b"x")
            except OSError:  # the drain already returned and closed its end
                pass
            os.close(wake)
            with anyio.move_on_after(self.STOP_WAIT):
                while not self._done.is_set():
                    await anyio.sleep(0.002)
        self._settle()

    def _settle(self) -> None:
        if self._count is not None:
            count, self._count = self._count, None
            count(self._counted[0])


def _discard(fd: int, wake: int, counted: list[int], done: threading.Event) -> None:
    """The drain itself (worker thread): until end of file, or a byte on ``wake`` (then what
    the pipe holds at that moment is taken too). The pipe is widened first and a small gulp
    is followed by a 1 ms pause, so the bytes are moved in few large pieces: each piece needs
    the GIL, which the watchdog's scans hold for milliseconds at a time."""
    sink: int | None = None
    try:
        widen(fd)
        if hasattr(os, "splice"):
            sink = os.open(os.devnull, os.O_WRONLY)
        poller = select.poll()
        poller.register(fd, select.POLLIN)
        poller.register(wake, select.POLLIN)
        last = 0  # gulps left once stopped: what the pipe holds now, never more than that
        while True:
            try:
                if sink is not None:
                    n = os.splice(fd, sink, 1 << 30)
                else:
                    n = len(os.read(fd, PIPE_WIDE))
            except BlockingIOError:
                if last or wake in {got for got, _ in poller.poll()}:
                    if last:
                        return
                    last = 4
                continue
            except OSError as err:
                if sink is not None and err.errno == errno.EINVAL:  # no splice here: read
                    os.close(sink)
                    sink = None
                    continue
                return
            if not n:
                return
            counted[0] += n
            if last:
                last -= 1
                if not last:
                    return
                continue
            # After a small gulp let the pipe fill a while (1 ms); stopped: take what it holds
            if wake in {got for got, _ in poller.poll(1 if n < PIPE_DEFAULT else 0)}:
                last = 4
    finally:
        for held in (fd, wake, sink):
            if held is not None:
                os.close(held)
        done.set()
