"""A user-scope install the projects opt into, with the real Claude Code CLI (2.1.197): a
session started in ``packages/widget/`` of an opted-in project (its supervise.toml) gets the
digest, run with that folder as ``SUPERVISE_CWD``; a session in a repository that did not opt
in gets nothing, and nothing is created there."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from conftest import FakeModel, Project, clean_env, harness_bin, run_harness
from test_claude import claude_env

pytestmark = pytest.mark.e2e


def test_user_scope_serves_a_package_session_and_stays_out_of_other_repos(
        project: Project, fake_model: FakeModel, tmp_path: Path) -> None:
    harness_bin("claude")
    widget = project.path / "packages" / "widget"
    widget.mkdir(parents=True)
    project.configure('budget = 30\n[[stages]]\nname = "where"\n'
                      f'run = ["sh", "-c", "echo WHERE-{project.mark} cwd=[$SUPERVISE_CWD]"]\n')
    proc = subprocess.run([sys.executable, "-m", "supervisor", "install", "claude", "--scope",
                           "user"], cwd=project.path, env=clean_env(), capture_output=True,
                          text=True, timeout=60, stdin=subprocess.DEVNULL)
    assert proc.returncode == 0, proc.stderr
    run = run_harness([harness_bin("claude"), "-p", f"turn {project.mark}", "--output-format",
                       "json"], widget, claude_env(fake_model))
    assert run.returncode == 0, run.stderr[-2000:]
    assert fake_model.seen(f"WHERE-{project.mark} cwd=[{widget}]"), "the package session got no digest"

    other = tmp_path / "other"
    other.mkdir()
    subprocess.run(["git", "init", "-q", str(other)], check=True, env=clean_env())
    since = fake_model.count()
    run = run_harness([harness_bin("claude"), "-p", "turn other", "--output-format", "json"],
                      other, claude_env(fake_model))
    assert run.returncode == 0, run.stderr[-2000:]
    bodies = fake_model.bodies(since)
    assert bodies and not any("## Repository" in b or "SessionStart" in b for b in bodies)
    assert not (other / ".supervise").exists()
