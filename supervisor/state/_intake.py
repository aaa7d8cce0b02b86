"""The one door for a project or user file whose text becomes the model's context.

Every reader that turns a file of the tree or of the user's home into context goes through
here: the ``instructions`` stage (discovered files, ``@imports``, the ``files`` option), the
``memory`` and ``summary`` stages, the post-tool nested injection
(:mod:`supervisor.session._nested`), the instruction-change refresh
(:mod:`supervisor.session._refresh`) and whatever a later reader adds (rules, MCP
resources). ``tests/test_intake.py`` lists the readers: an ``open`` of an instruction or
memory path anywhere else fails it.

The checks, in this order, each refusal named in one wording (:class:`Refused`):

1. **Location.** The path's real path (links resolved) must not lie in ``/proc``, ``/sys``
   or ``/dev`` (``/proc/self/environ`` holds the hook's secrets, ``/dev/zero`` never ends,
   ``/dev/tty`` has side effects), whatever the caller allows; and it must lie inside one of
   the :class:`Scope`'s roots (the project, the main checkout of a linked worktree, a folder
   the user allowed) unless the scope allows ``anywhere`` (a user file the harness documents,
   such as ``~/.claude/CLAUDE.md``, or the ``allow_outside`` option). Checked before any open.
2. **Type.** Opened with ``O_NONBLOCK`` (a FIFO never blocks), ``O_NOCTTY``, ``O_NOFOLLOW``
   when a link must not be followed (memory files), then ``fstat``-ed: only a regular file is
   read. After the open the location is judged again on the opened file itself (Linux:
   ``/proc/self/fd``; elsewhere its identity must be the checked path's), so a link swapped
   in between the check and the open is never read.
3. **Size.** At most ``cap`` bytes (:data:`MAX_BYTES` by default); a bigger file is named
   with its size, never read whole.
4. **Identity.** ``(st_dev, st_ino)`` of the opened file (:attr:`Got.ident`): readers
   de-duplicate by it, so a hard link (``ln AGENTS.md CLAUDE.md``) is one file.
5. **Text.** NUL bytes mean binary (refused); a leading BOM is dropped; invalid UTF-8 is
   replaced (``lossy``); hidden text is removed (:func:`supervisor._sanitize.clean`).

Every path a refusal quotes is written through :func:`supervisor._sanitize.one_line`.

Stdlib and base only, cheap to import (the hook's post-tool and prompt paths use it; no
``pathlib``): paths are ``str`` or path-likes.
"""

from __future__ import annotations

import os
import stat

from .._record import record
from .._sanitize import one_line

TYPE_CHECKING = False  # not `typing.TYPE_CHECKING`: importing typing costs the hot path
if TYPE_CHECKING:
    from _typeshed import StrPath

__all__ = ["MAX_BYTES", "SPECIAL_ROOTS", "Got", "Refused", "Scope", "Text", "decode", "identity", "judge",
           "main_checkout", "project_scope", "read", "read_text", "special_location", "text_of"]

MAX_BYTES = 4 * 1024 * 1024
"""Bytes of one file read into context at most (a bigger one is named with its size)."""
SPECIAL_ROOTS = ("/proc", "/sys", "/dev")
"""Kernel and device file systems: nothing resolving there is ever opened."""


@record
class Scope:
    """Where a file may lead.

    Attributes:
        roots: real paths (links resolved) a file's real path must lie in: the project, the
            main checkout of a linked worktree, folders the user allowed (``allow_paths``).
        anywhere: any location but :data:`SPECIAL_ROOTS` (a user file the harness
            documents, a file the config names, ``allow_outside``).
        hint: appended to the "outside the project" refusal: how the user allows it
            (``"; allow it with the allow_outside or allow_paths option"``), or ``""``.
    """

    roots: tuple[str, ...]
    anywhere: bool = False
    hint: str = ""


@record
class Refused:
    """Why a file was not read: ``reason`` is the one line to show (paths already escaped by
    :func:`~supervisor._sanitize.one_line`); ``kind`` is one of ``missing``, ``location``,
    ``link``, ``loop``, ``type``, ``size``, ``binary``, ``unreadable``."""

    reason: str
    kind: str


@record
class Got:
    """A file's bytes as read: ``path`` as given, ``real`` the opened file's real path,
    ``ident`` its ``(st_dev, st_ino)``, ``size`` its size on disk (bytes), ``data`` its bytes
    (at most the cap)."""

    path: str
    real: str
    ident: tuple[int, int]
    size: int
    data: bytes


@record
class Text:
    """A file's text as it may enter context: ``text`` decoded as UTF-8 (invalid bytes
    replaced, then ``lossy`` is True), a leading BOM dropped, hidden text removed (``hidden``
    characters, :func:`supervisor._sanitize.clean`); ``path``, ``real``, ``ident`` and
    ``size`` (bytes, after the BOM) as in :class:`Got`."""

    path: str
    real: str
    ident: tuple[int, int]
    size: int
    text: str
    lossy: bool
    hidden: int


def special_location(real_path: str) -> str | None:
    """The kernel or device file system (``/proc``, ``/sys``, ``/dev``) ``real_path`` lies
    in, else None."""
    for root in SPECIAL_ROOTS:
        if real_path == root or real_path.startswith(root + "/"):
            return root
    return None


def _inside(real_path: str, root: str) -> bool:
    return real_path == root or real_path.startswith(root.rstrip("/") + "/")


def main_checkout(project_dir: StrPath) -> str | None:
    """The real path of the main checkout when ``project_dir`` is a linked worktree (its git
    dir's ``commondir`` leads to ``<main>/.git``), else None. Reads git's pointer files
    through :func:`supervisor.state._project.git_dirs` (capped, never a link or FIFO)."""
    from ._project import git_dirs

    found = git_dirs(project_dir)
    if found is None:
        return None
    git_dir, common = found
    if git_dir == common or os.path.basename(common) != ".git":
        return None  # not linked, or a bare repository (no checkout)
    return os.path.dirname(common)


def project_scope(project_dir: StrPath, *more: StrPath, allow: tuple[StrPath, ...] = (),
                  anywhere: bool = False, hint: str = "") -> Scope:
    """The :class:`Scope` of a project: its real path, the main checkout when it is a linked
    worktree (:func:`main_checkout`), the real paths of ``more`` (the session's cwd) and of
    ``allow`` (folders or files the user allowed); ``anywhere`` and ``hint`` as in
    :class:`Scope`."""
    roots = [os.path.realpath(project_dir)]
    main = main_checkout(roots[0])
    if main is not None:
        roots.append(main)
    roots += [os.path.realpath(p) for p in (*more, *allow)]
    return Scope(tuple(dict.fromkeys(roots)), anywhere, hint)


def _location(real_path: str, scope: Scope) -> Refused | None:
    where = special_location(real_path)
    if where is not None:
        return Refused(f"refused: it resolves to {one_line(real_path)}, in {where} (a kernel or "
                       "device file system); never read", "location")
    if scope.anywhere or any(_inside(real_path, root) for root in scope.roots):
        return None
    return Refused(f"refused: it resolves to {one_line(real_path)}, outside the project"
                   f"{scope.hint}", "location")


def _kind(mode: int) -> Refused:
    for test, name in ((stat.S_ISFIFO, "a FIFO"), (stat.S_ISSOCK, "a socket"),
                       (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
                       (stat.S_ISDIR, "a directory")):
        if test(mode):
            return Refused(f"{name}, not a regular file; not read", "type")
    return Refused("not a regular file; not read", "type")


def _too_large(size: int | None, cap: int) -> Refused:
    got = f"{size} bytes" if size is not None else f"over {cap} bytes"
    return Refused(f"too large ({got}; files over {cap} bytes are not read)", "size")


def _open_error(path: str, err: OSError, follow: bool) -> Refused:
    import errno

    if isinstance(err, FileNotFoundError):
        return Refused("not found", "missing")
    if err.errno == errno.ELOOP:
        if not follow and os.path.islink(path):
            return Refused("a symbolic link; not read", "link")
        return Refused("a symbolic link loop (too many levels of symbolic links); not read", "loop")
    if err.errno == errno.ENXIO:  # a socket (or a FIFO with no writer, for writing)
        return Refused("a socket, not a regular file; not read", "type")
    return Refused(f"unreadable ({err.strerror or err})", "unreadable")


def judge(path: StrPath, scope: Scope, *, cap: int = MAX_BYTES) -> Refused | None:
    """Why :func:`read` would refuse ``path``, told without opening it (its location, its
    type and size by ``stat``), else None: for listings that name a file without reading it
    (the digest's list of nested instruction files). Never raises."""
    text = os.fspath(path)
    real = os.path.realpath(text)
    refused = _location(real, scope)
    if refused is not None:
        return refused
    try:
        st = os.stat(text)
    except OSError as err:
        return _open_error(text, err, True)
    if not stat.S_ISREG(st.st_mode):
        return _kind(st.st_mode)
    if st.st_size > cap:
        return _too_large(st.st_size, cap)
    return None


def _opened_path(fd: int, real: str, st: os.stat_result) -> str | None:
    """The real path of the open descriptor ``fd``: ``/proc/self/fd/N`` where the kernel
    offers it; elsewhere ``real`` when it is still the same file (else None: it changed)."""
    try:
        where = os.readlink(f"/proc/self/fd/{fd}")
    except OSError:
        where = ""
    if where.startswith("/") and not where.endswith(" (deleted)"):
        return where
    try:
        now = os.stat(real)
    except OSError:
        return None
    return real if (now.st_dev, now.st_ino) == (st.st_dev, st.st_ino) else None


def read(path: StrPath, scope: Scope, *, cap: int = MAX_BYTES, follow: bool = True,
         whole: bool = True) -> Got | Refused:
    """The bytes of ``path`` if it may enter context (location, type, size; see the module
    docstring), else why not. ``follow=False``: a link at ``path`` is refused ("a symbolic
    link"), not followed (memory files). ``whole=False``: a file over ``cap`` gives its first
    ``cap`` bytes (:attr:`Got.size` says how big it is) instead of a refusal (a memory file
    shown cut). Never raises, never blocks."""
    text = os.fspath(path)
    real = os.path.realpath(text)
    refused = _location(real, scope)
    if refused is not None:
        return refused
    flags = (os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC | getattr(os, "O_NOCTTY", 0)
             | (0 if follow else os.O_NOFOLLOW))
    try:
        fd = os.open(text, flags)
    except OSError as err:
        return _open_error(text, err, follow)
    try:
        st = os.fstat(fd)
        where = _opened_path(fd, real, st)
        if where is None:
            return Refused("changed while it was opened; not read", "unreadable")
        if where != real:  # swapped between the check and the open: judged again
            refused = _location(where, scope)
            if refused is not None:
                return refused
        if not stat.S_ISREG(st.st_mode):
            return _kind(st.st_mode)
        if whole and st.st_size > cap:
            return _too_large(st.st_size, cap)
        limit = cap + 1 if whole else cap
        chunks: list[bytes] = []
        total = 0
        while total < limit and (chunk := os.read(fd, min(1 << 20, limit - total))):
            chunks.append(chunk)
            total += len(chunk)
    except OSError as err:
        return Refused(f"unreadable ({err.strerror or err})", "unreadable")
    finally:
        os.close(fd)
    if total > cap:  # it grew while we read
        return _too_large(None, cap)
    return Got(text, where, (st.st_dev, st.st_ino), max(st.st_size, total), b"".join(chunks))


def decode(data: bytes) -> tuple[str, bool, int] | Refused:
    """Bytes read through :func:`read` as context text: ``(text, lossy, hidden)`` (a leading
    BOM dropped, invalid UTF-8 replaced, hidden text removed), or :class:`Refused`
    (``binary``) when they hold a NUL byte."""
    if b"\0" in data:
        return Refused("binary (it contains NUL bytes); not read", "binary")
    if data.startswith(b"\xef\xbb\xbf"):
        data = data[3:]
    from .._sanitize import clean

    try:
        decoded, lossy = data.decode("utf-8"), False
    except UnicodeDecodeError:
        decoded, lossy = data.decode("utf-8", errors="replace"), True
    cleaned, hidden = clean(decoded)
    return cleaned, lossy, hidden


def text_of(got: Got) -> Text | Refused:
    """``got``'s bytes as context text (:class:`Text`, through :func:`decode`), or
    :class:`Refused` (``binary``)."""
    decoded = decode(got.data)
    if isinstance(decoded, Refused):
        return decoded
    size = len(got.data) - (3 if got.data.startswith(b"\xef\xbb\xbf") else 0)
    return Text(got.path, got.real, got.ident, size, *decoded)


def read_text(path: StrPath, scope: Scope, *, cap: int = MAX_BYTES,
              follow: bool = True) -> Text | Refused:
    """:func:`read`, then :func:`text_of`: the file's cleaned text, or why it is refused."""
    got = read(path, scope, cap=cap, follow=follow)
    return got if isinstance(got, Refused) else text_of(got)


def identity(path: StrPath) -> tuple[int, int] | None:
    """``(st_dev, st_ino)`` of the file ``path`` leads to (links followed), None when it
    cannot be stat-ed: the de-duplication key of files the harness loads by itself."""
    try:
        st = os.stat(path)
    except (OSError, ValueError):
        return None
    return st.st_dev, st.st_ino
