"""The engine's event loop: structured concurrency on ``epoll`` (``poll`` elsewhere), stdlib only.

A digest needs a handful of primitives: tasks in task groups, cancel scopes with deadlines
and shields, events, sleeps, waits for a readable or writable descriptor, a capacity limiter
and a call into a worker thread. This module is those primitives and the loop that runs
them, with anyio's names and semantics (level-triggered cancellation: inside a cancelled
scope every wait raises :class:`Cancelled` until the scope is left; a shielded scope keeps
an outer cancellation out; a task group waits for its tasks and cancels them when one
fails), so the engine's code reads as it would under anyio. Importing it costs what
``select`` and ``heapq`` cost: no ``asyncio``, ``ssl``, ``socket``, ``logging``,
``threading`` or ``typing`` (the asyncio backend anyio runs on imports all of them, about
half of a session start's CPU).

:func:`run` runs a coroutine function to its end on a new loop in the calling thread and
returns its result. One loop runs per thread at a time; an embedding program runs the engine
through :func:`supervisor.engine.run_digest`, which runs this loop in a worker thread of its
own anyio loop.
"""

from __future__ import annotations

import heapq
import os
import select
import time
from collections import deque

import _thread

TYPE_CHECKING = False  # not typing's: this module is on the session start's path
if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable, Coroutine, Generator
    from typing import Any, TypeVar

    T = TypeVar("T")

__all__ = ("CancelScope", "Cancelled", "CapacityLimiter", "Event", "TaskGroup", "WouldBlock",
           "call_soon_threadsafe", "checkpoint", "create_task_group", "current_time",
           "move_on_after", "move_on_at", "run", "run_sync_in_thread", "running", "sleep",
           "wait_readable", "wait_writable")

current_time = time.monotonic
"""The loop's clock: ``time.monotonic`` seconds (as asyncio's, so a deadline computed before
the loop started, :mod:`supervisor.engine._launch`, keeps its meaning)."""

_INF = float("inf")
_local = _thread._local()
_workers = [0]
_workers_lock = _thread.allocate_lock()


def workers() -> int:
    """Worker threads of :func:`run_sync_in_thread` running now, abandoned ones included
    (a fork while one runs copies only the calling thread)."""
    return _workers[0]


class Cancelled(BaseException):
    """Raised inside a cancelled scope at a wait (a checkpoint); caught by the scope that was
    cancelled when it is left. A ``BaseException``, so ``except Exception`` lets it pass."""


class WouldBlock(Exception):
    """:meth:`CapacityLimiter.acquire_on_behalf_of_nowait` found no free token."""


class _Trap:
    """What a task yields to the loop: ``park(task)`` makes the loop resume it later (or at
    once); ``cancellable`` says whether a cancellation may end the wait."""

    __slots__ = ("park", "cancellable")

    def __init__(self, park: Callable[[_Task], None], cancellable: bool = True) -> None:
        self.park, self.cancellable = park, cancellable

    def __await__(self) -> Generator[_Trap, Any, Any]:
        return (yield self)


class _Task:
    __slots__ = ("coro", "loop", "scope", "group", "unpark", "waiting", "done")

    def __init__(self, coro: Coroutine[Any, Any, Any], loop: _Loop, scope: CancelScope,
                 group: TaskGroup | None) -> None:
        self.coro, self.loop, self.scope, self.group = coro, loop, scope, group
        self.unpark: Callable[[], None] | None = None
        """While the task waits: undoes what its wait registered (a timer, a descriptor, a
        place in a queue), so a cancellation can resume it at once; None for a wait no
        cancellation ends."""
        self.waiting = False
        self.done = False
        scope._tasks.add(self)


def _current() -> _Task:
    loop = getattr(_local, "loop", None)
    if loop is None or loop.task is None:
        raise RuntimeError("no engine event loop is running in this thread")
    task: _Task = loop.task
    return task


def running() -> bool:
    """True when this thread runs a loop of this module."""
    return getattr(_local, "loop", None) is not None


class CancelScope:
    """A region of a task that can be cancelled, by :meth:`cancel` or at ``deadline``
    (:func:`current_time` seconds); ``shield=True`` keeps an outer scope's cancellation out
    of it. Cancelling a scope before it is entered cancels it on entry."""

    def __init__(self, *, deadline: float = _INF, shield: bool = False) -> None:
        self.deadline, self.shield = deadline, shield
        self.cancel_called = False
        self.cancelled_caught = False
        self._parent: CancelScope | None = None
        self._children: set[CancelScope] = set()
        self._tasks: set[_Task] = set()
        self._loop: _Loop | None = None
        self._timer: list[Any] | None = None
        self._active = False

    def __enter__(self) -> CancelScope:
        task = _current()
        self._enter(task)
        return self

    def _enter(self, task: _Task) -> None:
        parent = task.scope
        self._parent, self._loop, self._active = parent, task.loop, True
        parent._children.add(self)
        parent._tasks.discard(task)
        self._tasks.add(task)
        task.scope = self
        if self.deadline != _INF and not self.cancel_called:
            if self.deadline <= current_time():
                self.cancel_called = True
            else:
                self._timer = task.loop.call_at(self.deadline, self.cancel)

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None,
                 tb: object) -> bool:
        task = _current()
        self._exit(task)
        if isinstance(exc, Cancelled) and self.cancel_called:
            self.cancelled_caught = True
            return True
        return False

    def _exit(self, task: _Task) -> None:
        parent = self._parent
        assert parent is not None and task.scope is self, "cancel scopes exited out of order"
        self._active = False
        if self._timer is not None:
            self._timer[2] = None
            self._timer = None
        self._tasks.discard(task)
        parent._children.discard(self)
        parent._tasks.add(task)
        task.scope = parent

    def cancel(self) -> None:
        """Cancel this scope: every wait inside it (outside a shielded scope within it) ends
        with :class:`Cancelled`, now and until the scope is left. Idempotent; safe to call
        from any task of the loop, or before the scope is entered."""
        if self.cancel_called:
            return
        self.cancel_called = True
        if self._timer is not None:
            self._timer[2] = None
            self._timer = None
        if self._active:
            self._deliver()

    def _deliver(self) -> None:
        stack = [self]
        while stack:
            scope = stack.pop()
            for task in list(scope._tasks):
                task.loop.interrupt(task)
            stack.extend(child for child in scope._children if not child.shield)


def _cancelled(scope: CancelScope | None) -> bool:
    """Whether a wait in ``scope`` must raise: it or an enclosing scope up to the first
    shielded one is cancelled."""
    while scope is not None:
        if scope.cancel_called:
            return True
        if scope.shield:
            return False
        scope = scope._parent
    return False


def move_on_at(deadline: float, *, shield: bool = False) -> CancelScope:
    """A scope cancelled at ``deadline`` (:func:`current_time` seconds)."""
    return CancelScope(deadline=deadline, shield=shield)


def move_on_after(delay: float, *, shield: bool = False) -> CancelScope:
    """A scope cancelled ``delay`` seconds from now."""
    return CancelScope(deadline=current_time() + delay, shield=shield)


class TaskGroup:
    """Tasks started with :meth:`start_soon` run concurrently with the body of ``async with``;
    leaving the body waits for all of them. A task that raises cancels the group (its other
    tasks get :class:`Cancelled`); the error is raised from the ``async with`` (several: a
    ``BaseExceptionGroup``). ``cancel_scope`` cancels the body and every task."""

    def __init__(self) -> None:
        self.cancel_scope = CancelScope()
        self._children: set[_Task] = set()
        self._errors: list[BaseException] = []
        self._host: _Task | None = None
        self._active = False
        self._waiting = False

    async def __aenter__(self) -> TaskGroup:
        self._host = _current()
        self.cancel_scope._enter(self._host)
        self._active = True
        return self

    def start_soon(self, fn: Callable[..., Awaitable[Any]], *args: Any) -> None:
        """Start ``fn(*args)`` as a task of this group, at the loop's next turn.

        Raises:
            RuntimeError: the group is not active (its ``async with`` has ended).
        """
        if not self._active or self._host is None:
            raise RuntimeError("this task group is not active")
        loop = self._host.loop
        task = _Task(fn(*args), loop, self.cancel_scope, self)  # type: ignore[arg-type]
        self._children.add(task)
        loop.ready.append((task, None, None))

    def _child_done(self, task: _Task, exc: BaseException | None) -> None:
        self._children.discard(task)
        if exc is not None and not isinstance(exc, Cancelled):
            self._errors.append(exc)
            self.cancel_scope.cancel()
        if not self._children and self._waiting and self._host is not None:
            self._waiting = False
            self._host.loop.resume(self._host)

    async def __aexit__(self, kind: type[BaseException] | None, exc: BaseException | None,
                        tb: object) -> bool:
        host = self._host
        assert host is not None
        if exc is not None and not isinstance(exc, Cancelled):
            self.cancel_scope.cancel()
        if self._children:
            def park(task: _Task) -> None:
                self._waiting = True
            await _Trap(park, cancellable=False)  # the tasks are cancelled with the scope
        self._active = False
        errors = self._errors
        if errors:
            self.cancel_scope._exit(host)
            if exc is not None and not isinstance(exc, Cancelled):
                errors = [exc, *errors]
            if len(errors) == 1:
                if errors[0] is exc:
                    return False
                raise errors[0]
            raise BaseExceptionGroup("errors in the engine's tasks", errors)
        return self.cancel_scope.__exit__(kind, exc, tb)


def create_task_group() -> TaskGroup:
    """A new :class:`TaskGroup` (anyio's name)."""
    return TaskGroup()


class Event:
    """A flag tasks can wait for; :meth:`set` wakes every waiter."""

    __slots__ = ("_set", "_waiters")

    def __init__(self) -> None:
        self._set = False
        self._waiters: list[_Task] = []

    def set(self) -> None:
        if self._set:
            return
        self._set = True
        waiters, self._waiters = self._waiters, []
        for task in waiters:
            task.loop.resume(task)

    def is_set(self) -> bool:
        return self._set

    async def wait(self) -> None:
        """Return once the event is set (a checkpoint when it already is)."""
        if self._set:
            await checkpoint()
            return

        def park(task: _Task) -> None:
            self._waiters.append(task)
            task.unpark = lambda: self._waiters.remove(task)
        await _Trap(park)


class CapacityLimiter:
    """At most ``total_tokens`` borrowers at once (``math.inf``: no limit); first come, first
    served."""

    def __init__(self, total_tokens: float) -> None:
        self.total_tokens = total_tokens
        self._borrowers: set[object] = set()
        self._waiters: deque[tuple[_Task, object]] = deque()

    def acquire_on_behalf_of_nowait(self, borrower: object) -> None:
        """Take a token for ``borrower`` now.

        Raises:
            WouldBlock: none is free (or others wait for one first).
            RuntimeError: ``borrower`` holds one already.
        """
        if borrower in self._borrowers:
            raise RuntimeError("this borrower already holds a token")
        if self._waiters or len(self._borrowers) >= self.total_tokens:
            raise WouldBlock
        self._borrowers.add(borrower)

    async def acquire_on_behalf_of(self, borrower: object) -> None:
        """Take a token for ``borrower``, waiting (cancellably) for one."""
        await checkpoint()
        try:
            self.acquire_on_behalf_of_nowait(borrower)
            return
        except WouldBlock:
            pass
        entry: tuple[_Task, object]

        def park(task: _Task) -> None:
            nonlocal entry
            entry = (task, borrower)
            self._waiters.append(entry)
            task.unpark = lambda: self._waiters.remove(entry)
        await _Trap(park)

    def release_on_behalf_of(self, borrower: object) -> None:
        """Give ``borrower``'s token back; the first waiter gets it."""
        self._borrowers.remove(borrower)
        while self._waiters and len(self._borrowers) < self.total_tokens:
            task, waiter = self._waiters.popleft()
            self._borrowers.add(waiter)
            task.unpark = None
            task.loop.resume(task)


async def checkpoint() -> None:
    """Let the other ready tasks run; raises :class:`Cancelled` in a cancelled scope."""
    await _Trap(_ready_again)


def _ready_again(task: _Task) -> None:
    task.loop.resume(task)


async def sleep(seconds: float) -> None:
    """Wait ``seconds`` (cancellably); ``0`` is a checkpoint."""
    if seconds <= 0:
        await checkpoint()
        return

    def park(task: _Task) -> None:
        timer = task.loop.call_at(current_time() + seconds, task.loop.resume, task)
        task.unpark = lambda: timer.__setitem__(2, None)
    await _Trap(park)


async def wait_readable(fd: int) -> None:
    """Wait (cancellably) until ``fd`` is readable, at its end, or in error."""
    await _Trap(lambda task: task.loop.watch_fd(task, fd, 0))


async def wait_writable(fd: int) -> None:
    """Wait (cancellably) until ``fd`` is writable or in error."""
    await _Trap(lambda task: task.loop.watch_fd(task, fd, 1))


async def run_sync_in_thread(fn: Callable[..., T], *args: Any,
                             abandon_on_cancel: bool = False) -> T:
    """``fn(*args)`` in a new worker thread; its result, or its exception raised here. With
    ``abandon_on_cancel`` a cancellation returns at once and the thread's result is
    dropped when it comes; without it the wait is not cancellable."""
    outcome: list[Any] = []

    def park(task: _Task) -> None:
        loop = task.loop
        state = [True]  # still wanted

        def finished() -> None:
            if state[0]:
                state[0] = False
                loop.resume(task)

        def worker() -> None:
            try:
                outcome.append((True, fn(*args)))
            except BaseException as err:  # handed to the waiting task
                outcome.append((False, err))
            finally:
                with _workers_lock:
                    _workers[0] -= 1
            loop.call_soon_threadsafe(finished)

        if abandon_on_cancel:
            task.unpark = lambda: state.__setitem__(0, False)
        with _workers_lock:
            _workers[0] += 1
        try:
            _thread.start_new_thread(worker, ())
        except BaseException:
            with _workers_lock:
                _workers[0] -= 1
            raise
    await _Trap(park, cancellable=abandon_on_cancel)
    ok, value = outcome[0]
    if not ok:
        raise value
    return value  # type: ignore[no-any-return]


def call_soon_threadsafe(fn: Callable[..., object], *args: Any) -> None:
    """Call ``fn(*args)`` on the loop running in this thread (for a signal handler).

    Raises:
        RuntimeError: no loop runs in this thread.
    """
    loop = getattr(_local, "loop", None)
    if loop is None:
        raise RuntimeError("no engine event loop is running in this thread")
    loop.call_soon_threadsafe(fn, *args)


def current_loop() -> _Loop:
    """The loop running in this thread (to hand to another thread for
    :meth:`_Loop.call_soon_threadsafe`).

    Raises:
        RuntimeError: none runs.
    """
    loop = getattr(_local, "loop", None)
    if loop is None:
        raise RuntimeError("no engine event loop is running in this thread")
    return loop  # type: ignore[no-any-return]


_IN = select.POLLIN | select.POLLPRI
_OUT = select.POLLOUT
_DONE = select.POLLHUP | select.POLLERR | select.POLLNVAL


class _Loop:
    def __init__(self) -> None:
        self.ready: deque[tuple[_Task, Any, BaseException | None]] = deque()
        self.timers: list[list[Any]] = []  # [when, seq, callback or None, args]
        self.seq = 0
        self.epoll = hasattr(select, "epoll")  # a wait costs O(1), not O(descriptors)
        self.poll: Any = select.epoll() if self.epoll else select.poll()
        self.fds: dict[int, list[_Task | None]] = {}  # fd -> [reader, writer]
        self.task: _Task | None = None
        self.outcome: tuple[Any, BaseException | None] = (None, None)
        self.lock = _thread.allocate_lock()
        self.closed = False
        self.calls: deque[tuple[Callable[..., object], tuple[Any, ...]]] = deque()
        self.wake_r, self.wake_w = os.pipe()
        os.set_blocking(self.wake_r, False)
        os.set_blocking(self.wake_w, False)
        self.poll.register(self.wake_r, _IN)

    def close(self) -> None:
        with self.lock:
            self.closed = True
        if self.epoll:
            self.poll.close()
        for fd in (self.wake_r, self.wake_w):
            try:
                os.close(fd)
            except OSError:
                pass

    # -- scheduling -----------------------------------------------------------------------
    def call_at(self, when: float, fn: Callable[..., object], *args: Any) -> list[Any]:
        self.seq += 1
        entry = [when, self.seq, fn, args]
        heapq.heappush(self.timers, entry)
        return entry

    def call_soon_threadsafe(self, fn: Callable[..., object], *args: Any) -> None:
        """Call ``fn(*args)`` on the loop, from another thread (a worker's result)."""
        with self.lock:  # never a write to the descriptor after close() (it may be reused)
            if self.closed:
                return
            self.calls.append((fn, args))
            try:
                os.write(self.wake_w, b"\0")
            except OSError:  # full: the loop is woken already
                pass

    def call_from_signal(self, fn: Callable[..., object], *args: Any) -> None:
        """Call ``fn(*args)`` on the loop, from a signal handler of the loop's own thread
        (the C-level handler has woken the loop through :func:`signal.set_wakeup_fd`)."""
        self.calls.append((fn, args))

    def resume(self, task: _Task, value: Any = None, exc: BaseException | None = None) -> None:
        """Make a waiting task runnable with ``value`` (or ``exc`` thrown into it)."""
        if not task.waiting:
            return
        task.waiting = False
        task.unpark = None
        self.ready.append((task, value, exc))

    def interrupt(self, task: _Task) -> None:
        """A scope around ``task`` was cancelled: end its wait, if it waits cancellably."""
        unpark = task.unpark
        if not task.waiting or unpark is None or not _cancelled(task.scope):
            return
        task.waiting = False
        task.unpark = None
        unpark()
        self.ready.append((task, None, Cancelled()))

    def watch_fd(self, task: _Task, fd: int, which: int) -> None:
        slots = self.fds.get(fd)
        if slots is None:
            slots = self.fds[fd] = [None, None]
            slots[which] = task
            try:
                self.poll.register(fd, _IN if which == 0 else _OUT)
            except PermissionError:  # epoll refuses a regular file: always ready, as poll says
                del self.fds[fd]
                self.resume(task)
                return
        else:
            if slots[which] is not None:
                raise RuntimeError(f"another task already waits for descriptor {fd}")
            slots[which] = task
            self.poll.modify(fd, (_IN if slots[0] else 0) | (_OUT if slots[1] else 0))

        def unpark() -> None:
            self._unwatch(fd, which)
        task.unpark = unpark

    def _unwatch(self, fd: int, which: int) -> None:
        slots = self.fds.get(fd)
        if slots is None:
            return
        slots[which] = None
        try:
            if slots[0] is None and slots[1] is None:
                del self.fds[fd]
                self.poll.unregister(fd)
            else:
                self.poll.modify(fd, _IN if slots[0] else _OUT)
        except (OSError, KeyError, ValueError):  # closed meanwhile
            self.fds.pop(fd, None)

    # -- running --------------------------------------------------------------------------
    def _step(self, task: _Task, value: Any, exc: BaseException | None) -> None:
        self.task = task
        try:
            if exc is not None:
                trap = task.coro.throw(exc)
            else:
                trap = task.coro.send(value)
        except StopIteration as stop:
            self._finish(task, stop.value, None)
            return
        except BaseException as err:  # the task's end; its group or run() raises it
            self._finish(task, None, err)
            return
        finally:
            self.task = None
        if not isinstance(trap, _Trap):
            self.ready.append((task, None, RuntimeError(
                f"the engine's loop cannot wait for {trap!r} (an asyncio or anyio object)")))
            return
        if trap.cancellable and _cancelled(task.scope):
            self.ready.append((task, None, Cancelled()))
            return
        task.waiting, task.unpark = True, None
        try:
            trap.park(task)
        except BaseException as err:  # the wait could not begin (no thread, a busy fd)
            task.waiting, task.unpark = False, None
            self.ready.append((task, None, err))
            return
        if not trap.cancellable:
            task.unpark = None

    def _finish(self, task: _Task, result: Any, exc: BaseException | None) -> None:
        task.done = True
        task.scope._tasks.discard(task)
        if task.group is not None:
            task.group._child_done(task, exc)
        else:
            self.outcome = (result, exc)

    def run(self, main: _Task) -> Any:
        ready, timers, calls = self.ready, self.timers, self.calls
        ready.append((main, None, None))
        while not main.done:
            for _ in range(len(ready)):
                self._step(*ready.popleft())
            if main.done:
                break
            while timers and timers[0][2] is None:
                heapq.heappop(timers)
            timeout: float
            if ready or calls:
                timeout = 0
            elif timers:  # epoll takes seconds (rounded up to ms), poll milliseconds
                timeout = max(0.0, timers[0][0] - current_time())
                if not self.epoll:
                    timeout = int(timeout * 1000) + 1
            else:
                timeout = -1
            for fd, mask in self.poll.poll(timeout):
                if fd == self.wake_r:
                    try:
                        while os.read(fd, 4096):
                            pass
                    except OSError:
                        pass
                    continue
                slots = self.fds.get(fd)
                if slots is None:
                    continue
                for which, bits in ((0, _IN), (1, _OUT)):
                    waiter = slots[which]
                    if waiter is not None and mask & (bits | _DONE):
                        self._unwatch(fd, which)
                        self.resume(waiter)
            while calls:
                fn, args = calls.popleft()
                fn(*args)
            now = current_time()
            while timers and (timers[0][2] is None or timers[0][0] <= now):
                entry = heapq.heappop(timers)
                fn = entry[2]
                if fn is not None:
                    entry[2] = None
                    fn(*entry[3])
        result, exc = self.outcome
        if exc is not None:
            raise exc
        return result


def run(fn: Callable[..., Coroutine[Any, Any, T]], *args: Any) -> T:
    """Run ``fn(*args)`` on a new loop in this thread until it returns; its result (or its
    exception raised here).

    Raises:
        RuntimeError: a loop of this module already runs in this thread.
    """
    if getattr(_local, "loop", None) is not None:
        raise RuntimeError("the engine's event loop is already running in this thread")
    loop = _Loop()
    root = CancelScope()
    root._active = True
    root._loop = loop
    main = _Task(fn(*args), loop, root, None)
    _local.loop = loop
    try:
        return loop.run(main)  # type: ignore[no-any-return]
    finally:
        _local.loop = None
        loop.close()
