"""``supervise mcp`` in real harness CLIs, offline against the fake model server: each starts the
server that ``supervise install mcp --for CLIENT`` registered in the project's own file and
puts its ``instructions`` (the digest) into the model request; Gemini CLI and Codex also run
the model's call of the ``digest`` tool and return its text (the fake model calls a tool on a
``FAKE_TOOL <name>`` prompt). Where each client puts them: docs/mcp.md."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from conftest import FakeModel, Project, harness_bin, run_harness
from test_claude import claude_env
from test_harness_plugins import on_path

pytestmark = pytest.mark.e2e


def test_claude_carries_the_mcp_instructions_into_the_model_request(project: Project,
                                                                    fake_model: FakeModel) -> None:
    pytest.importorskip("mcp", reason="the MCP SDK is in the test extra")
    claude = harness_bin("claude")
    # -p starts its first request without waiting for MCP servers unless told to (2.1.197:
    # "servers running fully async (nonblocking)"); an interactive session is connected by the
    # time its user types
    env = on_path(claude_env(fake_model, MCP_CONNECTION_NONBLOCKING="0"))
    proc = subprocess.run([sys.executable, "-m", "supervisor", "install", "mcp", "--for", "claude"],
                          cwd=project.path, env=env, capture_output=True, text=True, timeout=60,
                          stdin=subprocess.DEVNULL)
    assert proc.returncode == 0, proc.stderr
    assert json.loads((project.path / ".mcp.json").read_text())["mcpServers"]["watchkeeper"]
    run = run_harness([claude, "-p", "turn 1",
                       "--output-format", "json"], project.path, env)
    assert run.returncode == 0, run.stderr[-2000:]
    assert fake_model.seen(f"{project.mark}-startup-full")
    # it came through MCP (no hook is registered), and once
    assert not (project.path / ".claude").exists()
    body = fake_model.bodies()[-1]
    assert body.count(f"{project.mark}-startup-full") == 1
    assert "## watchkeeper" in body
    # the hook registered too: one channel stands down, the digest arrives once
    project.install("claude")
    since = fake_model.count()
    run = run_harness([claude, "-p", "turn 2", "--output-format", "json"], project.path, env)
    assert run.returncode == 0, run.stderr[-2000:]
    body = fake_model.bodies(since)[-1]
    assert body.count(f"{project.mark}-startup-full") == 1
    assert "watchkeeper: this project's session-start digest comes from" in body


def test_claude_gets_the_instructions_while_the_sdk_import_is_held(
        project: Project, fake_model: FakeModel, tmp_path) -> None:
    """The MCP SDK's import took 13.4 s of wall time at load 21 on the 2-core test host, and
    Claude Code 2.1.332 (``-p``) waits 5 s for a server to answer the handshake and its
    ``tools/list`` and ``resources/list``, then sends its first request without the server's
    instructions: the e2e above failed at load 16-68. Here the SDK's import is held at a gate
    for the whole session: the server answers Claude's ``server/discover`` probe, the
    ``initialize`` handshake and the listings before the SDK is imported, and the digest
    reaches the model; a session without a tool call never imports the SDK at all. The old
    server imported the SDK first and was not ready: the request lacked the digest."""
    from helpers import sdk_import_gated

    pytest.importorskip("mcp", reason="the MCP SDK is in the test extra")
    claude = harness_bin("claude")
    gate = tmp_path / "gate"
    env = sdk_import_gated(tmp_path / "site", gate, on_path(claude_env(
        fake_model, MCP_CONNECTION_NONBLOCKING="0")))
    _install_mcp(project, "claude", env)
    try:
        run = run_harness([claude, "-p", "turn 1", "--output-format", "json"], project.path, env)
    finally:
        gate.touch()  # a server still waiting at the gate may go on and end
    assert run.returncode == 0, run.stderr[-2000:]
    [body] = fake_model.bodies()
    assert body.count(f"{project.mark}-startup-full") == 1
    assert "## watchkeeper" in body
    assert not (tmp_path / "gate.waiting").exists(), "the SDK was imported"


def _install_mcp(project: Project, client: str, env: dict[str, str]) -> None:
    proc = subprocess.run([sys.executable, "-m", "supervisor", "install", "mcp", "--for", client],
                          cwd=project.path, env=env, capture_output=True, text=True, timeout=60,
                          stdin=subprocess.DEVNULL)
    assert proc.returncode == 0, proc.stderr


def test_gemini_carries_the_instructions_and_a_tool_result(project: Project,
                                                          fake_model: FakeModel) -> None:
    """Gemini CLI 0.61.0 (``-p``) starts the server of the project's ``.gemini/settings.json``
    and puts the instructions into the first request's context, once, as "instructions
    provided by the tool server 'watchkeeper'"; the model's call of ``mcp_watchkeeper_digest``
    returns the digest to it. Without ``"trust": true`` in our entry, ``-p`` offers the model
    none of the server's tools ("Tool ... not found"); with the hook registered too, the
    digest arrives once."""
    import os

    from conftest import clean_env
    from test_harness_plugins import on_path

    pytest.importorskip("mcp", reason="the MCP SDK is in the test extra")
    gemini = harness_bin("gemini")
    home = os.environ["HOME"]  # isolated per test by the root conftest
    os.makedirs(f"{home}/.gemini", exist_ok=True)
    with open(f"{home}/.gemini/settings.json", "w") as f:
        json.dump({"security": {"auth": {"selectedType": "gemini-api-key"}, "folderTrust": {"enabled": False}},
                   "privacy": {"usageStatisticsEnabled": False}, "telemetry": {"enabled": False},
                   "general": {"disableAutoUpdate": True, "disableUpdateNag": True}}, f)
    env = on_path(clean_env(GEMINI_API_KEY="dummy", GOOGLE_GEMINI_BASE_URL=fake_model.url))
    _install_mcp(project, "gemini", env)
    entry = json.loads((project.path / ".gemini" / "settings.json").read_text())["mcpServers"]["watchkeeper"]
    assert entry["trust"] is True
    run = run_harness([gemini, "-m", "fake-model", "-p", "FAKE_TOOL mcp_watchkeeper_digest"],
                      project.path, env)
    assert run.returncode == 0, run.stderr[-2000:]
    first, *later = fake_model.requests()
    body = json.dumps(first["body"], ensure_ascii=False)
    assert body.count(f"{project.mark}-startup-full") == 1
    assert "instructions provided by the tool server 'watchkeeper'" in body
    results = [part["functionResponse"] for request in later
               for content in request["body"].get("contents", [])
               for part in content.get("parts", []) if "functionResponse" in part]
    assert results, "the model's tool call got no answer"
    assert f"{project.mark}-startup-full" in json.dumps(results[-1]), results[-1]
    # the hook registered too: the server stands down, the digest arrives once
    project.install("gemini")
    since = fake_model.count()
    run = run_harness([gemini, "-m", "fake-model", "-p", "turn 2"], project.path, env)
    assert run.returncode == 0, run.stderr[-2000:]
    body = fake_model.bodies(since)[0]
    assert body.count(f"{project.mark}-startup-full") == 1
    assert "watchkeeper: this project's session-start digest comes from" in body


def test_codex_carries_the_instructions_and_a_tool_result(project: Project, fake_model: FakeModel,
                                                         tmp_path) -> None:
    """Codex 0.171.0 (``codex exec``, a trusted project) starts the server of the project's
    ``.codex/config.toml``: the instructions reach the model as the description of the
    server's tool namespace ``mcp__watchkeeper``, and the model's call of its ``digest`` tool
    returns the digest. ``codex exec`` waits for an optional server about 1 s only
    (``mcp_optional_startup_grace_ms``), less than our server takes: install sets it. The
    read-only hint lets the tool run under ``approval: never``. With the hook registered too,
    the digest arrives once."""
    from conftest import clean_env
    from test_harness_plugins import on_path

    pytest.importorskip("mcp", reason="the MCP SDK is in the test extra")
    codex = harness_bin("codex")
    home = tmp_path / "codex-home"
    home.mkdir()
    (home / "config.toml").write_text(
        'model = "fake-model"\nmodel_provider = "fake"\ncheck_for_update_on_startup = false\n\n'
        f'[model_providers.fake]\nname = "fake"\nbase_url = "{fake_model.url}/v1"\n'
        'wire_api = "responses"\nenv_key = "FAKE_API_KEY"\n\n'
        f'[projects."{project.path}"]\ntrust_level = "trusted"\n\n[analytics]\nenabled = false\n')
    env = on_path(clean_env(CODEX_HOME=str(home), FAKE_API_KEY="dummy"))
    _install_mcp(project, "codex", env)
    assert "mcp_optional_startup_grace_ms = " in (project.path / ".codex" / "config.toml").read_text()
    argv = [codex, "exec", "--dangerously-bypass-hook-trust", "--skip-git-repo-check"]
    run = run_harness([*argv, "FAKE_TOOL mcp__watchkeeper.digest"], project.path, env)
    assert run.returncode == 0, run.stderr[-2000:]
    first, *later = fake_model.requests()
    spaces = [t for t in first["body"]["tools"] if t.get("name") == "mcp__watchkeeper"]
    assert spaces, "the first request offers no tool of the server: it was not waited for"
    assert f"{project.mark}-startup-full" in spaces[0]["description"]
    assert json.dumps(first["body"]).count(f"{project.mark}-startup-full") == 1
    outputs = [item for request in later for item in request["body"].get("input", [])
               if item.get("type") == "function_call_output"]
    assert outputs, "the model's tool call got no answer"
    assert f"{project.mark}-startup-full" in json.dumps(outputs[-1]), outputs[-1]
    # the hook registered too: the server stands down, the digest arrives once
    project.install("codex")
    since = fake_model.count()
    run = run_harness([*argv, "turn 2"], project.path, env)
    assert run.returncode == 0, run.stderr[-2000:]
    body = fake_model.bodies(since)[0]
    assert body.count(f"{project.mark}-startup-full") == 1
    assert "watchkeeper: this project's session-start digest comes from" in body
