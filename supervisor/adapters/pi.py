"""Pi coding agent (observed with 0.73.1; DOC package ``docs/extensions.md``).

- No hook command: Pi auto-discovers ``.pi/extensions/*/index.ts`` (project, no trust prompt
  in ``-p`` and RPC modes) and ``~/.pi/agent/extensions/*/index.ts`` (user;
  ``PI_CODING_AGENT_DIR`` overrides ``~/.pi/agent``), loaded in-process through jiti.
- Events: ``session_start`` (``reason`` startup, reload, new, resume, fork; LAB: ``pi -c`` and
  ``pi --fork FILE`` report ``startup``), ``before_agent_start`` (can return a persistent
  message, sent as an extra user message), ``session_compact`` (session_start is not
  re-fired), ``session_shutdown``.
- So the bridge (``supervisor/bridges/core.mjs``) runs ``supervise bridge`` per session event
  and delivers at the next ``before_agent_start``; see ``docs/harnesses/pi.md``.
"""

from __future__ import annotations

from .._harnesses import BY_NAME
from ._extension import Bridge

BRIDGE = Bridge(
    row=BY_NAME["pi"],
    package_entry="pi/index.ts",
    core_dir=".",
    next_steps=(
        "Pi: nothing else to do; project extensions load without a prompt. The digest reaches "
        "the model with your first prompt of each session.",
    ),
    caveats=(
        "the digest is delivered with the first prompt (before_agent_start), not at launch",
        "/reload starts no digest; /new re-emits (a context reset in the same Pi process)",
    ),
)
