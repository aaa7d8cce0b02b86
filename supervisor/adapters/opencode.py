"""OpenCode (observed with 1.18.33; DOC https://opencode.ai/docs/plugins).

- No hook command: OpenCode loads ``.opencode/plugins/*.{ts,js}`` (project) and
  ``~/.config/opencode/plugins/`` (user; ``XDG_CONFIG_HOME`` moves it) in-process (Bun).
- ``experimental.chat.system.transform`` (input ``{sessionID, model}``, ``output.system``) runs
  before every model call, internal ones included (title generation, compaction summary);
  its text is never stored, so it survives compaction and a continued session
  (``opencode run -c`` emits no ``session.created``) needs it again.
- ``experimental.session.compacting`` then the ``session.compacted`` event mark a compaction.
- So the bridge (``supervisor/bridges/core.mjs``) runs ``supervise bridge`` once per session
  per process and again as a re-emit after compaction; see ``docs/harnesses/opencode.md``.
"""

from __future__ import annotations

from .._harnesses import BY_NAME
from ._extension import Bridge

BRIDGE = Bridge(
    row=BY_NAME["opencode"],
    package_entry="opencode/watchkeeper.ts",
    core_dir="watchkeeper",
    next_steps=(
        "OpenCode: nothing else to do; project plugins load at startup. The first model call "
        "of a session waits for the digest, at most the budget.",
    ),
    caveats=(
        "the plugin hook experimental.chat.system.transform is marked experimental by OpenCode",
        "a model call waits for a running digest at most until the budget written in "
        "watchkeeper.json",
    ),
)
