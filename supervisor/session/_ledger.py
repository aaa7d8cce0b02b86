"""The session ledger (``.supervise/sessions.json``): which sessions completed a full start,
and fingerprints of the texts the hook delivered.

Two questions need an answer that outlives the harness *process* (``claude -p --resume`` and
``codex exec resume`` start a new process for the same session, so the lock's owner is dead
by then):

* **Did this session complete a full start?** (:func:`started`) Then a ``compact`` or
  ``clear`` of the same session gets the budgeted re-emit, never a second full start with
  exclusive stages (issue 12, item 7).
* **Is a text in the transcript one this project's hook delivered?** (:func:`delivered`) A
  resume whose transcript already holds it since the last compaction stays silent (item 6).
  Only a SHA-256 of the stripped text is kept, never the text.

The record is one small JSON file, written atomically under the state mutex
(:func:`supervisor.session._lock.state_mutex`) through the state door (:mod:`supervisor.state._statedir`: no
link followed, capped read, a corrupt file set aside), bounded to :data:`MAX_STARTS` sessions
and :data:`MAX_DELIVERED` fingerprints (oldest dropped). Session ids are stored as given and
never become a path. Readers never raise: an absent, corrupt or planted file is an empty
ledger, so the answer falls back to the safe side (a full start, the nudge).
"""

from __future__ import annotations

import time

from .._hashing import sha256
from .._errors import StateError
from ._lock import state_mutex
from ..state._statedir import StateDir

TYPE_CHECKING = False  # not `typing.TYPE_CHECKING`: importing typing costs the hot path
if TYPE_CHECKING:
    from _typeshed import StrPath

LEDGER_FILE = "sessions.json"
MAX_STARTS = 64
"""Sessions whose completed full start is remembered (the oldest is dropped first)."""
MAX_DELIVERED = 256
"""Delivered-text fingerprints remembered (the oldest is dropped first)."""
_MAX_BYTES = 256 * 1024


def fingerprint(text: str) -> str:
    """SHA-256 (hex) of ``text`` stripped of surrounding whitespace (harnesses add or drop a
    trailing newline); the empty string for blank text."""
    body = text.strip()
    if not body:
        return ""
    return sha256(body.encode("utf-8", "replace")).hexdigest()


def _check(doc: object) -> dict[str, list[dict[str, object]]]:
    if not isinstance(doc, dict):
        raise ValueError("not an object")
    return {key: [i for i in doc.get(key) or [] if isinstance(i, dict)]
            if isinstance(doc.get(key), list) else [] for key in ("starts", "delivered")}


def _load(sd: StateDir) -> dict[str, list[dict[str, object]]]:
    doc = sd.read_json(LEDGER_FILE, _MAX_BYTES, _check)
    return doc if isinstance(doc, dict) else {"starts": [], "delivered": []}


def _read(state_dir: StrPath) -> dict[str, list[dict[str, object]]]:
    try:
        sd = StateDir.open_existing(state_dir)
        if sd is None:
            return {"starts": [], "delivered": []}
        with sd:
            return _load(sd)
    except StateError:
        return {"starts": [], "delivered": []}


def _update(state_dir: StrPath, key: str, entry: dict[str, object], same: tuple[str, ...],
            bound: int) -> None:
    sd = StateDir.open_existing(state_dir)
    if sd is None:
        return  # nothing was started or delivered with state here: nothing to remember
    with sd, state_mutex(sd):
        doc = _load(sd)
        kept = [e for e in doc[key] if any(e.get(k) != entry.get(k) for k in same)]
        doc[key] = (kept + [entry])[-bound:]
        sd.write_json(LEDGER_FILE, doc)


def record_start(state_dir: StrPath, harness: str, session_id: str, nonce: str) -> None:
    """Remember that ``(harness, session_id)`` completed the full start of lock nonce
    ``nonce`` (no-op without a session id).

    Raises:
        StateError: the state dir or ledger is unusable (a symlink, unwritable, mutex busy).
    """
    if not session_id:
        return
    _update(state_dir, "starts", {"harness": harness, "session_id": session_id, "nonce": nonce,
                                  "completed_at": time.time()}, ("harness", "session_id"),
            MAX_STARTS)


def started(state_dir: StrPath, harness: str, session_id: str) -> str | None:
    """The lock nonce of the last full start ``(harness, session_id)`` completed in this
    project, or None. An empty session id is never known (a payload without one proves
    nothing). Never raises."""
    if not session_id:
        return None
    for e in reversed(_read(state_dir)["starts"]):
        if e.get("session_id") == session_id and e.get("harness") == harness:
            nonce = e.get("nonce")
            return nonce if isinstance(nonce, str) else None
    return None


def record_delivery(state_dir: StrPath, text: str, kind: str) -> None:
    """Remember the fingerprint of ``text`` (what the harness receives as context) and its
    ``kind`` (``digest``, ``reemit``). Blank text is not recorded.

    Raises:
        StateError: the state dir or ledger is unusable.
    """
    mark = fingerprint(text)
    if not mark or mark in delivered(state_dir):
        return  # already known (a repeated digest): no mutex, no write
    _update(state_dir, "delivered", {"sha256": mark, "kind": kind, "at": time.time()},
            ("sha256",), MAX_DELIVERED)


def delivered(state_dir: StrPath) -> frozenset[str]:
    """Fingerprints (:func:`fingerprint`) of every text this project's hook delivered and the
    ledger still remembers. Never raises."""
    return frozenset(str(e.get("sha256")) for e in _read(state_dir)["delivered"]
                     if isinstance(e.get("sha256"), str))
