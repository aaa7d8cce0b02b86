"""One stage of a digest: spawn it in its own session, stream it, end it, sweep its tree.

:func:`run_stage` is what the engine (:mod:`supervisor.engine._run`) starts once per stage in its
task group; :class:`DigestRun` is the state the stages of one digest share (deadline, abort,
output multiplexer, parallelism limit, results).
"""

from __future__ import annotations

import math
import os
import signal
from collections.abc import Awaitable, Callable
from pathlib import Path

from .._record import field, mutable_record
from . import _cgroup, _loop, _proctable, _spawn, _stagelog, _tree
from ._reaper import DRAIN, DRAIN_RESERVE, HARD_PHASE, KILL_WAIT, READ_SIZE, TOKEN_VAR
from ..config._context import SessionContext
from .._errors import ConfigError, StateError
from ._launch import (FD_RESERVE, STAGE_FDS, Prestart, descriptor_limit, idle_builtin, launch,
                      open_descriptors, stage_argv, stage_cwd)
from ._output import OrderedOutput
from ..config._plan import DigestPlan, StagePlan
from ._results import StageResult, StageSummary
from ._stagelog import StderrCapture

TYPE_CHECKING = False  # not typing's: a session start runs this module
if TYPE_CHECKING:
    from typing import Literal

    from ._guardian import Guardian
    from ._results import StageStatus

_ROOM_POLL = 0.02




@mutable_record
class DigestRun:
    """Mutable state of one digest run (private)."""

    config: DigestPlan
    context: SessionContext
    out: OrderedOutput
    kill_at: float
    grace: float
    abort: _loop.Event
    limiter: _loop.CapacityLimiter
    done: dict[str, _loop.Event]
    results: dict[str, StageResult] = field(default_factory=dict)
    running: dict[str, float] = field(default_factory=dict)
    leaders: set[int] = field(default_factory=set)
    lives: dict[str, list[float]] = field(default_factory=dict)
    """Each stage's life in start-stamp units (:func:`._proctable.stamp_now`): its leader's
    start and its end (infinite while it runs), to tell which stage an orphan that left
    every mark may come from (:func:`supervisor.engine._run.note_orphans`)."""
    abort_reason: str | None = None
    cgroup_root: Path | None = None
    on_stage: Callable[[str, StageResult | None], None] | None = None
    inherit_stdio: bool = False
    """``supervise run`` without capture: the command uses our stdin/stdout/stderr directly."""
    room: Callable[[], Awaitable[None]] | None = None
    """Back-pressure from the sink (a reader that does not keep up), bounded by deadlines."""
    watch: _tree.Watch = field(default_factory=_tree.Watch)
    """The watchdog: shared scans, continuous reaping, caps, bounded kills."""
    end_at: float = float("inf")
    """When the digest must have returned (the loop's clock): every kill sequence ends before."""
    transparent: bool = False
    """``supervise run``: the command's own signal death is its exit status, not ours to name."""
    abnormal: dict[str, str] = field(default_factory=dict)
    """Stages that ended abnormally without our deadline: name -> signal name or cap key."""
    vfork: bool = True
    """Stages may be started with ``posix_spawn`` (:func:`supervisor.engine._spawn.may_vfork`)."""
    forward: Callable[[], int | None] | None = None
    """``supervise run`` on the engine's path: the signal that set the abort, to forward to
    the command (GNU ``timeout``'s rule) before the kill; None: an abort kills at once."""
    on_kill: Callable[[str, _tree.KillReport], None] | None = None
    """Told each kill sequence a stage's tree got (the stage's name, the kill's report): at
    its deadline, on an abort, a cap, or for leftovers after it exited (``supervise run``
    reports it on stderr and in ``--format json``)."""
    guard: bool = False
    """Start a guardian (:mod:`supervisor.engine._guardian`) before the first stage spawns:
    this process owns all of its children (the CLI, the deferred runner), not an embedder."""
    guardian: Guardian | None = None
    """The digest's guardian, told each stage's start and end; None before the first spawn,
    for an embedding program, or where it could not fork."""
    guarded: set[int] = field(default_factory=set)
    """The guardian's pid, which the watchdog excludes (it is never a stage's member)."""
    ended: int = 0
    """Stages whose descriptors were released so far (a stage waiting for a descriptor
    retries after one more ended)."""
    fd_limit: int | None = field(default_factory=lambda: descriptor_limit())
    """The soft open-files limit when it is low enough to be counted against, else None."""
    prestart: Prestart | None = None
    """Stages started before the event loop (:func:`supervisor.engine._launch.prestart`),
    taken over by their tasks instead of spawned."""
    scopes: dict[str, _loop.CancelScope] = field(default_factory=dict)
    """Each stage's current wait (for its turn, or for its leader), cancelled by an abort or
    by a cap: one scope per stage instead of a task racing each wait."""

    def interruptible(self, name: str, deadline: float) -> _loop.CancelScope:
        """A cancel scope for stage ``name`` ending at ``deadline`` (the loop's clock) that an
        abort (:meth:`abort_all`) cancels too."""
        scope = _loop.CancelScope(deadline=deadline)
        if self.abort.is_set():
            scope.cancel()
        self.scopes[name] = scope
        return scope

    def abort_all(self) -> None:
        """The digest is aborted: end every stage's wait (they are then killed whole)."""
        for scope in list(self.scopes.values()):
            scope.cancel()

    def report(self, name: str, result: StageResult | None) -> None:
        """Tell the observer a stage started (None) or ended (its result)."""
        if result is not None:
            self.results[name] = result
        if self.on_stage is not None:
            self.on_stage(name, result)


def _out_of_descriptors(err: BaseException) -> bool:
    import errno

    return isinstance(err, OSError) and err.errno in (errno.EMFILE, errno.ENFILE)


async def _descriptor_room(run: DigestRun, name: str, ended: int | None = None) -> bool:
    """Wait until a stage start fits under the open-files limit with :data:`FD_RESERVE` to
    spare, or, after a start failed for want of one (``ended``: :attr:`DigestRun.ended` at
    that failure), until another stage has released its descriptors. Returns False when no
    other stage runs (nothing will free one: try, or fail, now) or the budget or an abort
    ended the wait first; True to start."""
    limit = run.fd_limit
    if limit is None and ended is None:
        return True
    with run.interruptible(name, run.kill_at):
        while True:
            if ended is not None:
                if run.ended != ended:
                    return True
            else:
                used = open_descriptors()
                if limit is None or used is None or used + STAGE_FDS + FD_RESERVE <= limit:
                    return True
            if not run.running:
                return ended is None
            await _loop.sleep(_ROOM_POLL)
    return False


async def run_stage(run: DigestRun, index: int, spec: StagePlan) -> None:
    """Run stage ``index`` of ``run`` to its end: wait for its needs and a slot, spawn, stream,
    stop it at its deadline, sweep its tree; record its result and mark it done."""
    out = run.out
    try:
        await _run_stage_inner(run, index, spec)
    finally:
        out.finish(index, run.results.get(spec.name))  # ended early: what it reported
        run.done[spec.name].set()


async def _run_stage_inner(run: DigestRun, index: int, spec: StagePlan) -> None:
    acquired = False
    if run.prestart is not None and spec.name in run.prestart.stages:
        # started before the event loop: its slot was taken for it (supervisor.engine._run)
        try:
            await _spawn_and_watch(run, index, spec)
        finally:
            run.limiter.release_on_behalf_of(spec.name)
        return
    if not spec.needs and not run.abort.is_set():
        try:  # the common case: a free slot now, nothing to wait for
            run.limiter.acquire_on_behalf_of_nowait(spec.name)
            acquired = True
        except _loop.WouldBlock:
            pass
    if not acquired:
        # Waiting for needs or a free slot is bounded by the budget and by an abort.
        with run.interruptible(spec.name, run.kill_at):
            for need in spec.needs:  # `needs` orders starts
                await run.done[need].wait()
            await run.limiter.acquire_on_behalf_of(spec.name)
            acquired = True
    if not acquired or run.abort.is_set() or _loop.current_time() >= run.kill_at:
        if acquired:
            run.limiter.release_on_behalf_of(spec.name)
        run.report(spec.name, StageResult(spec.name, "not_started"))
        return
    try:
        await _spawn_and_watch(run, index, spec)
    finally:
        run.limiter.release_on_behalf_of(spec.name)


def _pipe_inodes(*fds: int | None) -> frozenset[int]:
    """The inode numbers of the pipes among ``fds`` (our read ends of a stage's stdout and
    stderr; None: not piped): a process holding one inherited it from the stage
    (:attr:`supervisor.engine._tree.StageTree.pipes`). One ``fstat`` each; never raises."""
    found: set[int] = set()
    for fd in fds:
        if fd is None:
            continue
        try:
            info = os.fstat(fd)
        except OSError:
            continue
        if info.st_mode & 0o170000 == 0o010000:  # S_IFIFO, without importing `stat`
            found.add(info.st_ino)
    return frozenset(found)


async def _next_chunk(fd: int, size: int) -> bytes:
    """The next bytes (at most ``size``) of the non-blocking pipe ``fd``; ``b""`` at its end or
    on a read error. Reads first (a quick stage's output, or end, is there already) and waits
    for readability only when the pipe is empty."""
    while True:
        try:
            return os.read(fd, size)
        except BlockingIOError:
            await _loop.wait_readable(fd)
        except OSError:
            return b""


async def _spawn_and_watch(run: DigestRun, index: int, spec: StagePlan) -> None:
    out, now = run.out, _loop.current_time
    pre = run.prestart.take(spec.name) if run.prestart is not None else None
    if pre is not None:
        # started before the event loop (forked, for a built-in): the same leader, session,
        # token and cgroup as a start here would give; its clock is the monotonic one
        import time

        proc, token, cgroup = pre.child, pre.token, pre.cgroup
        started = now() - max(0.0, time.monotonic() - pre.started)
        run.watch.spawning += 1
    else:
        token = os.urandom(16).hex()  # 32 hex digits, as uuid4().hex (uuid imports platform)
        started = now()
        if idle_builtin(spec, run.context, run.config, token, run.transparent):
            # Nothing to do (no memory store, no summary file): what the program would decide
            # first, decided here on the same environment; no interpreter, the same result.
            run.report(spec.name, None)
            run.report(spec.name, StageResult(spec.name, "ok", 0, now() - started))
            return
        started_proc = await _start(run, index, spec, token)
        if started_proc is None:
            return
        proc, cgroup = started_proc
    deadline = run.kill_at if spec.timeout is None else min(run.kill_at, started + spec.timeout)
    waiting = run.interruptible(spec.name, deadline)  # ended by an abort or a cap too
    tree = _tree.StageTree(proc.pid, lambda: proc.returncode is None, token, cgroup,
                           spec.max_tasks, spec.max_memory, on_cap=waiting.cancel,
                           detach_mark=spec.name if spec.builtin is not None else None,
                           pipes=_pipe_inodes(proc.stdout, proc.stderr))
    run.watch.add(tree)
    run.watch.spawning -= 1
    stamp = _proctable.start_stamp(proc.pid)
    run.lives[spec.name] = [_proctable.stamp_now() if stamp is None else stamp, math.inf]
    if run.guardian is not None and stamp is not None:
        run.guardian.watch(proc.pid, stamp, token, str(cgroup) if cgroup else None)
    run.report(spec.name, None)
    run.leaders.add(proc.pid)
    run.running[spec.name] = started
    eof = _loop.Event()
    room = run.room
    drain = _spawn.Discard()

    async def reader() -> None:
        fd = proc.stdout
        try:
            while fd is not None:
                data = await _next_chunk(fd, READ_SIZE)
                if not data:
                    break
                out.feed(index, data)
                if out.full(index):
                    # Past its cap: the rest is only counted, off the event loop.
                    proc.stdout = None  # the drain owns the descriptor now
                    await drain.run(fd, lambda n: out.skip(index, n))
                    break
                if len(data) >= _spawn.PIPE_DEFAULT:
                    _spawn.widen(fd)  # a stage that fills its pipe: fewer, larger reads
                if room is not None:
                    await room()  # a reader of our stdout that lags: wait, within the deadline
        finally:
            eof.set()

    capture = StderrCapture()
    err_eof = _loop.Event()

    async def err_reader() -> None:  # stderr = "log": kept apart, bounded, logged at the end
        fd = proc.stderr
        try:
            while fd is not None:
                data = await _next_chunk(fd, 65536)
                if not data:
                    break
                capture.feed(data)
        finally:
            err_eof.set()

    def kill_deadline() -> float:
        # The kill sequence ends by the digest's end (budget + 0.25 s at most), whatever the
        # stage does; the drain and the banner get what is left of KILL_MARGIN.
        # Away from the digest's end (a stage's own timeout, leftovers) the hard phase may
        # take up to KILL_WAIT; it ends as soon as nothing is left.
        return min(now() + run.grace + KILL_WAIT, run.end_at - DRAIN_RESERVE)

    status: StageStatus
    outcome: Literal["exited", "deadline", "abort", "cap"] = "deadline"
    kill: _tree.KillReport | None = None
    try:
        async with _loop.create_task_group() as tg:
            if proc.stdout is not None:
                tg.start_soon(reader)
            else:
                eof.set()
            if proc.stderr is not None:
                tg.start_soon(err_reader)
            else:
                err_eof.set()
            with waiting:
                await proc.wait()
                outcome = "exited"
            if outcome != "exited":
                outcome = "exited" if proc.poll() is not None else (
                    "cap" if tree.over_cap else "abort" if run.abort.is_set() else "deadline")
            if cgroup is not None and tree.over_cap is None:
                # pids.max refuses a fork (the stage may then exit on its own) and memory.max
                # OOM-kills: the cgroup's event counters say which cap it was.
                tree.over_cap = _cgroup.over_cap(cgroup)
            with _loop.CancelScope(shield=True):
                forwarded = False
                if outcome == "abort" and run.forward is not None:
                    signum = run.forward()
                    if signum is not None:  # the command's own handlers run, for grace seconds
                        forwarded = True
                        for sig in (signum, signal.SIGCONT):
                            try:
                                os.killpg(proc.pid, sig)  # unreaped leader: the group is ours
                            except (ProcessLookupError, PermissionError):
                                pass
                        with _loop.move_on_at(min(now() + run.grace, run.end_at)):
                            await proc.wait()
                        if proc.poll() is not None:
                            outcome = "exited"
                if outcome != "exited":
                    kill = await run.watch.kill_stage(
                        tree, 0.0 if outcome == "cap" or forwarded else run.grace,
                        kill_deadline())
                elif await run.watch.has_leftovers(tree, min(now() + KILL_WAIT,
                                                              run.end_at - DRAIN_RESERVE)):
                    # systemd control-group semantics: leftovers die with the stage (rule 8).
                    kill = await run.watch.kill_stage(tree, run.grace, kill_deadline())
                with _loop.move_on_at(min(now() + DRAIN, run.end_at)):  # never read to EOF after a kill (rule 6)
                    await eof.wait()
                    await err_eof.wait()
            tg.cancel_scope.cancel()
    except BaseException:
        # Cancelled by the caller (a bridge's newer generation): the same whole-tree kill,
        # shielded and bounded, then the cancellation propagates (the loop's level-triggered cancellation).
        with _loop.CancelScope(shield=True):
            cancelled = await run.watch.kill_stage(tree, run.grace,
                                                   now() + run.grace + HARD_PHASE + DRAIN_RESERVE)
        if run.on_kill is not None:
            run.on_kill(spec.name, cancelled)
        if cancelled.notable and not run.transparent:  # as at the end below: the stage log
            capture.feed(f"[supervise] {cancelled.describe()}\n".encode())
            try:
                _stagelog.write_entry(Path(run.context.state_dir), spec.name,
                                      _stagelog.header(run.context, "cancelled"), capture)
            except (StateError, OSError):
                pass
        raise
    finally:
        if run.scopes.get(spec.name) is waiting:
            del run.scopes[spec.name]
        try:
            with _loop.CancelScope(shield=True), _loop.move_on_after(KILL_WAIT):
                await drain.stop()  # counts what was drained past the cap
                if proc.poll() is None:
                    try:
                        os.kill(proc.pid, signal.SIGKILL)  # unreaped: the pid is still ours
                    except ProcessLookupError:
                        pass
                    await proc.wait()  # reaps the leader
                while cgroup is not None and not _cgroup.remove(cgroup):
                    await _loop.sleep(0.005)  # empties within ms of the kill
        finally:
            proc.close()
        run.watch.discard(tree)
        run.running.pop(spec.name, None)
        run.ended += 1
        if run.guardian is not None:
            run.guardian.forget(proc.pid)
        run.leaders.discard(proc.pid)
        run.lives[spec.name][1] = _proctable.stamp_now()
    seconds = now() - started
    code = proc.returncode
    if outcome == "exited" and tree.over_cap is None and (code is None or code >= 0
                                                          or run.transparent):
        status = "ok" if code in spec.ok_exit else "failed"
        if status == "failed":
            last = capture.last_line()
            why = (f"; its stderr ends: {last!r} (all of it: supervise status, "
                   f"{_stagelog.log_path(Path(run.context.state_dir), spec.name)})" if last else "")
            out.note(index, f"[supervise] stage '{spec.name}' exited with status {code}{why}")
    elif outcome in ("exited", "cap"):
        # An abnormal end we did not cause by the deadline: a cap, or a signal we never sent
        # (an out-of-memory kill is a SIGKILL). Named like a killed stage; the start is
        # incomplete (the session protocol writes no completion record).
        status = "killed"
        what = ("its output above is incomplete" if out.stage_bytes(index)[0]
                else "it printed nothing before that")
        if tree.over_cap == "max_tasks":
            why = (f"went over max_tasks = {spec.max_tasks} tasks (processes and their threads) "
                   "and was killed whole")
        elif tree.over_cap == "max_memory":
            why = f"went over max_memory = {spec.max_memory} bytes and was killed whole"
        else:
            why = f"died of {_signal_name(-(code or 0))} (a signal the supervisor did not send)"
        out.note(index, f"[supervise] stage '{spec.name}' {why}; {what}")
        run.abnormal[spec.name] = tree.over_cap or _signal_name(-(code or 0))
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
    if kill is not None and run.on_kill is not None:
        run.on_kill(spec.name, kill)
    for pid, (row, name) in sorted(run.watch.by_pipe.pop(tree.token, {}).items()):
        if kill is not None and not run.transparent:
            capture.feed(f"[supervise] pid {pid} ({name}), a process that had left the stage's "
                         f"session and environment but held its output pipe, was killed with "
                         f"the stage\n".encode())
    if kill is not None and kill.notable and not run.transparent:
        # SIGKILL was needed, or something survived it: the stage log says so (`status`
        # shows it), never the model's context.
        capture.feed(f"[supervise] {kill.describe()}\n".encode())
    if capture.data:
        try:
            _stagelog.write_entry(Path(run.context.state_dir), spec.name,
                                  _stagelog.header(run.context, status), capture)
        except StateError as err:  # the stderr is lost; say so where the user will see it
            out.note(index, f"[supervise] stage '{spec.name}': its stderr could not be logged: "
                            f"{err}")
    raw, cut = out.stage_bytes(index)
    summary = StageSummary(spec.name, status, code, seconds, raw, cut)
    out.finish(index, summary)  # flush a cut character before the text is taken
    run.report(spec.name, StageResult(spec.name, status, code, seconds, raw, cut,
                                      out.stage_text(index)))


async def _start(run: DigestRun, index: int, spec: StagePlan,
                 token: str) -> tuple[_spawn.Child, Path | None] | None:
    """Start stage ``spec`` (its cgroup first, where there is a root): its leader and cgroup,
    with ``run.watch.spawning`` counted up; None when it could not start (its result is
    reported). A low open-files limit (``ulimit -n 24``) waits for a slot rather than fail."""
    out = run.out
    ended: int | None = None
    while True:
        if not await _descriptor_room(run, spec.name, ended) and (
                _loop.current_time() >= run.kill_at or run.abort.is_set()):
            run.report(spec.name, StageResult(spec.name, "not_started"))
            return None
        if run.guard:  # the first stage to spawn: a SIGKILLed supervisor kills none itself
            run.guard = False
            from ._guardian import Guardian

            run.guardian = Guardian.start()
            if run.guardian is not None:
                run.guarded.add(run.guardian.pid)
                run.watch.protected.add(run.guardian.pid)  # ours to reap, at its close
        cgroup = (_cgroup.create(run.cgroup_root, spec.max_tasks, spec.max_memory)
                  if run.cgroup_root is not None else None)
        if run.guardian is not None:  # a SIGKILL before `watch` below still kills it
            run.guardian.expect(token, str(cgroup) if cgroup else None)
        run.watch.spawning += 1
        try:
            if run.transparent:
                # `supervise run`: our environment as is, like GNU timeout, plus the token;
                # inherit_stdio: stdin, stdout and stderr are the command's own.
                argv = stage_argv(spec)
                if cgroup is not None:
                    argv = _cgroup.wrap(cgroup, argv)
                proc = _spawn.spawn(argv, cwd=stage_cwd(spec, run.context),
                                    env={**os.environ, TOKEN_VAR: token},
                                    capture=not run.inherit_stdio, stderr="stdout",
                                    vfork=run.vfork)
            else:  # a stage: its curated environment (docs/stage-authors.md); a built-in is
                # forked when this process runs one thread (the CLI's loop, no scan running)
                proc = launch(spec, run.context, run.config, token, cgroup, vfork=run.vfork,
                              fork=True)
        except (OSError, ValueError, ConfigError) as err:
            run.watch.spawning -= 1
            if cgroup is not None:
                _cgroup.remove(cgroup)
            if _out_of_descriptors(err) and run.running:
                ended = run.ended  # another stage holds descriptors: retry once it ends
                continue
            reason = getattr(err, "strerror", None) or str(err)
            if isinstance(err, OSError) and err.filename is None and spec.run:
                reason = f"{spec.run[0]}: {reason}"
            elif isinstance(err, OSError) and err.filename is not None:
                reason = f"{err.filename}: {reason}"
            if _out_of_descriptors(err):
                limit = descriptor_limit()
                reason += (f" (the open-files limit{f', ulimit -n {limit},' if limit else ''} "
                           "is reached and no other stage is running to free one)")
            out.note(index, f"[supervise] stage '{spec.name}' could not start: {reason}")
            run.report(spec.name, StageResult(spec.name, "failed", output=out.stage_text(index)))
            return None
        return proc, cgroup


def _signal_name(signum: int) -> str:
    try:
        return signal.Signals(signum).name
    except ValueError:
        return f"signal {signum}"
