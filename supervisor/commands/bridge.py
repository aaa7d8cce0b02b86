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

TYPE_CHECKING = False  # not `typing.TYPE_CHECKING`: importing typing costs the hot path
if TYPE_CHECKING:
    import argparse


@mutable_record
class BridgeArgs:
    """``supervise bridge``'s arguments: ``harness`` (required), ``source``, ``session_id``
    (``""``: none), ``cwd`` (None: ours) and ``prerequisite``."""

    harness: str = ""
    source: str = ""
    session_id: str = ""
    cwd: str | None = None
    prerequisite: bool = False


_VALUED = {"--harness": "harness", "--source": "source", "--session-id": "session_id",
           "--cwd": "cwd"}


def parse_args(argv: list[str]) -> BridgeArgs:
    """``argv`` parsed: the shape the Pi extension and the OpenCode plugin send (``--option
    VALUE`` pairs of the options below, each at most once, values neither empty nor starting
    with ``-``; ``--prerequisite`` once) without argparse, whose import (``re``, ``gettext``,
    ``shutil`` with ``bz2`` and ``lzma``) and parser would cost every bridge call as much as
    a Python hook's other imports ({S}); anything else (``-h``, ``--option=VALUE``, an
    abbreviation, a missing ``--harness``) by argparse, which gives the same result or the same
    usage error, as it always did.

    Raises:
        ValueError: a usage error (one line).
        SystemExit: ``--help`` (0).
    """
    args = BridgeArgs()
    seen: set[str] = set()
    i = 0
    while i < len(argv):
        flag = argv[i]
        if flag in seen:
            break
        seen.add(flag)
        if flag == "--prerequisite":
            args.prerequisite = True
            i += 1
            continue
        dest = _VALUED.get(flag)
        value = argv[i + 1] if i + 1 < len(argv) else ""
        if dest is None or not value or value.startswith("-"):
            break
        setattr(args, dest, value)
        i += 2
    else:
        if args.harness:
            return args
    return BridgeArgs(**vars(_parser().parse_args(argv)))


def _parser() -> argparse.ArgumentParser:
    import argparse

    class _Parser(argparse.ArgumentParser):
        def error(self, message: str) -> None:  # type: ignore[override]
            from .._sanitize import short

            raise ValueError(short(message))

    p = _Parser(prog="supervise bridge", add_help=True,
                description="machine interface for extension bridges (Pi, OpenCode): "
                            "prints one JSON document (docs/bridge-protocol.md)")
    p.add_argument("--harness", required=True, help="pi or opencode (SUPERVISE_HARNESS)")
    p.add_argument("--source", default="",
                   help="startup, new, clear, compact, resume, reload or fork; anything else "
                        "routes as a full start")
    p.add_argument("--session-id", default="", help="the harness session id (display only)")
    p.add_argument("--cwd", default=None, help="the harness's working directory (default: ours)")
    p.add_argument("--prerequisite", action="store_true",
                   help="print nothing; exit 3 to stand down (gate or scope), 0 to go on")
    return p


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
            return EXIT_STAND_DOWN if _protocol.stand_down(project) else EXIT_OK
        except Exception as err:  # noqa: BLE001 - fail open, say why
            print(f"supervise bridge: prerequisite check failed: {type(err).__name__}: {err}",
                  file=sys.stderr)
            return EXIT_OK
    from ..state._delivery import open_delivery

    # Completion, handoff count and deferred claims commit only once the JSON went out whole.
    with open_delivery(None) as delivery:
        result = _protocol.run_bridge(args.harness, args.source, session_id=args.session_id,
                                    cwd=args.cwd)
        problem = _print(result.to_json())
        failures = delivery.settle(not problem)
    if problem:
        print(f"supervise bridge: the result was NOT delivered: {problem}; nothing was "
              "recorded as delivered.", file=sys.stderr)
    for failure in failures:
        print(f"supervise bridge: delivered, but not recorded: {failure}", file=sys.stderr)
    return EXIT_OK
