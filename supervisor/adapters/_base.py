"""What an adapter knows about one harness: files, registration shape, units, envelope, caveats.

An :class:`Adapter` is pure data (a frozen :func:`~supervisor._record.record`, no I/O; not a
dataclass nor a ``NamedTuple``, whose ``dataclasses`` and ``typing`` imports cost the hook's hot
path several milliseconds). What every part of the package knows of a harness (name, label,
kind, registration files, events, timeout unit) is its row of the harness table
(:mod:`supervisor._harnesses`); the adapter adds what only the hook and ``install`` need. The
facts are the ones observed with the real CLIs offline, or documented (``docs/harnesses/``).
"""

from __future__ import annotations

from .._record import record

TYPE_CHECKING = False  # not `typing.TYPE_CHECKING`: importing typing costs the hot path
if TYPE_CHECKING:
    from typing import Literal

    from .._harnesses import Harness

    from collections.abc import Mapping
    from pathlib import Path

    from _typeshed import StrPath

    Envelope = Literal["hook-specific", "cursor", "copilot", "cline", "plain"]
    """How hook output is wrapped on stdout.

    ``hook-specific``: ``{"hookSpecificOutput": {"hookEventName": E, "additionalContext": T}}``
    (Claude, Codex, Gemini, Qwen). ``cursor``: ``{"additional_context": T}``. ``copilot``:
    ``{"additionalContext": T}`` (Copilot CLI reads the top-level key alone and ignores
    ``hookSpecificOutput``, LAB 1.0.102). ``cline``: ``{"contextModification": T}``.
    ``plain``: the text.
    """

    Shape = Literal["groups", "cursor", "copilot", "files"]
    """Registration JSON shape.

    ``groups`` (Claude and everything modelled on it):
    ``{"hooks": {EVENT: [{"matcher": M, "hooks": [{"type": "command", "command": C, "timeout": N}]}]}}``.
    ``cursor``: ``{"version": 1, "hooks": {EVENT: [{"command": C, "timeout": N}]}}``.
    ``copilot``: ``{"version": 1, "hooks": {EVENT: [{"type": "command", "bash": C, "timeoutSec": N}]}}``
    (a file of its own in ``.github/hooks/``). ``files``: no settings file; one executable
    file per event, named after it, in the harness's hooks folder (Cline's
    ``.clinerules/hooks/TaskStart``), that runs the command
    (:func:`supervisor.adapters._settings.write_registration`).
    """

    Tier = Literal["run", "nudge"]
    """``run``: the hook's output reaches the model, so the hook runs the digest. ``nudge``: it does
    not (Grok drops SessionStart output), so the hook prints only the one-line nudge."""

HOOK_MARKER = "-m supervisor hook"
"""Substring that identifies a registration as ours (``uninstall`` and ``doctor`` look for it).

Every command ``install`` writes contains it; so does :data:`SHIM_MARKER` for the ``bin/`` shim.
"""
SHIM_MARKER = "supervise-hook"

PROMPT_TIMEOUT = 30
"""Seconds registered for the per-prompt and post-tool hooks (they deliver a stored result or
print nothing; they never run the digest)."""

TIMEOUT_MARGIN = 60
"""Seconds the registered SessionStart timeout exceeds the digest budget by: the budget must
end first, so the truncation banner is printed before the harness kills the hook (the budget
itself returns by ``budget + 0.25 s``; the rest is interpreter start and slow machines)."""


@record
class Adapter:
    """One hook-command harness's hook contract: its row of the harness table plus what only
    the hook needs (shape, envelope, caps, caveats).

    Attributes:
        row: the harness's row of :data:`supervisor._harnesses.ROWS` (name, label, kind,
            registration files, events, timeout unit); the properties below read it.
        shape: registration JSON shape (see :data:`Shape`).
        envelope: stdout envelope (see :data:`Envelope`).
        inline_cap: default inline cap in characters (``inline_cap`` in the config overrides).
        post_tool_matcher: matcher for the post-tool event (the tool names, ``Read|...``).
        session_matcher: matcher written for the session event (None: key omitted = all sources).
        extra_args: arguments added to the registered command (Cursor: ``--source startup``,
            its payload has no source).
        project_dir_env: environment variable holding the project root, or None.
        next_steps: what the user must do beyond the file for the hook to run.
        caveats: known limits, for ``doctor`` and the docs.
        standdown_env: environment variables meaning "another harness is running this
            registration" (Grok also loads ``.claude/settings.json``).
        default_timeout: the harness's own hook timeout in seconds when none is registered
            (None: not documented).
        compact_refires: a SessionStart with source ``compact`` follows a compaction (Claude,
            Codex, Qwen, Droid); else the row's ``compact_event`` (Copilot ``PreCompact``) arms
            a re-emit the next prompt hook delivers once (:mod:`supervisor.session._armed`).
        precompact_to_summary: the row's ``compact_event`` hook's stdout is handed to the
            summariser (Claude: appended to the summarisation prompt, LAB), so it names the
            stages re-sent after the compaction.
        start_armed: the harness drops its session event's output (Cline CLI runs TaskStart
            fire-and-forget): that event arms the start, and the prompt event (the first hook
            whose output reaches the model) delivers it (:mod:`supervisor.session._armed`).
        unproven: what of this adapter was not run with the real CLI, one line each
            (``doctor`` says each as a ``warn`` line; the harness's page says why).
        limits: what the harness's events cannot deliver at all (read in its source, proven
            with the real CLI where it runs offline), one line each with what to do instead
            (``doctor`` says each as a ``warn`` line; the harness's page says why).
    """

    row: Harness
    shape: Shape
    envelope: Envelope
    inline_cap: int = 16_000
    post_tool_matcher: str | None = None
    session_matcher: str | None = None
    extra_args: tuple[str, ...] = ()
    project_dir_env: str | None = None
    next_steps: tuple[str, ...] = ()
    caveats: tuple[str, ...] = ()
    standdown_env: tuple[str, ...] = ()
    default_timeout: float | None = None
    compact_refires: bool = True
    precompact_to_summary: bool = False
    start_armed: bool = False
    unproven: tuple[str, ...] = ()
    limits: tuple[str, ...] = ()

    @property
    def name(self) -> str:
        """Our short name (``claude``, ``codex``, ...), as in ``supervise hook NAME``."""
        return self.row.name

    @property
    def title(self) -> str:
        """The harness's label, for messages."""
        return self.row.label

    @property
    def project_settings(self) -> str | None:
        """The settings file relative to the project root, or None (Grok)."""
        return self.row.project

    @property
    def local_settings(self) -> str | None:
        """The per-user, uncommitted settings file relative to the project root, or None."""
        return self.row.local

    @property
    def session_event(self) -> str:
        """The session-start event name in the settings file."""
        return self.row.session_event

    @property
    def prompt_event(self) -> str | None:
        """The per-prompt event that can add model context, or None."""
        return self.row.prompt_event

    @property
    def post_tool_event(self) -> str | None:
        """The event after a tool ran (Claude ``PostToolUse``), or None."""
        return self.row.post_tool_event

    @property
    def timeout_scale(self) -> int:
        """Registered timeout units per second (1 = seconds, 1000 = milliseconds)."""
        return self.row.timeout_scale

    @property
    def tier(self) -> Tier:
        """``run`` or ``nudge`` (see :data:`Tier`), from the row's kind."""
        return "nudge" if self.row.kind == "nudge" else "run"

    @property
    def plugin(self) -> str | None:
        """Our harness plugin as the harness names it (the row's ``plugin``), or None."""
        return self.row.plugin

    @property
    def scopes(self) -> tuple[str, ...]:
        """The ``--scope`` values ``install`` accepts for this harness."""
        scopes = ("project", "user") if self.project_settings else ("user",)
        return (*scopes, "local") if self.local_settings else scopes

    def settings_path(self, scope: str, project_dir: StrPath, home: StrPath,
                      environ: Mapping[str, str] | None = None) -> Path:
        """The settings file ``install`` edits for ``scope`` (``project``, ``user`` or
        ``local``): the user one in the harness's user folder
        (:meth:`supervisor._harnesses.Harness.user_folder`: ``$CODEX_HOME/hooks.json``,
        else ``home/.codex/hooks.json``; ``environ``: ``os.environ`` when None).

        Raises:
            ValueError: the harness has no file for that scope (Grok reads user settings only).
        """
        from pathlib import Path  # install, uninstall and doctor: not on a hook path

        if scope == "project":
            if self.project_settings is None:
                raise ValueError(f"{self.title} reads hooks from user settings only; use --scope user")
            return Path(project_dir, self.project_settings)
        if scope == "user":
            import os

            return Path(self.row.user_file(os.fspath(home), environ))
        if scope == "local" and self.local_settings is not None:
            return Path(project_dir, self.local_settings)
        raise ValueError(f"{self.title} has no {scope!r} settings file "
                         f"(scopes: {', '.join(self.scopes)})")

    def timeout_value(self, seconds: float) -> int:
        """``seconds`` in this harness's timeout unit, as the int the settings file holds."""
        return int(round(seconds * self.timeout_scale))

    def timeout_seconds(self, value: float) -> float:
        """A registered timeout value converted back to seconds."""
        return float(value) / self.timeout_scale

    @property
    def compact_event(self) -> str | None:
        """The pre-compaction event registered as ``--event pre-compact``, or None."""
        return self.row.compact_event if self.row.kind == "hook" else None

    @property
    def resume_event(self) -> str | None:
        """A resumed session's own event (Cline ``TaskResume``), or None."""
        return self.row.resume_event

    @property
    def hook_file_events(self) -> tuple[str, ...]:
        """Every event this harness may have a registration of ours for, in order."""
        return tuple(e for e in (self.session_event, self.resume_event, self.prompt_event,
                                 self.post_tool_event, self.compact_event) if e)

    @property
    def prompt_may_start(self) -> bool:
        """The per-prompt hook may deliver an armed start (a whole digest, or the re-emit after
        a compaction its transcript traces: the row's ``compact_trace``), so it is registered
        with the session start's timeout, not the short per-event one."""
        return bool(self.prompt_event and (self.start_armed or self.row.compact_trace or (
            self.compact_event and not self.compact_refires)))

    def event_name(self, kind: str) -> str:
        """The ``hookEventName`` for output of ``kind`` (digest, reemit, nudge, prompt, post-tool)."""
        if kind == "prompt" and self.prompt_event:
            return self.prompt_event
        if kind == "post-tool" and self.post_tool_event:
            return self.post_tool_event
        return self.session_event
