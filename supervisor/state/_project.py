"""The project: its root (found without spawning git, for the hook's hot path) and its
per-machine state dir, which must never show up in ``git status``."""

from __future__ import annotations

import os
import stat

TYPE_CHECKING = False  # not `typing.TYPE_CHECKING`: importing typing costs the hot path
if TYPE_CHECKING:
    from _typeshed import StrPath

# Paths here are strings (``os.path``), not ``pathlib.Path``: pathlib imports ``re``,
# ``fnmatch``, ``urllib.parse`` and ``ipaddress``, a large share of every hook's CPU
# (docs/benchmarks.md, row "SessionStart hook on an empty digest"). Every function accepts ``str`` or a path-like.


def pure_path(path: StrPath) -> str:
    """``str(pathlib.PurePosixPath(path))``: repeated slashes and ``.`` parts dropped (two
    leading slashes kept, as POSIX allows), no ``..`` collapsed, no link resolved, ``.`` for
    an empty path."""
    text = os.fspath(path)
    parts = [part for part in text.split("/") if part not in ("", ".")]
    if not text.startswith("/"):
        return "/".join(parts) or "."
    lead = "//" if text.startswith("//") and not text.startswith("///") else "/"
    return lead + "/".join(parts)


def find_project_root(start: StrPath) -> str:
    """The git top level above ``start`` (the nearest parent holding ``.git``, a directory or
    a worktree's file), else ``start`` itself; absolute, symlinks resolved (a ``str``)."""
    candidate = os.path.realpath(os.path.expanduser(os.fspath(start)))
    top = candidate
    while True:
        if os.path.exists(os.path.join(candidate, ".git")):
            return candidate
        parent = os.path.dirname(candidate)
        if parent == candidate:
            return top
        candidate = parent


def _read_gitdir_file(dotgit: str) -> str | None:
    text = read_small(dotgit, 64 * 1024)  # capped, never a FIFO (a planted 3 GiB .git file)
    for line in text.splitlines():
        if line.startswith("gitdir:"):
            target = line.removeprefix("gitdir:").strip()
            return os.path.join(os.path.dirname(dotgit), target)  # an absolute target wins
    return None


def git_dirs(top: StrPath) -> tuple[str, str] | None:
    """``(git_dir, common_dir)`` of the work tree at ``top``, both resolved, or ``None``.

    ``git_dir`` is ``top/.git`` or where a ``.git`` file points; ``common_dir`` follows the
    git dir's ``commondir`` file when present (linked worktrees), else equals ``git_dir``.
    """
    dotgit = os.path.join(top, ".git")
    if os.path.isdir(dotgit):
        git_dir: str | None = dotgit
    elif os.path.isfile(dotgit):
        git_dir = _read_gitdir_file(dotgit)
    else:
        git_dir = None
    if not git_dir:
        return None
    common = git_dir
    # never blocking: a planted .git/commondir FIFO held every hook and verb forever
    raw = read_small(os.path.join(git_dir, "commondir"), 64 * 1024).strip()
    if raw:
        common = os.path.join(git_dir, raw)  # an absolute `raw` replaces git_dir
    try:
        return os.path.realpath(git_dir), os.path.realpath(common)
    except (OSError, ValueError):
        return None


def main_checkout(top: StrPath) -> str | None:
    """The main checkout of the linked worktree at ``top`` (the folder holding the common
    git dir, resolved), or None when ``top`` is no linked worktree, or its repository is bare
    (no main checkout to share with). Read from files, no git process."""
    dirs = git_dirs(top)
    if dirs is None or dirs[0] == dirs[1] or os.path.basename(dirs[1]) != ".git":
        return None
    main = os.path.dirname(dirs[1])
    return main if os.path.isdir(main) and main != os.path.realpath(top) else None


def read_small(path: StrPath, cap: int = 1 << 20) -> str:
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


def add_git_exclude(project_dir: StrPath, pattern: str = "/.supervise/") -> str | None:
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
    exclude = os.path.join(dirs[1], "info", "exclude")  # in the common dir (worktrees share it)
    name = pattern.strip("/")
    try:
        lines = read_small(exclude).splitlines()
        if any(line.strip().strip("/") == name for line in lines):
            return None
        os.makedirs(os.path.dirname(exclude), exist_ok=True)
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
    return exclude


def remove_git_exclude(project_dir: StrPath, pattern: str) -> str | None:
    """Drop the lines equal to ``pattern`` (leading and trailing slashes aside) from the repo's
    ``info/exclude``, the undo of :func:`add_git_exclude` for a file that no longer exists.

    Every other line is kept as written. A link or non-regular file at the exclude path is left
    alone (the rewrite is atomic and never follows a link).

    Returns:
        The exclude file's path when a line was removed, None when nothing was (not a git repo,
        no such line, or the file could not be rewritten: a stale exclude line is harmless).
    """
    from ._fsutil import atomic_write

    dirs = git_dirs(project_dir)
    if dirs is None:
        return None
    exclude = os.path.join(dirs[1], "info", "exclude")
    name = pattern.strip("/")
    try:
        if not stat.S_ISREG(os.lstat(exclude).st_mode):
            return None
        lines = read_small(exclude).splitlines(keepends=True)
        kept = [line for line in lines if line.strip().strip("/") != name]
        if len(kept) == len(lines):
            return None
        atomic_write(exclude, "".join(kept).encode("utf-8"))
    except OSError:
        return None
    return exclude


STATE_DIR_NAME = ".supervise"


def ensure_state_dir(state_dir: StrPath) -> bool:
    """Create ``state_dir`` when missing; when it is a git project's own ``.supervise/``, add
    it to the repo's ``info/exclude`` so a first run leaves no untracked folder behind.

    Returns True when the dir was created by this call. Raises OSError like ``mkdir``.
    """
    from ._fsutil import nofollow_path

    path = nofollow_path(state_dir)
    if os.path.exists(path):
        return False
    os.makedirs(path, exist_ok=True)
    parent, name = os.path.split(path)
    if name == STATE_DIR_NAME and os.path.exists(os.path.join(parent, ".git")):
        add_git_exclude(parent, f"/{STATE_DIR_NAME}/")
    return True


def state_dir_problem(state_dir: StrPath) -> str | None:
    """Why ``state_dir`` must not be written (it, or a record folder in it, is a symlink:
    someone else decides where our state lands), or None when it may be used. A trailing
    slash (``"link/"``) is no way past it."""
    from ._fsutil import nofollow_path

    state_dir = nofollow_path(state_dir)
    if os.path.islink(state_dir):
        return f"state dir {state_dir} is a symlink; refusing to follow it"
    return None
