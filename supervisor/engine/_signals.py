"""Signals become an abort, not a death: shared by the terminal verbs and a session start."""

from __future__ import annotations

import signal

from . import _loop
from .._interrupts import SIGNALS as HANDLED_SIGNALS  # (TERM, INT, HUP)

TYPE_CHECKING = False  # not typing's: a session start runs this module
if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable
    from typing import TypeVar

    T = TypeVar("T")


class Aborter:
    """An abort event set by SIGTERM/SIGINT/SIGHUP, remembering the first signal."""

    def __init__(self) -> None:
        self.event = _loop.Event()
        self.signum: int | None = None

    def reason(self) -> str:
        """The first signal's name (``'SIGTERM'``), or ``'signal'``."""
        if self.signum is None:
            return "signal"
        try:
            return signal.Signals(self.signum).name
        except ValueError:
            return f"signal {self.signum}"


async def with_signals(body: Callable[[Aborter], Awaitable[T]],
                       signals: tuple[int, ...] = HANDLED_SIGNALS) -> tuple[T, Aborter]:
    """Run ``body(aborter)`` while SIGTERM/SIGINT/SIGHUP (or ``signals``: ``supervise run``'s
    engine path adds QUIT and ALRM, which it forwards) set ``aborter.event`` instead of
    killing us (design rule 15: the same path as the deadline). Returns the body's result and
    the aborter (``aborter.signum`` is the signal received, or None).

    The three handlers are ours for the body's whole run and the ones found are put back
    after it, with no moment in between at the default action (a signal receiver that set
    ``SIG_DFL`` when it closed, while the task group was still finishing, let a TERM there
    kill a hook by signal). The handler runs in the main thread between two bytecodes: the
    C-level handler has written to the loop's wake-up descriptor
    (:func:`signal.set_wakeup_fd`), so a ``poll`` interrupted and retried (PEP 475) returns,
    and the handler only queues the abort for the loop (:meth:`_loop._Loop.call_from_signal`),
    never touching a task mid-step. A signal that came while the loop was starting
    (:func:`note_early_signal`) aborts at once."""
    aborter = Aborter()
    loop = _loop.current_loop()

    def on_signal(signum: int, frame: object) -> None:
        if aborter.signum is None:
            aborter.signum = int(signum)
        loop.call_from_signal(aborter.event.set)

    before: dict[signal.Signals, object] = {}  # signal -> the handler found
    wakeup: int | None = None
    try:
        try:
            wakeup = signal.set_wakeup_fd(loop.wake_w, warn_on_full_buffer=False)
        except ValueError:  # not the main thread: signals stay as they were
            pass
        for number in signals:
            try:
                before[signal.Signals(number)] = signal.signal(number, on_signal)
            except (OSError, ValueError):  # not the main thread: signals stay as they were
                pass
        early = take_early_signal()  # one that came while the loop was starting
        if early is not None:
            aborter.signum = early
            aborter.event.set()
        return await body(aborter), aborter
    finally:
        # put back what was there (the hook's quiet exit), so a signal while the result is
        # written is not a death by signal; one before the loop stops: run_with_signals
        for number, handler in before.items():
            try:
                signal.signal(number, handler if handler is not None else signal.SIG_DFL)  # type: ignore[arg-type]
            except (OSError, ValueError, TypeError):
                pass
        if wakeup is not None:
            try:
                signal.set_wakeup_fd(wakeup)
            except ValueError:
                pass


def run_with_signals(body: Callable[[Aborter], Awaitable[T]],
                     signals: tuple[int, ...] = HANDLED_SIGNALS) -> tuple[T, Aborter]:
    """``_loop.run(with_signals, body)`` (the engine's loop in this thread), then act on a
    signal that came after
    :func:`with_signals` put the quiet handler back but before the event loop had stopped.

    The quiet handler (:mod:`supervisor._interrupts`) only records a signal while a loop runs
    (raising there would tear through the loop's shutdown), so one landing in that window was
    recorded and never acted on: ``supervise digest`` then exited 0 instead of 143. Now it is
    acted on as if it came just after the loop: the handler in place is called (it raises
    ``SystemExit``: ``128 + n`` for a terminal verb, 0 for the hook). Returns what
    :func:`with_signals` returned.

    Raises:
        SystemExit: a signal came in that window (from the quiet handler).
    """
    try:
        return _loop.run(with_signals, body, signals)
    finally:
        late = take_early_signal()
        if late is not None:
            _act_on(late)


def _act_on(signum: int) -> None:
    """Deliver ``signum`` to the handler in place now, synchronously: a Python handler is
    called (the quiet one raises ``SystemExit``); the default action is taken by raising the
    signal; an ignored signal is dropped."""
    handler = signal.getsignal(signum)
    if callable(handler):
        handler(signum, None)
    elif handler == signal.SIG_DFL:
        signal.raise_signal(signum)


_early: list[int] = []


def note_early_signal(signum: int) -> bool:
    """Called from a quiet-exit signal handler: when an event loop is running in this thread,
    raising there would tear through its task groups (an ``ExceptionGroup ... SystemExit``
    traceback and "coroutine was never awaited" warnings, issue 10 example 7). Then the
    signal is remembered instead, and :func:`with_signals` turns it into an abort as soon as
    it starts listening (or :func:`run_with_signals` acts on it once the loop has stopped).
    Returns True when it was remembered (the caller must not raise)."""
    import sys

    # The engine's loop, or an asyncio one (the MCP server's). asyncio may be half imported
    # when the signal lands (``asyncio.events`` not yet set: an AttributeError here became
    # "internal error" on stderr): only a finished import can run a loop, and then
    # ``asyncio.events`` is in sys.modules.
    ours = sys.modules.get("supervisor.engine._loop")
    events = sys.modules.get("asyncio.events")
    running = getattr(events, "_get_running_loop", None)
    if not (getattr(ours, "running", lambda: False)()
            or (running is not None and running() is not None)):
        return False
    if not _early:
        _early.append(signum)
    return True


def take_early_signal() -> int | None:
    """The signal :func:`note_early_signal` remembered, or one held while the first stages ran
    before the engine listened (:func:`supervisor._interrupts.hold_signals`, which this ends);
    once, or None."""
    from .._interrupts import release_held

    held = release_held()
    return _early.pop() if _early else held
