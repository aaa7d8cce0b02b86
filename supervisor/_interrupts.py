"""A TERM, INT or HUP ends a verb quietly: a status, never a traceback.

Python's own ``SIGINT`` handler raises ``KeyboardInterrupt`` wherever the main thread is: in
the middle of an import (a traceback from ``importlib._bootstrap``), inside an event loop's
task group (an ``ExceptionGroup`` traceback), in a weakref callback or a ``__del__`` (printed
as "Exception ignored in ..." and the program goes on). ``SIGTERM``/``SIGHUP`` kill by default,
which is quiet but skips every cleanup. :func:`leave_quietly_on_signals` replaces the three
handlers, once, as the first thing the console entry does:

- a signal while an event loop runs is handed to the engine
  (``supervisor.engine._signals.note_early_signal``), which ends the digest through its abort
  path (the truncation banner) and returns ``128 + n``;
- anywhere else the handler raises ``SystemExit(status)``: ``0`` for the harness-facing verbs
  (``hook``, ``nudge``, ``bridge``: a non-zero exit drops the session's context),
  ``128 + n`` for the terminal verbs (130 for Ctrl-C, 143 for ``SIGTERM``: a shell's
  convention), so ``finally`` blocks and ``with`` exits still run;
- an exit swallowed on the way (a library that catches it, a weakref callback that "ignores"
  it) is still an exit: :func:`leaving` tells the top-level handler, and a second signal, or
  the unraisable hook, ends the process at once with the same status (``os._exit``).

The signals are unblocked after the handlers are in place: a mask inherited from the parent
would otherwise hold them pending for the whole run (and a signal sent during the
interpreter's start, while they were blocked, arrives here, where it is handled).

What stays outside: the interpreter's own start (``site``) runs before any code of ours (the
installed launcher, ``bin/supervise``, imports only ``supervisor._main``); a Ctrl-C there is
Python's (docs/cli.md, "A signal at any moment").

Stdlib only: on the hook's hot path.
"""

from __future__ import annotations

import os
import sys

TYPE_CHECKING = False  # not `typing.TYPE_CHECKING`: importing typing costs the hot path
if TYPE_CHECKING:
    import signal
else:
    try:  # CPython's `_signal`, which `signal` wraps: the same functions and numbers, without
        import _signal as signal  # the three IntEnums `signal` builds at import, every run
    except ImportError:
        import signal

SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)
"""The signals that ask a verb to stop."""

_LEAVING: list[int] = []
"""The signal that asked this process to leave (set once, by the handler)."""

_HANDLER: list[object] = []
"""The handler installed last (a second call with the same status and it still in place is a
no-op)."""

_STATUS: list[int | None] = [None]
"""The status a harness-facing verb leaves with (0); None: ``128 + n`` (a terminal verb)."""


_HOLD: list[bool] = [False]
"""Whether a signal is held (:func:`hold_signals`) instead of ending the process."""
_HELD: list[int] = []
"""The first signal held since :func:`hold_signals`."""


def hold_signals() -> None:
    """From now until :func:`release_held`, a TERM, INT or HUP is remembered instead of ending
    the process: the CLI has started stages before the engine listens for signals
    (``supervisor.engine._launch.prestart``), and the engine turns the signal into the
    digest's abort (its banner, its status) as soon as it listens."""
    _HOLD[0] = True


def release_held() -> int | None:
    """Stop holding signals (:func:`hold_signals`); the first one held meanwhile, or None."""
    _HOLD[0] = False
    return _HELD.pop() if _HELD else None


def exit_status(signum: int) -> int:
    """The exit status for leaving on ``signum``: 0 for a harness-facing verb, else
    ``128 + signum`` (130 for ``SIGINT``, 143 for ``SIGTERM``, 129 for ``SIGHUP``)."""
    fixed = _STATUS[0]
    return fixed if fixed is not None else 128 + signum


def leaving() -> int | None:
    """The signal number that asked this process to leave, or None.

    The handler runs wherever the main thread is, and a library may catch the ``SystemExit``
    it raised and raise its own error instead (pydantic-core reports it as ``SchemaError:
    ... SystemExit: 0``). Whatever reaches the top level after that is a request to stop,
    not an internal error."""
    return _LEAVING[0] if _LEAVING else None


def leave_quietly_on_signals(status: int | None) -> None:
    """Install the quiet handlers for ``SIGTERM``, ``SIGINT`` and ``SIGHUP`` (module docstring).

    Args:
        status: the exit status on a signal; ``None`` means ``128 + n`` (terminal verbs), ``0``
            for the harness-facing verbs.

    Never raises: a handler that cannot be installed (not the main thread) is left as it was.
    """
    if _HANDLER and _STATUS[0] == status and signal.getsignal(signal.SIGTERM) is _HANDLER[0]:
        return  # already in place: the console script's import, then entry(), then the verb
    _STATUS[0] = status

    def leave(signum: int, frame: object) -> None:
        if _HOLD[0]:  # stages run and the engine is loading: it will abort the digest
            if not _HELD:
                _HELD.append(signum)
            return
        # a module may still be importing when the signal lands: its attributes may be missing
        note = getattr(sys.modules.get("supervisor.engine._signals"), "note_early_signal", None)
        if note is not None and note(signum):
            return  # inside the event loop: the digest ends through its abort path instead
        if _LEAVING:
            os._exit(exit_status(_LEAVING[0]))  # a second request: the first exit was swallowed
        _LEAVING.append(signum)
        raise SystemExit(exit_status(signum))

    previous = sys.unraisablehook

    def unraisable(info: sys.UnraisableHookArgs) -> None:
        # The handler ran while Python was inside a weakref callback, a ``__del__``, a gc or
        # an atexit callback: an exception raised there is "ignored" (printed with a
        # traceback) and the program goes on. We were asked to stop: leave now, quietly.
        # Nothing was committed (delivery records are written only after a whole envelope),
        # and the kernel drops our locks.
        if _LEAVING:
            os._exit(exit_status(_LEAVING[0]))
        previous(info)

    if getattr(sys.unraisablehook, "__qualname__", "") != unraisable.__qualname__:
        sys.unraisablehook = unraisable
    _HANDLER[:] = [leave]
    for sig in SIGNALS:
        try:
            signal.signal(sig, leave)
        except (OSError, ValueError):
            pass
    try:
        signal.pthread_sigmask(signal.SIG_UNBLOCK, SIGNALS)
    except (AttributeError, OSError, ValueError):
        pass
