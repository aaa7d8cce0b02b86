"""GitHub Copilot CLI (observed with ``@github/copilot`` 1.0.102 offline, BYOK
``COPILOT_PROVIDER_BASE_URL``; DOC docs.github.com ``copilot-cli-reference/cli-hooks-reference``).

- Registration: a file of its own in ``.github/hooks/`` (project; loaded once the folder is
  trusted) or ``~/.copilot/hooks/`` (user), ``{"version": 1, "hooks": {EVENT: [{"type":
  "command", "bash": C, "timeoutSec": S}]}}``. Events in PascalCase get Claude-style snake_case
  payloads (``session_id``, ``cwd``, ``hook_event_name``, ``source``); camelCase ones
  (``sessionStart``) get ``sessionId``. We register PascalCase. Timeout in seconds (default 30).
- Output: the top-level ``{"additionalContext": T}`` alone (``hookSpecificOutput`` is ignored,
  LAB). SessionStart's reaches the model as a user message before the first prompt (LAB: the
  copilot-cli #2142 report of 1.0.8 no longer holds); it is held by the process, never stored
  in the session: a resumed process sends only what its own SessionStart printed, so a resume
  gets the re-emit (the row's ``resume_drops_context``). ``UserPromptSubmit``'s is appended to
  the prompt inside ``<system_reminder>`` and stored.
- Sources ``new`` (a new session), ``startup``, ``resume`` (``--resume``/``--continue``).
- ``PreCompact`` (payload ``trigger``, ``custom_instructions``) fires on ``/compact`` (``-p``,
  ``--acp``, the TUI); its output is not in the summary request, the compaction drops the
  SessionStart context from the history (LAB ``--acp``), and no SessionStart follows, so it
  arms a re-emit that the next ``UserPromptSubmit`` of the same process delivers once.
"""

from __future__ import annotations

from .._harnesses import BY_NAME
from ._base import Adapter

ADAPTER = Adapter(
    row=BY_NAME["copilot"],
    shape="copilot",
    compact_refires=False,
    envelope="copilot",
    default_timeout=30.0,
    inline_cap=16_000,
    project_dir_env="COPILOT_PROJECT_DIR",
    next_steps=(
        "GitHub Copilot CLI: repository hooks load only in a trusted folder: start `copilot` "
        "here and trust the folder (in -p mode: COPILOT_ALLOW_ALL=true or --trust-folder).",
    ),
    caveats=(
        "the SessionStart context is held by the Copilot process, not stored in the session: "
        "a resumed session gets it again (a re-emit after a proven start)",
    ),
)
