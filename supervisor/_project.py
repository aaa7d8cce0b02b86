"""Finding the project root without spawning git (the hook's hot path)."""

from __future__ import annotations

from pathlib import Path


def find_project_root(start: Path) -> Path:
    """The git top level above ``start`` (the nearest parent holding ``.git``, a directory or
    a worktree's file), else ``start`` itself; absolute, symlinks resolved."""
    start = start.expanduser().resolve()
    for candidate in (start, *start.parents):
        if (candidate / ".git").exists():
            return candidate
    return start
