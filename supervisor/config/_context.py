"""The session context every stage receives in its environment (``SUPERVISE_*``)."""

from __future__ import annotations

import os

from .._record import field, record
from ..state._project import STATE_DIR_NAME, pure_path

TYPE_CHECKING = False  # not `typing.TYPE_CHECKING`: importing typing costs the hot path
if TYPE_CHECKING:
    from typing import Literal

    from _typeshed import StrPath

    from ..state._delivery import Delivery

    Mode = Literal["full", "reemit", "read-only"]


def state_dir_for(project_dir: StrPath) -> str:
    """The per-machine state dir (a ``str``): ``SUPERVISE_STATE_DIR`` if set (``~`` expanded,
    made absolute), else ``<project>/.supervise``."""
    override = os.environ.get("SUPERVISE_STATE_DIR")
    if override:
        return _absolute(os.path.expanduser(override))
    return os.path.join(project_dir, STATE_DIR_NAME)


def _absolute(path: StrPath) -> str:
    """``pathlib.Path(path).absolute()`` as a ``str``: joined to the current directory, no
    link resolved and no ``..`` collapsed (only ``.`` parts and repeated slashes go)."""
    path = os.fspath(path)
    # the current directory only for a relative path: it may have been deleted (`-C DIR`)
    return pure_path(path if os.path.isabs(path) else os.path.join(os.getcwd(), path))


DETACH_VAR = "SUPERVISE_DETACHED_FROM"
"""Set to a built-in stage's name in a process that stage starts on purpose to outlive it (the
memory stage's consolidation wrapper, ``stages/memory/consolidate.py``); the engine's sweep
(``supervisor.engine._tree``) leaves it alone. Honoured only for built-in stages
(``StageTree.detach_mark``) and only for a process that left the stage's session; a
configured command cannot detach this way. The one home of the name, for the engine and the
stage."""


@record
class SessionContext:
    """Who is asking for the digest, passed to each stage as environment variables.

    Attributes:
        project_dir: absolute project root (the git top level when in git): a ``str`` or a
            path-like, kept as given (the hook paths give ``str``: no ``pathlib`` import).
        state_dir: absolute per-machine state dir (see :func:`state_dir_for`), likewise.
        source: the routed source (``startup``, ``compact``, ...) or ``""`` when unrecognized
            or when run from a terminal.
        mode: ``full``, ``reemit`` or ``read-only``.
        harness: harness name (``claude``, ``codex``, ...) or ``""`` for a terminal.
        session_id: the harness session id as given; for display only, never a path part.
        cwd: the session's working directory (payload ``cwd``, the bridge's ``--cwd``, the
            terminal's cwd or ``-C`` for ``supervise digest``), e.g. a package of a monorepo;
            ``SUPERVISE_CWD``. None means the project root.
        preview: a person looking (``supervise digest`` without ``--session-start``): the
            stages show what a session start would, and record nothing (no handoff delivery
            counted, no exposure, no consolidation started); ``SUPERVISE_PREVIEW=1``.
        harness_version: the version of the harness process that owns the session, as the
            ancestry walk learned it (``supervisor.session._ancestry.installed_version``);
            ``SUPERVISE_HARNESS_VERSION``, "" when unknown. The harness table's rules for
            that version say which instruction files the harness loads itself.
        delivery: the open :class:`~supervisor.state._delivery.Delivery` whose envelope
            proves this run's "delivered" records (the hook, the bridge, ``digest
            --session-start``, an MCP answer): they are reserved in it and commit only once
            the envelope went out whole; None: they are written at once (a stage run by
            hand, a preview, a test). Passed, never ambient: there is no process-wide
            current delivery.
    """

    project_dir: StrPath
    state_dir: StrPath
    source: str = ""
    mode: Mode = "full"
    harness: str = ""
    session_id: str = ""
    cwd: StrPath | None = None
    preview: bool = False
    extra_env: dict[str, str] = field(default_factory=dict)
    harness_version: str = ""
    delivery: Delivery | None = None

    @classmethod
    def for_project(cls, project_dir: StrPath, **kwargs: object) -> SessionContext:
        """A context for ``project_dir`` (``str`` or a path-like, made absolute) with its
        default state dir."""
        root = _absolute(project_dir)
        return cls(project_dir=root, state_dir=state_dir_for(root), **kwargs)  # type: ignore[arg-type]

    def where(self) -> str | None:
        """The session's working directory relative to the project root, POSIX (``""`` the
        root itself; links resolved on both sides), or None when it lies outside the
        project: what ``when.paths`` is matched against
        (:func:`supervisor.config._plan.unmet`)."""
        if self.cwd is None:
            return ""
        cwd, root = os.path.realpath(self.cwd), os.path.realpath(self.project_dir)
        if cwd == root:
            return ""
        if not cwd.startswith(root.rstrip("/") + "/"):
            return None
        return cwd[len(root.rstrip("/")) + 1:]

    def env(self) -> dict[str, str]:
        """The ``SUPERVISE_*`` variables for a stage (all strings, never absent)."""
        return {
            "SUPERVISE_SOURCE": self.source,
            "SUPERVISE_MODE": self.mode,
            "SUPERVISE_HARNESS": self.harness,
            "SUPERVISE_SESSION_ID": self.session_id,
            "SUPERVISE_PROJECT_DIR": str(self.project_dir),
            "SUPERVISE_STATE_DIR": str(self.state_dir),
            "SUPERVISE_CWD": str(self.cwd or self.project_dir),
            "SUPERVISE_PREVIEW": "1" if self.preview else "",
            "SUPERVISE_HARNESS_VERSION": self.harness_version,
            **self.extra_env,
        }
