"""Qwen Code (observed with 0.24.4; DOC package ``bundled/qc-helper/docs/features/hooks.md``).

- Registration: ``.qwen/settings.json`` (project; needs a trusted folder) or
  ``~/.qwen/settings.json``, the Claude group shape. Timeout in **milliseconds** (default 60000).
- Output: ``hookSpecificOutput.additionalContext``. Sources startup, resume, clear, compact
  (and ``branch``). LAB 0.24.4: SessionStart fires in one-shot mode too (``qwen -p``; 0.15.10
  fired it only interactively) and its context reaches the request; ``-c`` resends the earlier
  turns without their hook context (a resume is served as a re-emit: the row's
  ``resume_drops_context``). ``PostToolUse`` (tools ``read_file``, ``edit``, ``write_file``;
  payload ``tool_name``, ``tool_input.file_path``, ``cwd``): its context is appended to the
  tool's result for the model, so nested ``AGENTS.md`` files and path-scoped rules arrive on
  a read.
"""

from __future__ import annotations

from .._harnesses import BY_NAME
from ._base import Adapter

ADAPTER = Adapter(
    row=BY_NAME["qwen"],
    shape="groups",
    # a matcher starting with ^ is a regular expression in Qwen (0.24.4 ``matchesHookPattern``)
    post_tool_matcher=f"^({'|'.join(BY_NAME['qwen'].file_tools)})$",
    envelope="hook-specific",
    default_timeout=60.0,
    inline_cap=16_000,
    project_dir_env="QWEN_PROJECT_DIR",
    next_steps=(
        "Qwen Code: project hooks run only in a trusted folder: trust this folder when Qwen asks.",
    ),
    caveats=(
        "no compaction was driven offline: the compact source is documented, not proven",
    ),
)
