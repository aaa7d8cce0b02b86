"""``supervise bridge --harness H --source S [--session-id ID] [--cwd DIR] [--prerequisite]``.

The machine interface the Pi extension and the OpenCode plugin run, once per session event
(``docs/bridge-protocol.md``). It prints exactly **one line of JSON** on stdout,
:class:`supervisor.bridges._protocol.BridgeResult`::

    {"kind": "ready", "text": "...", "source": "startup", "mode": "full", "action": "digest",
     "harness": "pi", "project": "/path", "error": "", "protocol": 1}

and exits 0 on every path, including bad arguments (``kind: failed``): the caller reads the
kind, never the exit status.

``--prerequisite`` is the one exception: it only answers "should a bridge run at all here?",
prints nothing, and exits 3 (:data:`~supervisor._exitcodes.EXIT_STAND_DOWN`) for a gate agent
or a worktree outside the primary scope, else 0. Nothing a harness reads ever sees that code.
"""

from __future__ import annotations

import sys

from .._exitcodes import EXIT_OK, EXIT_STAND_DOWN
from .._record import mutable_record
from . import _args


@mutable_record
class BridgeArgs:
    """``supervise bridge``'s arguments: ``harness`` (required), ``source``, ``session_id``
    (``""``: none), ``cwd`` (None: ours), ``prerequisite`` and ``opt_in`` (a user-scope
    extension: silent in a project that did not opt in)."""

    harness: str = ""
    source: str = ""
    session_id: str = ""
    cwd: str | None = None
    prerequisite: bool = False
    opt_in: bool = False


BRIDGE = _args.Command("supervise bridge", "machine interface for extension bridges (Pi, "
                       "OpenCode): prints one JSON document (docs/bridge-protocol.md)", (
    _args.Option(("--harness",), "harness", "pi or opencode (SUPERVISE_HARNESS)",
                 metavar="HARNESS", required=True),
    _args.Option(("--source",), "source", "startup, new, clear, compact, resume, reload or fork; "
                 "anything else routes as a full start", metavar="SOURCE"),
    _args.Option(("--session-id",), "session_id", "the harness session id (display only)",
                 metavar="SESSION_ID"),
    _args.Option(("--cwd",), "cwd", "the harness's working directory (default: ours)",
                 metavar="CWD"),
    _args.Option(("--prerequisite",), "prerequisite", "print nothing; exit 3 to stand down "
                 "(gate or scope), 0 to go on"),
    _args.Option(("--opt-in",), "opt_in", "a user-scope extension (install writes it): "
                 "ineligible, creating nothing, in a project that did not opt in"),
))
"""``bridge``'s argument table: the parse and ``--help`` read it."""


def parse_args(argv: list[str]) -> BridgeArgs:
    """``argv`` parsed by :data:`BRIDGE`, strictly (no argparse: its import, with ``re``,
    ``gettext`` and ``shutil``, would cost every bridge call).

    Raises:
        ValueError: a usage error (:class:`supervisor.commands._args.UsageError`, one line).
        SystemExit: ``--help`` (0, the help printed).
    """
    args = BridgeArgs()
    parsed = _args.parse(BRIDGE, argv, args)
    if parsed.help:
        sys.stdout.write(_args.format_help(BRIDGE))
        raise SystemExit(EXIT_OK)
    parsed.refuse()
    return args


def _print(line: str) -> str:
    """Write ``line`` whole (partial writes and ``EAGAIN`` retried); ``""`` or why not."""
    from ..state._delivery import WriteFailed, write_whole

    try:
        sys.stdout.flush()
        write_whole(sys.stdout.fileno(), (line + "\n").encode("utf-8", "replace"))
        return ""
    except (WriteFailed, ValueError, OSError) as err:
        return str(err) or type(err).__name__


def main(argv: list[str]) -> int:
    """Run one bridge request; see the module docstring for the output and exit status."""
    from ..bridges import _protocol

    try:
        args = parse_args(argv)
    except ValueError as err:
        _print(_protocol.BridgeResult("failed", error=f"usage: {err}").to_json())
        return EXIT_OK
    if args.prerequisite:
        # 3 means "stand down" and nothing else: any failure here says "go on" (the full run
        # reports the problem), so a crash can never pass for a stand-down.
        try:
            project = _protocol.resolve_project(args.cwd)
            if args.opt_in and _protocol.opted_out(args.harness, project, args.cwd):
                return EXIT_STAND_DOWN
            return EXIT_STAND_DOWN if _protocol.stand_down(project) else EXIT_OK
        except Exception as err:  # noqa: BLE001 - fail open, say why
            print(f"supervise bridge: prerequisite check failed: {type(err).__name__}: {err}",
                  file=sys.stderr)
            return EXIT_OK
    from ..state._delivery import open_delivery

    # Completion, handoff count and deferred claims commit only once the JSON went out whole.
    with open_delivery(None) as delivery:
        result = _protocol.run_bridge(args.harness, args.source, session_id=args.session_id,
                                      cwd=args.cwd, opt_in=args.opt_in, delivery=delivery)
        problem = _print(result.to_json())
        failures = delivery.settle(not problem)
    if problem:
        print(f"supervise bridge: the result was NOT delivered: {problem}; nothing was "
              "recorded as delivered.", file=sys.stderr)
    for failure in failures:
        print(f"supervise bridge: delivered, but not recorded: {failure}", file=sys.stderr)
    return EXIT_OK
