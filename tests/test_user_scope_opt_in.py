"""A user-scope install that a project opts into: the registration (``--opt-in``) stays silent
in a repository that did not opt in and creates nothing there; it serves every subdirectory
session of one that did (a supervise.toml, a [tool.supervise] table, or a project-scope
install, which Claude Code does not load from a subdirectory); doctor explains the monorepo
case and its fix is the right one. Real CLI processes; the command run is the one install
registered."""

from __future__ import annotations

import json
import shlex
import subprocess
from pathlib import Path

import pytest

from helpers import run_cli


def repo(path: Path) -> Path:
    (path / "packages" / "widget").mkdir(parents=True)
    subprocess.run(["git", "init", "-q", str(path)], check=True, timeout=30)
    return path


def registered(home: Path, event: str = "SessionStart") -> list[str]:
    data = json.loads((home / ".claude" / "settings.json").read_text())
    return shlex.split(data["hooks"][event][0]["hooks"][0]["command"])


def fire(argv: list[str], cwd: Path, payload: dict[str, object]) -> str:
    proc = subprocess.run(argv, cwd=cwd, input=json.dumps(payload).encode(), capture_output=True,
                          timeout=60)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.decode()


def start(cwd: Path, sid: str = "s1") -> dict[str, object]:
    return {"session_id": sid, "cwd": str(cwd), "source": "startup",
            "hook_event_name": "SessionStart"}


@pytest.fixture
def installed(isolated_home: Path, tmp_path: Path) -> list[str]:
    where = repo(tmp_path / "where-installed")
    (where / "supervise.toml").write_text("budget = 30\n")
    assert run_cli("install", "claude", "--scope", "user", cwd=where).returncode == 0
    argv = registered(isolated_home)
    assert "--opt-in" in argv
    assert json.loads((isolated_home / ".claude" / "settings.json").read_text())[
        "hooks"]["SessionStart"][0]["hooks"][0]["timeout"] == 180  # the default budget fits
    assert "--opt-in" in registered(isolated_home, "PostToolUse")
    return argv


MARK = '[[stages]]\nname = "mark"\nrun = ["sh", "-c", "echo OPTED-IN-$SUPERVISE_CWD"]\n'


def test_silent_and_creates_nothing_in_a_repository_that_did_not_opt_in(
        installed: list[str], tmp_path: Path) -> None:
    other = repo(tmp_path / "other")
    assert fire(installed, other / "packages" / "widget", start(other / "packages" / "widget")) == ""
    assert fire(installed, other, start(other)) == ""
    assert not (other / ".supervise").exists()
    assert "supervise" not in (other / ".git" / "info" / "exclude").read_text()


def test_serves_every_subdirectory_session_of_an_opted_in_project(
        installed: list[str], tmp_path: Path) -> None:
    mono = repo(tmp_path / "mono")
    (mono / "supervise.toml").write_text(MARK)
    out = fire(installed, mono / "packages" / "widget", start(mono / "packages" / "widget"))
    assert f"OPTED-IN-{mono / 'packages' / 'widget'}" in out


def test_a_pyproject_table_opts_in_too(installed: list[str], tmp_path: Path) -> None:
    mono = repo(tmp_path / "py")
    (mono / "pyproject.toml").write_text("[project]\nname = 'x'\n\n[tool.supervise]\n"
                                         + MARK.replace("[[stages]]", "[[tool.supervise.stages]]"))
    assert "OPTED-IN-" in fire(installed, mono / "packages", start(mono / "packages"))


def test_a_project_install_counts_and_its_own_registration_serves_the_root(
        installed: list[str], tmp_path: Path, isolated_home: Path) -> None:
    mono = repo(tmp_path / "proj")
    assert run_cli("install", "claude", cwd=mono).returncode == 0  # a project-scope install
    # at the root Claude loads .claude/settings.json itself: the user registration is silent
    assert fire(installed, mono, start(mono)) == ""
    # in packages/widget Claude loads no project settings: the user registration serves
    widget = mono / "packages" / "widget"
    assert "## Repository" in fire(installed, widget, start(widget, "s2"))


def test_doctor_explains_the_monorepo_case_with_the_right_fix(
        isolated_home: Path, tmp_path: Path) -> None:
    mono = repo(tmp_path / "mono")
    assert run_cli("install", "claude", cwd=mono).returncode == 0
    out = run_cli("doctor", "claude", "-C", str(mono / "packages" / "widget")).stdout.decode()
    line = next(ln for ln in out.splitlines() if "gets no digest" in ln)
    assert "supervise install claude --scope user" in line
    assert run_cli("install", "claude", "--scope", "user", cwd=mono).returncode == 0
    out = run_cli("doctor", "claude", "-C", str(mono / "packages" / "widget")).stdout.decode()
    assert "the user-scope registration serves this project" in out
    assert "gets no digest" not in out
    other = repo(tmp_path / "other")
    out = run_cli("doctor", "claude", "-C", str(other)).stdout.decode()
    assert "the user-scope registration stays silent here: this project did not opt in" in out
    assert "supervise config --default >" in out
    assert "fix: supervise install claude\n" not in out + "\n"  # never a second registration
