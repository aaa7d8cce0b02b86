"""Deferred stages: detached runners under their own deadline, results delivered exactly once.

A deferred stage (``deferred = true``; network checks and other slow work) never holds up the
digest. The digest spawns ``python -m supervisor._deferred`` in its own session with all stdio
on ``/dev/null`` (an inherited stdout would make the harness's capture wait for it: brief,
supervisor.md §2(d), 2.02 s vs 0.02 s), and never waits. The runner is its own child
subreaper, applies the same kill rules under its own deadline and writes its result
atomically to ``<state>/deferred/<stage>/result-<run id>.json``.

Delivery is exactly once: whoever renames a result file to ``delivered-…`` (an atomic
``rename``) delivers it: the digest that launched it when it is already done, else the next
prompt hook (:func:`take_undelivered`) or the next digest.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
import uuid
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ._fsutil import atomic_write, flocked

if TYPE_CHECKING:
    from ._context import SessionContext
    from ._plan import DigestPlan, StagePlan

DEFAULT_DEADLINE = 120.0
"""Seconds a deferred stage may run when it sets no ``timeout``."""

_spawned: set[int] = set()


def stage_dir(state_dir: Path, name: str) -> Path:
    """Where stage ``name``'s deferred records live."""
    return state_dir / "deferred" / name


def write_json_atomic(path: Path, data: dict[str, Any]) -> None:
    """Write ``data`` as JSON to ``path`` atomically (temp file in the same dir, fsync, rename).

    Raises:
        OSError: the directory is not writable.
    """
    atomic_write(path, json.dumps(data, ensure_ascii=False).encode("utf-8"), fsync=True)


def _read_json(path: Path) -> dict[str, Any] | None:
    try:
        data = json.loads(path.read_text("utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


@contextmanager
def _locked(directory: Path, timeout: float = 10.0) -> Iterator[bool]:
    with flocked(directory / ".lock", timeout=timeout) as held:
        yield held


def _runner_alive(record: dict[str, Any] | None) -> bool:
    if not record:
        return False
    import psutil

    try:
        proc = psutil.Process(int(record["pid"]))
        return bool(abs(proc.create_time() - float(record["create_time"])) < 0.05
                    and proc.status() != psutil.STATUS_ZOMBIE)
    except (psutil.Error, KeyError, TypeError, ValueError):
        return False


@dataclass(frozen=True)
class Launch:
    """What the digest knows about one deferred stage after launching it."""

    name: str
    title: str
    run_id: str | None
    started: float
    deadline: float
    error: str | None = None


def launch_all(specs: Sequence[StagePlan], context: SessionContext, config: DigestPlan,
               run: Any = None) -> list[Launch]:
    """Start a detached runner for each deferred stage unless one is still running.

    Never raises: a stage that cannot be launched (unwritable state dir, missing program)
    comes back with ``error`` set, and the digest says so.
    """
    from ._stage import stage_argv, stage_env
    from ._project import state_dir_problem

    launches = []
    for spec in specs:
        deadline = spec.timeout or DEFAULT_DEADLINE
        title = spec.title or spec.name
        try:
            directory = stage_dir(context.state_dir, spec.name)
            problem = (state_dir_problem(context.state_dir)
                       or state_dir_problem(directory.parent) or state_dir_problem(directory))
            if problem:
                raise OSError(problem)
            directory.mkdir(parents=True, exist_ok=True)
            # Never wait here: the digest's event loop would stall past its budget. A held
            # lock means another digest is launching this stage right now.
            with _locked(directory, timeout=0.0) as held:
                if not held:
                    launches.append(Launch(spec.name, title, None, time.time(), deadline))
                    continue
                current = _read_json(directory / "running.json")
                if _runner_alive(current):
                    assert current is not None
                    launches.append(Launch(spec.name, title, str(current.get("run_id")),
                                           float(current.get("started", time.time())), deadline))
                    continue
                run_id = f"{int(time.time() * 1000)}-{uuid.uuid4().hex[:8]}"
                token = uuid.uuid4().hex
                stage_argv(spec)  # an unknown builtin is reported here, not in the runner
                cwd = spec.cwd or str(context.project_dir)
                cwd_path = Path(cwd) if Path(cwd).is_absolute() else context.project_dir / cwd
                inner = replace(spec, deferred=False, timeout=None,
                                max_output=spec.max_output or config.max_output)
                runner = [sys.executable, "-m", "supervisor._deferred", "--dir", str(directory),
                          "--run-id", run_id, "--deadline", str(deadline),
                          "--grace", str(config.grace), "--cwd", str(cwd_path),
                          "--spec", json.dumps(asdict(inner))]
                devnull = os.devnull
                pid = os.posix_spawn(runner[0], runner, stage_env(spec, context, token, config), setsid=True,
                                     file_actions=[(os.POSIX_SPAWN_OPEN, 0, devnull, os.O_RDONLY, 0),
                                                   (os.POSIX_SPAWN_OPEN, 1, devnull, os.O_WRONLY, 0),
                                                   (os.POSIX_SPAWN_OPEN, 2, devnull, os.O_WRONLY, 0)])
                _spawned.add(pid)
                import psutil

                try:
                    created = psutil.Process(pid).create_time()
                except psutil.Error:
                    created = 0.0
                now = time.time()
                write_json_atomic(directory / "running.json", {
                    "pid": pid, "create_time": created, "run_id": run_id, "started": now,
                    "deadline": deadline, "name": spec.name, "title": title})
                launches.append(Launch(spec.name, title, run_id, now, deadline))
        except Exception as err:  # noqa: BLE001 - reported in the digest, never fatal
            launches.append(Launch(spec.name, title, None, time.time(), deadline,
                                   error=f"{type(err).__name__}: {err}"))
    return launches


def spawned_pids() -> set[int]:
    """Pids of runners this process launched (never killed by the digest's sweeps)."""
    return set(_spawned)


def _claim(path: Path) -> dict[str, Any] | None:
    """Atomically claim an undelivered result; None when someone else got it first."""
    target = path.with_name(path.name.replace("result-", "delivered-", 1))
    try:
        os.rename(path, target)
    except OSError:
        return None
    data = _read_json(target) or {}
    for old in path.parent.glob("delivered-*.json"):  # keep only the newest delivered record
        if old != target:
            try:
                old.unlink()
            except OSError:
                pass
    return data


def format_result(data: dict[str, Any], *, late: bool, earlier: bool = False) -> str:
    """The text a delivered result shows: a heading, when it ran, and its output.

    ``late``: delivered after the digest was composed (prompt hook); ``earlier``: a result of
    an earlier run delivered by this digest (its own run has not finished).
    """
    name = str(data.get("name", "?"))
    title = str(data.get("title") or name)
    status = str(data.get("status", "?"))
    raw_seconds = data.get("seconds")
    seconds = float(raw_seconds) if isinstance(raw_seconds, (int, float)) else 0.0
    when = ""
    finished = data.get("finished")
    if isinstance(finished, (int, float)) and not isinstance(finished, bool):
        when = f", finished {time.strftime('%Y-%m-%d %H:%M:%S', time.localtime(finished))}"
    label = name if title == name else f"{name}: {title}"
    head = f"[deferred stage '{label}': {status} in {seconds:.1f}s{when}]"
    if earlier:
        note = "This is the result of an EARLIER run, started by a previous digest."
    elif late:
        note = ("It ran AFTER the sections above were composed; it was not part of the "
                "digest's start.")
    else:
        note = "It ran off the startup path."
    output = str(data.get("output", "")).rstrip("\n") or "(no output: nothing to report)"
    return f"{head}\n{note}\n{output}"


def _claim_newest(paths: Sequence[Path]) -> list[dict[str, Any]]:
    """Claim every result in ``paths`` (one stage's, oldest first); return the claimed
    records, oldest first. Older records are superseded by newer ones, so callers show the last."""
    return [data for data in map(_claim, paths) if data is not None]


def _results(state_dir: Path) -> Iterator[Path]:
    """Every undelivered result file, stage by stage, oldest first. Never raises."""
    try:
        stage_dirs = sorted(p for p in (state_dir / "deferred").iterdir() if p.is_dir())
    except OSError:
        return
    for directory in stage_dirs:
        yield from sorted(directory.glob("result-*.json"))


def take_undelivered(state_dir: Path) -> list[str]:
    """Claim every finished, undelivered deferred result; return their texts (one per stage,
    the newest; older results of the same stage are superseded and dropped).

    Exactly once across concurrent callers (atomic rename). Fast when there is nothing:
    one ``listdir`` per deferred stage. Never raises.
    """
    by_stage: dict[Path, list[Path]] = {}
    for path in _results(state_dir):
        by_stage.setdefault(path.parent, []).append(path)
    texts = []
    for paths in by_stage.values():
        claimed = _claim_newest(paths)
        if claimed:
            texts.append(format_result(claimed[-1], late=True))
    return texts


def pending(state_dir: Path) -> list[dict[str, Any]]:
    """Finished deferred results not yet delivered, read without claiming them (for
    ``supervise status``); each is the result record (name, status, seconds, finished, ...).
    Never raises."""
    return [data for data in map(_read_json, _results(state_dir)) if data is not None]


def running(state_dir: Path) -> list[dict[str, Any]]:
    """Deferred runners still alive (their ``running.json`` records). Never raises."""
    found = []
    try:
        stage_dirs = sorted(p for p in (state_dir / "deferred").iterdir() if p.is_dir())
    except OSError:
        return []
    for directory in stage_dirs:
        record = _read_json(directory / "running.json")
        if _runner_alive(record):
            assert record is not None
            found.append(record)
    return found


@dataclass(frozen=True)
class Delivery:
    """What a digest shows for one deferred stage: ``text`` (one block), and ``record``, the
    result record (status, exit_code, seconds, output, ...) when a result was delivered."""

    name: str
    text: str
    record: dict[str, Any] | None = None


def collect(specs: Sequence[StagePlan], context: SessionContext,
            launches: Sequence[Launch]) -> list[Delivery]:
    """What the digest shows for its deferred stages, at its end, one block per stage: this
    run's result when it finished in time; else one ``IN PROGRESS`` block, carrying the newest
    undelivered result of an earlier run when there is one (older ones are superseded)."""
    out = []
    for launch in launches:
        if launch.error is not None:
            out.append(Delivery(launch.name, f"[supervise] deferred stage '{launch.name}' could "
                                f"not be launched: {launch.error}"))
            continue
        directory = stage_dir(context.state_dir, launch.name)
        claimed = _claim_newest(sorted(directory.glob("result-*.json")))
        ours = [d for d in claimed if d.get("run_id") == launch.run_id]
        if ours:
            out.append(Delivery(launch.name, format_result(ours[-1], late=False), ours[-1]))
            continue
        age = time.time() - launch.started
        text = (f"IN PROGRESS: deferred stage '{launch.name}'"
                f"{'' if launch.title == launch.name else f' ({launch.title})'} has not finished "
                f"(running {age:.1f}s of its {launch.deadline:g}s deadline). NOT yet confirmed: "
                f"{launch.title}. Its result will be delivered once, later (next prompt or next "
                f"digest); `supervise status` shows it.")
        earlier = claimed[-1] if claimed else None
        if earlier is not None:
            text += "\n" + format_result(earlier, late=False, earlier=True)
        out.append(Delivery(launch.name, text, earlier))
    return out


# -- the runner -------------------------------------------------------------------------------
def _runner(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m supervisor._deferred")
    parser.add_argument("--dir", required=True, type=Path)
    parser.add_argument("--run-id", required=True)
    parser.add_argument("--spec", required=True, help="the stage, as JSON (StagePlan fields)")
    parser.add_argument("--deadline", required=True, type=float)
    parser.add_argument("--grace", type=float, default=1.0)
    parser.add_argument("--cwd", type=Path, default=Path.cwd())
    args = parser.parse_args(argv)

    import anyio

    from . import _tree
    from ._context import SessionContext
    from ._plan import DigestPlan
    from ._engine import run_digest

    _tree.enable_subreaper()
    # The whole stage (options, env, title, max_output) travels as JSON: the runner's own
    # environment already carries the stage env, and run_digest rebuilds it from the spec.
    spec = DigestPlan.from_mapping({"stages": [json.loads(args.spec)]}).stages[0]
    # The stage gets its whole deadline as its own timeout (status timed_out, no digest
    # banner); the runner's budget leaves room for the kill sequence after it.
    spec = replace(spec, timeout=args.deadline)
    config = DigestPlan(budget=args.deadline + args.grace + 1.0, grace=args.grace,
                        max_output=spec.max_output or 1 << 20, stages=(spec,))
    context = SessionContext(project_dir=args.cwd, state_dir=args.dir.parent.parent,
                             source=os.environ.get("SUPERVISE_SOURCE", ""),
                             mode=os.environ.get("SUPERVISE_MODE", "full"),  # type: ignore[arg-type]
                             harness=os.environ.get("SUPERVISE_HARNESS", ""),
                             session_id=os.environ.get("SUPERVISE_SESSION_ID", ""))
    started = time.time()
    result = anyio.run(run_digest, config, context)
    stage = result.stages[0]
    running = args.dir / "running.json"
    title = spec.title or spec.name
    write_json_atomic(args.dir / f"result-{args.run_id}.json", {
        "name": spec.name, "title": title, "run_id": args.run_id, "status": stage.status,
        "exit_code": stage.exit_code, "seconds": round(stage.seconds, 3),
        "started": started, "finished": time.time(),
        "output": stage.output})
    with _locked(args.dir) as held:
        if held and (_read_json(running) or {}).get("run_id") == args.run_id:
            running.unlink(missing_ok=True)
    _tree.reap_zombie_children()
    return 0


if __name__ == "__main__":
    sys.exit(_runner())
