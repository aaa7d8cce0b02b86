"""Codex CLI (observed with 0.171.0; DOC https://developers.openai.com/codex/hooks).

- Registration: ``.codex/hooks.json`` (project; loaded only for trusted projects) or
  ``~/.codex/hooks.json``; the same group shape as Claude. Timeout in seconds (default 600).
- Hook trust: unmanaged hooks do not run until trusted (TUI ``/hooks``), stored as
  ``[hooks.state."<path>:<event>:<group>:<handler>"] trusted_hash`` in the user ``config.toml``.
- Output: plain stdout or ``hookSpecificOutput.additionalContext``; stdout that looks like JSON
  but does not parse is an error and gives no context. No project-dir variable (payload ``cwd``).
- Sources startup, resume, clear, compact (after auto-compaction).
"""

from __future__ import annotations

from .._harnesses import BY_NAME
from ._base import Adapter

ADAPTER = Adapter(
    row=BY_NAME["codex"],
    shape="groups",
    envelope="hook-specific",
    default_timeout=600.0,
    inline_cap=16_000,
    next_steps=(
        "Codex: hooks run only once trusted: start `codex` in this project and trust the "
        "watchkeeper hooks in /hooks; the project itself must be trusted too "
        "([projects.\"<path>\"] trust_level = \"trusted\" in ~/.codex/config.toml).",
    ),
    caveats=(
        "unmanaged hooks silently do not run until trusted in /hooks",
        "project .codex/ layers load only for trusted projects",
    ),
)
