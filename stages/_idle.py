"""When a built-in stage has nothing to do: the one rule its program checks first and the
digest engine checks before starting it, so an idle stage costs no interpreter start.

Stdlib only (``os``), no other import: a stage program checks it before loading anything
(:mod:`supervisor.config._builtins` loads this file by path for the engine). The rule reads
only the stage's environment (the one the engine gives it, docs/stage-authors.md) and the
file system, so the engine and the program decide alike on the same environment. It answers
True only where the stage's ``main()`` prints nothing, writes nothing and exits 0:

- ``memory``: default options and no ``.remember`` entry at all in the project (a file, a
  folder, a link or a FIFO there makes the stage run: it names what it refuses); never in a
  linked worktree (``.git`` is a file), whose store is the main checkout's.
- ``summary``: default options, and either the digest runs no ``memory`` stage (the summary
  is then off by default) or no ``memory/summary.md`` entry exists.

Every other built-in, and any non-default ``options`` table, is never idle.
"""

from __future__ import annotations

import os

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Mapping

IDLE_WHEN_ABSENT = {"memory": (".remember",), "summary": ("memory", "summary.md")}
"""Built-in name -> the project-relative entry whose absence leaves it nothing to do."""


def default_options(env: Mapping[str, str]) -> bool:
    """True when the stage runs with its default options (no ``options`` table)."""
    return (env.get("SUPERVISE_STAGE_OPTIONS") or "{}").strip() == "{}"


def idle(name: str, env: Mapping[str, str]) -> bool:
    """True when built-in stage ``name``, started with environment ``env``, would print
    nothing and do nothing (see the module docstring); False whenever in doubt."""
    entry = IDLE_WHEN_ABSENT.get(name)
    if entry is None:
        return False
    project = env.get("SUPERVISE_PROJECT_DIR", "")
    if not default_options(env) or not project.startswith("/") or not os.path.isdir(project):
        return False
    if name == "summary" and "memory" not in env.get("SUPERVISE_DIGEST_BUILTINS",
                                                     "memory").split(","):
        return True  # off by default without the memory feature (inject_summary)
    if name == "memory" and os.path.isfile(os.path.join(project, ".git")):
        return False  # a linked worktree shares the main checkout's store: the stage decides
    return not os.path.lexists(os.path.join(project, *entry))
