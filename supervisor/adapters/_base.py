"""What an adapter knows about one harness: files, registration shape, units, envelope, caveats.

An :class:`Adapter` is pure data (a frozen :func:`~supervisor._record.record`, no I/O; not a
dataclass nor a ``NamedTuple``, whose ``dataclasses`` and ``typing`` imports cost the hook's hot
path several milliseconds). The facts each adapter records are the ones
observed with the real CLIs offline, or documented, in the brief's ``harnesses.md``.
"""

from __future__ import annotations

from .._record import record

TYPE_CHECKING = False  # not `typing.TYPE_CHECKING`: importing typing costs the hot path
if TYPE_CHECKING:
    from typing import Literal

    from pathlib import Path

    from _typeshed import StrPath

    Envelope = Literal["hook-specific", "cursor", "plain"]
    """How hook output is wrapped on stdout.

    ``hook-specific``: ``{"hookSpecificOutput": {"hookEventName": E, "additionalContext": T}}``
    (Claude, Codex, Gemini, Qwen). ``cursor``: ``{"additional_context": T}``. ``plain``: the text.
    """

    Shape = Literal["groups", "cursor"]
    """Registration JSON shape.

    ``groups`` (Claude and everything modelled on it):
    ``{"hooks": {EVENT: [{"matcher": M, "hooks": [{"type": "command", "command": C, "timeout": N}]}]}}``.
    ``cursor``: ``{"version": 1, "hooks": {EVENT: [{"command": C, "timeout": N}]}}``.
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
    """One harness's hook contract.

    Attributes:
        name: our short name (``claude``, ``codex``, ...), as in ``supervise hook NAME``.
        title: human name for messages.
        project_settings: settings file relative to the project root, or None when the harness
            reads project hooks from nowhere we can use (Grok).
        user_settings: settings file relative to ``$HOME``.
        local_settings: a per-user, uncommitted settings file relative to the project root
            (``--scope local``: Claude's ``.claude/settings.local.json``), or None.
        shape: registration JSON shape (see :data:`Shape`).
        session_event: the event name for session start in the settings file.
        prompt_event: per-prompt event that can add model context, or None.
        post_tool_event: event for after a tool ran (Claude ``PostToolUse``), or None.
        post_tool_matcher: matcher for it (the tool name, ``Read``).
        session_matcher: matcher written for ``session_event`` (None: key omitted = all sources).
        timeout_scale: registered timeout units per second (1 = seconds, 1000 = milliseconds).
        inline_cap: default inline cap in characters (``inline_cap`` in the config overrides).
        envelope: stdout envelope (see :data:`Envelope`).
        tier: ``run`` or ``nudge`` (see :data:`Tier`).
        extra_args: arguments added to the registered command (Cursor: ``--source startup``,
            its payload has no source).
        project_dir_env: environment variable holding the project root, or None.
        next_steps: what the user must do beyond the file for the hook to run.
        caveats: known limits, for ``doctor`` and the docs.
        standdown_env: environment variables meaning "another harness is running this
            registration" (Grok also loads ``.claude/settings.json``).
        default_timeout: the harness's own hook timeout in seconds when none is registered
            (None: not documented).
    """

    name: str
    title: str
    project_settings: str | None
    user_settings: str
    shape: Shape
    session_event: str
    prompt_event: str | None
    envelope: Envelope
    tier: Tier
    timeout_scale: int = 1
    inline_cap: int = 16_000
    post_tool_event: str | None = None
    post_tool_matcher: str | None = None
    session_matcher: str | None = None
    extra_args: tuple[str, ...] = ()
    project_dir_env: str | None = None
    next_steps: tuple[str, ...] = ()
    caveats: tuple[str, ...] = ()
    standdown_env: tuple[str, ...] = ()
    default_timeout: float | None = None
    local_settings: str | None = None

    @property
    def scopes(self) -> tuple[str, ...]:
        """The ``--scope`` values ``install`` accepts for this harness."""
        scopes = ("project", "user") if self.project_settings else ("user",)
        return (*scopes, "local") if self.local_settings else scopes

    def settings_path(self, scope: str, project_dir: StrPath, home: StrPath) -> Path:
        """The settings file for ``scope`` (``project`` or ``user``).

        Raises:
            ValueError: the harness has no file for that scope (Grok reads user settings only).
        """
        from pathlib import Path  # install, uninstall and doctor: not on a hook path

        if scope == "project":
            if self.project_settings is None:
                raise ValueError(f"{self.title} reads hooks from user settings only; use --scope user")
            return Path(project_dir, self.project_settings)
        if scope == "user":
            return Path(home, self.user_settings)
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

    def event_name(self, kind: str) -> str:
        """The ``hookEventName`` for output of ``kind`` (digest, reemit, nudge, prompt, post-tool)."""
        if kind == "prompt" and self.prompt_event:
            return self.prompt_event
        if kind == "post-tool" and self.post_tool_event:
            return self.post_tool_event
        return self.session_event
