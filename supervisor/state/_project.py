"""The project: its root (found without spawning git, for the hook's hot path) and its
per-machine state dir, which must never show up in ``git status``."""

from __future__ import annotations

import os
import stat
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
    text = read_small(dotgit, 64 * 1024)  # capped, never a FIFO (a planted 3 GiB .git file)
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
    # never blocking: a planted .git/commondir FIFO held every hook and verb forever
    raw = read_small(git_dir / "commondir", 64 * 1024).strip()
    if raw:
        common = git_dir / raw if not Path(raw).is_absolute() else Path(raw)
    try:
        return git_dir.resolve(), common.resolve()
    except (OSError, RuntimeError):
        return None


def read_small(path: Path, cap: int = 1 << 20) -> str:
    """A regular file's text (at most ``cap`` bytes), never through a link or from a FIFO;
    ``""`` when absent or not a regular file."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return ""
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return ""
        return os.read(fd, cap).decode("utf-8", "replace")
    except OSError:
        return ""
    finally:
        os.close(fd)


def _ends_with_newline(fd: int, size: int) -> bool:
    try:
        return os.pread(fd, 1, size - 1) == b"\n"
    except OSError:
        return True


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
        lines = read_small(exclude).splitlines()
        if any(line.strip().strip("/") == name for line in lines):
            return None
        exclude.parent.mkdir(parents=True, exist_ok=True)
        # Never through a planted link or into a FIFO: O_NOFOLLOW | O_NONBLOCK, then fstat.
        fd = os.open(exclude, os.O_RDWR | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW
                     | os.O_NONBLOCK | os.O_CLOEXEC, 0o644)
        try:
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode):
                return None
            text = ("\n" if lines and st.st_size and not _ends_with_newline(fd, st.st_size) else "")
            os.write(fd, (text + pattern + "\n").encode("utf-8"))
        finally:
            os.close(fd)
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
