"""The session lock and the completion record, in the state dir.

Files (all JSON, written to a temp file, fsynced and ``os.replace``-d into place, under an
exclusive ``fcntl.flock`` on ``lock.flock``):

* ``lock.json``: :class:`LockRecord`, who holds the helm: harness process ``(pid,
  create_time)``, harness, session id, a random nonce, when.
* ``complete.json``: :class:`CompletionRecord`, "the full start under nonce N finished every
  stage". Cleared (under the same flock) the moment a full start takes the lock, written only
  when that start completed, and only while the lock still carries the same nonce.

Why a nonce and ownership, not a pid: with pid equality, session A completes, B runs
read-only, A exits, and B's ``clear`` would re-emit on A's proof and skip B's own full start
(the reference runner's PR #1781 bug). A re-emit therefore needs the record's nonce to match
the *current* lock and the lock to be owned by *this* session.

A symlinked or non-regular state dir or file is refused with :class:`StateError` (its text is
the read-only reason shown to the model); nothing here follows a symlink.
"""

from __future__ import annotations

import errno
import json
import os
import stat
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Literal, TypeVar

from ._ancestry import ProcessId, is_alive
from ._errors import StateError
from ._fsutil import atomic_write, flocked
from ._records import RecordError, dump_record, load_record

LOCK_FILE = "lock.json"
COMPLETE_FILE = "complete.json"
MUTEX_FILE = "lock.flock"
MUTEX_TIMEOUT = 5.0
"""Seconds to wait for the state mutex before giving up (read-only, "state dir busy")."""
_MAX_RECORD = 64 * 1024


@dataclass(frozen=True)
class LockRecord:
    """Who holds the lock. ``create_time`` and ``acquired_at`` are seconds since the epoch."""

    pid: int
    create_time: float
    harness: str
    session_id: str
    nonce: str
    acquired_at: float

    @property
    def ident(self) -> ProcessId:
        """The owner's identity: (pid, process create time)."""
        return ProcessId(self.pid, self.create_time)


@dataclass(frozen=True)
class CompletionRecord:
    """A full start under lock nonce ``nonce`` ran every stage to its end (no truncation)."""

    nonce: str
    pid: int
    session_id: str
    completed_at: float


R = TypeVar("R")


def prepare_state_dir(state_dir: Path) -> None:
    """Create ``state_dir`` if needed and check it is a real, writable directory.

    Raises:
        StateError: it is a symlink, not a directory, or cannot be created or written.
    """
    if state_dir.is_symlink():
        raise StateError(f"state dir {state_dir} is a symlink; refusing to follow it")
    from ._project import ensure_state_dir

    try:
        ensure_state_dir(state_dir)
    except OSError as err:
        raise StateError(f"state dir {state_dir} cannot be created: {err.strerror}") from err
    if state_dir.is_symlink() or not state_dir.is_dir():
        raise StateError(f"state dir {state_dir} is not a directory")


def _open_nofollow(path: Path, flags: int, mode: int = 0o644) -> int:
    try:
        return os.open(path, flags | os.O_NOFOLLOW | os.O_CLOEXEC, mode)
    except OSError as err:
        if err.errno == errno.ELOOP:
            raise StateError(f"{path} is a symlink; refusing to follow it") from err
        raise


@contextmanager
def state_mutex(state_dir: Path, timeout: float = MUTEX_TIMEOUT) -> Iterator[None]:
    """Hold an exclusive ``flock`` on ``state_dir/lock.flock`` for the ``with`` body.

    Raises:
        StateError: the mutex file is a symlink or cannot be opened, or another process held
            it for ``timeout`` seconds.
    """
    path = state_dir / MUTEX_FILE
    with ExitStack() as stack:
        try:  # only opening the mutex is translated; the body's own errors pass through
            held = stack.enter_context(flocked(path, timeout))
        except OSError as err:
            if err.errno == errno.ELOOP:
                raise StateError(f"{path} is a symlink; refusing to follow it") from err
            raise StateError(f"{path} cannot be opened: {err.strerror}") from err
        if not held:
            raise StateError(f"{path} stayed locked for {timeout:g}s")
        yield


def read_record(path: Path, model: type[R]) -> R | None:
    """The record in ``path``, or ``None`` when absent, unparsable or of another shape.

    Raises:
        StateError: ``path`` is a symlink or not a regular file, or cannot be read.
    """
    try:
        fd = _open_nofollow(path, os.O_RDONLY | os.O_NONBLOCK)
    except FileNotFoundError:
        return None
    except OSError as err:
        raise StateError(f"{path} cannot be read: {err.strerror}") from err
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise StateError(f"{path} is not a regular file")
        data = os.read(fd, _MAX_RECORD + 1)
    finally:
        os.close(fd)
    if len(data) > _MAX_RECORD:
        return None
    try:
        return load_record(model, json.loads(data))
    except (ValueError, RecordError):
        return None


def write_record(path: Path, record: object) -> None:
    """Atomically replace ``path`` with ``record`` (temp file, fsync, ``os.replace``).

    Raises:
        StateError: ``path`` is a symlink or non-regular, or the write failed.
    """
    if path.is_symlink() or (path.exists() and not path.is_file()):
        raise StateError(f"{path} is a symlink or not a regular file; refusing to replace it")
    try:
        atomic_write(path, json.dumps(dump_record(record)).encode() + b"\n", fsync=True)
    except OSError as err:
        raise StateError(f"{path} cannot be written: {err.strerror}") from err


def remove_record(path: Path) -> None:
    """Delete ``path`` if present.

    Raises:
        StateError: it cannot be removed (a missing file is fine).
    """
    try:
        path.unlink()
    except FileNotFoundError:
        pass
    except OSError as err:
        raise StateError(f"{path} cannot be removed: {err.strerror}") from err


def owned_by_session(record: LockRecord, ancestors: list[ProcessId], session_id: str) -> bool:
    """The lock belongs to this session: its process is one of our ancestors, or the
    session id matches and that process is still alive."""
    if any(record.ident.same(a) for a in ancestors):
        return True
    return bool(session_id) and record.session_id == session_id and is_alive(record.ident)


@dataclass(frozen=True)
class LockOutcome:
    """What a full start got.

    ``status``: ``acquired`` (we hold ``record``; ``previous`` is what we replaced),
    ``foreign`` (``record`` is a live owner that is not us), ``unusable`` (``reason``).
    """

    status: Literal["acquired", "foreign", "unusable"]
    record: LockRecord | None = None
    previous: LockRecord | None = None
    reason: str = ""


def acquire_for_full_start(state_dir: Path, owner: ProcessId, harness: str, session_id: str,
                           ancestors: list[ProcessId]) -> LockOutcome:
    """Take (or renew) the lock for a full start and clear the completion record.

    Under the state mutex: a lock owned by this session is renewed with a fresh nonce (same
    owner process); an absent, corrupt or stale one (owner dead, or its pid now names another
    process) is replaced; a live foreign owner is left alone. Never raises: an unusable state
    dir or file is ``status="unusable"`` with the reason.
    """
    try:
        prepare_state_dir(state_dir)
        with state_mutex(state_dir):
            current = read_record(state_dir / LOCK_FILE, LockRecord)
            if current is not None and not owned_by_session(current, ancestors, session_id) \
                    and is_alive(current.ident):
                return LockOutcome("foreign", current)
            pid, ctime = owner.pid, owner.create_time
            if current is not None and owned_by_session(current, ancestors, session_id):
                pid, ctime, harness = current.pid, current.create_time, current.harness or harness
            record = LockRecord(pid=pid, create_time=ctime, harness=harness, session_id=session_id,
                                nonce=os.urandom(16).hex(), acquired_at=time.time())
            remove_record(state_dir / COMPLETE_FILE)
            write_record(state_dir / LOCK_FILE, record)
            return LockOutcome("acquired", record, previous=current)
    except StateError as err:
        return LockOutcome("unusable", reason=str(err))


@dataclass(frozen=True)
class LockView:
    """A read of the lock and completion record (for re-emit decisions and ``status``)."""

    lock: LockRecord | None
    completion: CompletionRecord | None
    reason: str = ""
    """Non-empty when the state could not be read (symlink, unreadable)."""


def read_state(state_dir: Path) -> LockView:
    """Read lock and completion record consistently (under the mutex when possible). Never raises."""
    try:
        if state_dir.is_symlink():
            raise StateError(f"state dir {state_dir} is a symlink; refusing to follow it")
        if not state_dir.is_dir():
            return LockView(None, None)
        try:
            with state_mutex(state_dir):
                return LockView(read_record(state_dir / LOCK_FILE, LockRecord),
                                read_record(state_dir / COMPLETE_FILE, CompletionRecord))
        except StateError:
            if (state_dir / MUTEX_FILE).is_symlink():
                raise
            # Read-only dir: no mutex, but each file is replaced atomically, so still sound.
            return LockView(read_record(state_dir / LOCK_FILE, LockRecord),
                            read_record(state_dir / COMPLETE_FILE, CompletionRecord))
    except StateError as err:
        return LockView(None, None, reason=str(err))


def proven_start(view: LockView, ancestors: list[ProcessId], session_id: str) -> bool:
    """A re-emit is allowed: the completion nonce matches the lock, and the lock is ours."""
    return (view.lock is not None and view.completion is not None
            and view.completion.nonce == view.lock.nonce
            and owned_by_session(view.lock, ancestors, session_id))


def record_completion(state_dir: Path, nonce: str, session_id: str) -> str:
    """Write the completion record for the full start that holds ``nonce``.

    Returns:
        ``""`` when written, else the reason it was not (the lock changed hands meanwhile,
        or the state could not be written).
    """
    try:
        with state_mutex(state_dir):
            current = read_record(state_dir / LOCK_FILE, LockRecord)
            if current is None or current.nonce != nonce:
                return "the lock changed hands while the digest ran"
            write_record(state_dir / COMPLETE_FILE,
                         CompletionRecord(nonce=nonce, pid=current.pid, session_id=session_id,
                                          completed_at=time.time()))
            return ""
    except StateError as err:
        return str(err)
