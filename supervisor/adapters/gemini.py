"""Gemini CLI (observed with 0.61.0; DOC google-gemini/gemini-cli ``docs/hooks/reference.md``).

- Registration: ``.gemini/settings.json`` (project; needs a trusted folder) or
  ``~/.gemini/settings.json``: ``{"hooks": {"SessionStart": [{"matcher": "", "hooks":
  [{"type": "command", "command": C, "timeout": MS}]}]}}``. Timeout in **milliseconds**.
- Output: ``hookSpecificOutput.additionalContext`` JSON only on stdout; non-interactive it is
  prepended to the prompt as ``<hook_context>``. ``BeforeAgent`` (per prompt) takes the same;
  so does ``AfterTool`` (0.61.0 ``executeToolWithHooks``: its context is appended to the tool's
  result for the model as ``<hook_context>``, ``<`` and ``>`` escaped), registered for the file
  tools (``read_file``, ``replace``, ``write_file``; payload ``tool_name``, ``tool_input``
  ``file_path``, ``cwd``): nested ``AGENTS.md`` files and path-scoped rules on a read.
- Sources startup, resume, clear; no compact source, and ``PreCompress`` fires on every turn
  (before the threshold check; payload ``trigger`` only). A real compression appends
  ``{"$set":{"sessionId":...}}`` to the transcript (the row's ``compact_trace``): the
  ``BeforeAgent`` after it re-emits, once (:mod:`supervisor.session._armed`).
- Extension: the repository's root (``gemini-extension.json``, ``hooks/hooks.json``), linked at user
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
    # Gemini matches a tool matcher as a regular expression (0.61.0 ``matchesToolName``)
    post_tool_matcher=f"^({'|'.join(BY_NAME['gemini'].file_tools)})$",
    envelope="hook-specific",
    default_timeout=60.0,
    inline_cap=16_000,
    project_dir_env="GEMINI_PROJECT_DIR",
    next_steps=(
        "Gemini CLI: project settings load only in a trusted folder: trust this folder when "
        "Gemini asks, or turn folder trust off (security.folderTrust.enabled = false).",
    ),
    caveats=(
        "no compact source: a compression is seen in the transcript and re-emitted at the "
        "next prompt (BeforeAgent)",
        "stdout must hold the JSON alone",
    ),
)
