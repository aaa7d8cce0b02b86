"""Instruction files, read safely: where they are, what they are, their text (stdlib and
:mod:`supervisor._record`, whose frozen records cost what a plain class costs).

The ``instructions`` stage's helpers (``instructions.discover``, ``instructions.imports``) build on these;
the helpers every stage shares (options, warnings, child processes) are in ``_common``.
Nothing here imports anyio or pydantic: a stage must start fast.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

from supervisor._record import record  # not dataclasses: inspect, ast, dis cost every start

#: Largest instruction file read at all (bytes); bigger ones are named, never read.
MAX_READ_BYTES = 4 * 1024 * 1024

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


@record
class FileText:
    """An instruction file read from disk.

    Attributes:
        text: its content decoded as UTF-8 (invalid bytes replaced by U+FFFD), with hidden
            text removed (:func:`supervisor._sanitize.clean`).
        size: its size in bytes on disk.
        lossy: True when the bytes were not valid UTF-8 (the text carries replacements).
        hidden: characters removed as hidden text (escape sequences, controls, bidi and
            invisible characters); the stage names the file with that count.
    """

    text: str
    size: int
    lossy: bool
    hidden: int = 0


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


#: Kernel and device file systems: an instruction file resolving there is never read, whatever
#: the allow options say (``/proc/self/environ`` holds secrets, ``/dev/zero`` never ends).
SPECIAL_ROOTS = ("/proc", "/sys", "/dev")


def special_location(real_path: str) -> str | None:
    """The kernel or device file system ``real_path`` lies in (``/proc``...), else None."""
    for root in SPECIAL_ROOTS:
        if real_path == root or real_path.startswith(root + "/"):
            return root
    return None


def _kind(mode: int) -> str:
    for test, name in ((stat.S_ISFIFO, "a FIFO"), (stat.S_ISSOCK, "a socket"),
                       (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
                       (stat.S_ISDIR, "a directory")):
        if test(mode):
            return name
    return "not a regular file"


def examine(path: str | Path) -> tuple[FileText | None, str]:
    """Read ``path`` without ever blocking: ``(content, "")``, or ``(None, why not)``.

    The reasons, each true and specific (issue 11 item 7): ``not found``, ``unreadable
    (Permission denied)``, ``a FIFO, not a regular file; not read`` (also sockets, devices,
    directories), ``too large (N bytes; ...)``, ``binary (it contains NUL bytes); not read``.
    A leading BOM is dropped; hidden text is removed (:class:`FileText`).
    """
    where = special_location(real(path))
    if where is not None:  # checked before any open: /dev/tty, /proc/kmsg are never touched
        return None, (f"refused: it resolves to {real(path)}, in {where} (a kernel or device "
                      "file system); never read")
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except FileNotFoundError:
        return None, "not found"
    except OSError as err:
        return None, f"unreadable ({err.strerror or err})"
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            return None, f"{_kind(st.st_mode)}, not a regular file; not read"
        if st.st_size > MAX_READ_BYTES:
            return None, (f"too large ({st.st_size} bytes; instruction files over "
                          f"{MAX_READ_BYTES} bytes are not read)")
        chunks = []
        total = 0
        while total <= MAX_READ_BYTES:
            chunk = os.read(fd, 1 << 16)
            if not chunk:
                break
            chunks.append(chunk)
            total += len(chunk)
    except OSError as err:
        return None, f"unreadable ({err.strerror or err})"
    finally:
        os.close(fd)
    data = b"".join(chunks)
    if len(data) > MAX_READ_BYTES:  # it grew while we read
        return None, (f"too large (over {MAX_READ_BYTES} bytes; instruction files over "
                      f"{MAX_READ_BYTES} bytes are not read)")
    if b"\0" in data:
        return None, "binary (it contains NUL bytes); not read"
    if data.startswith(b"\xef\xbb\xbf"):
        data = data[3:]
    from supervisor._sanitize import clean

    try:
        text, lossy = data.decode("utf-8"), False
    except UnicodeDecodeError:
        text, lossy = data.decode("utf-8", errors="replace"), True
    text, hidden = clean(text)
    return FileText(text, len(data), lossy, hidden), ""


def read_instruction(path: str | Path) -> FileText | None:
    """:func:`examine` without the reason: the content, or None when it cannot be used."""
    return examine(path)[0]


def file_size(path: str | Path) -> int:
    """Size in bytes, or -1 when it cannot be stat'ed."""
    try:
        return os.stat(path).st_size
    except OSError:
        return -1


