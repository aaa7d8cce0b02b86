"""Path-scoped rules (Claude ``paths:``, Cursor ``globs:``) injected on the read of a matching
file, once per session and compaction epoch, only to harnesses that do not load them: the
registered Claude command (the sh fast path first, then Python) and the Pi bridge's read hook
(``supervise hook pi --event post-tool``). Real processes, real files."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from supervisor.commands.install import FAST_PATH, SHELL


@pytest.fixture
def project(tmp_path: Path) -> Path:
    root = tmp_path / "my project"
    (root / "src" / "web").mkdir(parents=True)
    (root / ".cursor" / "rules").mkdir(parents=True)
    (root / ".claude" / "rules").mkdir(parents=True)
    subprocess.run(["git", "init", "-q", str(root)], check=True, timeout=30)
    (root / ".cursor" / "rules" / "ts.mdc").write_text(
        "---\ndescription: TypeScript\nglobs: src/**/*.ts\nalwaysApply: false\n---\n"
        "CURSOR-TS-RULE: prefer interfaces.\n")
    (root / ".claude" / "rules" / "py.md").write_text(
        '---\npaths:\n  - "src/**/*.py"\n---\nCLAUDE-PY-RULE\n')
    (root / "src" / "web" / "app.ts").write_text("let x = 1\n")
    (root / "src" / "a.py").write_text("x = 1\n")
    (root / "README.md").write_text("readme\n")
    return root


def env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if k != "SUPERVISE_STATE_DIR"}


def start(project: Path, harness: str, source: str = "startup") -> None:
    payload = {"session_id": "s1", "cwd": str(project), "source": source,
               "hook_event_name": "SessionStart"}
    proc = subprocess.run([sys.executable, "-m", "supervisor", "hook", harness], cwd=project,
                          input=json.dumps(payload).encode(), env=env(), capture_output=True,
                          timeout=60)
    assert proc.returncode == 0, proc.stderr


def read(project: Path, harness: str, rel: str, *, fast: bool = True, tool: str = "Read",
         relative: bool = False) -> str:
    payload = json.dumps({"session_id": "s1", "cwd": str(project),
                          "hook_event_name": "PostToolUse", "tool_name": tool,
                          "tool_input": {"file_path": rel if relative else str(project / rel)}},
                         separators=(",", ":")).encode()
    argv = [sys.executable, "-P", "-m", "supervisor", "hook", harness, "--event", "post-tool"]
    if fast:
        argv = [SHELL, str(FAST_PATH), *argv]
    proc = subprocess.run(argv, cwd=project, input=payload, env=env(), capture_output=True,
                          timeout=60)
    assert proc.returncode == 0, proc.stderr
    if not proc.stdout.strip():
        return ""
    if harness not in ("claude", "gemini", "qwen"):  # the bridges' hook prints the text itself
        return proc.stdout.decode()
    out = json.loads(proc.stdout)["hookSpecificOutput"]
    assert out["hookEventName"] == ("AfterTool" if harness == "gemini" else "PostToolUse")
    return str(out["additionalContext"])


def test_claude_gets_a_cursor_rule_once_on_a_matching_read(project: Path) -> None:
    start(project, "claude")
    assert read(project, "claude", "README.md") == ""  # no rule covers it
    first = read(project, "claude", "src/web/app.ts")
    assert "Rule from: .cursor/rules/ts.mdc" in first or "ts.mdc (for files matching src/**/*.ts)" in first
    assert "CURSOR-TS-RULE: prefer interfaces." in first and "alwaysApply" not in first
    assert read(project, "claude", "src/web/app.ts") == ""  # once per context
    assert "CLAUDE-PY-RULE" not in read(project, "claude", "src/a.py")  # Claude loads its own
    start(project, "claude", "compact")  # a new context: the rule is injected again
    assert "CURSOR-TS-RULE" in read(project, "claude", "src/web/app.ts")


def test_pi_gets_both_conventions_on_reads(project: Path) -> None:
    proc = subprocess.run([sys.executable, "-m", "supervisor", "bridge", "--harness", "pi",
                           "--source", "startup", "--cwd", str(project), "--session-id", "s1"],
                          cwd=project, env=env(), capture_output=True, timeout=60)
    assert proc.returncode == 0 and json.loads(proc.stdout)["kind"] == "ready", proc.stderr
    assert (project / ".supervise" / "rules" / "pi.json").exists()
    assert "CLAUDE-PY-RULE" in read(project, "pi", "src/a.py", fast=False)
    assert "CURSOR-TS-RULE" in read(project, "pi", "src/web/app.ts", fast=False)
    assert read(project, "pi", "src/a.py", fast=False) == ""


def test_gemini_gets_both_conventions_on_its_file_tools(project: Path) -> None:
    """Gemini CLI's AfterTool (registered for read_file, replace, write_file; the model's
    path may be relative to cwd) gets each matching rule once per context, through the
    registered sh fast path, and again after a clear (Gemini has no compact source)."""
    start(project, "gemini")
    assert (project / ".supervise" / "rules" / "gemini.json").exists()
    assert read(project, "gemini", "README.md", tool="read_file") == ""
    got = read(project, "gemini", "src/a.py", tool="read_file", relative=True)
    assert "Rule from: " in got and ".claude/rules/py.md (for files matching src/**/*.py)" in got
    assert "CLAUDE-PY-RULE" in got and "paths:" not in got
    assert read(project, "gemini", "src/a.py", tool="read_file") == ""  # once per context
    assert "CURSOR-TS-RULE" in read(project, "gemini", "src/web/app.ts", tool="replace")
    assert read(project, "gemini", "src/web/app.ts", tool="run_shell_command") == ""
    start(project, "gemini", "clear")
    assert "CLAUDE-PY-RULE" in read(project, "gemini", "src/a.py", tool="write_file")


def test_qwen_gets_both_conventions_on_its_file_tools(project: Path) -> None:
    """Qwen Code's PostToolUse (0.24.4: registered for read_file, edit, write_file; its context
    is appended to the tool's result) gets each matching rule once per context, through the
    registered sh fast path; before, Qwen registered no PostToolUse and got the listing only
    (and the fast path answered "not a file tool" for its ``edit``)."""
    from supervisor.adapters import ADAPTERS
    from supervisor.commands.install import entries

    qwen = ADAPTERS["qwen"]
    [post] = [e for e in entries(qwen, 120.0) if e.event == "PostToolUse"]
    assert post.matcher == "^(read_file|edit|write_file)$"
    start(project, "qwen")
    assert (project / ".supervise" / "rules" / "qwen.json").exists()
    got = read(project, "qwen", "src/a.py", tool="read_file")
    assert "CLAUDE-PY-RULE" in got and "paths:" not in got
    assert read(project, "qwen", "src/a.py", tool="read_file") == ""  # once per context
    assert "CURSOR-TS-RULE" in read(project, "qwen", "src/web/app.ts", tool="edit")
    assert read(project, "qwen", "src/web/app.ts", tool="run_shell_command") == ""


def test_the_fast_path_lets_every_file_tool_through(project: Path, tmp_path: Path) -> None:
    """The sh fast path's "not a file tool" answer never hides a read of a row's file tool
    (the harness table's ``file_tools``): with a rules index each one reaches Python."""
    from supervisor._harnesses import ROWS

    start(project, "claude")
    record = tmp_path / "starts"
    wrapper = tmp_path / "python"
    wrapper.write_text(f'#!/bin/sh\necho started >> "{record}"\nexec "{sys.executable}" "$@"\n')
    wrapper.chmod(0o755)
    tools = [tool for row in ROWS for tool in row.file_tools]
    assert {"Read", "read_file"} <= set(tools)
    for tool in [*tools, "Bash"]:
        record.unlink(missing_ok=True)
        payload = json.dumps({"session_id": "s1", "cwd": str(project), "tool_name": tool,
                              "tool_input": {"file_path": str(project / "README.md")}},
                             separators=(",", ":")).encode()
        proc = subprocess.run([SHELL, str(FAST_PATH), str(wrapper), "-P", "-m", "supervisor",
                               "hook", "claude", "--event", "post-tool"], cwd=project,
                              input=payload, env=env(), capture_output=True, timeout=60)
        assert proc.returncode == 0, proc.stderr
        assert record.exists() == (tool != "Bash"), tool


def test_without_rules_the_fast_path_still_answers_alone(project: Path, tmp_path: Path) -> None:
    """No index of path-scoped rules for the harness: a read costs no Python start."""
    (project / ".cursor" / "rules" / "ts.mdc").unlink()
    start(project, "claude")
    assert not (project / ".supervise" / "rules" / "claude.json").exists()
    record = tmp_path / "starts"
    wrapper = tmp_path / "python"
    wrapper.write_text(f'#!/bin/sh\necho started >> "{record}"\nexec "{sys.executable}" "$@"\n')
    wrapper.chmod(0o755)
    payload = json.dumps({"session_id": "s1", "cwd": str(project), "tool_name": "Read",
                          "tool_input": {"file_path": str(project / "src/web/app.ts")}},
                         separators=(",", ":")).encode()  # as Claude Code sends it
    proc = subprocess.run([SHELL, str(FAST_PATH), str(wrapper), "-P", "-m", "supervisor", "hook",
                           "claude", "--event", "post-tool"], cwd=project, input=payload,
                          env=env(), capture_output=True, timeout=60)
    assert proc.returncode == 0 and proc.stdout == b"" and not record.exists()


def _index(project: Path, harness: str) -> Path:
    return project / ".supervise" / "rules" / f"{harness}.json"


def test_a_planted_rules_index_injects_nothing(project: Path) -> None:
    """The index names the files a read injects: one we did not sign (a clone's tracked
    ``.supervise/rules/claude.json``, an agent's own write) is set aside, never followed."""
    (project / ".env").write_text("MY_API_KEY=sk-planted\n")
    start(project, "claude")
    _index(project, "claude").write_text(json.dumps({
        "version": 1, "root": str(project),
        "rules": [{"path": str(project / ".env"), "globs": ["**"], "convention": "cursor"}]}))
    got = read(project, "claude", "README.md")
    assert "sk-planted" not in got
    assert not _index(project, "claude").exists()  # set aside, so the shim stops asking


def test_an_edited_or_foreign_rules_index_injects_nothing(project: Path) -> None:
    """A signed index edited to add a file, or another harness's signed index put in its
    place, is not ours for this harness."""
    (project / ".env").write_text("MY_API_KEY=sk-planted\n")
    start(project, "claude")
    doc = json.loads(_index(project, "claude").read_text())
    assert doc["sig"] and doc["harness"] == "claude"
    doc["rules"].append({"path": str(project / ".env"), "globs": ["**"], "convention": "cursor"})
    _index(project, "claude").write_text(json.dumps(doc))
    assert "sk-planted" not in read(project, "claude", "README.md")
    proc = subprocess.run([sys.executable, "-m", "supervisor", "bridge", "--harness", "pi",
                           "--source", "startup", "--cwd", str(project), "--session-id", "s2"],
                          cwd=project, env=env(), capture_output=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    start(project, "claude", "compact")  # the genuine claude index again, a fresh epoch
    _index(project, "claude").write_bytes(_index(project, "pi").read_bytes())
    got = read(project, "claude", "src/a.py")
    assert "CLAUDE-PY-RULE" not in got  # pi's index (Claude loads its own rules) is refused
