"""Gemini CLI (observed with 0.61.0; DOC google-gemini/gemini-cli ``docs/hooks/reference.md``).

- Registration: ``.gemini/settings.json`` (project; needs a trusted folder) or
  ``~/.gemini/settings.json``: ``{"hooks": {"SessionStart": [{"matcher": "", "hooks":
  [{"type": "command", "command": C, "timeout": MS}]}]}}``. Timeout in **milliseconds**.
- Output: ``hookSpecificOutput.additionalContext`` JSON only on stdout; non-interactive it is
  prepended to the prompt as ``<hook_context>``. ``BeforeAgent`` (per prompt) takes the same.
- Sources startup, resume, clear; no compact source (``PreCompress`` only observes).
- Extension: ``plugins/gemini`` (``gemini-extension.json``, ``hooks/hooks.json``), linked at user
  level with ``gemini extensions link DIR --consent`` into ``~/.gemini/extensions/watchkeeper/``
  (LAB 0.61.0: its SessionStart hook's context reaches the model).
"""

from __future__ import annotations

from .._harnesses import BY_NAME
from ._base import Adapter

ADAPTER = Adapter(
    row=BY_NAME["gemini"],
    shape="groups",
    session_matcher="",
    envelope="hook-specific",
    default_timeout=60.0,
    inline_cap=16_000,
    project_dir_env="GEMINI_PROJECT_DIR",
    next_steps=(
        "Gemini CLI: project settings load only in a trusted folder: trust this folder when "
        "Gemini asks, or turn folder trust off (security.folderTrust.enabled = false).",
    ),
    caveats=(
        "no compact source: after compression run `supervise digest` by hand",
        "stdout must hold the JSON alone",
    ),
)
