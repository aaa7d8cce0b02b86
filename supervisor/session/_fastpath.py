"""The index files the per-event fast path (``supervisor/hook-fast.sh``) reads in the state dir.

The fast path answers "nothing to do" for a prompt hook without starting Python when no
deferred result is waiting (it looks for ``<state>/deferred/*/result-*.json`` itself) and when
no feature asked for the next prompt to run Python. A feature asks in one of two ways, both
files under ``<state>/fastpath/``:

- a wake file ``wake-<name>`` (:func:`wake`): the next prompt hooks run Python until the
  feature removes it (:func:`clear_wake`);
- the watch list ``watch`` (:func:`set_watch`): one absolute path per line, and the same paths
  as the symlinks ``watch.d/0``, ``watch.d/1``, ... (written first); a prompt hook runs Python
  when a watched file is missing or its mtime or ctime is newer than the list's mtime (ctime
  catches edits that keep an old mtime: ``cp -p``, ``mv``, ``tar x``, ``touch -r``). The
  shell never reads the list: one ``find -L`` over ``watch.d`` stats each target (a planted
  oversized list or FIFO is never opened), and a ``watch`` without its ``watch.d`` makes the
  prompt run Python. The list's mtime is set :data:`MTIME_SLACK` seconds into the past, so a
  change made in the same second as the baseline (file systems compare at one-second
  granularity at worst) is never missed: at worst Python runs once more and finds nothing
  changed.

Post-tool hooks need no index: the shim checks the directories between the payload's ``cwd``
and the file for ``AGENTS.override.md`` / ``AGENTS.md`` directly (no stale answer possible).
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterable
from pathlib import Path

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ..state._statedir import StateDir

FASTPATH_DIR = "fastpath"

WATCH_LINKS = "watch.d"
"""The folder of symlinks to the watched files that the shell's one ``find -L`` stats."""

MTIME_SLACK = 2.0
"""Seconds the watch list's mtime is set before the moment it was written."""


def fastpath_dir(state_dir: Path) -> Path:
    """``<state_dir>/fastpath``: where the fast path's index files live."""
    return state_dir / FASTPATH_DIR


def wake(state_dir: Path, name: str) -> None:
    """Make the next prompt hooks run Python until :func:`clear_wake` (``name``: a short
    feature name, ``[A-Za-z0-9_-]``).

    Raises:
        ValueError: ``name`` is not a plain short name.
        OSError: the state dir cannot be written.
    """
    name = f"wake-{_check(name)}"
    with _folder(state_dir) as folder:
        folder.write(name, b"")


def clear_wake(state_dir: Path, name: str) -> None:
    """Remove the wake file ``name`` (no error when absent).

    Raises:
        ValueError: ``name`` is not a plain short name.
    """
    name = f"wake-{_check(name)}"
    from .._errors import StateError
    from ..state._statedir import open_subpath

    try:
        folder = open_subpath(state_dir, (FASTPATH_DIR,))
        if folder is not None:
            with folder:
                folder.remove(name)
    except StateError:
        pass


def set_watch(state_dir: Path, paths: Iterable[Path]) -> None:
    """Replace the watch list with ``paths`` (absolute; one a line) as of now.

    Raises:
        ValueError: a path is relative or holds a newline.
        OSError: the state dir cannot be written.
    """
    lines = []
    for path in paths:
        text = os.fspath(path)
        if not os.path.isabs(text) or "\n" in text:
            raise ValueError(f"watch path must be absolute and on one line: {text!r}")
        lines.append(text + "\n")
    stamp = time.time() - MTIME_SLACK
    with _folder(state_dir) as folder:
        _write_links(folder.fileno(), [line[:-1] for line in lines])
        folder.write("watch", "".join(lines).encode("utf-8", "surrogateescape"))
        os.utime("watch", (stamp, stamp), dir_fd=folder.fileno(), follow_symlinks=False)


def has_links(state_dir: Path) -> bool:
    """True when ``<state>/fastpath/watch.d`` is a folder (not a link): without it, a watch
    list makes every prompt hook run Python until :func:`set_watch` runs again."""
    import stat

    try:
        st = os.lstat(fastpath_dir(state_dir) / WATCH_LINKS)
    except OSError:
        return False
    return stat.S_ISDIR(st.st_mode)


def _write_links(fd: int, targets: list[str]) -> None:
    """Replace ``watch.d`` in the folder open as ``fd`` with one symlink per target, built
    under a temporary name and renamed into place (the shell sees the old folder or the new
    one, never half of one; a concurrent writer's folder is replaced in turn: the last
    writer wins, as with the list itself).

    Raises:
        OSError: the folder cannot be written.
    """
    import errno

    tmp = f".{WATCH_LINKS}.{os.getpid()}.tmp"
    old = f".{WATCH_LINKS}.{os.getpid()}.old"
    _remove_links(fd, tmp)
    _remove_links(fd, old)
    os.mkdir(tmp, 0o755, dir_fd=fd)
    sub = os.open(tmp, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=fd)
    try:
        for number, target in enumerate(targets):
            os.symlink(target, str(number), dir_fd=sub)
    finally:
        os.close(sub)
    for _attempt in range(5):
        try:
            os.rename(WATCH_LINKS, old, src_dir_fd=fd, dst_dir_fd=fd)
        except FileNotFoundError:
            pass
        try:
            os.rename(tmp, WATCH_LINKS, src_dir_fd=fd, dst_dir_fd=fd)
            break
        except OSError as err:  # another writer's folder took the name in between
            if err.errno not in (errno.ENOTEMPTY, errno.EEXIST, errno.ENOTDIR, errno.EISDIR):
                _remove_links(fd, tmp)
                raise
        finally:
            _remove_links(fd, old)
    else:
        _remove_links(fd, tmp)
        raise OSError(errno.EEXIST, f"{WATCH_LINKS} keeps being replaced; not written")


def _remove_links(fd: int, name: str) -> None:
    """Remove the folder ``name`` (in the folder open as ``fd``) and the entries in it; a
    link or file there is removed, nothing is followed; errors are ignored."""
    try:
        sub = os.open(name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC,
                      dir_fd=fd)
    except OSError:
        try:
            os.unlink(name, dir_fd=fd)
        except OSError:
            pass
        return
    try:
        for entry in os.listdir(sub):
            try:
                os.unlink(entry, dir_fd=sub)
            except OSError:
                try:
                    os.rmdir(entry, dir_fd=sub)
                except OSError:
                    pass
    except OSError:
        pass
    finally:
        os.close(sub)
    try:
        os.rmdir(name, dir_fd=fd)
    except OSError:
        pass


def _folder(state_dir: Path) -> StateDir:
    """``<state>/fastpath`` through the state door (created; no link followed).

    Raises:
        OSError: the state dir cannot be used (a symlinked state dir included).
    """
    from .._errors import StateError
    from ..state._statedir import open_subpath

    try:
        folder = open_subpath(state_dir, (FASTPATH_DIR,), create=True)
    except StateError as err:
        raise OSError(str(err)) from err
    assert folder is not None
    return folder


def _check(name: str) -> str:
    if not name or len(name) > 64 or not all(c.isascii() and (c.isalnum() or c in "-_") for c in name):
        raise ValueError(f"wake name must be 1-64 characters of [A-Za-z0-9_-]: {name!r}")
    return name
