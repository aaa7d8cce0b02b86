"""Claude Code (observed with 2.1.197; DOC https://code.claude.com/docs/en/hooks#sessionstart).

- Registration: ``.claude/settings.json`` (project) or ``~/.claude/settings.json`` (user),
  ``{"hooks": {"SessionStart": [{"hooks": [{"type": "command", "command": C, "timeout": S}]}]}}``;
  no matcher = every source (startup, resume, clear, compact). Timeout in seconds.
- Output: exit 0 with ``hookSpecificOutput.additionalContext`` JSON reaches the API as a system
  message; non-zero exits lose the context. Output over about 10,000 characters is replaced by
  a 2 KB preview and a file path (LAB: 9,937 chars inlined, 10,137 not), hence the 9,000 cap.
- ``UserPromptSubmit`` and ``PostToolUse`` take the same envelope with their own event name.
- ``PreCompact``'s plain stdout is appended to the summarisation prompt (LAB): the hook names
  the stages re-sent by the SessionStart(compact) that follows, so the summary need not
  repeat them.
- Grok and Cursor can load this file too; Grok sets ``GROK_HOOK_EVENT``.
- Plugin (DOC https://code.claude.com/docs/en/plugins-reference): ``plugins/claude`` of this
  repository, listed by its ``.claude-plugin/marketplace.json``; enabled per scope by
  ``"enabledPlugins": {"watchkeeper@watchkeeper": true}``, loaded only once
  ``claude plugin install`` put it in ``~/.claude/plugins/`` (LAB 2.1.197).
"""

from __future__ import annotations

from .._harnesses import BY_NAME
from ._base import Adapter

ADAPTER = Adapter(
    row=BY_NAME["claude"],
    shape="groups",
    post_tool_matcher="Read|Edit|MultiEdit|Write|NotebookEdit",
    precompact_to_summary=True,
    envelope="hook-specific",
    default_timeout=600.0,
    inline_cap=9_000,
    project_dir_env="CLAUDE_PROJECT_DIR",
    next_steps=(
        "Claude Code: nothing else to do; project hooks run without a trust prompt in -p mode, "
        "and interactive sessions may ask you to approve changed hooks (/hooks).",
    ),
    caveats=(
        "hook output over ~10,000 characters is shown to the model only as a 2 KB preview "
        "(the inline cap keeps the digest under it)",
        "a SessionStart text identical to one already in the transcript is not re-injected",
    ),
    standdown_env=("GROK_HOOK_EVENT", "GROK_AGENT"),
)
