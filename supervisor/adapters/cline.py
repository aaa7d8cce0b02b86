"""Cline CLI (``cline`` 3.0.65 on ``@cline/core``; observed offline with an OpenAI-compatible
provider, ``cline auth -p openai -b URL``).

- Registration: one executable file per event, named after it, in ``.clinerules/hooks/``
  (project; ``.cline/hooks/`` too) or ``~/.cline/hooks/`` (user); no settings file. The file
  gets the payload on stdin and may print ``{"contextModification": T}`` (or ``context``).
- What reaches the model (LAB, and ``@cline/core`` ``hook-file-hooks``): only the tool hooks'
  output, ``PreToolUse`` and ``PostToolUse`` (awaited; their context is added as a user
  message ``<hook_context source="PreToolUse" ...>`` after the tool result). ``TaskStart`` and
  ``TaskResume`` run fire-and-forget with their output ignored (the host never sets
  ``blockingRunStartHooks``), ``UserPromptSubmit`` too, and ``PreCompact`` is mapped to no
  event at all (it never runs). So ``TaskStart``/``TaskResume`` arm the start and the first
  ``PreToolUse`` of the task delivers it (a task without a tool call gets no digest: the
  adapter's ``limits``).
- Payload: ``taskId``, ``sessionContext.rootSessionId`` (our session id: ``cline --id``
  resumes a session with a new task id under it), ``workspaceRoots`` (no ``cwd``),
  ``hookName`` (``agent_start``, ``tool_call``, ...). Hooks run in the ``cline`` process, or
  in Cline's hub daemon (``cline --cline-hub-daemon``) once one is up (LAB 3.0.65).
- ``cline --id SESSION`` (interactive) fires ``TaskStart``, not ``TaskResume``: the CLI sets
  ``CLINE_HOOK_AGENT_RESUME=1`` in its own environment, which the hub daemon running the
  hooks never sees. A TaskStart of a session whose start completed is armed as a resume.
- Tool hooks time out after 120 s (``toolCallTimeoutMs``; a file registers none).
- Cline loads ``AGENTS.md`` of the workspace folder, ``.clinerules/`` and ``.cline/rules/``
  itself (LAB: not the AGENTS.md of folders above it).
"""

from __future__ import annotations

from .._harnesses import BY_NAME
from ._base import Adapter

ADAPTER = Adapter(
    row=BY_NAME["cline"],
    shape="files",
    start_armed=True,
    envelope="cline",
    default_timeout=120.0,
    inline_cap=16_000,
    next_steps=(
        "Cline CLI: nothing else to do; the hook files in .clinerules/hooks/ run in `cline` "
        "and the TUI. The digest arrives with the first tool call of a task (Cline drops "
        "TaskStart's output).",
    ),
    limits=(
        "a task in which the model calls no tool gets no digest: Cline 3.0.65 uses the "
        "output of PreToolUse and PostToolUse only (TaskStart, TaskResume and "
        "UserPromptSubmit run without their output being read); ask the model to run "
        "`supervise digest --session-start`, or to call a tool first",
        "compaction: Cline 3.0.65 runs no PreCompact (the file maps to no event) and fires "
        "nothing after a compaction; run `supervise digest --session-start` after one",
    ),
)
