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


def _read_gitdir_file(dotgit: Path) -> Path | None:
    try:
        text = dotgit.read_text("utf-8", errors="replace")
    except OSError:
        return None
    for line in text.splitlines():
        if line.startswith("gitdir:"):
            target = Path(line.removeprefix("gitdir:").strip())
            return (dotgit.parent / target) if not target.is_absolute() else target
    return None


def git_dirs(top: Path) -> tuple[Path, Path] | None:
    """``(git_dir, common_dir)`` of the work tree at ``top``, both resolved, or ``None``.

    ``git_dir`` is ``top/.git`` or where a ``.git`` file points; ``common_dir`` follows the
    git dir's ``commondir`` file when present (linked worktrees), else equals ``git_dir``.
    """
    dotgit = top / ".git"
    if dotgit.is_dir():
        git_dir: Path | None = dotgit
    elif dotgit.is_file():
        git_dir = _read_gitdir_file(dotgit)
    else:
        git_dir = None
    if git_dir is None:
        return None
    common = git_dir
    try:
        raw = (git_dir / "commondir").read_text("utf-8").strip()
        if raw:
            common = git_dir / raw if not Path(raw).is_absolute() else Path(raw)
    except OSError:
        pass
    try:
        return git_dir.resolve(), common.resolve()
    except (OSError, RuntimeError):
        return None


def add_git_exclude(project_dir: Path, pattern: str = "/.supervise/") -> str | None:
    """Append ``pattern`` to the repo's ``info/exclude`` unless it is already there.

    The exclude file is found from ``.git`` itself (``git rev-parse --git-path info/exclude``
    without spawning git, which may be slow or hang on a network filesystem).

    Returns:
        The exclude file's path when a line was added, None when nothing was needed (not a git
        repo, or the pattern is present). Errors writing the file are returned as None too: a
        missing exclude line is reported by ``doctor``, not fatal to ``install``.
    """
    dirs = git_dirs(project_dir)  # read from files: no git process on the digest's path
    if dirs is None:
        return None
    exclude = dirs[1] / "info" / "exclude"  # info/ lives in the common dir (worktrees share it)
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


def state_dir_problem(state_dir: Path) -> str | None:
    """Why ``state_dir`` must not be written (it, or a record folder in it, is a symlink:
    someone else decides where our state lands), or None when it may be used."""
    if state_dir.is_symlink():
        return f"state dir {state_dir} is a symlink; refusing to follow it"
    return None
