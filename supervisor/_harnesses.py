"""The harness table: one row per harness, the one home of every fact the code keys by harness.

Every list of harnesses in the package derives from :data:`ROWS`: the hook-command registry
(``supervisor.adapters.NAMES``), the bridges (``supervisor.bridges``), the process and npm
names the ancestry walk matches (``supervisor.session._ancestry``), the values of a stage's
``when.harness`` (``supervisor.config._plan``), the instruction loaders (``stages/instructions``),
the labels in messages, the hook's help text, every harness's user folder
(:meth:`Harness.user_folder`: ``install``, ``doctor``, the bridges, the MCP clients' files,
the plugin packages, the instruction loaders), and the early-exit flag ``install`` writes into
the per-event command for the shell fast path (``supervisor/hook-fast.sh``), the versions the
end-to-end tests pin (``scripts/install-harnesses.sh``: ``newest`` and the ``floor`` set).
Adding a harness
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

    from collections.abc import Mapping
    from typing import overload

    Kind = Literal["hook", "nudge", "bridge", "mcp"]
    Unit = Literal["s", "ms"]
    EnvForm = Literal["folder", "tilde", "absolute", "home"]

KINDS: tuple[str, ...] = ("hook", "nudge", "bridge", "mcp")
"""How a harness reaches us. ``hook``: it runs a registered hook command and passes its output
to the model (``supervise hook NAME``). ``nudge``: it runs the hook command but drops its
output, so the hook prints only the one-line nudge. ``bridge``: it loads an extension file of
ours in-process (``supervisor/bridges/``), which runs ``supervise bridge``. ``mcp``: an MCP
client that reads us as a server only (``supervise mcp``; goose). A row of any kind that
reads MCP servers names its configuration files in :attr:`Harness.mcp_files`."""


@record
class Era:
    """What changed in a harness from version :attr:`since` on (until a later era).

    Attributes:
        since: the first version with this behaviour, dotted digits (``2.1.281``).
        loads: the loader rule for the instruction files it loads itself from then on
            (see :attr:`Harness.loads`).
        proof: how it was proved (the real CLI, the mode, the test).
    """

    since: str
    loads: str
    proof: str = ""


def version_key(version: str) -> tuple[int, ...]:
    """``"2.1.281"`` as ``(2, 1, 281)`` for comparing. The key ends at the first character
    that is not a digit (``"1.2.3-beta"`` is ``(1, 2, 3)``); ``""`` and text without a leading
    number give ``()``, which sorts before every version."""
    key: list[int] = []
    for part in version.split("."):
        digits = ""
        for ch in part:
            if not ch.isdigit():
                break
            digits += ch
        if not digits:
            break
        key.append(int(digits))
        if len(digits) != len(part):
            break
    return tuple(key)


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
            (``CODEX_HOME``, ``PI_CODING_AGENT_DIR``), or None. Empty counts as unset (every
            harness of the table: Codex, Copilot CLI 1.0.102, Pi, OpenCode, goose, Gemini).
        user_dir_env_form: how the harness reads that variable (:meth:`user_folder`):
            ``folder``, as written, a relative one from its working directory (Codex
            0.171.0's ``find_codex_home``: ``CODEX_HOME=~/c`` is ``./~/c``; Copilot CLI
            1.0.102 wrote ``./~/cop``; OpenCode 1.18.33's ``xdg-basedir``); ``tilde``, a
            leading ``~`` or ``~/`` replaced by the home folder first (Pi 0.73.1's
            ``expandTildePath``; ``~user`` stays as written); ``absolute``, a relative value
            ignored, as the XDG Base Directory specification says (goose: the ``etcetera``
            crate); ``home``, the variable names the home folder the user folder is in, as
            written (Gemini CLI 0.61.0's ``homedir()``: ``$GEMINI_CLI_HOME/.gemini``).
        local: a per-user, uncommitted file relative to the project root (Claude's
            ``.claude/settings.local.json``), or None.
        project_upward: it loads :attr:`project` from every folder from its working
            directory up to the worktree root (OpenCode's ``.opencode/``), not from the
            working directory alone (Pi: a root extension does not reach a session started
            in a subdirectory; ``doctor`` warns there).
        session_event: the event a session starts with (a settings key or an extension event).
        prompt_event: the per-prompt event that can add model context, or None.
        post_tool_event: the event after a tool ran that can add model context, or None.
        file_tools: the tools after which that event names one file in
            ``tool_input.file_path`` (``notebook_path`` for Claude's notebooks): the reads and
            edits that inject nested instruction files and path-scoped rules
            (``supervisor.session._nested``, the registered matcher, ``hook-fast.sh``).
        compact_event: the event fired just before a compaction: for a hook, one we register
            as ``--event pre-compact`` (Claude's and Copilot's ``PreCompact``; a harness whose
            SessionStart re-fires with ``source`` compact needs none, unless, like Claude, it
            hands that hook's output to the summariser); for a bridge, the one its extension
            listens to (Pi, OpenCode).
        compact_trace: the bytes the harness writes, as a line of its transcript (the payload's
            ``transcript_path``), each time it restarts its chat on an earlier history: after
            a compression, and when a resumed process loads the session. Set for a harness
            that fires no event once a compaction happened (Gemini CLI 0.61.0: its
            ``PreCompress`` fires before every turn's threshold check, carries only
            ``trigger``, and is followed by nothing; a real compression ends in ``startChat``,
            whose ``ChatRecordingService.initialize`` appends ``{"$set":{"sessionId":...}}``,
            LAB). A count of these lines that grew within one harness process is a
            compression: the prompt hook then delivers a ``compact`` start
            (:mod:`supervisor.session._armed`, the fast path's ``trace`` records). "" = none.
        resume_event: a separate event for a resumed session (Cline's ``TaskResume``,
            registered with ``--source resume``), or None (the payload's ``source`` says it).
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
            extension name (the repository's root is the extension); :mod:`supervisor.commands._plugins`.
        resume_drops_context: a resumed session holds none of the earlier turns' hook
            context (Gemini ``-r``: the resumed request carries no earlier user turn; Copilot
            CLI ``--resume``: its SessionStart context is held by the process, never stored in
            the session), so a resume is served as a re-emit of the digest instead of the nudge.
        floor: the oldest version proven with the real CLI (the supported floor; the
            end-to-end tests' second pinned set), "" when no CLI is pinned.
        newest: the newest version proven (the end-to-end tests' pin), "" likewise.
        npm_extra: ``(platform, "pkg@version")`` pairs: a package ``npm install`` needs beside
            the :attr:`newest` pin on that platform (``os.uname()``'s ``"sysname machine"``,
            ``"Linux x86_64"``), where the pin's own optional platform package was published
            under another version (``@factory/cli`` 0.225.1 names ``@factory/cli-linux-x64``
            0.225.1, which the registry does not have; 0.225.2 is there).
        eras: what changed from a version on (:class:`Era`, oldest first); before the first,
            and for a version we could not learn, the row's own fields hold.
        mcp_files: where it reads its MCP servers, ``((scope, path), ...)``, empty when it
            is no MCP client of ours (``install mcp --for NAME``,
            :mod:`supervisor.commands._mcp_clients`): a ``project`` path is relative to the
            project root; a ``user`` path is relative to the user folder
            (:meth:`user_folder`), or to the home folder when it starts with ``~/``
            (Claude Code's ``~/.claude.json``).
        mcp_format: the format of those files: ``json`` (an ``mcpServers`` table), ``toml``
            (a ``[mcp_servers.NAME]`` table) or ``yaml`` (goose's ``extensions``).
        mcp_note: what the user does beyond the file (an approval, a trusted folder), or "".
        mcp_trust: the key of our entry that lets the client run our (read-only) tools
            without asking, set to true, or "": Gemini CLI's ``trust`` (0.61.0 in ``-p`` offers
            the model no tool of an untrusted server; tests/e2e/test_mcp_server.py).
        mcp_startup: the key of our entry that bounds the server's start, in seconds, or "":
            Codex's ``startup_timeout_sec`` (10 s by default, less than our server takes on a
            loaded host); ``install mcp`` sets it to
            :data:`supervisor.commands.mcp.ANSWER_WITHIN`.
        mcp_wait: the top-level setting, in milliseconds, that bounds how long the client
            waits for an optional MCP server before its first model request, or "": Codex's
            ``mcp_optional_startup_grace_ms`` (0.171.0: ``codex exec`` waited about 1 s, less
            than our server takes to answer, and sent its request without our instructions
            and tools); ``install mcp`` sets it to the time our server may take
            (:data:`supervisor.commands.mcp.ANSWER_WITHIN`) unless the file has it already.
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
    user_dir_env_form: EnvForm = "folder"
    local: str | None = None
    project_upward: bool = False
    session_event: str = "SessionStart"
    prompt_event: str | None = None
    post_tool_event: str | None = None
    file_tools: tuple[str, ...] = ()
    compact_event: str | None = None
    compact_trace: str = ""
    resume_event: str | None = None
    loads: str = ""
    imports: bool = False
    nested_on_demand: bool = False
    early_exit: bool = False
    timeout_unit: Unit = "s"
    plugin: str | None = None
    resume_drops_context: bool = False
    floor: str = ""
    newest: str = ""
    npm_extra: tuple[tuple[str, str], ...] = ()
    eras: tuple[Era, ...] = ()
    mcp_files: tuple[tuple[str, str], ...] = ()
    mcp_format: str = ""
    mcp_note: str = ""
    mcp_trust: str = ""
    mcp_startup: str = ""
    mcp_wait: str = ""

    if TYPE_CHECKING:
        @overload
        def user_folder(self, home: str, environ: Mapping[str, str] | None = None) -> str: ...

        @overload
        def user_folder(self, home: str | None,
                        environ: Mapping[str, str] | None = None) -> str | None: ...

    def user_folder(self, home: str | None,
                    environ: Mapping[str, str] | None = None) -> str | None:
        """The harness's user folder, the one home of that rule (``install``, ``uninstall``,
        ``doctor``, the bridges, the MCP clients' files, the instruction loaders): the
        folder :attr:`user_dir_env` names, read as :attr:`user_dir_env_form` says, when it
        is set, not empty (and absolute for ``absolute``); else ``home/user_dir`` (``home``
        itself without a :attr:`user_dir`); None when that is needed and ``home`` is None
        (no home folder: :func:`supervisor._home.home_dir`). ``home`` is a path string, never
        expanded; ``environ``: ``os.environ`` when None. A relative result is relative to the
        working directory, as the harness reads it. Never raises."""
        if self.user_dir_env:
            if environ is None:
                import os

                environ = os.environ
            folder = environ.get(self.user_dir_env, "")
            form = self.user_dir_env_form
            if form == "tilde" and (folder == "~" or folder.startswith("~/")):
                if home is None:
                    return None
                folder = home + folder[1:]
            if folder and form == "home":
                return f"{folder}/{self.user_dir}" if self.user_dir else folder
            if folder and (form != "absolute" or folder.startswith("/")):
                return folder
        if home is None:
            return None
        return f"{home}/{self.user_dir}" if self.user_dir else home

    def user_file(self, home: str, environ: Mapping[str, str] | None = None) -> str:
        """:attr:`user` in :meth:`user_folder` (the user-scope registration file)."""
        return f"{self.user_folder(home, environ)}/{self.user}"

    def loads_at(self, version: str) -> str:
        """The loader rule for ``version`` of this harness (its instruction files); an
        unknown ``version`` ("") gets :attr:`loads`, the floor's rule: the digest then
        supplies a file the harness may load too, never leaves one out."""
        rule = self.loads
        key = version_key(version)
        if key:
            for era in self.eras:
                if key >= version_key(era.since):
                    rule = era.loads
        return rule

    @property
    def timeout_scale(self) -> int:
        """Registered timeout units per second (1 or 1000)."""
        return 1000 if self.timeout_unit == "ms" else 1


ROWS: tuple[Harness, ...] = (
    Harness("claude", "Claude Code", "hook", processes=("claude",),
            packages=("@anthropic-ai/claude-code",), project=".claude/settings.json",
            user="settings.json", user_dir=".claude", local=".claude/settings.local.json",
            prompt_event="UserPromptSubmit", post_tool_event="PostToolUse",
            file_tools=("Read", "Edit", "MultiEdit", "Write", "NotebookRead", "NotebookEdit"),
            compact_event="PreCompact", loads="claude",
            imports=True, nested_on_demand=True, early_exit=True, floor="2.1.197",
            newest="2.1.332", plugin="watchkeeper@watchkeeper",
            mcp_files=(("project", ".mcp.json"), ("user", "~/.claude.json")), mcp_format="json",
            mcp_note="Claude Code asks once to approve a project's .mcp.json servers (or run "
                     "it with --mcp-config .mcp.json).",
            eras=(Era("2.1.281", "claude-agents",
                      "-p and interactive against the offline model: each AGENTS.md from / "
                      "down to cwd (imports expanded, AGENTS.override.md not) when no "
                      "non-empty CLAUDE.md, .claude/CLAUDE.md or CLAUDE.local.md is there, "
                      "and a nested one on a read below it likewise; 2.1.280 loads none "
                      "(tests/e2e/test_claude_context.py)"),)),
    Harness("codex", "Codex CLI", "hook", processes=("codex",), packages=("@openai/codex",),
            project=".codex/hooks.json", user="hooks.json", user_dir=".codex",
            user_dir_env="CODEX_HOME", prompt_event="UserPromptSubmit", loads="codex",
            early_exit=True, floor="0.171.0", newest="0.171.0",
            mcp_files=(("project", ".codex/config.toml"), ("user", "config.toml")),
            mcp_format="toml", mcp_wait="mcp_optional_startup_grace_ms",
            mcp_startup="startup_timeout_sec",
            mcp_note="Codex reads a project's .codex/config.toml only in a trusted project."),
    Harness("cursor", "Cursor", "hook", processes=("cursor-agent",),
            project=".cursor/hooks.json", user="hooks.json", user_dir=".cursor",
            session_event="sessionStart", loads="cursor", nested_on_demand=True,
            mcp_files=(("project", ".cursor/mcp.json"), ("user", "mcp.json")), mcp_format="json"),
    Harness("gemini", "Gemini CLI", "hook", processes=("gemini",),
            packages=("@google/gemini-cli",), project=".gemini/settings.json",
            user="settings.json", user_dir=".gemini", user_dir_env="GEMINI_CLI_HOME",
            user_dir_env_form="home", prompt_event="BeforeAgent",
            post_tool_event="AfterTool", file_tools=("read_file", "replace", "write_file"),
            compact_trace='{"$set":{"sessionId":',
            loads="gemini", imports=True, early_exit=True, timeout_unit="ms",
            resume_drops_context=True, floor="0.61.0", newest="0.61.0", plugin="watchkeeper",
            mcp_files=(("project", ".gemini/settings.json"), ("user", "settings.json")),
            mcp_format="json", mcp_trust="trust",
            mcp_note="Gemini CLI reads a project's settings only in a trusted folder."),
    Harness("qwen", "Qwen Code", "hook", processes=("qwen",), packages=("@qwen-code/qwen-code",),
            project=".qwen/settings.json", user="settings.json", user_dir=".qwen",
            prompt_event="UserPromptSubmit", post_tool_event="PostToolUse",
            file_tools=("read_file", "edit", "write_file"), loads="qwen", imports=True,
            timeout_unit="ms", resume_drops_context=True, floor="0.24.4", newest="0.24.4"),
    Harness("grok", "Grok CLI", "nudge", processes=("grok",),
            packages=("@vibe-kit/grok-cli", "grok-dev"), user="user-settings.json",
            user_dir=".grok", loads="grok"),
    Harness("copilot", "GitHub Copilot CLI", "hook", processes=("copilot",),
            packages=("@github/copilot",), project=".github/hooks/watchkeeper.json",
            user="hooks/watchkeeper.json", user_dir=".copilot", user_dir_env="COPILOT_HOME",
            prompt_event="UserPromptSubmit", compact_event="PreCompact", loads="copilot",
            resume_drops_context=True,
            floor="1.0.102", newest="1.0.102"),
    Harness("droid", "Factory Droid", "hook", processes=("droid",), packages=("@factory/cli",),
            project=".factory/settings.json", user="settings.json", user_dir=".factory",
            local=".factory/settings.local.json", prompt_event="UserPromptSubmit",
            loads="droid", floor="0.225.1", newest="0.225.1",
            npm_extra=(("Linux x86_64", "@factory/cli-linux-x64@0.225.2"),)),
    Harness("cline", "Cline CLI", "hook", processes=("cline",), packages=("cline",),
            project=".clinerules/hooks", user="hooks", user_dir=".cline",
            session_event="TaskStart", resume_event="TaskResume", prompt_event="PreToolUse",
            loads="cline", floor="3.0.65", newest="3.0.65"),
    Harness("pi", "Pi", "bridge", processes=("pi",), packages=("@mariozechner/pi-coding-agent",),
            project=".pi/extensions/watchkeeper/index.ts", user="extensions/watchkeeper/index.ts",
            user_dir=".pi/agent", user_dir_env="PI_CODING_AGENT_DIR", user_dir_env_form="tilde",
            session_event="session_start", prompt_event="before_agent_start",
            post_tool_event="tool_result", compact_event="session_compact", loads="pi",
            floor="0.73.1", newest="0.73.1"),
    Harness("opencode", "OpenCode", "bridge", processes=("opencode",), packages=("opencode-ai",),
            project=".opencode/plugins/watchkeeper.ts", user="opencode/plugins/watchkeeper.ts",
            user_dir=".config", user_dir_env="XDG_CONFIG_HOME", project_upward=True,
            session_event="session.created",
            prompt_event="experimental.chat.system.transform",
            compact_event="session.compacted", loads="opencode", nested_on_demand=True,
            floor="1.18.33", newest="1.18.33"),
    Harness("goose", "goose", "mcp", user_dir=".config", user_dir_env="XDG_CONFIG_HOME",
            user_dir_env_form="absolute",
            session_event="", mcp_files=(("user", "goose/config.yaml"),), mcp_format="yaml"),
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
INSTALLABLE: tuple[str, ...] = names("hook", "nudge", "bridge")
"""The harnesses ``install HARNESS`` registers with (a hook command or a bridge)."""
MCP_CLIENTS: tuple[str, ...] = tuple(row.name for row in ROWS if row.mcp_files)
"""The MCP clients ``install mcp --for CLIENT`` configures, in table order."""
FILE_TOOLS: frozenset[str] = frozenset(tool for row in ROWS for tool in row.file_tools)
"""Every row's :attr:`Harness.file_tools` (the bridges ask as Claude Code's ``Read``)."""


def label(name: str, default: str = "") -> str:
    """The label of harness ``name``; ``default`` (else ``name``) for a name not in the table."""
    row = BY_NAME.get(name)
    return row.label if row else (default or name)



def pins(platform: str | None = None) -> list[tuple[str, str, str, str, str, str]]:
    """``[(name, npm package, newest, floor, extra, label)]`` of the rows with a pinned CLI: what
    ``scripts/install-harnesses.sh`` installs for the end-to-end tests. ``extra`` is the
    row's :attr:`Harness.npm_extra` specs for ``platform`` (default: this machine's
    ``"sysname machine"``), comma-separated, or ``-`` when none."""
    if platform is None:
        import os

        uname = os.uname()
        platform = f"{uname.sysname} {uname.machine}"
    out = []
    for row in ROWS:
        if row.packages and row.newest:
            extra = ",".join(spec for where, spec in row.npm_extra if where == platform) or "-"
            out.append((row.name, row.packages[0], row.newest, row.floor or row.newest, extra,
                        row.label))
    return out


if __name__ == "__main__":  # `python -m supervisor._harnesses pins`: one pin a line
    import sys

    if sys.argv[1:] != ["pins"]:
        sys.exit("usage: python -m supervisor._harnesses pins")
    for pin in pins():
        print(" ".join(pin))
