"""One registration per harness: ``install`` defers to a scope that has ours, ``doctor`` fails
on two (issue 22, item 2: both fire and the model gets its context twice)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from helpers import run_cli


def _install(repo: Path, harness: str, *scope: str) -> tuple[int, str]:
    run = run_cli("install", harness, *scope, cwd=repo, timeout=60)
    return run.returncode, run.stdout.decode() + run.stderr.decode()


def _files(*roots: Path) -> list[Path]:
    return sorted(p for root in roots for p in root.rglob("*") if p.is_file())


@pytest.mark.parametrize(("harness", "first", "second"), [("claude", "project", "local")])
def test_install_at_a_second_scope_defers_to_the_first(git_repo: Path, isolated_home: Path,
                                                       harness: str, first: str,
                                                       second: str) -> None:
    """Both would fire in one session (Claude loads settings.json and settings.local.json;
    Pi and OpenCode load the user's extension in every project): install writes nothing and
    says how to move it. (A user-scope hook registration carries ``--opt-in`` and stays
    silent where the project's serves, so it is no second one.)"""
    code, out = _install(git_repo, harness, "--scope", first)
    assert code == 0, out
    before = _files(isolated_home, git_repo)
    code, out = _install(git_repo, harness, "--scope", second)
    assert code == 1, out  # refused: not registered where asked
    assert "already" in out and f"supervise uninstall {harness} --scope {first}" in out, out
    assert _files(isolated_home, git_repo) == before  # nothing written at the second scope


@pytest.mark.parametrize("harness", ["pi", "opencode"])
def test_a_user_scope_extension_never_removes_the_projects(git_repo: Path, isolated_home: Path,
                                                           harness: str) -> None:
    """The project's extension may be committed: placing the user's leaves every file of it
    as it was (the old install removed them). Both load at the root; one serves
    (tests/js: claimLoad; e2e: test_pi, test_opencode); the user's is opt-in, so doctor
    counts no double."""
    import subprocess

    assert _install(git_repo, harness)[0] == 0
    subprocess.run(["git", "-C", str(git_repo), "add", "-A"], check=True, capture_output=True)
    subprocess.run(["git", "-C", str(git_repo), "commit", "-qm", "extension"], check=True,
                   capture_output=True)
    before = {p: p.read_bytes() for p in _files(git_repo) if ".git" not in p.parts}
    code, out = _install(git_repo, harness, "--scope", "user")
    assert code == 0 and "stays" in out, out
    after = {p: p.read_bytes() for p in _files(git_repo) if ".git" not in p.parts}
    assert after == before
    status = subprocess.run(["git", "-C", str(git_repo), "status", "--porcelain"],
                            capture_output=True, text=True, check=True).stdout
    assert status == "", status
    # the user's is placed opt-in: it serves opted-in projects only, this one among them
    # (its project extension counts), and one of the two copies stands down where both load
    run = run_cli("doctor", harness, cwd=git_repo, timeout=120)
    text = run.stdout.decode() + run.stderr.decode()
    assert "registered 2 times" not in text and "the user-scope bridge serves this project" in text, text
    code, out = _install(git_repo, harness)  # and a project install beside it is placed again
    assert code == 0 and "already placed" not in out, out


@pytest.mark.parametrize("harness", ["pi", "opencode"])
def test_a_project_install_defers_to_an_older_user_extension(git_repo: Path, isolated_home: Path,
                                                             harness: str) -> None:
    """A user-scope extension placed before opt-in (no ``opt_in`` in its watchkeeper.json)
    delivers in every project: a project install beside it would be a second digest."""
    code, out = _install(git_repo, harness, "--scope", "user")
    assert code == 0, out
    [settings] = [p for p in _files(isolated_home) if p.name == "watchkeeper.json"]
    settings.write_text(json.dumps({k: v for k, v in json.loads(settings.read_text()).items()
                                    if k != "opt_in"}))
    before = _files(isolated_home, git_repo)
    code, out = _install(git_repo, harness)
    assert code == 0 and "already placed" in out, out
    assert f"supervise uninstall {harness} --scope user" in out, out
    assert _files(isolated_home, git_repo) == before
    run = run_cli("doctor", harness, cwd=git_repo, timeout=120)
    assert "serves every project, opted in or not" in run.stdout.decode()


def test_a_user_scope_opt_in_registration_is_no_double(git_repo: Path, isolated_home: Path) -> None:
    code, out = _install(git_repo, "claude")
    assert code == 0, out
    code, out = _install(git_repo, "claude", "--scope", "user")
    assert code == 0 and "already" not in out, out
    run = run_cli("doctor", "claude", cwd=git_repo, timeout=120)
    assert "registered 2 times" not in run.stdout.decode() + run.stderr.decode()


@pytest.mark.parametrize("harness", ["claude", "codex", "gemini", "qwen", "pi", "opencode"])
def test_doctor_fails_on_two_scopes_with_the_fix(git_repo: Path, isolated_home: Path,
                                                 harness: str) -> None:
    """Two registrations, as an older install (or a hand copy) left them: doctor FAILs with
    the uninstall that keeps one, for every harness with two scopes (the old doctor warned for
    hooks and said "all checks passed" for Pi)."""
    code, out = _install(git_repo, harness)
    assert code == 0, out
    copied = 0
    for path in git_repo.rglob("*"):
        rel = path.relative_to(git_repo)
        if path.is_file() and rel.parts[0] in (".claude", ".codex", ".gemini", ".qwen", ".pi",
                                               ".opencode"):
            if rel.parts[0] == ".pi":
                dest = isolated_home / ".pi" / "agent" / Path(*rel.parts[1:])
            elif rel.parts[0] == ".opencode":
                dest = isolated_home / ".config" / "opencode" / Path(*rel.parts[1:])
            else:
                dest = isolated_home / rel
            dest.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy(path, dest)
            copied += 1
    assert copied
    run = run_cli("doctor", harness, cwd=git_repo, timeout=120)
    out = run.stdout.decode() + run.stderr.decode()
    assert run.returncode != 0, out
    line = next((ln for ln in out.splitlines() if "registered 2 times" in ln), "")
    assert "FAIL" in line, out
    assert f"supervise uninstall {harness} --scope user" in out, out


def test_one_registration_is_no_double(git_repo: Path, isolated_home: Path) -> None:
    code, out = _install(git_repo, "claude")
    assert code == 0, out
    run = run_cli("doctor", "claude", cwd=git_repo, timeout=120)
    assert "registered 2 times" not in run.stdout.decode() + run.stderr.decode()
    assert json.loads((git_repo / ".claude" / "settings.json").read_text())["hooks"]
