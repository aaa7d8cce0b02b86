"""The digest engine: concurrent bounded stages, declared-order streaming, one deadline.

Public entry points: :func:`run_digest` (a whole digest) and :func:`run_command` (bound one
command tree, ``supervise run``). Both are async (anyio) so an extension bridge or any other
program can embed, cancel and observe them.
"""

from __future__ import annotations

import json
import os
import signal
import time
import uuid
from collections.abc import Awaitable, Callable, Collection
from dataclasses import dataclass, field, replace
from pathlib import Path
from subprocess import DEVNULL, PIPE, STDOUT
from typing import TYPE_CHECKING, Literal

import anyio
import anyio.abc

from . import _banner, _cgroup, _deferred, _tree
from ._builtins import builtin_argv
from ._context import SessionContext
from ._errors import ConfigError
from ._output import BufferSink, OrderedOutput, Sink
from ._plan import DigestPlan, StagePlan, as_plan
from ._project import ensure_state_dir
from ._results import DigestResult, StageResult, StageStatus

if TYPE_CHECKING:
    from ._config import DigestConfig

DRAIN = 0.2
"""Seconds we keep reading a stage's pipe after its end before closing our side (rule 6)."""
KILL_MARGIN = 0.25
"""Seconds reserved, beyond the grace period, for SIGKILL, the drain and the banner."""
MAX_PARALLEL = 16
"""Stages running at once; more wait for a slot (bounded by the budget)."""

_STRIP_ENV = ("GIT_DIR", "GIT_INDEX_FILE", "GIT_WORK_TREE", "GIT_PREFIX")



@dataclass
class _Run:
    """Mutable state of one digest run (private)."""

    config: DigestPlan
    context: SessionContext
    out: OrderedOutput
    kill_at: float
    grace: float
    abort: anyio.Event
    limiter: anyio.CapacityLimiter
    done: dict[str, anyio.Event]
    results: dict[str, StageResult] = field(default_factory=dict)
    running: dict[str, float] = field(default_factory=dict)
    leaders: set[int] = field(default_factory=set)
    abort_reason: str | None = None
    cgroup_root: Path | None = None
    on_stage: Callable[[str, StageResult | None], None] | None = None
    inherit_stdio: bool = False
    """``supervise run`` without capture: the command uses our stdin/stdout/stderr directly."""
    room: Callable[[], Awaitable[None]] | None = None
    """Back-pressure from the sink (a reader that does not keep up), bounded by deadlines."""

    def report(self, name: str, result: StageResult | None) -> None:
        """Tell the observer a stage started (None) or ended (its result)."""
        if result is not None:
            self.results[name] = result
        if self.on_stage is not None:
            self.on_stage(name, result)


def stage_argv(spec: StagePlan) -> list[str]:
    """The argv a stage runs (shell-free unless ``shell = true``).

    Raises:
        ConfigError: an unknown builtin.
    """
    if spec.builtin is not None:
        return builtin_argv(spec.builtin, spec.args)
    assert spec.run is not None
    if spec.shell:
        return ["/bin/sh", "-c", spec.run[0], *spec.args]
    return [*spec.run, *spec.args]


def stage_env(spec: StagePlan, context: SessionContext, token: str) -> dict[str, str]:
    """The curated environment of a stage (see docs/stage-authors.md)."""
    env = {k: v for k, v in os.environ.items()
           if k not in _STRIP_ENV and not k.startswith("SUPERVISE_")}
    env.update(spec.env)
    env.update(context.env())
    env["SUPERVISE_STAGE_NAME"] = spec.name
    env["SUPERVISE_STAGE_OPTIONS"] = json.dumps(spec.options)
    env[_tree.TOKEN_VAR] = token
    env["PYTHONUNBUFFERED"] = "1"
    return env


def _stage_cwd(spec: StagePlan, context: SessionContext) -> Path:
    if spec.cwd is None:
        return context.project_dir
    cwd = Path(spec.cwd).expanduser()
    return cwd if cwd.is_absolute() else context.project_dir / cwd


async def _race(abort: anyio.Event, deadline: float, fn: Callable[[], Awaitable[object]]) -> bool:
    """Run ``fn`` until it returns (True), or until ``abort`` is set or ``deadline`` passes
    (False)."""
    finished = False
    with anyio.move_on_at(deadline):
        async with anyio.create_task_group() as tg:
            async def work() -> None:
                nonlocal finished
                await fn()
                finished = True
                tg.cancel_scope.cancel()

            async def aborted() -> None:
                await abort.wait()
                tg.cancel_scope.cancel()

            tg.start_soon(work)
            tg.start_soon(aborted)
    return finished


async def _run_stage(run: _Run, index: int, spec: StagePlan) -> None:
    out = run.out
    try:
        await _run_stage_inner(run, index, spec)
    finally:
        out.finish(index)
        run.done[spec.name].set()


async def _run_stage_inner(run: _Run, index: int, spec: StagePlan) -> None:
    acquired = False

    async def wait_turn() -> None:
        nonlocal acquired
        for need in spec.needs:  # `needs` orders starts
            await run.done[need].wait()
        await run.limiter.acquire_on_behalf_of(spec.name)
        acquired = True

    # Waiting for needs or a free slot is bounded by the budget and by an abort.
    await _race(run.abort, run.kill_at, wait_turn)
    if not acquired or run.abort.is_set() or anyio.current_time() >= run.kill_at:
        if acquired:
            run.limiter.release_on_behalf_of(spec.name)
        run.report(spec.name, StageResult(spec.name, "not_started"))
        return
    try:
        await _spawn_and_watch(run, index, spec)
    finally:
        run.limiter.release_on_behalf_of(spec.name)


async def _spawn_and_watch(run: _Run, index: int, spec: StagePlan) -> None:
    out, now = run.out, anyio.current_time
    token = uuid.uuid4().hex
    started = now()
    cgroup = _cgroup.create(run.cgroup_root) if run.cgroup_root is not None else None
    try:
        argv = stage_argv(spec)
        if cgroup is not None:
            argv = _cgroup.wrap(cgroup, argv)
        if run.inherit_stdio:  # like GNU timeout: stdin, stdout and stderr are the command's own
            proc = await anyio.open_process(
                argv, stdin=None, stdout=None, stderr=None, cwd=_stage_cwd(spec, run.context),
                env=stage_env(spec, run.context, token), start_new_session=True)
        else:
            proc = await anyio.open_process(
                argv, stdin=DEVNULL, stdout=PIPE, stderr=STDOUT,
                cwd=_stage_cwd(spec, run.context), env=stage_env(spec, run.context, token),
                start_new_session=True)
    except (OSError, ValueError, ConfigError) as err:
        reason = getattr(err, "strerror", None) or str(err)
        if isinstance(err, OSError) and err.filename is None and spec.run:
            reason = f"{spec.run[0]}: {reason}"
        elif isinstance(err, OSError) and err.filename is not None:
            reason = f"{err.filename}: {reason}"
        if cgroup is not None:
            _cgroup.remove(cgroup)
        out.note(index, f"[supervise] stage '{spec.name}' could not start: {reason}")
        run.report(spec.name, StageResult(spec.name, "failed", output=out.stage_text(index)))
        return
    run.report(spec.name, None)
    run.leaders.add(proc.pid)
    run.running[spec.name] = started
    deadline = run.kill_at if spec.timeout is None else min(run.kill_at, started + spec.timeout)
    eof = anyio.Event()
    stdout = proc.stdout
    room = run.room

    async def reader() -> None:
        try:
            while stdout is not None:
                out.feed(index, await stdout.receive(65536))
                if room is not None:
                    await room()  # a reader of our stdout that lags: wait, within the deadline
        except (anyio.EndOfStream, anyio.ClosedResourceError, anyio.BrokenResourceError):
            pass
        finally:
            eof.set()

    status: StageStatus
    outcome: Literal["exited", "deadline", "abort"] = "deadline"
    try:
        async with anyio.create_task_group() as tg:
            tg.start_soon(reader)
            if await _race(run.abort, deadline, proc.wait):
                outcome = "exited"
            else:
                outcome = "exited" if proc.returncode is not None else (
                    "abort" if run.abort.is_set() else "deadline")
            with anyio.CancelScope(shield=True), anyio.move_on_after(run.grace + 2 * _tree.KILL_WAIT):
                others = run.leaders - {proc.pid}
                if outcome != "exited":
                    await _tree.kill_stage(proc.pid, lambda: proc.returncode is None, token,
                                           run.grace, others, cgroup)
                elif _tree.has_leftovers(proc.pid, token, others, cgroup):
                    # systemd control-group semantics: leftovers die with the stage (rule 8).
                    await _tree.kill_stage(proc.pid, lambda: False, token, run.grace, others,
                                           cgroup)
                with anyio.move_on_after(DRAIN):  # never read to EOF after a kill (rule 6)
                    await eof.wait()
            tg.cancel_scope.cancel()
    except BaseException:
        # Cancelled by the caller (a bridge's newer generation): the same whole-tree kill,
        # shielded and bounded, then the cancellation propagates (anyio cancellation.rst).
        with anyio.CancelScope(shield=True), anyio.move_on_after(run.grace + 2 * _tree.KILL_WAIT):
            await _tree.kill_stage(proc.pid, lambda: proc.returncode is None, token, run.grace,
                                   run.leaders - {proc.pid}, cgroup)
        raise
    finally:
        with anyio.CancelScope(shield=True), anyio.move_on_after(_tree.KILL_WAIT):
            if proc.returncode is None:
                # Not proc.kill(): Popen.send_signal polls first and can reap the leader before
                # asyncio's watcher does ("Unknown child process pid, will report returncode
                # 255", design rule 9). An unreaped leader's pid cannot be reused.
                try:
                    os.kill(proc.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            await proc.aclose()  # closes every transport (anyio#669) and reaps the leader
            while cgroup is not None and not _cgroup.remove(cgroup):
                await anyio.sleep(0.005)  # empties within ms of the kill
        run.running.pop(spec.name, None)
        run.leaders.discard(proc.pid)
    seconds = now() - started
    code = proc.returncode
    if outcome == "exited":
        status = "ok" if code == 0 else "failed"
        if code != 0:
            out.note(index, f"[supervise] stage '{spec.name}' exited with status {code}")
    elif outcome == "deadline" and spec.timeout is not None and started + spec.timeout <= run.kill_at:
        status = "timed_out"
        what = ("its output above is incomplete" if out.stage_bytes(index)[0]
                else "it printed nothing before that")
        out.note(index, f"[supervise] stage '{spec.name}' timed out after {spec.timeout:g}s and "
                        f"was killed; {what}")
    else:
        status = "killed"
        if run.abort_reason is None:
            run.abort_reason = "budget" if outcome == "deadline" else "signal"
    raw, cut = out.stage_bytes(index)
    out.finish(index)  # flush a cut character before the text is taken
    run.report(spec.name, StageResult(spec.name, status, code, seconds, raw, cut,
                                      out.stage_text(index)))


async def run_digest(config: DigestConfig | DigestPlan, context: SessionContext, *, sink: Sink | None = None,
                     only: Collection[str] | None = None, abort: anyio.Event | None = None,
                     abort_reason: str | Callable[[], str] = "signal",
                     rerun_hint: str | None = None,
                     on_stage: Callable[[str, StageResult | None], None] | None = None,
                     ) -> DigestResult:
    """Run a digest: every stage concurrently, output in declared order, one deadline.

    Args:
        config: the digest (stages, ``budget`` and ``grace`` in seconds, ``max_output`` bytes).
        context: the session context passed to every stage as ``SUPERVISE_*``.
        sink: where the text goes as it streams; a :class:`BufferSink` when None.
        only: names of the stages to run (a re-emit); the others are ``skipped``.
        abort: when set, the digest ends as if its budget ran out (a signal to the
            supervisor): running stages are killed, a banner is printed.
        abort_reason: how the banner names an abort (e.g. ``"SIGTERM"``), or a callable
            returning it, called when the abort happens.
        rerun_hint: the exact command the banner tells the user to re-run with (without the
            ``--budget`` part, which the banner adds).
        on_stage: observer called as ``on_stage(name, None)`` when a stage starts and
            ``on_stage(name, result)`` when it ends (live progress, bridges' events). It runs
            in the event loop: keep it quick and never raise from it.

    Returns:
        A :class:`DigestResult`. The call returns within ``budget + 0.25`` seconds whatever
        the stages do (the kill budget is reserved inside the budget).

    Raises:
        Nothing for stage failures (they are results). A cancellation from the caller kills
        every stage (bounded, shielded) and propagates.
    """
    return await _execute(as_plan(config), context, sink, only, abort, abort_reason, rerun_hint,
                          on_stage=on_stage)


async def _execute(config: DigestPlan, context: SessionContext, sink: Sink | None,
                   only: Collection[str] | None, abort: anyio.Event | None,
                   abort_reason: str | Callable[[], str],
                   rerun_hint: str | None, *, transparent: bool = False,
                   on_stage: Callable[[str, StageResult | None], None] | None = None,
                   inherit_stdio: bool = False) -> DigestResult:
    started = anyio.current_time()
    wall0 = time.time()
    buffer = BufferSink()
    tee = _Tee(sink, None if transparent else buffer)
    if transparent:
        # `supervise run`: like GNU timeout, the command gets its whole budget; the kill
        # sequence (grace + KILL) comes after it.
        grace = config.grace
        kill_at = started + config.budget
    else:
        # A digest reserves its kill sequence inside the budget: it returns by budget + 0.25 s.
        grace = min(config.grace, config.budget / 3)
        kill_at = started + config.budget - grace - KILL_MARGIN
    selected = [s for s in config.stages if only is None or s.name in only]
    live = [s for s in selected if not s.deferred]
    out = OrderedOutput(tee, [(s.name, s.max_output or config.max_output, s.title) for s in live],
                        config.max_output, transparent=transparent)
    run = _Run(config, context, out, kill_at, grace, abort or anyio.Event(),
               anyio.CapacityLimiter(MAX_PARALLEL), {s.name: anyio.Event() for s in config.stages},
               cgroup_root=_cgroup.cgroup_root(), on_stage=on_stage,
               inherit_stdio=inherit_stdio, room=getattr(sink, "wait_room", None))
    for spec in config.stages:
        if spec not in selected or spec.deferred:
            run.done[spec.name].set()  # a need on a skipped or deferred stage does not wait
    deferred = [s for s in selected if s.deferred]
    if (live or deferred) and not transparent:
        try:  # stages keep their state here; a first run must not leave it untracked
            ensure_state_dir(context.state_dir)
        except OSError:
            pass  # stages report an unusable state dir themselves
    launched = _deferred.launch_all(deferred, context, config, run)
    async with anyio.create_task_group() as tg:
        if abort is not None:
            async def watch_abort() -> None:
                await abort.wait()
                run.abort_reason = abort_reason() if callable(abort_reason) else abort_reason
            tg.start_soon(watch_abort)
        for index, spec in enumerate(live):
            tg.start_soon(_run_stage, run, index, spec)
        # wait for the stages, then stop the abort watcher
        async with anyio.create_task_group() as inner:
            inner.start_soon(_all_done, run, live)
        tg.cancel_scope.cancel()
    truncated = any(run.results.get(s.name, StageResult(s.name, "not_started")).status
                    in ("killed", "not_started") for s in live)
    notice = out.total_cut_notice()
    if notice:
        out.write_notice(notice)
    for text in _deferred.collect(deferred, context, launched):
        out.write_notice(text)
    results = []
    for spec in config.stages:
        if spec not in selected:
            results.append(StageResult(spec.name, "skipped"))
        elif spec.deferred:
            results.append(StageResult(spec.name, "deferred"))
        else:
            found = run.results.get(spec.name, StageResult(spec.name, "not_started"))
            # Every stage has flushed by now: take its output as the digest finally showed it
            # (a later stage's text may have been cut by the total cap after it ended).
            shown = out.stage_text(live.index(spec))
            results.append(replace(found, output=shown) if shown != found.output else found)
    reason = (run.abort_reason or "budget") if truncated else None
    if truncated and not transparent:
        out.write_notice(_banner.truncation_banner(
            config.budget, results, reason, rerun_hint, started, anyio.current_time()))
    return DigestResult(tuple(results), truncated, config.budget, time.time() - wall0, reason,
                        buffer.getvalue().decode("utf-8", "replace"), tuple(out.notices))


async def _all_done(run: _Run, live: list[StagePlan]) -> None:
    for spec in live:
        await run.done[spec.name].wait()


class _Tee:
    def __init__(self, sink: Sink | None, buffer: BufferSink | None) -> None:
        self._sink, self._buffer = sink, buffer

    def write(self, data: bytes) -> None:
        if self._buffer is not None:
            self._buffer.write(data)
        if self._sink is not None:
            self._sink.write(data)


async def run_command(argv: list[str], *, budget: float, grace: float = 1.0,
                      sink: Sink | None = None, cwd: Path | None = None,
                      abort: anyio.Event | None = None) -> StageResult:
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

    Returns:
        A :class:`StageResult` named ``run``: ``ok``/``failed`` with the command's exit code,
        or ``killed`` at the budget (the CLI maps that to exit 124).
    """
    if cwd is None:
        try:
            cwd = Path.cwd()
        except OSError:  # started in a deleted directory: the command inherits it as is
            cwd = None
    spec = StagePlan(name="run", run=tuple(argv), cwd=str(cwd) if cwd else None,
                     max_output=1 << 62)
    config = DigestPlan(budget=budget, grace=grace, max_output=1 << 62, stages=(spec,))
    context = SessionContext(project_dir=cwd or Path("/"), state_dir=Path("/nonexistent"))
    result = await _execute(config, context, sink, None, abort, "signal", None, transparent=True,
                            inherit_stdio=sink is None)
    return result.stages[0]
