"""The project: its root (found without spawning git, for the hook's hot path) and its
per-machine state dir, which must never show up in ``git status``."""

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


def add_git_exclude(project_dir: Path, pattern: str = "/.supervise/") -> str | None:
    """Append ``pattern`` to the repo's ``info/exclude`` unless it is already there.

    Returns:
        The exclude file's path when a line was added, None when nothing was needed (not a git
        repo, or the pattern is present). Errors writing the file are returned as None too: a
        missing exclude line is reported by ``doctor``, not fatal to ``install``.
    """
    import subprocess  # off the hot path: only on a first run or an install

    try:
        out = subprocess.run(["git", "-C", str(project_dir), "rev-parse", "--git-path", "info/exclude"],
                             capture_output=True, text=True, timeout=10, stdin=subprocess.DEVNULL)
    except (OSError, subprocess.TimeoutExpired):
        return None
    if out.returncode != 0 or not out.stdout.strip():
        return None
    exclude = Path(out.stdout.strip())
    if not exclude.is_absolute():
        exclude = project_dir / exclude
    name = pattern.strip("/")
    try:
        lines = exclude.read_text("utf-8").splitlines() if exclude.exists() else []
        if any(line.strip().strip("/") == name for line in lines):
            return None
        exclude.parent.mkdir(parents=True, exist_ok=True)
        with exclude.open("a", encoding="utf-8") as f:
            if lines and not exclude.read_text("utf-8").endswith("\n"):
                f.write("\n")
            f.write(pattern + "\n")
    except OSError:
        return None
    return str(exclude)


STATE_DIR_NAME = ".supervise"


def ensure_state_dir(state_dir: Path) -> bool:
    """Create ``state_dir`` when missing; when it is a git project's own ``.supervise/``, add
    it to the repo's ``info/exclude`` so a first run leaves no untracked folder behind.

    Returns True when the dir was created by this call. Raises OSError like ``mkdir``.
    """
    if state_dir.exists():
        return False
    state_dir.mkdir(parents=True, exist_ok=True)
    if state_dir.name == STATE_DIR_NAME and (state_dir.parent / ".git").exists():
        add_git_exclude(state_dir.parent, f"/{STATE_DIR_NAME}/")
    return True
