"""Start a stage's leader in its own session and wait for it, without asyncio's subprocess
machinery (issue 13: the engine's own overheads).

:func:`spawn` starts the leader with ``os.posix_spawn(..., setsid=True)`` (``vfork`` and
``exec``: no copy of this process's page tables, no Python-level error pipe) when the stage
runs in this process's working directory and this process holds no inheritable descriptor above
2 (``posix_spawn`` in Python 3.11 can neither change directory nor close inherited
descriptors). Otherwise it falls back to :class:`subprocess.Popen` (``fork``, ``chdir``,
``close_fds``), with the same result. Either way the caller gets a :class:`Child`: the pid, the
read ends of its pipes (non-blocking, read with ``_loop.wait_readable``), and a :meth:`Child.wait`
that sleeps on a pidfd (Linux 5.3+) or polls ``waitpid`` with a short backoff elsewhere
(macOS). The leader is reaped by :meth:`Child.wait`/:meth:`Child.poll` only: until then its pid
cannot be reused, which the watchdog's process-group guard relies on (design rule 10).
"""

from __future__ import annotations

import errno
import os
import select
import signal
import sys

TYPE_CHECKING = False  # not typing's: the CLI starts stages with this module first
if TYPE_CHECKING:
    from collections.abc import Callable, Mapping, Sequence
    from typing import Literal, NoReturn

    Stderr = Literal["stdout", "pipe", "null", "inherit"]

from ._reaper import shell_fallback

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
    read ends of its pipes as non-blocking descriptors, or None (not piped, or closed);
    ``forked``: started by :func:`fork_program` (no ``exec``).
    """

    def __init__(self, pid: int, stdout: int | None, stderr: int | None,
                 forked: bool = False) -> None:
        self.pid = pid
        self.forked = forked
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
        from . import _loop

        delay = 0.001
        while self.poll() is None:
            if self._pidfd is not None:
                await _loop.wait_readable(self._pidfd)
            else:
                await _loop.sleep(delay)
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


FORK_VAR = "SUPERVISE_FORK_STAGES"
"""Set to ``0`` (or ``off``) to start every built-in stage as a new interpreter instead of a
fork of this process (diagnosis, and the benchmark's "before"). Read once, at import."""
FORK = (sys.platform.startswith("linux") and hasattr(os, "fork")
        and os.environ.get(FORK_VAR, "").strip().lower() not in ("0", "no", "false", "off"))
"""Whether built-in stages may be forked at all here: Linux only (a macOS process that has
touched system frameworks must not fork without ``exec``), unless :data:`FORK_VAR` says no."""


def may_fork() -> bool:
    """Whether :func:`fork_program` may be used now: :data:`FORK`, and this process runs one
    thread (a fork copies only the calling thread; a lock another thread held, the import
    lock or the allocator's, would stay locked in the child forever)."""
    if not FORK:
        return False
    threading = sys.modules.get("threading")
    loop = sys.modules.get("supervisor.engine._loop")
    return ((threading is None or threading.active_count() == 1)
            and (loop is None or not loop.workers()))


def fork_program(program: str, args: Sequence[str], *, cwd: str | os.PathLike[str],
                 env: Mapping[str, str], stderr: Stderr = "stdout",
                 cgroup: str | None = None) -> Child:
    """Run the Python program file ``program`` (a built-in stage) in a child forked from this
    process: no new interpreter, the modules this process already loaded are shared with it,
    and only the child compiles and runs the program (the supervising process never imports a
    stage). Call it only while :func:`may_fork` holds.

    The child is what :func:`spawn` would have started with ``[python, -I, -u, program,
    *args]``: its
    own session and process group (``setsid``), in ``cgroup`` (a cgroup directory, joined
    first) when given, stdin from ``/dev/null``, stdout on a pipe, stderr as ``stderr`` says
    (see :func:`spawn`), no other descriptor of ours, working directory ``cwd``, environment
    exactly ``env``, ``sys.argv = [program, *args]``, the ``sys.path`` of ``python -I``
    (:func:`_isolate_path`), the signal dispositions of a fresh interpreter, unbuffered
    standard streams, and the exit status the interpreter would give (0, the ``SystemExit``
    code, 1 after a traceback on an uncaught exception). The watchdog, caps, kill and banner treat it
    as any stage leader.

    Returns:
        A :class:`Child`.

    Raises:
        OSError: no pipe or no fork (``EAGAIN``, ``ENOMEM``); the caller may spawn instead.
    """
    fds: list[int] = []
    try:
        out_r, out_w = os.pipe()
        fds += (out_r, out_w)
        err_r = err_w = None
        if stderr == "pipe":
            err_r, err_w = os.pipe()
            fds += (err_r, err_w)
        for stream in (sys.stdout, sys.stderr):  # nothing of ours may be flushed by the child
            try:
                stream.flush()
            except (OSError, ValueError, AttributeError):
                pass
        pid = os.fork()
    except BaseException:
        for fd in fds:
            os.close(fd)
        raise
    if pid == 0:  # pragma: no cover - the child; ends in os._exit
        _forked_child(program, args, os.fspath(cwd), env, out_w, err_w, stderr, cgroup)
    for end in (out_w, err_w):
        if end is not None:
            os.close(end)
    for end in (out_r, err_r):
        if end is not None:
            os.set_blocking(end, False)
    return Child(pid, out_r, err_r, forked=True)


def _forked_child(program: str, args: Sequence[str], cwd: str, env: Mapping[str, str],
                  out_w: int, err_w: int | None, stderr: Stderr,
                  cgroup: str | None) -> NoReturn:  # pragma: no cover - runs in the child
    """The child side of :func:`fork_program`: never returns."""
    code = 1
    try:
        # a fresh interpreter's dispositions first: the supervisor's handlers must not run here
        for signum in (signal.SIGTERM, signal.SIGHUP, signal.SIGCHLD, signal.SIGQUIT):
            signal.signal(signum, signal.SIG_DFL)
        signal.signal(signal.SIGINT, signal.default_int_handler)
        for name in ("SIGPIPE", "SIGXFSZ"):  # as a fresh interpreter sets them
            if hasattr(signal, name):
                signal.signal(getattr(signal, name), signal.SIG_IGN)
        signal.set_wakeup_fd(-1)
        import gc

        gc.freeze()  # this process's objects are never collected here (no finaliser of ours runs)
        os.setsid()
        if cgroup is not None:
            with open(os.path.join(cgroup, "cgroup.procs"), "w") as procs:
                procs.write("0")  # this process, before the stage runs anything
        null = os.open(os.devnull, os.O_RDWR)
        os.dup2(null, 0)
        os.dup2(out_w, 1)
        os.dup2(err_w if stderr == "pipe" and err_w is not None else
                out_w if stderr == "stdout" else null, 2)
        _close_from(3)  # our pipes, pidfds, files: none is the stage's
        os.chdir(cwd)
        _isolate_path()
        os.environ.clear()
        os.environ.update(env)
        sys.argv = [program, *args]
        import io

        # PYTHONUNBUFFERED's streams: what the stage printed is in the pipe when it is killed
        encoding = getattr(sys.__stdout__, "encoding", None) or "utf-8"
        errors = getattr(sys.__stdout__, "errors", None) or "strict"
        sys.stdin = io.TextIOWrapper(io.FileIO(0, "r", closefd=False), encoding=encoding)
        sys.stdout = io.TextIOWrapper(io.FileIO(1, "w", closefd=False), encoding=encoding,
                                      errors=errors, write_through=True)
        sys.stderr = io.TextIOWrapper(io.FileIO(2, "w", closefd=False), encoding=encoding,
                                      errors="backslashreplace", write_through=True)
        code = _run_main(program)
    except BaseException:  # noqa: BLE001 - the child reports and leaves, never returns
        try:
            import traceback

            traceback.print_exc()
        except BaseException:  # noqa: BLE001
            pass
    finally:
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except BaseException:  # noqa: BLE001 - a reader that left: the status stands
                pass
        os._exit(code)


def _isolate_path() -> None:  # pragma: no cover - runs in the forked child
    """``sys.path`` as ``python -I`` has it (what a spawned built-in runs with,
    :func:`supervisor.config._builtins.builtin_argv`): without the entries this interpreter
    took from its caller, the script's folder or working directory (unless it ran with
    ``-P``), ``PYTHONPATH`` (unless ``-E``) and the user site-packages (unless ``-s``)."""
    drop: set[str] = set()
    if not sys.flags.safe_path and sys.path:
        drop.add(sys.path[0])
    if not sys.flags.ignore_environment:
        for entry in os.environ.get("PYTHONPATH", "").split(os.pathsep):
            if entry:
                drop |= {entry, os.path.abspath(entry)}
    if not sys.flags.no_user_site:
        site = sys.modules.get("site")
        user = getattr(site, "USER_SITE", None)
        if isinstance(user, str):
            drop.add(user)
    sys.path[:] = [entry for entry in sys.path if entry not in drop]


def _run_main(program: str) -> int:  # pragma: no cover - runs in the forked child
    """Run ``program`` as ``__main__`` (as ``python program`` would); its exit status."""
    import types

    main = types.ModuleType("__main__")
    main.__file__ = program
    main.__dict__["__builtins__"] = __builtins__
    sys.modules["__main__"] = main
    try:
        with open(program, "rb") as f:
            code = compile(f.read(), program, "exec")
        exec(code, main.__dict__)  # noqa: S102 - the stage program, as the interpreter would
    except SystemExit as done:
        if done.code is None:
            return 0
        if isinstance(done.code, int):
            return done.code & 0xFF
        print(done.code, file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        os.kill(os.getpid(), signal.SIGINT)  # as the interpreter ends: killed by SIGINT
        return 130
    except BaseException:  # noqa: BLE001 - an uncaught exception: traceback, status 1
        import traceback

        traceback.print_exc()
        return 1
    return 0


def _close_from(low: int) -> None:  # pragma: no cover - runs in the forked child
    """Close every descriptor from ``low`` up: those ``/proc/self/fd`` lists (a limit of a
    million descriptors must not cost a million ``close`` calls), else up to the limit."""
    try:
        names = os.listdir("/proc/self/fd")
    except OSError:
        try:
            limit = os.sysconf("SC_OPEN_MAX")
        except (OSError, ValueError):
            limit = 1 << 16
        os.closerange(low, max(limit, 256))
        return
    for name in names:
        fd = int(name)
        if fd >= low:
            try:
                os.close(fd)
            except OSError:  # the listing's own descriptor, closed by now
                pass


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
    import subprocess

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
        self._done = [False]  # set by the thread as its last act
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
        from . import _loop

        await _loop.run_sync_in_thread(_discard, fd, wake_r, self._counted, self._done,
                                       abandon_on_cancel=True)
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
            from . import _loop

            with _loop.move_on_after(self.STOP_WAIT):
                while not self._done[0]:
                    await _loop.sleep(0.002)
        self._settle()

    def _settle(self) -> None:
        if self._count is not None:
            count, self._count = self._count, None
            count(self._counted[0])


def _discard(fd: int, wake: int, counted: list[int], done: list[bool]) -> None:
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
        done[0] = True
