"""The digest engine: concurrent bounded stages, declared-order streaming, one deadline.

Public entry points: :func:`run_digest` (a whole digest) and :func:`run_command` (bound one
command tree, ``supervise run``). Both are async (anyio) so an extension bridge or any other
program can embed, cancel and observe them; they run the engine on its own event loop
(:mod:`supervisor.engine._loop`) in a worker thread. The CLI runs the same coroutines,
:func:`digest` and :func:`command`, on that loop in its main thread
(:func:`supervisor.engine._signals.run_with_signals`): a session start imports neither anyio
nor asyncio. One stage's life is in :mod:`supervisor.engine._stage`.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Collection
from pathlib import Path

TYPE_CHECKING = False  # not typing's: a session start runs this module

from .._record import replace
from . import _banner, _cgroup, _deferred, _loop, _reaper, _spawn, _stagelog, _tree
from .._errors import StateError
from ..config._context import SessionContext
from ._output import ChunkSink, Frame, OrderedOutput, Sink
from ..config._plan import DigestPlan, StagePlan, as_plan, unmet
from ..state._project import ensure_state_dir
from ..state._statedir import link_notice, take_notices
from ._results import DigestResult, StageResult
from ._launch import Prestart, stage_argv, stage_env
from ._reaper import DRAIN_RESERVE, KILL_MARGIN, KILL_WAIT
from ._stage import DigestRun, run_stage

if TYPE_CHECKING:
    from collections.abc import Awaitable
    from typing import Any, TypeVar

    import anyio

    from ..config._schema import DigestConfig

    T = TypeVar("T")

__all__ = ("DigestResult", "StageResult", "command", "digest", "run_command", "run_digest",
           "stage_argv", "stage_env")


async def run_digest(config: DigestConfig | DigestPlan, context: SessionContext, *, sink: Sink | None = None,
                     only: Collection[str] | None = None, abort: anyio.Event | None = None,
                     abort_reason: str | Callable[[], str] = "signal",
                     rerun_hint: str | None = None,
                     on_stage: Callable[[str, StageResult | None], None] | None = None,
                     keep_output: bool = True, prestart: Prestart | None = None,
                     frame: Frame | None = None) -> DigestResult:
    """Run a digest: every stage concurrently, output in declared order, one deadline.

    Args:
        config: the digest (stages, ``budget`` and ``grace`` in seconds, ``max_output`` bytes).
        context: the session context passed to every stage as ``SUPERVISE_*``.
        sink: where the text goes as it streams; kept in memory only when None.
        only: names of the stages to run (a re-emit); the others are ``skipped``. A stage
            whose ``when`` condition excludes ``context.source``/``context.harness`` is
            ``skipped`` too (:func:`supervisor.config._plan.unmet`); it counts as completed.
        abort: when set, the digest ends as if its budget ran out (a signal to the
            supervisor): running stages are killed, a banner is printed.
        abort_reason: how the banner names an abort (e.g. ``"SIGTERM"``), or a callable
            returning it, called when the abort happens.
        rerun_hint: the exact command the banner tells the user to re-run with (without the
            ``--budget`` part, which the banner adds).
        on_stage: observer called as ``on_stage(name, None)`` when a stage starts and
            ``on_stage(name, result)`` when it ends (live progress, bridges' events). It runs
            in the caller's event loop while the engine waits for it: keep it quick and never
            raise from it. (``sink.write`` is called from the engine's worker thread.)
        keep_output: False when the caller needs only what streamed to ``sink`` (a terminal
            digest): no text is kept, so memory stays flat whatever the stages print, and the
            result's ``text`` and each stage's ``output`` are empty.
        prestart: the stages :func:`supervisor.engine._launch.prestart` started before the
            event loop for this same digest, context and ``only`` (the CLI's built-in stages,
            forked): the engine takes them over, and the digest's clock starts at
            ``prestart.t0``. A stage there that this digest would not start first is killed.
        frame: when given (:class:`supervisor.engine._output.Frame`), the digest is written
            to it as it runs, told which stage each byte is of (``sink`` is then unused):
            ``frame.begin`` gets the stages in declared order first, as ``(name, None)`` for a
            stage run live and ``(name, "skipped")`` or ``(name, "deferred")`` for the
            others, then ``frame.stage``/``frame.end`` each live stage's bytes and end, and
            ``frame.write`` the notices. Nothing is kept: the stages' ``output`` and the
            result's ``text`` are empty (``supervise digest --format json`` streams its
            document so: :class:`supervisor.engine._results.JsonStream`). Its calls come
            from the engine's worker thread, as ``sink``'s do.

    Returns:
        A :class:`DigestResult`. The call returns within ``budget + 0.25`` seconds whatever
        the stages do (the kill budget is reserved inside the budget).

    Raises:
        Nothing for stage failures (they are results). A cancellation from the caller kills
        every stage (bounded, shielded) and propagates.
    """
    plan = as_plan(config)
    if on_stage is not None:
        observer = on_stage

        def on_stage(name: str, result: StageResult | None) -> None:  # the engine's thread
            import anyio.from_thread

            anyio.from_thread.run_sync(observer, name, result)  # in the caller's loop
    return await _embedded(lambda inner: _execute(
        plan, context, sink, only, inner, abort_reason, rerun_hint, on_stage=on_stage,
        keep_output=keep_output, prestart=prestart, frame=frame), abort)


async def digest(config: DigestPlan, context: SessionContext, *, sink: Sink | None = None,
                 only: Collection[str] | None = None, abort: _loop.Event | None = None,
                 abort_reason: str | Callable[[], str] = "signal",
                 rerun_hint: str | None = None,
                 on_stage: Callable[[str, StageResult | None], None] | None = None,
                 keep_output: bool = True, prestart: Prestart | None = None,
                 frame: Frame | None = None) -> DigestResult:
    """:func:`run_digest` on the engine's own loop (:mod:`supervisor.engine._loop`, run by
    :func:`supervisor.engine._signals.run_with_signals` or :func:`supervisor.engine._loop.run`):
    the same arguments, ``abort`` an event of that loop. What the CLI and the deferred runner
    run."""
    return await _execute(config, context, sink, only, abort, abort_reason, rerun_hint,
                          on_stage=on_stage, keep_output=keep_output, prestart=prestart,
                          frame=frame)


class _Embedding:
    """The engine's loop in a worker thread, as seen from the caller's anyio loop: what the
    caller asks (an abort, a cancellation) is handed to the engine's loop once it runs."""

    def __init__(self) -> None:
        import _thread

        self.lock = _thread.allocate_lock()
        self.loop: _loop._Loop | None = None
        self.pending: list[Callable[[], object]] = []
        self.scope = _loop.CancelScope()
        self.abort = _loop.Event()

    def call(self, fn: Callable[[], object]) -> None:
        """Run ``fn`` on the engine's loop (now, or as soon as it starts)."""
        with self.lock:
            loop = self.loop
            if loop is None:
                self.pending.append(fn)
                return
        loop.call_soon_threadsafe(fn)

    async def main(self, body: Callable[[_loop.Event], Awaitable[T]]) -> tuple[bool, T | None]:
        with self.lock:
            self.loop = _loop.current_loop()
            pending, self.pending = self.pending, []
        for fn in pending:
            fn()
        with self.scope:
            return True, await body(self.abort)
        return False, None  # cancelled by the caller: every stage was killed


async def _embedded(body: Callable[[_loop.Event], Awaitable[T]],
                    abort: anyio.Event | None) -> T:
    """Run ``body(abort)`` on the engine's loop in a worker thread, relaying the caller's
    ``abort`` and its cancellation (which kills every stage, then propagates)."""
    import anyio
    import anyio.to_thread

    embedding = _Embedding()
    outcome: list[tuple[bool, Any]] = []
    done = anyio.Event()

    async def runner() -> None:
        try:
            with anyio.CancelScope(shield=True):
                outcome.append((True, await anyio.to_thread.run_sync(
                    _loop.run, embedding.main, body)))
        except BaseException as err:  # raised to the caller below
            outcome.append((False, err))
        finally:
            done.set()

    async def relay() -> None:
        assert abort is not None
        await abort.wait()
        embedding.call(embedding.abort.set)

    async with anyio.create_task_group() as tg:
        tg.start_soon(runner)
        if abort is not None:
            tg.start_soon(relay)
        try:
            await done.wait()
        except anyio.get_cancelled_exc_class():
            embedding.call(embedding.scope.cancel)
            with anyio.CancelScope(shield=True):
                await done.wait()
            raise
        tg.cancel_scope.cancel()
    ok, value = outcome[0]
    if not ok:
        raise value
    finished, result = value
    if not finished:  # pragma: no cover - only a cancellation of ours ends it so
        raise RuntimeError("the digest was cancelled")
    return result  # type: ignore[no-any-return]


async def _execute(config: DigestPlan, context: SessionContext, sink: Sink | None,
                   only: Collection[str] | None, abort: _loop.Event | None,
                   abort_reason: str | Callable[[], str],
                   rerun_hint: str | None, *, transparent: bool = False,
                   on_stage: Callable[[str, StageResult | None], None] | None = None,
                   inherit_stdio: bool = False, keep_output: bool = True,
                   forward: Callable[[], int | None] | None = None,
                   prestart: Prestart | None = None,
                   frame: Frame | None = None,
                   on_kill: Callable[[str, _tree.KillReport], None] | None = None) -> DigestResult:
    started = _loop.current_time()
    wall0 = time.time()
    if prestart is not None:  # the digest began when its first stages were started
        early = max(0.0, time.monotonic() - prestart.t0)
        started -= early
        wall0 -= early  # its `seconds` too: never less than a stage's own
    buffer = ChunkSink()  # references, not copies: the output is held once
    if frame is not None:
        sink, keep_output = frame, False  # the frame is the digest's only record
    tee = _Tee(sink, None if transparent or not keep_output else buffer)
    if transparent:
        # `supervise run`: like GNU timeout, the command gets its whole budget; the kill
        # sequence (grace + KILL) comes after it.
        grace = config.grace
        kill_at = started + config.budget
    else:
        # A digest reserves its kill sequence inside the budget: it returns by budget + 0.25 s.
        grace = min(config.grace, config.budget / 3)
        kill_at = started + config.budget - grace - KILL_MARGIN
    # Bookkeeping by name (names are unique): linear in the number of stages.
    selected = [s for s in config.stages  # `only`, then each stage's `when` condition
                if (only is None or s.name in only)
                and not unmet(s, context.source, context.harness, context.where)]
    chosen = {s.name for s in selected}
    live = [s for s in selected if not s.deferred]
    position = {s.name: i for i, s in enumerate(live)}
    out = OrderedOutput(tee, [(s.name, s.max_output or config.max_output, s.title) for s in live],
                        config.max_output, transparent=transparent, keep=keep_output,
                        frame=frame)
    if frame is not None:
        frame.begin([(s.name, None if s.name in position else "deferred" if s.name in chosen
                      else "skipped") for s in config.stages])
    guarded: set[int] = set()  # the guardian's pid, once the first stage starts it

    def excluded() -> set[int]:
        return _deferred.spawned_pids() | guarded
    run = DigestRun(config, context, out, kill_at, grace, abort or _loop.Event(),
               _loop.CapacityLimiter(config.max_parallel or math.inf), {s.name: _loop.Event() for s in config.stages},
               cgroup_root=_cgroup.cgroup_root(), on_stage=on_stage,
               inherit_stdio=inherit_stdio, room=getattr(sink, "wait_room", None),
               watch=_tree.Watch(exclude=excluded),
               end_at=kill_at + grace + KILL_MARGIN, transparent=transparent, forward=forward,
               on_kill=on_kill,
               vfork=_spawn.may_vfork(), guard=_reaper.owns_children(), guarded=guarded,
               prestart=prestart)
    if prestart is not None:
        _adopt(run, prestart, {s.name for s in live if not s.needs})
    for spec in config.stages:
        if spec.name not in chosen or spec.deferred:
            run.done[spec.name].set()  # a need on a skipped or deferred stage does not wait
    deferred = [s for s in selected if s.deferred]
    if (live or deferred) and not transparent and context.mode != "read-only":
        try:  # stages keep their state here; a first run must not leave it untracked
            ensure_state_dir(context.state_dir)
        except OSError:
            pass  # stages report an unusable state dir themselves
    launched = [] if context.preview else _deferred.launch_all(deferred, context, config, run)
    try:
        async with _loop.create_task_group() as tg:
            if abort is not None:
                async def watch_abort() -> None:
                    await abort.wait()
                    run.abort_reason = abort_reason() if callable(abort_reason) else abort_reason
                    run.abort_all()
                tg.start_soon(watch_abort)
            watchdog = _loop.CancelScope()

            async def watchdog_tasks() -> None:
                with watchdog:
                    async with _loop.create_task_group() as wg:
                        wg.start_soon(run.watch.reaper)  # adopted orphans never pile up
                        wg.start_soon(run.watch.monitor)  # caps; members for the kill

            if live:
                tg.start_soon(watchdog_tasks)
            for index, spec in enumerate(live):
                tg.start_soon(run_stage, run, index, spec)
            # wait for the stages, then stop the abort watcher
            async with _loop.create_task_group() as inner:
                inner.start_soon(_all_done, run, live)
            if live and not transparent:
                # What left every mark of its stage (env -i, setsid) dies with the digest
                with _loop.CancelScope(shield=True):
                    now = _loop.current_time()
                    swept = await run.watch.sweep_orphans(
                        run.grace, min(now + run.grace + KILL_WAIT, run.end_at - DRAIN_RESERVE),
                        spare=[s.builtin for s in live if s.builtin])
                if run.watch.swept_orphans:
                    note_orphans(run, swept)
            tg.cancel_scope.cancel()
    finally:
        if run.guardian is not None:
            run.guardian.close()  # the digest is over: nothing for it to kill
    truncated = any(run.results.get(s.name, StageResult(s.name, "not_started")).status
                    in ("killed", "not_started") for s in live)
    notice = out.total_cut_notice()
    if notice:
        out.write_notice(notice)
    deliveries = {d.name: d for d in (_deferred.preview(deferred, context) if context.preview
                                      else _deferred.collect(deferred, context, launched))}
    for delivery in deliveries.values():
        out.write_notice(delivery.text)
    if not transparent:
        refused = link_notice(context.state_dir)  # a symlinked state dir, named once
        if refused:
            out.write_notice(refused)
        for line in take_notices():  # planted or corrupt state files, named once
            out.write_notice(line)
    results = []
    for spec in config.stages:
        if spec.name not in chosen:
            results.append(StageResult(spec.name, "skipped"))
        elif spec.deferred:
            results.append(_deferred_result(spec.name, deliveries.get(spec.name)))
        else:
            found = run.results.get(spec.name, StageResult(spec.name, "not_started"))
            # Every stage has flushed by now: take its output as the digest finally showed it
            # (a later stage's text may have been cut by the total cap after it ended).
            shown = out.stage_text(position[spec.name])
            cut = out.cut_by_total(position[spec.name]) and not found.truncated
            results.append(replace(found, output=shown, truncated=found.truncated or cut)
                           if shown != found.output or cut else found)
    reason = (run.abort_reason or ("stage" if run.abnormal else "budget")) if truncated else None
    if truncated and not transparent:
        out.write_notice(_banner.truncation_banner(
            config.budget, results, reason, rerun_hint, started, _loop.current_time(),
            abnormal=run.abnormal))
    return DigestResult(tuple(results), truncated, config.budget, time.time() - wall0, reason,
                        buffer.text(), tuple(out.notices), cut=notice is not None)


def note_orphans(run: DigestRun, kill: _tree.KillReport | None = None) -> None:
    """Name in the stage logs each orphan the digest's end killed (``Watch.swept_orphans``:
    it left every mark, so no scan could tell its stage): one line in the log of every stage
    that was running when it started (its start stamp within the stage's life), which is
    its stage when only one was, followed by the kill's report (:class:`KillReport
    <supervisor.engine._tree.KillReport>`) when SIGKILL was needed or something survived it;
    ``supervise status`` shows the logs. Never raises."""
    from ._proctable import STAMP_SLACK

    report = (f"[supervise] {kill.describe()}\n"
              if kill is not None and kill.notable and not run.transparent else "")
    lines: dict[str, list[str]] = {}
    for row, name in run.watch.swept_orphans:
        during = [stage for stage, (began, ended) in run.lives.items()
                  if began - STAMP_SLACK <= row.start <= ended + STAMP_SLACK]
        which = ("it started while this stage alone ran: it is this stage's" if len(during) == 1
                 else f"it started while these stages ran: {', '.join(during)}")
        line = (f"[supervise] at the digest's end, pid {row.pid} ({name}), a process that had "
                f"left every mark of its stage (no token, a session of its own, its parent "
                f"gone), was killed; {which}\n")
        for stage in during:
            lines.setdefault(stage, []).append(line)
    for stage, said in lines.items():
        capture = _stagelog.StderrCapture()
        capture.feed(("".join(said) + report).encode("utf-8", "replace"))
        try:
            _stagelog.write_entry(Path(run.context.state_dir), stage,
                                  _stagelog.header(run.context, "orphan killed"), capture)
        except (StateError, OSError):
            pass


def _adopt(run: DigestRun, prestart: Prestart, first: set[str]) -> None:
    """Take over the stages ``prestart`` started, and its guardian: each stage gets its slot
    before any other stage asks for one, and its leader is protected from the reaper (the
    engine reaps it). A stage
    this digest would not start first (a caller's mismatch), or one past ``max_parallel``, is
    killed (and started again by its task if it is this digest's)."""
    if prestart.guardian is not None:  # the engine's guardian from now on
        run.guardian, prestart.guardian = prestart.guardian, None
        run.guard = False
        run.guarded.add(run.guardian.pid)
        run.watch.protected.add(run.guardian.pid)  # ours to reap, at its close
    dropped = Prestart(prestart.t0)
    for name in list(prestart.stages):
        if name in first:
            try:
                run.limiter.acquire_on_behalf_of_nowait(name)
            except _loop.WouldBlock:
                pass
            else:
                run.watch.protected.add(prestart.stages[name].child.pid)
                continue
        dropped.stages[name] = prestart.stages.pop(name)
        if run.guardian is not None:
            run.guardian.forget(dropped.stages[name].child.pid)
    dropped.abandon()


def _deferred_result(name: str, delivery: _deferred.Delivery | None) -> StageResult:
    """A deferred stage's entry in the result: status ``deferred``; its output is the block
    the digest shows for it (so ``--format json`` carries what the text carries), its exit
    code, seconds and bytes those of the result delivered, if any."""
    if delivery is None:
        return StageResult(name, "deferred")
    record = delivery.record or {}
    code, seconds, output = record.get("exit_code"), record.get("seconds"), record.get("output")
    return StageResult(name, "deferred",
                       exit_code=code if isinstance(code, int) and not isinstance(code, bool) else None,
                       seconds=float(seconds) if isinstance(seconds, (int, float)) else 0.0,
                       bytes=len(output.encode()) if isinstance(output, str) else 0,
                       output=delivery.text)


async def _all_done(run: DigestRun, live: list[StagePlan]) -> None:
    for spec in live:
        await run.done[spec.name].wait()


class _Tee:
    def __init__(self, sink: Sink | None, buffer: ChunkSink | None) -> None:
        self._sink, self._buffer = sink, buffer

    def write(self, data: bytes) -> None:
        if self._buffer is not None:
            self._buffer.write(data)
        if self._sink is not None:
            self._sink.write(data)


async def run_command(argv: list[str], *, budget: float, grace: float = 1.0,
                      sink: Sink | None = None, cwd: Path | None = None,
                      abort: anyio.Event | None = None,
                      forward: Callable[[], int | None] | None = None,
                      on_kill: Callable[[_tree.KillReport], None] | None = None) -> StageResult:
    """Run one command tree under a deadline (``supervise run``); the whole tree dies.

    Unlike a digest, the command gets its whole budget (GNU ``timeout`` semantics): at
    ``budget`` seconds the tree gets TERM, then KILL after ``grace``; the call returns by
    ``budget + grace + 0.25`` seconds.

    Args:
        argv: the command (no shell).
        budget: seconds until the tree is signalled.
        grace: seconds between TERM and KILL.
        sink: where its stdout goes (stderr merged), byte for byte; None: the command uses
            this process's stdin, stdout and stderr directly, as under GNU ``timeout``.
        cwd: working directory (default: the current one).
        abort: when set, the tree is killed at once (a signal to the supervisor).
        forward: with ``abort``: returns the signal number that set it, which the command
            then gets (with SIGCONT) in place of the kill, as GNU ``timeout`` forwards a
            signal; the tree is killed only if the command has not ended ``grace`` seconds
            later. None: the abort kills at once.
        on_kill: called with the report of the kill sequence the tree got
            (:class:`supervisor.engine._tree.KillReport`: members, how many needed SIGKILL,
            survivors, seconds) when one ran: at the budget, after a signal, or for leftovers
            after the command exited; not called when none ran.

    The command gets this process's environment unchanged plus ``SUPERVISE_STAGE_TOKEN``
    (the watchdog's token), like GNU ``timeout``: none of a stage's ``SUPERVISE_*`` variables.

    Returns:
        A :class:`StageResult` named ``run``: ``ok``/``failed`` with the command's exit code,
        or ``killed`` at the budget (the CLI maps that to exit 124).
    """
    return await _embedded(lambda inner: command(argv, budget=budget, grace=grace, sink=sink,
                                                 cwd=cwd, abort=inner, forward=forward,
                                                 on_kill=on_kill), abort)


async def command(argv: list[str], *, budget: float, grace: float = 1.0,
                  sink: Sink | None = None, cwd: Path | None = None,
                  abort: _loop.Event | None = None,
                  forward: Callable[[], int | None] | None = None,
                  on_kill: Callable[[_tree.KillReport], None] | None = None) -> StageResult:
    """:func:`run_command` on the engine's own loop (:mod:`supervisor.engine._loop`): the same
    arguments, ``abort`` an event of that loop (``supervise run``'s engine path)."""
    if cwd is None:
        try:
            cwd = Path.cwd()
        except OSError:  # started in a deleted directory: the command inherits it as is
            cwd = None
    spec = StagePlan(name="run", run=tuple(argv), cwd=str(cwd) if cwd else None,
                     max_output=1 << 62, stderr="context")  # like timeout(1): stderr is kept
    config = DigestPlan(budget=budget, grace=grace, max_output=1 << 62, stages=(spec,))
    context = SessionContext(project_dir=str(cwd or "/"), state_dir="/nonexistent")
    result = await _execute(config, context, sink, None, abort, "signal", None, transparent=True,
                            inherit_stdio=sink is None, forward=forward,
                            on_kill=None if on_kill is None else lambda _name, kill: on_kill(kill))
    return result.stages[0]
