"""The consolidation trigger, and the tiny detached wrapper that runs the command.

When past-day staging files are pending (and never at ``compact``: claude-remember #342), the
memory stage starts the configured ``consolidate`` command in the background, at most one at a
time, and says so in one line (brief memory.md #9).

How "at most once" and "fully detached" are kept:

1. The stage takes an exclusive non-blocking ``flock`` on ``<state>/memory/consolidate.lock``.
   Busy means a consolidation is running: the stage says so and starts nothing.
2. It starts this file as a wrapper: own session (``start_new_session``), stdin/stdout/stderr on
   ``/dev/null``, every other descriptor closed except the locked one (``pass_fds``), and
   without ``SUPERVISE_STAGE_TOKEN`` (it is not part of the stage), so it neither holds the
   digest's pipe nor delays the stage. The stage closes its copy; the lock now lives exactly as
   long as the wrapper (a killed wrapper releases it: no stale lock to clean up).
3. The wrapper writes ``pid=`` and ``started=`` into the lock file, runs the command in its own
   session with output appended to ``<state>/logs/consolidation.log`` (opened by the stage
   through the state door and passed as a descriptor), kills the command's group
   after ``consolidate_timeout`` seconds, and exits.

The command gets ``SUPERVISE_MEMORY_DIR`` (the store) and runs in the project dir.
"""

from __future__ import annotations

import fcntl
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

LOCK_NAME = "consolidate.lock"
LOG_NAME = "consolidation.log"
LOG_MAX_BYTES = 4 * 1024 * 1024
"""Bytes the consolidation log may reach before it is rotated to ``consolidation.log.1``."""


def trigger(state_dir: Path, store: Path, project_dir: Path, argv: list[str], *,
            timeout: float, stage: str) -> tuple[str, int | None]:
    """Start ``argv`` detached unless a consolidation already runs.

    Returns ``(state, pid)`` with state ``"started"`` (pid of the wrapper) or ``"running"``
    (pid None). Raises:
        OSError: the state dir cannot hold the lock, or the wrapper cannot be started.
    """
    from supervisor._errors import StateError
    from supervisor.config._context import DETACH_VAR
    from supervisor.state._statedir import StateDir

    fds: list[int] = []
    try:
        # Through the state door: the state dir, memory/ and logs/ are opened without following
        # links, and the lock and log files are refused as links, FIFOs or folders (set aside):
        # a planted `consolidate.lock -> ../victim` is never truncated or written.
        with StateDir.open(state_dir, create=True) as state:
            memory = state.sub("memory", create=True)
            logs = state.sub("logs", create=True)
            assert memory is not None and logs is not None
            with memory, logs:
                fds.append(memory.open_file(LOCK_NAME, os.O_RDWR | os.O_CREAT))
                try:
                    fcntl.flock(fds[0], fcntl.LOCK_EX | fcntl.LOCK_NB)
                except BlockingIOError:
                    return "running", None
                logs.append(LOG_NAME, b"", max_bytes=LOG_MAX_BYTES)  # rotates a full log
                fds.append(logs.open_file(LOG_NAME, os.O_WRONLY | os.O_APPEND | os.O_CREAT))
    except StateError as err:
        for fd in fds:
            os.close(fd)
        raise OSError(str(err)) from err
    lock_fd, log_fd = fds
    try:
        os.set_blocking(log_fd, True)
        env = {k: v for k, v in os.environ.items()
               if k not in ("SUPERVISE_STAGE_TOKEN", "STAGE_TOKEN")}
        env[DETACH_VAR] = stage  # outlives its stage: the engine's sweep leaves it alone
        env["SUPERVISE_MEMORY_DIR"] = str(store)
        wrapper = [sys.executable, "-I", str(Path(__file__).resolve()), str(lock_fd), f"{timeout:g}",
                   str(log_fd), "--", *argv]
        proc = subprocess.Popen(
            wrapper, cwd=project_dir, env=env, stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, close_fds=True,
            pass_fds=(lock_fd, log_fd), start_new_session=True,
        )
        # Popen keeps no pipe to the wrapper; drop the handle so no ResourceWarning fires for a
        # child we deliberately never wait for (it is reaped by init or the subreaper).
        proc.returncode = 0
        return "started", proc.pid
    finally:
        os.close(lock_fd)
        os.close(log_fd)


STOP_GRACE = 2.0
"""Seconds the command gets between the TERM and the KILL when the wrapper is stopped."""


def _wrap(argv: list[str]) -> int:
    """The detached wrapper: run ``argv[4:]`` in its own session under the timeout, holding
    the consolidation lock (``argv[0]``, a descriptor) for its whole life and logging to
    ``argv[2]``. A TERM, INT or HUP to the wrapper (a logout, a shutdown, a ``kill``) stops
    the command too (TERM, then KILL after :data:`STOP_GRACE` seconds) before the lock goes:
    without that the command ran on with no timeout while a next session could start another.
    Returns 0, or 128 + n when stopped by signal n."""
    lock_fd, timeout, log_fd = int(argv[0]), float(argv[1]), int(argv[2])
    command = argv[4:]
    stop: list[int] = []

    def note(signum: int, frame: object) -> None:
        stop.append(signum)

    for number in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(number, note)  # recorded; acted on between two short waits below
    try:
        os.ftruncate(lock_fd, 0)
        os.pwrite(lock_fd, f"pid={os.getpid()}\nstarted={time.strftime('%Y-%m-%d %H:%M:%S')}\n"
                  .encode(), 0)
    except OSError:
        pass
    from supervisor.config._context import DETACH_VAR

    env = {k: v for k, v in os.environ.items() if k != DETACH_VAR}
    # The log was opened by the stage through the state door and handed over as a descriptor:
    # this wrapper never opens a path in the state dir itself.
    with open(log_fd, "ab", closefd=True) as log:
        log.write(f"{time.strftime('%Y-%m-%d %H:%M:%S')} start {command!r}\n".encode())
        log.flush()
        try:
            child = subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=log, stderr=log,
                                     env=env, close_fds=True, start_new_session=True)
        except OSError as err:
            log.write(f"cannot start: {err}\n".encode())
            return 1
        end = time.monotonic() + timeout
        code: int | None = None
        while code is None and not stop and time.monotonic() < end:
            try:
                code = child.wait(timeout=max(0.0, min(0.25, end - time.monotonic())))
            except subprocess.TimeoutExpired:
                pass
        if code is None and stop:
            name = signal.Signals(stop[0]).name
            try:
                os.killpg(child.pid, signal.SIGTERM)
            except (ProcessLookupError, PermissionError):
                pass
            try:
                code = child.wait(timeout=STOP_GRACE)
            except subprocess.TimeoutExpired:
                pass
            log.write(f"stopped by {name} (the wrapper was)\n".encode())
        if code is None:
            try:
                os.killpg(child.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
            code = child.wait()
            if not stop:
                log.write(f"killed after {timeout:g}s (consolidate_timeout)\n".encode())
        log.write(f"{time.strftime('%Y-%m-%d %H:%M:%S')} exit {code}\n".encode())
    return 128 + stop[0] if stop else 0


if __name__ == "__main__":
    sys.exit(_wrap(sys.argv[1:]))
