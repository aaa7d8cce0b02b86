"""Exposure metrics: what the digest injects into a model's context, and what it costs.

Each time a stage injects a memory body (resident summary, identity, handoff, ...) it appends
one **exposure** event to ``<state dir>/exposure.jsonl``. Exposure is passive: it is kept in its
own log, apart from explicit reads (a model asking for a file), and is never counted as use
(brief, memory.md #12; the rule comes from the resident summary design of the yoi runtime).

Event shape (one JSON object per line, UTF-8)::

    {"v": 1, "at": "2026-11-29T22:51:00+00:00", "event": "exposure", "stage": "memory",
     "what": "/abs/path/.remember/identity.md", "bytes": 812, "tokens": 203,
     "source": "startup", "session": "abc"}

``tokens`` is an estimate, ``ceil(bytes / 4)``. ``source`` is the routed source, ``""`` when it
was unrecognized or the digest ran from a terminal (summaries show it as ``(none)``).

Stdlib only and cheap to import: stage programs import it on their hot path.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

from .._errors import StateError
from .._record import field, record
from ._statedir import StateDir

TYPE_CHECKING = False  # not `typing.TYPE_CHECKING`: stage programs import this module
if TYPE_CHECKING:
    from collections.abc import Iterator
    from typing import Any

LOG_NAME = "exposure.jsonl"
MAX_LOG_BYTES = 2 * 1024 * 1024
"""Past this size (bytes) the log is rotated to ``exposure.jsonl.1`` (one generation kept)."""
MAX_LINE_BYTES = 8 * 1024
"""Bytes one event may take (a longer one is cut)."""
MAX_READ_BYTES = 2 * (MAX_LOG_BYTES + 8 * MAX_LINE_BYTES)
"""Bytes ``summarize_exposure`` reads at most, whatever was planted in the log's place."""
NO_SOURCE = "(none)"


def estimate_tokens(nbytes: int) -> int:
    """Estimated tokens for ``nbytes`` bytes of text: ``ceil(nbytes / 4)``, 0 for 0."""
    return -(-max(nbytes, 0) // 4)


def append_exposure(state_dir: Path, *, what: str, nbytes: int, source: str, session: str,
                    stage: str) -> None:
    """Append one exposure event to ``<state_dir>/exposure.jsonl``.

    Args:
        state_dir: the per-machine state dir (created if missing).
        what: what was injected, an absolute path for a file.
        nbytes: bytes injected (after any cut), not the file's size.
        source: the routed source (``""`` when unrecognized).
        session: the harness session id (display only).
        stage: the stage that injected it.

    Written through the state door (:mod:`supervisor.state._statedir`): one ``write`` on an
    ``O_APPEND`` descriptor (concurrent digests interleave whole lines), never through a link,
    rotated past :data:`MAX_LOG_BYTES`. Raises:
        OSError: the state dir or the log cannot be written (a symlinked state dir included).
    """
    event = {
        "v": 1,
        "at": time.strftime("%Y-%m-%dT%H:%M:%S+00:00", time.gmtime()),  # ISO 8601, UTC
        "event": "exposure",
        "stage": stage,
        "what": what,
        "bytes": int(nbytes),
        "tokens": estimate_tokens(int(nbytes)),
        "source": source,
        "session": session,
    }
    line = (json.dumps(event, ensure_ascii=False) + "\n").encode("utf-8", "replace")
    try:
        with StateDir.open(state_dir, create=True) as sd:
            sd.append(LOG_NAME, line[:MAX_LINE_BYTES], max_bytes=MAX_LOG_BYTES)
    except StateError as err:
        raise OSError(str(err)) from err


@record
class FileExposure:
    """Totals for one injected thing (frozen): ``count`` events, ``bytes`` and estimated
    ``tokens`` summed over them, ``last_at`` the ISO time of the latest event."""

    what: str
    count: int = 0
    bytes: int = 0
    tokens: int = 0
    last_at: str = ""


@record
class SourceExposure:
    """Totals for one source (frozen; ``startup``, ``compact``, ..., ``(none)``):
    ``events``, ``bytes``, estimated ``tokens``, distinct ``sessions``."""

    source: str
    events: int = 0
    bytes: int = 0
    tokens: int = 0
    sessions: int = 0


@record
class ExposureSummary:
    """What ``supervise status`` shows about exposure (frozen).

    Attributes:
        path: the log read.
        events: valid events counted.
        skipped: malformed lines skipped (never fatal).
        files: per injected file, most exposed first.
        sources: per source, by estimated tokens, largest first.
    """

    path: Path
    events: int = 0
    skipped: int = 0
    files: list[FileExposure] = field(default_factory=list)
    sources: list[SourceExposure] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict (for ``supervise status --format json``)."""
        return {
            "path": str(self.path),
            "events": self.events,
            "skipped": self.skipped,
            "files": [vars(f) for f in self.files],
            "sources": [vars(s) for s in self.sources],
        }

    def lines(self) -> list[str]:
        """Human lines, e.g. ``exposure: 12 injections, ~3,104 tokens`` then one line per
        source and per file; ``["exposure: none recorded"]`` when the log is empty."""
        if not self.events:
            return ["exposure: none recorded"]
        total = sum(s.tokens for s in self.sources)
        out = [f"exposure: {self.events} injections, ~{total:,} tokens (estimated, bytes/4)"]
        for s in self.sources:
            out.append(f"  source {s.source}: {s.events} injections in {s.sessions} sessions, "
                       f"~{s.tokens:,} tokens")
        for f in self.files:
            out.append(f"  {f.what}: {f.count}x, ~{f.tokens:,} tokens")
        if self.skipped:
            out.append(f"  ({self.skipped} malformed log lines skipped)")
        return out


def _events(path: Path) -> Iterator[dict[str, Any] | None]:
    """Yield each line's event, None for a malformed one; rotated generation first. Each
    generation is read through the state door, capped at its rotation size plus one line
    (a planted link, FIFO or oversized file is set aside, not read)."""
    try:
        sd = StateDir.open_existing(path.parent)
    except StateError:
        return
    if sd is None:
        return
    with sd:
        for name in (LOG_NAME + ".1", LOG_NAME):
            try:
                data = sd.read(name, MAX_LOG_BYTES + 8 * MAX_LINE_BYTES)
            except StateError:
                continue
            for raw in (data or b"").splitlines():
                try:
                    event = json.loads(raw)
                except (ValueError, RecursionError, MemoryError):
                    yield None
                    continue
                ok = (isinstance(event, dict) and event.get("event") == "exposure"
                      and isinstance(event.get("what"), str)
                      and isinstance(event.get("bytes"), int)
                      and not isinstance(event.get("bytes"), bool))
                yield event if ok else None


def summarize_exposure(state_dir: Path) -> ExposureSummary:
    """Read ``<state_dir>/exposure.jsonl`` and total it per file and per source.

    Never raises for a missing, unreadable or partly malformed log: missing gives an empty
    summary, malformed lines are counted in ``skipped``.
    """
    path = Path(state_dir) / LOG_NAME
    events = skipped = 0
    files: dict[str, list[Any]] = {}  # what -> [count, bytes, tokens, last_at]
    sources: dict[str, list[int]] = {}  # source -> [events, bytes, tokens]
    sessions: dict[str, set[str]] = {}
    for event in _events(path):
        if event is None:
            skipped += 1
            continue
        nbytes = max(int(event["bytes"]), 0)
        tokens = estimate_tokens(nbytes)
        what = event["what"]
        source = event.get("source") if isinstance(event.get("source"), str) else ""
        source = source or NO_SOURCE
        f = files.setdefault(what, [0, 0, 0, ""])
        f[0] += 1
        f[1] += nbytes
        f[2] += tokens
        at = event.get("at")
        if isinstance(at, str) and at > f[3]:
            f[3] = at
        s = sources.setdefault(source, [0, 0, 0])
        s[0] += 1
        s[1] += nbytes
        s[2] += tokens
        session = event.get("session")
        sessions.setdefault(source, set()).add(session if isinstance(session, str) else "")
        events += 1
    file_totals = [FileExposure(what, count, nbytes, tokens, last_at)
                   for what, (count, nbytes, tokens, last_at) in files.items()]
    source_totals = [SourceExposure(source, count, nbytes, tokens, len(sessions[source]))
                     for source, (count, nbytes, tokens) in sources.items()]
    return ExposureSummary(
        path=path, events=events, skipped=skipped,
        files=sorted(file_totals, key=lambda f: (-f.count, -f.tokens, f.what)),
        sources=sorted(source_totals, key=lambda s: (-s.tokens, s.source)))
