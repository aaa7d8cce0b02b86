"""The session protocol: route a hook event, take or check the lock, run the digest or re-emit.

Routing (product spec §2; ``docs/session-protocol.md`` gives the reasons):

==================== =============================================================
source               action
==================== =============================================================
startup, new         full digest
clear, compact       re-emit if this session (this harness process, or the same session
                     id in an earlier process) proved a complete start, else full
resume, reload, fork nudge (silent when the transcript already holds the digest)
unrecognized (``""``) full digest
==================== =============================================================

A full start takes the lock (:mod:`supervisor.session._lock`) or, when a live foreign session holds
it, runs **read-only**: ``exclusive`` stages are skipped and a READ-ONLY notice is written
first, through the same sink as the digest. Only a locked full start whose every stage
completed writes the completion record that a later re-emit needs.
"""

from __future__ import annotations

import os

import time

from .._record import record, replace
from ..engine._results import StageSummary  # the stages of LastDigest (loaded by name)
from . import _ancestry, _lock
from ..config._context import SessionContext
from ._outcome import SessionOutcome

TYPE_CHECKING = False  # not `typing.TYPE_CHECKING`: importing typing costs the hot path
if TYPE_CHECKING:
    from _typeshed import StrPath
    from typing import Literal

    from ..config._plan import DigestPlan
    from ..engine._launch import Prestart
    from ..adapters._spill import Spill
    from ..engine._results import DigestResult
    from ..state._delivery import Delivery

    Action = Literal["full", "reemit", "nudge"]

ROUTES: dict[str, Action] = {
    "startup": "full", "new": "full",
    "clear": "reemit", "compact": "reemit",
    "resume": "nudge", "reload": "nudge", "fork": "nudge",
}
LAST_DIGEST_FILE = "last-digest.json"
_REEMIT_RESERVE = 512
"""Bytes of the re-emit budget kept for the fixed label and size lines."""


def route(source: str) -> Action:
    """The action for a recognized source; ``""`` (unrecognized) and anything else is full."""
    return ROUTES.get(source, "full")


@record
class LastDigest:
    """Summary of the last digest this project's hook ran (``last-digest.json``)."""

    finished_at: float
    source: str
    mode: str
    harness: str
    session_id: str
    seconds: float
    truncated: bool
    complete: bool
    stages: tuple[StageSummary, ...] = ()

    __record_times__ = ("finished_at",)  # judged at load: a future one is corrupt


def _structured(text: str, result: DigestResult, front: str, tail: str = "",
                spill: Spill | None = None, **kw: str | None) -> SessionOutcome:
    notices = front + "".join(result.notices) + tail
    if spill is not None:  # the digest streamed into it: its fitted text, nothing to cut
        if tail:
            spill.note(tail)
        return SessionOutcome(spill.close(), "digest", notices=notices, **kw)  # type: ignore[arg-type]
    parts = tuple((s.name, s.output) for s in result.stages if s.output)
    return SessionOutcome(text, "digest", parts=parts, notices=notices, **kw)  # type: ignore[arg-type]


def when(epoch: object) -> str:
    """``YYYY-MM-DD HH:MM:SS UTC`` (``time.gmtime``) for seconds since the epoch; ``-`` for anything else (an
    absent or hand-edited record never crashes a caller)."""
    if not isinstance(epoch, (int, float)) or isinstance(epoch, bool):
        return "-"
    try:
        return time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(epoch))
    except (OverflowError, OSError, ValueError):
        return "-"


def owner_line(record: _lock.LockRecord) -> str:
    """``claude pid 123 (session abc), since`` and :func:`when` of the record's acquisition."""
    sid = f" (session {record.session_id})" if record.session_id else ""
    return f"{record.harness or 'terminal'} pid {record.pid}{sid}, since {when(record.acquired_at)}"


def read_only_notice(why: str, exclusive: list[str]) -> str:
    """The READ-ONLY notice that opens a read-only digest."""
    skipped = (f"Stages marked exclusive were skipped: {', '.join(exclusive)}."
               if exclusive else "No stage is marked exclusive, so nothing was skipped.")
    return ("READ-ONLY SESSION - LOCK OWNERSHIP NOT VERIFIED\n"
            f"{why}\n{skipped}\n"
            "Do not act as the session that holds the helm (no exclusive work) until this is "
            "resolved.\n\n")


def _run_engine(config: DigestPlan, context: SessionContext, notice: str,
                only: list[str] | None, spill: Spill | None = None) -> tuple[DigestResult, str]:
    """Run the engine's digest into a buffer; return ``(result, text as printed)``.

    ``notice`` goes first, before the text the engine printed (its own record of it).
    With a ``spill`` the digest streams into it instead (notice first) and the text returned
    is only the notice: nothing of the stages' output is held whole.
    SIGTERM/SIGINT/SIGHUP (a harness giving up on us) end the digest with its banner instead
    of killing us mid-write. With no stage to run, the engine is not loaded.
    """
    from ..config._plan import unmet

    if spill is not None and notice:
        spill.note(notice)

    selected = [s for s in config.stages  # `only`, then each stage's `when` condition
                if (only is None or s.name in only)
                and not unmet(s, context.source, context.harness, context.where)]
    if not selected:
        from ..engine._results import DigestResult, StageResult

        skipped = tuple(StageResult(s.name, "skipped") for s in config.stages)
        return DigestResult(skipped, False, config.budget, 0.0, None, notice), notice
    from ..engine import _reaper, _spawn

    delivery = context.delivery
    if delivery is not None:  # stages stage their "delivered" records for the hook to settle
        delivery.state_dir = context.state_dir
        context = _with(context, extra_env={**context.extra_env, **delivery.env()})
    _reaper.enable_subreaper()
    _spawn.own_descriptors()  # stages never hold what the harness passed us
    from ..engine._launch import prestart

    started = prestart(config, context, only)  # they work while the engine loads
    try:
        return _run_started(config, context, notice, only, started, spill)
    finally:
        started.close()  # what the engine did not take (it never ran): killed whole
        _reaper.reap_zombie_children()


def _run_started(config: DigestPlan, context: SessionContext, notice: str,
                 only: list[str] | None, started: Prestart,
                 spill: Spill | None = None) -> tuple[DigestResult, str]:
    """:func:`_run_engine`'s digest, its first stages ``started``."""
    from ..engine._run import digest
    from ..engine._signals import Aborter, run_with_signals

    import shlex

    hint = shlex.join(["supervise", "digest", "-C", str(context.project_dir)])

    async def body(aborter: Aborter) -> DigestResult:
        return await digest(config, context, only=only, abort=aborter.event,
                            abort_reason=aborter.reason, rerun_hint=hint, prestart=started,
                            frame=spill)

    result, _ = run_with_signals(body)
    # the text as printed is the engine's own record of it (its chunks, decoded once), not a
    # second buffer of the same bytes and its decode
    return result, notice + result.text


HISTORY_FILE = "digest-history.json"
HISTORY_KEEP = 10
"""Digests ``digest-history.json`` keeps (newest last): enough to see a slow-start trend."""


@record
class HistoryEntry:
    """One past digest: when it finished (epoch seconds), its source, harness (``""`` for a
    terminal), mode, wall seconds, budget seconds, and whether it was truncated."""

    finished_at: float
    source: str
    harness: str
    mode: str
    seconds: float
    budget: float
    truncated: bool

    __record_times__ = ("finished_at",)  # judged at load: a future one is corrupt


@record
class DigestHistory:
    """The last :data:`HISTORY_KEEP` digests of a project, oldest first."""

    entries: tuple[HistoryEntry, ...] = ()


def record_digest(state_dir: StrPath, result: DigestResult, context: SessionContext) -> None:
    """Record a finished digest for ``supervise status``: ``last-digest.json`` (per stage) and
    one entry in ``digest-history.json``. Hook and terminal digests alike. Never raises (a
    summary for ``status`` must never break the hook); writes nothing when ``state_dir`` does
    not exist (a terminal digest in a project that has none)."""
    if not os.path.isdir(state_dir):
        return
    now = time.time()
    stages = tuple(s.summary() for s in result.stages)
    record = LastDigest(finished_at=now, source=context.source, mode=context.mode,
                        harness=context.harness, session_id=context.session_id,
                        seconds=result.seconds, truncated=result.truncated,
                        complete=result.complete, stages=stages)
    entry = HistoryEntry(finished_at=now, source=context.source, harness=context.harness,
                         mode=context.mode, seconds=round(result.seconds, 3),
                         budget=result.budget, truncated=result.truncated)
    # No fsync: these two only feed `supervise status`, and a crash that loses one loses a
    # summary, never a delivery; the four flushes were the digest's last wait on the disk
    # (milliseconds on an idle disk, tens of them on a busy one).
    try:
        _lock.write_record(os.path.join(state_dir, LAST_DIGEST_FILE), record, fsync=False)
        old = _lock.read_record(os.path.join(state_dir, HISTORY_FILE), DigestHistory) or DigestHistory()
        kept = (*old.entries, entry)[-HISTORY_KEEP:]
        _lock.write_record(os.path.join(state_dir, HISTORY_FILE), DigestHistory(kept), fsync=False)
    except Exception:  # noqa: BLE001 - a summary for `status` must never break the hook
        pass


def _read_directly(config: DigestPlan, context: SessionContext, name: str) -> list[str]:
    """The terminal command that shows stage ``name`` as this session saw it (with its
    source and harness when the stage has a ``when`` condition)."""
    argv = ["supervise", "digest", "-C", str(context.project_dir), "--only", name]
    spec = next((s for s in config.stages if s.name == name), None)
    if spec is not None and spec.when:
        argv += [f"--{k}={v}" for k, v in (("source", context.source),
                                             ("harness", context.harness)) if v]
    return argv


def compose_reemit(config: DigestPlan, result: DigestResult, context: SessionContext) -> str:
    """The labelled re-emit text: reemit stages' output under ``config.reemit_budget`` bytes.

    A block that would overflow the budget is replaced by one line naming the stage and how
    to read it directly. Why a budget: a 306 KB re-emit once caused a compaction loop.
    """
    names = [s.name for s in config.stages if s.reemit]
    skipped = [s.name for s in config.stages if not s.reemit]
    budget = config.reemit_budget
    head = (f"SESSION START (CONTEXT RE-EMIT after {context.source or 'a context reset'}) - "
            f"{context.project_dir}\n"
            "This session already completed its full session-start digest; only the stages "
            "marked reemit are repeated below.\n"
            + (f"NOT repeated: {', '.join(skipped)} (run `supervise digest --only NAME` to see "
               "one again).\n"
               if skipped else "Every stage is marked reemit.\n")
            + "\n")
    parts = [head]
    used = len(head.encode())
    limit = max(budget - _REEMIT_RESERVE, 0)
    by_name = {s.name: s for s in result.stages}
    for name in names:
        stage = by_name.get(name)
        block = stage.output if stage is not None else ""
        if stage is not None and stage.status not in ("ok", "skipped"):
            block += f"{'' if not block or block.endswith(chr(10)) else chr(10)}({name}: {stage.status})\n"
        size = len(block.encode())
        if used + size > limit:
            import shlex

            block = (f"RE-EMIT BUDGET: {name} omitted ({size} bytes would exceed the {budget}-byte "
                     f"re-emit budget). Read it directly: "
                     f"{shlex.join(_read_directly(config, context, name))}\n")
        elif block and not block.endswith("\n"):
            block += "\n"
        parts.append(block)
        used += len(block.encode())
    if result.truncated:
        parts.append("RE-EMIT TRUNCATED: the re-emit hit its time budget; run `supervise digest`.\n")
    total = sum(len(p.encode()) for p in parts)
    parts.append(f"RE-EMIT SIZE: {total} of {budget} bytes.\n")
    return "".join(parts)


def run_session(config: DigestPlan, context: SessionContext, *, take_lock: bool = False,
                transcript: str | None = None, repeat_checked: bool = False,
                spill: Spill | None = None) -> SessionOutcome:
    """Route ``context.source`` and run it; ``context.mode`` is ignored and decided here.

    A full start or re-emit repeated for the same (harness process, session id, source)
    within :data:`supervisor.session._starts.WINDOW` seconds returns the first one's outcome,
    byte-identical, and runs nothing (:func:`supervisor.session._starts.once`; issue 12, item 3);
    ``repeat_checked`` is that check's own re-entry.

    ``transcript`` is the payload's ``transcript_path``: a resume whose transcript already
    holds this project's digest (or the nudge) since its last compaction stays silent
    (:func:`supervisor.session._nudge.restored_in_transcript`).

    ``spill`` (:class:`supervisor.adapters._spill.Spill`): a full or read-only digest
    streams into it, and the outcome's ``text`` is what it fitted to its inline cap (its
    notice first), with no ``parts`` (nothing left to cut); a re-emit or a nudge leaves it
    unused (``spill.text`` stays None).

    Never raises for state problems (they make the session read-only with the reason). Engine
    or config errors propagate to the command, which states them and exits 0.
    """
    action = route(context.source)
    if action == "nudge" and context.source == "resume" and _drops_context(context.harness):
        from . import _armed

        if os.path.lexists(os.path.join(context.state_dir, _armed.ARMED_DIR)) and _armed.held(
                context.state_dir, context.harness, context.session_id):
            # a prompt hook stored the re-emit in the session's history since its last
            # compaction (Copilot): the resumed process has it, a second one would double it
            return SessionOutcome("", "nudge")
        action = "reemit"  # Gemini -r: the resumed context holds no earlier digest
    if action == "nudge":
        from ._nudge import NUDGE_TEXT, digest_ran_here, restored_in_transcript
        from ._refresh import reread_by_harness

        reread_by_harness(context.state_dir, context.session_id,  # it re-read its own files
                          context.project_dir)

        near = _ancestry.ancestry(_ancestry.NUDGE_HOPS)
        found = _ancestry.find_harness(near, context.session_id)
        if not context.harness:
            context = _with(context, harness=found.harness if found else "")
        if found is not None and context.source == "resume":
            from ._starts import note_resume

            note_resume(context.state_dir, found.ident, context.session_id)
        silent = (digest_ran_here(context.state_dir, near)
                  or restored_in_transcript(context.state_dir, context.harness, transcript))
        return SessionOutcome("" if silent else NUDGE_TEXT, "nudge")
    chain = _ancestry.ancestry()
    ancestors = _ancestry.ancestor_ids(chain)
    harness_proc = _ancestry.find_harness(chain, context.session_id)
    harness = context.harness or (harness_proc.harness if harness_proc else "")
    if harness_proc is not None and harness_proc.harness == harness and not context.harness_version:
        context = _with(context, harness_version=_ancestry.installed_version(
            harness_proc.ident.pid, harness))
    session_id = context.session_id
    if harness_proc is not None and not repeat_checked and context.source == "startup":
        from ._starts import spurious_startup

        if spurious_startup(context.state_dir, harness_proc.ident, session_id, transcript):
            return SessionOutcome("", "digest")  # the resume's second start: not a new context
    if harness_proc is not None and not repeat_checked:
        from ._starts import once, start_key

        return once(context.state_dir, start_key(harness_proc.ident, session_id, context.source),
                    config.budget + config.grace + 5.0,
                    lambda: run_session(config, context, take_lock=take_lock, transcript=transcript,
                                        repeat_checked=True, spill=spill), context.delivery)
    if action == "reemit":
        view = _lock.read_state(context.state_dir)
        if _lock.proven_start(view, ancestors, session_id) or _started_elsewhere(
                view, context.state_dir, ancestors, harness, session_id):
            ctx = _with(context, mode="reemit", harness=harness)
            only = [s.name for s in config.stages if s.reemit]
            result, _ = _run_engine(config, ctx, "", only)
            record_digest(context.state_dir, result, ctx)
            return SessionOutcome(compose_reemit(config, result, ctx), "reemit", "reemit",
                                  result.reason)
    exclusive = [s.name for s in config.stages if s.exclusive]
    owner: _ancestry.ProcessId | None = harness_proc.ident if harness_proc else None
    if owner is None and take_lock and len(ancestors) > 1:
        owner = ancestors[1]  # a terminal: the shell that ran us holds the lock
    if owner is None:
        held = _lock.read_state(context.state_dir).lock
        if held is not None and _lock.owned_by_session(held, ancestors, session_id):
            owner = held.ident  # a terminal whose shell took the lock earlier
    if owner is None:
        why = ("No harness process was found among this process's ancestors (a terminal?), so no "
               "lock was taken. Use `--take-lock` to take it from a terminal.")
        return _read_only(config, _with(context, harness=harness), why if exclusive else "",
                          exclusive, spill)
    outcome = _lock.acquire_for_full_start(context.state_dir, owner, harness or "terminal",
                                           session_id, ancestors, take_unseen=take_lock,
                                           exact=harness_proc is not None)
    if outcome.status == "foreign" and outcome.record is not None:
        why = f"Another live session holds the lock: {owner_line(outcome.record)}."
        return _read_only(config, _with(context, harness=harness), why, exclusive, spill)
    if outcome.status == "unseen" and outcome.record is not None:
        why = (f"The lock is held by {owner_line(outcome.record)}, but {outcome.reason}; it is "
               "not taken over silently. If that session is gone, take it from here with "
               "`supervise hook --take-lock`.")
        return _read_only(config, _with(context, harness=harness), why, exclusive, spill)
    if outcome.status == "unusable" or outcome.record is None:
        from ..state._statedir import mark_named

        mark_named(context.state_dir)  # the READ-ONLY notice names a symlinked state dir
        why = f"The state dir cannot be used, so no lock was taken: {outcome.reason}."
        return _read_only(config, _with(context, harness=harness), why, exclusive, spill)
    ctx = _with(context, mode="full", harness=harness)
    result, text = _run_engine(config, ctx, "", None, spill)
    if result.complete:
        reason = _complete(context.state_dir, outcome.record.nonce, session_id, harness,
                           context.delivery)
    else:
        unfinished = [f"{s.name} ({s.status.replace('_', ' ')})" for s in result.stages
                      if not s.completed]
        reason = ("the digest did not complete: " + ", ".join(unfinished) if unfinished
                  else "the digest was truncated")
    tail = ""
    if reason:
        tail = (f"SESSION_START_COMPLETION: not recorded ({reason}) - the next clear or compact "
                "will run a full start.\n")
        text += f"{'' if text.endswith(chr(10)) or not text else chr(10)}{tail}"
    record_digest(context.state_dir, result, ctx)
    return _structured(text, result, "", tail, spill, mode="full", truncation=result.reason)


def _drops_context(harness: str) -> bool:
    """The harness table says a resume of ``harness`` keeps none of the earlier context."""
    from .._harnesses import BY_NAME

    row = BY_NAME.get(harness)
    return row is not None and row.resume_drops_context


def _started_elsewhere(view: _lock.LockView, state_dir: StrPath, ancestors: list[_ancestry.ProcessId],
                       harness: str, session_id: str) -> bool:
    """This session (harness, session id) completed a full start in an earlier process
    (``claude -p --resume``, ``codex exec resume``: the owner process is gone), and nothing
    since says otherwise: the lock is gone, still carries that start's nonce with its
    completion record, or belongs to another session whose owner is dead (a live one makes
    this start read-only instead). Compaction re-emits by session, not by process."""
    from ._ledger import started

    if view.reason:
        return False
    nonce = started(state_dir, harness, session_id)
    if nonce is None:
        return False
    held = view.lock
    if held is None:
        return True
    if held.session_id == session_id or _lock.owned_by_session(held, ancestors, session_id):
        # our own later full start decides: completed under the nonce we remembered
        return (held.nonce == nonce and view.completion is not None
                and view.completion.nonce == nonce)
    return _lock.judge_lock(held).verdict == "stale"  # the one judgement of a lock


def _remember_start(state_dir: StrPath, harness: str, session_id: str, nonce: str) -> None:
    from .._errors import StateError
    from ._ledger import record_start

    try:
        record_start(state_dir, harness, session_id, nonce)
    except StateError:  # the next compact of a new process then runs a full start: safe
        pass


def _complete(state_dir: StrPath, nonce: str, session_id: str, harness: str,
              delivery: Delivery | None) -> str:
    """Record the completion of the full start holding ``nonce`` (and remember the start for
    the session, :func:`_remember_start`), or, with a ``delivery`` open
    (:mod:`supervisor.state._delivery`, the hook), only check that it can be recorded and reserve the
    write for after the envelope went out: a digest nobody received is not a proven start
    (issue 11 item 5). Returns ``""`` or the reason it is not (to be) recorded."""
    from .._errors import StateError

    if delivery is None:
        reason = _lock.record_completion(state_dir, nonce, session_id)
        if not reason:
            _remember_start(state_dir, harness, session_id, nonce)
        return reason
    try:
        held = _lock.read_record(os.path.join(state_dir, _lock.LOCK_FILE), _lock.LockRecord)
    except (StateError, OSError, ValueError, RecursionError) as err:
        return f"the lock cannot be read: {err}"
    if held is None or held.nonce != nonce:
        return "the lock changed hands while the digest ran"

    def commit() -> None:
        reason = _lock.record_completion(state_dir, nonce, session_id)
        if reason:
            raise OSError(f"completion record: {reason}")
        _remember_start(state_dir, harness, session_id, nonce)

    delivery.reserve(commit, lambda: None)
    return ""


def _with(context: SessionContext, **changes: object) -> SessionContext:
    return replace(context, **changes)


def _read_only(config: DigestPlan, context: SessionContext, why: str,
               exclusive: list[str], spill: Spill | None = None) -> SessionOutcome:
    ctx = _with(context, mode="read-only")
    notice = read_only_notice(why, exclusive) if why else ""
    only = [s.name for s in config.stages if not s.exclusive] if exclusive else None
    result, text = _run_engine(config, ctx, notice, only, spill)
    return _structured(text, result, notice, "", spill, mode="read-only",
                       truncation=result.reason)
