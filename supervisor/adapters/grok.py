"""Grok CLI (superagent-ai/grok-cli successor, source snapshot; ``@vibe-kit/grok-cli`` 0.0.34
has no hooks at all).

- Registration: **only** ``~/.grok/user-settings.json`` (project ``.grok/settings.json`` hooks
  are deliberately ignored), Claude-like group shape, timeout in seconds (default 30).
- ``agent.ts`` fires SessionStart and discards its output, so nothing we print reaches the
  model: the nudge tier. The hook prints the one-line nudge as plain text; the model sees it
  only where Grok shows hook output to the user.
"""

from __future__ import annotations

from .._harnesses import BY_NAME
from ._base import Adapter

ADAPTER = Adapter(
    row=BY_NAME["grok"],
    shape="groups",
    envelope="plain",
    default_timeout=30.0,
    inline_cap=2_000,
    project_dir_env="GROK_WORKSPACE_ROOT",
    next_steps=(
        "Grok CLI: hooks are read from ~/.grok/user-settings.json only (installed there); "
        "Grok discards SessionStart output, so start each session by running `supervise digest --session-start`.",
    ),
    caveats=(
        "SessionStart output never reaches the model (nudge tier)",
        "project-level hooks are ignored by Grok",
    ),
)
