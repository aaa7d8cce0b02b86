"""The harness table (``supervisor/_harnesses.py``): every row is served, every list derives.

A harness is one row plus its adapter module; the checks here prove the second half of that
sentence both ways: each row has what its kind needs (an adapter, a bridge, a loader rule),
and a row added to the table reaches every list that names harnesses without another edit.
"""

from __future__ import annotations

import subprocess
import sys
from importlib import import_module
from pathlib import Path

import pytest

from supervisor._harnesses import BRIDGES, BY_NAME, HOOKS, KINDS, ROWS, label, names

ROOT = Path(__file__).resolve().parent.parent


def test_names_are_unique_and_kinds_known() -> None:
    assert len(BY_NAME) == len(ROWS)
    assert all(row.kind in KINDS for row in ROWS)
    assert set(HOOKS) | set(BRIDGES) <= set(names())
    processes = [p for row in ROWS for p in row.processes]
    packages = [p for row in ROWS for p in row.packages]
    assert len(set(processes)) == len(processes) and len(set(packages)) == len(packages)


@pytest.mark.parametrize("name", names())
def test_every_row_has_its_module(name: str) -> None:
    """A hook or nudge row has ``adapters/<name>.py`` with an ``ADAPTER`` on that row; a bridge
    row has a ``BRIDGE`` there whose entry ships in the package."""
    row = BY_NAME[name]
    module = import_module(f"supervisor.adapters.{name}") if row.kind != "mcp" else None
    if row.kind in ("hook", "nudge"):
        assert module.ADAPTER.row is row
        assert module.ADAPTER.tier == ("nudge" if row.kind == "nudge" else "run")
    elif row.kind == "bridge":
        assert module.BRIDGE.row is row
        assert (ROOT / "supervisor" / "bridges" / module.BRIDGE.package_entry).is_file()
    else:  # mcp: served by `supervise mcp` alone, no module of its own
        assert row.kind == "mcp" and row.mcp_files and row.mcp_format


def test_every_loader_rule_exists() -> None:
    """``loads`` names a rule of the instructions stage (or none)."""
    sys.path.insert(0, str(ROOT / "stages"))
    try:
        from instructions.discover import LOADERS
    finally:
        sys.path.remove(str(ROOT / "stages"))
    assert {row.loads for row in ROWS if row.loads} <= set(LOADERS)


def test_label_falls_back_to_the_name() -> None:
    assert label("claude") == "Claude Code"
    assert label("nosuch") == "nosuch" and label("", "the harness") == "the harness"


_NEW_ROW = r"""
import sys, types
from supervisor import _harnesses as h

new = h.Harness("newone", "New One", "hook", processes=("newone-cli",),
                packages=("@example/newone",), project=".newone/hooks.json", user="hooks.json",
                user_dir=".newone", user_dir_env="NEWONE_HOME", prompt_event="OnPrompt",
                loads="codex", early_exit=True, timeout_unit="ms",
                mcp_files=(("project", ".newone/mcp.json"), ("user", "mcp.json")),
                mcp_format="json")
h.ROWS = (*h.ROWS, new)
h.BY_NAME["newone"] = new
h.HOOKS = h.names("hook", "nudge")
h.INSTALLABLE = h.names("hook", "nudge", "bridge")
h.MCP_CLIENTS = tuple(row.name for row in h.ROWS if row.mcp_files)

from supervisor.adapters._base import Adapter
adapter = types.ModuleType("supervisor.adapters.newone")
adapter.ADAPTER = Adapter(row=new, shape="groups", envelope="hook-specific")
sys.modules[adapter.__name__] = adapter

from supervisor.adapters import ADAPTERS, render
from supervisor.commands.hook import help_text
from supervisor.commands.install import hook_command, entries, parser
from supervisor.config._plan import WHEN_HARNESSES
from supervisor.session._ancestry import match_harness

assert "newone" in ADAPTERS and ADAPTERS["newone"] is adapter.ADAPTER, list(ADAPTERS)
assert "newone" in WHEN_HARNESSES, WHEN_HARNESSES
assert match_harness("newone-cli", ["newone-cli"]) == "newone"
assert match_harness("node", ["node", "/x/node_modules/@example/newone/cli.js"]) == "newone"
assert "newone" in help_text()
assert "newone" in parser("supervise install", "").format_help()
import shlex
assert shlex.split(hook_command(ADAPTERS["newone"], "prompt"))[2] == "--early-exit"
assert [e.timeout for e in entries(ADAPTERS["newone"], 60)] == [120_000, 30_000]
assert b"OnPrompt" in render("newone", "x", state_dir="/nonexistent", kind="prompt")

import os
from pathlib import Path
from supervisor.commands import _mcp_clients, mcp
assert "newone" in _mcp_clients.CLIENTS
assert parser("supervise install", "").parse_args(["mcp", "--for", "newone"]).client == "newone"
assert "newone" in mcp.build_parser().format_help()
os.environ["NEWONE_HOME"] = "/elsewhere"
assert _mcp_clients.path(new, "user", Path("/p"), Path("/h")) == Path("/elsewhere/mcp.json")
assert _mcp_clients.path(new, "project", Path("/p"), Path("/h")) == Path("/p/.newone/mcp.json")
print("ok")
"""


def test_a_new_row_reaches_every_list() -> None:
    """One row (and its adapter) is all a new hook harness needs: the registry, the ancestry
    walk (process and npm names), ``when.harness``, the hook's and install's help, the early
    exit flag of the registered per-event command, the timeout unit and the envelope's
    event, and as an MCP client ``install mcp --for``, ``supervise mcp --for`` and its
    configuration file (the user folder's variable honoured) all follow from it."""
    proc = subprocess.run([sys.executable, "-c", _NEW_ROW], capture_output=True, text=True,
                          timeout=60, cwd=ROOT)
    assert proc.returncode == 0 and proc.stdout.strip() == "ok", proc.stderr[-3000:]
