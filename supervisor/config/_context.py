"""The session context every stage receives in its environment (``SUPERVISE_*``)."""

from __future__ import annotations

import os
from pathlib import Path

from .._record import field, record
from ..state._project import STATE_DIR_NAME

TYPE_CHECKING = False  # not `typing.TYPE_CHECKING`: importing typing costs the hot path
if TYPE_CHECKING:
    from typing import Literal

    Mode = Literal["full", "reemit", "read-only"]


def state_dir_for(project_dir: Path) -> Path:
    """The per-machine state dir: ``SUPERVISE_STATE_DIR`` if set, else ``<project>/.supervise``."""
    override = os.environ.get("SUPERVISE_STATE_DIR")
    if override:
        return Path(override).expanduser().absolute()
    return project_dir / STATE_DIR_NAME


@record
class SessionContext:
    """Who is asking for the digest, passed to each stage as environment variables.

    Attributes:
        project_dir: absolute project root (the git top level when in git).
        state_dir: absolute per-machine state dir (see :func:`state_dir_for`).
        source: the routed source (``startup``, ``compact``, ...) or ``""`` when unrecognized
            or when run from a terminal.
        mode: ``full``, ``reemit`` or ``read-only``.
        harness: harness name (``claude``, ``codex``, ...) or ``""`` for a terminal.
        session_id: the harness session id as given; for display only, never a path part.
        cwd: the session's working directory (payload ``cwd``, the bridge's ``--cwd``, the
            terminal's cwd or ``-C`` for ``supervise digest``), e.g. a package of a monorepo;
            ``SUPERVISE_CWD``. None means the project root.
    """

    project_dir: Path
    state_dir: Path
    source: str = ""
    mode: Mode = "full"
    harness: str = ""
    session_id: str = ""
    cwd: Path | None = None
    extra_env: dict[str, str] = field(default_factory=dict)

    @classmethod
    def for_project(cls, project_dir: Path, **kwargs: object) -> SessionContext:
        """A context for ``project_dir`` with its default state dir."""
        project_dir = project_dir.absolute()
        return cls(project_dir=project_dir, state_dir=state_dir_for(project_dir), **kwargs)  # type: ignore[arg-type]

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
            **self.extra_env,
        }
