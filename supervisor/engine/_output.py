"""The one output choke point: sinks, UTF-8 hygiene, per-stage and total caps, declared order.

Every byte watchkeeper prints on behalf of a digest goes through :class:`OrderedOutput` into a
:class:`Sink`. Stages run concurrently; their output comes out in declared order: the first
unfinished stage streams live, later ones buffer (bounded by their cap) and flush as soon as
every earlier stage has finished.
"""

from __future__ import annotations

import codecs
import os
import stat
from .._record import field, mutable_record
from .._sanitize import StreamCleaner, removed_note

TYPE_CHECKING = False  # not typing's: a session start runs this module
if TYPE_CHECKING:
    from typing import Protocol, final

    from collections.abc import Sequence

    from ._results import StageStatus, StageSummary
else:
    Protocol = object

    def final(cls: type) -> type:
        return cls

CUT_MARKER = "[supervise] OUTPUT CUT"


class Sink(Protocol):
    """Where digest bytes go. ``write`` receives valid UTF-8 and must not raise."""

    def write(self, data: bytes) -> None:
        """Write ``data`` (valid UTF-8 bytes) in order; never raise."""


class Frame(Protocol):
    """A sink that is told which stage each byte belongs to (:class:`OrderedOutput`'s
    ``frame``): a document written as the digest runs (``--format json``, the hook's spilled
    digest), which holds no stage's output whole. Its calls come in the digest's order: the
    live stages in declared order, each one's bytes then its end; its ``write`` (a
    :class:`Sink`'s) gets the notices outside any stage."""

    def begin(self, layout: Sequence[tuple[str, StageStatus | None]]) -> None:
        """The digest's stages in declared order, before any other call: ``(name, None)``
        for a stage run live (the ``index`` of :meth:`stage` counts these), ``(name,
        "skipped")`` or ``(name, "deferred")`` for the others."""

    def write(self, data: bytes) -> None:
        """A notice outside any stage (valid UTF-8); never raise."""

    def stage(self, index: int, data: bytes, plain: bool) -> None:
        """Bytes (valid UTF-8) of live stage ``index`` (its position among the live stages),
        in order, as the digest shows them (after every cap); ``plain``: they are ASCII with
        no control but LF and TAB (checked on their way in); never raise."""

    def end(self, index: int, summary: StageSummary | None, cut: bool) -> None:
        """Live stage ``index`` has shown all it will: ``summary`` is its outcome (None when
        it never started), ``cut`` whether the digest-wide cap cut its output; never
        raise."""


@final
class BufferSink:
    """A sink that keeps everything in memory (hook envelopes, JSON output, tests)."""

    def __init__(self) -> None:
        self._buf = bytearray()

    def write(self, data: bytes) -> None:
        """Append ``data``."""
        self._buf += data

    def getvalue(self) -> bytes:
        """Everything written so far."""
        return bytes(self._buf)

    def text(self) -> str:
        """Everything written so far, decoded once (no intermediate ``bytes`` copy)."""
        return self._buf.decode("utf-8", "replace")


@final
class ChunkSink:
    """A sink that keeps references to the chunks written, not copies: the engine's record
    of the whole digest, whose stage chunks are the very objects the stages keep (so the
    output is held once), decoded once by :meth:`text`."""

    def __init__(self) -> None:
        self._chunks: list[bytes] = []

    def write(self, data: bytes) -> None:
        """Remember ``data`` (no copy)."""
        self._chunks.append(data)

    def text(self) -> str:
        """Everything written, decoded once (the joined bytes are not kept beside the
        chunks)."""
        if len(self._chunks) > 1:
            return b"".join(self._chunks).decode("utf-8", "replace")
        return self._chunks[0].decode("utf-8", "replace") if self._chunks else ""


@final
class StreamSink:
    """A sink writing to a file descriptor (default 1, stdout) that never blocks the engine.

    On a pipe, FIFO or socket the descriptor is switched to non-blocking while the sink is
    open: what the reader has not taken yet waits in ``pending`` and goes out as the reader
    makes room (:meth:`wait_room`, :meth:`aclose`), so a reader that stops reading can never
    stall the deadlines (a blocking ``write(1)`` would freeze the event loop, signals
    included). Terminals and regular files are written directly.

    When the reader goes away (``EPIPE``, e.g. ``supervise digest | head -1``), or the fd is
    unusable (closed, ``ENOSPC``), the sink stops echoing, points the fd at ``/dev/null`` and
    keeps quiet: deadlines are still enforced (design rule 13). :attr:`error` keeps the
    write error: the caller decides what it means (``supervise digest``: ``EPIPE`` is not an
    error, a lost output is one line and exit 1, docs/cli.md).
    """

    HIGH_WATER = 4 * 1024 * 1024
    """Bytes of pending output above which :meth:`wait_room` makes the producer wait."""

    def __init__(self, fd: int = 1) -> None:
        self._fd = fd
        self.broken = False
        self.written = 0
        """Bytes given to :meth:`write` (delivered or not)."""
        self.error: OSError | None = None
        """The write error that stopped the output (``EPIPE``: the reader left; ``ENOSPC``,
        ``EIO``, ``EBADF``: the output is lost), or None. The caller decides what it means."""
        self._pending = bytearray()
        self._stalled = False  # a reader given up by write_waiting: the rest is dropped
        self._restore: bool | None = None
        try:
            mode = os.fstat(fd).st_mode
            if stat.S_ISFIFO(mode) or stat.S_ISSOCK(mode):
                self._restore = os.get_blocking(fd)
                os.set_blocking(fd, False)
        except OSError as err:
            self.error = err
            self._go_dark()

    @property
    def pending(self) -> int:
        """Bytes written to the sink that the reader has not taken yet."""
        return len(self._pending)

    def write(self, data: bytes) -> None:
        """Queue ``data`` and write as much as the reader takes now; never blocks on a
        non-blocking descriptor."""
        self.written += len(data)
        if self.broken or self._stalled:
            return
        if not self._pending:  # the usual case: written from ``data`` itself, no copy
            data = self._write_some(data)
            if not data:
                return
        self._pending += data
        self._flush()

    def _write_some(self, data: bytes) -> bytes:
        """Write what the descriptor takes of ``data`` now; what it did not take."""
        while True:
            try:
                n = os.write(self._fd, data)
            except InterruptedError:
                continue
            except BlockingIOError:
                return data
            except OSError as err:  # EPIPE, EBADF, ENOSPC, EIO: the output is gone, the digest goes on
                self.error = err
                self._go_dark()
                return b""
            return data[n:] if n < len(data) else b""

    def write_waiting(self, data: bytes, stall: float = 2.0) -> None:
        """:meth:`write`, then wait (blocking: for output written after the digest, when no
        event loop runs) while more than :data:`HIGH_WATER` bytes are pending, as long as the
        reader takes some every ``stall`` seconds: the pending bytes stay bounded whatever
        is written. A reader that took nothing for ``stall`` seconds is given up: the rest
        is dropped, and :meth:`close` reports the output not whole."""
        import select

        self.write(data)
        while self.pending > self.HIGH_WATER and not self.broken and not self._stalled:
            try:
                ready = select.select([], [self._fd], [], stall)[1]
            except (OSError, ValueError):
                ready = []
            if not ready:
                self._stalled = True
                self._pending.clear()
                return
            self._flush()

    def _flush(self) -> None:
        while self._pending and not self.broken:
            try:
                n = os.write(self._fd, self._pending)
            except InterruptedError:
                continue
            except BlockingIOError:
                return
            except OSError as err:  # EPIPE, EBADF, ENOSPC, EIO: the output is gone, the digest goes on
                self.error = err
                self._go_dark()
                return
            del self._pending[:n]

    async def wait_room(self, limit: int = HIGH_WATER) -> None:
        """Wait (cancellably) until at most ``limit`` bytes are pending: back-pressure for a
        producer, bounded by its caller's deadline."""
        from . import _loop

        while self.pending > limit and not self.broken:
            await _loop.wait_writable(self._fd)
            self._flush()

    def close(self, timeout: float = 0.2) -> bool:
        """Give the reader up to ``timeout`` seconds for what is pending, then drop the rest
        and restore the descriptor's blocking mode.

        Returns:
            True when every byte written to the sink reached the descriptor (delivered),
            False when the output broke or something pending was dropped.
        """
        import select
        import time

        end = time.monotonic() + timeout
        while self._pending and not self.broken:
            left = end - time.monotonic()
            if left <= 0:
                break
            try:
                select.select([], [self._fd], [], left)
            except (OSError, ValueError):
                break
            self._flush()
        whole = not self._pending and not self.broken and not self._stalled
        self._pending.clear()
        if self._restore is not None:
            try:
                os.set_blocking(self._fd, self._restore)
            except OSError:
                pass
            self._restore = None
        return whole

    def _go_dark(self) -> None:
        self.broken = True
        self._pending.clear()
        from ..state._fsutil import point_at_devnull

        point_at_devnull(self._fd)


def cut_utf8(data: bytes, limit: int) -> bytes:
    """The longest prefix of ``data`` of at most ``limit`` bytes that ends on a character
    boundary (``data`` is valid UTF-8)."""
    if len(data) <= limit:
        return data
    end = limit
    # Step back over continuation bytes (10xxxxxx) to the start of the cut character.
    while end > 0 and (data[end] & 0xC0) == 0x80:
        end -= 1
    return data[:end]


@mutable_record
class _Slot:
    name: str
    cap: int
    title: str | None
    decoder: codecs.IncrementalDecoder = field(
        default_factory=lambda: codecs.getincrementaldecoder("utf-8")("replace")
    )
    cleaner: StreamCleaner = field(default_factory=StreamCleaner)
    pending: list[tuple[bytes, bool, bool]] = field(default_factory=list)  # data, forced, plain
    shown: list[bytes] = field(default_factory=list)
    kept: list[bytes] = field(default_factory=list)
    raw_bytes: int = 0
    kept_bytes: int = 0
    dropped: int = 0
    done: bool = False
    header_sent: bool = False
    last: int = 10  # last byte kept (10 = "\n": nothing yet)
    text: str | None = None  # stage_text of a finished stage, decoded once
    text_cut: bool = False
    summary: StageSummary | None = None  # given to finish(), handed to the frame at its end


class OrderedOutput:
    """Declared-order multiplexer for concurrent stages with per-stage and total caps.

    Args:
        sink: where bytes go.
        slots: ``(name, cap_bytes, title)`` per stage, in declared order.
        total_cap: bytes the whole digest may print before it is cut (a loud marker names
            what was cut; cuts land on a UTF-8 boundary).
        frame: when given, each stage's bytes go to ``frame.stage`` and its end to
            ``frame.end`` (:class:`Frame`) instead of to ``sink``, which still gets the
            notices.
    """

    def __init__(self, sink: Sink, slots: list[tuple[str, int, str | None]], total_cap: int,
                 *, transparent: bool = False, keep: bool = True,
                 frame: Frame | None = None) -> None:
        self._sink = sink
        self._frame = frame
        self._transparent = transparent  # `supervise run`: bytes only, no notes or fix-ups
        # keep=False: the text only streams to the sink (a terminal digest); nothing is kept,
        # so a stage may print far more than memory holds (stage_text is then "").
        self._keep_text = keep and not transparent
        self._slots = [_Slot(name, cap, title) for name, cap, title in slots]
        self._head = 0
        self._total_cap = total_cap
        self.written = 0
        self._last = 10
        self._total_cut: list[str] = []
        self.notices: list[str] = []
        """Every notice written (cut marker, deferred results, IN PROGRESS, banner), in order."""

    # -- raw writes --------------------------------------------------------------------------
    def _emit(self, data: bytes, index: int, forced: bool = False, plain: bool = False) -> bytes:
        """Write ``data`` of stage ``index`` within the total cap (``plain``: ASCII with no
        control but LF and TAB, for a frame); return what was actually written."""
        if not data:
            return b""
        if not forced:  # supervisor notes are never cut: they say what is missing
            room = self._total_cap - self.written
            if len(data) > room:
                owner = self._slots[index].name
                if owner not in self._total_cut:
                    self._total_cut.append(owner)
                data = cut_utf8(data, room) if room > 0 else b""
                if not data:
                    self.written = max(self.written, self._total_cap)
                    return b""
        if self._frame is not None:
            self._frame.stage(index, data, plain)
        else:
            self._sink.write(data)
        self.written += len(data)
        self._last = data[-1]
        return data

    def write_notice(self, text: str) -> None:
        """Write a notice (READ-ONLY, IN PROGRESS, a banner) outside any stage, on its own line.

        Notices are never cut by the total cap: they say what the digest is missing.
        """
        data = text.encode("utf-8", "replace")
        if not data or self._transparent:
            return
        self.notices.append(text if text.endswith("\n") else text + "\n")
        if self._last != 10:
            data = b"\n" + data
        if not data.endswith(b"\n"):
            data += b"\n"
        self._sink.write(data)
        self.written += len(data)
        self._last = 10

    # -- stage output ------------------------------------------------------------------------
    def feed(self, index: int, raw: bytes) -> None:
        """Accept raw bytes from stage ``index``; invalid UTF-8 becomes U+FFFD, and text that
        could hide an instruction (escape sequences, controls, bidi and invisible characters:
        :mod:`supervisor._sanitize`) is removed here, where stage text leaves for the sink (the
        model's context or a terminal), however the engine buffered it before.

        Bytes past the stage's cap are counted, never decoded or kept; plain ASCII chunks (the
        common case: no control but LF and TAB) are kept as they come, without a decode and
        re-encode.
        """
        slot = self._slots[index]
        slot.raw_bytes += len(raw)
        if slot.kept_bytes >= slot.cap:
            slot.dropped += len(raw)
            return
        if self._transparent or (not slot.decoder.getstate()[0] and slot.cleaner.plain(raw)):
            self._keep(index, raw, plain=not self._transparent)
        else:
            self._keep(index, slot.cleaner.feed(slot.decoder.decode(raw)).encode("utf-8"))

    def full(self, index: int) -> bool:
        """Whether stage ``index`` has reached its cap: what it prints from now on is only
        counted (:meth:`skip`)."""
        slot = self._slots[index]
        return slot.kept_bytes >= slot.cap

    def skip(self, index: int, count: int) -> None:
        """Count ``count`` bytes stage ``index`` printed past its cap, never seen (the
        engine discarded them off the event loop); the cut notice reports them."""
        slot = self._slots[index]
        slot.raw_bytes += count
        slot.dropped += count

    def _keep(self, index: int, data: bytes, plain: bool = False) -> None:
        slot = self._slots[index]
        if not data:
            return
        room = slot.cap - slot.kept_bytes
        if len(data) > room:
            part = cut_utf8(data, max(room, 0))
            slot.dropped += len(data) - len(part)
            data = part
            if not data:
                return
        if not slot.header_sent and slot.title:
            slot.header_sent = True
            self._keep(index, f"## {slot.title}\n".encode())
        if self._keep_text:
            slot.kept.append(data)
        slot.kept_bytes += len(data)
        slot.last = data[-1]
        if index == self._head:
            shown = self._emit(data, index, plain=plain)
            if self._keep_text:
                slot.shown.append(shown)
        else:
            slot.pending.append((data, False, plain))

    def note(self, index: int, text: str) -> None:
        """Add a one-line supervisor note to stage ``index``'s output (kept in order)."""
        slot = self._slots[index]
        if self._transparent:
            return
        line = ("\n" if slot.last != 10 else "") + text.rstrip("\n") + "\n"
        data = line.encode("utf-8", "replace")
        if self._keep_text:
            slot.kept.append(data)
        slot.kept_bytes += len(data)
        slot.last = 10
        if index == self._head:
            shown = self._emit(data, index, forced=True)
            if self._keep_text:
                slot.shown.append(shown)
        else:
            slot.pending.append((data, True, False))

    def finish(self, index: int, summary: StageSummary | None = None) -> None:
        """Stage ``index`` has ended: flush its decoder (a cut character becomes U+FFFD), add
        the cap marker if it was cut, and advance the live head over finished stages (a
        frame is told each one's end, with its ``summary``: its outcome, None when it never
        started). A second call changes nothing."""
        slot = self._slots[index]
        if slot.done:
            return
        slot.summary = summary
        if not self._transparent:
            tail = slot.cleaner.feed(slot.decoder.decode(b"", final=True)) + slot.cleaner.finish()
            self._keep(index, tail.encode("utf-8"))
            if slot.cleaner.removed:
                self.note(index, removed_note(slot.cleaner.removed, f"stage '{slot.name}' output"))
        if slot.dropped:
            self.note(index, f"{CUT_MARKER}: stage '{slot.name}' printed {slot.raw_bytes} bytes; "
                             f"only the first {slot.cap} are shown (max_output).")
        elif slot.last != 10 and slot.kept_bytes and not self._transparent:
            self._keep(index, b"\n")  # every stage ends on a line break
        slot.done = True
        while self._head < len(self._slots) and self._slots[self._head].done:
            if self._frame is not None:
                ended = self._slots[self._head]
                self._frame.end(self._head, ended.summary, ended.name in self._total_cut)
            self._head += 1
            if self._head < len(self._slots):
                head = self._slots[self._head]
                for chunk, forced, plain in head.pending:
                    shown = self._emit(chunk, self._head, forced, plain)
                    if self._keep_text:
                        head.shown.append(shown)
                head.pending.clear()

    def stage_text(self, index: int) -> str:
        """What stage ``index`` contributed to the digest (after its cap, and after the total
        cap when that cut it), as text."""
        slot = self._slots[index]
        cut = slot.name in self._total_cut
        if slot.done and slot.text is not None and slot.text_cut == cut:
            return slot.text  # decoded once
        chunks = slot.shown if cut else slot.kept
        text = (chunks[0] if len(chunks) == 1 else b"".join(chunks)).decode("utf-8", "replace")
        if slot.done:
            slot.text, slot.text_cut = text, cut
        return text

    def stage_bytes(self, index: int) -> tuple[int, bool]:
        """``(raw bytes received, whether output was cut by the stage cap)``."""
        slot = self._slots[index]
        return slot.raw_bytes, slot.dropped > 0

    def cut_by_total(self, index: int) -> bool:
        """Whether the digest-wide cap cut stage ``index``'s output."""
        return self._slots[index].name in self._total_cut

    def total_cut_notice(self) -> str | None:
        """The loud marker for the total cap, or None when nothing was cut by it."""
        if not self._total_cut:
            return None
        names = ", ".join(f"'{n}'" for n in self._total_cut)
        return (f"{CUT_MARKER}: the digest reached its {self._total_cap}-byte limit (max_output); "
                f"output of stage(s) {names} is missing from that point on. Treat what is "
                f"missing as unread: run the stage directly to see it.")
