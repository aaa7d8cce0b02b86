"""The terminal verbs' standard streams: output that could not be written is a failure.

``supervise status > /dev/full`` used to end in "internal error: OSError" (exit 3) and
``supervise digest > /dev/full`` in a silent exit 0. The rule now, for every verb that prints
to a person or a program in a terminal (``digest``, ``run``'s JSON, ``status``, ``config``,
``doctor``, ``install``, ``uninstall``, ``--help``, ``--version``):

- the reader left (``EPIPE``: ``supervise config | head -1``): not an error. Output stops,
  the exit status stays what it was (design rule 13);
- anything else (``ENOSPC``: ``/dev/full``; ``EIO``; ``EBADF``; stdout closed when we
  started, ``>&-``): the output is lost. One line on stderr names why, and an exit status 0
  becomes :data:`~supervisor._exitcodes.EXIT_FAILURE` (``run``: 125, its own failure, as GNU
  ``timeout``). A status that already says failure is kept.

Every write to ``sys.stdout`` goes through one :class:`Outlet`, which remembers how the first
failing write failed and drops the rest. Writers that use the descriptor directly (the
digest's :class:`~supervisor.engine._output.StreamSink`) report through :func:`note_failure`.

``sys.stderr`` is made tolerant the same way for every verb: a diagnostic that cannot be
written (``2>/dev/full``, ``2>&-``) is dropped, never a second error (the exit status says
what happened). The harness-facing verbs (``hook``, ``nudge``, ``bridge``) keep their own
stdout handling (:mod:`supervisor.state._delivery`: delivery recorded only after delivery).

Stdlib only and cheap: the hook imports it for stderr.
"""

from __future__ import annotations

import codecs
import io
import os
import sys

_CLOSED = "stdout was closed when supervise started"


class Outlet(io.RawIOBase):
    """A raw, write-only stream over one descriptor that never raises for a write.

    Attributes:
        fd: the descriptor written to.
        reader_left: True once a write met ``EPIPE`` (the reader went away).
        error: why output was lost (one line, e.g. ``"No space left on device (ENOSPC)"``),
            or ``""``; set by the first write that failed otherwise, or at once when the
            descriptor was closed at start and anything is written.
        written: bytes that reached the descriptor.
    """

    def __init__(self, fd: int, closed_at_start: bool = False) -> None:
        super().__init__()
        self.fd = fd
        self.reader_left = False
        self.error = ""
        self.written = 0
        self._closed_at_start = closed_at_start

    def writable(self) -> bool:
        """Always True (a raw stream's protocol)."""
        return True

    def fileno(self) -> int:
        """The descriptor (``sys.stdout.fileno()`` keeps working)."""
        return self.fd

    def isatty(self) -> bool:
        """Whether the descriptor is a terminal (never raises)."""
        try:
            return os.isatty(self.fd)
        except OSError:
            return False

    def write(self, data: bytes | bytearray | memoryview) -> int:  # type: ignore[override]
        """Write all of ``data`` (waiting for room on a non-blocking pipe), or drop it once the
        output failed; always returns ``len(data)``: a failure is remembered, never raised."""
        view = memoryview(data).cast("B")
        size = len(view)
        if self.reader_left or self.error:
            return size
        if self._closed_at_start:
            if size:
                self.error = _CLOSED
            return size
        sent = 0
        while sent < size:
            try:
                sent += os.write(self.fd, view[sent:])
            except InterruptedError:
                continue
            except BlockingIOError:  # a non-blocking pipe: a terminal verb waits for its reader
                import select  # not at the top: the hook imports this module for stderr

                try:
                    select.select([], [self.fd], [])
                except InterruptedError:
                    pass
                except (OSError, ValueError) as err:
                    self._fail(err if isinstance(err, OSError) else OSError(9, str(err)))  # EBADF
                    break
            except OSError as err:
                self._fail(err)
                break
        self.written += sent
        return size

    def _fail(self, err: OSError) -> None:
        if isinstance(err, BrokenPipeError):
            self.reader_left = True
        else:
            from .._errors import describe_os_error

            self.error = describe_os_error(err)
        from ..state._fsutil import point_at_devnull

        point_at_devnull(self.fd)


_stdout: list[Outlet] = []
_failures: list[str] = []


ERRORS = "supervise.bytes-or-escape"
"""The standard streams' encoding error handler (:func:`_bytes_or_escape`)."""


def _bytes_or_escape(err: UnicodeError) -> tuple[str | bytes, int]:
    """Encode what the stream's encoding cannot: a file name's undecodable bytes (lone
    surrogates ``\udc80``-``\udcff``, as ``os.fsdecode`` made them) go out as those bytes,
    like ``ls`` prints them; any other character as a ``\\N`` escape. Before, a project folder
    named ``bad\xff`` or ``PYTHONIOENCODING=ascii`` made ``status`` end in "internal error:
    UnicodeEncodeError"."""
    if not isinstance(err, UnicodeEncodeError):
        raise err
    chunk = err.object[err.start:err.end]
    if all("\udc80" <= c <= "\udcff" for c in chunk):
        return bytes(ord(c) - 0xDC00 for c in chunk), err.end
    return codecs.backslashreplace_errors(err)


codecs.register_error(ERRORS, _bytes_or_escape)


def _wrap(fd: int, stream: object, closed_at_start: bool, line_buffering: bool) -> Outlet:
    outlet = Outlet(fd, closed_at_start)
    encoding = getattr(stream, "encoding", None) or "utf-8"
    errors = ERRORS
    text = io.TextIOWrapper(io.BufferedWriter(outlet),  # type: ignore[type-var]
                            encoding=encoding, errors=errors,
                            line_buffering=line_buffering, write_through=fd == 2)
    setattr(sys, "stdout" if fd == 1 else "stderr", text)
    return outlet


def guard_stderr() -> None:
    """Make ``sys.stderr`` drop what it cannot write instead of raising (every verb)."""
    stream = sys.stderr
    if stream is None or isinstance(getattr(stream, "buffer", None), io.BufferedWriter) and \
            isinstance(getattr(stream.buffer, "raw", None), Outlet):
        return
    try:
        stream.flush()
    except (OSError, ValueError):
        pass
    _wrap(2, stream, False, True)


def guard_stdout(closed_at_start: bool = False) -> Outlet:
    """Put ``sys.stdout`` behind an :class:`Outlet` (the terminal verbs) and return it.

    Args:
        closed_at_start: fd 1 was closed when the process started (``>&-``) and now points at
            ``/dev/null``: any output is lost, and that is the failure reported.
    """
    stream = sys.stdout
    try:
        stream.flush()
        line_buffering = bool(stream.line_buffering)
    except (OSError, ValueError, AttributeError):
        line_buffering = False
    outlet = _wrap(1, stream, closed_at_start, line_buffering)
    _stdout[:] = [outlet]
    return outlet


def note_failure(why: str) -> None:
    """Record that output written to fd 1 another way (the digest's sink) was lost."""
    if why and why not in _failures:
        _failures.append(why)


def stdout_closed_at_start() -> bool:
    """True when fd 1 was closed as the process started (its output goes nowhere)."""
    return bool(_stdout) and _stdout[0]._closed_at_start


def output_failure() -> str:
    """Why the output was lost, in one line, after flushing ``sys.stdout``; ``""`` when it
    was written (or the reader left, which is not a failure)."""
    try:
        sys.stdout.flush()
    except (OSError, ValueError) as err:  # not an Outlet (a test replaced it): say why
        if not isinstance(err, BrokenPipeError):
            from .._errors import describe_os_error

            note_failure(describe_os_error(err) if isinstance(err, OSError) else str(err))
    if _stdout and _stdout[0].error:
        note_failure(_stdout[0].error)
    return "; ".join(_failures)
