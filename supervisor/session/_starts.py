"""Idempotent starts: a session start fired twice is delivered once, and runs once.

Harnesses do fire SessionStart twice for one session (claude-mem #3608; a Qwen Code fix), and
a hook registered twice (user and project settings, two Pi extensions) fires twice for every
event. A second full digest would count the handoff again, re-run exclusive stages and launch
deferred stages twice; and a second copy of the same text is added too (Claude, Codex, Gemini
and Pi add both, byte-identical or not: issue 22, item 2).

So a start is keyed by **(harness process, session id, source)**. The first start for a key
holds an exclusive ``flock`` on ``<state dir>/starts/<key>.flock`` while it runs and then
records its outcome in ``<key>.json`` once it was delivered, with a fingerprint of the lock
and completion records as that start left them, signed with the per-user key
(:mod:`supervisor.state._signing`): every input of the key and the fingerprint is readable to
a process below the harness, so an unsigned record (planted) is no record, and with no home
(no key) nothing is recorded or replayed: the start simply runs. A repeat within
:data:`WINDOW` seconds of that record (concurrent: after waiting for the first to finish)
that finds those records unchanged prints nothing (the recorded outcome, its text emptied)
and runs nothing. When anything changed the lock in
between (another session took or released it, a completion was written or cleared), the
event is a new one and runs. The key is a SHA-256 of its parts: a session id is never
a path part. A start with no harness process (a terminal) is never deduplicated.

Every file goes through the state door (:mod:`supervisor.state._statedir`); a state dir that
cannot be used means "no dedupe", never an error.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from .. import _jsontext
from .._hashing import sha256

TYPE_CHECKING = False  # not `typing.TYPE_CHECKING`: importing typing costs the hot path
if TYPE_CHECKING:
    from _typeshed import StrPath
    from ._ancestry import ProcessId
    from ._outcome import SessionOutcome
    from ..state._delivery import Delivery

WINDOW = 10.0
"""Seconds after a start finished during which the same start is a repeat."""
FOLDER = "starts"
KEEP = 3600.0
"""Seconds a start record is kept before it is pruned."""
_CAP = 8 * 1024 * 1024
"""Bytes of a start record read at most (the text is at most a few inline caps)."""


def start_key(owner: ProcessId, session_id: str, source: str) -> str:
    """The key of a start: hex SHA-256 of pid, whole-second create time, session id, source."""
    raw = _jsontext.dumps([owner.pid, int(owner.create_time), session_id, source])
    return sha256(raw.encode("utf-8", "replace")).hexdigest()[:32]


def _fingerprint(top: object) -> str:
    """SHA-256 of the lock and completion records as they are now (absent ones included)."""
    from ._lock import COMPLETE_FILE, LOCK_FILE
    from ..state._statedir import StateDir

    assert isinstance(top, StateDir)
    digest = sha256()
    for name in (LOCK_FILE, COMPLETE_FILE):
        digest.update(name.encode() + b"\0" + (top.read(name, 64 * 1024) or b"") + b"\0")
    return digest.hexdigest()


def _load(data: bytes | None, now: float, fingerprint: str, key: bytes | None) -> SessionOutcome | None:
    """The outcome a start record holds, or None: no record, no key, a record without our
    signature (planted: every input of the key and the fingerprint is readable to a process
    below the harness), out of its window (a time after now included) or of another lock
    state. Its text is cleaned again on the way out (hidden text never replays)."""
    from .._sanitize import clean
    from ..state._signing import genuine
    from ._outcome import SessionOutcome

    if not data or key is None:
        return None
    try:
        rec = _jsontext.loads(data)
        if not genuine(rec, key) or not 0 <= now - float(rec["at"]) <= WINDOW \
                or rec.get("state") != fingerprint:
            return None
        parts = rec.get("parts")
        return SessionOutcome(
            clean(str(rec["text"]))[0], str(rec["kind"]), str(rec["mode"]), rec.get("truncation"),
            tuple((str(n), clean(str(t))[0]) for n, t in parts) if isinstance(parts, list) else None,
            clean(str(rec.get("notices", "")))[0])
    except (ValueError, KeyError, TypeError, RecursionError, MemoryError):
        return None  # a corrupt record (deep nesting included) is no record


def _dump(outcome: SessionOutcome, now: float, fingerprint: str, key: bytes) -> bytes:
    from ..state._signing import seal

    return _jsontext.dumps(seal({
        "at": now, "state": fingerprint, "text": outcome.text, "kind": outcome.kind, "mode": outcome.mode,
        "truncation": outcome.truncation, "notices": outcome.notices,
        "parts": [list(p) for p in outcome.parts] if outcome.parts is not None else None,
    }, key), ensure_ascii=False).encode("utf-8", "replace")


def once(state_dir: StrPath, key: str | None, wait: float,
         run: Callable[[], SessionOutcome], delivery: Delivery | None = None) -> SessionOutcome:
    """``run()`` unless the same start (``key``) was delivered less than :data:`WINDOW` seconds
    ago with the lock and completion records unchanged since, in which case its recorded
    outcome is returned with no text (nothing to print) and nothing runs.

    ``wait`` is how long (seconds) a concurrent repeat waits for the first start (the digest's
    budget plus its grace and a margin); past it, ``run()`` goes ahead. With a ``delivery``
    open (:mod:`supervisor.state._delivery`, the hook and the bridge), the outcome is recorded, and
    the key's ``flock`` released, only when the delivery settles: a start whose envelope never
    went out is no start to repeat, and its completion record (committed at the same moment,
    just before) is part of the fingerprint. A ``None`` key, or a state dir that cannot be
    used, simply runs. Exceptions of ``run`` propagate; nothing is recorded for them.
    """
    if key is None:
        return run()
    from contextlib import ExitStack

    from .._errors import StateError
    from ..state._statedir import StateDir

    stack = ExitStack()
    try:
        top = stack.enter_context(StateDir.open(state_dir, create=True))
        folder = top.sub(FOLDER, create=True)
        if folder is None:
            stack.close()
            return run()
        stack.enter_context(folder)
        held = stack.enter_context(folder.flock(f"{key}.flock", wait))
    except (StateError, OSError):
        stack.close()
        return run()
    from ..state._signing import user_key

    handed_off = False
    try:
        secret = user_key(create=False)
        if held and secret is not None:
            try:
                previous = _load(folder.read(f"{key}.json", _CAP), time.time(), _fingerprint(top),
                                 secret)
            except (StateError, OSError):
                previous = None
            if previous is not None:  # delivered by the first: the model has it once
                from .._record import replace

                return replace(previous, text="", parts=None, notices="")
        outcome = run()
        if not held:
            return outcome

        def commit() -> None:
            try:
                signer = secret or user_key(create=True)  # no home: OSError, nothing recorded
                if signer is not None:
                    folder.write(f"{key}.json", _dump(outcome, time.time(), _fingerprint(top),
                                                      signer))
                _prune(folder)
            except (StateError, OSError):
                pass
            finally:
                stack.close()

        if delivery is None:
            commit()
        else:
            delivery.reserve(commit, stack.close)
            handed_off = True
        return outcome
    finally:
        if not handed_off:
            stack.close()


def _prune(folder: object) -> None:
    """Remove start records (and their lock files) older than :data:`KEEP` seconds."""
    from ..state._statedir import StateDir

    assert isinstance(folder, StateDir)
    now = time.time()
    for name in folder.names("*.json"):
        st = folder.lstat(name)
        if st is not None and now - st.st_mtime > KEEP:
            folder.remove(name)
            folder.remove(name[:-5] + ".flock")


RESUMED_WINDOW = 30.0
"""Seconds after a harness process resumed a session during which a ``startup`` of another
session id, whose transcript does not exist, is that resume's spurious second start."""


def _resume_name(owner: ProcessId) -> str:
    raw = _jsontext.dumps(["resumed", owner.pid, int(owner.create_time)])
    return "resumed-" + sha256(raw.encode()).hexdigest()[:32] + ".json"


def note_resume(state_dir: StrPath, owner: ProcessId, session_id: str) -> None:
    """Record that harness process ``owner`` resumed ``session_id`` now, in an existing state
    dir only (a resume writes no state of its own: without one, no digest ran here and there
    is no start to repeat). Never raises."""
    from .._errors import StateError
    from ..state._statedir import StateDir

    try:
        existing = StateDir.open_existing(state_dir)
        if existing is None:
            return
        with existing as top:
            folder = top.sub(FOLDER, create=True)
            if folder is None:
                return
            with folder:
                folder.write(_resume_name(owner), _jsontext.dumps(
                    {"at": time.time(), "session_id": session_id}).encode("utf-8", "replace"))
    except (StateError, OSError):
        pass


def spurious_startup(state_dir: StrPath, owner: ProcessId, session_id: str,
                     transcript: str | None) -> bool:
    """True for Claude Code's second start after an interactive resume (claude-code #23932,
    #24265, #30825): a ``startup`` with a new session id whose transcript does not exist, in
    a harness process that resumed another session less than :data:`RESUMED_WINDOW` seconds
    ago. That start is no new model context: it gets nothing and runs nothing. Never raises
    (no record, or a state dir that cannot be used: False)."""
    import os

    if not transcript or os.path.lexists(transcript):
        return False
    from .._errors import StateError
    from ..state._statedir import StateDir

    try:
        existing = StateDir.open_existing(state_dir)
        if existing is None:
            return False
        with existing as top:
            folder = top.sub(FOLDER, create=False)
            if folder is None:
                return False
            with folder:
                data = folder.read(_resume_name(owner), 4096)
        rec = _jsontext.loads(data) if data else None
        return (isinstance(rec, dict) and rec.get("session_id") != session_id
                and 0 <= time.time() - float(rec.get("at", 0)) <= RESUMED_WINDOW)
    except (StateError, OSError, ValueError, TypeError, RecursionError):
        return False
