"""supervise run [--budget S] [--grace S] [--format text|json] -- CMD ARGS...

Bounds any command tree like GNU timeout, but the whole tree dies (process group, setsid
escapees, double-forked daemons). Exit status: CMD's own; 124 when the budget killed it; 125
for our own usage errors; 126 when CMD cannot be executed; 127 when it is not found;
128+n when the supervisor got signal n.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
from pathlib import Path

from .._exitcodes import EXIT_TIMEOUT

EXIT_RUN_USAGE = 125
EXIT_CANNOT_EXEC = 126
EXIT_NOT_FOUND = 127


def build_parser() -> argparse.ArgumentParser:
    """The ``run`` argument parser."""
    p = argparse.ArgumentParser(prog="supervise run", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--budget", type=float, default=120.0, metavar="S",
                   help="seconds until the whole tree is killed (default 120)")
    p.add_argument("--grace", type=float, default=1.0, metavar="S",
                   help="seconds between TERM and KILL (default 1)")
    p.add_argument("--format", choices=("text", "json"), default="text",
                   help="text: CMD uses our stdin, stdout and stderr (default); json: its output "
                   "is captured and printed in one JSON document with its status and seconds")
    p.add_argument("command", nargs=argparse.REMAINDER, metavar="-- CMD ARGS",
                   help="the command to run, after `--` (no shell)")
    return p


def _check_program(program: str) -> int | None:
    if "/" in program:
        path = Path(program)
        if not path.exists():
            return EXIT_NOT_FOUND
        return None if os.access(path, os.X_OK) and path.is_file() else EXIT_CANNOT_EXEC
    return None if shutil.which(program) else EXIT_NOT_FOUND


def main(argv: list[str]) -> int:
    """Run CMD under the budget; see the module docstring for exit statuses."""
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:
        return EXIT_RUN_USAGE if exc.code else 0
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        print("supervise run: no command given (usage: supervise run [--budget S] -- CMD ARGS)",
              file=sys.stderr)
        return EXIT_RUN_USAGE
    from .._plan import MAX_GRACE, MAX_SECONDS

    if not 0 < args.budget <= MAX_SECONDS or not 0 <= args.grace <= MAX_GRACE:
        print(f"supervise run: --budget must be > 0 and --grace >= 0 seconds (finite; at most "
              f"{MAX_SECONDS:g} and {MAX_GRACE:g})", file=sys.stderr)
        return EXIT_RUN_USAGE
    bad = _check_program(command[0])
    if bad is not None:
        why = "not found" if bad == EXIT_NOT_FOUND else "not executable"
        print(f"supervise run: {command[0]}: {why}", file=sys.stderr)
        return bad

    import anyio

    from .. import _tree
    from .._engine import run_command
    from .._results import StageResult
    from .._output import BufferSink
    from ._common import Aborter, with_signals

    _tree.enable_subreaper()
    sink = None if args.format == "text" else BufferSink()  # text: the command's own stdio

    async def body(aborter: Aborter) -> StageResult:
        return await run_command(command, budget=args.budget, grace=args.grace, sink=sink,
                                 abort=aborter.event)

    result, aborter = anyio.run(with_signals, body)
    _tree.reap_zombie_children()
    if result.status == "killed" and aborter.signum is not None:
        code = 128 + aborter.signum
    elif result.status == "killed":
        code = EXIT_TIMEOUT
        print(f"supervise run: {command[0]} killed after its {args.budget:g}s budget "
              f"(the whole process tree)", file=sys.stderr)
    elif result.exit_code is None:
        code = EXIT_CANNOT_EXEC
        print(f"supervise run: {command[0]}: could not start", file=sys.stderr)
    elif result.exit_code < 0:
        code = 128 - result.exit_code
    else:
        code = result.exit_code
    if args.format == "json":
        doc = {"command": command, "status": result.status, "exit_code": result.exit_code,
               "seconds": round(result.seconds, 3), "bytes": result.bytes,
               "budget": args.budget, "timed_out": code == EXIT_TIMEOUT,
               "output": sink.getvalue().decode("utf-8", "replace") if sink is not None else ""}
        sys.stdout.write(json.dumps(doc, ensure_ascii=False) + "\n")
    return code
