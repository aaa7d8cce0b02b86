"""``supervise nudge [HARNESS]``: print the one-line nudge (``supervisor.session._nudge.NUDGE_TEXT``).

For harnesses that cannot carry hook output into the model's context: the model is asked
to run ``supervise digest`` itself. Silent when the lock's live owner is one of our first
8 ancestors (the digest already ran in this harness session), in a gate agent, and outside
the primary scope. A payload on stdin is read (bounded) only for the project directory.

Exit status: always 0, like ``hook``.
"""

from __future__ import annotations

import sys

from .._exitcodes import EXIT_OK
from .._interrupts import leaving
from .hook import (HookArgs, emit, help_text, parse_hook_args, quiet_exit_on_signals,
                   report_internal_error)


def _run(args: HookArgs) -> None:
    from ..session import _payload
    from ..session._ancestry import NUDGE_HOPS, ancestry
    from ..config._plan import DigestPlan
    from ..config._plancache import load_plan
    from ..config._context import state_dir_for
    from .._errors import ConfigError
    from ..session._gates import stand_down_reason
    from ..session._nudge import NUDGE_TEXT, digest_ran_here

    payload = _payload.read_payload(args.harness)
    project = _payload.project_dir(payload)
    try:
        config = load_plan(project)  # cached: no pydantic on the hot path
    except ConfigError:
        config = DigestPlan()  # the nudge itself needs no stages; gates use the defaults
    if stand_down_reason(config, project):
        return
    state_dir = state_dir_for(project)
    from ..session._off import off_line, off_reason

    off = off_reason(project)
    if off:  # instead of asking for a digest that would not run
        emit(args.harness, off_line(off, "do not run `supervise digest`"),
             state_dir=state_dir, kind="nudge")
        return
    if digest_ran_here(state_dir, ancestry(NUDGE_HOPS)):
        return
    problem = emit(args.harness, NUDGE_TEXT, state_dir=state_dir, kind="nudge")
    if problem:
        print(f"supervise nudge: the nudge was NOT delivered: {problem}", file=sys.stderr)


def main(argv: list[str]) -> int:
    """Print the nudge unless silent; always returns 0."""
    args = HookArgs()
    quiet_exit_on_signals()  # a harness path: a TERM while reading the payload still exits 0
    try:
        args = parse_hook_args(argv, verb="nudge")
        if args.help:
            sys.stdout.write(help_text("nudge"))
            return EXIT_OK
        for problem in args.problems:
            print(f"supervise nudge: {problem} (ignored)", file=sys.stderr)
        _run(args)
    except BaseException as err:  # noqa: BLE001 - every path exits 0; the error is stated
        if isinstance(err, SystemExit) and not err.code or leaving() is not None:
            return EXIT_OK
        report_internal_error("nudge", args.harness, err, "nudge")
    return EXIT_OK
