"""Instruction files, read safely: where they are, what they are, their text (stdlib and
:mod:`supervisor._record`, whose frozen records cost what a plain class costs).

The ``instructions`` stage's helpers (``instructions.discover``, ``instructions.imports``) build on these;
the helpers every stage shares (options, warnings, child processes) are in ``_common``.
Nothing here imports anyio or pydantic: a stage must start fast.
"""

from __future__ import annotations

import os
from pathlib import Path

from supervisor._record import record  # not dataclasses: inspect, ast, dis cost every start
from supervisor.state._intake import MAX_BYTES as MAX_READ_BYTES, Refused, Scope, Text, read_text
from supervisor.state._intake import special_location as special_location


def find_git_root(start: Path) -> Path | None:
    """Nearest ancestor of ``start`` (itself included) holding a ``.git`` entry, else None."""
    for directory in (start, *start.parents):
        if (directory / ".git").exists():
            return directory
    return None


@record
class Place:
    """Where the stage looks: ``cwd`` (the harness's working dir), ``root`` (project root,
    the git top level when in git, else ``cwd``) and ``home``; all absolute, not resolved."""

    cwd: Path
    root: Path
    home: Path

    @classmethod
    def from_env(cls) -> Place:
        """From ``SUPERVISE_CWD`` (if given) or the process cwd, and ``SUPERVISE_PROJECT_DIR``."""
        cwd = Path(os.environ.get("SUPERVISE_CWD") or os.getcwd()).absolute()
        project = os.environ.get("SUPERVISE_PROJECT_DIR", "")
        root = Path(project).absolute() if project else (find_git_root(cwd) or cwd)
        if not is_within(cwd, root):
            real_cwd, real_root = Path(os.path.realpath(cwd)), Path(os.path.realpath(root))
            if is_within(real_cwd, real_root):  # same place through a symlink (macOS /tmp)
                cwd = root / real_cwd.relative_to(real_root)
            else:
                root = cwd  # a cwd outside the project: only its own dir counts
        from _common import home_dir

        return cls(cwd=cwd, root=root, home=Path(home_dir()))

    def dirs_root_to_cwd(self) -> list[Path]:
        """``root``, then each directory down to ``cwd`` (both included)."""
        rel = self.cwd.relative_to(self.root)
        dirs = [self.root]
        for part in rel.parts:
            dirs.append(dirs[-1] / part)
        return dirs

    def show(self, path: str | Path) -> str:
        """``path`` relative to the project root when inside it, else absolute."""
        p = Path(path)
        try:
            return str(p.relative_to(self.root))
        except ValueError:
            return str(p)


def is_within(path: Path, parent: Path) -> bool:
    """True when ``path`` is ``parent`` or below it (lexically, no resolution)."""
    try:
        path.relative_to(parent)
    except ValueError:
        return False
    return True


def real(path: str | Path) -> str:
    """The real path (symlinks resolved), as a string; the dedup key of instruction files."""
    return os.path.realpath(path)


FileText = Text
"""An instruction file as read: :class:`supervisor.state._intake.Text` (``text`` cleaned of
hidden text, ``size`` in bytes, ``lossy``, ``hidden``, ``ident``, ``real``)."""

ANYWHERE = Scope((), anywhere=True)
"""Any location but ``/proc``, ``/sys`` and ``/dev``: files the harness loads by itself (read
for their imports), its documented home files, the files the config names."""


MAX_WALK = 4096
"""Names one rules folder's walk looks at, at most (a folder flooded with names, or a deep
tree, costs this many ``stat`` calls, not the stage's whole budget)."""
MAX_DEPTH = 32
"""Folder levels below a rules folder walked at most."""


def rules_in(directory: Path, suffixes: tuple[str, ...], root: Path | None = None) -> list[Path]:
    """The files under ``directory`` with one of ``suffixes`` that are not folders (a link, a
    FIFO included: the door names them), sorted by relative path; links to folders are not
    followed, and at most :data:`MAX_WALK` names and :data:`MAX_DEPTH` levels are looked at.
    With ``root`` (a project folder), a ``directory`` whose real path leaves the project (its
    :func:`supervisor.state._intake.project_scope`: the project, the main checkout of a
    linked worktree) is not walked at all (``.cursor/rules -> /`` would walk the whole file
    system). Never raises."""
    from supervisor.state._intake import project_scope

    try:
        if not directory.is_dir():
            return []
        if root is not None:
            here = Path(real(directory))
            if not any(is_within(here, Path(r)) for r in project_scope(root).roots):
                return []
    except OSError:
        return []
    found: list[Path] = []
    seen = 0
    stack = [(directory, 0)]  # iterative: a 2,000-deep tree overflowed os.walk's recursion
    while stack and seen < MAX_WALK:
        folder, depth = stack.pop()
        try:
            with os.scandir(folder) as entries:
                names: list[os.DirEntry[str]] = []
                for entry in entries:
                    names.append(entry)
                    seen += 1
                    if seen >= MAX_WALK:
                        break
        except OSError:
            continue
        for entry in sorted(names, key=lambda e: e.name, reverse=True):
            try:
                is_folder = entry.is_dir(follow_symlinks=False)
            except OSError:
                continue
            path = Path(folder, entry.name)
            if is_folder:
                if depth + 1 < MAX_DEPTH:
                    stack.append((path, depth + 1))
            elif path.suffix in suffixes and present(path):
                found.append(path)
    return sorted(found, key=lambda p: p.relative_to(directory).as_posix())


def is_regular(path: str | Path) -> bool:
    """True for a regular file (symlinks followed); never raises."""
    try:
        return Path(path).is_file()
    except OSError:
        return False


def present(path: str | Path) -> bool:
    """True when something that is not a directory sits at ``path`` (a file, a link, a FIFO, a
    device): a candidate to read or to name with the reason it was not read. Never raises."""
    try:
        return os.path.lexists(path) and not os.path.isdir(path)
    except OSError:
        return False


def examine(path: str | Path, scope: Scope = ANYWHERE) -> tuple[FileText | None, str]:
    """Read ``path`` through the one door (:func:`supervisor.state._intake.read_text`):
    ``(content, "")``, or ``(None, why not)`` in the door's one wording (outside ``scope``, in
    ``/proc``/``/sys``/``/dev``, not found, a FIFO or device, too large, binary, a link loop,
    unreadable). Never blocks."""
    got = read_text(path, scope)
    if isinstance(got, Refused):
        return None, got.reason
    return got, ""


def read_instruction(path: str | Path) -> FileText | None:
    """:func:`examine` without the reason: the content, or None when it cannot be used."""
    return examine(path)[0]


def file_size(path: str | Path) -> int:
    """Size in bytes, or -1 when it cannot be stat'ed."""
    try:
        return os.stat(path).st_size
    except OSError:
        return -1


