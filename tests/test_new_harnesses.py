"""The harnesses of issue 24 (GitHub Copilot CLI, Factory Droid, Cline CLI): install, uninstall and doctor on real
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
    assert "hook-fast.sh" in prompt["bash"] and prompt["bash"].endswith(
        "--event prompt --registered-timeout 180"), prompt  # it may deliver an armed re-emit
    assert prompt["timeoutSec"] == 180
    (compact,) = data["hooks"]["PreCompact"]
    assert compact["bash"].endswith("hook copilot --event pre-compact"), compact
    assert "(unchanged)" in run_cli("install", "copilot", cwd=git_repo).stdout.decode()
    doctor = run_cli("doctor", "copilot", cwd=git_repo)
    out = doctor.stdout.decode()
    assert doctor.returncode == 0 and "FAIL" not in out, out
    assert "copilot: SessionStart registered in" in out, out
    assert "copilot: per-prompt (deferred results) hook UserPromptSubmit registered" in out, out
    assert "copilot: pre-compaction hook PreCompact registered" in out, out
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


def test_droid_install_uses_claude_groups_and_the_local_scope(git_repo: Path) -> None:
    assert run_cli("install", "droid", "--scope", "local", cwd=git_repo).returncode == 0
    data = json.loads((git_repo / ".factory" / "settings.local.json").read_text())
    (group,) = data["hooks"]["SessionStart"]
    assert group["hooks"][0]["type"] == "command" and group["hooks"][0]["timeout"] == 180
    assert group["hooks"][0]["command"].endswith("hook droid --registered-timeout 180")
    assert "UserPromptSubmit" in data["hooks"]
    exclude = (git_repo / ".git" / "info" / "exclude").read_text()
    assert "/.factory/settings.local.json" in exclude
    out = run_cli("doctor", "droid", cwd=git_repo).stdout.decode()
    assert "FAIL" not in out, out
    # what the real CLI could not run offline is said, one warn line each
    assert "warn  droid: not proven with the real CLI: resume and compaction" in out, out
    assert "warn  droid: not proven with the real CLI: the per-prompt hook" in out, out
    assert run_cli("uninstall", "droid", "--scope", "local", cwd=git_repo).returncode == 0
    assert not (git_repo / ".factory" / "settings.local.json").exists()


def test_droid_pin_names_its_linux_binary_beside_it() -> None:
    """``@factory/cli`` 0.225.1 names ``@factory/cli-linux-x64`` 0.225.1, which the registry
    does not have: the installer adds the row's ``npm_extra`` for that platform alone."""
    from supervisor._harnesses import pins

    linux = {name: extra for name, _, _, _, extra, _ in pins("Linux x86_64")}
    mac = {name: extra for name, _, _, _, extra, _ in pins("Darwin arm64")}
    assert linux["droid"] == "@factory/cli-linux-x64@0.225.2" and mac["droid"] == "-"
    assert linux["copilot"] == "-"


FAKE_NPM = r"""#!/bin/sh
echo "$@" >> "$NPM_LOG"
for a in "$@"; do
  case "$a" in
    *@[0-9]*) pkg=${a%@*}; ver=${a##*@}; mkdir -p "node_modules/$pkg"
              printf '{\n  "version": "%s"\n}\n' "$ver" > "node_modules/$pkg/package.json" ;;
  esac
done
"""
"""A stand-in ``npm install`` (offline): records its arguments, writes each ``pkg@version``'s
package.json."""


def test_installer_adds_the_platform_package_and_checks_it(tmp_path: Path) -> None:
    """A stand-in ``npm`` records its arguments: the droid install names the pin and its
    Linux binary in one ``npm install``; a second run finds both and installs nothing, and a
    missing binary package alone is installed again."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    npm = bin_dir / "npm"
    npm.write_text(FAKE_NPM)
    npm.chmod(0o755)
    cache = tmp_path / "cache"
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}", "HARNESS_CACHE": str(cache),
           "NPM_LOG": str(tmp_path / "npm.log")}
    script = ROOT / "scripts" / "install-harnesses.sh"
    uname = os.uname()
    if f"{uname.sysname} {uname.machine}" != "Linux x86_64":
        import pytest

        pytest.skip("the droid extra is for Linux x86_64")
    first = subprocess.run(["bash", str(script), "droid"], capture_output=True, text=True,
                           env=env, timeout=60)
    assert first.returncode == 0, first.stderr
    (call,) = (tmp_path / "npm.log").read_text().splitlines()
    assert call.endswith("@factory/cli@0.225.1 @factory/cli-linux-x64@0.225.2"), call
    again = subprocess.run(["bash", str(script), "droid"], capture_output=True, text=True,
                           env=env, timeout=60)
    assert "already installed" in again.stdout and "[1/" not in again.stdout, again.stdout
    import shutil

    shutil.rmtree(cache / "node_modules" / "@factory" / "cli-linux-x64")
    third = subprocess.run(["bash", str(script), "droid"], capture_output=True, text=True,
                           env=env, timeout=60)
    assert "[1/1] droid" in third.stdout, third.stdout


def test_cline_install_writes_one_executable_per_event(git_repo: Path) -> None:
    assert run_cli("install", "cline", cwd=git_repo).returncode == 0
    hooks = git_repo / ".clinerules" / "hooks"
    assert sorted(p.name for p in hooks.iterdir()) == ["PreToolUse", "TaskResume", "TaskStart"]
    for p in hooks.iterdir():
        assert os.access(p, os.X_OK), p
        assert p.read_text().startswith("#!/bin/sh\n# watchkeeper: ")
    assert "hook cline --source resume" in (hooks / "TaskResume").read_text()
    # Cline's tool hooks time out after 120 s and a file registers none: the budget fits it
    assert (hooks / "PreToolUse").read_text().rstrip().endswith(
        "--event prompt --registered-timeout 120")
    proc = subprocess.run(["sh", str(hooks / "TaskStart")], cwd=git_repo, input=b"{}",
                          capture_output=True, timeout=30)
    assert proc.returncode == 0, proc.stderr
    assert "(unchanged)" in run_cli("install", "cline", cwd=git_repo).stdout.decode()
    out = run_cli("doctor", "cline", cwd=git_repo).stdout.decode()
    assert "FAIL" not in out and "cline: TaskStart only arms the start" in out, out
    assert "cline: resumed-session hook TaskResume registered" in out, out
    # what Cline's events cannot deliver, said where the user checks the setup
    assert "warn  cline: cannot: a task in which the model calls no tool gets no digest" in out
    assert "warn  cline: cannot: compaction: Cline 3.0.65 runs no PreCompact" in out, out
    assert run_cli("uninstall", "cline", cwd=git_repo).returncode == 0
    assert not hooks.exists()


def test_cline_never_replaces_a_hook_file_of_another_program(git_repo: Path) -> None:
    hooks = git_repo / ".clinerules" / "hooks"
    hooks.mkdir(parents=True)
    (hooks / "TaskStart").write_text("#!/bin/sh\necho mine\n")
    proc = run_cli("install", "cline", cwd=git_repo)
    assert proc.returncode == 1
    assert "a hook file of another program is there" in proc.stderr.decode()
    assert (hooks / "TaskStart").read_text() == "#!/bin/sh\necho mine\n"
    assert sorted(p.name for p in hooks.iterdir()) == ["TaskStart"], "nothing else written"
    assert run_cli("uninstall", "cline", cwd=git_repo).returncode == 0
    assert (hooks / "TaskStart").read_text() == "#!/bin/sh\necho mine\n"


def test_cline_payload_gives_the_task_and_its_workspace(git_repo: Path) -> None:
    from supervisor.session import _payload

    data = {"taskId": "conv_9", "workspaceRoots": [str(git_repo)], "hookName": "tool_call",
            "clineVersion": ""}
    payload = _payload.parse_payload(data, "cline")
    assert _payload.payload_session_id(payload) == "conv_9"
    assert _payload.session_place(payload, env={})[0] == str(git_repo)
    # the session a resumed task (`cline --id`) shares with the first: rootSessionId
    rooted = {**data, "sessionContext": {"rootSessionId": "1796180478123_q26bz"}}
    assert _payload.payload_session_id(_payload.parse_payload(rooted, "cline")) == \
        "1796180478123_q26bz"


def _supplied(repo: Path, harness: str, cwd: Path, home: Path) -> str:
    env = {**os.environ, "SUPERVISE_HARNESS": harness, "SUPERVISE_PROJECT_DIR": str(repo),
           "SUPERVISE_CWD": str(cwd), "SUPERVISE_SOURCE": "startup", "HOME": str(home)}
    env.pop("COPILOT_HOME", None)
    proc = subprocess.run([sys.executable, str(ROOT / "stages" / "instructions" / "__main__.py")],
                          cwd=cwd, env=env, capture_output=True, timeout=30)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.decode()


def test_each_loads_its_own_files_and_the_digest_supplies_the_rest(git_repo: Path,
                                                                      tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    (git_repo / "AGENTS.md").write_text("ROOT-AGENTS\n")
    (git_repo / "CLAUDE.md").write_text("ROOT-CLAUDE\n")
    (git_repo / "AGENTS.override.md").write_text("ROOT-OVERRIDE\n")
    sub = git_repo / "pkg"
    sub.mkdir()
    (sub / "AGENTS.md").write_text("SUB-AGENTS\n")
    # Copilot and Droid load AGENTS.md and CLAUDE.md from the git root down to cwd (LAB
    # 1.0.102, 0.225.2), not AGENTS.override.md: the digest supplies that one alone
    for harness in ("copilot", "droid"):
        text = _supplied(git_repo, harness, sub, home)
        assert not any(m in text for m in ("ROOT-AGENTS", "ROOT-CLAUDE", "SUB-AGENTS")), text
        assert "ROOT-OVERRIDE" in text, text
    # Cline loads its workspace folder's AGENTS.md only: the root's files come from us
    text = _supplied(git_repo, "cline", sub, home)
    assert "ROOT-AGENTS" not in text or "ROOT-OVERRIDE" in text
    assert "ROOT-CLAUDE" in text and "SUB-AGENTS" not in text, text
    # a terminal gets everything
    assert "SUB-AGENTS" in _supplied(git_repo, "", sub, home)
