"""The harness table: one row per harness, the one home of every fact the code keys by harness.

Every list of harnesses in the package derives from :data:`ROWS`: the hook-command registry
(``supervisor.adapters.NAMES``), the bridges (``supervisor.bridges``), the process and npm
names the ancestry walk matches (``supervisor.session._ancestry``), the values of a stage's
``when.harness`` (``supervisor.config._plan``), the instruction loaders (``stages/instructions``),
the labels in messages, the hook's help text, and the early-exit flag ``install`` writes into
the per-event command for the shell fast path (``supervisor/hook-fast.sh``). Adding a harness
is one row here plus its adapter module (``supervisor/adapters/<name>.py``: envelope, shape,
caps, caveats; a bridge's files in ``supervisor/bridges/``).

Stdlib only and on the hook's hot path: the rows are frozen records
(:func:`supervisor._record.record`), built at import; no I/O. The facts are the ones observed
with the real CLIs against the offline model, or documented (``docs/harnesses/<name>.md``).
"""

from __future__ import annotations

from ._record import record

TYPE_CHECKING = False  # not `typing.TYPE_CHECKING`: importing typing costs the hot path
if TYPE_CHECKING:
    from typing import Literal

    Kind = Literal["hook", "nudge", "bridge", "mcp"]
    Unit = Literal["s", "ms"]

KINDS: tuple[str, ...] = ("hook", "nudge", "bridge", "mcp")
"""How a harness reaches us. ``hook``: it runs a registered hook command and passes its output
to the model (``supervise hook NAME``). ``nudge``: it runs the hook command but drops its
output, so the hook prints only the one-line nudge. ``bridge``: it loads an extension file of
ours in-process (``supervisor/bridges/``), which runs ``supervise bridge``. ``mcp``: an MCP
client that reads us as a server (``supervise mcp``; no row of this kind yet)."""


@record
class Harness:
    """One harness: how it reaches us and what it does by itself.

    Attributes:
        name: our short name (``supervise hook NAME``, ``when.harness``, ``SUPERVISE_HARNESS``).
        label: its human name in messages (``Claude Code``).
        kind: one of :data:`KINDS`.
        processes: executable names its process runs under (``cursor-agent``).
        packages: npm packages whose entry script a ``node``/``bun`` process runs for it.
        project: the registration file relative to the project root (a settings file for a
            hook, the extension entry for a bridge), or None (Grok reads user settings only).
        user: the registration file relative to the user folder (:attr:`user_dir`).
        user_dir: the harness's user folder relative to the home folder (``.codex``).
        user_dir_env: an environment variable that names the user folder instead
            (``CODEX_HOME``, ``PI_CODING_AGENT_DIR``), or None.
        local: a per-user, uncommitted file relative to the project root (Claude's
            ``.claude/settings.local.json``), or None.
        session_event: the event a session starts with (a settings key or an extension event).
        prompt_event: the per-prompt event that can add model context, or None.
        post_tool_event: the event after a tool ran that can add model context, or None.
        compact_event: a separate compaction event (extensions; hooks get ``source`` compact).
        loads: the rule of ``stages/instructions/discover.py`` naming the instruction files
            the harness loads by itself ("" = none: the digest supplies the whole chain).
        imports: it expands ``@imports`` in the files it loads itself.
        nested_on_demand: it gets nested ``AGENTS.md`` files on demand (a read hook of ours
            or its own loader), so the digest does not list them.
        early_exit: it was proved with its real CLI to ignore a per-event hook that leaves
            without reading its payload (``tests/e2e/test_early_exit.py``): the fast path
            skips the drain.
        timeout_unit: the unit of a registered hook timeout, ``s`` or ``ms``.
        plugin: our harness plugin as the harness names it, or None: Claude Code's
            ``plugin@marketplace`` key of ``enabledPlugins`` (``plugins/claude``), Gemini CLI's
            extension folder name (``plugins/gemini``); :mod:`supervisor.commands._plugins`.
    """

    name: str
    label: str
    kind: Kind
    processes: tuple[str, ...] = ()
    packages: tuple[str, ...] = ()
    project: str | None = None
    user: str = ""
    user_dir: str = ""
    user_dir_env: str | None = None
    local: str | None = None
    session_event: str = "SessionStart"
    prompt_event: str | None = None
    post_tool_event: str | None = None
    compact_event: str | None = None
    loads: str = ""
    imports: bool = False
    nested_on_demand: bool = False
    early_exit: bool = False
    timeout_unit: Unit = "s"
    plugin: str | None = None

    @property
    def timeout_scale(self) -> int:
        """Registered timeout units per second (1 or 1000)."""
        return 1000 if self.timeout_unit == "ms" else 1

    @property
    def user_default(self) -> str:
        """:attr:`user` relative to the home folder when :attr:`user_dir_env` is unset."""
        return f"{self.user_dir}/{self.user}" if self.user_dir else self.user


ROWS: tuple[Harness, ...] = (
    Harness("claude", "Claude Code", "hook", processes=("claude",),
            packages=("@anthropic-ai/claude-code",), project=".claude/settings.json",
            user="settings.json", user_dir=".claude", local=".claude/settings.local.json",
            prompt_event="UserPromptSubmit", post_tool_event="PostToolUse", loads="claude",
            imports=True, nested_on_demand=True, early_exit=True,
            plugin="watchkeeper@watchkeeper"),
    Harness("codex", "Codex CLI", "hook", processes=("codex",), packages=("@openai/codex",),
            project=".codex/hooks.json", user="hooks.json", user_dir=".codex",
            user_dir_env="CODEX_HOME", prompt_event="UserPromptSubmit", loads="codex",
            early_exit=True),
    Harness("cursor", "Cursor", "hook", processes=("cursor-agent",),
            project=".cursor/hooks.json", user="hooks.json", user_dir=".cursor",
            session_event="sessionStart", loads="cursor", nested_on_demand=True),
    Harness("gemini", "Gemini CLI", "hook", processes=("gemini",),
            packages=("@google/gemini-cli",), project=".gemini/settings.json",
            user="settings.json", user_dir=".gemini", prompt_event="BeforeAgent",
            loads="gemini", imports=True, early_exit=True, timeout_unit="ms",
            plugin="watchkeeper"),
    Harness("qwen", "Qwen Code", "hook", processes=("qwen",), packages=("@qwen-code/qwen-code",),
            project=".qwen/settings.json", user="settings.json", user_dir=".qwen",
            prompt_event="UserPromptSubmit", loads="qwen", imports=True, timeout_unit="ms"),
    Harness("grok", "Grok CLI", "nudge", processes=("grok",),
            packages=("@vibe-kit/grok-cli", "grok-dev"), user="user-settings.json",
            user_dir=".grok", loads="grok"),
    Harness("pi", "Pi", "bridge", processes=("pi",), packages=("@mariozechner/pi-coding-agent",),
            project=".pi/extensions/watchkeeper/index.ts", user="extensions/watchkeeper/index.ts",
            user_dir=".pi/agent", user_dir_env="PI_CODING_AGENT_DIR",
            session_event="session_start", prompt_event="before_agent_start",
            post_tool_event="tool_result", compact_event="session_compact", loads="pi"),
    Harness("opencode", "OpenCode", "bridge", processes=("opencode",), packages=("opencode-ai",),
            project=".opencode/plugins/watchkeeper.ts", user="opencode/plugins/watchkeeper.ts",
            user_dir=".config", user_dir_env="XDG_CONFIG_HOME", session_event="session.created",
            prompt_event="experimental.chat.system.transform",
            compact_event="session.compacted", loads="opencode", nested_on_demand=True),
)
"""The harnesses, in the order every listing shows them (hook commands first)."""

BY_NAME: dict[str, Harness] = {row.name: row for row in ROWS}
"""``{name: row}``."""


def names(*kinds: str) -> tuple[str, ...]:
    """The names of the rows of ``kinds`` (none given: every row), in table order."""
    return tuple(row.name for row in ROWS if not kinds or row.kind in kinds)


HOOKS: tuple[str, ...] = names("hook", "nudge")
"""The harnesses that run a hook command (``supervise hook NAME``)."""
BRIDGES: tuple[str, ...] = names("bridge")
"""The harnesses that load an extension bridge of ours."""


def label(name: str, default: str = "") -> str:
    """The label of harness ``name``; ``default`` (else ``name``) for a name not in the table."""
    row = BY_NAME.get(name)
    return row.label if row else (default or name)
