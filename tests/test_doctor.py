"""``supervise doctor``: one line per check, a fix per failure, exit 1 when anything fails."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from helpers import run_cli

GOOD_TOML = 'budget = 30\n[[stages]]\nname = "echo"\nrun = ["echo", "hi"]\n'


@pytest.fixture
def project(git_repo: Path) -> Path:
    (git_repo / "supervise.toml").write_text(GOOD_TOML)
    return git_repo


def _doctor(cwd: Path, *args: str, env: dict[str, str] | None = None) -> tuple[int, list[str]]:
    proc = run_cli("doctor", *args, cwd=cwd, env=env, timeout=60)
    return proc.returncode, proc.stdout.decode().splitlines()


def _fails(lines: list[str]) -> list[str]:
    return [line for line in lines if line.startswith("FAIL")]


def test_healthy_install_passes(project: Path) -> None:
    assert run_cli("install", "claude", cwd=project).returncode == 0
    code, lines = _doctor(project)
    assert code == 0, "\n".join(lines)
    assert not _fails(lines)
    text = "\n".join(lines)
    assert "ok    claude: SessionStart registered" in text
    assert "hook command works without PATH" in text and "timeout 90s is above the budget 30s" in text
    assert "ok    config:" in text and "ok    stage echo: program echo found" in text
    assert "is writable" in text and "git-ignored" in text
    assert lines[-1] == "all checks passed"


def test_no_registration_fails_with_the_install_fix(project: Path) -> None:
    code, lines = _doctor(project)
    assert code == 1
    assert any("no watchkeeper registration" in f and "fix: supervise install" in f for f in _fails(lines))


def test_named_harness_without_registration_fails(project: Path) -> None:
    assert run_cli("install", "claude", cwd=project).returncode == 0
    code, lines = _doctor(project, "gemini")
    assert code == 1
    assert _fails(lines) == ["FAIL  gemini: no watchkeeper registration found -> fix: supervise install gemini"]


def _edit_session_handler(project: Path, rel: str, **changes: object) -> None:
    path = project / rel
    data = json.loads(path.read_text())
    for group in data["hooks"]["SessionStart"]:
        for handler in group["hooks"]:
            handler.update(changes)
    path.write_text(json.dumps(data))


def test_timeout_not_above_budget_fails(project: Path) -> None:
    assert run_cli("install", "claude", cwd=project).returncode == 0
    _edit_session_handler(project, ".claude/settings.json", timeout=30)
    code, lines = _doctor(project)
    assert code == 1
    (fail,) = _fails(lines)
    assert "timeout 30s is not above the budget 30s" in fail and "fix: supervise install claude" in fail


def test_milliseconds_are_understood_for_gemini(project: Path) -> None:
    assert run_cli("install", "gemini", cwd=project).returncode == 0
    code, lines = _doctor(project)
    assert code == 0, "\n".join(lines)
    assert any("gemini: timeout 90s is above the budget 30s" in line for line in lines)
    _edit_session_handler(project, ".gemini/settings.json", timeout=30)  # 30 ms, not 30 s
    code, lines = _doctor(project)
    assert code == 1 and "gemini: timeout 0.03s is not above" in _fails(lines)[0]


def test_missing_interpreter_fails(project: Path) -> None:
    assert run_cli("install", "claude", cwd=project).returncode == 0
    _edit_session_handler(project, ".claude/settings.json", command="/nonexistent/python -P -m supervisor hook claude")
    code, lines = _doctor(project)
    assert code == 1
    assert "registered program /nonexistent/python is missing" in _fails(lines)[0]


def test_command_depending_on_path_fails(project: Path) -> None:
    assert run_cli("install", "claude", cwd=project).returncode == 0
    _edit_session_handler(project, ".claude/settings.json", command="supervise hook claude")
    code, lines = _doctor(project)
    assert code == 1 and "depends on PATH" in _fails(lines)[0]


def test_missing_prompt_hook_fails(project: Path) -> None:
    assert run_cli("install", "claude", cwd=project).returncode == 0
    path = project / ".claude" / "settings.json"
    data = json.loads(path.read_text())
    del data["hooks"]["UserPromptSubmit"]
    path.write_text(json.dumps(data))
    code, lines = _doctor(project)
    assert code == 1 and "UserPromptSubmit missing" in _fails(lines)[0]


def test_invalid_config_fails(project: Path) -> None:
    assert run_cli("install", "claude", cwd=project).returncode == 0
    (project / "supervise.toml").write_text("budget = 'soon'\n")
    code, lines = _doctor(project)
    assert code == 1
    assert _fails(lines)[0].startswith("FAIL  config:") and "budget" in _fails(lines)[0]


def test_missing_stage_program_fails(project: Path) -> None:
    assert run_cli("install", "claude", cwd=project).returncode == 0
    (project / "supervise.toml").write_text(GOOD_TOML + '[[stages]]\nname = "gone"\nrun = ["no-such-prog-xyz"]\n')
    code, lines = _doctor(project)
    assert code == 1
    (fail,) = _fails(lines)
    assert "stage gone" in fail and "no-such-prog-xyz" in fail and "fix:" in fail


def test_unusable_state_dir_fails(project: Path, tmp_path: Path) -> None:
    assert run_cli("install", "claude", cwd=project).returncode == 0
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    code, lines = _doctor(project, env={"SUPERVISE_STATE_DIR": str(blocker)})
    assert code == 1 and "not writable" in _fails(lines)[0] and "SUPERVISE_STATE_DIR" in _fails(lines)[0]


def test_state_dir_not_ignored_fails(project: Path) -> None:
    assert run_cli("install", "claude", cwd=project).returncode == 0
    (project / ".git" / "info" / "exclude").write_text("")
    code, lines = _doctor(project)
    assert code == 1 and "not git-ignored" in _fails(lines)[0]


def test_invalid_settings_json_fails(project: Path) -> None:
    (project / ".claude").mkdir()
    (project / ".claude" / "settings.json").write_text("{oops")
    code, lines = _doctor(project)
    assert code == 1 and any("not valid JSON" in f for f in _fails(lines))


def test_codex_trust_is_a_warning_until_trusted(project: Path, isolated_home: Path) -> None:
    assert run_cli("install", "codex", cwd=project).returncode == 0
    code, lines = _doctor(project)
    assert code == 0, "\n".join(lines)
    assert any(line.startswith("warn  codex: project") and "not trusted" in line for line in lines)
    assert any("hooks are not trusted yet" in line for line in lines)
    hooks = project / ".codex" / "hooks.json"
    (isolated_home / ".codex").mkdir()
    (isolated_home / ".codex" / "config.toml").write_text(
        f'[projects."{project}"]\ntrust_level = "trusted"\n'
        f'[hooks.state."{hooks}:session_start:0:0"]\ntrusted_hash = "sha256:x"\n')
    code, lines = _doctor(project)
    assert code == 0
    assert not any("not trusted" in line for line in lines)


def test_doctor_fails_in_an_unmarked_linked_worktree(git_repo: Path, tmp_path: Path) -> None:
    """The hooks stand down silently in a linked worktree; doctor must say so and how to fix it."""
    import subprocess as _sp

    wt = tmp_path / "wt"
    _sp.run(["git", "-C", str(git_repo), "worktree", "add", "-q", str(wt)], check=True)
    proc = run_cli("doctor", cwd=wt)
    assert proc.returncode == 1 and b"scope: hooks stay silent here" in proc.stdout
    (wt / ".supervise-primary").write_text("")
    assert b"scope:" not in run_cli("doctor", cwd=wt).stdout
