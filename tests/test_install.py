"""``supervise install`` / ``uninstall`` on real settings files, and the ``bin/`` shim."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from helpers import run_cli

ROOT = Path(__file__).resolve().parent.parent

USER_CLAUDE = {
    "model": "opus",
    "permissions": {"allow": ["Bash(ls:*)"]},
    "hooks": {
        "SessionStart": [{"matcher": "startup", "hooks": [{"type": "command", "command": "echo mine"}]}],
        "PreToolUse": [{"matcher": "Bash", "hooks": [{"type": "command", "command": "./guard.sh"}]}],
    },
}


def _write(path: Path, data: object) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, indent=2) + "\n")


def _ours(data: dict, event: str) -> list[dict]:
    return [h for g in data["hooks"].get(event, []) for h in g.get("hooks", [g])
            if "-m supervisor hook" in h["command"]]


def test_install_preserves_user_keys_and_hooks_and_is_idempotent(git_repo: Path) -> None:
    settings = git_repo / ".claude" / "settings.json"
    _write(settings, USER_CLAUDE)
    proc = run_cli("install", "claude", cwd=git_repo)
    assert proc.returncode == 0, proc.stderr
    data = json.loads(settings.read_text())
    assert data["model"] == "opus" and data["permissions"] == USER_CLAUDE["permissions"]
    assert data["hooks"]["PreToolUse"] == USER_CLAUDE["hooks"]["PreToolUse"]
    assert data["hooks"]["SessionStart"][0] == USER_CLAUDE["hooks"]["SessionStart"][0]
    (session,) = _ours(data, "SessionStart")
    assert shlex.split(session["command"])[0] == sys.executable
    assert shlex.split(session["command"])[-4:] == ["hook", "claude", "--registered-timeout",
                                                    str(session["timeout"])]
    assert session["timeout"] == 180  # default budget 120 s + 60 s
    assert _ours(data, "UserPromptSubmit")[0]["command"].endswith("hook claude --event prompt")
    post = [g for g in data["hooks"]["PostToolUse"] if _ours({"hooks": {"x": [g]}}, "x")]
    assert post[0]["matcher"] == "Read|Edit|MultiEdit|Write|NotebookEdit" and post[0]["hooks"][0]["command"].endswith("--event post-tool")
    before = settings.read_bytes()
    again = run_cli("install", "claude", cwd=git_repo)
    assert again.returncode == 0 and b"unchanged" in again.stdout
    assert settings.read_bytes() == before


def test_uninstall_removes_only_ours(git_repo: Path) -> None:
    settings = git_repo / ".claude" / "settings.json"
    _write(settings, USER_CLAUDE)
    assert run_cli("install", "claude", cwd=git_repo).returncode == 0
    proc = run_cli("uninstall", "claude", cwd=git_repo)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(settings.read_text()) == USER_CLAUDE
    second = run_cli("uninstall", "claude", cwd=git_repo)
    assert second.returncode == 0 and b"nothing to remove" in second.stdout


def test_install_then_uninstall_of_a_fresh_project_leaves_no_file(git_repo: Path) -> None:
    assert run_cli("install", "codex", "gemini", "qwen", "cursor", cwd=git_repo).returncode == 0
    assert (git_repo / ".codex" / "hooks.json").is_file()
    assert run_cli("uninstall", "codex", "gemini", "qwen", "cursor", cwd=git_repo).returncode == 0
    for folder in (".codex", ".gemini", ".qwen", ".cursor"):
        assert not (git_repo / folder).exists()


def test_a_changed_budget_replaces_our_entry_in_place_of_adding_one(git_repo: Path) -> None:
    assert run_cli("install", "claude", cwd=git_repo).returncode == 0
    (git_repo / "supervise.toml").write_text('budget = 10\n[[stages]]\nname = "a"\nrun = ["true"]\n')
    assert run_cli("install", "claude", cwd=git_repo).returncode == 0
    data = json.loads((git_repo / ".claude" / "settings.json").read_text())
    (session,) = _ours(data, "SessionStart")
    assert session["timeout"] == 70


@pytest.mark.parametrize("content", ['{"hooks": {', "[1, 2]", '{"hooks": []}', '{"hooks": {"SessionStart": {}}}'])
def test_refuses_a_file_it_cannot_merge_into_and_leaves_it_untouched(git_repo: Path, content: str) -> None:
    settings = git_repo / ".claude" / "settings.json"
    settings.parent.mkdir()
    settings.write_text(content)
    proc = run_cli("install", "claude", cwd=git_repo)
    assert proc.returncode == 1
    err = proc.stderr.decode().strip()
    assert len(err.splitlines()) == 1 and "settings.json" in err and "untouched" in err
    assert settings.read_text() == content
    un = run_cli("uninstall", "claude", cwd=git_repo)
    assert settings.read_text() == content
    assert un.returncode == (0 if content == '{"hooks": {"SessionStart": {}}}' else 1)


def test_one_refused_file_does_not_stop_the_others(git_repo: Path) -> None:
    (git_repo / ".claude").mkdir()
    (git_repo / ".claude" / "settings.json").write_text("not json")
    proc = run_cli("install", "claude", "codex", cwd=git_repo)
    assert proc.returncode == 1
    assert (git_repo / ".codex" / "hooks.json").is_file()


def test_timeouts_are_in_each_harness_unit(git_repo: Path) -> None:
    (git_repo / "supervise.toml").write_text('budget = 30\n[[stages]]\nname = "a"\nrun = ["true"]\n')
    assert run_cli("install", "gemini", "qwen", "codex", "cursor", cwd=git_repo).returncode == 0
    gemini = json.loads((git_repo / ".gemini" / "settings.json").read_text())
    assert gemini["hooks"]["SessionStart"][0]["hooks"][0]["timeout"] == 90_000
    assert gemini["hooks"]["SessionStart"][0]["matcher"] == ""
    # Gemini's BeforeAgent may re-emit after a compression (the row's compact_trace): the
    # start's timeout, not the per-event one
    assert gemini["hooks"]["BeforeAgent"][0]["hooks"][0]["timeout"] == 90_000
    qwen = json.loads((git_repo / ".qwen" / "settings.json").read_text())
    assert qwen["hooks"]["SessionStart"][0]["hooks"][0]["timeout"] == 90_000
    codex = json.loads((git_repo / ".codex" / "hooks.json").read_text())
    assert codex["hooks"]["SessionStart"][0]["hooks"][0]["timeout"] == 90
    cursor = json.loads((git_repo / ".cursor" / "hooks.json").read_text())
    assert cursor["version"] == 1
    (entry,) = cursor["hooks"]["sessionStart"]
    assert entry["timeout"] == 90 and entry["command"].endswith(
        "hook cursor --source startup --registered-timeout 90")


def test_cursor_keeps_user_entries(git_repo: Path) -> None:
    hooks = git_repo / ".cursor" / "hooks.json"
    user = {"version": 1, "hooks": {"sessionStart": [{"command": ".cursor/hooks/mine.sh"}],
                                    "stop": [{"command": "./stop.sh"}]}}
    _write(hooks, user)
    assert run_cli("install", "cursor", cwd=git_repo).returncode == 0
    data = json.loads(hooks.read_text())
    assert data["hooks"]["sessionStart"][0] == {"command": ".cursor/hooks/mine.sh"}
    assert len(data["hooks"]["sessionStart"]) == 2
    assert run_cli("uninstall", "cursor", cwd=git_repo).returncode == 0
    assert json.loads(hooks.read_text()) == user


def test_grok_goes_to_user_settings_only(git_repo: Path, isolated_home: Path) -> None:
    # Without --scope user nothing is written under $HOME (a project install must not).
    proc = run_cli("install", "grok", cwd=git_repo)
    assert proc.returncode == 0 and b"--scope user" in proc.stderr
    assert not (isolated_home / ".grok").exists()
    proc = run_cli("install", "grok", "--scope", "user", cwd=git_repo)
    assert proc.returncode == 0, proc.stderr
    assert b"supervise digest" in proc.stdout
    data = json.loads((isolated_home / ".grok" / "user-settings.json").read_text())
    assert data["hooks"]["SessionStart"][0]["hooks"][0]["timeout"] == 180
    assert not (git_repo / ".grok").exists()


def test_user_scope_writes_under_home(git_repo: Path, isolated_home: Path) -> None:
    assert run_cli("install", "claude", "--scope", "user", cwd=git_repo).returncode == 0
    assert (isolated_home / ".claude" / "settings.json").is_file()
    assert not (git_repo / ".claude").exists()
    assert run_cli("uninstall", "claude", "--scope", "user", cwd=git_repo).returncode == 0
    assert not (isolated_home / ".claude" / "settings.json").exists()


def test_codex_user_scope_follows_codex_home(git_repo: Path, tmp_path: Path) -> None:
    codex_home = tmp_path / "codex home"
    assert run_cli("install", "codex", "--scope", "user", cwd=git_repo,
                   env={"CODEX_HOME": str(codex_home)}).returncode == 0
    assert (codex_home / "hooks.json").is_file()


def test_next_steps_name_the_trust_each_harness_needs(git_repo: Path) -> None:
    out = run_cli("install", "codex", "cursor", "gemini", cwd=git_repo).stdout.decode()
    assert "next steps:" in out and "/hooks" in out and "trusted workspace" in out.lower()
    assert "trusted folder" in out and "supervise doctor" in out


def test_adds_state_dir_to_git_exclude_once(git_repo: Path) -> None:
    assert run_cli("install", "claude", cwd=git_repo).returncode == 0
    assert run_cli("install", "codex", cwd=git_repo).returncode == 0
    lines = (git_repo / ".git" / "info" / "exclude").read_text().splitlines()
    assert lines.count("/.supervise/") == 1
    (git_repo / ".supervise").mkdir()
    (git_repo / ".supervise" / "x").write_text("state")
    status = subprocess.run(["git", "-C", str(git_repo), "status", "--porcelain", "--untracked-files=all"],
                            capture_output=True, text=True, check=True).stdout
    assert ".supervise" not in status


def test_from_a_subfolder_installs_at_the_git_top_level(git_repo: Path) -> None:
    sub = git_repo / "src" / "deep"
    sub.mkdir(parents=True)
    assert run_cli("install", "claude", cwd=sub).returncode == 0
    assert (git_repo / ".claude" / "settings.json").is_file()


def test_unknown_harness_is_a_usage_error(git_repo: Path) -> None:
    proc = run_cli("install", "vim", cwd=git_repo)
    assert proc.returncode == 2 and b"unknown harness 'vim'" in proc.stderr
    assert not (git_repo / ".claude").exists()


@pytest.fixture
def spaced_python(tmp_path: Path) -> Path:
    """A venv-shaped interpreter under a path with spaces (reusing this venv's packages)."""
    venv = Path(sys.prefix)
    root = tmp_path / "py with spaces"
    (root / "bin").mkdir(parents=True)
    (root / "pyvenv.cfg").write_text((venv / "pyvenv.cfg").read_text())
    (root / "lib").symlink_to(venv / "lib")
    python = root / "bin" / "python"
    python.symlink_to(Path(sys.base_prefix) / "bin" / Path(sys.executable).name)
    return python


def test_paths_with_spaces_are_quoted_and_the_command_runs_without_path(tmp_path: Path, spaced_python: Path) -> None:
    project = tmp_path / "my project"
    project.mkdir()
    subprocess.run(["git", "init", "-q", str(project)], check=True)
    (project / "supervise.toml").write_text('budget = 20\n[[stages]]\nname = "m"\nrun = ["/bin/echo", "SPACED-OK"]\n')
    proc = subprocess.run([str(spaced_python), "-m", "supervisor", "install", "claude"], cwd=project,
                          capture_output=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    data = json.loads((project / ".claude" / "settings.json").read_text())
    (session,) = _ours(data, "SessionStart")
    assert shlex.split(session["command"])[0] == str(spaced_python)
    # the harness runs the command through a shell, with whatever PATH it has: here none at all
    env = {k: v for k, v in os.environ.items() if k != "PATH"}
    payload = json.dumps({"session_id": "s", "cwd": str(project), "hook_event_name": "SessionStart",
                          "source": "startup"}).encode()
    run = subprocess.run(["/bin/sh", "-c", session["command"]], cwd=project, input=payload,
                         capture_output=True, env=env, timeout=60)
    assert run.returncode == 0, run.stderr
    assert "SPACED-OK" in json.loads(run.stdout)["hookSpecificOutput"]["additionalContext"]


def test_shim_without_interpreter_says_one_line_and_exits_zero(git_repo: Path) -> None:
    shim = ROOT / "bin" / "supervise-hook"
    proc = subprocess.run([str(shim), "claude"], cwd=git_repo, input=b"{}", capture_output=True,
                          env={**os.environ, "SUPERVISE_PYTHON": str(git_repo / "no-python")}, timeout=30)
    assert proc.returncode == 0 and proc.stdout == b""
    assert len(proc.stderr.decode().strip().splitlines()) == 1


def test_shim_runs_the_hook(git_repo: Path) -> None:
    (git_repo / "supervise.toml").write_text('budget = 20\n[[stages]]\nname = "m"\nrun = ["/bin/echo", "SHIM-OK"]\n')
    payload = json.dumps({"session_id": "s", "cwd": str(git_repo), "source": "startup"}).encode()
    proc = subprocess.run([str(ROOT / "bin" / "supervise-hook"), "claude"], cwd=git_repo, input=payload,
                          capture_output=True, env={**os.environ, "SUPERVISE_PYTHON": sys.executable},
                          timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert "SHIM-OK" in json.loads(proc.stdout)["hookSpecificOutput"]["additionalContext"]


def test_uninstall_at_local_scope_takes_back_its_exclude_line(git_repo: Path) -> None:
    """``install --scope local`` adds ``/.claude/settings.local.json`` to .git/info/exclude;
    uninstalling removes that line with the file, keeps every other line, and keeps the line
    while the file stays (it then holds the user's own settings, still to be ignored)."""
    exclude = git_repo / ".git" / "info" / "exclude"
    exclude.parent.mkdir(parents=True, exist_ok=True)
    exclude.write_text("# mine\n*.log\n")
    local = git_repo / ".claude" / "settings.local.json"
    assert run_cli("install", "claude", "--scope", "local", cwd=git_repo).returncode == 0
    assert "/.claude/settings.local.json" in exclude.read_text().splitlines()
    proc = run_cli("uninstall", "claude", "--scope", "local", cwd=git_repo)
    assert proc.returncode == 0, proc.stderr
    assert not local.exists()
    lines = exclude.read_text().splitlines()
    assert "/.claude/settings.local.json" not in lines, lines
    assert lines[:2] == ["# mine", "*.log"] and "/.supervise/" in lines, lines

    assert run_cli("install", "claude", "--scope", "local", cwd=git_repo).returncode == 0
    data = json.loads(local.read_text())
    data["permissions"] = {"allow": ["Bash(ls)"]}  # the user's own setting beside our hooks
    local.write_text(json.dumps(data))
    assert run_cli("uninstall", "claude", "--scope", "local", cwd=git_repo).returncode == 0
    assert local.exists()
    assert "/.claude/settings.local.json" in exclude.read_text().splitlines()
