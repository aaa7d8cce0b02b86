"""Digest results: what each stage did and what the whole digest printed.

Kept apart from the engine so that code which only reads or builds results (the session
protocol on an empty digest, ``supervise status``) never imports anyio.
"""

from __future__ import annotations


from .. import _jsontext
from .._record import asdict, fields, record

TYPE_CHECKING = False  # not `typing.TYPE_CHECKING`: importing typing costs the hot path
if TYPE_CHECKING:
    from collections.abc import Callable, Mapping, Sequence
    from typing import Literal

    StageStatus = Literal["ok", "failed", "timed_out", "killed", "not_started", "deferred", "skipped"]
    """``ok`` exit 0; ``failed`` non-zero exit or could not start; ``timed_out`` killed at its own
    ``timeout``; ``killed`` killed at the overall budget or by a signal to the supervisor;
    ``not_started`` the budget ended before it could start; ``deferred`` launched detached, result
    delivered separately; ``skipped`` not part of this run (read-only, re-emit, ``--only``, or its
    ``when`` condition does not hold)."""
else:
    StageStatus = str  # what the records loader reads it as (last-digest.json)


@record
class StageSummary:
    """What is kept of one stage's outcome: ``last-digest.json`` (``supervise status``) and
    each stage of ``--format json``; :class:`StageResult` adds the output.

    Attributes:
        name: the stage name.
        status: see :data:`StageStatus`.
        exit_code: the leader's exit status; negative = killed by that signal; None when it
            never ran.
        seconds: wall time from spawn to end, in seconds.
        bytes: raw bytes the stage printed (before caps).
        truncated: its output was cut by its ``max_output``, or by the digest's (the total
            cap cut it: the digest shows less than it printed).
    """

    name: str
    status: StageStatus
    exit_code: int | None = None
    seconds: float = 0.0
    bytes: int = 0
    truncated: bool = False

    @property
    def completed(self) -> bool:
        """The stage ran to its own end (successfully or not)."""
        return self.status in ("ok", "failed", "deferred", "skipped")

    def summary(self) -> StageSummary:
        """This outcome as a :class:`StageSummary` (the output, if any, left out)."""
        return StageSummary(**{name: getattr(self, name) for name in fields(StageSummary)})


@record
class StageResult(StageSummary):
    """One stage's outcome: its :class:`StageSummary` fields, then ``output``, what the
    digest shows for it (after caps, U+FFFD for invalid UTF-8)."""

    output: str = ""


@record
class DigestResult:
    """A digest's outcome.

    Attributes:
        stages: per-stage results in declared order.
        truncated: the budget or a signal ended the digest early (the banner was printed).
        budget: the overall budget in seconds.
        seconds: wall time of the whole digest.
        reason: why it was truncated (``"budget"`` or a signal name), else None.
        text: the whole digest as printed (notices, stages, banner).
        notices: the notices written after the stages, in order (output cut marker, deferred
            results, IN PROGRESS lines, the truncation banner), each ending in a newline.
        cut: the digest-wide ``max_output`` cut the output (the loud cut marker was printed);
            ``--format json`` then says ``truncated: true``, reason ``max_output`` when
            nothing else ended it early.
    """

    stages: tuple[StageResult, ...]
    truncated: bool
    budget: float
    seconds: float
    reason: str | None = None
    text: str = ""
    notices: tuple[str, ...] = ()
    cut: bool = False

    @property
    def complete(self) -> bool:
        """Every stage ran to its end and nothing was truncated."""
        return not self.truncated and all(s.completed for s in self.stages)

    def to_json(self) -> str:
        """The ``--format json`` document (see docs/engine.md), as one string."""
        parts: list[bytes] = []
        self.write_json(parts.append)
        return b"".join(parts).decode("utf-8")

    def write_json(self, write: Callable[[bytes], None],
                   chunks: Mapping[str, Sequence[bytes]] | None = None,
                   head: Mapping[str, object] | None = None) -> None:
        """Write the ``--format json`` document (docs/engine.md) through ``write``, piece by
        piece, UTF-8: the text of :meth:`to_json`, with ``head``'s keys first (the CLI's
        ``config_error``). A stage named in ``chunks`` takes its output from there (the
        chunks the digest kept, :func:`supervisor.engine.run_digest`'s ``output_chunks``),
        each decoded and escaped on its own: the document is never built whole."""
        dumps = _jsontext.dumps
        top = {**(head or {}), "truncated": self.truncated or self.cut,
               "reason": self.reason or ("max_output" if self.cut else None),
               "budget": self.budget, "seconds": round(self.seconds, 3)}
        write(dumps(top, ensure_ascii=False)[:-1].encode() + b', "stages": [')
        for i, s in enumerate(self.stages):
            entry = dumps({**asdict(s.summary()), "seconds": round(s.seconds, 3)},
                          ensure_ascii=False)
            write(f'{", " if i else ""}{entry[:-1]}, "output": "'.encode())
            pieces = chunks.get(s.name) if chunks is not None else None
            if pieces is None:
                write(dumps(s.output, ensure_ascii=False)[1:-1].encode())
            else:
                for piece in pieces:
                    write(_json_piece(piece))
            write(b'"}')
        write(b"]}")


_PLAIN_BYTES = bytes(range(32, 128)) + b"\n\t"
"""ASCII bytes a JSON string holds as they are, but LF and TAB (escaped by :func:`_json_piece`)."""


def _json_piece(piece: bytes) -> bytes:
    """``piece`` (valid UTF-8) as the inside of a JSON string, as ``json.dumps(...,
    ensure_ascii=False)`` writes it. Plain ASCII (what a stage prints most of the time) is
    escaped on the bytes (``replace`` runs at memory speed; the encoder's escape loop was the
    slowest step of a 1 GiB document); anything else is decoded and escaped by ``_json``."""
    if not piece.translate(None, _PLAIN_BYTES):
        if b"\\" in piece:
            piece = piece.replace(b"\\", b"\\\\")
        if b'"' in piece:
            piece = piece.replace(b'"', b'\\"')
        if b"\t" in piece:
            piece = piece.replace(b"\t", b"\\t")
        return piece.replace(b"\n", b"\\n")
    return _jsontext.dumps(piece.decode("utf-8", "replace"), ensure_ascii=False)[1:-1].encode()
