"""``supervise mcp`` in a real harness CLI, offline against the fake model server: Claude Code
2.1.197 starts the server that ``supervise install mcp --for claude`` registered in the
project's ``.mcp.json`` (in ``-p`` mode without an approval prompt) and puts its
``instructions`` (the digest) into the model request, under "MCP Server Instructions"."""

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
