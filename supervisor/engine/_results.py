"""Digest results: what each stage did and what the whole digest printed.

Kept apart from the engine so that code which only reads or builds results (the session
protocol on an empty digest, ``supervise status``) never imports anyio.
"""

from __future__ import annotations


from .. import _jsontext
from .._record import fields, record

TYPE_CHECKING = False  # not `typing.TYPE_CHECKING`: importing typing costs the hot path
if TYPE_CHECKING:
    from collections.abc import Callable, Mapping, Sequence
    from typing import Literal, Protocol

    class StreamTarget(Protocol):
        """What :class:`JsonStream` writes to: :class:`supervisor.engine._output.StreamSink`."""

        def write(self, data: bytes) -> None: ...

        def write_waiting(self, data: bytes, stall: float = ...) -> None: ...

        async def wait_room(self, limit: int = ...) -> None: ...

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
                   head: Mapping[str, object] | None = None) -> None:
        """Write the ``--format json`` document (docs/engine.md) through ``write``, piece by
        piece, UTF-8: the text of :meth:`to_json`, with ``head``'s keys first (the CLI's
        ``config_error``). What :class:`JsonStream` writes as the digest runs, from this
        result's outputs."""
        write(_document_head(head))
        for i, s in enumerate(self.stages):
            write(_entry_head(s.name, i))
            write(_json_piece(s.output.encode("utf-8", "replace")))
            write(_entry_tail(s, s.truncated))
        write(_document_tail(self))


def _document_head(head: Mapping[str, object] | None) -> bytes:
    """The document up to its first stage entry: ``{``, ``head``'s keys, ``"stages": [``."""
    keys = _jsontext.dumps(dict(head), ensure_ascii=False)[1:-1] + ", " if head else ""
    return ("{" + keys + '"stages": [').encode()


def _entry_head(name: str, position: int) -> bytes:
    """A stage entry up to the inside of its ``output`` string (``position``: its place in
    the ``stages`` array, for the comma)."""
    return (f'{", " if position else ""}{{"name": {_jsontext.dumps(name, ensure_ascii=False)}, '
            '"output": "').encode()


def _entry_tail(summary: StageSummary, truncated: bool) -> bytes:
    """A stage entry from the end of its ``output`` string: its :class:`StageSummary` fields
    but the name (``seconds`` rounded to milliseconds, ``truncated`` as given)."""
    fields_ = {name: getattr(summary, name) for name in _TAIL_FIELDS}
    fields_.update(seconds=round(summary.seconds, 3), truncated=truncated)
    return ('", ' + _jsontext.dumps(fields_, ensure_ascii=False)[1:]).encode()


_TAIL_FIELDS = tuple(name for name in fields(StageSummary) if name != "name")


def _document_tail(result: DigestResult) -> bytes:
    """The document after its last stage entry: the digest's own fields, known at its end."""
    top = {"truncated": result.truncated or result.cut,
           "reason": result.reason or ("max_output" if result.cut else None),
           "budget": result.budget, "seconds": round(result.seconds, 3)}
    return ("], " + _jsontext.dumps(top, ensure_ascii=False)[1:]).encode()


class JsonStream:
    """The ``--format json`` document (docs/engine.md) written as the digest runs: a
    :class:`supervisor.engine._output.Frame` for the engine's ``frame``. Each stage's output
    is escaped and written as it is shown, so no stage's output is ever held whole; the
    fields known only at a stage's end follow its ``output``, the digest's own fields follow
    its ``stages``. A ``deferred`` stage's entry is known only at the digest's end: the
    entries declared after it are held (their shown output, within its caps) and written by
    :meth:`close`.

    Args:
        sink: where the document goes (a :class:`supervisor.engine._output.StreamSink`):
            ``write`` during the digest (its ``wait_room`` is the engine's back-pressure),
            ``write_waiting`` at :meth:`close`.
        head: keys written first (the CLI's ``config_error``), or None.
    """

    def __init__(self, sink: StreamTarget, head: Mapping[str, object] | None = None) -> None:
        self._sink = sink
        self._write = sink.write
        self._layout: list[tuple[str, StageStatus | None]] = []  # declared: name, status if not live
        self._declared: list[int] = []  # live index -> declared index
        self._next = 0  # the next declared entry to write
        self._open = False  # the entry at _next has its head written, its output streaming
        self._held: dict[int, list[bytes]] | None = None  # after a deferred entry: by live index
        self.wait_room = sink.wait_room
        self._write(_document_head(head))

    def begin(self, layout: Sequence[tuple[str, StageStatus | None]]) -> None:
        """The digest's stages in declared order: ``(name, None)`` for a live stage, ``(name,
        status)`` for one not run live (``skipped`` or ``deferred``)."""
        self._layout = list(layout)
        self._declared = [i for i, (_name, status) in enumerate(self._layout) if status is None]

    def write(self, data: bytes) -> None:
        """A notice: the document has none (the digest's fields and each deferred stage's
        ``output`` carry what the text's notices say)."""

    def _reach(self, position: int) -> bool:
        """Write the entries not run live before declared ``position``; False once a
        deferred one is reached (everything after it is held)."""
        while self._held is None and self._next < position:
            name, status = self._layout[self._next]
            if status == "deferred":
                self._held = {}
                return False
            self._write(_entry_head(name, self._next)
                        + _entry_tail(StageSummary(name, status or "not_started"), False))
            self._next += 1
        return self._held is None

    def stage(self, index: int, data: bytes, plain: bool = False) -> None:
        """Bytes of live stage ``index``, escaped into its entry's ``output`` (``plain``: ASCII
        with no control but LF and TAB, as the engine checked them)."""
        position = self._declared[index]
        piece = _json_piece(data, plain)
        if not self._reach(position):
            assert self._held is not None
            self._held.setdefault(index, []).append(piece)
            return
        if not self._open:
            self._write(_entry_head(self._layout[position][0], position))
            self._open = True
        self._write(piece)

    def end(self, index: int, summary: StageSummary | None, cut: bool) -> None:
        """Live stage ``index`` has shown everything: its entry is closed with its fields."""
        position = self._declared[index]
        if not self._reach(position):
            return  # held: closed from the result by close()
        name = self._layout[position][0]
        if not self._open:
            self._write(_entry_head(name, position))
        summary = summary or StageSummary(name, "not_started")
        self._write(_entry_tail(summary, summary.truncated or cut))
        self._open = False
        self._next = position + 1

    def close(self, result: DigestResult, tail: bytes = b"\n") -> None:
        """Write the rest of the document from ``result`` (the digest's :class:`DigestResult`,
        same stages in the same order): the entries not yet written, then the digest's own
        fields and ``tail``; waits for the reader (``write_waiting``)."""
        write = self._sink.write_waiting
        held = self._held or {}
        live = {position: index for index, position in enumerate(self._declared)}
        for position in range(self._next, len(result.stages)):
            s = result.stages[position]
            pieces = held.get(live[position], []) if position in live else None
            if not (position == self._next and self._open):
                write(_entry_head(s.name, position))
            for piece in (pieces if pieces is not None
                          else [_json_piece(s.output.encode("utf-8", "replace"))]):
                write(piece)
            held.pop(live.get(position, -1), None)
            write(_entry_tail(s, s.truncated))
        write(_document_tail(result) + tail)


_PLAIN_BYTES = bytes(range(32, 128)) + b"\n\t"
"""ASCII bytes a JSON string holds as they are, but LF and TAB (escaped by :func:`_json_piece`)."""


def _json_piece(piece: bytes, plain: bool = False) -> bytes:
    """``piece`` (valid UTF-8) as the inside of a JSON string, as ``json.dumps(...,
    ensure_ascii=False)`` writes it. Plain ASCII (what a stage prints most of the time) is
    escaped on the bytes (``replace`` runs at memory speed; the encoder's escape loop was the
    slowest step of a 1 GiB document); anything else is decoded and escaped by ``_json``.
    ``plain``: the caller knows ``piece`` is such ASCII (the check is skipped)."""
    if plain or not piece.translate(None, _PLAIN_BYTES):
        if b"\\" in piece:
            piece = piece.replace(b"\\", b"\\\\")
        if b'"' in piece:
            piece = piece.replace(b'"', b'\\"')
        if b"\t" in piece:
            piece = piece.replace(b"\t", b"\\t")
        return piece.replace(b"\n", b"\\n")
    return _jsontext.dumps(piece.decode("utf-8", "replace"), ensure_ascii=False)[1:-1].encode()
