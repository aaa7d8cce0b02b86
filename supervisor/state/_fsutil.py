"""Small file-system primitives shared by every writer of state: atomic replace, bounded flock,
the guarded read of a small user file (a config or settings file: never blocking, capped).

Stdlib (and the base `_errors`) only, cheap to import: the hook, the stages and the deferred
runner all use it.
"""

from __future__ import annotations

import fcntl
import os
import time
from collections.abc import Iterator
from contextlib import contextmanager

from .._errors import ConfigError

TYPE_CHECKING = False  # not `typing.TYPE_CHECKING`: importing typing costs the hot path
if TYPE_CHECKING:
    from pathlib import Path

    from _typeshed import StrPath


def nofollow_path(path: StrPath) -> str:
    """``path`` as a ``str`` without trailing slashes (``"/"`` stays ``"/"``), for every entry
    that refuses to follow its last component: ``os.open("link/", O_NOFOLLOW | O_DIRECTORY)``
    *does* follow a link (a trailing slash makes the kernel resolve the last component) and
    ``os.path.islink("link/")`` is False, so ``"link/"`` and ``"link//"`` walked past the
    refusal into the link's target."""
    text = os.fspath(path)
    return text.rstrip("/") or ("/" if text.startswith("/") else text)


def atomic_write(path: StrPath, data: bytes, *, mode: int | None = None, fsync: bool = False) -> None:
    """Replace ``path`` with ``data`` atomically: readers see the old or the new file, never a
    part. A temp file is created exclusively (``O_EXCL | O_NOFOLLOW``) in the same folder,
    written, optionally fsynced (with the folder) and renamed over ``path``; a symlink at
    ``path`` is replaced, not followed.

    Args:
        path: the file to replace (``str`` or a path-like).
        data: its new content (bytes).
        mode: permission bits for the new file (default 0o644 minus the umask).
        fsync: flush file and folder to disk before returning (records that must survive a
            crash: the lock).

    Raises:
        OSError: the folder is not writable or the disk is full; the temp file is removed.
    """
    folder, name = os.path.split(nofollow_path(path))
    tmp = os.path.join(folder, f".{name}.{os.getpid()}.{os.urandom(4).hex()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC,
                 0o644 if mode is None else mode)
    try:
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view):]
            if mode is not None:
                os.fchmod(fd, mode)  # exact bits, whatever the umask
            if fsync:
                os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
    if fsync:
        dfd = os.open(folder or ".", os.O_RDONLY | os.O_DIRECTORY)
        try:
            os.fsync(dfd)
        finally:
            os.close(dfd)


@contextmanager
def flocked(path: StrPath, timeout: float, *, poll: float = 0.005) -> Iterator[bool]:
    """Hold an exclusive ``flock`` on ``path`` (created if missing, never through a symlink)
    for the ``with`` body; yields False when it could not be had within ``timeout`` seconds.

    The kernel releases the lock when the holder dies, so a crash never leaves it stuck.

    Raises:
        OSError: ``path`` cannot be opened (ELOOP for a symlink).
    """
    fd = os.open(nofollow_path(path), os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK
                 | os.O_CLOEXEC, 0o600)
    with flock_fd(fd, timeout, poll=poll) as held:
        yield held


@contextmanager
def flock_fd(fd: int, timeout: float, *, poll: float = 0.005) -> Iterator[bool]:
    """Hold an exclusive ``flock`` on the open descriptor ``fd`` for the ``with`` body, trying
    every ``poll`` seconds for up to ``timeout`` seconds; yields whether it was had. Takes
    ownership of ``fd``: it is closed on exit, which releases the lock. Never raises for a
    busy lock."""
    try:
        deadline = time.monotonic() + timeout
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    yield False
                    return
                time.sleep(poll)
        yield True
    finally:
        os.close(fd)  # closing the descriptor releases the flock


def link_on_path(path: Path, roots: tuple[Path, ...] = ()) -> tuple[Path, str] | None:
    """The first symbolic link among ``path`` and its folders below the nearest of ``roots``.

    A settings file we edit must be a regular file in a real folder: a hostile clone can ship
    ``.claude/settings.json -> ~/.claude/settings.json`` (or link ``.claude/`` itself), and a
    write through it would register hooks for every project, or create the link's target.
    Only the part of the path below the root (project dir, home) is checked: the root's own
    ancestry is the user's. Without a matching root, only ``path`` itself is checked.

    Returns:
        ``(link, target)`` (``target`` as stored in the link) or None when no link is found.
    """
    import stat
    from pathlib import Path  # install, uninstall and doctor only: not on a hook path

    path, roots = Path(path), tuple(Path(root) for root in roots)
    base = next((root for root in roots if path.is_relative_to(root)), None)
    parts: tuple[str, ...]
    if base is None:
        current, parts = path.parent, (path.name,)
    else:
        current, parts = base, path.relative_to(base).parts
    for part in parts:
        current = current / part
        try:
            st = os.lstat(current)
        except FileNotFoundError:
            return None
        except OSError:
            continue
        if stat.S_ISLNK(st.st_mode):
            try:
                target = os.readlink(current)
            except OSError:
                target = "?"
            return current, target
    return None


def link_refusal(link: Path, target: str) -> str:
    """The one line ``install``/``uninstall``/``doctor`` print for a settings file behind a link."""
    return (f"{link} is a symbolic link to {target}; refusing to write through it (it could "
            "reach outside this project): replace it with a regular file or folder")


def point_at_devnull(fd: int) -> None:
    """Point descriptor ``fd`` at ``/dev/null`` (``dup2``), so nothing later writes half a
    document to it and no file opened later takes its number: the output choke point's sink,
    a verb's stdout, the hook's envelope after a write failed, the reader that left (EPIPE).
    Never raises: a descriptor that cannot be pointed anywhere is left as it is."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY | os.O_CLOEXEC)
    except OSError:
        return
    try:
        if devnull != fd:
            os.dup2(devnull, fd)
    except OSError:
        pass
    finally:
        if devnull != fd:
            os.close(devnull)


def read_small_file(path: str | os.PathLike[str], limit: int, *, what: str = "a file",
                    special_ok: bool = False, missing_ok: bool = False) -> bytes | None:
    """The bytes of the user's file ``path`` (a config or settings file), at most ``limit``
    bytes, never blocking on a planted FIFO: opened with ``O_NONBLOCK`` and ``fstat``-ed; only
    a regular file is read (``special_ok``: also a pipe, for ``--config <(...)``, which the
    user named themselves). Links are followed: the user's own files may be links.

    Returns:
        the bytes; None when ``path`` does not exist and ``missing_ok`` (else that is an error).

    Raises:
        ConfigError: one line naming the file and the true reason: not a regular file (a
            folder, FIFO, socket or device), too large (its size; ``what`` names the kind of
            file in the message), or cannot be read (the OS error).
    """
    import stat

    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC | (0 if special_ok else os.O_NONBLOCK))
    except FileNotFoundError as err:
        if missing_ok:
            return None
        raise ConfigError(f"{os.fsdecode(path)}: cannot read: {err.strerror}") from None
    except OSError as err:
        raise ConfigError(f"{os.fsdecode(path)}: cannot read: {err.strerror or err}") from None
    name = os.fsdecode(path)
    try:
        st = os.fstat(fd)
        if stat.S_ISDIR(st.st_mode) or not (stat.S_ISREG(st.st_mode)
                                            or (special_ok and stat.S_ISFIFO(st.st_mode))):
            raise ConfigError(f"{name}: not a regular file (a folder, FIFO, socket or device); "
                              "not read")
        if st.st_size > limit:
            raise ConfigError(f"{name}: too large ({st.st_size} bytes; {what} is at most "
                              f"{limit} bytes); not read")
        chunks: list[bytes] = []
        got = 0
        while got <= limit and (chunk := os.read(fd, 1 << 16)):
            chunks.append(chunk)
            got += len(chunk)
    except OSError as err:
        raise ConfigError(f"{name}: cannot read: {err.strerror or err}") from None
    finally:
        os.close(fd)
    if got > limit:
        raise ConfigError(f"{name}: too large (over {limit} bytes); not read")
    return b"".join(chunks)
