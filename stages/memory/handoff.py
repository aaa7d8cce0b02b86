"""The handoff delivery record: how often an unchanged handoff note was already delivered.

The note itself is never consumed, emptied or truncated by reading it (claude-remember #221:
read-only and abandoned sessions used to eat the note). Instead a per-machine record in the
state dir remembers the content fingerprint, the first delivery and a count::

    <state>/memory/handoff.delivered      key=value lines, hand-editable, safe to delete
    <state>/memory/handoff.lock           flock guarding the read-modify-write

Rules (brief memory.md #6-#8; claude-remember #341/#379 and #842):

- same fingerprint as the record: the note is shown with "already delivered N times since T",
  N being the deliveries before this one; other sources than ``compact`` store N+1;
- another fingerprint or no record: count starts again at 1, no note;
- ``compact`` never writes the record (four compactions after one delivery still say 1): the
  context lost the note, the note did not become more stale;
- note missing or blank: the record is removed (at any source);
- a corrupt or hand-edited record never crashes: a count that is not all digits is 0, leading
  zeros are decimal (``007`` is 7), unknown keys are ignored;
- past ``max_redeliveries`` deliveries (0 = no cap) the body is replaced by its path.

Every access goes through the state door (``supervisor.state._statedir``: no link followed, no FIFO
opened, reads capped); writes are atomic and the whole exchange holds an exclusive ``flock``,
so concurrent digests neither lose nor double a count.
"""

from __future__ import annotations

import hashlib
import time
from dataclasses import dataclass
from pathlib import Path

from supervisor.state._delivery import staged_write
from supervisor._errors import StateError
from supervisor.state._statedir import StateDir

RECORD_NAME = "handoff.delivered"
LOCK_NAME = "handoff.lock"
RECORD_CAP = 64 * 1024
"""Bytes of the record read at most; a bigger file is not ours (set aside)."""
LOCK_TIMEOUT = 5.0
"""Seconds to wait for the record lock before going on without the record (never hang)."""


@dataclass(frozen=True)
class Delivery:
    """What to print for the handoff note.

    Attributes:
        number: which delivery this is for the current content (1 = first).
        prior: deliveries before this one (0 = none, no note).
        since: first delivery as stored (local ``YYYY-MM-DD HH:MM``), "" when unknown.
        problem: a log line when the record could not be used, else "".
    """

    number: int
    prior: int
    since: str
    problem: str = ""


def fingerprint(content: bytes) -> str:
    """The content fingerprint stored in the record: ``sha256:<hex>``."""
    return "sha256:" + hashlib.sha256(content).hexdigest()


def parse_count(raw: str | None) -> int:
    """A stored count: all-digit text in base 10 (leading zeros allowed), anything else 0."""
    raw = (raw or "").strip()
    return int(raw, 10) if raw.isascii() and raw.isdigit() else 0


def parse_record(data: bytes) -> dict[str, str]:
    """``key=value`` lines of a record's bytes (invalid UTF-8 replaced). Never raises."""
    record: dict[str, str] = {}
    for line in data.decode("utf-8", "replace").splitlines():
        if "=" in line and not line.lstrip().startswith("#"):
            key, _, value = line.partition("=")
            record[key.strip()] = value.strip()
    return record


def read_record(path: Path) -> dict[str, str]:
    """``key=value`` lines of the record at ``path``; ``{}`` when missing, unreadable or not a
    regular file of at most :data:`RECORD_CAP` bytes (read through the state door). Never
    raises."""
    try:
        sd = StateDir.open_existing(path.parent)
        if sd is None:
            return {}
        with sd:
            data = sd.read(path.name, RECORD_CAP)
    except StateError:
        return {}
    return parse_record(data or b"")


def _sanitize(value: str) -> str:
    """The record's ``first_delivered`` when it has our form (``YYYY-MM-DD HH:MM``, ASCII
    digits), else ``""`` (unknown): the only text of this record that reaches the model
    ("already delivered N times since T"), so a planted record can put no words there."""
    text = value.strip()
    digits = text[:4] + text[5:7] + text[8:10] + text[11:13] + text[14:]
    if (len(text) == 16 and text.isascii() and digits.isdigit() and text[4] == text[7] == "-"
            and text[10] == " " and text[13] == ":"):
        return text
    return ""


def deliver(state_dir: Path | None, note: Path, content: bytes | None, *, compact: bool,
            preview: bool = False) -> Delivery:
    """Account for one delivery of ``content`` (None or blank = no note) and return what to say.

    ``state_dir`` None means nothing is recorded (every delivery is the first); ``preview``
    (a person running ``supervise digest`` to look) reads the record and writes nothing: the
    note is shown as the next session would get it, and the count stays. Never raises: an
    unusable state dir or a lock held too long gives a first delivery plus a ``problem``.
    """
    blank = content is None or not content.strip()
    if state_dir is None:
        return Delivery(number=1, prior=0, since="")
    if preview:
        if blank:
            return Delivery(0, 0, "")
        assert content is not None
        record = read_record(state_dir / "memory" / RECORD_NAME)
        if record.get("fingerprint") != fingerprint(content):
            return Delivery(number=1, prior=0, since="")
        prior = parse_count(record.get("deliveries"))
        return Delivery(prior + 1, prior, _sanitize(record.get("first_delivered", "")))
    folder = state_dir / "memory"
    try:
        with StateDir.open(state_dir, create=True) as state:
            memory = state.sub("memory", create=True)
            assert memory is not None
            with memory, memory.flock(LOCK_NAME, LOCK_TIMEOUT, poll=0.01) as held:
                if not held:
                    return Delivery(1, 0, "", f"handoff record lock busy > {LOCK_TIMEOUT:g}s; not counted")
                if blank:
                    memory.remove(RECORD_NAME)
                    return Delivery(0, 0, "")
                assert content is not None
                record = parse_record(memory.read(RECORD_NAME, RECORD_CAP) or b"")
                fp = fingerprint(content)
                if record.get("fingerprint") == fp:
                    prior = parse_count(record.get("deliveries"))
                    since = _sanitize(record.get("first_delivered", ""))
                else:
                    prior, since = 0, ""
                if compact:
                    # claude-remember #341: a compaction is not a new delivery of the note.
                    return Delivery(number=max(prior, 1), prior=prior, since=since)
                if not since:
                    since = time.strftime("%Y-%m-%d %H:%M")
                body = "# watchkeeper memory stage: handoff delivery record (per machine, safe to delete)\n"
                body += "".join(f"{k}={v}\n" for k, v in {
                    "fingerprint": fp,
                    "first_delivered": since,
                    "deliveries": str(prior + 1),
                    "note": str(note),
                }.items())
                # Counted only once the digest carrying the note was delivered: under a hook
                # the record is staged and moved into place after the envelope went out whole
                # (issue 11 item 5); run by hand, it is written now.
                data = body.encode("utf-8", "replace")
                if not staged_write(state_dir, f"memory/{RECORD_NAME}", data):
                    memory.write(RECORD_NAME, data)
                return Delivery(number=prior + 1, prior=prior, since=since)
    except (StateError, OSError) as err:
        return Delivery(1, 0, "", f"handoff record in {folder} unusable: {err}")
