"""Gates and scope: when the hook must stay silent (no output, no lock, no state, exit 0).

* **Gate**: we run inside a review/gate agent (for example no-mistakes), which must not take
  the helm of the project it reviews. Detected by an environment variable from
  ``config.gate_env`` being *set* (even empty), or by the git common dir matching a glob in
  ``config.gate_common_dirs`` (default ``*/.no-mistakes/repos/*.git``: the gate works in a
  worktree of its own bare clone).
* **Scope**: a linked git worktree (``git worktree add``) is usually a worker's checkout, not
  the primary session, so the hook stays out of it unless the worktree carries the marker file
  :data:`PRIMARY_MARKER` (a regular file at its top level) or the config says
  ``scope = "any"``.

Everything here reads files only (no ``git`` subprocess): it is on the hook's hot path.
"""

from __future__ import annotations

import os

from ..state._project import git_dirs
from ..state._statedir import name_matcher

TYPE_CHECKING = False  # not `typing.TYPE_CHECKING`: importing typing costs the hot path
if TYPE_CHECKING:
    from _typeshed import StrPath
    from ..config._plan import DigestPlan


PRIMARY_MARKER = ".supervise-primary"
"""A regular file at a linked worktree's top level that opts it into the session protocol."""


def gate_reason(config: DigestPlan, project_dir: StrPath, env: dict[str, str] | None = None) -> str:
    """Why this is a gate agent (``""`` when it is not)."""
    env = dict(os.environ) if env is None else env
    for name in config.gate_env:
        if name in env:
            return f"gate environment variable {name} is set"
    dirs = git_dirs(project_dir)
    if dirs is not None:
        common = str(dirs[1])
        for pattern in config.gate_common_dirs:
            if name_matcher(pattern)(common):  # fnmatchcase, without importing `re`
                return f"git common dir {common} matches gate pattern {pattern!r}"
    return ""


def scope_reason(config: DigestPlan, project_dir: StrPath) -> str:
    """Why ``project_dir`` is outside the primary scope (``""`` when it is inside)."""
    if config.scope == "any":
        return ""
    dirs = git_dirs(project_dir)
    if dirs is None or dirs[0] == dirs[1]:
        return ""
    marker = os.path.join(project_dir, PRIMARY_MARKER)
    if os.path.isfile(marker) and not os.path.islink(marker):
        return ""
    return (f"{project_dir} is a linked git worktree without {PRIMARY_MARKER} "
            "(create that file there, or set scope = \"any\")")


def stand_down_reason(config: DigestPlan, project_dir: StrPath, env: dict[str, str] | None = None) -> str:
    """The gate or scope reason to stay silent, or ``""`` to go on."""
    return gate_reason(config, project_dir, env) or scope_reason(config, project_dir)
