"""Cursor (``cursor-agent`` CLI and IDE; DOC only: https://cursor.com/docs/hooks).

- Registration: ``.cursor/hooks.json`` (project; needs a trusted workspace) or
  ``~/.cursor/hooks.json``: ``{"version": 1, "hooks": {"sessionStart": [{"command": C,
  "timeout": S}]}}``. Timeout in seconds ("platform default" otherwise).
- Payload has no ``source``: the registration passes ``--source startup``.
- Output: ``{"additional_context": T}`` only, added to the initial system context.
  sessionStart is fire-and-forget. No prompt hook can add context (``beforeSubmitPrompt``
  output has no context field), and no compaction re-fire.
"""

from __future__ import annotations

from .._harnesses import BY_NAME
from ._base import Adapter

ADAPTER = Adapter(
    row=BY_NAME["cursor"],
    shape="cursor",
    envelope="cursor",
    inline_cap=16_000,
    extra_args=("--source", "startup"),
    project_dir_env="CURSOR_PROJECT_DIR",
    next_steps=(
        "Cursor: project hooks run only in a trusted workspace: open the project in Cursor "
        "and trust it (Workspace Trust).",
    ),
    caveats=(
        "no source in the payload: every session start is treated as startup",
        "sessionStart is fire-and-forget: the first turn may start before the digest ends",
        "no compaction re-fire: after compaction run `supervise digest` by hand",
    ),
)
