"""Helpers every built-in stage may use: options, warnings, git's environment, child processes.

Stdlib only: a stage must start fast, so nothing here imports anyio or pydantic. A stage
program runs as ``[python, <program file>]``; the single-file stages (``stages/<name>.py``)
have this folder first on ``sys.path``, a stage package (``stages/<name>/__main__.py``) puts it
there before its imports, and each imports this module as ``_common``.
"""

from __future__ import annotations

import os
import signal
import sys

TYPE_CHECKING = False  # not typing's: a stage imports this module before anything else
if TYPE_CHECKING:
    from pathlib import Path

#: Variables a hook inherits from a running git command that would point our own git calls at
#: the wrong repository (pre-commit's ``no_git_env`` has the same list, for the same reason).
GIT_ENV_STRIP = (
    "GIT_DIR", "GIT_INDEX_FILE", "GIT_WORK_TREE", "GIT_OBJECT_DIRECTORY",
    "GIT_ALTERNATE_OBJECT_DIRECTORIES", "GIT_COMMON_DIR", "GIT_PREFIX", "GIT_NAMESPACE",
    "GIT_QUARANTINE_PATH", "GIT_EXEC_PATH_OVERRIDE",
)


NO_HOME = os.path.join(os.devnull, "no-home")
"""The home used when there is none: a path under ``/dev/null`` never exists, so every
user-level file (``~/.claude/CLAUDE.md``, ``~/.pi/agent``) is simply absent."""


def home_dir() -> str:
    """The user's home folder (absolute; :func:`supervisor._home.home_dir`, the one rule), or
    :data:`NO_HOME` when there is none (``HOME`` empty, or unset or relative with no passwd
    entry): never a relative ``~``, from which ``~/.claude/CLAUDE.md`` would be read in the
    working directory, where a cloned repository could plant it."""
    from supervisor._home import home_dir as found

    home = found()
    return NO_HOME if home is None else home


def expand_home(value: str) -> str:
    """``value`` with a leading ``~`` or ``~/`` replaced by :func:`home_dir` (``~user`` as
    ``os.path.expanduser`` does it, left as written when unknown)."""
    if value == "~" or value.startswith("~/"):
        return home_dir() + value[1:]
    return os.path.expanduser(value)


def warn(message: str) -> None:
    """One line to stderr (the stage log by default, ``supervise status`` shows it; merged into
    the stage output with ``stderr = "context"``; keep it rare)."""
    sys.stderr.write(f"{os.environ.get('SUPERVISE_STAGE_NAME', 'stage')}: {message}\n")


def stage_options() -> dict[str, object]:
    """``SUPERVISE_STAGE_OPTIONS`` as a dict; invalid JSON warns and yields ``{}``."""
    raw = os.environ.get("SUPERVISE_STAGE_OPTIONS", "").strip()
    if raw in ("", "{}"):  # no options table (the usual case): no json import before git starts
        return {}
    import json

    try:
        value = json.loads(raw)
    except ValueError:
        warn("SUPERVISE_STAGE_OPTIONS is not valid JSON; using the defaults")
        return {}
    if not isinstance(value, dict):
        warn("SUPERVISE_STAGE_OPTIONS is not a JSON object; using the defaults")
        return {}
    return value


def opt_int(options: dict[str, object], key: str, default: int, minimum: int = 0) -> int:
    """An integer option; a wrong type or a value below ``minimum`` warns and gives ``default``."""
    value = options.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        warn(f"option {key} must be an integer >= {minimum} (got {value!r}); using {default}")
        return default
    return value


def opt_float(options: dict[str, object], key: str, default: float, minimum: float = 0.0) -> float:
    """A number option in seconds; a wrong type warns and gives ``default``."""
    value = options.get(key, default)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value < minimum:
        warn(f"option {key} must be a number >= {minimum} (got {value!r}); using {default}")
        return float(default)
    return float(value)


def opt_bool(options: dict[str, object], key: str, default: bool) -> bool:
    """A boolean option; anything but ``true``/``false`` warns and gives ``default``."""
    value = options.get(key, default)
    if not isinstance(value, bool):
        warn(f"option {key} must be true or false (got {value!r}); using {default}")
        return default
    return value


def opt_strings(options: dict[str, object], key: str, default: tuple[str, ...]) -> tuple[str, ...]:
    """A list-of-strings option; anything else warns and gives ``default``."""
    value = options.get(key, list(default))
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        warn(f"option {key} must be a list of strings (got {value!r}); using the default")
        return default
    return tuple(value)

GIT_FORCED_CONFIG = (("core.fsmonitor", "false"), ("protocol.ext.allow", "never"))
"""git settings every stage's git runs with, whatever the repository's own config says."""


def clean_git_env() -> dict[str, str]:
    """This process's environment without the ``GIT_*`` variables that redirect git, no prompts."""
    env = {k: v for k, v in os.environ.items() if k not in GIT_ENV_STRIP}
    env["GIT_TERMINAL_PROMPT"] = "0"
    env["GIT_OPTIONAL_LOCKS"] = "0"  # never take index.lock behind the user's back
    env.setdefault("LC_ALL", "C")
    # A planted .git/config must not make a read-only query run a program: core.fsmonitor
    # names a command git status/ls-files start on every call, and protocol.ext.allow lets a
    # remote URL be a command (git's own default is "never"; a local config can lift it).
    # Settings given this way rank above every config file (git-config(1), GIT_CONFIG_COUNT).
    try:
        count = max(int(env.get("GIT_CONFIG_COUNT", "0")), 0)
    except ValueError:
        count = 0
    for key, value in GIT_FORCED_CONFIG:
        env[f"GIT_CONFIG_KEY_{count}"] = key
        env[f"GIT_CONFIG_VALUE_{count}"] = value
        count += 1
    env["GIT_CONFIG_COUNT"] = str(count)
    return env


class Timeout(Exception):
    """:meth:`Child.communicate` reached its timeout; the child still runs."""


_DEFAULT_SIGNALS = tuple(getattr(signal, name) for name in ("SIGPIPE", "SIGXFSZ")
                         if hasattr(signal, name))
"""Signals Python ignores and a child gets back at their default, as ``subprocess`` does
(``restore_signals``): a git writing to a closed pipe dies of SIGPIPE."""


class Child:
    """A child process of a stage: the part of ``subprocess.Popen`` the stages use (``pid``,
    ``returncode``, :meth:`poll`, :meth:`wait`, :meth:`kill`, :meth:`communicate` with a
    timeout in seconds, :meth:`close`), started with stdin from ``/dev/null`` and stdout and
    stderr piped, in its own session when ``new_session``. Without ``subprocess``, whose import
    (``threading``, ``selectors``, ``locale``) was about 3.5 ms of CPU of every stage's start:
    ``os.posix_spawnp`` (a ``vfork``) when ``cwd`` is this process's working directory, else a
    fork that changes into ``cwd`` before ``exec``.

    Raises:
        OSError: the command is not found (``FileNotFoundError``, as ``Popen`` raises it),
            ``cwd`` is not a folder, or no pipe or process could be made.
    """

    def __init__(self, argv: list[str], cwd: str | os.PathLike[str], env: dict[str, str],
                 *, new_session: bool) -> None:
        self.returncode: int | None = None
        where = os.fspath(cwd)
        here = os.path.samestat(os.stat(where), os.stat(os.curdir))  # OSError: no such folder
        fds: list[int] = []
        try:
            out_r, out_w = os.pipe()
            fds += (out_r, out_w)
            err_r, err_w = os.pipe()
            fds += (err_r, err_w)
            if here:
                self.pid = os.posix_spawnp(
                    argv[0], argv, env, setsid=new_session, setsigdef=_DEFAULT_SIGNALS,
                    file_actions=[(os.POSIX_SPAWN_OPEN, 0, os.devnull, os.O_RDONLY, 0),
                                  (os.POSIX_SPAWN_DUP2, out_w, 1), (os.POSIX_SPAWN_DUP2, err_w, 2)])
            else:
                self.pid = _fork_exec(_which(argv[0], env), argv, where, env, out_w, err_w,
                                      new_session)
        except BaseException:
            for fd in fds:
                os.close(fd)
            raise
        os.close(out_w)
        os.close(err_w)
        self._out, self._err = bytearray(), bytearray()
        self._open: dict[int, bytearray] = {out_r: self._out, err_r: self._err}

    def poll(self) -> int | None:
        """The exit status (``-N`` for a signal), or None while it runs; reaps it once."""
        if self.returncode is None:
            try:
                pid, status = os.waitpid(self.pid, os.WNOHANG)
            except ChildProcessError:
                return self.returncode
            if pid:
                self.returncode = os.waitstatus_to_exitcode(status)
        return self.returncode

    def wait(self) -> int:
        """Wait for the exit; its status."""
        if self.returncode is None:
            try:
                _, status = os.waitpid(self.pid, 0)
                self.returncode = os.waitstatus_to_exitcode(status)
            except ChildProcessError:
                self.returncode = 0
        return self.returncode

    def kill(self) -> None:
        """SIGKILL to the child itself, unless it was reaped."""
        if self.returncode is None:
            try:
                os.kill(self.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass

    def communicate(self, timeout: float | None = None) -> tuple[bytes, bytes]:
        """Read stdout and stderr to their end and wait for the exit: ``(stdout, stderr)``.

        Raises:
            Timeout: ``timeout`` seconds passed first (what was read is kept for a later call).
        """
        import select
        import time

        deadline = None if timeout is None else time.monotonic() + max(timeout, 0.0)
        poller = select.poll()
        for fd in self._open:
            poller.register(fd, select.POLLIN)
        while self._open:
            wait = -1  # milliseconds: -1 without a deadline (poll's "forever")
            if deadline is not None:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise Timeout()
                wait = int(remaining * 1000) + 1
            for fd, _ in poller.poll(wait):
                chunk = os.read(fd, 1 << 16)
                if chunk:
                    self._open[fd] += chunk
                else:
                    poller.unregister(fd)
                    del self._open[fd]
                    os.close(fd)
        while self.poll() is None:
            if deadline is None:
                self.wait()
            elif time.monotonic() >= deadline:
                raise Timeout()
            else:
                time.sleep(0.002)
        return bytes(self._out), bytes(self._err)

    def close(self) -> None:
        """Close the pipes not read to their end."""
        while self._open:
            os.close(self._open.popitem()[0])


def _which(command: str, env: dict[str, str]) -> str:
    """The file ``command`` names (a path as it is, else the first executable of ``PATH``).

    Raises:
        FileNotFoundError: none.
    """
    if os.sep in command:
        return command
    for folder in env.get("PATH", os.defpath).split(os.pathsep):
        path = os.path.join(folder or os.curdir, command)
        if os.path.isfile(path) and os.access(path, os.X_OK):
            return path
    raise FileNotFoundError(2, "No such file or directory", command)


def _fork_exec(path: str, argv: list[str], cwd: str, env: dict[str, str], out_w: int,
               err_w: int, new_session: bool) -> int:
    """Fork; the child enters ``cwd`` and runs ``path``: :class:`Child`'s start elsewhere than
    the working directory (``posix_spawn`` has no ``chdir``)."""
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child: exec or leave
        try:
            if new_session:
                os.setsid()
            for signum in _DEFAULT_SIGNALS:
                signal.signal(signum, signal.SIG_DFL)
            null = os.open(os.devnull, os.O_RDONLY)
            os.dup2(null, 0)
            os.dup2(out_w, 1)
            os.dup2(err_w, 2)
            os.chdir(cwd)
            os.execve(path, argv, env)
        finally:
            os._exit(127)
    return pid


def spawn(argv: list[str], cwd: str | Path, env: dict[str, str] | None = None) -> Child:
    """Start ``argv`` in its own session (so :func:`finish` can kill its whole group), stdin
    from /dev/null, stdout and stderr piped. Raises OSError when it cannot start."""
    return Child(argv, cwd, env if env is not None else clean_git_env(), new_session=True)


def finish(proc: Child, timeout: float) -> tuple[int | None, bytes, bytes]:
    """Wait up to ``timeout`` seconds: ``(returncode, stdout, stderr)``, returncode None when the
    deadline passed and the process group was killed (SIGKILL; grandchildren such as ssh or a
    git-remote helper go with it, so no pipe is left open to hang on)."""
    try:
        out, err = proc.communicate(timeout=max(timeout, 0.0))
        return proc.returncode, out, err
    except Timeout:
        pass
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    try:
        out, err = proc.communicate(timeout=2.0)
    except Timeout:  # a descendant left our group and holds the pipe
        proc.close()
        proc.wait()
        out, err = b"", b""
    return None, out or b"", err or b""


def read_regular(path: str | os.PathLike[str], limit: int, *, follow_links: bool = True) -> bytes:
    """Up to ``limit`` bytes of the regular file ``path``, never blocking on a planted FIFO
    nor reading a device (opened ``O_NONBLOCK`` and ``fstat``-ed first); with
    ``follow_links=False`` a link is not followed (``O_NOFOLLOW``: a file swapped for a link
    after the caller's checks is not read).

    Raises:
        OSError: ``path`` is absent, a link (``follow_links=False``), not a regular file, or
            cannot be read.
    """
    import stat

    flags = os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC | (0 if follow_links else os.O_NOFOLLOW)
    fd = os.open(path, flags)
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise OSError(f"{os.fsdecode(path)}: not a regular file")
        chunks, total = [], 0
        while total < limit and (chunk := os.read(fd, min(1 << 16, limit - total))):
            chunks.append(chunk)
            total += len(chunk)
        return b"".join(chunks)
    finally:
        os.close(fd)
