"""``install``/``uninstall``/``doctor`` never write through a symbolic link in a settings path.

A hostile clone can ship ``.claude/settings.json -> ../../home/.claude/settings.json`` (or a
linked ``.claude/``): a write through it would register our hooks for every project, and a
dangling link would create its target (adversarial-tester report). Every harness's file is
refused with one line naming the link and its target, exit 1, nothing written.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from helpers import run_cli
from supervisor.adapters import ADAPTERS
from supervisor.bridges._install import get as bridge

PROJECT_HARNESSES = [name for name, a in ADAPTERS.items() if "project" in a.scopes]


def _tree(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): (p.read_bytes() if p.is_file() else b"")
            for p in sorted(root.rglob("*")) if not p.is_symlink()}


def _refused(proc: object, link: Path, target: str) -> None:
    assert proc.returncode == 1, proc.stderr  # type: ignore[attr-defined]
    err = proc.stderr.decode()  # type: ignore[attr-defined]
    lines = err.strip().splitlines()
    assert len(lines) == 1 and str(link) in lines[0] and target in lines[0], err
    assert "symbolic link" in lines[0]


@pytest.mark.parametrize("harness", PROJECT_HARNESSES)
def test_install_refuses_a_settings_file_linked_to_the_user_file(git_repo: Path, isolated_home: Path,
                                                                harness: str) -> None:
    path = ADAPTERS[harness].settings_path("project", git_repo, isolated_home)
    user_file = isolated_home / "user-settings.json"
    user_file.write_text('{"model": "opus"}\n')
    path.parent.mkdir(parents=True, exist_ok=True)
    target = os.path.relpath(user_file, path.parent)
    path.symlink_to(target)
    home_before, repo_before = _tree(isolated_home), _tree(git_repo)
    proc = run_cli("install", harness, cwd=git_repo)
    _refused(proc, path, target)
    assert user_file.read_text() == '{"model": "opus"}\n' and path.is_symlink()
    assert _tree(isolated_home) == home_before and _tree(git_repo) == repo_before


def test_a_dangling_link_does_not_create_its_target(git_repo: Path, isolated_home: Path) -> None:
    link = git_repo / ".claude" / "settings.json"
    link.parent.mkdir()
    link.symlink_to("../../home/.claude/settings.json")
    made = (link.parent / "../../home/.claude/settings.json").resolve()
    proc = run_cli("install", "claude", cwd=git_repo)
    _refused(proc, link, "../../home/.claude/settings.json")
    assert not made.exists() and not made.parent.exists()


def test_a_linked_harness_folder_is_refused(git_repo: Path, isolated_home: Path) -> None:
    (isolated_home / ".claude").mkdir()
    (git_repo / ".claude").symlink_to(isolated_home / ".claude")
    proc = run_cli("install", "claude", "codex", cwd=git_repo)
    _refused(proc, git_repo / ".claude", str(isolated_home / ".claude"))
    assert list((isolated_home / ".claude").iterdir()) == []
    assert not (git_repo / ".codex").exists()  # nothing written, not even the other harness


def test_uninstall_refuses_to_edit_through_a_link(git_repo: Path, isolated_home: Path) -> None:
    assert run_cli("install", "claude", "--scope", "user", cwd=git_repo).returncode == 0
    user_file = isolated_home / ".claude" / "settings.json"
    before = user_file.read_bytes()
    (git_repo / ".claude").mkdir()
    (git_repo / ".claude" / "settings.json").symlink_to(user_file)
    proc = run_cli("uninstall", "claude", cwd=git_repo)
    _refused(proc, git_repo / ".claude" / "settings.json", str(user_file))
    assert user_file.read_bytes() == before


def test_user_scope_grok_file_behind_a_link_is_refused(git_repo: Path, isolated_home: Path,
                                                       tmp_path: Path) -> None:
    elsewhere = tmp_path / "elsewhere.json"
    (isolated_home / ".grok").mkdir()
    link = ADAPTERS["grok"].settings_path("user", git_repo, isolated_home)
    link.symlink_to(elsewhere)
    proc = run_cli("install", "grok", "--scope", "user", cwd=git_repo)
    _refused(proc, link, str(elsewhere))
    assert not elsewhere.exists()


@pytest.mark.parametrize("name", ["pi", "opencode"])
def test_bridge_files_behind_a_link_are_refused(git_repo: Path, isolated_home: Path,
                                                tmp_path: Path, name: str) -> None:
    entry, _core, _settings = bridge(name).files("project", git_repo, isolated_home)
    outside = tmp_path / "outside"
    outside.mkdir()
    entry.parent.parent.mkdir(parents=True, exist_ok=True)
    entry.parent.symlink_to(outside)
    proc = run_cli("install", name, cwd=git_repo)
    _refused(proc, entry.parent, str(outside))
    assert list(outside.iterdir()) == []
    proc = run_cli("doctor", name, cwd=git_repo)
    assert proc.returncode == 1 and f"{entry.parent} is a symbolic link" in proc.stdout.decode()


def test_doctor_flags_a_linked_settings_file(git_repo: Path, isolated_home: Path) -> None:
    assert run_cli("install", "claude", "--scope", "user", cwd=git_repo).returncode == 0
    user_file = isolated_home / ".claude" / "settings.json"
    (git_repo / ".claude").mkdir()
    (git_repo / ".claude" / "settings.json").symlink_to(user_file)
    proc = run_cli("doctor", "claude", cwd=git_repo)
    out = proc.stdout.decode()
    assert proc.returncode == 1
    flagged = [line for line in out.splitlines() if "symbolic link" in line]
    assert flagged and flagged[0].startswith("FAIL") and str(user_file) in flagged[0]
