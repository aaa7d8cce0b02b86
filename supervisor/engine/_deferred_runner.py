"""The deferred runner: ``python -m supervisor.engine._deferred_runner``, one deferred stage, detached.

:func:`supervisor.engine._deferred.launch_all` spawns this program in its own session (stdio on
``/dev/null``) for each deferred stage. It becomes its own child subreaper, runs the stage
through the engine (:func:`supervisor.engine._run.digest`) under the stage's own deadline,
and writes the signed result to ``<state>/deferred/<stage>/result-<run id>.json``, or a
``lost-<run id>.json`` record saying why there is none.

Kept apart from :mod:`supervisor.engine._deferred` so that the engine can import the deferred
stages' launch and delivery without the runner importing the engine back (no cycle).
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .._record import replace
from ._deferred import _encode_result, _read, open_stage_dir, result_cap, result_key
from .._errors import StateError

if TYPE_CHECKING:
    from ._results import DigestResult


def main(argv: list[str] | None = None) -> int:
    """Run one deferred stage to its result file; the exit status is 0, or 1 when no result
    could be written (a ``lost-<run id>.json`` record says why when it can)."""
    import argparse

    parser = argparse.ArgumentParser(prog="python -m supervisor.engine._deferred_runner")
    parser.add_argument("--dir", required=True, type=Path)
    parser.add_argument("--run-id", required=True)
    parser.add_argument("--spec", required=True, help="the stage, as JSON (StagePlan fields)")
    parser.add_argument("--deadline", required=True, type=float)
    parser.add_argument("--grace", type=float, default=1.0)
    parser.add_argument("--cwd", type=Path, default=Path.cwd())
    args = parser.parse_args(argv)

    import signal

    from . import _reaper
    from .._interrupts import SIGNALS, leave_quietly_on_signals
    from ..config._context import SessionContext
    from ._run import digest
    from ._signals import Aborter, _act_on, run_with_signals
    from ..config._plan import DEFAULT_MAX_OUTPUT, DigestPlan

    # Before the stage starts, a TERM, INT or HUP ends the runner quietly (SystemExit); while
    # the run's event loop listens it aborts the run (run_with_signals). From the moment the
    # run ends until its result is written and running.json removed, a signal is only
    # recorded (``hold`` below) and acted on after that: the handlers put back by
    # with_signals were SIG_DFL (TERM/HUP: the runner died with its stage done, the result
    # lost and running.json left, reported LOST) and asyncio's SIGINT handler (a
    # KeyboardInterrupt wrote lost-*.json for a stage that had completed).
    leave_quietly_on_signals(None)
    quiet = signal.getsignal(signal.SIGTERM)
    pending: list[int] = []
    in_run = [False]

    def hold(signum: int, frame: Any) -> None:
        if not in_run[0] and callable(quiet):
            quiet(signum, frame)  # before the run: leave (or abort as it starts)
        elif not pending:
            pending.append(signum)

    for number in SIGNALS:
        try:
            signal.signal(number, hold)
        except (OSError, ValueError):
            pass
    _reaper.enable_subreaper()
    # The whole stage (options, env, title, max_output) travels as JSON: the runner's own
    # environment already carries the stage env, and run_digest rebuilds it from the spec.
    spec = DigestPlan.from_mapping({"stages": [json.loads(args.spec)]}).stages[0]
    # The stage gets its whole deadline as its own timeout (status timed_out, no digest
    # banner); the runner's budget leaves room for the kill sequence after it.
    spec = replace(spec, timeout=args.deadline)
    config = DigestPlan(budget=args.deadline + args.grace + 1.0, grace=args.grace,
                        max_output=spec.max_output or DEFAULT_MAX_OUTPUT, stages=(spec,))
    context = SessionContext(project_dir=args.cwd, state_dir=args.dir.parent.parent,
                             source=os.environ.get("SUPERVISE_SOURCE", ""),
                             mode=os.environ.get("SUPERVISE_MODE", "full"),  # type: ignore[arg-type]
                             harness=os.environ.get("SUPERVISE_HARNESS", ""),
                             session_id=os.environ.get("SUPERVISE_SESSION_ID", ""))
    started = time.time()
    title = spec.title or spec.name
    record: dict[str, Any] = {"name": spec.name, "title": title, "run_id": args.run_id,
                              "started": started}
    try:  # every folder from the state dir down is opened again without following links
        directory = open_stage_dir(args.dir.parent.parent, args.dir.name)
    except StateError:
        directory = None
    if directory is None:
        return 1  # the folder was replaced by a link meanwhile: nothing is written anywhere
    with directory:
        try:
            # A TERM or INT (a logout, a shutdown, a `kill`) aborts the run as it aborts a
            # digest: the stage's tree is killed and the result says so. Without handlers the
            # runner died at once and its stage ran on, orphaned, with no deadline.
            async def body(aborter: Aborter) -> DigestResult:
                in_run[0] = True  # with_signals listens: from its end on, hold() records
                return await digest(config, context, abort=aborter.event,
                                    abort_reason=aborter.reason)

            result, aborter = run_with_signals(body)
            if aborter.signum is not None and not pending:
                pending.append(aborter.signum)  # came as the run ended: the result says how
            stage = result.stages[0]
            data = _encode_result({**record, "status": stage.status, "exit_code": stage.exit_code,
                                   "seconds": round(stage.seconds, 3), "finished": time.time(),
                                   "output": stage.output}, result_cap(spec.max_output),
                                  result_key(create=False))
            directory.write(f"result-{args.run_id}.json", data, fsync=True)
        except BaseException as err:  # noqa: BLE001 - disk full, killed by TERM: say so later
            # A small record has the best chance when the big one did not fit; if even this
            # fails, running.json stays behind and the next digest reports the run as lost.
            why = (f"{type(err).__name__}: {err}" if not isinstance(err, StateError)
                   else str(err))
            try:
                directory.write_json(f"lost-{args.run_id}.json",
                                     {**record, "finished": time.time(), "error": why[:500]},
                                     fsync=True)
            except (StateError, OSError):
                pass
            if not isinstance(err, Exception):
                raise
            return 1
        finally:
            _reaper.reap_zombie_children()
        try:
            with directory.flock(".lock", timeout=10.0) as held:
                if held and (_read(directory, "running.json") or {}).get("run_id") == args.run_id:
                    directory.remove("running.json")
        except StateError:
            pass
    for number in SIGNALS:  # the result is written: a recorded signal now ends the runner
        try:
            signal.signal(number, quiet)
        except (OSError, ValueError, TypeError):
            pass
    if pending:
        _act_on(pending[0])  # the quiet handler: SystemExit(128 + n)
    return 0


if __name__ == "__main__":
    sys.exit(main())
