"""``supervise hook [HARNESS] [--source SOURCE] [--event EVENT] [--take-lock]``.

The run-tier entry a harness registration calls. It reads the payload from stdin (bounded:
1 s, 1 MiB), routes the source, takes or checks the lock, runs the digest or a re-emit or
prints the nudge, and writes the result in the harness's envelope
(:func:`supervisor.adapters.render`).

Events (``--event``): ``session-start`` (default); ``post-tool`` (Claude PostToolUse on
reads: nested instructions, :func:`supervisor.session._nested.handle_post_tool`); ``prompt`` (a
per-prompt hook: delivers finished deferred results once, :func:`supervisor.engine._deferred.take_undelivered`,
and a start armed for this session, :mod:`supervisor.session._armed`); ``pre-compact`` (the
harness is about to compact: arms a re-emit for the next prompt where no SessionStart
follows, or tells the summariser which stages will be re-sent, :func:`_pre_compact`).

Exit status: **always 0**, whatever happened, because a SessionStart hook that exits 2
blocks a Claude Code or Cursor session and any non-zero exit drops the context everywhere.
An internal error is stated in the output (so the model knows the digest did not run) and
on stderr. Bad arguments are reported on stderr and ignored.

The one exception, never on a harness-facing path: ``--prerequisite`` (a bridge asking
"should I run at all?") prints nothing and exits 3 (``EXIT_STAND_DOWN``) when a gate or the
scope says stand down, else 0.
"""

from __future__ import annotations

import os
import sys

from .._exitcodes import EXIT_OK, EXIT_STAND_DOWN
from .._interrupts import leaving
from .._record import mutable_record, replace
from .._harnesses import HOOKS
from . import _args

TYPE_CHECKING = False  # not `typing.TYPE_CHECKING`: importing typing costs the hot path
if TYPE_CHECKING:
    from _typeshed import StrPath
    from collections.abc import Callable, Mapping
    from typing import Any

    from ..config._context import SessionContext
    from ..adapters._base import Adapter
    from ..state._delivery import Delivery
    from ..config._plan import DigestPlan

EVENTS = ("session-start", "post-tool", "prompt", "pre-compact")


@mutable_record
class HookArgs:
    """Parsed ``hook``/``nudge`` arguments; ``source`` is ``None`` when ``--source`` is absent."""

    harness: str = ""
    source: str | None = None
    event: str = "session-start"
    take_lock: bool = False
    prerequisite: bool = False
    registered_timeout: float | None = None
    """Seconds: the hook timeout ``install`` registered with the harness (``--registered-timeout``)."""
    registered_in: str = ""
    """``--registered-in FILE``: the harness plugin's hooks file that registers this hook; its
    session-start timeout is the registered timeout (:func:`timeout_in`)."""
    opt_in: bool = False
    """``--opt-in``: a user-scope registration, silent in projects that did not opt in
    (:func:`supervisor.session._gates.opt_in_silence`)."""
    help: bool = False
    problems: tuple[str, ...] = ()


HOOK_DESCRIPTION = """\
The entry a harness registration calls (`supervise install HARNESS` writes it). Reads the
harness payload (JSON) from stdin, routes its source (startup/new: full digest; clear/compact:
re-emit after a proven start; resume/reload/fork: nothing when the transcript already holds
our digest or the nudge, else the nudge), and prints the result in the harness's envelope.
Always exits 0 (--prerequisite: 3 = stand down, for bridges only). See
docs/session-protocol.md."""

NUDGE_DESCRIPTION = """\
Prints the one-line nudge that asks the model to run `supervise digest`, unless this
harness session already ran the digest. Always exits 0."""


HARNESS = _args.Positional("harness", "HARNESS", f"the harness that calls us "
                           f"({', '.join(HOOKS)}): picks the output envelope")
HOOK = _args.Command("supervise hook", HOOK_DESCRIPTION, (
    _args.Option(("--source",), "source", "the session source when the payload does not carry "
                 "it (startup, clear, compact, resume, ...)", metavar="SOURCE"),
    _args.Option(("--event",), "event", "which hook this is (default session-start)",
                 choices=EVENTS),
    _args.Option(("--registered-timeout",), "registered_timeout", "the hook timeout registered "
                 "with the harness (install writes it): the budget is clamped to fit inside it",
                 metavar="SECONDS", convert=_args.positive_seconds),
    _args.Option(("--registered-in",), "registered_in", "the hooks file of a harness plugin that "
                 "registers this hook (Gemini CLI's extension names its own): its session-start "
                 "timeout clamps the budget, as --registered-timeout does", metavar="FILE"),
    _args.Option(("--take-lock",), "take_lock", "when no harness process is among our ancestors "
                 "(a terminal), let the calling shell take the session lock instead of running "
                 "read-only"),
    _args.Option(("--opt-in",), "opt_in", "a user-scope registration (install writes it): "
                 "silent in a project that did not opt in (no supervise.toml, no "
                 "[tool.supervise], no project-scope registration), and where the project's own "
                 "registration serves the session"),
    _args.Option(("--prerequisite",), "prerequisite", "for bridges: print nothing, exit 3 when a "
                 "gate or the scope says stand down, else 0"),
), HARNESS)
"""``hook``'s arguments: read by :func:`parse_hook_args`, shown by ``--help``."""
NUDGE = _args.Command("supervise nudge", NUDGE_DESCRIPTION, (), HARNESS)
"""``nudge``'s arguments (the harness alone)."""


def parse_hook_args(argv: list[str], verb: str = "hook") -> HookArgs:
    """Tolerant parse of the ``hook`` (or ``nudge``) arguments by the :data:`HOOK` (or
    :data:`NUDGE`) table (:func:`supervisor.commands._args.parse`): never exits, never
    raises; unknown or malformed arguments become ``problems`` (one line each) and are
    ignored."""
    args = HookArgs()
    parsed = _args.parse(HOOK if verb == "hook" else NUDGE, argv, args)
    args.help, args.problems = parsed.help, parsed.problems
    return args


def help_text(verb: str = "hook") -> str:
    """``supervise hook --help`` (or ``nudge``), from the same table as the parse."""
    return _args.format_help(HOOK if verb == "hook" else NUDGE)


def emit(harness: str | Adapter | None, text: str, *, state_dir: StrPath, kind: str,
         caps: Mapping[str, int] | None = None) -> str:
    """Write ``text`` to stdout in ``harness``'s envelope (a name, or the adapter the hook
    resolved once); nothing at all for empty text.

    The envelope comes from :func:`supervisor.adapters.render`. ``caps`` is the config's
    ``inline_cap`` table (characters per harness). The envelope is
    written whole (:func:`supervisor.state._delivery.write_whole`: partial writes and ``EAGAIN`` on a
    non-blocking pipe are retried for up to ``WRITE_DEADLINE`` seconds, issue 11 item 6).

    Returns:
        ``""`` when everything was written (or there was nothing to write), else why not, in
        one line (``EPIPE``, ``ENOSPC``, a reader too slow); stdout then points at
        ``/dev/null`` so nothing later writes half a document. Never raises for the write.

    Raises:
        SystemExit: (status 0) after a TERM, INT or HUP reached the quiet handler
            (:func:`supervisor._interrupts.leave_quietly_on_signals`), even if the
            ``SystemExit`` it raised was swallowed on the way (pydantic-core ignores an error
            from a literal's ``__hash__``): nothing is written.
    """
    if leaving() is not None:
        raise SystemExit(0)  # the harness asked us to stop and a library swallowed the exit
    if not text:
        return ""
    from ..adapters import inline_cap, render

    data = render(harness, text, state_dir=state_dir, kind=kind, cap=inline_cap(harness, caps))
    if not data:
        return ""
    from ..state._delivery import WriteFailed, write_whole

    try:
        sys.stdout.flush()  # nothing of ours may come after the envelope's first byte
        write_whole(sys.stdout.fileno(), data)
        return ""
    except (WriteFailed, ValueError, OSError) as err:
        from ..state._fsutil import point_at_devnull

        try:
            point_at_devnull(sys.stdout.fileno())
        except (OSError, ValueError):  # fileno() of a closed or replaced stdout
            pass
        return str(err) or type(err).__name__


def settle(delivery: Delivery, problem: str, what: str) -> None:
    """Commit ``delivery`` when the envelope went out (``problem`` empty), else roll it back;
    say on stderr what was not delivered and what was therefore not recorded."""
    failures = delivery.settle(not problem)
    if problem:
        print(f"supervise hook: the {what} was NOT delivered: {problem}; nothing was recorded "
              "as delivered (completion, handoff count, deferred claims, ledgers stay as they "
              "were), so it will be delivered again.", file=sys.stderr)
    for failure in failures:
        print(f"supervise hook: delivered, but not recorded: {failure}", file=sys.stderr)


def internal_error_text(verb: str, err: BaseException) -> str:
    """What the model reads when the hook failed: the digest did not run, and what to do."""
    return (f"SUPERVISE: internal error in `supervise {verb}`: {type(err).__name__}: {err}\n"
            "The session-start digest did NOT run. Run `supervise digest --session-start` now, once, and report "
            "this error.\n")


@mutable_record
class _Hook:
    """One hook run, as its event handlers see it: the arguments, the adapter (resolved once;
    None for an unknown harness: plain output), the payload (raw ``data`` and parsed), the
    effective plan, the session context and the notice that goes before the output."""

    args: HookArgs
    adapter: Adapter | None
    data: dict[str, Any] | None
    payload: Any
    config: DigestPlan
    context: SessionContext
    notice: str = ""


def _run(args: HookArgs) -> int:
    """The hook's entry after the arguments: read the payload, the gates and the off switch,
    then hand the run to the handler of its event (:data:`_HANDLERS`)."""
    from ..adapters import ADAPTERS, is_foreign
    from ..session import _payload

    adapter = ADAPTERS.get(args.harness)  # the one lookup: every step below gets the adapter
    data = _payload.read_payload_data()
    payload = _payload.parse_payload(data, args.harness)
    source = (_payload.recognize_source(args.source) if args.source is not None
              else _payload.payload_source(payload))
    project, session_cwd = _payload.session_place(payload)
    if is_foreign(adapter, data, os.environ):
        return EXIT_OK  # another harness runs this registration; its own one does the work
    if args.opt_in:
        from ..session._gates import opt_in_silence

        if opt_in_silence(args.harness, project, session_cwd):
            return EXIT_OK  # a user-scope registration in a project that did not opt in

    from ..config._context import SessionContext
    from .._errors import ConfigError
    from ..session._gates import stand_down_reason
    from ..config._plan import DigestPlan
    from ..config._plancache import load_plan

    try:
        config: DigestPlan | None = load_plan(  # cached: no pydantic on the hot path
            project, on_env_error=lambda msg: print(f"supervise hook: {msg}; ignored",
                                                    file=sys.stderr))
        config_error = ""
    except ConfigError as err:
        config, config_error = None, str(err)
    if stand_down_reason(config or DigestPlan(), project):
        # gate agent or outside the primary scope: silent, nothing written
        return EXIT_STAND_DOWN if args.prerequisite else EXIT_OK
    if args.prerequisite:
        return EXIT_OK
    from ..session._off import off_reason

    off = off_reason(project)
    if off:
        # The off switch: nothing runs, nothing is written. A session start states it once
        # (the model must not go looking for a digest); a prompt or a read adds nothing.
        if args.event == "session-start":
            from ..config._context import state_dir_for
            from ..session._off import off_line

            emit(adapter, off_line(off), state_dir=state_dir_for(project), kind="digest")
        return EXIT_OK
    if adapter is not None and adapter.tier == "nudge":
        # The harness drops hook output (Grok: ``agent.ts`` discards SessionStart's context)
        _nudge_only(args, adapter, project)
        return EXIT_OK
    context = SessionContext.for_project(project, source=source, harness=args.harness,
                                         session_id=_payload.payload_session_id(payload),
                                         cwd=session_cwd)
    notice = ""
    if config is None:
        # A bad file never stops the digest: the embedded default runs, and the error comes
        # first so the model (and the user) see it.
        from ..config._schema import embedded_default
        from ..config._plan import as_plan

        print(f"supervise hook: {config_error}", file=sys.stderr)
        config = as_plan(embedded_default())
        notice = (f"[supervise] configuration error: {config_error}; the embedded default "
                  "digest ran instead. Fix the file, then run `supervise digest --session-start`.\n")
    if (args.registered_in and args.registered_timeout is None and adapter is not None
            and args.event in ("session-start", "prompt")):
        args.registered_timeout = timeout_in(
            args.registered_in, adapter,
            adapter.prompt_event if args.event == "prompt" else None)
    if args.registered_timeout is not None and args.event in ("session-start", "prompt"):
        # a prompt hook that may deliver an armed start runs the digest too
        config, clamped = clamp_budget(config, args.registered_timeout, args.harness)
        notice += clamped
    hook = _Hook(args, adapter, data, payload, config, context, notice)
    _HANDLERS[args.event](hook)
    return EXIT_OK


def _deliver(hook: _Hook, what: str | None,
             produce: Callable[[Delivery], tuple[str, str] | None],
             caps: Mapping[str, int] | None = None) -> str:
    """The one delivery block of every event: open a delivery, ``produce`` the text and its
    kind (None: nothing to deliver), write it in the adapter's envelope, then commit what it
    proves or roll it back (:func:`settle`, which says on stderr what was not delivered:
    ``what``, else the kind). Returns the write's problem (``""``: delivered)."""
    from ..state._delivery import open_delivery

    with open_delivery(hook.context.state_dir) as delivery:
        made = produce(delivery)
        if made is None:
            return ""  # rolled back on the way out
        text, kind = made
        problem = emit(hook.adapter, text, state_dir=hook.context.state_dir, kind=kind, caps=caps)
        settle(delivery, problem, what or kind)
    return problem


def _post_tool(hook: _Hook) -> None:
    """``--event post-tool``: nested instructions for the folder a read reached."""
    from ..session._nested import handle_post_tool
    from .._errors import SupervisorError

    def produce(delivery: Delivery) -> tuple[str, str] | None:
        try:
            return (handle_post_tool(hook.data or {}, replace(hook.context, delivery=delivery))
                    or "", "post-tool")
        except SupervisorError as err:  # e.g. an unwritable state dir: no injection, say why
            print(f"supervise hook: post-tool: {err}", file=sys.stderr)
            return None

    _deliver(hook, "nested instructions", produce)


def _prompt(hook: _Hook) -> None:
    """``--event prompt``: a start armed for this session (:func:`_armed_start`), finished
    deferred results once each, and the instruction files that changed; the arm, the claims
    and the refresh baseline commit only once the envelope went out whole (issue 11 item 5)."""
    from ..engine._deferred import result_cap, take_undelivered

    config, context = hook.config, hook.context
    if _traced_compaction(hook):
        _arm(context, "compact")  # delivered by this very hook, below (_armed_start)
    # only stages the effective config marks deferred: a result for any other is refused
    caps = {s.name: result_cap(s.max_output or config.max_output) for s in config.stages
            if s.deferred}
    sent: list[tuple[str, str]] = []

    def produce(delivery: Delivery) -> tuple[str, str]:
        start = _armed_start(hook, delivery)
        if start is not None:
            sent.append(start)
        texts = [start[0] if start else "",
                 *take_undelivered(context.state_dir, caps, context.session_id, delivery)]
        texts.append(_refreshed(context, delivery))  # instruction files changed meanwhile
        return "".join(t if t.endswith("\n") or not t else t + "\n" for t in texts), "prompt"

    problem = _deliver(hook, "per-prompt context (deferred results, refreshed instructions)",
                       produce, caps=config.inline_cap)
    if sent and not problem and sent[0][1] in ("digest", "reemit") and sent[0][0].strip():
        _remember_delivery(context, *sent[0])


def _routed_start(hook: _Hook, context: SessionContext, transcript: str | None) -> tuple[str, str]:
    """Route ``context.source`` and run it (:func:`supervisor.session._routing.run_session`)
    with the caller's open delivery (``context.delivery``): ``(text fitted to the adapter's inline cap, kind)``,
    ``kind`` one of ``digest``, ``reemit``, ``nudge``."""
    from ..adapters import inline_cap
    from ..adapters._spill import Spill
    from ..session._routing import run_session

    config, notice = hook.config, hook.notice
    cap = inline_cap(hook.adapter, config.inline_cap)
    # a digest streams into the spill, fitted to the cap as it comes (a stage may print far
    # more than memory holds): its text is the one to print, the notice first
    spill = Spill(context.state_dir, cap, notice)
    outcome = run_session(config, context, take_lock=hook.args.take_lock, transcript=transcript,
                          spill=spill)
    if spill.text is not None:
        return outcome.text, outcome.kind
    text = notice + outcome.text
    if outcome.parts is not None and len(text) > cap:
        from ..adapters import fit_inline

        # cut at stage boundaries, notices first (nothing silently lost)
        text = fit_inline(list(outcome.parts), cap, context.state_dir, notice + outcome.notices)
    return text, outcome.kind


def _session_start(hook: _Hook) -> None:
    """``--event session-start`` (the default): the routed start (digest, re-emit, nudge or
    nothing), fitted to the adapter's inline cap. Records meaning "delivered" (completion,
    started-session ledger, handoff count, deferred claims, the delivered digest's
    fingerprint) are reserved while the digest runs and committed only once the envelope
    went out whole (issue 11 item 5). A start delivered here drops the session's arm
    (:mod:`supervisor.session._armed`): the prompt hook must not deliver it a second time.
    Where the harness drops this event's output (:attr:`Adapter.start_armed`), the start is
    armed instead, for the prompt hook to deliver."""
    context = hook.context
    if hook.adapter is not None and hook.adapter.start_armed:
        # the harness drops this event's output (Cline's TaskStart): the next hook whose
        # output reaches the model delivers the start (supervisor.session._armed)
        source = context.source or "startup"
        if source == "startup" and context.session_id:
            from ..session._ledger import started

            if started(context.state_dir, context.harness, context.session_id):
                # a session whose start completed starts again: `cline --id` resumes a task
                # with TaskStart (its TaskResume needs an environment variable the hub daemon
                # running the hooks never sees, LAB 3.0.65), the earlier turns restored
                source = "resume"
        _arm(context, source)
        return
    _settle_nested(context)
    transcript = getattr(hook.payload, "transcript_path", None)
    mark = hook.adapter.row.compact_trace if hook.adapter is not None else ""
    if mark and context.session_id:
        from ..session._armed import trace_start

        trace_start(context.state_dir, context.session_id,
                    transcript if isinstance(transcript, str) else None, mark,
                    context.source or "startup")
    sent: list[tuple[str, str]] = []

    def produce(delivery: Delivery) -> tuple[str, str]:
        sent.append(_routed_start(hook, replace(context, delivery=delivery),
                                  transcript if isinstance(transcript, str) else None))
        return sent[-1]

    problem = _deliver(hook, None, produce, caps=hook.config.inline_cap)
    if sent and not problem and sent[0][1] in ("digest", "reemit") and sent[0][0].strip():
        _remember_delivery(context, *sent[0])
        from ..session._armed import ARMED_DIR, disarm

        if os.path.lexists(os.path.join(context.state_dir, ARMED_DIR)):  # one stat
            disarm(context.state_dir, context.harness, context.session_id)


def _armed_start(hook: _Hook, delivery: Delivery) -> tuple[str, str] | None:
    """The start armed for this session by this harness process
    (:func:`supervisor.session._armed.take`), run now through the session protocol with the
    armed source, as ``(text, kind)``; None when none is armed. The arm is dropped when
    ``delivery`` commits. Never raises for the state dir (stderr says why)."""
    from ..session._armed import ARMED_DIR, process_key, take

    context = hook.context
    if not context.session_id or not os.path.lexists(os.path.join(context.state_dir, ARMED_DIR)):
        return None  # one stat: nothing was ever armed here (the ancestry walk is skipped)
    from .._errors import StateError

    try:
        source = take(context.state_dir, context.harness, context.session_id, delivery,
                      process_key(context.session_id))
    except StateError as err:
        print(f"supervise hook: prompt: cannot read the armed start: {err}", file=sys.stderr)
        return None
    if source is None:
        return None
    return _routed_start(hook, replace(context, source=source, delivery=delivery), None)


def _traced_compaction(hook: _Hook) -> bool:
    """The harness marks a compaction in its transcript (the row's ``compact_trace``) and one
    happened since the session's baseline (:func:`supervisor.session._armed.traced_compaction`)."""
    mark = hook.adapter.row.compact_trace if hook.adapter is not None else ""
    if not mark or not hook.context.session_id:
        return False
    from ..session._armed import traced_compaction

    transcript = getattr(hook.payload, "transcript_path", None)
    return traced_compaction(hook.context.state_dir, hook.context.session_id,
                             transcript if isinstance(transcript, str) else None, mark)


def _arm(context: SessionContext, source: str) -> None:
    """Arm a start of ``source`` for this session; stderr says why not when it cannot."""
    from .._errors import StateError
    from ..session._armed import arm, process_key

    try:
        if not arm(context.state_dir, context.harness, context.session_id, source,
                   process_key(context.session_id)):
            print("supervise hook: no session id in the payload: nothing armed, so the "
                  "context will not follow (run `supervise digest --session-start`)",
                  file=sys.stderr)
    except (StateError, OSError, ValueError) as err:
        print(f"supervise hook: cannot arm the {source} start: {err}", file=sys.stderr)


def _pre_compact(hook: _Hook) -> None:
    """``--event pre-compact``: the harness is about to compact (Claude, Copilot ``PreCompact``).

    Where a SessionStart with source ``compact`` follows (:attr:`Adapter.compact_refires`) and
    the hook's stdout is handed to the summariser (:attr:`Adapter.precompact_to_summary`,
    Claude: appended to the summarisation prompt), it prints :func:`summary_note`: which
    stages will be sent again right after the compaction, so the summary need not repeat
    them; it never asks the summary to drop anything else. Where no SessionStart follows, it
    arms a ``compact`` start that the next prompt hook of this harness process delivers once
    (a re-emit after a proven start, else the full digest), and prints nothing: those
    harnesses drop this event's output.
    """
    adapter = hook.adapter
    if adapter is None:
        return
    if not adapter.compact_refires:
        _arm(hook.context, "compact")
        return
    if adapter.precompact_to_summary:
        note = summary_note(hook.config)
        if note:
            problem = emit(adapter, note, state_dir=hook.context.state_dir, kind="summary")
            if problem:
                print(f"supervise hook: the compaction note was NOT delivered: {problem}",
                      file=sys.stderr)


def summary_note(config: DigestPlan) -> str:
    """The line a summariser gets before a compaction: the stages marked ``reemit`` (by title,
    else name) are sent again right after it, so the summary need not repeat them. ``""`` when
    no stage is re-sent (the summary must then keep whatever it judges worth keeping)."""
    names = [s.title or s.name for s in config.stages if s.reemit]
    if not names:
        return ""
    return ("watchkeeper: right after this compaction the session-start context of these "
            f"stages is sent to the model again: {', '.join(names)}. The summary need not "
            "repeat their content; keep everything else as you normally would.\n")


_HANDLERS: dict[str, Callable[[_Hook], None]] = {
    "session-start": _session_start, "post-tool": _post_tool, "prompt": _prompt,
    "pre-compact": _pre_compact}
"""The hook's event handlers, one per ``--event`` (:data:`EVENTS`)."""


PRINT_RESERVE = 5.0
"""Seconds kept between the end of the digest's budget and the registered hook timeout:
interpreter start, the payload read (at most 1 s), the banner and printing."""


def timeout_in(path: str, adapter: Adapter, event: str | None = None) -> float | None:
    """Seconds of the timeout that the hooks file ``path`` (a harness plugin's
    ``hooks/hooks.json``: ``{"hooks": {EVENT: [{"hooks": [{"timeout": N}]}]}}``, ``N`` in the
    harness's unit) registers for ``event`` (default: ``adapter``'s session event; a prompt
    hook that may deliver a start names the prompt event): the one home of the plugin's
    timeout, which the plugin's command names instead of repeating the number. None (one
    line on stderr) when the file cannot be read (at most 64 KiB, never a FIFO) or names none:
    the budget is then not clamped."""
    event = event or adapter.session_event
    from .._errors import ConfigError
    from .._jsontext import loads
    from ..state._fsutil import read_small_file

    try:
        raw = read_small_file(path, 64 * 1024, what="a plugin's hooks file")
        data = loads((raw or b"").decode("utf-8", "replace"))
        for group in data["hooks"][event]:
            for handler in group["hooks"]:
                value = handler.get("timeout")
                if isinstance(value, (int, float)) and not isinstance(value, bool) and value > 0:
                    return float(adapter.timeout_seconds(value))
    except ConfigError as err:
        print(f"supervise hook: --registered-in: {err}; the budget is not clamped", file=sys.stderr)
        return None
    except (ValueError, KeyError, TypeError, AttributeError, RecursionError):
        pass
    print(f"supervise hook: --registered-in: {path} registers no {event} "
          "timeout; the budget is not clamped", file=sys.stderr)
    return None


def clamp_budget(config: DigestPlan, registered: float, harness: str) -> tuple[DigestPlan, str]:
    """``config`` with its budget clamped to fit the hook timeout registered with the harness
    (``registered`` seconds, minus the grace and :data:`PRINT_RESERVE`), and the one-line
    notice saying so (``""`` when it fits). A budget above the registered timeout would have
    the harness kill the hook first, and no context at all would arrive (issue 12, item 10).
    The clamped budget is never below 1 s."""
    limit = registered - config.grace - PRINT_RESERVE
    if config.budget <= limit:
        return config, ""
    origin = "SUPERVISE_TIMEOUT" if os.environ.get("SUPERVISE_TIMEOUT") else "the configured budget"
    budget = max(limit, 1.0)
    notice = (f"[supervise] budget clamped to {budget:g}s: {origin} ({config.budget:g}s) does not "
              f"fit the {registered:g}s hook timeout registered with {harness or 'the harness'} "
              f"(minus {config.grace:g}s grace and {PRINT_RESERVE:g}s to print); re-run "
              f"`supervise install {harness or 'HARNESS'}` to register a longer one.\n")
    return replace(config, budget=budget), notice


def _nudge_only(args: HookArgs, adapter: Adapter, project: StrPath) -> None:
    """A nudge-tier harness gets the nudge alone, and only at session start: whatever it
    printed would be dropped, so nothing may happen that assumes the model saw it. No stage
    runs, no lock is taken, no handoff is counted, no deferred result is claimed, no ledger
    or epoch is written (issue 12, item 2). Silent when the digest already ran in this
    harness session (:func:`supervisor.session._nudge.digest_ran_here`, a read)."""
    if args.event != "session-start":
        return
    from ..session._ancestry import NUDGE_HOPS, ancestry
    from ..config._context import state_dir_for
    from ..session._nudge import NUDGE_TEXT, digest_ran_here

    state_dir = state_dir_for(project)
    if not digest_ran_here(state_dir, ancestry(NUDGE_HOPS)):
        problem = emit(adapter, NUDGE_TEXT, state_dir=state_dir, kind="nudge")
        if problem:
            print(f"supervise hook: the nudge was NOT delivered: {problem}", file=sys.stderr)


def _remember_delivery(context: SessionContext, text: str, kind: str) -> None:
    """Fingerprint what the harness receives, so a later resume can find it in the
    transcript (:mod:`supervisor.session._ledger`). A state dir that cannot take it costs only that:
    the resume then sends the nudge."""
    from .._errors import StateError
    from ..session._ledger import record_delivery

    try:
        record_delivery(context.state_dir, text, kind)
    except (StateError, OSError) as err:
        print(f"supervise hook: cannot record the delivered digest: {err}", file=sys.stderr)


def _refreshed(context: SessionContext, delivery: Delivery) -> str:
    """Instruction files this session has that changed since it got them, once each
    (:func:`supervisor.session._refresh.take_changed`, its baseline moved with ``delivery``);
    ``""`` on any problem, stated on stderr."""
    if not context.session_id:
        return ""
    from .._errors import SupervisorError
    from ..session._refresh import take_changed

    try:
        return take_changed(context.state_dir, context.session_id, context.project_dir,
                            delivery)
    except (SupervisorError, OSError) as err:
        print(f"supervise hook: prompt: cannot check instruction files: {err}", file=sys.stderr)
        return ""


def _settle_nested(context: SessionContext) -> None:
    """The nested-instructions ledger and injected index at a SessionStart
    (:func:`supervisor.session._nested.at_session_start`: a new epoch at compact and clear,
    dropped at startup, the index rebuilt from the ledger otherwise)."""
    if not context.session_id:
        return
    if context.source not in ("compact", "clear"):
        # startup, resume: nothing to settle unless some session has a nested ledger
        # (<state>/nested) or injected index (<state>/fastpath/nested); two stat calls, so
        # the module (and its imports) stays off a SessionStart that has neither
        state = os.fspath(context.state_dir)
        if not (os.path.lexists(os.path.join(state, "nested"))
                or os.path.lexists(os.path.join(state, "fastpath", "nested"))):
            return
    from .._errors import SupervisorError
    from ..session._nested import at_session_start

    try:
        at_session_start(context)
    except (SupervisorError, OSError) as err:
        print(f"supervise hook: cannot settle the nested-instructions ledger: {err}",
              file=sys.stderr)


def main(argv: list[str]) -> int:
    """Run the hook; always returns 0 (see the module docstring)."""
    args = HookArgs()
    quiet_exit_on_signals()
    try:
        args = parse_hook_args(argv)
        if args.help:
            sys.stdout.write(help_text())
            return EXIT_OK
        for problem in args.problems:
            print(f"supervise hook: {problem} (ignored)", file=sys.stderr)
        return _run(args)
    except BaseException as err:  # noqa: BLE001 - every path exits 0; the error is stated
        if isinstance(err, SystemExit) and not err.code or leaving() is not None:
            return EXIT_OK  # a library may wrap our SystemExit (pydantic: SchemaError)
        # a prompt or post-tool hook adds nothing to the context; stderr says why
        report_internal_error("hook", args.harness, err,
                              "digest" if args.event == "session-start" else None)
    return EXIT_OK


def report_internal_error(verb: str, harness: str, err: BaseException, kind: str | None) -> None:
    """State an internal error on stderr, its traceback and version kept in the crash log it
    names (:func:`supervisor.config._crashlog.crash_line`), and, unless ``kind`` is None, in
    the harness's output (so the model knows the digest did not run). Never raises."""
    try:
        from ..config._crashlog import crash_line

        line = crash_line(verb, err)
    except BaseException:  # noqa: BLE001 - the one line still goes out
        line = f"internal error: {type(err).__name__}: {err}"
    print(f"supervise {verb}: {line}", file=sys.stderr)
    if kind is None:
        return
    try:
        problem = emit(harness, internal_error_text(verb, err), state_dir=".supervise",
                       kind=kind)
        if problem:
            print(f"supervise {verb}: the error report was NOT delivered: {problem}",
                  file=sys.stderr)
    except BaseException:  # noqa: BLE001 - nothing more can be said
        pass


def quiet_exit_on_signals() -> None:
    """Until the engine installs its own handlers (which end a digest with its banner), a
    TERM, INT or HUP from the harness ends the hook quietly with status 0, never 128+n
    (:func:`supervisor._interrupts.leave_quietly_on_signals`, shared with the terminal verbs,
    which leave with 128+n instead)."""
    from .._interrupts import leave_quietly_on_signals

    leave_quietly_on_signals(EXIT_OK)
