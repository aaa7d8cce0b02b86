"""``supervise run``'s lean path: spawn, wait under the budget, hand the kill to the watchdog.

GNU ``timeout`` costs a fork and an exec; ``supervise run`` used to start the whole anyio
engine (asyncio with ``ssl``, the watchdog's dataclasses) before the command even started.
Here (Linux) the command starts with ``os.posix_spawnp`` (``setsid=True``: its own session
and process group, like a stage; inherited stdio, or a pipe for ``--format json``) and this
process, a child subreaper, waits in one ``poll`` on a self-pipe that ``SIGCHLD``,
the signals of :data:`FORWARDED` write to (``signal.set_wakeup_fd``), reaping adopted
orphans at each wakeup. The watchdog (:mod:`supervisor.engine._tree`, on the engine's loop) is loaded only when
the command has run :data:`WATCH_AFTER` seconds or is within :data:`PREFETCH` seconds of its
deadline (it then scans, as the engine's monitor, so that a kill knows the tree), or when
there is something to kill:

- a signal to us is forwarded to the command's process group (GNU ``timeout``'s rule);
  ``grace`` seconds later, if the command still runs, and at the deadline:
  :meth:`supervisor.engine._tree.Watch.kill_stage` (TERM,
  grace, freeze, KILL, the whole tree: group, ``setsid`` escapees, double forks);
- after a normal exit, when something may be left behind (the process group is not empty,
  the command's cgroup is not empty, or one of our children is alive: with the child
  subreaper every orphan of the tree becomes our child, so this check is complete):
  :meth:`~supervisor.engine._tree.Watch.has_leftovers` then ``kill_stage``, as the engine sweeps a
  stage (systemd control-group semantics, design rule 8);
- a SIGKILL to us: the guardian (:mod:`supervisor.engine._guardian`), forked just before the
  command is spawned (knowing its token), kills the command's tree when it reads end of file
  on its pipe, whenever in the command's life the SIGKILL comes.

No second kill sequence lives here, and no second copy of the engine's numbers: the timing
table, the portable switch, the subreaper, the children listing and the reaper come from
:mod:`supervisor.engine._reaper`, the cgroup from :mod:`supervisor.engine._cgroup`, both
stdlib only and cheap, like the rest of this module's imports (``os``, ``select``, ``signal``,
``sys``, ``time``): the hot-path import guard in ``tests/test_run_verb.py`` keeps anyio,
asyncio, psutil, pydantic, dataclasses and pathlib out.
Without a child subreaper (macOS, ``SUPERVISE_PORTABLE``) :func:`available` is False and
``supervise run`` uses the engine, whose scans run from the start.
"""

from __future__ import annotations

import errno
import os
import select
import sys
import time

from . import _cgroup
from ._reaper import (DRAIN, DRAIN_RESERVE, KILL_MARGIN, KILL_WAIT, MONITOR_MAX_PERIOD, PORTABLE,
                      READ_SIZE, REAP_BATCH, TOKEN_VAR, enable_subreaper, our_children,
                      reap_zombie_children, shell_fallback)

TYPE_CHECKING = False  # not `typing.TYPE_CHECKING`: importing typing costs the hot path
if TYPE_CHECKING:
    import signal
    from pathlib import Path

    from ._tree import KillReport
else:
    try:  # CPython's `_signal`: `signal`'s functions and numbers without its three IntEnums
        import _signal as signal  # (and enum, functools, collections), built at every import
    except ImportError:
        import signal

FORWARDED = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGQUIT, signal.SIGALRM)
"""Signals to us that we forward to the command's process group, as GNU ``timeout`` does
(its own handlers run: a Python command's ``KeyboardInterrupt`` and ``finally``), instead of
killing us; the whole tree is killed when the command has not ended ``grace`` seconds later."""
PREFETCH = 3.0
"""Seconds before the deadline from which the watchdog is loaded and scans the process
table (every 0.1 to 0.5 s, as the engine's monitor does), so that its kill sequence starts at
the deadline knowing the tree's members: the kill has only grace + ``HARD_PHASE`` + the drain
reserve, too short to find a ``setsid`` escapee from nothing on a starved host, where loading
the watchdog's imports alone can take seconds."""
WATCH_AFTER = 1.0
"""Seconds of the command's life after which the watchdog is loaded and scans anyway: a
command that runs this long gets the engine's watch (a signal to us, or its exit, then finds
a tree already known), and one that ends sooner never pays for it."""


class Outcome:
    """How the command ended.

    Attributes:
        status: ``"ok"`` (exit status 0), ``"failed"`` (another status or a signal death the
            supervisor did not cause, a forwarded one included: the command's own answer to it), or
            ``"killed"`` (the budget ran out, or the command outlived the grace after a
            forwarded signal: the whole tree was killed).
        exit_code: the command's status; negative ``-n`` for a death by signal ``n``; None
            when it could not be reaped within the kill's bound.
        seconds: wall seconds from the spawn to the end of the sweep.
        signum: the first of :data:`FORWARDED` we received while it ran, or None.
        output: what the command printed (stdout and stderr merged), when captured; else b"".
        swept: whether the watchdog ran (a kill, or leftovers looked for after an exit).
        kill: what the kill sequence did (:class:`supervisor.engine._tree.KillReport`), when
            one ran; else None.
    """

    __slots__ = ("status", "exit_code", "seconds", "signum", "output", "swept", "kill")

    def __init__(self, status: str, exit_code: int | None, seconds: float, signum: int | None,
                 output: bytes, swept: bool, kill: KillReport | None = None) -> None:
        self.status, self.exit_code, self.seconds = status, exit_code, seconds
        self.signum, self.output, self.swept, self.kill = signum, output, swept, kill


def available() -> bool:
    """Whether this path runs here: Linux with ``/proc`` and ``posix_spawnp`` (its ``setsid``
    support is checked at the spawn: :class:`NotImplementedError` then), the portable path
    not forced. Elsewhere (macOS, ``SUPERVISE_PORTABLE``) there is no child subreaper: only
    the watchdog's scans, running from the start, find a ``setsid`` escapee in time, so
    ``supervise run`` uses the engine there (:func:`supervisor.run_command`)."""
    return (hasattr(os, "posix_spawnp") and sys.platform.startswith("linux")
            and os.path.isdir("/proc/self") and not PORTABLE)


def _wait_readable(fds: list[int], seconds: float) -> list[int]:
    """The fds of ``fds`` readable (or at EOF) within ``seconds``; [] on timeout. ``poll``,
    not ``select``: an fd number above 1023 (many inherited files) is fine."""
    poller = select.poll()
    for fd in fds:
        poller.register(fd, select.POLLIN)
    return [fd for fd, _ in poller.poll(max(0.0, seconds) * 1000)]


def _status(raw: int) -> int:
    return os.waitstatus_to_exitcode(raw)


def _drain(fd: int) -> None:
    try:
        while os.read(fd, 4096):
            pass
    except (BlockingIOError, InterruptedError, OSError):
        pass


def run(argv: list[str], *, budget: float, grace: float, capture: bool = False) -> Outcome:
    """Run ``argv`` (no shell) in its own session until it ends, ``budget`` seconds pass, or
    we get one of :data:`FORWARDED`; kill its whole tree at the deadline or on the signal,
    sweep its leftovers after a normal exit.

    Args:
        argv: the command; ``argv[0]`` is looked up in ``PATH`` when it has no ``/``.
        budget: seconds the command gets (GNU ``timeout`` semantics: the kill comes after).
        grace: seconds between TERM and KILL.
        capture: False: the command uses our stdin, stdout and stderr. True: stdin is
            ``/dev/null`` and stdout and stderr go, merged, to :attr:`Outcome.output`.

    Returns:
        An :class:`Outcome`; the call returns by ``budget + grace + 0.25`` seconds.

    Raises:
        OSError: the command could not be started (``FileNotFoundError`` when not found,
            ``PermissionError`` when not executable, ...): nothing was started.
        NotImplementedError: ``posix_spawn`` cannot start a new session on this platform.
        ValueError: not called from the main thread (signal handlers are installed for the
            wait, and put back before it returns). Meant for the ``supervise`` CLI process,
            which owns all of its children (it reaps every zombie child it has).
    """
    token = os.urandom(16).hex()
    env = dict(os.environ)
    env[TOKEN_VAR] = token
    subreaper = enable_subreaper()
    root = _cgroup.cgroup_root()
    cgroup: Path | None = None
    spawn_argv = argv
    if root is not None:
        cgroup = _cgroup.create(root)
        if cgroup is not None:
            spawn_argv = _cgroup.wrap(cgroup, argv)
    wake_r, wake_w = os.pipe()
    os.set_blocking(wake_r, False)
    os.set_blocking(wake_w, False)
    out_r = out_w = -1
    actions: list[tuple[int, ...] | tuple[int, int, str, int, int]] = []
    if capture:
        out_r, out_w = os.pipe()
        actions = [(os.POSIX_SPAWN_OPEN, 0, os.devnull, os.O_RDONLY, 0),
                   (os.POSIX_SPAWN_DUP2, out_w, 1), (os.POSIX_SPAWN_DUP2, out_w, 2)]
    got: list[int] = []

    def on_signal(signum: int, frame: object) -> None:
        got.append(signum)  # each one is forwarded, in order (the first names our status)

    before = {sig: signal.getsignal(sig) for sig in (*FORWARDED, signal.SIGCHLD)}
    old_wakeup = signal.set_wakeup_fd(wake_w, warn_on_full_buffer=False)
    chunks: list[bytes] = []
    try:
        signal.signal(signal.SIGCHLD, lambda signum, frame: None)  # wakes the select
        for sig in FORWARDED:
            signal.signal(sig, on_signal)
        restore = tuple(s for s in (getattr(signal, "SIGPIPE", None),
                                    getattr(signal, "SIGXFSZ", None)) if s is not None)
        # A SIGKILL to us (the OOM killer, a harness's timeout, `kill -9`) runs no kill: the
        # guardian kills the command's tree when it reads end of file on its pipe, as a
        # digest's does (supervisor.engine._guardian). Forked before the spawn, knowing the
        # token the command will carry, so no moment of the command's life is unguarded.
        from ._guardian import Guardian

        cgroup_name = str(cgroup) if cgroup is not None else None
        guard = Guardian.start((token, cgroup_name))
        mine: list[int] = [guard.pid] if guard is not None else []  # never a tree member
        started = time.monotonic()
        try:
            try:
                pid = os.posix_spawnp(spawn_argv[0], spawn_argv, env, file_actions=actions,
                                      setsid=True, setsigdef=restore)
            except OSError as err:
                if err.errno != errno.ENOEXEC:
                    raise
                # execvp's rule: a file the kernel cannot execute (no `#!`) runs with the shell
                sh = shell_fallback(_found(spawn_argv[0], env), spawn_argv)
                pid = os.posix_spawn(sh[0], sh, env, file_actions=actions, setsid=True,
                                     setsigdef=restore)
        except BaseException:
            if guard is not None:
                guard.close()  # nothing was started: nothing for it to kill
            if cgroup is not None:
                _cgroup.remove(cgroup)
            raise
        finally:
            if out_w >= 0:
                os.close(out_w)
        if guard is not None:
            guard.watch(pid, None, token, cgroup_name)

        def unguarded() -> None:
            if guard is not None:
                guard.close()  # the tree is dead or swept: nothing for it to kill

        kill_at = started + budget
        end_at = kill_at + grace + KILL_MARGIN
        raw: int | None = None
        reason = "exited"
        dog: _Watchdog | None = None
        sent = 0  # signals of `got` forwarded so far
        escalate_at = float("inf")
        try:
            while True:
                try:
                    done, wait_status = os.waitpid(pid, os.WNOHANG)
                except ChildProcessError:  # pragma: no cover - someone else reaped it
                    done, wait_status = pid, 0
                if done:
                    raw = wait_status
                    break
                if subreaper:  # adopted orphans, never the command itself
                    reap_zombie_children((pid,), REAP_BATCH)
                if len(got) > sent:
                    for signum in got[sent:]:
                        _forward(pid, signum)
                    if not sent:  # the first: the command gets grace seconds to end (the
                        # kill or sweep after it keeps its own bound, grace + KILL_WAIT from
                        # its start: the watchdog's imports may take seconds on a starved host)
                        escalate_at = time.monotonic() + grace
                    sent = len(got)
                    continue  # its exit may be there already
                now = time.monotonic()
                if now >= escalate_at:
                    reason = "signal"
                    break
                if now >= kill_at:
                    reason = "deadline"
                    break
                left = min(kill_at, escalate_at) - now
                watch_at = min(kill_at - PREFETCH, started + WATCH_AFTER)
                if got:  # a forwarded signal: the watchdog is loaded to kill at escalate_at
                    watch_at = min(watch_at, escalate_at - PREFETCH)
                if time.monotonic() >= watch_at:
                    if dog is None:  # now, so that a kill starts on time, knowing the tree
                        dog = _Watchdog(pid, token, cgroup, mine)
                    if time.monotonic() >= dog.next_scan:
                        dog.scan(min(kill_at, escalate_at))  # who the kill must reach
                        continue
                    timeout = min(left, dog.next_scan - time.monotonic())
                else:
                    timeout = watch_at - time.monotonic()
                ready = _wait_readable([wake_r] if out_r < 0 else [wake_r, out_r], timeout)
                if wake_r in ready:
                    _drain(wake_r)
                if out_r >= 0 and out_r in ready:
                    data = os.read(out_r, READ_SIZE)
                    if data:
                        chunks.append(data)
                    else:
                        os.close(out_r)
                        out_r = -1
        except BaseException:
            # An error of ours while it runs: the whole tree still dies (bounded), then the
            # error propagates.
            (dog or _Watchdog(pid, token, cgroup, mine)).kill(grace, end_at)
            unguarded()
            raise
        swept = False
        if reason != "exited":
            swept = True
            # after a forwarded signal the command had its grace: the kill starts hard
            dog = dog or _Watchdog(pid, token, cgroup, mine)
            raw = dog.kill(0.0 if reason == "signal" else grace, end_at)
        elif _may_have_leftovers(pid, cgroup, subreaper, mine):
            swept = True
            dog = dog or _Watchdog(pid, token, cgroup, mine)
            dog.sweep(grace, end_at)
        unguarded()
        if out_r >= 0:
            until = min(time.monotonic() + DRAIN, end_at)
            while (left := until - time.monotonic()) > 0:
                if not _wait_readable([out_r], left):
                    break
                data = os.read(out_r, READ_SIZE)
                if not data:
                    break
                chunks.append(data)
        if cgroup is not None:
            give_up = time.monotonic() + 1.0
            while not _cgroup.remove(cgroup) and time.monotonic() < give_up:
                time.sleep(0.005)  # empties within ms of the kill
        if subreaper:
            reap_zombie_children(limit=REAP_BATCH)
        seconds = time.monotonic() - started
    finally:
        signal.set_wakeup_fd(old_wakeup)
        for sig, handler in before.items():
            try:
                signal.signal(sig, handler if handler is not None else signal.SIG_DFL)
            except (OSError, ValueError, TypeError):
                pass
        for fd in (wake_r, wake_w, out_r):
            if fd >= 0:
                os.close(fd)
    code = None if raw is None else _status(raw)
    if reason != "exited":
        ended = "killed"
    else:
        ended = "ok" if code == 0 else "failed"
    return Outcome(ended, code, seconds, got[0] if got else None, b"".join(chunks), swept,
                   dog.report if dog is not None else None)


def _found(program: str, env: dict[str, str]) -> str:
    """``program`` as the path ``posix_spawnp`` ran: itself with a ``/``, else the first
    executable of that name on ``env``'s ``PATH``."""
    if "/" in program:
        return program
    for folder in os.get_exec_path(env):
        path = os.path.join(folder, program)
        if os.path.isfile(path) and os.access(path, os.X_OK):
            return path
    raise FileNotFoundError(errno.ENOENT, os.strerror(errno.ENOENT), program)


def _forward(leader: int, sig: int) -> None:
    """``sig``, then SIGCONT (a stopped job acts on it), to the command's process group (its
    leader is unreaped: the group id is provably ours), as GNU ``timeout`` forwards a signal
    it receives. Never raises."""
    for each in (sig, signal.SIGCONT):
        try:
            os.killpg(leader, each)
        except (ProcessLookupError, PermissionError):
            pass


def _may_have_leftovers(leader: int, cgroup: Path | None, subreaper: bool,
                        mine: list[int] | tuple[int, ...] = ()) -> bool:
    """After the leader exited and was reaped: whether anything of its tree may be alive.
    Cheap and complete with the subreaper (its group, its cgroup, our children but ``mine``,
    the guardian); without it only a scan of the process table can tell (True)."""
    if cgroup is not None:
        if _cgroup.pids(cgroup):
            return True
    try:
        os.killpg(leader, 0)
        return True  # its group is not empty (the id stays ours while it is not)
    except (ProcessLookupError, PermissionError):
        pass
    if not subreaper:
        return True
    reap_zombie_children(limit=REAP_BATCH)
    children = our_children()
    return children is None or any(child not in mine for child in children)


class _Watchdog:
    """The watchdog (:class:`supervisor.engine._tree.Watch`) of the command's tree, loaded only
    when it may be needed: after :data:`WATCH_AFTER` seconds or :data:`PREFETCH` seconds
    before the deadline (then it scans, as the engine's monitor does, so that a kill knows
    the tree's members), or at a signal, or for a sweep. Its kill and sweep are the watchdog's own (``kill_stage``,
    ``has_leftovers``); nothing here signals a process."""

    def __init__(self, leader: int, token: str, cgroup: Path | None,
                 mine: list[int] | tuple[int, ...] = ()) -> None:
        from . import _tree

        self.leader = leader
        self.reaped = False
        self.tree = _tree.StageTree(leader, lambda: not self.reaped, token, cgroup,
                                    adopts_all=True)  # the one command: every orphan is its
        self.watch = _tree.Watch(exclude=lambda: set(mine))  # the guardian is no member
        self.watch.add(self.tree)
        self.watch.protected.update(mine)  # ours to reap, at its close
        self.next_scan = time.monotonic()
        """When the next scan is due (monotonic seconds)."""
        self.report: KillReport | None = None
        """What the kill sequence did, once it ran (a sweep that found nothing runs none)."""

    def scan(self, until: float) -> None:
        """One bounded scan (returns by ``until``, monotonic seconds, and by the watchdog's
        longest period); the next is due one period later."""
        from . import _loop

        period = MONITOR_MAX_PERIOD

        async def refresh() -> None:  # the loop's clock is time.monotonic
            await self.watch.refresh(min(until, time.monotonic() + period), background=True)

        _loop.run(refresh)
        self.next_scan = time.monotonic() + min(max(0.1, 4 * self.watch.scan_seconds), period)

    def kill(self, grace: float, end_at: float) -> int | None:
        """The kill sequence (``kill_stage`` with ``grace``; the leader is not yet reaped),
        then the leader reaped. Returns its raw wait status, None when it could not be
        reaped within :data:`supervisor.engine._reaper.KILL_WAIT`."""
        self._run(grace, end_at, sweep=False)
        give_up = time.monotonic() + KILL_WAIT
        while True:
            try:
                done, status = os.waitpid(self.leader, os.WNOHANG)
            except ChildProcessError:  # pragma: no cover - someone else reaped it
                return None
            if done:
                self.reaped = True
                return status
            if time.monotonic() >= give_up:
                return None
            time.sleep(0.005)

    def sweep(self, grace: float, end_at: float) -> None:
        """After a normal exit (the leader reaped): ``has_leftovers`` then, if any,
        ``kill_stage``, as the engine sweeps a stage."""
        self.reaped = True
        self._run(grace, end_at, sweep=True)

    def _run(self, grace: float, end_at: float, *, sweep: bool) -> None:
        """Deadlines are the engine's: ``min(now + grace + KILL_WAIT, end_at -
        DRAIN_RESERVE)`` (``end_at``: monotonic seconds); the reaper and the monitor run
        beside it, as in a digest."""
        from . import _loop

        watch, tree = self.watch, self.tree

        async def body() -> None:
            limit = end_at - DRAIN_RESERVE  # the loop's clock is time.monotonic

            def kill_deadline() -> float:
                return min(_loop.current_time() + grace + KILL_WAIT, limit)

            async with _loop.create_task_group() as tg:
                tg.start_soon(watch.reaper)
                tg.start_soon(watch.monitor)
                with _loop.CancelScope(shield=True):
                    if not sweep:
                        self.report = await watch.kill_stage(tree, grace, kill_deadline())
                    elif await watch.has_leftovers(
                            tree, min(_loop.current_time() + KILL_WAIT, limit)):
                        self.report = await watch.kill_stage(tree, grace, kill_deadline())
                tg.cancel_scope.cancel()

        _loop.run(body)
