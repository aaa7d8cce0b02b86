"""The nested listing's git call (``git ls-files --cached --others``), started before the
stage's body is imported so that git walks the tree while Python loads the stage's modules.

Imports only what ``_common`` imports and the harness table (no ``pathlib``, no
``dataclasses``): the program (``__main__.py``) starts the listing first, then imports
:mod:`instructions.stage`.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

from _common import Child, Timeout, clean_git_env
from _idle import default_options
from supervisor._harnesses import BY_NAME

ARGV = ("git", "ls-files", "-z", "--cached", "--others", "--exclude-standard")
TIMEOUT = 5.0
"""Seconds the stage waits for git's listing once it asks for it (then git is killed and the
listing is empty), as with the call made after the imports."""


def on_demand(harness: str) -> bool:
    """True when ``harness`` gets nested AGENTS.md on demand (a read hook or its own loader:
    the row's ``nested_on_demand`` in ``supervisor._harnesses``): the stage lists no nested
    files for it unless ``list_nested = true``."""
    row = BY_NAME.get(harness)
    return row is not None and row.nested_on_demand


class Listing:
    """git's listing of the tracked and untracked (not ignored) files below ``cwd``, started
    at construction (stdin from /dev/null; stdout and stderr piped). Never raises: a git that
    cannot start, fails or outlasts :data:`TIMEOUT` gives no listing, and ``problem`` then
    says why in one line with its fix when git refused or failed (``""``: nothing to say, e.g.
    outside git or no git installed)."""

    problem = ""

    def __init__(self, cwd: str) -> None:
        try:
            self._proc: Child | None = Child(list(ARGV), cwd, clean_git_env(), new_session=False)
        except (OSError, ValueError):
            self._proc = None

    def output(self) -> bytes | None:
        """git's NUL-separated paths, or None (no git, an error, or killed at the timeout)."""
        proc = self._proc
        if proc is None:
            return None
        try:
            out, err = proc.communicate(timeout=TIMEOUT)
        except Timeout:
            self.close()
            self.problem = f"git ls-files did not finish within {TIMEOUT:g} s"
            return None
        self._proc = None  # read and reaped: nothing left to close
        if proc.returncode == 0:
            return out
        from supervisor._git import failure

        self.problem = failure("git ls-files", proc.returncode, err) or ""
        return None

    def close(self) -> None:
        """Kill git if it still runs and reap it (the stage leaves no process behind)."""
        proc, self._proc = self._proc, None
        if proc is None:
            return
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        proc.close()


def wanted_by_default(env: Mapping[str, str]) -> bool:
    """True when the stage, run with ``env``, lists nested files with certainty: default
    options (no ``list_nested`` key) and a harness that does not load them on demand."""
    return default_options(env) and not on_demand(env.get("SUPERVISE_HARNESS", ""))


def start_early(env: Mapping[str, str]) -> Listing | None:
    """The listing, started now from the stage's working dir (``SUPERVISE_CWD`` or the
    process's own: the same folder :class:`instructions.files.Place` resolves), when the
    stage will surely want it; None otherwise (the stage starts it later if it wants it)."""
    if not wanted_by_default(env):
        return None
    return Listing(env.get("SUPERVISE_CWD") or os.curdir)
