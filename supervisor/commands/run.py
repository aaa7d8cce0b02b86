"""supervise run: bound a command and its whole tree, like GNU timeout.

Bounds any command tree like GNU timeout, but the whole tree dies (process group, setsid
escapees, double-forked daemons). Exit status: CMD's own; 124 when the budget killed it; 125
for our own usage errors; 126 when CMD cannot be executed; 127 when it is not found.
TERM, INT, HUP, QUIT and ALRM to the supervisor are forwarded to CMD (its handlers run): the
status is then CMD's (128+n when the signal killed it), and if CMD is still running --grace
seconds later its whole tree is killed: 128+n.
"""

from __future__ import annotations

import errno
import os
import sys

from ..engine import _runwait
from .._exitcodes import EXIT_RUN_FAILURE, EXIT_TIMEOUT
from ..config._limits import MAX_GRACE, MAX_SECONDS
from . import _args

TYPE_CHECKING = False  # not `typing.TYPE_CHECKING`: importing typing costs the hot path
if TYPE_CHECKING:
    from ..engine._tree import KillReport

EXIT_RUN_USAGE = EXIT_RUN_FAILURE
EXIT_CANNOT_EXEC = 126
EXIT_NOT_FOUND = 127


class RunArgs:
    """``supervise run``'s arguments: ``budget`` and ``grace`` in seconds, ``format``
    (``text``/``json``) and ``command`` (argv; empty when none was given). A plain class:
    ``run -- true`` does not import :mod:`supervisor._record`."""

    __slots__ = ("budget", "grace", "format", "command")

    def __init__(self) -> None:
        self.budget, self.grace, self.format = 120.0, 1.0, "text"
        self.command: list[str] = []


RUN = _args.Command("supervise run", __doc__ or "", (
    _args.Option(("--budget",), "budget", "seconds until the whole tree is killed (default "
                 "{default})", metavar="S", convert=_args.number),
    _args.Option(("--grace",), "grace", "seconds between TERM and KILL (default {default})",
                 metavar="S", convert=_args.number),
    _args.Option(("--format",), "format", "text: CMD uses our stdin, stdout and stderr "
                 "(default); json: its output is captured and printed in one JSON document "
                 "with its status and seconds", choices=("text", "json")),
), _args.Positional("command", "-- CMD ARGS", "the command to run, after `--` (no shell)",
                    rest=True), defaults=RunArgs)
"""``run``'s argument table: the parse (:func:`main`) and ``--help`` read it."""


def _check_program(program: str) -> int | None:
    """127 when ``program`` is not found, 126 when it is not an executable file, else None
    (``shutil.which``'s rule, without importing ``shutil``)."""
    if "/" in program:
        try:
            if not os.path.exists(program):
                return EXIT_NOT_FOUND
            return None if os.path.isfile(program) and os.access(program, os.X_OK) else EXIT_CANNOT_EXEC
        except (OSError, ValueError):  # a NUL in the name
            return EXIT_NOT_FOUND
    if not program or "\0" in program:
        return EXIT_NOT_FOUND
    # os.get_exec_path()'s list, without the `warnings` it imports for a bytes PATH
    for folder in os.environ.get("PATH", os.defpath).split(os.pathsep):
        path = os.path.join(folder, program)
        if os.path.isfile(path) and os.access(path, os.X_OK):
            return None
    return EXIT_NOT_FOUND


def _named(program: str) -> str:
    """``program`` for a message: its control characters and escape sequences written as
    escapes, cut to 300 characters (it is the user's argument, printed to their terminal)."""
    from .._sanitize import short

    return short(program)


def main(argv: list[str]) -> int:
    """Run CMD under the budget; see the module docstring for exit statuses."""
    args = RunArgs()
    parsed = _args.parse(RUN, argv, args)
    if parsed.help:
        sys.stdout.write(_args.format_help(RUN))
        return 0
    try:
        parsed.refuse()
    except _args.UsageError as err:
        _args.refuse_usage(RUN, err)
        return EXIT_RUN_USAGE
    budget, grace, fmt, command = args.budget, args.grace, args.format, args.command
    if not command:
        print("supervise run: no command given (usage: supervise run [--budget S] -- CMD ARGS)",
              file=sys.stderr)
        return EXIT_RUN_USAGE
    if not 0 < budget <= MAX_SECONDS or not 0 <= grace <= MAX_GRACE:
        print(f"supervise run: --budget must be > 0 and --grace >= 0 seconds (finite; at most "
              f"{MAX_SECONDS:g} and {MAX_GRACE:g})", file=sys.stderr)
        return EXIT_RUN_USAGE
    bad = _check_program(command[0])
    if bad is not None:
        why = "not found" if bad == EXIT_NOT_FOUND else "not executable"
        print(f"supervise run: {_named(command[0])}: {why}", file=sys.stderr)
        return bad
    capture = fmt == "json"
    if not _runwait.available():
        return _run_with_engine(command, budget, grace, capture)
    try:
        outcome = _runwait.run(command, budget=budget, grace=grace, capture=capture)
    except NotImplementedError:  # posix_spawn cannot start a session here: the engine can
        return _run_with_engine(command, budget, grace, capture)
    except OSError as err:  # it vanished or changed since the check above
        code = EXIT_NOT_FOUND if err.errno in (errno.ENOENT, errno.ENOTDIR) else EXIT_CANNOT_EXEC
        why = ("not found" if code == EXIT_NOT_FOUND else "not executable"
               if err.errno in (errno.EACCES, errno.EPERM, errno.EISDIR)
               else f"could not start ({err.strerror})")
        print(f"supervise run: {_named(command[0])}: {why}", file=sys.stderr)
        return code
    return _finish(command, budget, capture, outcome.status, outcome.exit_code,
                   outcome.signum, outcome.seconds, outcome.output, outcome.kill)


def _finish(command: list[str], budget: float, capture: bool, status: str,
            exit_code: int | None, signum: int | None, seconds: float, output: bytes,
            kill: KillReport | None = None) -> int:
    """Map how CMD ended to our exit status (the module docstring), print the budget notice
    and, with ``--format json``, the document. A kill that needed SIGKILL or left a survivor
    (``kill``) is one line on stderr; the document carries the kill's report (``"kill"``,
    null when no kill sequence ran)."""
    if kill is not None and kill.notable:
        print(f"supervise run: {kill.describe()}", file=sys.stderr)
    if status == "killed" and signum is not None:
        code = 128 + signum
    elif status == "killed":
        code = EXIT_TIMEOUT
        print(f"supervise run: {_named(command[0])} killed after its {budget:g}s budget "
              f"(the whole process tree)", file=sys.stderr)
    elif exit_code is None:
        code = EXIT_CANNOT_EXEC
        print(f"supervise run: {_named(command[0])}: could not start", file=sys.stderr)
    elif exit_code < 0:
        code = 128 - exit_code
    else:
        code = exit_code
    if capture:
        import json

        doc = {"command": command, "status": status, "exit_code": exit_code,
               "seconds": round(seconds, 3), "bytes": len(output), "budget": budget,
               "timed_out": code == EXIT_TIMEOUT,
               "kill": kill.as_dict() if kill is not None else None,
               "output": output.decode("utf-8", "replace")}
        sys.stdout.write(json.dumps(doc, ensure_ascii=False) + "\n")
    return code


def _run_with_engine(command: list[str], budget: float, grace: float, capture: bool) -> int:
    """The engine's path (:func:`supervisor.run_command`), where :mod:`supervisor.engine._runwait`
    cannot run (no ``posix_spawn`` with a new session)."""
    from ..engine import _reaper
    from ..engine._run import command as run_command
    from ..engine._output import BufferSink
    from ..engine._results import StageResult
    from ..engine._signals import Aborter, run_with_signals

    _reaper.enable_subreaper()
    sink = BufferSink() if capture else None  # text: the command's own stdio
    kills: list[KillReport] = []  # the kill sequence's report, reported as on the lean path

    async def body(aborter: Aborter) -> StageResult:
        # a signal to us is forwarded to CMD (GNU timeout's rule), the kill after grace
        return await run_command(command, budget=budget, grace=grace, sink=sink,
                                 abort=aborter.event, forward=lambda: aborter.signum,
                                 on_kill=kills.append)

    result, aborter = run_with_signals(body, _runwait.FORWARDED)
    _reaper.reap_zombie_children()
    return _finish(command, budget, capture, result.status, result.exit_code, aborter.signum,
                   result.seconds, sink.getvalue() if sink is not None else b"",
                   kills[-1] if kills else None)
