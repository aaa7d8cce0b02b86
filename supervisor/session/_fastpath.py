"""The index files the per-event fast path (``supervisor/hook-fast.sh``) reads in the state dir.

The fast path answers "nothing to do" for a prompt hook without starting Python when no
deferred result is waiting (it looks for ``<state>/deferred/*/result-*.json`` itself) and when
no feature asked for the next prompt to run Python. A feature asks in one of two ways, both
files under ``<state>/fastpath/``:

- a wake file ``wake-<name>`` (:func:`wake`): the next prompt hooks run Python until the
  feature removes it (:func:`clear_wake`);
- the watch list ``watch`` (:func:`set_watch`): one absolute path per line, and the same files
  in the folder ``watch.parents`` (written first): per file ``/dir/NAME`` a symlink
  ``<n>-NAME`` to ``/dir`` and an empty file ``.ctime-<n>-<ns>`` holding its ctime then (or
  ``.absent-<n>`` for a file that was absent then; no record at all for a file some
  baseline holds a stale hash of), and an empty file ``.since-<ns>`` holding the baseline's time, in nanoseconds. A prompt hook
  runs Python when a watched file is missing, not a regular file, a symlink (one planted in
  its place), has a ctime other than the one recorded (a clock set back after the baseline
  gives an edit a ctime before the stamp; only GNU ``du`` prints the ns to compare), or has a
  ctime at or after the stamp (a change within the file system's timestamp granularity of
  the baseline keeps the recorded ctime): ctime catches
  every edit, those that keep an old mtime too (``cp -p``, ``mv``, ``tar x``, ``touch -r``,
  ``touch -d``), since every write, rename, chmod or utime sets it to now. The shell never
  reads the list: it walks ``watch.parents`` (``<n>-NAME/NAME`` is the file itself, reached
  through its folder's link, so its own type is seen) and one GNU ``du --time=ctime`` (or,
  where ``du`` cannot, ``find -newer/-cnewer watch``) stats the files (a planted oversized
  list or FIFO is never opened); a ``watch`` without its ``watch.parents`` makes the prompt
  run Python. The stamp (and the list's mtime) is :data:`MTIME_SLACK` seconds before the
  moment the list was written, so a change made in the same second as the baseline (file
  systems compare at one-second granularity at worst) is never missed: at worst Python runs
  once more and finds nothing changed.
A post-tool hook checks the directories between the payload's ``cwd`` and the file for
``AGENTS.override.md`` / ``AGENTS.md`` itself. When one holds such a file, the shim answers
"nothing to do" only from the **injected index** (:func:`mark_injected`): the folder
``<state>/fastpath/nested/<session id>/`` mirrors, below it, the absolute path of every
instruction file the Python path injected in the session's current compaction epoch (an empty
file ``<state>/fastpath/nested/<session id>/home/me/project/pkg/AGENTS.md``). The index is a
subset of the ledger (:mod:`supervisor.session._nested`), written under the ledger's claim:
entries are added after the ledger recorded them, and the whole folder is renamed away before
the ledger forgets anything (a new epoch at ``compact`` / ``clear``, a missing, corrupt or
overgrown ledger), so the shim never finds an entry the ledger no longer has. Only files
whose real path is their path (no link on the way) are indexed, and only for a session id that
is a plain name (:func:`index_name`): the shim uses the id as a path part and checks for links
itself.

A prompt hook of a harness with a transcript trace of its compactions (the harness table's
``compact_trace``: Gemini CLI) also reads the session's **trace record**: the folder
``<state>/fastpath/trace/<session id>/`` holding one empty file ``<count>:<mark>``
(:func:`set_trace`): how many lines of the transcript (the payload's ``transcript_path``)
held ``mark`` when Python last looked, ``-`` when that is not known yet (a resumed process
writes its mark before the first prompt). The shim counts them itself (one ``grep -c -F``)
and runs Python when the count differs, or when it cannot tell; only names are listed, no
record is opened.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterable

TYPE_CHECKING = False  # not `typing.TYPE_CHECKING`: importing typing costs the hot path
if TYPE_CHECKING:
    from _typeshed import StrPath
    from ..state._statedir import StateDir

FASTPATH_DIR = "fastpath"

WATCH_LINKS = "watch.parents"
"""The folder the shell reads the watched files through: per file ``/dir/NAME`` a symlink
``<n>-NAME`` to ``/dir`` (so ``<n>-NAME/NAME`` is the file itself, a link planted in its place
included) with an empty file ``.ctime-<n>-<ns>``, its ctime then, and an empty file
``.since-<ns>``, the baseline's time (:func:`set_watch`)."""
OLD_WATCH_LINKS = "watch.d"
"""The folder of symlinks to the watched files themselves that an older version wrote
(removed by :func:`set_watch`; the shim ignores it)."""

MTIME_SLACK = 2.0
"""Seconds the watch list's mtime is set before the moment it was written."""

NESTED_INDEX = "nested"
"""The folder (in ``fastpath/``) of the per-session injected indexes (:func:`mark_injected`)."""

TRACE_DIR = "trace"
"""The folder (in ``fastpath/``) of the per-session trace records (:func:`set_trace`)."""

INDEX_KEEP_DAYS = 7.0
"""Days after which a session's injected index that nothing touched is removed."""


def fastpath_dir(state_dir: StrPath) -> str:
    """``<state_dir>/fastpath``: where the fast path's index files live."""
    return os.path.join(state_dir, FASTPATH_DIR)


def wake(state_dir: StrPath, name: str) -> None:
    """Make the next prompt hooks run Python until :func:`clear_wake` (``name``: a short
    feature name, ``[A-Za-z0-9_-]``).

    Raises:
        ValueError: ``name`` is not a plain short name.
        OSError: the state dir cannot be written.
    """
    name = f"wake-{_check(name)}"
    with _folder(state_dir) as folder:
        folder.write(name, b"")


def clear_wake(state_dir: StrPath, name: str) -> None:
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


def snapshot() -> int:
    """The watch list's stamp for a list written from what is seen from now on: nanoseconds
    since the epoch, :data:`MTIME_SLACK` seconds back. Take it (and :func:`ctimes_of`) BEFORE
    hashing the files the list stands for, so an edit made in between is never recorded as
    the baseline's ctime."""
    return time.time_ns() - int(MTIME_SLACK * 1e9)


def ctimes_of(paths: Iterable[str]) -> dict[str, int | None]:
    """``{path: ctime in nanoseconds (lstat: a link in its place is its own ctime), or None
    when it is absent}``; a path that cannot be stat'ed otherwise is left out (no record: the
    shim runs Python for it)."""
    found: dict[str, int | None] = {}
    for path in paths:
        try:
            found[path] = os.lstat(path).st_ctime_ns
        except FileNotFoundError:
            found[path] = None
        except OSError:
            continue
    return found


def set_watch(state_dir: StrPath, paths: Iterable[StrPath], *, stamp_ns: int | None = None,
              ctimes: dict[str, int | None] | None = None) -> None:
    """Replace the watch list with ``paths`` (absolute; one a line) as of ``stamp_ns``
    (:func:`snapshot`; now when None). ``ctimes`` (:func:`ctimes_of`, taken with the stamp
    before the files were hashed) gives each file's recorded ctime in nanoseconds, None for
    a file that was absent (the shim then answers "unchanged" while it stays absent); a path
    left out of ``ctimes`` gets no record, so every prompt hook runs Python for it until the
    list is written again (a file some baseline holds a stale hash of). Without ``ctimes``,
    each file is lstat'ed now.

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
    if stamp_ns is None:
        stamp_ns = snapshot()
    targets = [line[:-1] for line in lines]
    if ctimes is None:
        ctimes = ctimes_of(targets)
    stamp = stamp_ns / 1e9
    with _folder(state_dir) as folder:
        _write_links(folder.fileno(), targets, stamp_ns, ctimes)
        folder.write("watch", "".join(lines).encode("utf-8", "surrogateescape"))
        os.utime("watch", (stamp, stamp), dir_fd=folder.fileno(), follow_symlinks=False)
        _remove_links(folder.fileno(), OLD_WATCH_LINKS)


def index_name(session_id: str) -> str | None:
    """The folder name of ``session_id``'s injected index: the id itself when it is 1-128
    characters of ``[A-Za-z0-9_-]`` starting with a letter or digit (the shim compares the
    payload's ``session_id`` against the same rule), else None (no index: every read under a
    folder with an instruction file runs Python)."""
    return session_id if _plain(session_id, 128) and session_id[0].isalnum() else None


def _session_folder(state_dir: StrPath, kind: str, name: str) -> StateDir:
    """``fastpath/<kind>/<name>/`` of ``state_dir``, opened (created when missing); a new
    session first prunes ``kind``'s folders of sessions long gone (:func:`_prune`).

    Raises:
        OSError, StateError: the state dir refuses the folder (callers treat it as best effort).
    """
    from ..state._statedir import open_subpath

    top = open_subpath(state_dir, (FASTPATH_DIR, kind), create=True)
    assert top is not None
    with top:
        if top.lstat(name) is None:
            _prune(top)  # a new session: drop the folders of sessions long gone
        folder = top.sub(name, create=True)
    assert folder is not None
    return folder


def mark_injected(state_dir: StrPath, session_id: str, paths: Iterable[str]) -> None:
    """Add ``paths`` (absolute real paths of instruction files the ledger just recorded as
    injected in the current epoch) to ``session_id``'s injected index. Call it under the
    ledger's claim, after the ledger was saved. Best effort: a path that cannot be indexed
    (a relative or non-normal path, a state dir that refuses the write) is left out, which only
    costs the next read under it a Python start. Never raises."""
    from .._errors import StateError
    from ..state._statedir import open_subpath

    name = index_name(session_id)
    if name is None:
        return
    try:
        with _session_folder(state_dir, NESTED_INDEX, name) as session:
            os.utime(session.fileno())  # touched: kept while the session lives
    except (OSError, StateError):
        return
    for path in paths:
        parts = path.split("/")
        if not path.startswith("/") or "\0" in path or any(p in ("", ".", "..") for p in parts[1:]):
            continue
        try:
            folder = open_subpath(state_dir, (FASTPATH_DIR, NESTED_INDEX, name, *parts[1:-1]),
                                  create=True)
            assert folder is not None
            with folder:
                folder.write(parts[-1], b"")
        except (OSError, StateError):
            continue


def set_trace(state_dir: StrPath, session_id: str, count: int | None, mark: str) -> None:
    """Record that ``count`` lines of ``session_id``'s transcript hold ``mark`` (None: not
    known yet, so the next prompt hook runs Python): the one entry ``<count>:<mark>`` of
    ``fastpath/trace/<session id>/`` (written before the old one is removed: the shim, seeing
    two, runs Python). Nothing is recorded for a session id that is no plain name
    (:func:`index_name`) or a ``mark`` holding ``/``, a newline or NUL. Best effort (a state
    dir that refuses the write costs the next prompt a Python start at worst). Never raises."""
    from .._errors import StateError

    name = index_name(session_id)
    if name is None or not mark or any(c in mark for c in "/\n\0"):
        return
    entry = f"{'-' if count is None else int(count)}:{mark}"
    try:
        with _session_folder(state_dir, TRACE_DIR, name) as folder:
            folder.write(entry, b"")
            for old in folder.names():
                if old != entry:
                    folder.remove(old)
    except (OSError, StateError):
        return


def read_trace(state_dir: StrPath, session_id: str) -> tuple[int | None, str] | None:
    """``(count, mark)`` of ``session_id``'s trace record (:func:`set_trace`; count None: not
    known), or None when there is none, or it is not one well-formed entry. Never raises."""
    from .._errors import StateError
    from ..state._statedir import open_subpath

    name = index_name(session_id)
    if name is None:
        return None
    try:
        folder = open_subpath(state_dir, (FASTPATH_DIR, TRACE_DIR, name))
        if folder is None:
            return None
        with folder:
            entries = folder.names()
    except StateError:
        return None
    if len(entries) != 1 or ":" not in entries[0]:
        return None
    count, _, mark = entries[0].partition(":")
    if count == "-":
        return None, mark
    if not count.isdigit() or not count.isascii() or not mark:
        return None
    return int(count), mark


def forget_injected(state_dir: StrPath, session_id: str) -> None:
    """Remove ``session_id``'s injected index (no error when absent): renamed away first, so
    the shim sees the whole index or none of it. Call it under the ledger's claim, before the
    ledger forgets anything.

    Raises:
        StateError: the index is still there (it could not be renamed): the caller must not
            let the ledger forget, or the shim would answer from entries the ledger dropped.
    """
    from ..state._statedir import open_subpath

    name = index_name(session_id)
    if name is None:
        return
    top = open_subpath(state_dir, (FASTPATH_DIR, NESTED_INDEX))
    if top is None:
        return
    with top:
        aside = f".{name}.{os.getpid()}.{os.urandom(4).hex()}.old"
        if top.rename(name, aside):
            import shutil  # only once there is something to remove

            shutil.rmtree(aside, dir_fd=top.fileno(), ignore_errors=True)


def _prune(top: StateDir) -> None:
    """Remove the indexes in ``top`` (``fastpath/nested``) untouched for
    :data:`INDEX_KEEP_DAYS`, and leftovers of interrupted removals. Never raises."""
    cutoff = time.time() - INDEX_KEEP_DAYS * 86400
    try:
        names = os.listdir(top.fileno())
    except OSError:
        return
    for entry in names:
        try:
            st = os.stat(entry, dir_fd=top.fileno(), follow_symlinks=False)
        except OSError:
            continue
        if entry.startswith(".") and entry.endswith(".old") or st.st_mtime < cutoff:
            aside = entry if entry.startswith(".") else f".{entry}.{os.getpid()}.old"
            try:
                if aside != entry:
                    os.rename(entry, aside, src_dir_fd=top.fileno(), dst_dir_fd=top.fileno())
                import shutil  # only once there is something to remove: its import (bz2, lzma)
                # would cost every post-tool hook

                shutil.rmtree(aside, dir_fd=top.fileno(), ignore_errors=True)
                os.unlink(aside, dir_fd=top.fileno())  # a file or link in the folder's place
            except OSError:
                pass


def watch_complete(state_dir: StrPath) -> bool:
    """True when ``<state>/fastpath/watch.parents`` is a folder (not a link) in which every
    watched file has its record (``.ctime-<n>-<ns>`` or ``.absent-<n>``): a list missing one
    (written while a baseline was stale, or by an older version) makes every prompt hook run
    Python, so it must be written again once nothing is stale."""
    import stat

    folder = os.path.join(fastpath_dir(state_dir), WATCH_LINKS)
    try:
        if not stat.S_ISDIR(os.lstat(folder).st_mode):
            return False
        names = os.listdir(folder)
    except OSError:
        return False
    recorded = {n[len(".absent-"):] for n in names if n.startswith(".absent-")}
    recorded.update(n[len(".ctime-"):].partition("-")[0] for n in names
                    if n.startswith(".ctime-"))
    return all(n.partition("-")[0] in recorded for n in names if n[:1].isdigit())


def _write_links(fd: int, targets: list[str], stamp_ns: int,
                 ctimes: dict[str, int | None]) -> None:
    """Replace :data:`WATCH_LINKS` in the folder open as ``fd`` with, per target
    ``/dir/NAME``, a symlink ``<n>-NAME`` to ``/dir`` and an empty file ``.ctime-<n>-<ns>`` (the
    file's ctime now, in nanoseconds; none for a file that is gone), and the empty file
    ``.since-<stamp_ns>`` (nanoseconds since the epoch), built under a temporary name and renamed into place (the
    shell sees the old folder or the new one, never half of one; a concurrent writer's folder
    is replaced in turn: the last writer wins, as with the list itself).

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
            parent, name = os.path.split(target)
            os.symlink(parent or "/", f"{number}-{name}", dir_fd=sub)
            if target not in ctimes:
                continue  # no record: the shim runs Python for this file
            ctime_ns = ctimes[target]
            record = f".absent-{number}" if ctime_ns is None else f".ctime-{number}-{ctime_ns}"
            os.close(os.open(record, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o644,
                             dir_fd=sub))
        os.close(os.open(f".since-{stamp_ns}", os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC,
                         0o644, dir_fd=sub))
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


def _folder(state_dir: StrPath) -> StateDir:
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


def _plain(name: str, limit: int) -> bool:
    """Whether ``name`` is 1 to ``limit`` characters of ``[A-Za-z0-9_-]`` (safe as one path
    part, and what the shim's ``case`` patterns accept)."""
    return 0 < len(name) <= limit and all(c.isascii() and (c.isalnum() or c in "-_") for c in name)


def _check(name: str) -> str:
    if not _plain(name, 64):
        raise ValueError(f"wake name must be 1-64 characters of [A-Za-z0-9_-]: {name!r}")
    return name
