"""Read a harness transcript: the session-start contexts it holds since the last compaction.

A resume restores the prior context, and with it every session-start text the hook gave
this session since its last compaction. Before asking for a digest again (the nudge), the
hook looks here (issue 12, item 6). Formats, as observed with the pinned CLIs (the payload's
``transcript_path``, JSON Lines):

* **Claude Code 2.1.197**: an entry ``{"type": "attachment", "attachment": {"type":
  "hook_additional_context", "hookEvent": "SessionStart", "content": ["<text>", ...]}}`` per
  SessionStart context; a compaction writes ``{"type": "system", "subtype":
  "compact_boundary"}``.
* **Codex CLI 0.171.0** (the rollout file): ``{"type": "response_item", "payload": {"type":
  "message", "role": "developer", "content": [{"text": "<text>"}],
  "internal_chat_message_metadata_passthrough": {"content_item_kinds":
  ["hooks.additional_context"]}}}``; a compaction writes ``{"type": "compacted"}``.

Other harnesses' transcripts are not read (:func:`session_contexts` returns None: unknown).

The file is untrusted input: it must be a regular file (a FIFO would block the hook), only
its last :data:`MAX_SCAN` bytes are read, and a line that does not parse is skipped.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Callable, Iterator

from .. import _jsontext
from .._record import record

TYPE_CHECKING = False  # not `typing.TYPE_CHECKING`: importing typing costs the hot path
if TYPE_CHECKING:
    from _typeshed import StrPath

MAX_SCAN = 32 * 1024 * 1024
"""Bytes read at most, from the end of the file. Without a compaction in them and with
more before them, the answer is unknown (None)."""
READERS = ("claude", "codex")
"""Harnesses whose transcript format is known."""
_CHUNK = 1024 * 1024


@record
class TranscriptView:
    """The session-start contexts of a transcript since its last compaction.

    Attributes:
        contexts: each SessionStart context text, oldest first.
        compacted: a compaction boundary was found.
        compaction_last: the compaction is the transcript's last conversation entry (no
            message or context after it): Codex writes it, then fires SessionStart(resume)
            and SessionStart(compact) in the same process (observed order), so a compact
            hook follows.
    """

    contexts: tuple[str, ...]
    compacted: bool
    compaction_last: bool = False


def _lines_backwards(fd: int, size: int) -> Iterator[bytes]:
    """The file's complete lines, last first, from its last MAX_SCAN bytes, read backwards in
    chunks so a recent compaction costs one chunk; a line cut by the scan limit is dropped."""
    floor = max(size - MAX_SCAN, 0)
    pos, rest = size, b""
    while pos > floor:
        n = min(_CHUNK, pos - floor)
        pos -= n
        chunk = os.pread(fd, n, pos)
        if len(chunk) != n:  # the file shrank under us: stop, what was read stands
            return
        parts = (chunk + rest).split(b"\n")
        rest = parts[0]
        yield from reversed(parts[1:])
    if floor == 0:
        yield rest


def _claude(entry: dict[str, object]) -> tuple[str, list[str]]:
    """``("boundary", [])``, ``("context", texts)``, ``("message", [])`` or ``("", [])``."""
    kind = entry.get("type")
    if kind == "system" and entry.get("subtype") == "compact_boundary":
        return "boundary", []
    if kind == "attachment":
        att = entry.get("attachment")
        if isinstance(att, dict) and att.get("type") == "hook_additional_context" \
                and att.get("hookEvent", "SessionStart") == "SessionStart":
            content = att.get("content")
            items = content if isinstance(content, list) else [content]
            return "context", [t for t in items if isinstance(t, str)]
    if kind in ("user", "assistant"):
        return "message", []
    return "", []


def _codex(entry: dict[str, object]) -> tuple[str, list[str]]:
    kind = entry.get("type")
    if kind == "compacted":
        return "boundary", []
    payload = entry.get("payload")
    if kind != "response_item" or not isinstance(payload, dict) or payload.get("type") != "message":
        return "", []
    meta = payload.get("internal_chat_message_metadata_passthrough")
    kinds = meta.get("content_item_kinds") if isinstance(meta, dict) else None
    content = payload.get("content")
    texts = [c.get("text") for c in content if isinstance(c, dict)] if isinstance(content, list) else []
    if isinstance(kinds, list) and "hooks.additional_context" in kinds:
        return "context", [t for t in texts if isinstance(t, str)]
    return "message", []


_PARSERS = {"claude": _claude, "codex": _codex}
_BOUNDARY = {"claude": b"compact_boundary", "codex": b'"compacted"'}
_CONTEXT = {"claude": b"hook_additional_context", "codex": b"hooks.additional_context"}
_MESSAGE = {"claude": (b'"user"', b'"assistant"'), "codex": (b'"response_item"',)}
"""Cheap byte tests first: only a line that may be a boundary or a context is parsed (a long
transcript's ordinary messages are never decoded)."""


def session_contexts(path: str | os.PathLike[str] | None, harness: str) -> TranscriptView | None:
    """The SessionStart contexts of ``harness``'s transcript at ``path`` since the last
    compaction, or None when that cannot be known (no path, not a regular file, unreadable,
    a harness whose format is not known, or no compaction within the last MAX_SCAN bytes of
    a longer file). Read backwards from the end, it stops at the last compaction. Never
    raises; blocks on nothing (opened ``O_NONBLOCK``, and a FIFO or other non-regular file is
    never read)."""
    parse = _PARSERS.get(harness)
    if parse is None or not path:
        return None
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except (ValueError, OSError):  # absent, unreadable, an embedded NUL, a name too long
        return None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            return None
        return _scan(_lines_backwards(fd, info.st_size), harness, parse,
                     whole=info.st_size <= MAX_SCAN)
    except OSError:
        return None
    finally:
        os.close(fd)


def _scan(lines: Iterator[bytes], harness: str,
          parse: Callable[[dict[str, object]], tuple[str, list[str]]], *,
          whole: bool) -> TranscriptView | None:
    boundary, context, message = _BOUNDARY[harness], _CONTEXT[harness], _MESSAGE[harness]
    contexts: list[str] = []
    after_boundary = False
    for raw in lines:
        if boundary not in raw and context not in raw:
            if not after_boundary and any(m in raw for m in message):
                after_boundary = True
            continue
        try:
            entry = _jsontext.loads(raw)
        except (ValueError, RecursionError, MemoryError):  # deep nesting is not a ValueError
            continue
        if not isinstance(entry, dict):
            continue
        kind, texts = parse(entry)
        if kind == "boundary":
            return TranscriptView(tuple(reversed(contexts)), True, not after_boundary)
        if kind in ("context", "message"):
            after_boundary = True
        contexts.extend(reversed(texts))
    if not whole:
        return None
    return TranscriptView(tuple(reversed(contexts)), False)


def count_lines_with(path: str | os.PathLike[str] | None, mark: str) -> int | None:
    """How many lines of the transcript at ``path`` hold ``mark`` (its UTF-8 bytes), as
    ``grep -c -F`` counts them (the fast path compares the two counts), or None when the file
    is no regular file, is unreadable, or ``mark`` is empty or spans a line. Read whole, in
    chunks (memory bounded by the chunk, whatever the file's size). Never raises; blocks on
    nothing (opened ``O_NONBLOCK``)."""
    needle = mark.encode("utf-8", "replace")
    if not path or not needle or b"\n" in needle:
        return None
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except (ValueError, OSError):
        return None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return None
        count, line_has, carry = 0, False, b""
        keep = len(needle) - 1  # a mark cut by a chunk's end is found with the next chunk
        while chunk := os.read(fd, 1 << 20):
            data, start = carry + chunk, 0
            while (nl := data.find(b"\n", start)) >= 0:
                if line_has or needle in data[start:nl]:
                    count += 1
                line_has, start = False, nl + 1
            rest = data[start:]
            line_has = line_has or needle in rest
            carry = b"" if line_has or not keep else rest[-keep:]
        if line_has:  # a last line without its newline, as grep counts it
            count += 1
        return count
    except OSError:
        return None
    finally:
        os.close(fd)
