"""``supervise doctor``: one line per check, a fix per failure, exit 1 when anything fails."""

from __future__ import annotations

import json
import re
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


def test_milliseconds_are_understood_for_gemini(project: Path, isolated_home: Path) -> None:
    assert run_cli("install", "gemini", cwd=project).returncode == 0
    _gemini_rules(isolated_home, {str(project): "TRUST_FOLDER"})
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


def _trust_codex(project: Path, home: Path, *, hashes: dict[str, str] | None = None) -> None:
    """Write Codex's user config.toml trusting the project and each of our handlers with the
    hash Codex would store (or ``hashes[key]`` instead)."""
    from supervisor.commands.doctor import codex_hook_hash

    hooks = project / ".codex" / "hooks.json"
    data = json.loads(hooks.read_text())
    snake = {"SessionStart": "session_start", "UserPromptSubmit": "user_prompt_submit",
             "PostToolUse": "post_tool_use"}
    lines = [f'[projects."{project}"]', 'trust_level = "trusted"']
    for event, groups in data["hooks"].items():
        for gi, group in enumerate(groups):
            for hi, handler in enumerate(group["hooks"]):
                key = f"{hooks}:{snake[event]}:{gi}:{hi}"
                value = (hashes or {}).get(key) or codex_hook_hash(snake[event], group.get("matcher"),
                                                                    handler)
                lines += [f'[hooks.state."{key}"]', f'trusted_hash = "{value}"']
    (home / ".codex").mkdir(exist_ok=True)
    (home / ".codex" / "config.toml").write_text("\n".join(lines) + "\n")


def test_codex_hash_matches_codex_for_a_known_handler() -> None:
    """A golden value Codex itself stored (published with a public project's trust tests)."""
    from supervisor.commands.doctor import codex_hook_hash

    handler = {"type": "command", "command": "'/Applications/GWT.app/Contents/MacOS/gwtd' hook event PostToolUse"}
    assert codex_hook_hash("post_tool_use", "*", handler) == \
        "sha256:9c3ce103f03f0b27a28bc4a30883f7e98a80b5df566b4572fcbb2955ebf5ba62"
    assert codex_hook_hash("post_tool_use", "*", {**handler, "timeout": 30}) != \
        codex_hook_hash("post_tool_use", "*", handler)


def test_untrusted_codex_hooks_fail_with_the_fix(project: Path, isolated_home: Path) -> None:
    assert run_cli("install", "codex", cwd=project).returncode == 0
    code, lines = _doctor(project)
    assert code == 1, "\n".join(lines)
    fails = _fails(lines)
    assert any("codex: project" in f and "not trusted" in f and "trust_level" in f for f in fails)
    assert any("hooks not trusted yet" in f and "/hooks" in f for f in fails)
    assert lines[-1] != "all checks passed"
    _trust_codex(project, isolated_home)
    code, lines = _doctor(project)
    assert code == 0, "\n".join(lines)
    assert "ok    codex: the hooks are trusted in" in "\n".join(lines)


def test_stale_codex_trust_hash_is_detected(project: Path, isolated_home: Path) -> None:
    assert run_cli("install", "codex", cwd=project).returncode == 0
    _trust_codex(project, isolated_home)
    assert _doctor(project)[0] == 0
    # the registration changes (a bigger budget means a new timeout): the stored hash is stale
    (project / "supervise.toml").write_text(GOOD_TOML.replace("budget = 30", "budget = 100"))
    assert run_cli("install", "codex", cwd=project).returncode == 0
    code, lines = _doctor(project)
    assert code == 1
    assert any("trust of SessionStart is stale" in f and "/hooks" in f for f in _fails(lines)), lines


def test_a_correct_setup_prints_no_warnings(project: Path, isolated_home: Path) -> None:
    assert run_cli("install", "claude", "codex", "gemini", "pi", cwd=project).returncode == 0
    _trust_codex(project, isolated_home)
    _gemini_rules(isolated_home, {str(project): "TRUST_FOLDER"})
    code, lines = _doctor(project)
    assert code == 0, "\n".join(lines)
    assert [line for line in lines if line.startswith("warn")] == []
    assert lines[-1] == "all checks passed"


def test_supervisord_import_name_clash_is_detected(project: Path, tmp_path: Path) -> None:
    """supervisord is `supervisor` on PyPI: its dist-info, or its __init__.py over ours, fails."""
    import shutil

    site = tmp_path / "site"
    dist = site / "supervisor-4.2.5.dist-info"
    dist.mkdir(parents=True)
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: supervisor\nVersion: 4.2.5\n")
    proc = run_cli("doctor", cwd=project, env={"PYTHONPATH": str(site)})
    assert proc.returncode == 1
    out = proc.stdout.decode()
    assert "FAIL  package: supervisord (supervisor 4.2.5) is installed" in out and "pipx" in out
    # the overwrite itself: a copy of the package whose __init__.py is supervisord's
    here = Path(__file__).resolve().parents[1]
    shutil.rmtree(dist)
    shutil.copytree(here / "supervisor", site / "supervisor")
    shutil.copytree(here / "stages", site / "stages")
    (site / "supervisor" / "__init__.py").write_text("# this is a package\n")
    proc = run_cli("doctor", cwd=project, env={"PYTHONPATH": str(site)})
    out = proc.stdout.decode()
    assert "FAIL  package:" in out and "run_digest` fails" in out, out
    assert proc.returncode == 1


def test_doctor_fails_in_an_unmarked_linked_worktree(git_repo: Path, tmp_path: Path) -> None:
    """The hooks stand down silently in a linked worktree; doctor must say so and how to fix it."""
    import subprocess as _sp

    wt = tmp_path / "wt"
    _sp.run(["git", "-C", str(git_repo), "worktree", "add", "-q", str(wt)], check=True)
    proc = run_cli("doctor", cwd=wt)
    assert proc.returncode == 1 and b"scope: hooks stay silent here" in proc.stdout
    (wt / ".supervise-primary").write_text("")
    assert b"scope:" not in run_cli("doctor", cwd=wt).stdout


_NO_GEMINI_ENV = {"GEMINI_CLI_TRUST_WORKSPACE": "", "GEMINI_RESTRICTED_MODE": "", "GEMINI_CLI_HOME": "",
                  "GEMINI_CLI_TRUSTED_FOLDERS_PATH": ""}
"""Gemini's trust variables neutralised (an empty value is not "true"/"false", nor a path)."""


def _gemini_rules(home: Path, rules: dict[str, str]) -> None:
    (home / ".gemini").mkdir(exist_ok=True)
    (home / ".gemini" / "trustedFolders.json").write_text(json.dumps(rules))


def _gemini_line(project: Path, env: dict[str, str] | None = None) -> str:
    code, lines = _doctor(project, "gemini", env={**_NO_GEMINI_ENV, **(env or {})})
    found = [line for line in lines if re.match(
        r"(ok|warn|FAIL) +gemini: (the folder is trusted|folder trust is off|\S+ is not trusted by "
        r"Gemini|\S+ is marked DO_NOT_TRUST|this environment makes Gemini|cannot tell whether)", line)]
    assert len(found) == 1, lines
    assert code == (1 if found[0].startswith("FAIL") else 0), lines
    return found[0]


def test_gemini_folder_trust_is_checked(project: Path, isolated_home: Path) -> None:
    """Gemini CLI 0.61.0 loads project settings only in a trusted folder: untrusted, a headless
    `gemini -p` exits 55 and `--skip-trust` runs without our hooks, while doctor used to say
    "all checks passed". The rules follow Gemini's checkPathTrust (longest rule wins,
    TRUST_PARENT covers the rule's parent)."""
    assert run_cli("install", "gemini", cwd=project).returncode == 0
    line = _gemini_line(project)
    assert line.startswith("FAIL  gemini: ") and "not trusted by Gemini CLI" in line, line
    assert "GEMINI_CLI_TRUST_WORKSPACE=true" in line and "folderTrust" in line, line
    _gemini_rules(isolated_home, {str(project): "TRUST_FOLDER"})
    assert _gemini_line(project).startswith("ok    gemini: the folder is trusted"), project
    _gemini_rules(isolated_home, {str(project / "pkg"): "TRUST_PARENT"})
    assert _gemini_line(project).startswith("ok    gemini: the folder is trusted")
    _gemini_rules(isolated_home, {str(project.parent): "TRUST_FOLDER", str(project): "DO_NOT_TRUST"})
    assert "DO_NOT_TRUST" in _gemini_line(project).split(" -> ")[0]
    _gemini_rules(isolated_home, {str(project) + "-other": "TRUST_FOLDER"})  # a prefix, not a parent
    assert _gemini_line(project).startswith("FAIL")
    assert _gemini_line(project, {"GEMINI_CLI_TRUST_WORKSPACE": "true"}).startswith("ok")
    assert _gemini_line(project, {"GEMINI_CLI_TRUST_WORKSPACE": "false"}).startswith("FAIL")
    (isolated_home / ".gemini" / "settings.json").write_text(
        '{"security": {"folderTrust": {"enabled": false}}}\n')
    assert "folder trust is off" in _gemini_line(project)


def test_gemini_user_registration_needs_no_folder_rule(project: Path) -> None:
    assert run_cli("install", "gemini", "--scope", "user", cwd=project).returncode == 0
    code, lines = _doctor(project, "gemini", env=_NO_GEMINI_ENV)
    assert code == 0, lines
    assert not [line for line in lines if "Gemini" in line or "folder trust" in line], lines


def test_doctor_in_a_subdirectory_warns_where_sessions_there_get_nothing(project: Path) -> None:
    """Claude Code and Gemini CLI read project settings from the session's working directory
    only: run from `pkg/` with only the root's registration, doctor said all was well while a
    session started there got no digest (observed with both real CLIs)."""
    (project / "pkg").mkdir()
    assert run_cli("install", "claude", "codex", cwd=project).returncode == 0
    lines = run_cli("doctor", "claude", cwd=project / "pkg").stdout.decode().splitlines()
    warned = [line for line in lines if line.startswith("warn")]
    assert len(warned) == 1 and "claude: a session started in pkg/ gets no digest" in warned[0], lines
    assert "supervise install claude --scope user" in warned[0]
    lines = run_cli("doctor", "-C", str(project / "pkg"), "codex", cwd=project).stdout.decode().splitlines()
    assert not [line for line in lines if "gets no digest" in line], lines  # Codex reads the root's
    lines = run_cli("doctor", "claude", cwd=project).stdout.decode().splitlines()
    assert not [line for line in lines if "gets no digest" in line], lines  # at the root: fine
    assert run_cli("install", "claude", "--scope", "user", cwd=project).returncode == 0
    lines = run_cli("doctor", "claude", cwd=project / "pkg").stdout.decode().splitlines()
    assert not [line for line in lines if "gets no digest" in line], lines  # user scope fires there


def test_memory_store_kept_out_of_git(git_repo: Path) -> None:
    """The memory stage refuses tracked memory files: doctor warns while the store is one
    `git add -A` away from that, fails once a file is tracked, and is quiet without a store."""
    import subprocess

    memory = '[[stages]]\nname = "memory"\nbuiltin = "memory"\n'
    (git_repo / "supervise.toml").write_text(memory)
    assert not [line for line in _doctor(git_repo)[1] if "memory store" in line]
    (git_repo / ".remember").mkdir()
    (git_repo / ".remember" / "remember.md").write_text("handoff\n")
    lines = [line for line in _doctor(git_repo)[1] if "memory store" in line]
    assert len(lines) == 1 and lines[0].startswith("warn  memory store: .remember/ is not git-ignored"), lines
    subprocess.run(["git", "-C", str(git_repo), "add", ".remember"], check=True, timeout=30)
    code, lines = _doctor(git_repo)
    fails = [line for line in _fails(lines) if "memory store" in line]
    assert code == 1 and len(fails) == 1 and "1 file(s) in .remember/ are tracked" in fails[0], lines
    assert "git rm -r --cached -- .remember" in fails[0]
    subprocess.run(["git", "-C", str(git_repo), "rm", "-rq", "--cached", ".remember"], check=True, timeout=30)
    with open(git_repo / ".git" / "info" / "exclude", "a") as f:
        f.write("/.remember/\n")
    assert "ok    memory store: .remember/ is git-ignored" in _doctor(git_repo)[1]
    (git_repo / "supervise.toml").write_text(memory + '[stages.options]\ndir = "notes"\n')
    (git_repo / "notes").mkdir()
    assert "warn  memory store: notes/ is not git-ignored" in "\n".join(_doctor(git_repo)[1])


def test_memory_store_check_takes_the_dir_as_the_stage_does(git_repo: Path, tmp_path: Path) -> None:
    """The memory store check: a ``.remember`` link loop was an internal error (RuntimeError
    from ``resolve``); ``dir = "~/notes"`` was not expanded as the stage expands it; an
    absolute dir inside the project gave "add //home/.../.remember/ to .gitignore"; and a dir
    with glob characters went to ``git ls-files`` as a glob (``mem*`` matched ``mem1/``)."""
    import subprocess

    memory = '[[stages]]\nname = "memory"\nbuiltin = "memory"\n'
    (git_repo / "supervise.toml").write_text(memory)
    (git_repo / ".remember").symlink_to(".remember")
    code, lines = _doctor(git_repo)
    assert code != 3 and [line for line in lines if line.startswith("warn  memory store:")], lines
    (git_repo / ".remember").unlink()

    (git_repo / ".remember").mkdir()
    (git_repo / ".remember" / "remember.md").write_text("handoff\n")
    (git_repo / "supervise.toml").write_text(
        memory + f'[stages.options]\ndir = "{git_repo / ".remember"}"\n')
    lines = [line for line in _doctor(git_repo)[1] if "memory store" in line]
    assert lines and "add /.remember/ to" in lines[0] and "//" not in lines[0], lines

    (git_repo / "mem1").mkdir()
    (git_repo / "mem1" / "x.md").write_text("x\n")
    subprocess.run(["git", "-C", str(git_repo), "add", "mem1"], check=True, timeout=30)
    (git_repo / "mem*").mkdir()
    (git_repo / "mem*" / "remember.md").write_text("mine\n")
    (git_repo / "supervise.toml").write_text(memory + '[stages.options]\ndir = "mem*"\n')
    lines = [line for line in _doctor(git_repo)[1] if "memory store" in line]
    assert len(lines) == 1 and lines[0].startswith("warn  memory store: mem*/ is not git-ignored"), lines
    subprocess.run(["git", "-C", str(git_repo), "add", "mem*/remember.md"], check=True, timeout=30)
    fails = [line for line in _fails(_doctor(git_repo)[1]) if "memory store" in line]
    assert len(fails) == 1 and "1 file(s) in mem*/" in fails[0] and "':(literal)mem*'" in fails[0], fails

    (git_repo / "notes").mkdir()
    (git_repo / "notes" / "n.md").write_text("n\n")
    subprocess.run(["git", "-C", str(git_repo), "add", "notes"], check=True, timeout=30)
    (git_repo / "supervise.toml").write_text(memory + '[stages.options]\ndir = "~/notes"\n')
    code, lines = _doctor(git_repo, env={"HOME": str(git_repo)})
    fails = [line for line in _fails(lines) if "memory store" in line]
    assert len(fails) == 1 and "in notes/ are tracked" in fails[0], lines


def test_doctor_judges_registrations_by_scope_when_the_project_is_home(git_repo: Path) -> None:
    """With the project as the home folder, the user-scope registration lies inside the
    project: doctor took it for a project one and warned that a session in ``pkg/`` gets no
    digest (the user scope fires there). Judged by scope now."""
    (git_repo / "supervise.toml").write_text(GOOD_TOML)
    (git_repo / "pkg").mkdir()
    env = {"HOME": str(git_repo)}
    assert run_cli("install", "claude", "--scope", "user", cwd=git_repo, env=env).returncode == 0
    assert (git_repo / ".claude" / "settings.json").is_file()
    lines = run_cli("doctor", "claude", cwd=git_repo / "pkg", env=env).stdout.decode().splitlines()
    assert [line for line in lines if line.startswith("ok    claude")], lines
    assert not [line for line in lines if "gets no digest" in line], lines


def test_gemini_relative_trust_rules_are_ignored(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Gemini CLI ignores a relative rule in trustedFolders.json; doctor resolved it against
    its own working directory, so ``"."`` trusted whatever folder doctor ran in."""
    from supervisor.commands._gemini_trust import gemini_trust

    home, project = tmp_path / "home", tmp_path / "proj"
    (home / ".gemini").mkdir(parents=True)
    project.mkdir()
    (home / ".gemini" / "trustedFolders.json").write_text(json.dumps({".": "TRUST_FOLDER"}))
    monkeypatch.chdir(project)
    status, text, _fix = gemini_trust(project, env={}, home=home)
    assert status == "FAIL" and "not trusted" in text, text
    (home / ".gemini" / "trustedFolders.json").write_text(json.dumps({str(project): "TRUST_FOLDER"}))
    assert gemini_trust(project, env={}, home=home)[0] == "ok"
