"""Qwen Code (0.15.10; DOC package ``bundled/qc-helper/docs/features/hooks.md``).

- Registration: ``.qwen/settings.json`` (project; needs a trusted folder) or
  ``~/.qwen/settings.json``, the Claude group shape. Timeout in **milliseconds** (default 60000).
- Output: ``hookSpecificOutput.additionalContext``. Sources startup, resume, clear, compact
  (and ``branch``). LAB: SessionStart did not fire in one-shot mode (only from the interactive
  UI, ACP, ``/branch`` and compression).
"""

from __future__ import annotations

from .._harnesses import BY_NAME
from ._base import Adapter

ADAPTER = Adapter(
    row=BY_NAME["qwen"],
    shape="groups",
    envelope="hook-specific",
    default_timeout=60.0,
    inline_cap=16_000,
    project_dir_env="QWEN_PROJECT_DIR",
    next_steps=(
        "Qwen Code: project hooks run only in a trusted folder: trust this folder when Qwen asks.",
    ),
    caveats=(
        "SessionStart does not fire in one-shot (`qwen \"prompt\"`) mode, only interactively",
    ),
)
