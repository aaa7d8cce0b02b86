"""The ``repo`` stage's three git calls, started at once, before the stage's body is imported
(git reads the index and walks the tree while Python loads ``pathlib`` and the body).

Imports only what ``_common`` imports: the program (``__main__.py``) starts the calls first
when the options are the defaults, then imports :mod:`repo.status`.
"""

from __future__ import annotations

import os
import time
from collections.abc import Mapping

from _common import Child, spawn

DEFAULT_UNTRACKED = "normal"
DEFAULT_COMMITS = 3
DEFAULT_TIMEOUT = 5.0


class Calls:
    """``git rev-parse`` (the git dirs), ``git status --porcelain=v2`` (branch, stash, changes)
    and ``git log`` (the last ``commits``; none when 0), each in its own session
    (:func:`_common.spawn`), started at construction; ``deadline`` (monotonic seconds) is when
    the stage stops waiting for them.

    Raises:
        OSError: git cannot be started (no git: the stage has nothing to say); a call
            already started is killed and reaped first.
    """

    def __init__(self, untracked: str, commits: int, timeout: float, cwd: str) -> None:
        self.deadline = time.monotonic() + timeout
        self.log: Child | None = None
        started: list[Child] = []
        try:  # status first: it takes longest (the index refresh and the untracked walk)
            self.status = spawn(["git", "status", "--porcelain=v2", "--branch", "--show-stash",
                                 "-z", f"--untracked-files={untracked}"], cwd)
            started.append(self.status)
            self.rev = spawn(["git", "rev-parse", "--absolute-git-dir", "--git-common-dir"], cwd)
            started.append(self.rev)
            if commits:
                self.log = spawn(["git", "log", f"-n{commits}", "--format=%h%x09%cr%x09%s"], cwd)
        except OSError:
            _end(started)
            raise

    def close(self) -> None:
        """Kill (as a group) and reap any call still running: the stage leaves nothing behind."""
        _end([p for p in (self.rev, self.status, self.log) if p is not None])


def _end(procs: list[Child]) -> None:
    import signal

    for proc in procs:
        if proc.poll() is None:
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
            proc.wait()
        proc.close()


