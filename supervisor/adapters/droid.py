"""Factory Droid (``droid`` from ``@factory/cli`` 0.225.1; observed with its 0.225.2 binary offline,
BYOK ``customModels`` in ``~/.factory/settings.json``; DOC docs.factory.ai ``reference/hooks-reference``).

- Registration: ``.factory/settings.json`` (project), ``.factory/settings.local.json`` (local,
  uncommitted) or ``~/.factory/settings.json`` (user): Claude's group shape and event names
  (``SessionStart``, ``UserPromptSubmit``, ``PostToolUse``, ``PreCompact``). Timeout in seconds.
- Payload: Claude's (``session_id``, ``transcript_path``, ``cwd``, ``hook_event_name``,
  ``source``, ``permission_mode``); env ``FACTORY_PROJECT_DIR``, ``DROID_PROJECT_DIR`` and
  ``CLAUDE_PROJECT_DIR``.
- Output: ``hookSpecificOutput.additionalContext``; SessionStart's reaches the model as a user
  message after the system prompt (LAB, ``droid exec``).
- Sources startup, resume, clear, compact (DOC), routed as Claude's. ``droid exec -s ID``
  (resume) and the multi-turn ``--input-format stream-json`` create the session on Factory's
  servers (``getaddrinfo ENOTFOUND api.factory.ai`` offline, no model request), so resume,
  compaction and a second prompt were not run here; one ``droid exec`` prompt fires
  SessionStart, PreToolUse, Stop and SessionEnd, not UserPromptSubmit (LAB).
"""

from __future__ import annotations

from .._harnesses import BY_NAME
from ._base import Adapter

ADAPTER = Adapter(
    row=BY_NAME["droid"],
    shape="groups",
    envelope="hook-specific",
    default_timeout=60.0,
    inline_cap=16_000,
    project_dir_env="FACTORY_PROJECT_DIR",
    next_steps=(
        "Factory Droid: nothing else to do; project hooks in .factory/settings.json run in "
        "`droid` and `droid exec`.",
    ),
    unproven=(
        "resume and compaction: `droid exec -s ID` needs Factory's servers, so SessionStart "
        "with source resume or compact (routed by its documented source: the nudge, the "
        "re-emit) was not run offline",
        "the per-prompt hook (deferred results, changed instruction files): `droid exec` "
        "fires no UserPromptSubmit and a multi-turn session needs Factory's servers",
    ),
)
