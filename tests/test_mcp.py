"""``supervise mcp``: the stdio MCP server, driven by the official SDK's own client.

Every test starts the real server (``python -m supervisor mcp``) in a real git repo and talks
to it with ``mcp.ClientSession`` over ``mcp.client.stdio``: ``initialize`` (the digest as
``instructions``), ``tools/list``, ``tools/call``, ``resources/list`` and ``resources/read``.
"""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("mcp", reason="the MCP SDK is in the test extra: pip install -e '.[test]'")

import anyio  # noqa: E402
from mcp import ClientSession, StdioServerParameters  # noqa: E402
from mcp.client.stdio import stdio_client  # noqa: E402

from supervisor.commands import mcp as server  # noqa: E402

MARK_TOML = 'budget = 20\n[[stages]]\nname = "m"\nrun = ["/bin/echo", "MCP-MARK"]\n'


def _session(project: Path, body: Callable[[ClientSession, Any], Awaitable[None]],
             *args: str) -> None:
    params = StdioServerParameters(command=sys.executable,
                                   args=["-m", "supervisor", "mcp", *args], cwd=str(project),
                                   env=dict(os.environ))

    async def run() -> None:
        with open(os.devnull, "w") as errlog:
            async with stdio_client(params, errlog=errlog) as (read, write):
                async with ClientSession(read, write) as session:
                    await body(session, await session.initialize())

    anyio.run(run)


@pytest.fixture
def project(git_repo: Path) -> Path:
    (git_repo / "supervise.toml").write_text(MARK_TOML)
    return git_repo


def test_sdk_client_gets_instructions_tools_and_resources(project: Path) -> None:
    (project / "AGENTS.md").write_text("rule ONE\u200b\u202ehidden\n")  # hidden text is cleaned
    (project / ".remember").mkdir()
    (project / ".remember" / "core.md").write_text("remember THIS\n")
    seen: dict[str, Any] = {}

    async def body(session: ClientSession, init: Any) -> None:
        seen["instructions"] = init.instructions
        seen["tools"] = {t.name: t for t in (await session.list_tools()).tools}
        seen["digest"] = (await session.call_tool("digest", {})).content[0].text
        listed = (await session.list_resources()).resources
        seen["resources"] = {str(r.uri): r for r in listed}
        seen["agents"] = (await session.read_resource("watchkeeper://instructions/AGENTS.md")).contents[0].text
        seen["memory"] = (await session.read_resource("watchkeeper://memory/core.md")).contents[0].text

    _session(project, body)
    assert "MCP-MARK" in seen["instructions"]
    assert set(seen["tools"]) == {"digest", "deferred"}
    assert "MCP-MARK" in seen["digest"]
    assert set(seen["resources"]) == {"watchkeeper://instructions/AGENTS.md", "watchkeeper://memory/core.md"}
    assert seen["agents"].startswith("rule ONE") and "\u202e" not in seen["agents"] and "\u200b" not in seen["agents"]
    assert seen["memory"] == "remember THIS\n"
    # the instructions reached the client: the start is recorded as delivered
    assert (project / ".supervise" / "complete.json").exists()


def test_a_digest_over_the_instructions_cap_says_so_and_names_the_tool(project: Path) -> None:
    (project / "supervise.toml").write_text(
        MARK_TOML + '[[stages]]\nname = "big"\nrun = ["python3", "-c", "print(\'BIG-END\' + \'y\' * 5000)"]\n')
    seen: dict[str, str] = {}

    async def body(session: ClientSession, init: Any) -> None:
        seen["instructions"] = init.instructions
        seen["whole"] = (await session.call_tool("digest", {})).content[0].text

    _session(project, body)
    text = seen["instructions"]
    assert len(text) <= server.INSTRUCTIONS_CAP
    assert "call the `digest` tool" in text.splitlines()[0] and "MCP-MARK" in text
    assert "BIG-END" not in text and "BIG-END" in seen["whole"]


def test_deferred_tool_delivers_a_result_once(project: Path) -> None:
    from helpers import write_result

    with (project / "supervise.toml").open("a") as toml:  # never run by these sessions
        toml.write('[[stages]]\nname = "net"\nrun = ["true"]\ndeferred = true\n'
                   'when = { source = ["clear"] }\n')
    write_result(project / ".supervise" / "deferred" / "net", "1-abc",
                 {"title": "net", "status": "ok", "exit_code": 0, "seconds": 0.1,
                  "started": 1.0, "finished": 2.0, "output": "NET-RESULT"})
    seen: list[str] = []

    async def body(session: ClientSession, init: Any) -> None:
        for _ in range(2):
            seen.append((await session.call_tool("deferred", {})).content[0].text)

    _session(project, body)
    assert "NET-RESULT" in seen[0]
    assert "NET-RESULT" not in seen[1] and "No deferred result" in seen[1]


def test_instructions_not_acknowledged_record_no_delivery(project: Path) -> None:
    """A client that read the initialize result but never sent ``initialized`` (nor any
    request) did not prove it got it: the completion record stays unwritten."""
    request = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {},
        "clientInfo": {"name": "t", "version": "1"}}}) + "\n"
    proc = subprocess.run([sys.executable, "-m", "supervisor", "mcp"], cwd=project,
                          input=request.encode(), capture_output=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert "MCP-MARK" in json.loads(proc.stdout)["result"]["instructions"]
    assert not (project / ".supervise" / "complete.json").exists()


def test_the_hook_registered_too_makes_the_instructions_stand_down(project: Path) -> None:
    assert subprocess.run([sys.executable, "-m", "supervisor", "install", "claude"], cwd=project,
                          capture_output=True, timeout=60).returncode == 0
    seen: dict[str, str] = {}

    async def body(session: ClientSession, init: Any) -> None:
        seen["instructions"] = init.instructions
        seen["digest"] = (await session.call_tool("digest", {})).content[0].text

    _session(project, body, "--for", "claude")
    assert "MCP-MARK" not in seen["instructions"]
    assert "Claude Code hook registered in" in seen["instructions"] and "`digest` tool" in seen["instructions"]
    assert "MCP-MARK" in seen["digest"]  # the tool still fetches it


INITIALIZE = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
    "protocolVersion": "2025-06-18", "capabilities": {},
    "clientInfo": {"name": "t", "version": "1"}}}) + "\n"


def _site(folder: Path, code: str) -> dict[str, str]:
    """The environment of a server whose interpreter runs ``code`` first (a
    ``sitecustomize`` module on ``PYTHONPATH``)."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "sitecustomize.py").write_text(code)
    return {**os.environ, "PYTHONPATH": str(folder)}


def test_without_the_extra_one_line_says_how_to_install_it(project: Path, tmp_path: Path) -> None:
    """Not installed (the import system finds no ``mcp``): one line, exit 1, no digest run."""
    env = _site(tmp_path / "absent", "import sys\nsys.modules['mcp'] = None\n")
    proc = subprocess.run([sys.executable, "-m", "supervisor", "mcp"], cwd=project, env=env,
                          capture_output=True, text=True, timeout=60, input=INITIALIZE)
    assert proc.returncode == 1 and proc.stdout == ""
    [line] = proc.stderr.strip().splitlines()
    assert "watchkeeper[mcp]" in line
    assert not (project / ".supervise" / "last-digest.json").exists()
    # The fix is a command for this very environment: its interpreter's pip and the extra's
    # requirement from the package's metadata (no package name an index may not hold).
    command = shlex.split(line.rpartition("extra): ")[2])
    assert command[:4] == [sys.executable, "-m", "pip", "install"], line
    assert command[4].startswith("mcp"), line


def test_the_command_hint_names_this_installs_own_checkout() -> None:
    """``doctor`` and ``install mcp`` tell a user whose clients cannot find ``supervise`` on
    PATH to pipx-install it with the extra: from the folder this install came from (the
    test environment is an editable install of this checkout), never an index's package of
    that name. Fails on the old code (``pipx install 'watchkeeper[mcp]'``)."""
    from supervisor.commands.mcp import command_install_hint

    root = Path(__file__).resolve().parents[1]
    assert shlex.split(command_install_hint()) == ["pipx", "install", f"{root}[mcp]"]


def test_an_sdk_that_fails_to_import_says_how_to_install_it(project: Path, tmp_path: Path) -> None:
    """Found but broken: ``initialize`` was answered before the import; the first message
    that needs the SDK (a tool call) imports it, then one line, exit 1."""
    shadow = tmp_path / "no-mcp"
    (shadow / "mcp").mkdir(parents=True)
    (shadow / "mcp" / "__init__.py").write_text("raise ImportError('not installed')\n")
    call = json.dumps({"jsonrpc": "2.0", "id": 2, "method": "tools/call",
                       "params": {"name": "digest", "arguments": {}}}) + "\n"
    proc = subprocess.run([sys.executable, "-m", "supervisor", "mcp"], cwd=project,
                          env={**os.environ, "PYTHONPATH": str(shadow)}, capture_output=True,
                          text=True, timeout=60, input=INITIALIZE + call)
    assert proc.returncode == 1
    assert "MCP-MARK" in json.loads(proc.stdout)["result"]["instructions"]
    [line] = proc.stderr.strip().splitlines()
    assert "watchkeeper[mcp]" in line


def _answer(proc: subprocess.Popen[bytes], waiting: Path | None = None) -> dict[str, Any]:
    """The server's next message; with ``waiting``, fail as soon as the server started the
    SDK's import (``waiting`` exists) with no message written before it."""
    import select

    assert proc.stdout is not None
    while waiting is not None and not select.select([proc.stdout], [], [], 0.02)[0]:
        assert not waiting.exists(), "the server waited for the SDK's import to answer"
        assert proc.poll() is None, "the server ended"
    line = proc.stdout.readline()
    assert line, "the server closed its stdout"
    return dict(json.loads(line))


def _send(proc: subprocess.Popen[bytes], *messages: dict[str, Any]) -> None:
    assert proc.stdin is not None
    proc.stdin.write(b"".join(json.dumps({"jsonrpc": "2.0", **m}).encode() + b"\n"
                              for m in messages))
    proc.stdin.flush()


def _end(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        proc.kill()
        proc.wait()
    for stream in (proc.stdin, proc.stdout, proc.stderr):
        if stream is not None and not stream.closed:
            stream.close()


def _gated_server(project: Path, tmp_path: Path) -> tuple[subprocess.Popen[bytes], Path]:
    from helpers import sdk_import_gated

    gate = tmp_path / "gate"
    env = sdk_import_gated(tmp_path / "site", gate, dict(os.environ))
    return subprocess.Popen([sys.executable, "-m", "supervisor", "mcp"], cwd=project, env=env,
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, bufsize=0), gate  # select sees every byte


DISCOVER = {"id": "probe-1", "method": "server/discover", "params": {"_meta": {
    "io.modelcontextprotocol/protocolVersion": "2026-07-28"}}}


def test_the_handshake_and_listings_are_answered_before_the_sdk_is_imported(
        project: Path, tmp_path: Path) -> None:
    """The SDK's import took 13.4 s of wall time at load 21 on a 2-core host, and Claude Code
    counts a server ready only once it answered the handshake and both listings (5 s in
    ``-p``). With the SDK's import held at a gate, the server answers Claude's
    ``server/discover`` probe ("method not found": use ``initialize``), ``initialize`` with
    the digest, ``ping``, ``tools/list`` and ``resources/list``, never reaching the gate (the
    old code imported the SDK first and answered nothing). The first tool call then imports
    the SDK, which serves it; the SDK's own answer to the replayed ``initialize`` agreed with
    the one sent (nothing on stderr)."""
    (project / "AGENTS.md").write_text("rule ONE\n")
    proc, gate = _gated_server(project, tmp_path)
    waiting = tmp_path / "gate.waiting"
    try:
        _send(proc, DISCOVER)
        refused = _answer(proc, waiting)
        assert refused["id"] == "probe-1" and refused["error"]["code"] == -32601
        _send(proc, json.loads(INITIALIZE))
        answer = _answer(proc, waiting)
        assert answer["id"] == 1 and answer["result"]["protocolVersion"] == "2025-06-18"
        assert "MCP-MARK" in answer["result"]["instructions"]
        assert answer["result"]["serverInfo"]["name"] == server.SERVER_NAME
        assert not (project / ".supervise" / "complete.json").exists()  # not acknowledged yet
        _send(proc, {"method": "notifications/initialized"}, {"id": 2, "method": "tools/list"},
              {"id": 3, "method": "resources/list"}, {"id": 4, "method": "ping"})
        assert {t["name"] for t in _answer(proc, waiting)["result"]["tools"]} == {"digest", "deferred"}
        assert [r["uri"] for r in _answer(proc, waiting)["result"]["resources"]] == [
            "watchkeeper://instructions/AGENTS.md"]
        assert _answer(proc, waiting) == {"jsonrpc": "2.0", "id": 4, "result": {}}
        assert (project / ".supervise" / "complete.json").exists()  # the client spoke
        assert not waiting.exists()
        _send(proc, {"id": 5, "method": "tools/call", "params": {"name": "digest", "arguments": {}}})
        while not waiting.exists():  # the tool call needs the SDK: its import starts
            assert proc.poll() is None, "the server ended"
            time.sleep(0.01)
        gate.touch()
        called = _answer(proc)
        assert called["id"] == 5 and "MCP-MARK" in called["result"]["content"][0]["text"]
        assert proc.stdin is not None
        proc.stdin.close()
        assert proc.wait(timeout=30) == 0
        assert proc.stderr is not None
        assert proc.stderr.read() == b""
    finally:
        gate.touch()
        _end(proc)


def test_the_listings_before_the_sdk_are_the_sdks_own(project: Path, tmp_path: Path) -> None:
    """The same session's listings answered before the SDK's import and by the SDK (after a
    resource read handed it the session) are the same JSON."""
    (project / "AGENTS.md").write_text("rule ONE\n")
    (project / ".remember").mkdir()
    (project / ".remember" / "core.md").write_text("remember THIS\n")
    listings = [{"id": 2, "method": "tools/list"}, {"id": 3, "method": "resources/list"}]
    seen = []
    for first in ([], [{"id": 9, "method": "resources/read",
                        "params": {"uri": "watchkeeper://memory/core.md"}}]):
        proc = subprocess.Popen([sys.executable, "-m", "supervisor", "mcp"], cwd=project,
                                stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE)
        try:
            _send(proc, json.loads(INITIALIZE), {"method": "notifications/initialized"},
                  *first, *listings)
            answers = {a["id"]: a for a in (_answer(proc) for _ in range(2 + len(first) + 1))}
            assert proc.stdin is not None
            proc.stdin.close()
            assert proc.wait(timeout=30) == 0
            assert proc.stderr is not None and proc.stderr.read() == b""
        finally:
            _end(proc)
        if first:
            assert answers[9]["result"]["contents"][0]["text"] == "remember THIS\n"
        seen.append([answers[1], answers[2], answers[3]])
    assert seen[0] == seen[1]


@pytest.mark.parametrize("requested", ["2024-11-05", "2025-11-25", "2026-07-28", "1999-01-01"])
def test_the_early_answer_is_the_sdks_own(requested: str) -> None:
    """For every version a client may ask, the ``initialize`` answer sent before the SDK's
    import is the one the SDK's server gives with the same options (its negotiation, our
    capabilities)."""
    from mcp import types
    from mcp.server import Server
    from mcp.server.models import InitializationOptions
    from mcp.server.runner import ServerRunner

    line = json.dumps({"jsonrpc": "2.0", "id": 7, "method": "initialize", "params": {
        "protocolVersion": requested, "capabilities": {},
        "clientInfo": {"name": "t", "version": "1"}}}).encode()
    ident, ours = server.early_answer(line, "TEXT", "9.9", server.handshake_versions())
    options = InitializationOptions(server_name=server.SERVER_NAME, server_version="9.9",
                                    instructions="TEXT", capabilities=types.ServerCapabilities
                                    .model_validate(server.CAPABILITIES))
    runner = ServerRunner(Server(server.SERVER_NAME), None, None,  # type: ignore[arg-type]
                          init_options=options)
    sdk = runner._handle_initialize(json.loads(line)["params"])
    assert ident == 7
    assert ours == sdk.model_dump(mode="json", by_alias=True, exclude_none=True)


@pytest.mark.parametrize("first", [
    b'{"jsonrpc":"2.0","id":1,"method":"ping"}\n', b'not json\n',
    b'{"jsonrpc":"2.0","id":true,"method":"initialize","params":{"protocolVersion":"x"}}\n',
    b'{"jsonrpc":"2.0","id":1,"method":"initialize","params":{}}\n'])
def test_any_other_first_message_is_left_to_the_sdk(first: bytes) -> None:
    assert server.early_answer(first, "TEXT", "1", server.handshake_versions()) is None


def test_the_sdks_answer_to_the_replayed_initialize_is_dropped(capsys: pytest.CaptureFixture[str]) -> None:
    """Only the early answer reaches the client; an SDK answer that differs is said on
    stderr in one line, naming the fields."""
    read_fd, write_fd = os.pipe()
    deliveries = server._Deliveries(None)

    async def talk() -> None:
        wire = server._Wire(write_fd, deliveries, (1, {"protocolVersion": "a", "x": 1}))
        await wire.write('{"jsonrpc":"2.0","id":1,"result":{"protocolVersion":"b","x":1}}\n')
        await wire.flush()
        await wire.write('{"jsonrpc":"2.0","id":1,"result":{}}\n')  # a later id 1 is sent
        await wire.flush()

    with os.fdopen(read_fd, "rb") as got:
        try:
            anyio.run(talk)
        finally:
            os.close(write_fd)
        assert got.read() == b'{"jsonrpc":"2.0","id":1,"result":{}}\n'
    [line] = capsys.readouterr().err.strip().splitlines()
    assert "differs in protocolVersion" in line


def test_term_ends_the_server_and_rolls_back_what_was_not_acknowledged(project: Path) -> None:
    """The client is still connected (stdin open) but never sent ``initialized``: TERM ends
    the server with 143 and no record says the instructions were delivered."""
    import signal

    request = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {},
        "clientInfo": {"name": "t", "version": "1"}}}) + "\n"
    proc = subprocess.Popen([sys.executable, "-m", "supervisor", "mcp"], cwd=project,
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        assert proc.stdin is not None and proc.stdout is not None
        proc.stdin.write(request.encode())
        proc.stdin.flush()
        assert "MCP-MARK" in json.loads(proc.stdout.readline())["result"]["instructions"]
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == 128 + signal.SIGTERM
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        for stream in (proc.stdin, proc.stdout, proc.stderr):
            if stream is not None:
                stream.close()
    assert not (project / ".supervise" / "complete.json").exists()


def test_a_resource_behind_a_linked_folder_is_refused_by_the_door(project: Path,
                                                                  tmp_path: Path) -> None:
    """``.claude -> /elsewhere``: ``.claude/CLAUDE.md`` is listed (a regular file) but lies
    outside the project, so the one door refuses it; the old guarded small-file read
    returned the outside file's text. A memory file that is a link is refused too."""
    from supervisor._errors import ConfigError

    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "CLAUDE.md").write_text("OUTSIDE-SECRET\n")
    (outside / "core.md").write_text("OUTSIDE-MEMORY\n")
    (project / ".claude").symlink_to(outside)
    (project / ".remember").mkdir()
    (project / ".remember" / "core.md").symlink_to(outside / "core.md")
    (project / "AGENTS.md").write_text("inside \u200bnote\n")
    with pytest.raises(ConfigError) as refused:
        server.read_resource_text(project, "watchkeeper://instructions/.claude/CLAUDE.md")
    assert "OUTSIDE-SECRET" not in str(refused.value)
    try:
        text = server.read_resource_text(project, "watchkeeper://memory/core.md")
    except (ConfigError, ValueError):  # refused, or not listed at all: never its text
        text = ""
    assert "OUTSIDE-MEMORY" not in text
    inside = server.read_resource_text(project, "watchkeeper://instructions/AGENTS.md")
    assert inside.startswith("inside note") and "1 hidden character" in inside


def _peak_rss(argv: list[str], cwd: Path, stdin: Any, limit: int) -> tuple[subprocess.CompletedProcess[str], int]:
    """Run ``argv`` to its end, sampling its resident set with psutil; ``(result, peak bytes)``.
    A process past ``limit`` bytes is killed (the result then has its kill status)."""
    import psutil

    proc = subprocess.Popen(argv, cwd=cwd, stdin=stdin, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    peak = 0
    watched = psutil.Process(proc.pid)
    try:
        while proc.poll() is None:
            try:
                peak = max(peak, watched.memory_info().rss)
            except psutil.NoSuchProcess:
                break
            if peak > limit:
                proc.kill()
                break
            try:
                proc.wait(timeout=0.005)
            except subprocess.TimeoutExpired:
                pass
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    return subprocess.CompletedProcess(argv, proc.returncode, out, err), peak


def test_a_line_without_end_on_stdin_is_bounded_and_ends_the_server(project: Path) -> None:
    """``supervise mcp < /dev/zero``: the SDK's reader kept the endless line until the
    machine ran out of memory; now, past ``LINE_CAP`` bytes, one line on stderr and exit 1.
    The peak resident set (psutil) stays within the cap's few copies of a server that only
    read EOF; the old code passed the test's 512 MiB limit and was killed."""
    argv = [sys.executable, "-m", "supervisor", "mcp"]
    quiet, base = _peak_rss(argv, project, subprocess.DEVNULL, 512 << 20)
    assert quiet.returncode == 0, quiet.stderr
    with open("/dev/zero", "rb") as zero:
        fed, peak = _peak_rss(argv, project, zero, 512 << 20)
    assert fed.returncode == 1, (fed.returncode, peak)
    [line] = fed.stderr.strip().splitlines()
    assert f"{server.LINE_CAP:,} bytes without a line end" in line
    assert peak < base + 8 * server.LINE_CAP, (peak, base)


def test_a_message_split_across_reads_and_the_last_line_without_end_are_read() -> None:
    """The bounded reader gives the SDK the same lines its own reader did: a message split
    across reads, two in one read, and a last one without its line end at EOF."""
    read_fd, write_fd = os.pipe()
    os.write(write_fd, b'{"a": 1}\n{"b"')
    os.write(write_fd, b': 2}\n{"c": 3}\n{"d": 4}')
    os.close(write_fd)

    async def collect() -> list[str]:
        return [line async for line in server._Lines(read_fd, cap=64)]

    try:
        assert anyio.run(collect) == ['{"a": 1}\n', '{"b": 2}\n', '{"c": 3}\n', '{"d": 4}']
    finally:
        os.close(read_fd)


def test_the_digest_tool_under_a_harness_process_gives_the_digest_after_the_instructions(
        project: Path, tmp_path: Path) -> None:
    """Under a real client the server and each tool call's child share the client process
    (found by the ancestry walk) and the empty session id, so the ``digest`` tool's start
    repeated the instructions' one within the repeat window and got no text: real Codex
    0.171.0 gave the model an empty tool result. Here the SDK client runs below a process
    named ``codex`` (a copied shell, as the session tests' fake harness)."""
    from fake_harness import harness_binary

    client = tmp_path / "client.py"
    client.write_text(
        "import json, os, sys\n"
        "import anyio\n"
        "from mcp import ClientSession, StdioServerParameters\n"
        "from mcp.client.stdio import stdio_client\n"
        "async def main():\n"
        "    params = StdioServerParameters(command=sys.executable, args=['-m', 'supervisor', "
        "'mcp', '--for', 'codex'], cwd=os.getcwd(), env=dict(os.environ))\n"
        "    with open(os.devnull, 'w') as errlog:\n"
        "        async with stdio_client(params, errlog=errlog) as (read, write):\n"
        "            async with ClientSession(read, write) as session:\n"
        "                init = await session.initialize()\n"
        "                tool = await session.call_tool('digest', {})\n"
        "                again = await session.call_tool('digest', {'reemit': True})\n"
        "                again2 = await session.call_tool('digest', {'reemit': True})\n"
        "                print(json.dumps([init.instructions, tool.content[0].text,\n"
        "                                  again.content[0].text, again2.content[0].text]))\n"
        "anyio.run(main)\n")
    codex = harness_binary(tmp_path / "bin", "codex")
    proc = subprocess.run([str(codex), "-c", f"{shlex.join([sys.executable, str(client)])}; :"], cwd=project,
                          capture_output=True, text=True, timeout=50, stdin=subprocess.DEVNULL)
    assert proc.returncode == 0, proc.stderr
    instructions, tool, reemit, reemit2 = json.loads(proc.stdout)
    assert "MCP-MARK" in instructions
    assert "MCP-MARK" in tool
    assert reemit.strip() and reemit2.strip()


def test_the_tools_are_marked_read_only(project: Path) -> None:
    """Codex 0.171.0 runs an MCP tool unasked only when it is marked read-only: without the
    hint, `codex exec` answered the model "MCP tool call requires approval, but approval
    policy is never". Neither tool changes the user's files or reaches the network."""
    seen: dict[str, Any] = {}

    async def body(session: ClientSession, init: Any) -> None:
        seen.update({t.name: t.annotations for t in (await session.list_tools()).tools})

    _session(project, body)
    for name in ("digest", "deferred"):
        assert seen[name] is not None and seen[name].read_only_hint is True, name
        assert seen[name].destructive_hint is False and seen[name].open_world_hint is False
