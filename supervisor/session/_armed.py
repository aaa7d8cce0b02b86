"""Armed starts: a session-start event whose output never reaches the model, delivered later.

Some harnesses fire an event at the moment the context is lost, but drop whatever the hook
prints there: Copilot CLI's ``PreCompact`` (its output is not in the summary request, the
compaction drops the SessionStart context, and no SessionStart follows, LAB 1.0.102), Cline
CLI's ``TaskStart`` and ``TaskResume`` (3.0.65 runs them fire-and-forget, their output
ignored). (Gemini
CLI's ``PreCompress`` is no such event: it fires before every turn's threshold check,
compression or not.) At such an event the hook **arms** the start (:func:`arm`): it records
``(harness, session id) -> source`` in ``<state>/armed/<key>.json`` and wakes the per-event
fast path (``fastpath/wake-armed``), so the next per-event hook whose output does reach the
model (Copilot ``UserPromptSubmit``, Cline ``PreToolUse``) runs Python and delivers that start through the session
protocol: a re-emit after a proven start for ``compact``, a full digest otherwise (:func:`take`).

Exactly once: the record is removed only after the envelope carrying the start went out whole
(a reservation of the open :class:`~supervisor.state._delivery.Delivery`); a second arm before
delivery replaces the first (one start, the newest source). An arm is delivered only by a
hook of the **harness process that armed it** (its ``(pid, create_time)`` is in the record):
a new process of the session (a resumed Copilot session) gets its context from its own
SessionStart, which drops the arm (:func:`disarm`). Copilot runs that SessionStart and the
first UserPromptSubmit hooks concurrently (LAB 1.0.102: both re-emits reached one request
when the prompt hook was the one to drop it), so only the process check keeps a compaction
followed by a new process to one re-emit. The key is a SHA-256 of the harness and the session
id: an id is never a path part. A payload without a session id arms nothing (nothing could
tell its next prompt apart). A start a prompt hook delivered is stored by the harness with
that prompt: :func:`held` says so, until the next :func:`arm`.

A harness that fires nothing after a compaction may still mark it in its transcript (the
harness table's ``compact_trace``: Gemini CLI appends ``{"$set":{"sessionId":...}}`` when a
real compression restarts its chat, and at nothing else within one process). Its session
start records how many transcript lines hold the mark (:func:`trace_start`; unknown for a
resume, whose process writes one before its first prompt), and each prompt hook compares
(:func:`traced_compaction`; the fast path counts with ``grep -c`` and runs Python only when
the count moved): a count grown within the process arms ``compact`` for that same prompt
hook to deliver. So a compression re-emits once, at the next prompt, and a turn without one
(Gemini's ``PreCompress`` fires on every turn) re-emits nothing.
"""

from __future__ import annotations

import time

TYPE_CHECKING = False  # not `typing.TYPE_CHECKING`: importing typing costs the hot path
if TYPE_CHECKING:
    from _typeshed import StrPath

    from ..state._delivery import Delivery

ARMED_DIR = "armed"
"""Folder of the state dir holding one record per armed session."""
WAKE = "armed"
"""The fast path's wake name while any session is armed (``fastpath/wake-armed``)."""
ARM_CAP = 4096
"""Bytes of an arm record read at most (a larger one is corrupt and set aside)."""
ARM_KEEP = 7 * 24 * 3600.0
"""Seconds after which an arm nothing delivered is dropped (its session is long gone)."""
ARM_SOURCES = ("startup", "new", "resume", "compact", "clear")
"""The sources a start may be armed with."""


HELD = ".held"
"""Suffix of the record saying a prompt hook delivered the session's armed start: the start's
text is then part of the session's stored history, since its last compaction (:func:`held`)."""


def _key(harness: str, session_id: str, suffix: str = ".json") -> str:
    from .._hashing import sha256

    return sha256(f"{harness}\0{session_id}".encode("utf-8", "replace")).hexdigest()[:32] + suffix


def arm(state_dir: StrPath, harness: str, session_id: str, source: str, owner: str = "") -> bool:
    """Record that ``(harness, session_id)`` owes the model a start of ``source``, and wake the
    fast path so the next per-event hook runs Python. ``owner`` names the harness process
    (:func:`process_key`) whose hooks may deliver it (``""``: no harness among our ancestors).

    Returns:
        True when armed; False without a session id.

    Raises:
        ValueError: ``source`` is not one of :data:`ARM_SOURCES`.
        StateError: the state dir cannot be used (a link, unwritable).
        OSError: the fast path's wake file cannot be written.
    """
    if source not in ARM_SOURCES:
        raise ValueError(f"cannot arm a start of source {source!r} (one of {', '.join(ARM_SOURCES)})")
    if not session_id:
        return False
    from ..state._statedir import open_subpath
    from ._fastpath import wake

    folder = open_subpath(state_dir, (ARMED_DIR,), create=True)
    assert folder is not None
    with folder:
        folder.remove(_key(harness, session_id, HELD))  # this compaction drops what it held
        folder.write_json(_key(harness, session_id),
                          {"harness": harness, "session_id": session_id, "source": source,
                           "owner": owner, "at": time.time()})
    wake(state_dir, WAKE)
    return True


def _check(value: object) -> dict[str, object]:
    if not isinstance(value, dict) or value.get("source") not in ARM_SOURCES:
        raise ValueError("not an arm record")
    if not isinstance(value.get("at"), (int, float)) or isinstance(value.get("at"), bool):
        raise ValueError("not an arm record")
    return value


def take(state_dir: StrPath, harness: str, session_id: str, delivery: Delivery,
         owner: str = "") -> str | None:
    """The source ``(harness, session_id)`` was armed with by harness process ``owner``, or
    None; the record is removed when ``delivery`` commits (the envelope went out whole) and
    kept when it rolls back. An arm of another harness process is left to that process's
    SessionStart (None). An arm older than :data:`ARM_KEEP`, or dated in the future (a clock
    set back, a planted file), is dropped and None returned.

    Raises:
        StateError: the state dir cannot be used.
    """
    if not session_id:
        return None
    from ..state._statedir import open_subpath

    folder = open_subpath(state_dir, (ARMED_DIR,))
    if folder is None:
        return None
    name = _key(harness, session_id)
    with folder:
        record = folder.read_json(name, ARM_CAP, _check)
        if record is None:
            return None
        age = time.time() - float(record["at"])  # type: ignore[arg-type]
        if not 0 <= age <= ARM_KEEP or record.get("harness") != harness \
                or record.get("session_id") != session_id:
            folder.remove(name)
            _settle_wake(state_dir)
            return None
        if not _same_owner(record.get("owner", ""), owner):
            return None
    source = str(record["source"])
    delivery.reserve(lambda: _delivered(state_dir, harness, session_id), lambda: None)
    return source


def _delivered(state_dir: StrPath, harness: str, session_id: str) -> None:
    """A prompt hook delivered the arm: drop it, and note that the session's history now
    holds that start (:func:`held`)."""
    from ..state._statedir import open_subpath

    disarm(state_dir, harness, session_id)
    folder = open_subpath(state_dir, (ARMED_DIR,), create=True)
    assert folder is not None
    with folder:
        folder.write_json(_key(harness, session_id, HELD), {"at": time.time()})


def held(state_dir: StrPath, harness: str, session_id: str) -> bool:
    """A prompt hook of ``(harness, session_id)`` delivered its armed start since the session's
    last compaction: the harness stores a prompt hook's context with the prompt (Copilot's
    ``UserPromptSubmit``), so a resumed process's history already holds it and needs no
    second one. False for a state dir that cannot be read, a record dated in the future or
    older than :data:`ARM_KEEP`."""
    if not session_id:
        return False
    from .._errors import StateError
    from ..state._statedir import open_subpath

    def check(value: object) -> dict[str, object]:
        if not isinstance(value, dict) or not isinstance(value.get("at"), (int, float)) \
                or isinstance(value.get("at"), bool):
            raise ValueError("not a held record")
        return value

    try:
        folder = open_subpath(state_dir, (ARMED_DIR,))
        if folder is None:
            return False
        with folder:
            record = folder.read_json(_key(harness, session_id, HELD), ARM_CAP, check)
    except StateError:
        return False
    return record is not None and 0 <= time.time() - float(record["at"]) <= ARM_KEEP  # type: ignore[arg-type]


def disarm(state_dir: StrPath, harness: str, session_id: str) -> None:
    """Drop ``(harness, session_id)``'s arm, if any, and the fast path's wake file when no arm
    is left. Never raises for a state dir that cannot be used (nothing was armed there)."""
    if not session_id:
        return
    from .._errors import StateError
    from ..state._statedir import open_subpath

    try:
        folder = open_subpath(state_dir, (ARMED_DIR,))
        if folder is None:
            return
        with folder:
            folder.remove(_key(harness, session_id))
    except StateError:
        return
    _settle_wake(state_dir)


def _settle_wake(state_dir: StrPath) -> None:
    """Clear ``wake-armed`` when no arm record is left (the fast path may answer again)."""
    from .._errors import StateError
    from ..state._statedir import open_subpath
    from ._fastpath import clear_wake

    try:
        folder = open_subpath(state_dir, (ARMED_DIR,))
        left = folder.names("*.json") if folder is not None else []
        if folder is not None:
            folder.close()
    except StateError:
        return
    if not left:
        clear_wake(state_dir, WAKE)




def trace_start(state_dir: StrPath, session_id: str, transcript: str | None, mark: str,
                source: str) -> None:
    """At a session start: record the transcript's count of ``mark`` lines as the baseline
    (:func:`supervisor.session._fastpath.set_trace`), for a ``startup`` (a new transcript);
    for any other source the count is left unknown, the next prompt hook takes it (a resumed
    Gemini process names another file at SessionStart and writes its own mark into the
    resumed one before the first prompt, LAB 0.61.0). Never raises."""
    from ._fastpath import set_trace
    from ._transcript import count_lines_with

    count = count_lines_with(transcript, mark) if source == "startup" and transcript else None
    if source == "startup" and count is None:
        count = 0  # no transcript written yet: none of its lines holds the mark
    set_trace(state_dir, session_id, count, mark)


def traced_compaction(state_dir: StrPath, session_id: str, transcript: str | None,
                      mark: str) -> bool:
    """At a prompt hook: whether the transcript holds more ``mark`` lines than the baseline
    (a compaction since), updating the baseline to the count now. False without a baseline
    count (the first prompt of a resumed process: this count becomes it), without a
    transcript that can be read (the baseline is kept), or for a session id that cannot be
    recorded. Never raises."""
    from ._fastpath import read_trace, set_trace
    from ._transcript import count_lines_with

    record = read_trace(state_dir, session_id)
    have = count_lines_with(transcript, mark)
    if have is None:
        return False
    if record is None or record[0] != have or record[1] != mark:
        set_trace(state_dir, session_id, have, mark)
    return record is not None and record[1] == mark and record[0] is not None \
        and have > record[0]


def process_key(session_id: str) -> str:
    """``"<pid>:<create_time>"`` of the harness process running this hook (the ancestry walk
    of :mod:`supervisor.session._ancestry`), ``""`` when none is among our ancestors."""
    from ._ancestry import ancestry, find_harness

    found = find_harness(ancestry(), session_id)
    return f"{found.ident.pid}:{found.ident.create_time:.2f}" if found else ""


def _same_owner(recorded: object, owner: str) -> bool:
    """Both name the same process: the same pid and start times within the tolerance of
    two readings (:data:`supervisor.session._ancestry.CREATE_TIME_TOLERANCE`)."""
    if not isinstance(recorded, str) or not recorded or not owner:
        return recorded == owner
    from ._ancestry import CREATE_TIME_TOLERANCE

    try:
        (pid_a, _, start_a), (pid_b, _, start_b) = recorded.partition(":"), owner.partition(":")
        return pid_a == pid_b and abs(float(start_a) - float(start_b)) <= CREATE_TIME_TOLERANCE
    except ValueError:
        return False
