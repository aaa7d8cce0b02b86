"""The harnesses of issue 24 (GitHub Copilot CLI, ...): install, uninstall and doctor on real
files, their envelopes, and the instruction files each loads itself (never supplied again).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from helpers import run_cli

ROOT = Path(__file__).resolve().parent.parent


def test_copilot_install_writes_its_own_hooks_file_and_uninstall_removes_it(git_repo: Path) -> None:
    hooks = git_repo / ".github" / "hooks"
    hooks.mkdir(parents=True)
    theirs = {"version": 1, "hooks": {"SessionStart": [{"type": "command", "bash": "echo hi"}]}}
    (hooks / "theirs.json").write_text(json.dumps(theirs))
    assert run_cli("install", "copilot", cwd=git_repo).returncode == 0
    path = hooks / "watchkeeper.json"
    data = json.loads(path.read_text())
    assert data["version"] == 1
    (start,) = data["hooks"]["SessionStart"]
    assert start["type"] == "command" and start["timeoutSec"] == 180
    assert start["bash"].endswith("hook copilot --registered-timeout 180")
    (prompt,) = data["hooks"]["UserPromptSubmit"]
    assert "hook-fast.sh" in prompt["bash"] and "--event prompt" in prompt["bash"], prompt
    assert "(unchanged)" in run_cli("install", "copilot", cwd=git_repo).stdout.decode()
    doctor = run_cli("doctor", "copilot", cwd=git_repo)
    out = doctor.stdout.decode()
    assert doctor.returncode == 0 and "FAIL" not in out, out
    assert "copilot: SessionStart registered in" in out, out
    assert "copilot: per-prompt (deferred results) hook UserPromptSubmit registered" in out, out
    assert run_cli("uninstall", "copilot", cwd=git_repo).returncode == 0
    assert not path.exists()
    assert json.loads((hooks / "theirs.json").read_text()) == theirs  # never touched


def test_copilot_user_scope_follows_copilot_home(git_repo: Path, tmp_path: Path) -> None:
    home = tmp_path / "copilot-home"
    env = {**os.environ, "COPILOT_HOME": str(home)}
    proc = subprocess.run([sys.executable, "-m", "supervisor", "install", "copilot", "--scope",
                           "user"], cwd=git_repo, env=env, capture_output=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    data = json.loads((home / "hooks" / "watchkeeper.json").read_text())
    assert data["hooks"]["SessionStart"][0]["bash"].endswith("--opt-in")


def test_copilot_envelope_is_the_top_level_additional_context(tmp_path: Path) -> None:
    from supervisor.adapters import render

    for kind in ("digest", "prompt", "reemit"):
        out = json.loads(render("copilot", "ctx", state_dir=tmp_path, kind=kind))
        assert out == {"additionalContext": "ctx"}, (kind, out)


def _supplied(repo: Path, harness: str, cwd: Path, home: Path) -> str:
    env = {**os.environ, "SUPERVISE_HARNESS": harness, "SUPERVISE_PROJECT_DIR": str(repo),
           "SUPERVISE_CWD": str(cwd), "SUPERVISE_SOURCE": "startup", "HOME": str(home)}
    env.pop("COPILOT_HOME", None)
    proc = subprocess.run([sys.executable, str(ROOT / "stages" / "instructions" / "__main__.py")],
                          cwd=cwd, env=env, capture_output=True, timeout=30)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.decode()


def test_copilot_loads_its_own_files_and_the_digest_supplies_the_rest(git_repo: Path,
                                                                      tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    (git_repo / "AGENTS.md").write_text("ROOT-AGENTS\n")
    (git_repo / "CLAUDE.md").write_text("ROOT-CLAUDE\n")
    (git_repo / "AGENTS.override.md").write_text("ROOT-OVERRIDE\n")
    sub = git_repo / "pkg"
    sub.mkdir()
    (sub / "AGENTS.md").write_text("SUB-AGENTS\n")
    # Copilot loads AGENTS.md and CLAUDE.md from the git root down to cwd (LAB 1.0.102), not
    # AGENTS.override.md: the digest supplies that one alone
    text = _supplied(git_repo, "copilot", sub, home)
    assert not any(m in text for m in ("ROOT-AGENTS", "ROOT-CLAUDE", "SUB-AGENTS")), text
    assert "ROOT-OVERRIDE" in text, text
    # a terminal gets everything
    assert "SUB-AGENTS" in _supplied(git_repo, "", sub, home)
