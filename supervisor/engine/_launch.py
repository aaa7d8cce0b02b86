"""How a stage is started: its argv, environment and working directory, the "nothing to do"
rule, and the start itself (:func:`launch`), for the engine's stage tasks
(:mod:`supervisor.engine._stage`) and for the stages started before the event loop
(:mod:`supervisor.engine._prestart`).

Stdlib only (no anyio): the CLI starts the first stages with it before the engine's modules
are imported, so the stages work while those imports run.
"""

from __future__ import annotations

import os
from pathlib import Path

from .._jsontext import dumps
from . import _cgroup, _proctable, _reaper, _spawn
from ._reaper import TOKEN_VAR
from ..config._builtins import builtin_argv, builtin_program, idle, may_idle
from ..config._context import SessionContext
from ..config._plan import DigestPlan, StagePlan
from ..state._statedir import usable_path

TYPE_CHECKING = False  # not typing's: imported before the engine, on the hook's path
if TYPE_CHECKING:
    from collections.abc import Collection

    from ._guardian import Guardian

STDERR: dict[str, _spawn.Stderr] = {"context": "stdout", "log": "pipe", "drop": "null"}
"""A stage's ``stderr`` setting -> how :func:`supervisor.engine._spawn.spawn` wires fd 2."""
_STRIP_ENV = ("GIT_DIR", "GIT_INDEX_FILE", "GIT_WORK_TREE", "GIT_PREFIX")


FD_RESERVE = 8
"""Descriptors a stage's start leaves free for the watchdog and the event loop: a ``/proc``
read that fails with ``EMFILE`` reads as "process gone", so the kill must never run out."""
STAGE_FDS = 6
"""Most descriptors one stage holds at its start (both ends of its stdout and stderr pipes,
its pidfd, its stderr log)."""
START_RESERVE = 8
"""Descriptors the stages started before the event loop (:func:`prestart`) leave free, beyond
:data:`FD_RESERVE`, for the engine's own start (the modules and extension files it opens, the
event loop's descriptors)."""


def descriptor_limit() -> int | None:
    """The soft ``RLIMIT_NOFILE`` when stages may reach it (below 65536), else None."""
    import resource

    try:
        soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    except (OSError, ValueError):
        return None
    return None if soft == resource.RLIM_INFINITY or soft >= 65536 else int(soft)


def open_descriptors() -> int | None:
    """How many descriptors this process has open (one listing), or None when it cannot
    tell; at the limit the listing itself fails: then the limit."""
    import errno

    for folder in ("/proc/self/fd", "/dev/fd"):
        try:
            return len(os.listdir(folder)) - 1  # the listing's own descriptor
        except OSError as err:
            if err.errno in (errno.EMFILE, errno.ENFILE):
                return 1 << 30
    return None


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


def stage_env(spec: StagePlan, context: SessionContext, token: str,
              digest: DigestPlan | None = None) -> dict[str, str]:
    """The curated environment of a stage (see docs/stage-authors.md); ``digest`` lets the
    stage know which built-ins run beside it (``SUPERVISE_DIGEST_BUILTINS``)."""
    env = dict(_inherited_env())
    env.update(spec.env)
    env.update(context.env())
    # a symlinked state dir is never written, by stages either: they get none (the digest
    # names the link once, see supervisor.state._statedir)
    env["SUPERVISE_STATE_DIR"] = usable_path(context.state_dir)
    env["SUPERVISE_STAGE_NAME"] = spec.name
    env["SUPERVISE_STAGE_OPTIONS"] = dumps(spec.options)
    if digest is not None:
        env["SUPERVISE_DIGEST_BUILTINS"] = _digest_builtins(digest)
    env[TOKEN_VAR] = token
    env["PYTHONUNBUFFERED"] = "1"
    return env


_inherited: tuple[dict[bytes, bytes] | None, dict[str, str]] | None = None
_builtins_of: tuple[DigestPlan, str] | None = None


def _inherited_env() -> dict[str, str]:
    """This process's environment without git's and our own variables, decoded and filtered
    once per change of ``os.environ`` (not once per stage: a digest of many stages)."""
    global _inherited
    raw = getattr(os.environ, "_data", None)  # CPython's bytes mapping: compared, not decoded
    if _inherited is None or raw is None or _inherited[0] != raw:
        _inherited = (dict(raw) if raw is not None else None,
                      {k: v for k, v in os.environ.items()
                       if k not in _STRIP_ENV and not k.startswith("SUPERVISE_")})
    return _inherited[1]


def _digest_builtins(digest: DigestPlan) -> str:
    """``SUPERVISE_DIGEST_BUILTINS`` of ``digest``, computed once per digest."""
    global _builtins_of
    if _builtins_of is None or _builtins_of[0] is not digest:
        _builtins_of = (digest, ",".join(dict.fromkeys(s.builtin for s in digest.stages
                                                       if s.builtin)))
    return _builtins_of[1]


def idle_builtin(spec: StagePlan, context: SessionContext, digest: DigestPlan, token: str,
                 transparent: bool = False) -> bool:
    """A built-in stage that would only exit 0 having printed nothing (``stages/_idle.py``,
    :func:`supervisor.config._builtins.idle`, asked with the environment it would get): a
    digest's default ``memory`` and ``summary`` stages without a store or a summary file.
    Never for ``supervise run`` (``transparent``), a stage given arguments or options, or one
    whose ``ok_exit`` lacks 0. Never raises."""
    if (spec.builtin is None or transparent or spec.args or 0 not in spec.ok_exit
            or spec.options):
        return False
    try:
        if not may_idle(spec.builtin):
            return False
        return idle(spec.builtin, stage_env(spec, context, token, digest))
    except Exception:  # noqa: BLE001 - never out of a stage's task; the spawn path reports
        return False


def stage_cwd(spec: StagePlan, context: SessionContext) -> Path:
    """The working directory of stage ``spec``: its ``cwd`` (``~`` expanded, relative to the
    project) or the project directory."""
    if spec.cwd is None:
        return Path(context.project_dir)
    cwd = Path(os.path.expanduser(spec.cwd))
    return cwd if cwd.is_absolute() else Path(context.project_dir) / cwd


def launch(spec: StagePlan, context: SessionContext, digest: DigestPlan, token: str,
           cgroup: Path | None, *, vfork: bool, fork: bool = False) -> _spawn.Child:
    """Start stage ``spec`` in its own session with its curated environment and token.

    A built-in stage is forked from this process (:func:`supervisor.engine._spawn.fork_program`:
    no new interpreter; only the child runs the stage's program) when ``fork`` is true and
    :func:`supervisor.engine._spawn.may_fork` holds; any other stage, or a built-in otherwise,
    is spawned as ``argv`` (``[python, program]`` for a built-in). ``cgroup``: the stage's own
    cgroup, joined before the stage runs. ``vfork``: :func:`supervisor.engine._spawn.may_vfork`'s
    answer for this digest.

    Returns:
        The stage's leader, a :class:`supervisor.engine._spawn.Child`.

    Raises:
        OSError, ValueError: the command or its directory cannot be used.
        ConfigError: an unknown builtin.
    """
    env = stage_env(spec, context, token, digest)
    cwd = stage_cwd(spec, context)
    stderr = STDERR[spec.stderr]
    if fork and spec.builtin is not None and _spawn.may_fork():
        program = builtin_program(spec.builtin)
        return _spawn.fork_program(str(program), spec.args, cwd=cwd, env=env, stderr=stderr,
                                   cgroup=str(cgroup) if cgroup is not None else None)
    argv = stage_argv(spec)
    if cgroup is not None:
        argv = _cgroup.wrap(cgroup, argv)
    return _spawn.spawn(argv, cwd=cwd, env=env, capture=True, stderr=stderr, vfork=vfork)


class Started:
    """A stage started before the engine's event loop (:func:`prestart`): its leader
    (``child``), token, cgroup (or None) and start time (``time.monotonic()`` seconds)."""

    __slots__ = ("child", "token", "cgroup", "started")

    def __init__(self, child: _spawn.Child, token: str, cgroup: Path | None,
                 started: float) -> None:
        self.child, self.token, self.cgroup, self.started = child, token, cgroup, started


class Prestart:
    """The stages :func:`prestart` started, by name, for :func:`supervisor.engine.run_digest`
    to take over (``prestart=``); ``t0`` is when the digest began (``time.monotonic()``).

    The engine takes each stage (:meth:`take`) and from then on watches, caps, kills and
    reaps it as one it spawned itself. Whatever it did not take (the engine never ran: an
    error, or a signal before its event loop listened) :meth:`abandon` kills whole and reaps:
    the caller calls it in a ``finally``.
    """

    def __init__(self, t0: float) -> None:
        self.t0 = t0
        self.stages: dict[str, Started] = {}
        self.guardian: Guardian | None = None
        """The digest's guardian (:mod:`supervisor.engine._guardian`), started before the first
        stage and told each one, so that a SIGKILLed supervisor leaves none running even
        before the engine took them over; the engine takes it too."""

    def take(self, name: str) -> Started | None:
        """Hand stage ``name`` to the engine (once); None when it was not started here."""
        return self.stages.pop(name, None)

    def close(self) -> None:
        """The CLI's ``finally`` after the digest: :meth:`abandon` what the engine did not
        take, and stop holding signals; a signal held while the stages ran before the engine
        listened and that the engine never took is acted on now (the quiet handler of
        :mod:`supervisor._interrupts`: ``SystemExit``)."""
        from .._interrupts import release_held

        self.abandon()
        held = release_held()
        if held is not None:
            import signal

            handler = signal.getsignal(held)
            if callable(handler):
                handler(held, None)

    def abandon(self) -> None:
        """Kill (SIGKILL to its process group: the leader is unreaped, so the group is still
        its own) and reap every stage not taken, and remove its cgroup. Never raises."""
        import signal

        while self.stages:
            _, stage = self.stages.popitem()
            child = stage.child
            try:
                if child.poll() is None:
                    try:
                        os.killpg(child.pid, signal.SIGKILL)
                    except OSError:
                        os.kill(child.pid, signal.SIGKILL)
                    os.waitpid(child.pid, 0)
                    child.returncode = -signal.SIGKILL
            except OSError:
                pass
            finally:
                child.close()
            if stage.cgroup is not None:
                _cgroup.kill(stage.cgroup)
                _cgroup.remove(stage.cgroup)
        if self.guardian is not None:
            guardian, self.guardian = self.guardian, None
            guardian.close()  # nothing left for it to kill


def prestart(digest: DigestPlan, context: SessionContext,
             only: Collection[str] | None = None) -> Prestart:
    """Start, before the engine's event loop and its imports, the stages the engine would
    start first: those of ``digest`` selected by ``only`` and their ``when`` condition, not
    deferred, without ``needs``, up to ``max_parallel``, that have something to do
    (:func:`idle_builtin`), as long as a low open-files limit leaves room for the engine's own
    start (:data:`START_RESERVE`). Built-in stages are forked from this process (no new
    interpreter: :func:`launch` with ``fork``), so this must run before any thread starts;
    the others are spawned. A stage that cannot be started here is left to the engine, which
    starts it (or reports why it cannot) itself.

    Only for a process that owns all of its children and has made itself their subreaper
    (the CLI: ``enable_subreaper``, ``own_descriptors`` first). Pass the result to
    :func:`supervisor.engine.run_digest` as ``prestart=`` with the same digest, context and
    ``only``, and call :meth:`Prestart.close` in a ``finally``. While stages run before the
    engine listens, a TERM, INT or HUP is held (:func:`supervisor._interrupts.hold_signals`,
    from before the first fork) for the engine to turn into the digest's abort; with nothing
    started, a signal held meanwhile is acted on before this returns.
    """
    import time

    from ..config._plan import unmet

    from .._interrupts import hold_signals

    started = Prestart(time.monotonic())
    hold_signals()  # from the first fork on, a TERM is the digest's abort, never an orphan
    slots = digest.max_parallel or len(digest.stages)
    chosen = [s for s in digest.stages
              if (only is None or s.name in only) and not s.deferred
              and not unmet(s, context.source, context.harness, context.where)]
    if chosen and context.mode != "read-only":
        from ..state._project import ensure_state_dir

        try:  # stages keep their state here; a first run must not leave it untracked
            ensure_state_dir(context.state_dir)
        except OSError:
            pass  # stages report an unusable state dir themselves
    vfork = _spawn.may_vfork()
    root = _cgroup.cgroup_root()
    limit = descriptor_limit()
    guard = _reaper.owns_children()
    for spec in chosen:
        if spec.needs:
            continue
        if slots <= 0:
            break
        if limit is not None:  # a low open-files limit: the engine's start must still fit
            used = open_descriptors()
            if used is None or used + STAGE_FDS + FD_RESERVE + START_RESERVE > limit:
                break  # the engine starts the rest, waiting for room as it does
        slots -= 1
        token = os.urandom(16).hex()
        if idle_builtin(spec, context, digest, token):
            continue  # the engine records it `ok` without starting it
        cgroup = _cgroup.create(root, spec.max_tasks, spec.max_memory) if root is not None else None
        if guard:  # before the first stage: a SIGKILL from now on kills the stages too
            guard = False
            from ._guardian import Guardian

            started.guardian = Guardian.start()
        if started.guardian is not None:  # a SIGKILL before `watch` below still kills it
            started.guardian.expect(token, str(cgroup) if cgroup else None)
        try:
            child = launch(spec, context, digest, token, cgroup, vfork=vfork, fork=True)
        except Exception:  # noqa: BLE001 - the engine starts it again and reports the error
            if cgroup is not None:
                _cgroup.remove(cgroup)
            continue
        started.stages[spec.name] = Started(child, token, cgroup, time.monotonic())
        if started.guardian is not None:
            stamp = _proctable.start_stamp(child.pid)
            if stamp is not None:
                started.guardian.watch(child.pid, stamp, token, str(cgroup) if cgroup else None)
    if not started.stages:
        started.close()  # nothing runs yet: a signal held meanwhile ends us now, as it would have
    return started
