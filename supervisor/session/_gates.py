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


OPT_IN_FLAG = "--opt-in"
"""The flag ``install --scope user`` adds to every command it registers: the registration then
serves only projects that opted in (:func:`opt_in_silence`)."""


def _registered_in(harness: str, folder: StrPath) -> bool:
    """True when ``folder``'s project or local settings file of ``harness`` (the harness
    table's ``project``/``local``) holds a registration of ours (``supervisor hook NAME``
    without :data:`OPT_IN_FLAG`), or, for an extension harness (kind ``bridge``), its project
    entry is the bridge we place (:data:`supervisor.adapters._extension.MARK`) or its project
    configuration loads our package of ``plugins/``
    (:func:`supervisor.adapters._extension.project_loads_package`). Files read capped, never
    through a link or from a FIFO."""
    from .._harnesses import BY_NAME
    from ..state._project import read_small

    row = BY_NAME.get(harness)
    if row is None:
        return False
    if row.kind == "bridge":  # a placed project bridge, or our package in the project's config
        from ..adapters._extension import MARK, project_loads_package

        return (bool(row.project) and MARK in read_small(os.path.join(folder, row.project or ""),
                                                        1 << 20)) or project_loads_package(harness, str(folder))
    needle = f"supervisor hook {harness}"
    for rel in (row.project, row.local):
        if rel:
            path = os.path.join(folder, rel)
            if os.path.isdir(path) and not os.path.islink(path):  # a hooks folder (Cline)
                path = os.path.join(path, row.session_event)  # one file per event
            text = read_small(path, 1 << 20)
            if needle in text and OPT_IN_FLAG not in text:
                return True
    return False


def opt_in_silence(harness: str, project_dir: StrPath, cwd: StrPath) -> str:
    """Why a user-scope registration (:data:`OPT_IN_FLAG`) of ``harness`` stays silent for a
    session of ``project_dir`` working in ``cwd`` (``""``: it serves the session).

    It serves a project that opted in, by a config (``supervise.toml``, a ``[tool.supervise]``
    table) or by a project-scope registration at its root, in every subdirectory (Claude Code
    and Pi read project settings from the session's working directory only, so a root
    registration gives a session started in ``packages/widget/`` nothing). It stays silent
    where the harness loads a project registration of ours itself (the working directory's
    settings: that one serves) and in a project that did not opt in (nothing is created
    there: no state dir, no exclude line). The Pi and OpenCode extensions placed at user scope
    ask the same (``--opt-in``, from ``opt_in`` in their ``watchkeeper.json``); where a
    project extension of ours loads beside one, the two copies settle which serves in the
    harness process (``core.mjs`` ``claimLoad``), so a project extension only opts in."""
    from .._harnesses import BY_NAME

    row = BY_NAME.get(harness)
    if (row is None or row.kind != "bridge") and _registered_in(harness, cwd):
        return "the project's own registration serves this session"
    if opted_in(harness, project_dir):
        return ""
    return ("this project did not opt in (no supervise.toml, no [tool.supervise] in "
            "pyproject.toml, no project-scope registration)")


def opted_in(harness: str, project_dir: StrPath) -> bool:
    """Whether ``project_dir`` opted in to the user-scope registrations of ``harness``
    (:func:`opt_in_silence`): a config file (``supervise.toml``, a ``[tool.supervise]``
    table: :func:`supervisor.config._plan.find_config`) or a project-scope registration of
    ours at its root."""
    from ..config._plan import find_config

    return (find_config(project_dir) is not None or _registered_in(harness, project_dir)
            or _plugin_enabled_in(harness, project_dir))


def _plugin_enabled_in(harness: str, folder: StrPath) -> bool:
    """True when ``folder``'s project or local settings file of ``harness`` enables our
    plugin (Claude Code's ``"enabledPlugins": {"<row.plugin>": true}``, which
    ``install claude --plugin`` writes at project scope): that project opted in. A
    substring check of the capped file (no ``json``/``re`` on the hot path); the plugin's
    key is the harness row's ``plugin``, its one home."""
    from .._harnesses import BY_NAME
    from ..state._project import read_small

    row = BY_NAME.get(harness)
    if row is None or row.kind == "bridge" or not row.plugin:
        return False
    key = f'"{row.plugin}"'
    for rel in (row.project, row.local):
        text = read_small(os.path.join(folder, rel), 1 << 20) if rel else ""
        at = text.find(key)
        if at >= 0 and "true" in text[at:at + 200].partition(",")[0].partition("}")[0]:
            return True
    return False


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
