"""The one door to the state dir: every read and write of ``.supervise/`` (or
``$SUPERVISE_STATE_DIR``, or any other store of ours such as the config cache) goes through here.

The project tree is untrusted input (a cloned repository, a teammate's commit, a sandboxed
agent can plant files in ``.supervise/``), so this module holds four rules in one place
(brief, hardening.md "Files an attacker can plant"; docs/security.md):

1. **No link is followed.** The state dir is opened with ``O_DIRECTORY | O_NOFOLLOW``; each
   sub-folder is opened relative to its parent's descriptor the same way; each file is opened
   relative to its folder's descriptor with ``O_NOFOLLOW`` (``openat``: a link swapped in after a
   check is still not followed). A symlinked state dir as a whole is refused
   (:class:`~supervisor._errors.StateError`): nothing is read or written through it.
2. **Nothing blocks.** Files are opened with ``O_NONBLOCK`` and ``fstat``-ed: a FIFO, socket,
   device or directory in place of a file is never read.
3. **Every read is capped** (``cap`` bytes, required): records a few KiB, deferred results the
   stage's output cap plus overhead. A bigger file is not ours.
4. **Corrupt means set aside and replaced.** A link, special file, directory, oversized file or
   one that does not parse (``ValueError``, ``RecursionError``, ``MemoryError``,
   ``UnicodeDecodeError``, a wrong shape) is renamed to ``<name>.corrupt`` (one slot per name,
   so an attacker cannot fill the disk through us), treated as absent, and named once in a
   notice (:func:`take_notices`) that the hook puts in the digest or on stderr.

Writes are atomic (a temp file created ``O_EXCL | O_NOFOLLOW`` in the same folder, written
whole, optionally fsynced, ``rename``-d over the name; a left-over temp file is removed by the
next write of that name); appends are one ``write`` of a whole line on an ``O_APPEND``
descriptor with size-based rotation; listing is bounded.

Usage::

    from supervisor.state._statedir import StateDir

    with StateDir.open(state_dir, create=True) as sd:          # StateError: a link, not a dir
        record = sd.read_json("lock.json", cap=RECORD_CAP)     # None: absent or corrupt
        sd.write("lock.json", b"{...}", fsync=True)            # StateError: disk full, ...
        with sd.sub("deferred", create=True) as deferred:      # a sub-folder, same rules
            names = deferred.names("result-*.json")
        sd.append("logs.txt", b"one line\\n", max_bytes=1 << 20)
        with sd.flock("lock.flock", timeout=5.0) as held: ...

Every method raises only :class:`~supervisor._errors.StateError` (one line naming the path)
for a state dir that cannot be used; a corrupt file is never an error. Stdlib only and cheap
to import: the hook's hot path, the stages and the deferred runner all use it.
"""

from __future__ import annotations

import errno
import os
import stat
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from .. import _jsontext
from .._errors import StateError
from ._fsutil import nofollow_path

TYPE_CHECKING = False  # not `typing.TYPE_CHECKING`: importing typing costs the hot path
if TYPE_CHECKING:
    from typing import Any, TypeVar

    from _typeshed import StrPath

    R = TypeVar("R")

RECORD_CAP = 16 * 1024
"""Bytes: the read cap for a small JSON record (lock, completion, running, last digest)."""
RESULT_OVERHEAD = 64 * 1024
"""Bytes a deferred result may carry beyond its stage's output (JSON escaping aside)."""
MAX_ENTRIES = 4096
"""Names :meth:`StateDir.names` returns at most: a folder flooded with entries stays cheap."""
CORRUPT_SUFFIX = ".corrupt"
TEMP_STALE = 60.0
"""Seconds after which another writer's left-over temp file is removed."""

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
_READ_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
_BAD_PARSE = (ValueError, TypeError, KeyError, RecursionError, MemoryError, UnicodeDecodeError,
              AttributeError)
"""Every way decoding a planted file can fail: all of them mean "corrupt"."""

_notices: list[str] = []


def take_notices() -> list[str]:
    """The notices gathered since the last call (each a line without a newline), then forgets
    them: each problem is named once. E.g. ``[supervise] state file .supervise/lock.json was
    not valid JSON (RecursionError); set aside as lock.json.corrupt``."""
    out = list(dict.fromkeys(_notices))
    _notices.clear()
    return out


def notice(line: str) -> None:
    """Add one line to the notices :func:`take_notices` returns (deduplicated there). The line
    goes through :func:`supervisor._sanitize.one_line`: a notice quotes names from the state
    dir and paths of the tree (a planted ``result-x\n## Instructions.json``), and stays one
    line, its hidden characters and line feeds escaped."""
    from .._sanitize import one_line

    _notices.append(one_line(line))


def _why(err: OSError) -> str:
    return err.strerror or str(err)


def name_matcher(pattern: str) -> Callable[[str], bool]:
    """``fnmatch.fnmatchcase(name, pattern)`` as a function of ``name`` (the same answers).

    A pattern whose only wildcard is ``*`` (the state dir's ``*.json``, ``result-*.json``; the
    gate's ``*/.no-mistakes/repos/*.git``) is matched by its literal pieces in order:
    ``fnmatch`` compiles a regular expression, and ``re`` with ``enum`` is a large share of a
    hook's imports (docs/benchmarks.md, row "SessionStart hook on an empty digest"). ``?`` and ``[...]`` go to
    ``fnmatch``."""
    if "[" in pattern or "?" in pattern:
        import fnmatch

        return lambda name: fnmatch.fnmatchcase(name, pattern)
    pieces = pattern.split("*")
    if len(pieces) == 1:
        return lambda name: name == pattern
    head, middle, tail = pieces[0], pieces[1:-1], pieces[-1]
    least = sum(map(len, pieces))

    def matches(name: str) -> bool:
        if len(name) < least or not name.startswith(head) or not name.endswith(tail):
            return False
        at, end = len(head), len(name) - len(tail)
        for piece in middle:  # each piece at its earliest place leaves the most room
            found = name.find(piece, at, end)
            if found < 0:
                return False
            at = found + len(piece)
        return True

    return matches


def _kind(mode: int) -> str:
    if stat.S_ISLNK(mode):
        return "a symlink"
    if stat.S_ISDIR(mode):
        return "a directory"
    if stat.S_ISFIFO(mode):
        return "a FIFO"
    if stat.S_ISSOCK(mode):
        return "a socket"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    return "not a regular file"


class StateDir:
    """An open state folder: a directory descriptor opened without following links.

    Use :meth:`open` for the state dir itself and :meth:`sub` for a folder in it; close with
    :meth:`close` or a ``with`` block. ``path`` is for messages only: every access goes through
    the descriptor. Not thread-safe; each process opens its own.

    Attributes:
        path: the folder's path (display only; a ``str``).
    """

    def __init__(self, fd: int, path: StrPath) -> None:
        self._fd = fd
        self.path = os.fspath(path)

    # -- opening ------------------------------------------------------------------------------
    @classmethod
    def open(cls, path: StrPath, *, create: bool = False) -> StateDir:
        """Open the state dir ``path`` (its last component never followed).

        Args:
            path: the state dir (``str`` or a path-like); the folders above it are the user's
                choice and are followed.
            create: create it (and its parents) when missing; a git project's own
                ``.supervise/`` is then added to ``.git/info/exclude``.

        Raises:
            StateError: it is a symlink ("refusing to follow it": nothing is written through
                it), not a directory, missing (without ``create``) or cannot be created.
        """
        path = nofollow_path(path)  # "link/" would follow the link
        for attempt in (0, 1):
            try:
                try:
                    return cls(os.open(path, _DIR_FLAGS), path)
                except NotADirectoryError:
                    if os.path.lexists(path):
                        raise
                    raise FileNotFoundError(errno.ENOENT, "a parent is not a directory") from None
            except FileNotFoundError:
                if not create or attempt:
                    raise StateError(f"state dir {path} does not exist") from None
                from ._project import ensure_state_dir

                try:
                    ensure_state_dir(path)
                except OSError as err:
                    raise StateError(f"state dir {path} cannot be created: {_why(err)}") from err
            except OSError as err:
                if err.errno == errno.ELOOP or os.path.islink(path):
                    raise StateError(_link_refusal(path)) from err
                if err.errno == errno.ENOTDIR:
                    raise StateError(f"state dir {path} is not a directory") from err
                raise StateError(f"state dir {path} cannot be opened: {_why(err)}") from err
        raise AssertionError("unreachable")  # pragma: no cover

    @classmethod
    def open_existing(cls, path: StrPath) -> StateDir | None:
        """Like :meth:`open` without ``create``, but None when the state dir does not exist.

        Raises:
            StateError: it is a symlink, not a directory, or cannot be opened.
        """
        path = nofollow_path(path)
        if not os.path.lexists(path):
            return None
        try:
            return cls.open(path)
        except StateError:
            if not os.path.lexists(path):
                return None
            raise

    def sub(self, name: str, *, create: bool = False) -> StateDir | None:
        """Open the folder ``name`` in this one (one path component, never followed).

        A link, file or special file in its place is set aside (renamed to
        ``name.corrupt``) and named once; with ``create`` a fresh folder replaces it.

        Returns:
            The folder, or None when it is absent (or was set aside) and ``create`` is False.

        Raises:
            StateError: it cannot be created or opened (permissions, disk full).
        """
        _check_name(name)
        for _attempt in range(3):
            try:
                return StateDir(os.open(name, _DIR_FLAGS, dir_fd=self._fd), os.path.join(self.path, name))
            except FileNotFoundError:
                if not create:
                    return None
                try:
                    os.mkdir(name, 0o755, dir_fd=self._fd)
                except FileExistsError:
                    continue  # raced with another creator, or a non-folder appeared
                except OSError as err:
                    raise StateError(f"{os.path.join(self.path, name)} cannot be created: {_why(err)}") from err
            except OSError as err:
                if err.errno not in (errno.ELOOP, errno.ENOTDIR):
                    raise StateError(f"{os.path.join(self.path, name)} cannot be opened: {_why(err)}") from err
                self.set_aside(name, self._describe(name))
                if not create:
                    return None
        raise StateError(f"{os.path.join(self.path, name)} keeps changing; not used")

    # -- reading ------------------------------------------------------------------------------
    def read(self, name: str, cap: int) -> bytes | None:
        """The bytes of regular file ``name``, at most ``cap`` bytes; never blocks.

        Returns:
            The content, or None when absent or corrupt (a link, special file, directory, or
            larger than ``cap``: set aside and named).

        Raises:
            StateError: it exists but cannot be read (permissions, I/O error).
        """
        _check_name(name)
        try:
            fd = os.open(name, _READ_FLAGS, dir_fd=self._fd)
        except FileNotFoundError:
            return None
        except OSError as err:
            if err.errno in (errno.ELOOP, errno.ENXIO, errno.EISDIR):
                self.set_aside(name, self._describe(name))
                return None
            raise StateError(f"{os.path.join(self.path, name)} cannot be read: {_why(err)}") from err
        try:
            mode = os.fstat(fd).st_mode
            if not stat.S_ISREG(mode):
                bad = _kind(mode)
                data = None
            else:
                data = _read_capped(fd, cap)
                bad = f"larger than {cap:,} bytes" if data is None else ""
        except OSError as err:
            raise StateError(f"{os.path.join(self.path, name)} cannot be read: {_why(err)}") from err
        finally:
            os.close(fd)
        if data is None:
            self.set_aside(name, bad)
        return data

    def read_json(self, name: str, cap: int,
                  check: Callable[[Any], R] | None = None) -> R | Any | None:
        """Parse ``name`` as UTF-8 JSON (at most ``cap`` bytes), then pass it to ``check``.

        ``check`` converts or validates the decoded value and raises ``ValueError``,
        ``TypeError`` or ``KeyError`` (or :class:`~supervisor.state._records.RecordError`) when the
        shape is wrong. Any failure (deep nesting's ``RecursionError`` included) makes the
        file corrupt: set aside, named once, and None returned.

        Returns:
            ``check(value)`` (or the value), or None when absent or corrupt.

        Raises:
            StateError: like :meth:`read`.
        """
        data = self.read(name, cap)
        if data is None:
            return None
        try:
            value = _jsontext.loads(data.decode("utf-8"))
            return check(value) if check is not None else value
        except _BAD_PARSE as err:
            from ._records import FutureStamp

            why = str(err) if isinstance(err, FutureStamp) else type(err).__name__
            self.set_aside(name, f"not valid ({why})")
            return None

    def read_record(self, name: str, model: type[R], cap: int = RECORD_CAP) -> R | None:
        """The record ``model`` stored in ``name`` (see :mod:`supervisor.state._records`),
        or None when absent or corrupt (set aside).

        Raises:
            StateError: like :meth:`read`.
            TypeError: ``model`` cannot be loaded from JSON (a field annotation the records
                loader cannot parse): a programming error, raised before the file is read,
                never taken for a corrupt file.
        """
        from ._records import check_loadable, load_record

        check_loadable(model)
        result: R | None = self.read_json(name, cap, lambda v: load_record(model, v))
        return result

    def names(self, pattern: str = "*") -> list[str]:
        """Sorted names in this folder matching ``pattern`` (``fnmatch``), at most
        :data:`MAX_ENTRIES` of them; hidden temp files are not listed unless the pattern
        starts with a dot. Raises StateError when the folder cannot be listed."""
        found: list[str] = []
        matches = name_matcher(pattern)
        try:
            with os.scandir(self._fd) as it:
                for entry in it:
                    if matches(entry.name):
                        found.append(entry.name)
                        if len(found) >= MAX_ENTRIES:
                            break
        except OSError as err:
            raise StateError(f"{self.path} cannot be listed: {_why(err)}") from err
        return sorted(found)

    def lstat(self, name: str) -> os.stat_result | None:
        """``lstat`` of ``name`` (a link is not followed), None when absent."""
        _check_name(name)
        try:
            return os.stat(name, dir_fd=self._fd, follow_symlinks=False)
        except FileNotFoundError:
            return None
        except OSError as err:
            raise StateError(f"{os.path.join(self.path, name)} cannot be examined: {_why(err)}") from err

    # -- writing ------------------------------------------------------------------------------
    def write(self, name: str, data: bytes, *, fsync: bool = False, mode: int = 0o644) -> None:
        """Replace ``name`` with ``data`` atomically: readers see the old or the new file.

        A link at ``name`` is replaced, never followed; a directory there is set aside first.

        Args:
            name: one path component.
            data: the whole new content.
            fsync: flush file and folder before returning (records that must survive a crash).
            mode: permission bits of the new file (exact, whatever the umask).

        Raises:
            StateError: the folder is not writable or the disk is full (ENOSPC); the temp file
                is removed and ``name`` keeps its old content.
        """
        tmp, fd = self._new_temp(name, mode)
        try:
            try:
                _write_all(fd, data)
                os.fchmod(fd, mode)
                if fsync:
                    os.fsync(fd)
            finally:
                os.close(fd)
            try:
                os.rename(tmp, name, src_dir_fd=self._fd, dst_dir_fd=self._fd)
            except OSError as err:
                if err.errno not in (errno.EISDIR, errno.ENOTEMPTY, errno.EEXIST, errno.ENOTDIR):
                    raise
                self.set_aside(name, "a directory")
                os.rename(tmp, name, src_dir_fd=self._fd, dst_dir_fd=self._fd)
        except BaseException as err:
            try:
                os.unlink(tmp, dir_fd=self._fd)
            except OSError:
                pass
            if isinstance(err, OSError):
                raise StateError(f"{os.path.join(self.path, name)} cannot be written: {_why(err)}") from err
            raise
        if fsync:
            try:
                os.fsync(self._fd)
            except OSError:
                pass

    def write_json(self, name: str, value: Any, *, fsync: bool = False) -> None:
        """:meth:`write` ``value`` as UTF-8 JSON plus a newline. A lone surrogate (a file name
        that is not UTF-8, as ``os.fsdecode`` gives it) is written as its ``\\udcxx`` escape,
        never replaced: the value reads back as it was written. Raises like :meth:`write`."""
        try:
            data = _jsontext.dumps(value, ensure_ascii=False).encode("utf-8")
        except UnicodeEncodeError:
            data = _jsontext.dumps(value).encode("ascii")
        self.write(name, data + b"\n", fsync=fsync)

    def append(self, name: str, line: bytes, *, max_bytes: int, keep: int = 1) -> None:
        """Append ``line`` (one whole record, usually ending in a newline) to log ``name``.

        One ``write`` on an ``O_APPEND`` descriptor, so concurrent writers interleave whole
        lines. Past ``max_bytes`` the log is rotated first (``name.1`` ... ``name.<keep>``;
        ``keep=0`` just starts it again). A link, FIFO or folder in its place is set aside.

        Raises:
            StateError: the log cannot be opened or written (disk full included).
        """
        for _attempt in range(3):
            fd = self.open_file(name, os.O_WRONLY | os.O_APPEND | os.O_CREAT)
            try:
                size = os.fstat(fd).st_size
                if size + len(line) > max_bytes and size:
                    self._rotate(name, keep)
                    continue
                _write_all(fd, line)
                return
            except OSError as err:
                raise StateError(f"{os.path.join(self.path, name)} cannot be written: {_why(err)}") from err
            finally:
                os.close(fd)
        raise StateError(f"{os.path.join(self.path, name)} keeps changing; not written")

    def _rotate(self, name: str, keep: int) -> None:
        try:
            if keep <= 0:
                os.unlink(name, dir_fd=self._fd)
                return
            for i in range(keep - 1, 0, -1):
                try:
                    os.rename(f"{name}.{i}", f"{name}.{i + 1}",
                              src_dir_fd=self._fd, dst_dir_fd=self._fd)
                except FileNotFoundError:
                    pass
            os.rename(name, f"{name}.1", src_dir_fd=self._fd, dst_dir_fd=self._fd)
        except FileNotFoundError:
            pass
        except OSError as err:
            if err.errno in (errno.EISDIR, errno.ENOTEMPTY, errno.EEXIST):
                self.set_aside(f"{name}.1", "a directory")
                return
            raise

    def temp_file(self, name: str, mode: int = 0o644) -> tuple[int, str]:
        """A new, empty temp file for a file ``name`` written by pieces (what :meth:`write`
        does for one whole ``data``): its descriptor (the caller closes it) and its name, to
        :meth:`rename` into place, or :meth:`remove`, once written. Stale temps of ``name``
        (a writer killed mid-way) are removed first.

        Raises:
            StateError: the folder is not writable.
        """
        tmp, fd = self._new_temp(name, mode)
        try:
            os.fchmod(fd, mode)
        except OSError:
            pass  # the umask's bits, as a plain open would give
        return fd, tmp

    def remove(self, name: str) -> None:
        """Delete ``name`` if present (a link is removed, not followed; a folder in its place
        is set aside). Raises StateError when it cannot be removed."""
        _check_name(name)
        try:
            os.unlink(name, dir_fd=self._fd)
        except FileNotFoundError:
            pass
        except OSError as err:
            if err.errno in (errno.EISDIR, errno.EPERM) and self._is_dir(name):
                self.set_aside(name, "a directory")
                return
            raise StateError(f"{os.path.join(self.path, name)} cannot be removed: {_why(err)}") from err

    def rename(self, src: str, dst: str, *, into: StateDir | None = None) -> bool:
        """Atomically rename ``src`` to ``dst`` (in ``into``, default this folder); the claim
        primitive: of concurrent callers exactly one gets True.

        Returns:
            True when renamed, False when ``src`` was absent (someone else took it).

        Raises:
            StateError: any other failure (the rename did not happen).
        """
        _check_name(src)
        _check_name(dst)
        target = into if into is not None else self
        try:
            os.rename(src, dst, src_dir_fd=self._fd, dst_dir_fd=target._fd)
        except FileNotFoundError:
            return False
        except OSError as err:
            raise StateError(f"{os.path.join(self.path, src)} cannot be renamed to {dst}: {_why(err)}") from err
        return True

    def open_file(self, name: str, flags: int, mode: int = 0o644) -> int:
        """A descriptor of regular file ``name`` (``flags`` get ``O_NOFOLLOW | O_NONBLOCK |
        O_CLOEXEC``; add ``os.O_CREAT`` to create it). A link, FIFO or folder in its place is
        set aside and, with ``O_CREAT``, replaced. The caller closes the descriptor.

        Raises:
            StateError: it cannot be opened (absent without ``O_CREAT`` included).
        """
        _check_name(name)
        flags |= os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
        for _attempt in range(3):
            try:
                fd = os.open(name, flags, mode, dir_fd=self._fd)
            except OSError as err:
                if err.errno not in (errno.ELOOP, errno.ENXIO, errno.EISDIR):
                    raise StateError(f"{os.path.join(self.path, name)} cannot be opened: {_why(err)}") from err
                self.set_aside(name, self._describe(name))
                continue
            try:
                st_mode = os.fstat(fd).st_mode
            except OSError as err:
                os.close(fd)
                raise StateError(f"{os.path.join(self.path, name)} cannot be opened: {_why(err)}") from err
            if stat.S_ISREG(st_mode):
                return fd
            os.close(fd)
            self.set_aside(name, _kind(st_mode))
        raise StateError(f"{os.path.join(self.path, name)} keeps changing; not used")

    @contextmanager
    def flock(self, name: str, timeout: float, *, poll: float = 0.005) -> Iterator[bool]:
        """Hold an exclusive ``flock`` on file ``name`` (created if missing) for the ``with``
        body; yields False when another process held it for ``timeout`` seconds. The kernel
        drops the lock when its holder dies, so a crash never leaves it stuck.

        Raises:
            StateError: the lock file cannot be opened.
        """
        from ._fsutil import flock_fd

        fd = self.open_file(name, os.O_RDWR | os.O_CREAT, 0o600)
        with flock_fd(fd, timeout, poll=poll) as held:
            yield held

    # -- corrupt files ------------------------------------------------------------------------
    def set_aside(self, name: str, why: str) -> None:
        """Rename ``name`` to ``name.corrupt`` (replacing an older one) so that it is treated
        as absent and can be replaced, and name it once in :func:`take_notices`. Never
        raises: when even that fails, the notice says so."""
        shown = os.path.join(self.path, name)
        aside = name + CORRUPT_SUFFIX
        try:
            try:
                os.rename(name, aside, src_dir_fd=self._fd, dst_dir_fd=self._fd)
            except OSError as err:
                if err.errno not in (errno.EISDIR, errno.ENOTEMPTY, errno.EEXIST, errno.ENOTDIR):
                    raise
                self._discard(aside)
                try:
                    os.rename(name, aside, src_dir_fd=self._fd, dst_dir_fd=self._fd)
                except OSError:
                    aside = f"{name}{CORRUPT_SUFFIX}-{os.urandom(4).hex()}"
                    os.rename(name, aside, src_dir_fd=self._fd, dst_dir_fd=self._fd)
        except FileNotFoundError:
            return  # someone else already set it aside
        except OSError as err:
            notice(f"[supervise] state file {shown} is {why} and cannot be set aside "
                   f"({_why(err)}); it is ignored")
            return
        notice(f"[supervise] state file {shown} was {why}; set aside as {aside}")

    def _discard(self, name: str) -> None:
        try:
            os.unlink(name, dir_fd=self._fd)
        except OSError:
            try:
                os.rmdir(name, dir_fd=self._fd)
            except OSError:
                pass

    def _describe(self, name: str) -> str:
        try:
            return _kind(os.stat(name, dir_fd=self._fd, follow_symlinks=False).st_mode)
        except OSError:
            return "not a regular file"

    def _is_dir(self, name: str) -> bool:
        st = self.lstat(name)
        return st is not None and stat.S_ISDIR(st.st_mode)

    def _new_temp(self, name: str, mode: int) -> tuple[str, int]:
        """A new temp file beside ``name`` (``.NAME.PID.RANDOM.tmp``, created exclusively, no
        link followed), after removing the temps a killed writer left: ``(its name, an open
        write descriptor)``. Raises StateError: ``name`` is no plain name, or the folder is
        not writable."""
        _check_name(name)
        self._clean_temps(name)
        tmp = f".{name}.{os.getpid()}.{os.urandom(4).hex()}.tmp"
        try:
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC,
                         mode, dir_fd=self._fd)
        except OSError as err:
            raise StateError(f"{os.path.join(self.path, name)} cannot be written: {_why(err)}") from err
        return tmp, fd

    def _clean_temps(self, name: str) -> None:
        prefix = f".{name}."
        now = time.time()
        try:
            with os.scandir(self._fd) as it:
                stale = [e.name for e in it if e.name.startswith(prefix) and e.name.endswith(".tmp")
                         and now - e.stat(follow_symlinks=False).st_mtime > TEMP_STALE]
        except OSError:
            return
        for old in stale[:MAX_ENTRIES]:
            self._discard(old)

    # -- lifetime -----------------------------------------------------------------------------
    def fileno(self) -> int:
        """The directory descriptor (valid until :meth:`close`)."""
        return self._fd

    def close(self) -> None:
        """Close the descriptor; idempotent."""
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1

    def __enter__(self) -> StateDir:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __del__(self) -> None:
        try:
            self.close()
        except (OSError, AttributeError):
            pass

    def __repr__(self) -> str:
        return f"StateDir({str(self.path)!r})"


_named_links: set[str] = set()


def _link_refusal(path: StrPath) -> str:
    return f"state dir {path} is a symlink; refusing to follow it (nothing is written there)"


def mark_named(path: StrPath) -> None:
    """Record that the digest already named the symlinked state dir ``path`` (e.g. in its
    READ-ONLY notice), so :func:`link_notice` and :func:`link_reference` do not repeat it."""
    path = nofollow_path(path)
    if os.path.islink(path):
        _named_links.add(os.fspath(path))


def link_notice(path: StrPath) -> str | None:
    """The one line naming a symlinked state dir ``path``, when it is one and this process has
    not named it yet (then it counts as named); else None. The digest prints it once."""
    path = nofollow_path(path)
    if not os.path.islink(path) or os.fspath(path) in _named_links:
        return None
    _named_links.add(os.fspath(path))
    return f"[supervise] {_link_refusal(path)}."


def link_reference(path: StrPath) -> str | None:
    """A short reason for a consumer that could not use the symlinked state dir ``path``
    ("the state dir is a symlink, named in this digest"), or None when it is not a link: the
    whole reason is given once, by :func:`link_notice` or the READ-ONLY notice."""
    path = nofollow_path(path)
    if not os.path.islink(path):
        return None
    return "the state dir is a symlink (named once in this digest); nothing is written there"


def usable_path(path: StrPath) -> str:
    """``str(path)``, or ``""`` when it is a symlink: what a stage gets as
    ``SUPERVISE_STATE_DIR`` (empty = no state dir: the stage writes nothing)."""
    path = nofollow_path(path)
    return "" if os.path.islink(path) else os.fspath(path)


def _check_name(name: str) -> None:
    if not name or "/" in name or name in (".", "..") or "\0" in name:
        raise StateError(f"not a single state file name: {name!r}")


def _read_capped(fd: int, cap: int) -> bytes | None:
    chunks = []
    total = 0
    while True:
        try:
            chunk = os.read(fd, min(cap + 1 - total, 1 << 20))
        except BlockingIOError:
            break
        if not chunk:
            break
        chunks.append(chunk)
        total += len(chunk)
        if total > cap:
            return None
    return b"".join(chunks)


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


@contextmanager
def opened(path: StrPath, *, create: bool = False) -> Iterator[StateDir | None]:
    """``with opened(state_dir) as sd``: the state dir, or None when it does not exist and
    ``create`` is False. Raises StateError like :meth:`StateDir.open`."""
    sd = StateDir.open(path, create=True) if create else StateDir.open_existing(path)
    try:
        yield sd
    finally:
        if sd is not None:
            sd.close()


def open_subpath(base: StrPath, parts: tuple[str, ...], *, create: bool = False) -> StateDir | None:
    """Open ``base`` (the state dir) and then each folder of ``parts`` under it, never
    following a link. Returns None when a part is absent and ``create`` is False.

    Raises:
        StateError: like :meth:`StateDir.open` and :meth:`StateDir.sub`.
    """
    sd = StateDir.open(base, create=True) if create else StateDir.open_existing(base)
    for part in parts:
        if sd is None:
            return None
        with sd:
            sd = sd.sub(part, create=create)
    return sd
