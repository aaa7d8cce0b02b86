"""The session lock and the completion record, in the state dir.

Files (all JSON, written to a temp file, fsynced and ``os.replace``-d into place, under an
exclusive ``fcntl.flock`` on ``lock.flock``):

* ``lock.json``: :class:`LockRecord`, who holds the helm: harness process ``(pid,
  create_time)``, harness, session id, a random nonce, when, and where the pid means
  something: the owner's pid namespace and boot id. A reader in another pid namespace (a
  devcontainer sharing the checkout) or under another kernel cannot tell whether that owner
  lives, so it never replaces the lock silently: its full start is read-only with the reason
  (``--take-lock`` overrides; issue 12, item 5).
* ``complete.json``: :class:`CompletionRecord`, "the full start under nonce N finished every
  stage". Cleared (under the same flock) the moment a full start takes the lock, written only
  when that start completed, and only while the lock still carries the same nonce.

Why a nonce and ownership, not a pid: with pid equality, session A completes, B runs
read-only, A exits, and B's ``clear`` would re-emit on A's proof and skip B's own full start
(the reference runner's PR #1781 bug). A re-emit therefore needs the record's nonce to match
the *current* lock and the lock to be owned by *this* session.

Every access goes through the state door (:mod:`supervisor.state._statedir`): a symlinked state dir
is refused with :class:`StateError` (its text is the read-only reason shown to the model); a
link, special file, oversized or unparsable record (``RecursionError`` included) is set aside,
named once, and replaced; nothing here follows a symlink or blocks on a FIFO.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager

from .._record import record
from ._ancestry import CREATE_TIME_TOLERANCE, ProcessId, is_alive
from .._errors import StateError
from ..state._records import dump_record
from ..state._statedir import StateDir

TYPE_CHECKING = False  # not `typing.TYPE_CHECKING`: importing typing costs the hot path
if TYPE_CHECKING:
    from _typeshed import StrPath
    from typing import Literal, TypeVar

    R = TypeVar("R")

LOCK_FILE = "lock.json"
COMPLETE_FILE = "complete.json"
MUTEX_FILE = "lock.flock"
MUTEX_TIMEOUT = 5.0
"""Seconds to wait for the state mutex before giving up (read-only, "state dir busy")."""
_MAX_RECORD = 16 * 1024
"""Bytes: a lock or completion record is about 300; anything over this cap is corrupt."""


@record
class LockRecord:
    """Who holds the lock. ``create_time`` and ``acquired_at`` are seconds since the epoch."""

    pid: int
    create_time: float
    harness: str
    session_id: str
    nonce: str
    acquired_at: float
    pid_ns: str = ""
    """The owner's pid namespace (``pid:[4026531836]``); ``""`` in records of older versions."""
    boot_id: str = ""
    """The owner's kernel boot id; ``""`` in records of older versions."""

    __record_times__ = ("create_time", "acquired_at")  # judged at load: a future one is corrupt

    @property
    def ident(self) -> ProcessId:
        """The owner's identity: (pid, process create time)."""
        return ProcessId(self.pid, self.create_time)


def unseen_reason(record: LockRecord) -> str:
    """Why ``record``'s owner cannot be seen from here (so its pid proves nothing), or ``""``.

    Another pid namespace (same kernel): a container or ``unshare --pid`` sharing the state
    dir. Another boot id with the lock taken after this kernel booted: another machine or VM
    sharing the checkout. Another boot id with the lock older than this boot is simply stale
    (the machine rebooted), so ``""``. Fields absent (an older record, no ``/proc``): ``""``.
    """
    from ._procinfo import boot_time, namespace_identity

    pid_ns, boot_id = namespace_identity()
    if record.boot_id and boot_id and record.boot_id != boot_id:
        if record.acquired_at < boot_time():
            return ""
        return (f"it was taken under another kernel (boot id {record.boot_id}; here {boot_id}): "
                "another machine or VM sharing this checkout")
    if record.pid_ns and pid_ns and record.pid_ns != pid_ns:
        from ._procinfo import find_in_namespace

        visible, host_pid = find_in_namespace(record.pid_ns, record.pid, record.create_time,
                                              CREATE_TIME_TOLERANCE)
        if visible:  # from the host every namespace is seen: the owner lives or it does not
            if host_pid is None:
                return ""  # its container ended: the lock is simply stale
            return (f"its owner runs in another pid namespace ({record.pid_ns}; here {pid_ns}), "
                    f"e.g. a container sharing this checkout, and is alive (pid {host_pid} here)")
        return (f"its owner runs in another pid namespace ({record.pid_ns}; here {pid_ns}), e.g. "
                "a container sharing this checkout, so whether it is alive cannot be seen from here")
    return ""


@record
class LockJudgement:
    """The one judgement of a lock record (:func:`judge_lock`): ``verdict`` is ``"mine"``
    (owned by the asking session), ``"alive"`` (a live owner elsewhere: read-only),
    ``"unseen"`` (an owner that cannot be seen from here: read-only unless ``--take-lock``;
    ``reason`` says why) or ``"stale"`` (its owner is gone: the next start replaces it)."""

    verdict: str
    reason: str = ""


def judge_lock(record: LockRecord, ancestors: list[ProcessId] | None = None,
               session_id: str = "") -> LockJudgement:
    """Judge ``record`` once, the same way for the hook (:func:`acquire_for_full_start`),
    ``supervise status`` and ``doctor``, so they never disagree. ``ancestors`` and
    ``session_id``: the asking hook's, to recognise its own lock (none for the verbs). A
    record stamped in the future never gets here: it is corrupt at load
    (:func:`supervisor.state._records.judge_times`)."""
    unseen = unseen_reason(record)
    if unseen:
        return LockJudgement("unseen", unseen)
    if ancestors is not None and owned_by_session(record, ancestors, session_id):
        return LockJudgement("mine")
    if not _foreign_namespace(record) and is_alive(record.ident):
        return LockJudgement("alive")
    # (a foreign-namespace owner seen gone from the host is stale: its pid names another
    # process here)
    return LockJudgement("stale")


def _foreign_namespace(record: LockRecord) -> bool:
    """``record`` was taken in another pid namespace: its pid names nothing here."""
    from ._procinfo import namespace_identity

    pid_ns = namespace_identity()[0]
    return bool(record.pid_ns and pid_ns and record.pid_ns != pid_ns)


@record
class CompletionRecord:
    """A full start under lock nonce ``nonce`` ran every stage to its end (no truncation)."""

    nonce: str
    pid: int
    session_id: str
    completed_at: float

    __record_times__ = ("completed_at",)  # judged at load: a future one is corrupt


def prepare_state_dir(state_dir: StrPath) -> StateDir:
    """Open ``state_dir`` through the state door (:mod:`supervisor.state._statedir`), creating it if
    needed. The caller closes the returned handle.

    Raises:
        StateError: it is a symlink, not a directory, or cannot be created.
    """
    return StateDir.open(state_dir, create=True)


@contextmanager
def state_mutex(state: StrPath | StateDir, timeout: float = MUTEX_TIMEOUT) -> Iterator[None]:
    """Hold an exclusive ``flock`` on ``<state dir>/lock.flock`` for the ``with`` body.

    Raises:
        StateError: the state dir or mutex file cannot be opened, or another process held
            the mutex for ``timeout`` seconds.
    """
    with ExitStack() as stack:
        sd = state if isinstance(state, StateDir) else stack.enter_context(
            StateDir.open(state))
        held = stack.enter_context(sd.flock(MUTEX_FILE, timeout))
        if not held:
            raise StateError(f"{os.path.join(sd.path, MUTEX_FILE)} stayed locked for {timeout:g}s")
        yield


def _split(path: StrPath) -> tuple[str, str]:
    """``(folder, name)`` of the state file ``path`` (``"."`` for a bare name)."""
    from ..state._fsutil import nofollow_path

    folder, name = os.path.split(nofollow_path(path))
    return folder or ".", name


def read_record(path: StrPath, model: type[R]) -> R | None:
    """The record in state file ``path`` (``<state dir>/<name>``), or ``None`` when absent or
    corrupt: a link, special file, oversized or unparsable file (``RecursionError`` included)
    is set aside and named once (see :mod:`supervisor.state._statedir`).

    Raises:
        StateError: the state dir is a symlink or not a directory, or the file cannot be read.
    """
    folder, name = _split(path)
    sd = StateDir.open_existing(folder)
    if sd is None:
        return None
    with sd:
        return sd.read_record(name, model, _MAX_RECORD)


def write_record(path: StrPath, record: object, *, fsync: bool = True) -> None:
    """Atomically replace state file ``path`` with ``record`` (temp file, fsync, rename); a
    link or folder in its place is replaced or set aside, never followed. ``fsync=False``
    skips the two flushes (file and folder) for a record a crash may lose: the rename still
    leaves the old record or the new one, and a file a crash left empty is set aside as
    corrupt when next read.

    Raises:
        StateError: the state dir is unusable, or the write failed (disk full included).
    """
    folder, name = _split(path)
    with StateDir.open(folder, create=True) as sd:
        sd.write_json(name, dump_record(record), fsync=fsync)


def remove_record(path: StrPath) -> None:
    """Delete state file ``path`` if present.

    Raises:
        StateError: it cannot be removed (a missing file or state dir is fine).
    """
    folder, name = _split(path)
    sd = StateDir.open_existing(folder)
    if sd is not None:
        with sd:
            sd.remove(name)


def owned_by_session(record: LockRecord, ancestors: list[ProcessId], session_id: str) -> bool:
    """The lock belongs to this session: its process, in our pid namespace, is one of our
    ancestors. A session is (harness process, session id): another live process that
    carries the same session id is another owner candidate, not us, so 40 processes sharing
    one id still yield one owner (issue 12, item 4). ``session_id`` is kept for callers
    that tell sessions of one process apart."""
    if _foreign_namespace(record) or unseen_reason(record):
        return False  # our ancestors are in our namespace; its pid means something else here
    return any(record.ident.same(a) for a in ancestors)


@record
class LockOutcome:
    """What a full start got.

    ``status``: ``acquired`` (we hold ``record``; ``previous`` is what we replaced),
    ``foreign`` (``record`` is a live owner that is not us), ``unseen`` (``record``'s owner
    cannot be seen from here, ``reason`` says why), ``unusable`` (``reason``).
    """

    status: Literal["acquired", "foreign", "unseen", "unusable"]
    record: LockRecord | None = None
    previous: LockRecord | None = None
    reason: str = ""


def acquire_for_full_start(state_dir: StrPath, owner: ProcessId, harness: str, session_id: str,
                           ancestors: list[ProcessId], *, take_unseen: bool = False,
                           exact: bool = False) -> LockOutcome:
    """Take (or renew) the lock for a full start and clear the completion record.

    Under the state mutex: a lock owned by this session is renewed with a fresh nonce (same
    owner process); an absent, corrupt or stale one (owner dead, or its pid now names another
    process) is replaced; a live foreign owner is left alone; an owner that cannot be seen
    from here (:func:`unseen_reason`) is left alone too (``status="unseen"``) unless
    ``take_unseen`` (``--take-lock``). ``exact`` (``owner`` is the nearest harness process):
    the lock is ours only when held by ``owner`` itself; one held by a harness further up
    (``claude`` started from a shell of another ``claude``: another model context) is a live
    foreign owner, so the inner session gets a read-only digest and the outer keeps its lock.
    Never raises: an unusable state dir or file is ``status="unusable"`` with the reason.
    """
    from ._procinfo import namespace_identity

    try:
        with prepare_state_dir(state_dir) as sd, state_mutex(sd):
            current = sd.read_record(LOCK_FILE, LockRecord, _MAX_RECORD)
            judged = judge_lock(current) if current is not None else None
            if judged is not None and judged.verdict == "unseen" and not take_unseen:
                return LockOutcome("unseen", current, reason=judged.reason)
            mine = current is not None and owned_by_session(current, ancestors, session_id) \
                and (not exact or current.ident.same(owner))
            if judged is not None and judged.verdict == "alive" and not mine:
                return LockOutcome("foreign", current)
            pid, ctime = owner.pid, owner.create_time
            if current is not None and mine:
                pid, ctime, harness = current.pid, current.create_time, current.harness or harness
            pid_ns, boot_id = namespace_identity()
            record = LockRecord(pid=pid, create_time=ctime, harness=harness, session_id=session_id,
                                nonce=os.urandom(16).hex(), acquired_at=time.time(),
                                pid_ns=pid_ns, boot_id=boot_id)
            sd.remove(COMPLETE_FILE)
            sd.write_json(LOCK_FILE, dump_record(record), fsync=True)
            return LockOutcome("acquired", record, previous=current)
    except StateError as err:
        return LockOutcome("unusable", reason=str(err))


@record
class LockView:
    """A read of the lock and completion record (for re-emit decisions and ``status``)."""

    lock: LockRecord | None
    completion: CompletionRecord | None
    reason: str = ""
    """Non-empty when the state could not be read (symlink, unreadable)."""


def read_state(state_dir: StrPath) -> LockView:
    """Read lock and completion record consistently (under the mutex when possible). Never
    raises: a corrupt record reads as absent (and is set aside), an unusable state dir gives
    ``reason``."""
    try:
        sd = StateDir.open_existing(state_dir)
        if sd is None:
            return LockView(None, None)
        with sd:
            try:
                with state_mutex(sd):
                    return LockView(sd.read_record(LOCK_FILE, LockRecord, _MAX_RECORD),
                                    sd.read_record(COMPLETE_FILE, CompletionRecord, _MAX_RECORD))
            except StateError:
                # Read-only dir: no mutex, but each file is replaced atomically, so still sound.
                return LockView(sd.read_record(LOCK_FILE, LockRecord, _MAX_RECORD),
                                sd.read_record(COMPLETE_FILE, CompletionRecord, _MAX_RECORD))
    except StateError as err:
        return LockView(None, None, reason=str(err))


def proven_start(view: LockView, ancestors: list[ProcessId], session_id: str) -> bool:
    """A re-emit is allowed: the completion nonce matches the lock, and the lock is ours."""
    return (view.lock is not None and view.completion is not None
            and view.completion.nonce == view.lock.nonce
            and owned_by_session(view.lock, ancestors, session_id))


def record_completion(state_dir: StrPath, nonce: str, session_id: str) -> str:
    """Write the completion record for the full start that holds ``nonce``.

    Returns:
        ``""`` when written, else the reason it was not (the lock changed hands meanwhile,
        or the state could not be written).
    """
    try:
        with StateDir.open(state_dir) as sd, state_mutex(sd):
            current = sd.read_record(LOCK_FILE, LockRecord, _MAX_RECORD)
            if current is None or current.nonce != nonce:
                return "the lock changed hands while the digest ran"
            done = CompletionRecord(nonce=nonce, pid=current.pid, session_id=session_id,
                                    completed_at=time.time())
            sd.write_json(COMPLETE_FILE, dump_record(done), fsync=True)
            return ""
    except StateError as err:
        return str(err)
