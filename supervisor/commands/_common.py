"""Helpers shared by the terminal verbs: signals become an abort, not a death."""

from __future__ import annotations

import signal
from collections.abc import Awaitable, Callable
from typing import TypeVar

import anyio

T = TypeVar("T")

HANDLED_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)


class Aborter:
    """An abort event set by SIGTERM/SIGINT/SIGHUP, remembering the first signal."""

    def __init__(self) -> None:
        self.event = anyio.Event()
        self.signum: int | None = None

    def reason(self) -> str:
        """The first signal's name (``'SIGTERM'``), or ``'signal'``."""
        if self.signum is None:
            return "signal"
        try:
            return signal.Signals(self.signum).name
        except ValueError:
            return f"signal {self.signum}"


async def with_signals(body: Callable[[Aborter], Awaitable[T]]) -> tuple[T, Aborter]:
    """Run ``body(aborter)`` while SIGTERM/SIGINT/SIGHUP set ``aborter.event`` instead of
    killing us (design rule 15: the same path as the deadline). Returns the body's result and
    the aborter (``aborter.signum`` is the signal received, or None)."""
    aborter = Aborter()
    async with anyio.create_task_group() as tg:
        async def listen() -> None:
            with anyio.open_signal_receiver(*HANDLED_SIGNALS) as signals:
                async for signum in signals:
                    if aborter.signum is None:
                        aborter.signum = int(signum)
                    aborter.event.set()

        tg.start_soon(listen)
        await anyio.sleep(0)  # let the receiver install its handlers before work starts
        result = await body(aborter)
        tg.cancel_scope.cancel()
    return result, aborter
