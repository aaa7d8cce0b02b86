"""The Python side of the extension bridges (Pi, OpenCode): one session event in, one JSON out.

Pi and OpenCode run extensions in-process (TypeScript); they reach the engine by running
``<python> -P -m supervisor bridge --harness H --source S [--session-id ID] [--cwd DIR]`` as a
child process (one *generation*) and reading one JSON document from its stdout
(``docs/bridge-protocol.md`` gives the contract and why it is a process, not a server).

Everything past the argument parsing is the session protocol's own code, called, never
re-implemented: the gates and scope (:func:`supervisor.session._gates.stand_down_reason`), routing,
the lock, the completion interlock and the re-emit (:func:`supervisor.session._routing.run_session`).

Result kinds (:data:`KINDS`):

========== ==================================================================================
ready      ``text`` is what the model should read (digest, re-emit or the nudge line)
empty      the protocol ran and printed nothing (e.g. a nudge silenced because the digest
           already ran inside this very harness process)
failed     configuration or internal error; ``error`` says which, ``text`` is empty; the
           extension delivers the nudge line instead (``supervisor/nudge.txt``)
ineligible a gate agent or a worktree outside the primary scope: deliver nothing
cancelled  SIGTERM/SIGINT/SIGHUP ended the digest (a newer generation or the harness quit);
           ``text`` holds what was produced, the extension discards it
========== ==================================================================================
"""

from __future__ import annotations

import os


from .._harnesses import BRIDGES
from .._record import asdict, record

TYPE_CHECKING = False  # not `typing.TYPE_CHECKING`: importing typing costs the hot path
if TYPE_CHECKING:
    from _typeshed import StrPath
    from typing import Any, Literal

    from ..state._delivery import Delivery

    Kind = Literal["ready", "empty", "failed", "ineligible", "cancelled"]
KINDS: tuple[str, ...] = ("ready", "empty", "failed", "ineligible", "cancelled")
HARNESSES: tuple[str, ...] = BRIDGES
"""The harnesses that reach us through this bridge (others use ``supervise hook``): the harness
table's rows of kind ``bridge``."""
PROTOCOL = 1
"""Version of the JSON document; bumped only for an incompatible change."""


@record
class BridgeResult:
    """The JSON document ``supervise bridge`` prints (one line, UTF-8).

    Attributes:
        kind: one of :data:`KINDS`.
        text: the text for the model (``""`` unless ``ready`` or ``cancelled``).
        source: the routed source (``""`` when unrecognized, which routes as a full start).
        mode: ``full``, ``reemit``, ``read-only``, ``nudge``, or ``""`` when nothing ran.
        action: ``digest``, ``reemit``, ``nudge``, ``off`` (the off switch is set: ``text``
            is the one line saying so, :mod:`supervisor.session._off`), or ``""`` when nothing ran.
        harness: the ``--harness`` given.
        project: the project root the digest ran for (``""`` if not reached).
        error: one line for ``failed``; the stand-down reason for ``ineligible``.
        protocol: :data:`PROTOCOL`.
    """

    kind: Kind
    text: str = ""
    source: str = ""
    mode: str = ""
    action: str = ""
    harness: str = ""
    project: str = ""
    error: str = ""
    protocol: int = PROTOCOL

    def to_json(self) -> str:
        """One line of JSON (non-ASCII kept as UTF-8; lone surrogates as U+FFFD)."""
        from .._jsontext import dumps
        from .._sanitize import well_formed

        data = asdict(self)
        data["text"] = well_formed(self.text)
        return dumps(data, ensure_ascii=False)


def resolve_project(cwd: str | None) -> str:
    """The project root for ``--cwd`` (default: the current directory), at its git top level.

    Raises:
        ValueError: ``cwd`` is not an existing directory.
    """
    from ..state._project import find_project_root

    start = cwd or os.getcwd()
    if not os.path.isdir(start):
        raise ValueError(f"--cwd {cwd!r} is not a directory")
    return find_project_root(start)


def stand_down(project: StrPath) -> str:
    """The gate or scope reason to stay silent for ``project``, or ``""`` to go on.

    A configuration error does not stand down (the digest run reports it); the gates are then
    checked against the embedded defaults, as the hook does.
    """
    from .._errors import ConfigError
    from ..session._gates import stand_down_reason
    from ..config._plan import DigestPlan
    from ..config._plancache import load_plan

    try:
        config = load_plan(project)
    except ConfigError:
        config = DigestPlan()
    return stand_down_reason(config, project)


def opted_out(harness: str, project: StrPath, cwd: str | None) -> str:
    """Why a user-scope extension (``--opt-in``) of ``harness`` stays silent for a session in
    ``cwd`` of ``project`` (:func:`supervisor.session._gates.opt_in_silence`), ``""`` to go on."""
    from ..session._gates import opt_in_silence

    return opt_in_silence(harness, project, os.path.realpath(cwd or os.getcwd()))


def run_bridge(harness: str, source: str, *, session_id: str = "", cwd: str | None = None,
               opt_in: bool = False, delivery: Delivery | None = None) -> BridgeResult:
    """Route one session event of ``harness`` and run it through the session protocol.

    Args:
        harness: ``pi`` or ``opencode`` (any name is accepted; it is ``SUPERVISE_HARNESS``).
        source: the session event as the extension mapped it (``startup``, ``clear``,
            ``compact``, ``resume``, ``fork``, ...); anything unrecognized routes as a full start.
        session_id: the harness session id, display only (never a path part).
        cwd: the harness's working directory (default: ours).
        opt_in: a user-scope extension: ``ineligible`` (nothing run, nothing created: no
            state dir, no plan cache) unless the project opted in (:func:`opted_out`).
        delivery: the open delivery the start's "delivered" records are reserved in (they
            commit once the JSON line went out whole); None: written at once.

    Returns:
        A :class:`BridgeResult`. Never raises for configuration, state or engine errors: they
        are ``failed`` results with a one-line ``error``.
    """
    from ..session._payload import clean_session_id, recognize_source

    routed = recognize_source(source)
    base: dict[str, Any] = {"source": routed, "harness": harness}
    try:
        project = resolve_project(cwd)
    except ValueError as err:
        return BridgeResult("failed", error=str(err), **base)
    base["project"] = str(project)
    if opt_in:
        why = opted_out(harness, project, cwd)
        if why:
            return BridgeResult("ineligible", error=why, **base)
    try:
        from ..config._context import SessionContext
        from .._errors import ConfigError
        from ..session._gates import stand_down_reason
        from ..config._plancache import load_plan

        try:
            config = load_plan(project, on_env_error=lambda msg: None)
        except ConfigError as err:
            return BridgeResult("failed", error=f"configuration error, no digest ran: {err}", **base)
        reason = stand_down_reason(config, project)
        if reason:
            return BridgeResult("ineligible", error=reason, **base)
        from ..session._off import off_line, off_reason

        off = off_reason(project)
        if off:  # the off switch: nothing runs; the session is told once, by this text
            return BridgeResult("ready", text=off_line(off), mode="", action="off", **base)
        from ..session._routing import run_session

        context = SessionContext.for_project(project, source=routed, harness=harness,
                                             session_id=clean_session_id(session_id),
                                             cwd=os.path.realpath(cwd or os.getcwd()),
                                             delivery=delivery)
        if context.session_id:
            from .._errors import SupervisorError
            from ..session._nested import at_session_start

            try:  # a new epoch at compact/clear; a ledger a new session did not write: dropped
                at_session_start(context)
            except (SupervisorError, OSError):  # an unusable state dir: the digest still runs
                pass
        outcome = run_session(config, context)
    except Exception as err:  # noqa: BLE001 - the extension must get a document, not a traceback
        from ..config._crashlog import crash_line

        return BridgeResult("failed", error=crash_line("bridge", err, cwd), **base)
    mode = "nudge" if outcome.kind == "nudge" else outcome.mode
    if outcome.truncation not in (None, "budget"):  # a signal ended it: the bridge cancelled us
        kind: Kind = "cancelled"
    else:
        kind = "ready" if outcome.text.strip() else "empty"
    return BridgeResult(kind, text=outcome.text if kind != "empty" else "", mode=mode,
                        action=outcome.kind, **base)

