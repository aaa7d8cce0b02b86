"""supervise digest: run the digest in a terminal (slow hosts, re-runs after a truncation).

A preview by default: a person looking counts no delivery and advances no record. With
--session-start it is the session start a harness could not run (the nudge asks for that)."""

from __future__ import annotations

import os
import shlex
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from .._errors import describe_os_error
from .._exitcodes import EXIT_FAILURE, EXIT_OK, EXIT_USAGE
from .._record import mutable_record, replace
from . import _args

if TYPE_CHECKING:
    from ..config._context import SessionContext
    from ..config._plan import DigestPlan
    from ..engine._launch import Prestart
    from ..engine._output import StreamSink
    from ..engine._results import DigestResult, StageResult
    from ..engine._signals import Aborter


@mutable_record
class DigestArgs:
    """``supervise digest``'s arguments: ``budget``/``grace`` in seconds or None, ``config``
    (a path or None), ``format`` (``text``/``json``), ``only`` (stage names or None),
    ``directory`` (``-C DIR``: an absolute existing directory or None), ``source`` and
    ``harness`` (``""``: none), ``session_start`` (``--session-start``: this run is a
    session's start, records advance; else a preview that records nothing)."""

    budget: float | None = None
    grace: float | None = None
    config: Path | None = None
    format: str = "text"
    only: list[str] | None = None
    directory: Path | None = None
    source: str = ""
    harness: str = ""
    session_start: bool = False


def command() -> _args.Command:
    """``digest``'s argument table (:mod:`supervisor.commands._args`): the parse and
    ``--help`` both read it."""
    from ..config._plan import WHEN_HARNESSES, WHEN_SOURCES

    return _args.Command("supervise digest", __doc__ or "", (
        _args.Option(("--budget",), "budget", "seconds for the whole digest, kill time included "
                     "(default: SUPERVISE_TIMEOUT, else the config's budget: 120 in the "
                     "embedded default)", metavar="S", convert=_args.number),
        _args.Option(("--grace",), "grace", "seconds between TERM and KILL (default: "
                     "SUPERVISE_GRACE, else the config's grace: 1 in the embedded default)",
                     metavar="S", convert=_args.number),
        _args.Option(("--config",), "config", "read this file instead of the project's "
                     "supervise.toml or pyproject.toml [tool.supervise] (default: those, else "
                     "the embedded default)", metavar="FILE", convert=_args.a_path),
        _args.Option(("--format",), "format", "print the digest as text for a person (default) "
                     "or as one JSON document for a program", choices=("text", "json")),
        _args.Option(("--only",), "only", "run only this stage (repeatable); the others are "
                     "skipped", metavar="STAGE", repeat=True),
        _args.Option(("-C", "--project"), "directory", "run as if started in DIR, which must "
                     "exist (default: the current directory); the project is its git top "
                     "level", metavar="DIR", convert=_args.existing_dir),
        _args.Option(("--source",), "source", "run as for this session source "
                     "(SUPERVISE_SOURCE, stage conditions); default: none, which conditions "
                     "treat as startup", choices=WHEN_SOURCES),
        _args.Option(("--harness",), "harness", "run as for this harness (SUPERVISE_HARNESS, "
                     "stage conditions); default: none, a terminal",
                     choices=tuple(h for h in WHEN_HARNESSES if h != "terminal")),
        _args.Option(("--session-start",), "session_start", "this run is a session's start "
                     "(what the nudge asks a model to run): the handoff delivery is counted, "
                     "deferred results are delivered, the run is recorded. Without it the "
                     "digest is a preview that changes no record"),
    ), defaults=DigestArgs)


def parse_args(argv: list[str]) -> DigestArgs:
    """``argv`` parsed by :func:`command`'s table, strictly (no argparse: its import and
    first parser would cost every session start, docs/benchmarks.md, row "embedded default
    digest, 20,000 tracked files").

    Raises:
        SystemExit: after ``--help`` (0, the help printed) or a usage error (2, the usage line
            and the error printed on stderr).
    """
    table = command()
    args = DigestArgs()
    parsed = _args.parse(table, argv, args)
    if parsed.help:
        sys.stdout.write(_args.format_help(table))
        raise SystemExit(EXIT_OK)
    try:
        parsed.refuse()
    except _args.UsageError as err:
        _args.refuse_usage(table, err)
        raise SystemExit(EXIT_USAGE) from None
    return args


def _rerun_hint(args: DigestArgs, project: Path) -> str:
    parts = ["supervise", "digest", "-C", str(project)]
    if args.config is not None:
        parts += ["--config", os.path.abspath(args.config)]  # it is read from the cwd, not -C
    for name in args.only or ():
        parts += ["--only", name]
    for flag in ("source", "harness"):
        if getattr(args, flag):
            parts += [f"--{flag}", getattr(args, flag)]
    if args.session_start:
        parts.append("--session-start")
    return shlex.join(parts)


def _nudge_tier_parent() -> str:
    """The nudge-tier harness (Grok) whose model runs us, as its nudge asked, or ``""``.

    Its hook output is dropped, so the model runs ``supervise digest`` itself: the digest
    then leaves out the instruction files that harness loads by itself (never duplicated).
    Run-tier harnesses are not guessed (``--harness`` names one)."""
    from ..session._ancestry import ancestry, find_harness

    found = find_harness(ancestry())
    if found is None:  # the usual terminal: no adapter to ask (importing them all costs ms)
        return ""
    from ..adapters import ADAPTERS

    adapter = ADAPTERS.get(found.harness)
    return adapter.name if adapter is not None and adapter.tier == "nudge" else ""


def main(argv: list[str]) -> int:
    """Run the digest; exit 0 (also after a truncation), 1 on a bad config, 128+n on a signal."""
    args = parse_args(argv)
    from ..config._plan import MAX_GRACE, MAX_SECONDS

    for flag, limit in (("budget", MAX_SECONDS), ("grace", MAX_GRACE)):
        value = getattr(args, flag)
        if value is not None and not (0 <= value <= limit) or (
                flag == "budget" and value is not None and value <= 0):
            print(f"supervise digest: --{flag} must be a positive number of seconds, at most "
                  f"{limit:g}", file=sys.stderr)
            return EXIT_USAGE

    from ..config._plan import as_plan
    from ..config._plancache import load_plan
    from ..config._context import SessionContext
    from .._errors import ConfigError
    from ..state._project import find_project_root

    start = args.directory or Path.cwd()
    project = Path(find_project_root(start))
    from ..session._off import off_line, off_reason

    off = off_reason(project)
    if off:  # the off switch: say so once, where the digest would be, and run nothing
        line = off_line(off, "no stage ran")
        if args.format == "json":
            import json

            line = json.dumps({"off": line.strip(), "stages": [], "truncated": False,
                               "reason": None, "budget": None, "seconds": 0.0}) + "\n"
        sys.stdout.write(line)
        return EXIT_OK
    code = EXIT_OK
    notice = None
    context = SessionContext.for_project(project, cwd=start.resolve(),  # SUPERVISE_CWD
                                         source=args.source,
                                         harness=args.harness or _nudge_tier_parent(),
                                         preview=not args.session_start)
    try:
        config = load_plan(project, args.config, on_env_error=lambda msg: print(
            f"supervise: {msg}; ignored", file=sys.stderr))
    except ConfigError as err:
        from ..config._schema import embedded_default

        print(f"supervise: {err}", file=sys.stderr)
        notice = f"[supervise] config error: {err}; running the embedded default digest instead."
        config = as_plan(embedded_default())
        code = EXIT_FAILURE
        # The config was not read, so this run writes nothing: no state dir, no edit of
        # .git/info/exclude; the stages see SUPERVISE_MODE=read-only.
        context = replace(context, mode="read-only")
    unknown = sorted(set(args.only or ()) - {s.name for s in config.stages})
    if unknown:
        from .._sanitize import short

        print(f"supervise digest: --only: no stage named {short(', '.join(unknown))} "
              f"(stages: {', '.join(s.name for s in config.stages) or 'none'})", file=sys.stderr)
        return EXIT_USAGE
    from ..config._plan import unmet

    for name in args.only or ():
        why = unmet(config.stage(name), context.source, context.harness, context.where)
        if why:  # honoured, not overridden: say why the stage asked for does not run
            print(f"supervise digest: --only {name}: skipped by its condition ({why}); "
                  "pass --source/--harness to run as that session would", file=sys.stderr)
    update = {k: getattr(args, k) for k in ("budget", "grace") if getattr(args, k) is not None}
    if update:
        config = replace(config, **update)
    from ..engine import _reaper, _spawn

    _reaper.enable_subreaper()
    _spawn.own_descriptors()  # stages never hold what our parent passed us
    try:
        # Stages run in the project directory: from there they start with posix_spawn
        # (vfork), not fork (supervisor.engine._spawn). Every path above is resolved already.
        os.chdir(project)
    except OSError:
        pass
    from ..engine._launch import prestart

    started = prestart(config, context, args.only)  # they work while the engine loads
    try:
        result, aborter = _run(args, config, context, project, notice, started)
    finally:
        started.close()  # what the engine did not take (it never ran): killed whole
    _reaper.reap_zombie_children()
    if code == EXIT_OK and args.session_start:  # `supervise status` counts session starts
        from ..session._routing import record_digest

        record_digest(context.state_dir, result, context)
    if aborter.signum is not None:
        return 128 + aborter.signum
    return code


def _run(args: DigestArgs, config: DigestPlan, context: SessionContext, project: Path,
         notice: str | None, started: Prestart) -> tuple[DigestResult, Aborter]:
    """Run the digest (its first stages already ``started``), print it as ``args.format``
    says, settle the deferred results it carried; the result and the signal aborter."""
    from ..engine._run import digest
    from ..engine._output import StreamSink
    from ..engine._signals import run_with_signals

    # text: streamed to stdout, nothing kept; json: the document streamed as the digest runs
    # (each stage's output escaped as it is shown, never held whole: JsonStream)
    sink = StreamSink(1)
    document = None
    if args.format == "json":
        from ..engine._results import JsonStream

        document = JsonStream(sink, {"config_error": notice} if notice else None)
    elif notice:
        sink.write(notice.encode() + b"\n")

    async def body(aborter: Aborter) -> DigestResult:
        return await digest(config, context, sink=sink, abort=aborter.event, only=args.only,
                            abort_reason=aborter.reason, rerun_hint=_rerun_hint(args, project),
                            on_stage=live, keep_output=False, prestart=started,
                            frame=document)

    live = _live_progress if sys.stderr.isatty() else None
    from ..state._delivery import open_delivery

    with open_delivery(context.state_dir) as delivery:  # deferred claims: two-phase
        context = replace(context, delivery=delivery)  # what `body` runs the digest with
        result, aborter = run_with_signals(body)
        if live is not None:
            state = "TRUNCATED" if result.truncated or result.cut else "complete"
            shown = (notice or result.truncated or result.notices
                     or any(stage.bytes for stage in result.stages))
            empty = "" if shown else ("; it printed nothing: no stage had anything to show "
                                      "here")  # else a bare timing line looks like a fault
            print(f"supervise: digest {state} in {result.seconds:.2f}s (budget "
                  f"{result.budget:g}s){empty}", file=sys.stderr)
        if document is not None:
            document.close(result)  # the entries and fields known only at the end
        whole = sink.close(timeout=2.0)  # a reader that stopped reading gets 2 s
        lost = _lost_output(sink)
        whole = whole and not lost
        if not whole and delivery.reserved:  # `| head -1` alone is not an error (rule 13)
            print("supervise digest: the output was not delivered whole (the reader left or "
                  "stopped reading); deferred results it carried stay pending.", file=sys.stderr)
        # A preview reached no model: every reservation (the handoff count, a deferred
        # result's claim) is rolled back, as for an output that was not delivered.
        delivery.settle(whole and args.session_start)
    return result, aborter


def _lost_output(sink: StreamSink) -> bool:
    """True when the digest's output was lost, not merely left by its reader: ``ENOSPC``,
    ``EIO``, stdout closed at start (:mod:`supervisor.commands._stdio` reports it and the exit
    status says so). ``EPIPE`` (``| head -1``) is not a loss of ours."""
    import errno

    from . import _stdio

    if sink.error is not None and sink.error.errno != errno.EPIPE:
        _stdio.note_failure(describe_os_error(sink.error))
        return True
    if _stdio.stdout_closed_at_start() and sink.written:
        _stdio.note_failure("stdout was closed when supervise started")
        return True
    return False


def _live_progress(name: str, result: StageResult | None) -> None:
    """Live per-stage progress on a TTY's stderr (stdout stays the digest itself)."""
    if result is None:
        print(f"supervise: \u25b8 {name} started", file=sys.stderr, flush=True)
        return
    mark = {"ok": "\u2713", "failed": "\u2717"}.get(result.status, "\u25cf")
    print(f"supervise: {mark} {name} {result.status} in {result.seconds:.2f}s, "
          f"{result.bytes} bytes", file=sys.stderr, flush=True)
