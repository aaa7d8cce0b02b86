"""``supervise mcp [--for CLIENT] [-C DIR]``: the digest as a stdio MCP server.

For agents reached only through MCP (goose, Zed, Windsurf, IDE surfaces) and any client that
adds a server's ``InitializeResult.instructions`` to its system prompt (Claude Code, Cursor,
goose, Gemini CLI). Built on the official ``mcp`` SDK, the optional extra
``watchkeeper[mcp]``; without it, one line says how to install it (exit 1).

- ``initialize`` answers with the digest as ``instructions``: the session protocol, engine,
  sanitising and inline cutting of the hook (:func:`supervisor.session._routing.run_session`,
  :class:`supervisor.adapters._spill.Spill`: fitted as it streams, nothing held whole), for
  the project of the working directory, under a
  budget of its own (:data:`STARTUP_BUDGET`: a client gives a server about 10 s to start, Codex's
  ``startup_timeout_sec`` default) and a cap of its own (:data:`INSTRUCTIONS_CAP`: Claude Code
  cuts instructions at 2,048 characters). A cut digest says so and names the ``digest`` tool.
- The handshake and the listings are answered before the SDK is imported (its import took
  13.4 s of wall time at load 21-24, past a client's wait for a server to be ready): the
  stdlib-only :class:`_Handshake` answers ``server/discover`` (with "method not found"),
  ``initialize``, ``ping``, ``tools/list`` and ``resources/list``; the first message that
  needs more (a tool call, a resource read) imports the SDK and hands it the session.
- tools: ``digest`` (the current digest, or its re-emit with ``reemit: true``) and
  ``deferred`` (each finished deferred result, once).
- resources: the project's instruction files and memory store files (``watchkeeper://``),
  read through the guarded small-file read and cleaned of hidden text.
- A delivery is recorded only for what reached the client: the instructions' records commit
  when the client sends ``notifications/initialized`` (or any request after ``initialize``),
  a tool's when its result was written whole to stdout. Each tool call runs in a child
  ``supervise mcp --once KIND`` (the engine wants the main thread and its signals) that prints
  its text, then commits or rolls back as the server tells it on its stdin.
- ``--for CLIENT`` names the client the registration is for (``supervise install mcp --for
  CLIENT`` writes it; the clients are the harness table's rows with ``mcp_files``), and the
  digest runs as for that harness (``SUPERVISE_HARNESS``). When that client's harness also
  has our hook (settings or plugin), the hook is the channel: the instructions stand down to
  one line naming the tool.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .._exitcodes import EXIT_FAILURE, EXIT_OK, EXIT_USAGE
from .._harnesses import MCP_CLIENTS

if TYPE_CHECKING:
    from ..config._context import SessionContext
    from ..config._plan import DigestPlan
    from ..state._delivery import Delivery

SERVER_NAME = "watchkeeper"
"""The server's name in ``serverInfo`` and in every client's configuration."""

STARTUP_BUDGET = 5.0
"""Seconds the digest behind ``instructions`` may take (the config's budget when smaller):
with :data:`STARTUP_MARGIN` it is :data:`ANSWER_WITHIN`, which ``install mcp`` gives a client
that bounds a server's start (Codex: 10 s by default)."""

STARTUP_MARGIN = 25.0
"""Seconds the server may take before its digest starts and after it ends: the interpreter,
the plan, the answers to the handshake and the listings (:class:`_Handshake`, before the
SDK's import). A client that bounds the start of a server that imported the SDK first waited
for the import too: about 0.9 s of CPU, 13.4 s of wall time on a 2-core host at load 21-24,
where a one-stage digest answered ``initialize`` in 8.8 s."""

ANSWER_WITHIN = STARTUP_BUDGET + STARTUP_MARGIN
"""Seconds within which the server answers ``initialize``: how long ``install mcp`` tells a
client that bounds a server's start (the harness table's ``mcp_startup``) or its wait for
servers before the first request (``mcp_wait``) to allow ours. A client waits only as long as
the server takes."""

TOOL_BUDGET = 50.0
"""Seconds the ``digest`` tool's run may take (the config's budget when smaller): inside the
60 s tool-call timeout of Codex (``tool_timeout_sec``), the shortest default known."""

INSTRUCTIONS_CAP = 2_000
"""Characters of ``instructions``: Claude Code cuts a server's instructions at 2,048 (DOC
https://code.claude.com/docs/en/mcp, "for MCP server authors")."""

TOOL_CAP = 16_000
"""Characters of one tool result (Claude Code warns above 10,000 tokens of MCP output)."""

LINE_CAP = 4 << 20
"""Bytes of one JSON-RPC message on stdin (a line). The SDK's own reader keeps a line until its
end, so a client that sends bytes without a line end (``/dev/zero``) grew the server without
bound; past this cap the server says so on stderr in one line and exits 1. A client's
messages to us are small (``initialize``, a tool call without big arguments)."""

READ_CHUNK = 64 * 1024
"""Bytes read from stdin at a time."""

CHILD_WAIT = 30.0
"""Seconds a ``--once`` child waits for the server's verdict after printing its text."""

def sdk_install_hint() -> str:
    """The one command line that adds the MCP SDK (the ``watchkeeper[mcp]`` extra) to the
    environment this ``supervise`` runs in: ``uv pip install --python EXE REQ`` in a ``uv
    tool`` environment (it has no pip), else ``EXE -m pip install REQ`` (a venv, pipx's
    shared pip, a user install). REQ is the extra's requirement as the installed package's
    metadata declares it (``mcp>=2.3``), else ``mcp``. A shell-quoted str; never raises."""
    import importlib.metadata
    import shlex

    requirement = "mcp"
    try:
        for line in importlib.metadata.requires("watchkeeper") or ():
            spec, _, marker = line.partition(";")
            if "extra" in marker and '"mcp"' in marker.replace("'", '"'):
                requirement = spec.strip()
                break
    except importlib.metadata.PackageNotFoundError:  # run from a source tree, not installed
        pass
    if os.path.exists(os.path.join(sys.prefix, "uv-receipt.toml")):
        return shlex.join(["uv", "pip", "install", "--python", sys.executable, requirement])
    return shlex.join([sys.executable, "-m", "pip", "install", requirement])


def command_install_hint() -> str:
    """The one command line that puts ``supervise`` with the MCP extra on ``PATH`` for the
    clients (which start it by name): ``pipx install 'SOURCE[mcp]'``, SOURCE the checkout this
    package runs from (the folder above ``supervisor/`` that holds ``pyproject.toml``: an
    editable install, or the source tree), else the package name. A shell-quoted str; never
    raises."""
    import shlex

    # supervisor/commands/mcp.py -> the folder that holds the package
    checkout = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    source = (checkout if os.path.isfile(os.path.join(checkout, "pyproject.toml"))
              else "watchkeeper")
    return shlex.join(["pipx", "install", f"{source}[mcp]"])


INSTRUCTION_FILES = ("AGENTS.override.md", "AGENTS.md", "CLAUDE.md", ".claude/CLAUDE.md",
                     "CLAUDE.local.md", "GEMINI.md", "QWEN.md")
"""Instruction files at the project root offered as resources (the names the harnesses read,
docs/stages/instructions.md)."""

RESOURCE_LIMIT = 256 * 1024
"""Bytes of one resource file; a bigger one is refused with one line."""

MEMORY_DIR = ".remember"
"""The memory store (the ``memory`` stage's default ``dir``, docs/stages/memory.md)."""


READ_ONLY = {"readOnlyHint": True, "destructiveHint": False, "openWorldHint": False}
"""Both tools' annotations: neither changes the user's files or reaches the network (the
records they keep are our state dir's), so a client may run them unasked (Codex 0.171.0
under ``approval: never`` refused a tool without the read-only hint)."""

TOOLS: tuple[dict[str, Any], ...] = (
    {"name": "digest", "description": (
        "The watchkeeper session-start digest of this project (instructions, memory, "
        "repository state), whole; reemit=true gives its re-emit after a compaction."),
     "inputSchema": {"type": "object", "properties": {"reemit": {"type": "boolean"}}},
     "annotations": READ_ONLY},
    {"name": "deferred", "description": (
        "Finished background (deferred) stage results of this project, each delivered once."),
     "inputSchema": {"type": "object", "properties": {}}, "annotations": READ_ONLY},
)
"""The server's tools as ``tools/list`` states them (the wire's camelCase): the one home the
handshake phase answers from and the SDK's handler validates."""


def build_parser() -> argparse.ArgumentParser:
    """The ``mcp`` argument parser."""
    from ._cli import VerbParser, add_directory

    p = VerbParser(prog="supervise mcp", description="serve the digest over MCP (stdio): "
                   "instructions at initialize, the digest and deferred results as tools, "
                   "instruction and memory files as resources; needs watchkeeper[mcp]")
    p.add_argument("--for", dest="client", choices=sorted(MCP_CLIENTS), default="",
                   help="the client this registration is for (install mcp --for writes it): "
                   "the digest runs as for its harness, and stands down to one line when that "
                   "harness has our hook too")
    p.add_argument("--once", choices=("digest", "reemit", "deferred"), default="",
                   help=argparse.SUPPRESS)  # the child a tool call runs (see the module doc)
    add_directory(p)
    return p


# -- the texts ----------------------------------------------------------------------------

def _context(project: Path, client: str, source: str) -> SessionContext:
    from ..config._context import SessionContext

    return SessionContext.for_project(project, source=source, harness=client,
                                      session_id="", cwd=project)


def _plan(project: Path, budget: float) -> tuple[DigestPlan, str]:
    """The project's plan with its budget at most ``budget``, and a config-error notice."""
    from .._errors import ConfigError
    from .._record import replace
    from ..config._plan import as_plan
    from ..config._plancache import load_plan

    notice = ""
    try:
        plan = load_plan(project)
    except ConfigError as err:
        from ..config._schema import embedded_default

        plan = as_plan(embedded_default())
        notice = (f"[supervise] configuration error: {err}; the embedded default digest ran "
                  "instead.\n")
    if plan.budget > budget:
        plan = replace(plan, budget=budget)
    return plan, notice


def digest_text(project: Path, client: str, source: str, budget: float, cap: int,
                delivery: Delivery, asked: bool = False) -> tuple[str, str]:
    """Run the session protocol for ``source`` (``startup``; ``compact`` for a re-emit) with
    the open ``delivery``, as the hook does; return ``(text, kind)``: the text cut to ``cap``
    characters at stage boundaries (the whole digest saved under the state dir, the cut
    naming the ``digest`` tool), ``kind`` the outcome's (``digest``, ``reemit``, ``nudge``).

    The lock's owner is the client process that started this server (``take_lock``), found
    by the ancestry walk as the hook's is. ``asked``: a tool call, which asks for the digest
    again on purpose, so a start repeated within the repeat window
    (:func:`supervisor.session._starts.once`, which gives a repeat no text) runs anew: under
    a real client the instructions' start and a ``digest`` call share the client process and
    the empty session id. Never raises for state problems (the digest runs read-only and
    says why)."""
    from .._record import replace
    from ..adapters import fit_inline
    from ..adapters._spill import Spill
    from ..session._routing import run_session

    plan, notice = _plan(project, budget)
    context = replace(_context(project, client, source), delivery=delivery)
    note = (f"[watchkeeper] This digest was cut to {cap:,} characters; call the `digest` "
            f"tool of the {SERVER_NAME} MCP server for the whole digest.\n")
    # a digest streams into the spill, fitted as it comes (as the hook's): nothing held whole
    spill = Spill(context.state_dir, cap, notice, cut_note=note)
    outcome = run_session(plan, context, take_lock=True, repeat_checked=asked, spill=spill)
    if spill.text is not None:
        return outcome.text, outcome.kind
    text = notice + outcome.text
    if outcome.parts is not None and len(text) > cap:
        text = note + fit_inline(list(outcome.parts), cap - len(note), context.state_dir,
                                 notice + outcome.notices)
    elif len(text) > cap:
        text = text[: cap - 1] + "\u2026"
    return text, outcome.kind


def deferred_text(project: Path, delivery: Delivery) -> str:
    """Every finished deferred result not yet delivered, claimed with the open ``delivery``
    (:func:`supervisor.engine._deferred.take_undelivered`), or a line saying there is none."""
    from ..engine._deferred import result_cap, take_undelivered

    plan, _ = _plan(project, TOOL_BUDGET)
    caps = {s.name: result_cap(s.max_output or plan.max_output) for s in plan.stages if s.deferred}
    from ..config._context import state_dir_for

    texts = take_undelivered(state_dir_for(project), caps, delivery=delivery)
    return "".join(t if t.endswith("\n") else t + "\n" for t in texts) or (
        "No deferred result is waiting.\n")


def standdown_reason(client: str, project: Path) -> str:
    """Where ``client``'s harness has our hook for ``project`` (a settings registration or
    the plugin enabled, project, local or user scope), or ``""``: then the hook delivers the
    digest and the instructions stand down."""
    from ..adapters import ADAPTERS, _settings
    from .._home import home_dir
    from . import _plugins

    adapter = ADAPTERS.get(client)  # goose: no hook harness
    if adapter is None:
        return ""
    home = home_dir()
    for scope in adapter.scopes:
        if scope == "user" and home is None:
            continue
        path = adapter.settings_path(scope, project, Path(home or project))
        try:
            data = _settings.read_settings(path)
        except Exception:  # noqa: BLE001 - unreadable settings: not a registration we can see
            continue
        if _settings.registered(data, adapter).get(adapter.session_event):
            return f"the {adapter.title} hook registered in {path}"
        for key in _plugins.enabled(data, adapter):
            return f"the {adapter.title} plugin {key} enabled in {path}"
    return ""


def standdown_text(reason: str) -> str:
    """The one-line instructions of a server whose client gets the digest from our hook."""
    return (f"watchkeeper: this project's session-start digest comes from {reason}, not from "
            f"this server. Call the `digest` tool of the {SERVER_NAME} MCP server to fetch it "
            "again (after a compaction), and `deferred` for finished background results.\n")


# -- the child of a tool call -------------------------------------------------------------

def _child(kind: str, project: Path, client: str) -> int:
    """``--once KIND``: print ``{"text": ...}`` on stdout, then read the server's verdict
    (``delivered`` or anything else) from stdin and settle the delivery by it."""
    from ..state._delivery import open_delivery
    from ..config._context import state_dir_for

    with open_delivery(state_dir_for(project)) as delivery:
        if kind == "deferred":
            text = deferred_text(project, delivery)
        else:
            text, _ = digest_text(project, client, "compact" if kind == "reemit" else "startup",
                                  TOOL_BUDGET, TOOL_CAP, delivery, asked=True)
        sys.stdout.write(json.dumps({"text": text}, ensure_ascii=False) + "\n")
        sys.stdout.flush()
        import select

        ready, _, _ = select.select([sys.stdin], [], [], CHILD_WAIT)
        verdict = sys.stdin.readline().strip() if ready else ""
        for failure in delivery.settle(verdict == "delivered"):
            print(f"supervise mcp: delivered, but not recorded: {failure}", file=sys.stderr)
    return EXIT_OK


# -- the server ---------------------------------------------------------------------------

class _Wire:
    """The server's stdout as the SDK's transport writes it (``write`` a JSON-RPC line, then
    ``flush``), telling :class:`_Deliveries` which response ids were written whole.

    ``early``: the ``(id, result)`` of the ``initialize`` answered before the SDK was imported
    (:func:`early_answer`); the SDK's own answer to that request (it is replayed to the SDK)
    is dropped, and said on stderr in one line when it differs from the one sent."""

    def __init__(self, fd: int, deliveries: _Deliveries,
                 early: tuple[Any, dict[str, Any]] | None = None) -> None:
        import anyio

        self._file = anyio.wrap_file(open(fd, "w", encoding="utf-8", closefd=False))
        self._deliveries = deliveries
        self._early = early
        self._ident: Any = None

    async def write(self, text: str) -> int:
        try:
            message = json.loads(text)
            self._ident = message.get("id") if isinstance(message, dict) else None
        except ValueError:
            message, self._ident = None, None
        if self._early is not None and self._ident == self._early[0]:
            sent, self._early, self._ident = self._early[1], None, None
            sdk = message.get("result") if isinstance(message, dict) else None
            if sdk != sent:
                keys = sorted(k for k in {*sent, *(sdk or {})}
                              if not isinstance(sdk, dict) or sdk.get(k) != sent.get(k))
                print("supervise mcp: initialize was answered before the MCP SDK loaded; the "
                      f"SDK's own answer differs in {', '.join(keys) or 'its shape'} (report it)",
                      file=sys.stderr)
            return len(text)
        return int(await self._file.write(text))

    async def flush(self) -> None:
        await self._file.flush()
        ident, self._ident = self._ident, None
        if ident is not None:
            self._deliveries.written(ident)


class _Deliveries:
    """What waits for proof that the client got it: the instructions' delivery (settled at
    ``notifications/initialized`` or the first request after ``initialize``) and each tool
    call's child (told ``delivered`` once the response with that id was flushed)."""

    def __init__(self, startup: Delivery | None) -> None:
        self.startup = startup
        self._waiting: dict[Any, Any] = {}

    def client_spoke(self) -> None:
        if self.startup is not None:
            for failure in self.startup.settle(True):
                print(f"supervise mcp: delivered, but not recorded: {failure}", file=sys.stderr)
            self.startup = None

    def wait_for(self, ident: Any, child: Any) -> None:
        self._waiting[ident] = child

    def written(self, ident: Any) -> None:
        child = self._waiting.pop(ident, None)
        if child is not None:
            _verdict(child, True)

    def abandon(self) -> None:
        """Roll back what never reached the client: the instructions' delivery when the
        client never spoke, and each tool call whose response was not written."""
        if self.startup is not None:
            self.startup.settle(False)
            self.startup = None
        for child in self._waiting.values():
            _verdict(child, False)
        self._waiting.clear()


class LineTooLong(Exception):
    """A message on stdin went past :data:`LINE_CAP` bytes without a line end."""


class _Lines:
    """The client's messages from ``fd``: an async iterator of text lines, as the SDK's stdio
    transport reads them (``async for line in stdin``), each at most ``cap`` bytes.

    Raises (from iteration):
        LineTooLong: ``cap`` bytes arrived without a line end; nothing more is read.
    """

    def __init__(self, fd: int, cap: int = LINE_CAP) -> None:
        self._fd = fd
        self._cap = cap
        self._pending = bytearray()
        self._lines: list[bytes] = []
        self._eof = False

    def __aiter__(self) -> _Lines:
        return self

    def _take(self, chunk: bytes) -> None:
        """Split ``chunk`` (b"" at end of input) into whole lines and the pending rest."""
        if not chunk:
            self._eof = True
            if self._pending:
                self._lines.append(bytes(self._pending))
                self._pending.clear()
            return
        if b"\n" in chunk:
            *whole, rest = (bytes(self._pending) + chunk).split(b"\n")
            self._lines += [line + b"\n" for line in whole]
            self._pending = bytearray(rest)
        else:
            self._pending += chunk
        if len(self._pending) > self._cap:
            self._pending.clear()
            self._eof = True
            raise LineTooLong(f"supervise mcp: a message on stdin went past {self._cap:,} "
                              "bytes without a line end (a JSON-RPC message is one line); "
                              "stopped")

    def next_sync(self) -> bytes:
        """The next message, read now (blocking, without an event loop), or b"" when the
        input ended.

        Raises:
            LineTooLong: as the iteration does.
        """
        while not self._lines and not self._eof:
            self._take(os.read(self._fd, READ_CHUNK))
        return self._lines.pop(0) if self._lines else b""

    def push_front(self, lines: list[bytes]) -> None:
        """Give ``lines`` to the iteration first, in their order."""
        self._lines[:0] = lines

    async def __anext__(self) -> str:
        import anyio

        while not self._lines:
            if self._eof:
                raise StopAsyncIteration
            self._take(await anyio.to_thread.run_sync(os.read, self._fd, READ_CHUNK))
        return self._lines.pop(0).decode("utf-8", "replace")


def _too_long(err: BaseException) -> LineTooLong | None:
    """The :class:`LineTooLong` inside ``err`` (the task groups wrap it), or None."""
    if isinstance(err, LineTooLong):
        return err
    for inner in getattr(err, "exceptions", ()):
        found = _too_long(inner)
        if found is not None:
            return found
    return None


async def _stop_on_signals(deliveries: _Deliveries) -> None:
    """End the server on TERM, INT or HUP with 128+n, having rolled back what never reached
    the client. It exits at once (``os._exit``): the transport's stdin reader is a thread
    blocked in ``read``, which no cancellation ends."""
    import signal

    import anyio

    with anyio.open_signal_receiver(signal.SIGTERM, signal.SIGINT, signal.SIGHUP) as signals:
        async for signum in signals:
            deliveries.abandon()
            sys.stderr.flush()
            os._exit(128 + signum)


def _verdict(child: Any, delivered: bool) -> None:
    """Tell a ``--once`` child whether its text reached the client, then reap it."""
    try:
        child.stdin.write(b"delivered\n" if delivered else b"lost\n")
        child.stdin.close()
    except OSError:
        pass
    try:
        child.wait(timeout=CHILD_WAIT)
    except Exception:  # noqa: BLE001 - subprocess.TimeoutExpired: it ends on its own wait
        child.kill()
        child.wait()


def _spawn_child(kind: str, project: Path, client: str) -> tuple[Any, str]:
    """Start ``supervise mcp --once KIND`` and read its text; ``(process, text)``."""
    import subprocess

    argv = [sys.executable, "-I", "-m", "supervisor", "mcp", "--once", kind, "-C", str(project)]
    if client:
        argv += ["--for", client]
    child = subprocess.Popen(argv, cwd=project, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                             stderr=subprocess.DEVNULL)
    assert child.stdout is not None
    line = child.stdout.readline()
    child.stdout.close()
    try:
        text = str(json.loads(line)["text"])
    except (ValueError, KeyError, TypeError):
        text = (f"watchkeeper: the {kind} run ended without a result; run `supervise digest` "
                "in a terminal and report it.\n")
    return child, text


MAX_MEMORY_RESOURCES = 256
"""Memory files offered as resources at most (a store flooded with names is listed no further)."""


def _resources(project: Path) -> list[tuple[str, Path]]:
    """``(uri, path)`` of each instruction and memory file present (regular files only; a
    memory file whose name :func:`supervisor._sanitize.one_line` would change, i.e. holds a
    line feed, an escape sequence, a bidi control or other hidden text, is not offered: its
    URI would carry that text to the client and the model; at most
    :data:`MAX_MEMORY_RESOURCES` of them, the store's first 4,096 names sorted)."""
    import stat

    from .._sanitize import one_line

    found: list[tuple[str, Path]] = []
    for name in INSTRUCTION_FILES:
        found.append((f"watchkeeper://instructions/{name}", project / name))
    store = project / MEMORY_DIR
    names: list[str] = []
    try:
        if stat.S_ISDIR(os.lstat(store).st_mode):
            with os.scandir(store) as entries:
                for entry in entries:
                    names.append(entry.name)
                    if len(names) >= 4096:
                        break
    except OSError:
        names = []
    offered = [n for n in sorted(names) if n.endswith(".md") and one_line(n) == n]
    for name in offered[:MAX_MEMORY_RESOURCES]:
        found.append((f"watchkeeper://memory/{name}", store / name))
    out = []
    for uri, path in found:
        try:
            if stat.S_ISREG(os.lstat(path).st_mode):
                out.append((uri, path))
        except OSError:
            continue
    return out


def resource_list(project: Path) -> list[dict[str, str]]:
    """The ``resources/list`` entries (wire form: ``uri``, ``name``, ``mimeType``) of every
    file :func:`_resources` offers."""
    return [{"uri": uri, "name": uri.split("://", 1)[1], "mimeType": "text/markdown"}
            for uri, _ in _resources(project)]


def read_resource_text(project: Path, uri: str) -> str:
    """The cleaned text of resource ``uri`` (a file :func:`_resources` lists), read through
    the one door (:func:`supervisor.state._intake.read_text`: inside the project or its main
    checkout, never /proc, /sys or /dev, a regular file of at most :data:`RESOURCE_LIMIT`
    bytes, memory files never through a link; hidden text removed and counted).

    Raises:
        ValueError: ``uri`` is not one of the listed resources.
        ConfigError: the door refused the file (its one-line reason).
    """
    from .._errors import ConfigError
    from .._sanitize import removed_note
    from ..state._intake import Refused, project_scope, read_text

    paths = dict(_resources(project))
    if uri not in paths:
        raise ValueError(f"unknown resource {uri!r}")
    got = read_text(paths[uri], project_scope(project), cap=RESOURCE_LIMIT,
                    follow=not uri.startswith("watchkeeper://memory/"))
    if isinstance(got, Refused):
        raise ConfigError(got.reason)
    return got.text + (removed_note(got.hidden, uri) if got.hidden else "")


CAPABILITIES: dict[str, Any] = {"resources": {"listChanged": False, "subscribe": False},
                                "tools": {"listChanged": False}}
"""What the server offers, as ``initialize`` states it (the wire's camelCase): tools and
resources, neither list ever changing, no subscriptions. The early answer sends it and the SDK
is given it (``InitializationOptions``), so both answers say the same."""

SDK_VERSIONS = ("mcp_types", "version.py")
"""The SDK's protocol-version registry (``mcp_types.version``: ``HANDSHAKE_PROTOCOL_VERSIONS``,
``LATEST_HANDSHAKE_VERSION``), a file that imports only ``typing``; the package around it
imports pydantic and the protocol's models (0.5 s of CPU)."""


def handshake_versions() -> tuple[str, ...]:
    """The protocol versions the installed SDK negotiates through ``initialize``, its latest
    last, read from the SDK's own registry file (:data:`SDK_VERSIONS`) without importing the
    SDK; ``()`` when that file cannot be found or read (then the SDK answers ``initialize``
    itself, after its import). Never raises."""
    import importlib.util

    try:
        spec = importlib.util.find_spec(SDK_VERSIONS[0])
        for folder in (spec.submodule_search_locations or ()) if spec else ():
            path = Path(folder) / SDK_VERSIONS[1]
            loader = importlib.util.spec_from_file_location("_supervise_mcp_versions", path)
            if loader is None or loader.loader is None or not path.is_file():
                continue
            module = importlib.util.module_from_spec(loader)
            loader.loader.exec_module(module)
            versions = tuple(str(v) for v in module.HANDSHAKE_PROTOCOL_VERSIONS)
            latest = str(module.LATEST_HANDSHAKE_VERSION)
            if latest in versions:
                return (*(v for v in versions if v != latest), latest)
    except Exception:  # noqa: BLE001 - any failure: the SDK answers after its import
        pass
    return ()


def early_answer(line: bytes, instructions: str, version: str,
                 versions: tuple[str, ...]) -> tuple[Any, dict[str, Any]] | None:
    """``(id, result)`` of the answer to ``line`` when it is an ``initialize`` request, given
    before the SDK is imported, else None (any other first message, or ``versions`` empty:
    the SDK answers it).

    The answer: ``protocolVersion`` as the SDK negotiates it (the client's when in
    ``versions``, else their latest, the last), :data:`CAPABILITIES`, ``serverInfo``
    (:data:`SERVER_NAME`, ``version``) and ``instructions``; the SDK, given the same options,
    answers alike (:class:`_Wire` checks it when the request is replayed to it). MCP
    (2025-06-18, lifecycle): the server answers ``initialize`` with the version it picked."""
    try:
        message = json.loads(line)
    except ValueError:
        return None
    if not versions or not isinstance(message, dict) or message.get("jsonrpc") != "2.0":
        return None
    ident, params = message.get("id"), message.get("params")
    if (message.get("method") != "initialize" or isinstance(ident, bool)
            or not isinstance(ident, (int, str)) or not isinstance(params, dict)
            or not isinstance(params.get("protocolVersion"), str)):
        return None
    requested = params["protocolVersion"]
    return ident, {"protocolVersion": requested if requested in versions else versions[-1],
                   "capabilities": CAPABILITIES,
                   "serverInfo": {"name": SERVER_NAME, "version": version},
                   "instructions": instructions}


METHOD_NOT_FOUND = -32601
"""JSON-RPC's "method not found" error code."""


class _Handshake:
    """The session's first messages, answered before the SDK is imported (its import is
    about 0.9 s of CPU, 13.4 s of wall time on a 2-core host at load 21-24).

    A client counts a server ready only once it has answered the handshake and the listings:
    Claude Code 2.1.332 in ``-p`` waits 5 s for ``tools/list`` and ``resources/list`` too, then
    sends its first request without the server's instructions. So, with the digest ready, the
    server answers from its own data (stdlib only):

    - ``server/discover`` (the 2026-07-28 revision's probe, Claude Code's first message):
      "method not found", so the client uses the ``initialize`` handshake at once (Claude
      Code otherwise waited about 3 s for the probe before falling back);
    - ``initialize`` (:func:`early_answer`), ``ping``, and after ``initialize`` ``tools/list``
      (:data:`TOOLS`) and ``resources/list`` (:func:`resource_list`);
    - ``notifications/initialized``, and any request after ``initialize``, settle the
      instructions' delivery (:meth:`_Deliveries.client_spoke`); other notifications
      (a cancellation of a request answered already) are dropped.

    The first message it cannot answer (a tool call, a resource read, anything unknown)
    hands the session to the SDK: :attr:`replay` (the ``initialize`` request and the
    ``initialized`` notification, so the SDK's session is in the same state) goes to it
    first, and the SDK's answer to that ``initialize`` is dropped (:class:`_Wire`)."""

    def __init__(self, project: Path, instructions: str, version: str,
                 versions: tuple[str, ...], deliveries: _Deliveries) -> None:
        self._project = project
        self._instructions = instructions
        self._version = version
        self._versions = versions
        self._deliveries = deliveries
        self.replay: list[bytes] = []
        """Messages the SDK gets first when it takes over."""
        self.initialize: tuple[Any, dict[str, Any]] | None = None
        """``(id, result)`` of the ``initialize`` answered here, once answered."""
        self._acknowledged = False

    def answer(self, line: bytes) -> bytes | None:
        """The bytes answering ``line`` (b"" for a notification taken), or None: the SDK's."""
        try:
            message = json.loads(line)
        except ValueError:
            return None
        if not isinstance(message, dict) or message.get("jsonrpc") != "2.0":
            return None
        method = message.get("method")
        if "id" not in message:  # a notification
            if self.initialize is None:
                return None
            if method == "notifications/initialized" and not self._acknowledged:
                self._acknowledged = True
                self.replay.append(line)
            self._deliveries.client_spoke()
            return b""
        ident = message["id"]
        if isinstance(ident, bool) or not isinstance(ident, (int, str)):
            return None
        result: dict[str, Any]
        if method == "server/discover":
            return self._send({"jsonrpc": "2.0", "id": ident, "error": {
                "code": METHOD_NOT_FOUND, "message": "Method not found", "data": method}})
        if method == "ping":
            result = {}
        elif self.initialize is None:
            early = early_answer(line, self._instructions, self._version, self._versions)
            if early is None:
                return None
            self.initialize = early
            self.replay.append(line)
            result = early[1]
        elif method == "tools/list":
            result = {"tools": list(TOOLS)}
        elif method == "resources/list":
            result = {"resources": resource_list(self._project)}
        else:
            return None
        if self.initialize is not None and result is not self.initialize[1]:
            self._deliveries.client_spoke()
        return self._send({"jsonrpc": "2.0", "id": ident, "result": result})

    @staticmethod
    def _send(message: dict[str, Any]) -> bytes:
        return (json.dumps(message) + "\n").encode()


def serve(project: Path, client: str) -> int:
    """Compute the instructions, answer the handshake and the listings with the standard
    library (:class:`_Handshake`), then, when a message needs it, import the SDK and serve
    MCP on stdio until the client closes it; exit status as :func:`main`."""
    import importlib.util

    try:
        present = importlib.util.find_spec("mcp") is not None
    except (ImportError, ValueError):
        present = False
    if not present:
        print("supervise mcp: the MCP server needs the SDK (the watchkeeper[mcp] extra): "
              f"{sdk_install_hint()}", file=sys.stderr)
        return EXIT_FAILURE
    from .._version import VERSION
    from ..state._delivery import WriteFailed, open_delivery, write_whole
    from ..config._context import state_dir_for

    with open_delivery(state_dir_for(project)) as startup:
        reason = standdown_reason(client, project)
        if reason:
            instructions = standdown_text(reason)
        else:
            instructions, _ = digest_text(project, client, "startup", STARTUP_BUDGET,
                                          INSTRUCTIONS_CAP, startup)
        deliveries = _Deliveries(startup)
        wire_fd = os.dup(1)
        os.dup2(2, 1)  # a stray print never reaches the wire
        wire_in = os.dup(0)
        null = os.open(os.devnull, os.O_RDONLY)
        os.dup2(null, 0)  # nothing else reads the client's messages
        os.close(null)
        lines = _Lines(wire_in)
        handshake = _Handshake(project, instructions, VERSION, handshake_versions(), deliveries)
        try:
            while True:
                line = lines.next_sync()
                if not line:
                    return EXIT_OK  # the client closed its end: nothing needed the SDK
                answer = handshake.answer(line)
                if answer is None:
                    lines.push_front([*handshake.replay, line])
                    break
                if answer:
                    write_whole(wire_fd, answer)
        except LineTooLong as err:
            print(err, file=sys.stderr)
            return EXIT_FAILURE
        except WriteFailed:
            return EXIT_OK  # the client is gone: what it did not acknowledge rolls back
        try:
            import anyio
            from mcp import types
            from mcp.server import Server
            from mcp.server.models import InitializationOptions
            from mcp.server.stdio import stdio_server
        except ImportError:
            print("supervise mcp: the MCP server needs the SDK (the watchkeeper[mcp] extra): "
              f"{sdk_install_hint()}", file=sys.stderr)
            return EXIT_FAILURE

        async def list_tools(ctx: Any, params: Any) -> types.ListToolsResult:
            deliveries.client_spoke()
            return types.ListToolsResult(tools=[types.Tool.model_validate(t) for t in TOOLS])

        async def call_tool(ctx: Any, params: types.CallToolRequestParams) -> types.CallToolResult:
            deliveries.client_spoke()
            if params.name not in ("digest", "deferred"):
                return types.CallToolResult(content=[types.TextContent(
                    type="text", text=f"unknown tool {params.name!r}")], is_error=True)
            kind = params.name
            if kind == "digest" and (params.arguments or {}).get("reemit") is True:
                kind = "reemit"
            child, text = await anyio.to_thread.run_sync(_spawn_child, kind, project, client)
            deliveries.wait_for(ctx.request_id, child)
            return types.CallToolResult(content=[types.TextContent(type="text", text=text)])

        async def list_resources(ctx: Any, params: Any) -> types.ListResourcesResult:
            deliveries.client_spoke()
            return types.ListResourcesResult(resources=[
                types.Resource.model_validate(r) for r in resource_list(project)])

        async def read_resource(ctx: Any, params: types.ReadResourceRequestParams) -> types.ReadResourceResult:
            deliveries.client_spoke()
            text = read_resource_text(project, str(params.uri))
            return types.ReadResourceResult(contents=[types.TextResourceContents(
                uri=str(params.uri), mime_type="text/markdown", text=text)])

        async def initialized(ctx: Any, params: Any) -> None:
            deliveries.client_spoke()

        server: Server[Any] = Server(SERVER_NAME, version=VERSION, instructions=instructions,
                                     on_list_tools=list_tools, on_call_tool=call_tool,
                                     on_list_resources=list_resources,
                                     on_read_resource=read_resource)
        server.add_notification_handler("notifications/initialized", types.NotificationParams,
                                        initialized)
        options = InitializationOptions(
            server_name=SERVER_NAME, server_version=VERSION, instructions=instructions,
            capabilities=types.ServerCapabilities.model_validate(CAPABILITIES))

        async def main() -> None:
            async with anyio.create_task_group() as group:
                group.start_soon(_stop_on_signals, deliveries)
                async with stdio_server(stdin=lines,  # type: ignore[arg-type]
                                        stdout=_Wire(wire_fd, deliveries, handshake.initialize)) as (read, write):  # type: ignore[arg-type]
                    await server.run(read, write, options)
                group.cancel_scope.cancel()

        try:
            anyio.run(main)
        except BaseException as err:  # noqa: BLE001 - a task group wraps what its tasks raised
            too_long = _too_long(err)
            if too_long is None:
                raise
            print(too_long, file=sys.stderr)
            return EXIT_FAILURE
        finally:
            deliveries.abandon()
    return EXIT_OK


def main(argv: list[str]) -> int:
    """Serve (or, with ``--once``, run one tool call's child); exit 0 when the client closed
    the connection, 1 without the extra or on a message past :data:`LINE_CAP` (one line on
    stderr), 2 on bad usage, 128+n on TERM, INT or HUP."""
    args = build_parser().parse_args(argv)
    from ..state._project import find_project_root

    project = Path(find_project_root(args.directory or Path.cwd()))
    if args.once:
        return _child(args.once, project, args.client)
    if args.client not in MCP_CLIENTS and args.client:
        return EXIT_USAGE
    return serve(project, args.client)
