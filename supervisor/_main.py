"""``supervise`` entry point: one visible dispatch table, one top-level error handler.

Each verb lives in ``supervisor/commands/<verb>.py`` and exposes ``main(argv) -> int``. Only
the chosen verb's module is imported, so the hook's hot path pays for nothing else.
"""

from __future__ import annotations

import os
import sys

HARNESS_FACING = ("hook", "nudge", "bridge")
"""Verbs a harness or a bridge runs: they exit 0 on every path, a signal included, and write
their stdout themselves (delivery recorded only after delivery)."""


def _verb(argv: list[str]) -> str:
    return argv[1] if len(argv) > 1 else ""


if sys.argv and os.path.basename(sys.argv[0]) == "supervise":
    # Imported by an installed launcher (ours, bin/supervise; or a console-script wrapper an
    # installer generated for an older release, which still runs ``re.sub`` on argv[0] before
    # entry()): the quiet handlers start here (entry() finds them in place).
    from ._interrupts import leave_quietly_on_signals as _leave

    _leave(0 if _verb(sys.argv) in HARNESS_FACING else None)

from ._exitcodes import (EXIT_FAILURE, EXIT_OK, EXIT_RUN_FAILURE, EXIT_SIGINT, EXIT_UNEXPECTED,
                         EXIT_USAGE)

VERBS: dict[str, str] = {
    "digest": "run the digest in a terminal (slow hosts, re-runs after a truncation)",
    "run": "bound any command tree: supervise run [--budget S] -- CMD ARGS",
    "hook": "session-start hook entry for a harness: supervise hook [HARNESS]",
    "nudge": "print the one-line nudge for harnesses that can only ask",
    "status": "show lock owner, completion record, last digest and pending results",
    "install": "register the hook with a harness: supervise install HARNESS...",
    "uninstall": "remove our registration from a harness",
    "doctor": "check registrations, timeouts, state dir and config",
    "config": "print the effective or the embedded default configuration",
    "bridge": "machine interface for extension bridges (Pi, OpenCode): JSON result",
    "mcp": "serve the digest over MCP (stdio) for MCP clients; needs watchkeeper[mcp]",
}

USAGE = "usage: supervise [-h] [-V] VERB [OPTIONS]  (supervise VERB --help for a verb's options)"


def _help() -> str:
    width = max(len(v) for v in VERBS)
    lines = [USAGE, "", "verbs:"]
    lines += [f"  {verb:<{width}}  {text}" for verb, text in VERBS.items()]
    lines += ["", "options:", "  -h, --help     show this help and exit",
              "  -V, --version  print the version and exit"]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    """Run ``supervise``; return the process exit code (see :mod:`supervisor._exitcodes`)."""
    args = sys.argv[1:] if argv is None else argv
    if not args or args[0] in ("-h", "--help", "help"):
        print(_help())
        return EXIT_OK if args else EXIT_USAGE
    if args[0] in ("-V", "--version"):
        from ._version import VERSION

        print(f"supervise (watchkeeper) {VERSION}")
        return EXIT_OK
    verb = args[0]
    if verb not in VERBS:
        # argparse's shape: the usage line, then one error line (not the whole help: 18 lines)
        from ._sanitize import short

        shown = short(repr(verb), 100)
        print(f"{USAGE}\nsupervise: error: unknown verb {shown} (one of: {', '.join(VERBS)})",
              file=sys.stderr)
        return EXIT_USAGE
    lost = _lost_cwd(verb, args[1:])
    if lost:
        print(lost, file=sys.stderr)
        return EXIT_FAILURE
    __import__(f"supervisor.commands.{verb}")  # every verb of VERBS; not importlib's (warnings)
    module = sys.modules[f"supervisor.commands.{verb}"]
    code: int = module.main(args[1:])
    _flush_state_notices()
    return code


def _lost_cwd(verb: str, rest: list[str]) -> str:
    """The one-line error for a terminal verb started in a directory that no longer exists
    (deleted under the shell) or cannot be read, unless ``-C DIR`` names an absolute one;
    ``""`` otherwise. (Every verb ended in "internal error: FileNotFoundError".) The
    harness-facing verbs go on: their payload names the project, and they state any
    error in their output."""
    if verb in HARNESS_FACING or verb == "run":  # run: the command may not care where it runs
        return ""
    if {"-h", "--help", "--default"} & set(rest):  # no project needed
        return ""
    try:
        os.getcwd()
        return ""
    except OSError as err:
        why = err.strerror or type(err).__name__
    for i, arg in enumerate(rest):
        value = rest[i + 1] if arg in ("-C", "--project") and i + 1 < len(rest) else (
            arg.partition("=")[2] if arg.startswith("--project=") else
            arg[2:] if arg.startswith("-C") and len(arg) > 2 else "")
        if value.startswith("/"):
            return ""
    return (f"supervise {verb}: the current directory cannot be read ({why}; deleted?): "
            "cd to an existing one, or pass -C with an absolute path")


def _flush_state_notices() -> None:
    """Name on stderr, once, any planted or corrupt state file no digest has named yet."""
    door = sys.modules.get("supervisor.state._statedir")
    if door is None:
        return
    for line in door.take_notices():
        print(line, file=sys.stderr)


def _standard_fds(harness_facing: bool) -> bool:
    """Started with fd 0, 1 or 2 closed (``supervise digest >&-``)? Put ``/dev/null`` there
    first, so no file we open later takes that number and receives our output. Returns True
    when fd 1 was closed (its output goes nowhere: a failure for a terminal verb)."""
    stdout_closed = False
    for fd, name, mode in ((0, "stdin", "r"), (1, "stdout", "w"), (2, "stderr", "w")):
        try:
            os.fstat(fd)
        except OSError:
            got = os.open(os.devnull, os.O_RDWR)  # the lowest free number: this one
            if got != fd:
                os.dup2(got, fd)
                os.close(got)
            setattr(sys, name, open(fd, mode, closefd=False))
            if fd == 1:
                stdout_closed = True
                if harness_facing:  # a delivery to it is a failed delivery, never "written"
                    from .state._delivery import mark_closed_at_start

                    mark_closed_at_start(1)
    return stdout_closed


def entry() -> None:  # pragma: no cover - thin wrapper for the launcher
    """The ``supervise`` launcher's call (``bin/supervise``, ``python -m supervisor``): exit
    with :func:`main`'s code.

    Before anything else: quiet signal handlers (:mod:`supervisor._interrupts`; a harness-facing
    verb leaves with 0, a terminal verb with 128+n, never a traceback), usable standard
    descriptors, and standard streams that cannot raise a write error
    (:mod:`supervisor.commands._stdio`). A terminal verb whose output could not be written
    (``ENOSPC``, ``EIO``, stdout closed) says so in one line and exits 1 (``run``: 125); a
    reader that left (``EPIPE``) is not an error."""
    verb = _verb(sys.argv)
    harness_facing = verb in HARNESS_FACING
    from ._interrupts import exit_status, leave_quietly_on_signals, leaving

    leave_quietly_on_signals(EXIT_OK if harness_facing else None)
    stdout_closed = _standard_fds(harness_facing)
    from .commands import _stdio

    _stdio.guard_stderr()
    if not harness_facing:
        _stdio.guard_stdout(stdout_closed)
    try:
        try:
            code: object = main()
        except SystemExit as done:  # argparse's --help and usage errors end this way
            if leaving() is not None:
                raise
            code = done.code
        if not harness_facing:
            code = _output_verdict(verb, code)
        sys.exit(code)  # type: ignore[arg-type]  # SystemExit.code: an int, a str or None
    except KeyboardInterrupt:  # Python's own handler, where ours could not be installed
        sys.exit(EXIT_OK if harness_facing else EXIT_SIGINT)
    except BrokenPipeError:  # `supervise config | head -1`: the reader left; not an error
        from .state._fsutil import point_at_devnull

        try:
            point_at_devnull(sys.stdout.fileno())
        except (OSError, ValueError):  # fileno() of a closed or replaced stdout
            pass
        sys.exit(0)
    except SystemExit:
        raise
    except BaseException as err:  # the one top-level handler: one line, no traceback spew
        signum = leaving()
        if signum is not None:  # asked to stop; a library wrapped our SystemExit on the way
            sys.exit(exit_status(signum))
        while isinstance(err, BaseExceptionGroup) and len(err.exceptions) == 1:
            err = err.exceptions[0]  # name the real error, not "unhandled errors in a TaskGroup"
        try:  # the traceback and version go to the crash log the line names
            from .config._crashlog import crash_line

            line = crash_line(verb, err)
        except BaseException:  # noqa: BLE001 - the one line still goes out
            line = f"internal error: {type(err).__name__}: {err}"
        print(f"supervise: {line}", file=sys.stderr)
        sys.exit(EXIT_OK if harness_facing else EXIT_UNEXPECTED)


def _output_verdict(verb: str, code: object) -> object:
    """``code``, or the output-failure status when a terminal verb's stdout was lost (one
    line on stderr says why; a status that already says failure is kept)."""
    from .commands import _stdio

    why = _stdio.output_failure()
    if not why:
        return code
    who = f"supervise {verb}" if verb in VERBS else "supervise"
    print(f"{who}: output not written: {why}", file=sys.stderr)
    if code not in (None, EXIT_OK):
        return code
    return EXIT_RUN_FAILURE if verb == "run" else EXIT_FAILURE
