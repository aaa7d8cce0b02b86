"""The git files watchkeeper reads itself (no git process: ``.git`` as a worktree's pointer
file, a git dir's ``commondir``) as hostile input (issue 11's kinds, in a file nobody listed).

Regression for: a planted ``.git/commondir`` FIFO held every hook and verb forever (the hook
never returned, `supervise digest` even ignored SIGTERM while blocked in the open); a 2 GiB
``.git`` file was read whole. Invariant: these reads are capped and never block; a file that
cannot be used reads as absent, and the hook exits 0 with its digest.
"""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

from helpers import run_cli


def _commondir_fifo(repo: Path) -> None:
    os.mkfifo(repo / ".git" / "commondir")


def _commondir_dev_zero(repo: Path) -> None:
    (repo / ".git" / "commondir").symlink_to("/dev/zero")


def _huge_dotgit_file(repo: Path) -> None:
    (repo / ".git").rename(repo.parent / "moved-git")
    with (repo / ".git").open("wb") as f:
        f.write(b"gitdir: " + str(repo.parent / "moved-git").encode() + b"\n")
        f.truncate(2 << 30)


def _dotgit_fifo(repo: Path) -> None:
    (repo / ".git").rename(repo.parent / "moved-git")
    os.mkfifo(repo / ".git")


PLANTS: dict[str, Callable[[Path], None]] = {
    "commondir-fifo": _commondir_fifo, "commondir-dev-zero": _commondir_dev_zero,
    "huge-dotgit-file": _huge_dotgit_file, "dotgit-fifo": _dotgit_fifo,
}


@pytest.mark.parametrize("kind", list(PLANTS))
def test_hostile_git_files_never_block_a_hook_or_verb(git_repo: Path, kind: str) -> None:
    (git_repo / "AGENTS.md").write_text("ROOT-RULES\n")
    PLANTS[kind](git_repo)
    payload = json.dumps({"session_id": "s", "cwd": str(git_repo), "source": "startup"}).encode()
    hook = run_cli("hook", "claude", "--take-lock", cwd=git_repo, input=payload, timeout=60)
    assert hook.returncode == 0, hook.stderr
    assert "ROOT-RULES" in json.loads(hook.stdout)["hookSpecificOutput"]["additionalContext"]
    for verb in ("digest", "status"):
        run = run_cli(verb, cwd=git_repo, timeout=60)
        assert run.returncode in (0, 1) and b"internal error" not in run.stderr, run.stderr


def test_repo_stage_never_blocks_on_planted_git_state_files(git_repo: Path) -> None:
    """The repo stage read ``.git/MERGE_HEAD``, a rebase's ``msgnum``/``end`` and a linked
    worktree's ``gitdir``/``HEAD`` with blocking reads: a FIFO there held the stage until the
    budget killed it (the repository section lost, a truncation banner instead)."""
    git = git_repo / ".git"
    (git / "rebase-merge").mkdir()
    os.mkfifo(git / "rebase-merge" / "msgnum")
    (git / "rebase-merge" / "end").write_text("3\n")
    os.mkfifo(git / "MERGE_HEAD")
    (git / "worktrees" / "wt").mkdir(parents=True)
    os.mkfifo(git / "worktrees" / "wt" / "gitdir")
    os.mkfifo(git / "worktrees" / "wt" / "HEAD")
    (git_repo / "supervise.toml").write_text(
        'budget = 20\n[[stages]]\nname = "repo"\nbuiltin = "repo"\n')
    run = run_cli("digest", cwd=git_repo, timeout=60)
    assert run.returncode == 0, run.stderr
    out = run.stdout.decode()
    assert "## Repository" in out and "rebase in progress" in out and "TRUNCATED" not in out


@pytest.mark.parametrize("plant", ["fifo", "deep"])
def test_harness_settings_file_never_blocks_install_or_doctor(git_repo: Path, plant: str) -> None:
    """``.claude/settings.json`` as a FIFO held `install`, `uninstall` and `doctor` forever; a
    60,000-deep JSON was an internal error (RecursionError). Each is one line naming the file."""
    settings = git_repo / ".claude" / "settings.json"
    settings.parent.mkdir()
    if plant == "fifo":
        os.mkfifo(settings)
        why = "not a regular file"
    else:
        settings.write_text('{"a": ' + "[" * 60000 + "]" * 60000 + "}")
        why = "nested too deeply"
    for verb in ("install", "uninstall", "doctor"):
        run = run_cli(verb, "claude", cwd=git_repo, timeout=60)
        text = (run.stdout + run.stderr).decode()
        assert run.returncode == 1 and "internal error" not in text, text
        assert f"{settings}: " in text and why in text, text


def test_a_planted_fsmonitor_never_runs(git_repo: Path, tmp_path: Path) -> None:
    """A planted ``.git/config`` naming ``core.fsmonitor`` (a program git status and ls-files
    start on every call) made the repo stage run it. Every stage's git now runs with
    ``core.fsmonitor=false`` forced above the repository's config; the premise (plain git
    runs the planted program) is checked first, so this test can fail."""
    marker = tmp_path / "fsmonitor-ran"
    program = tmp_path / "fsmonitor.sh"
    program.write_text(f"#!/bin/sh\ntouch '{marker}'\nexit 1\n")
    program.chmod(0o755)
    (git_repo / "AGENTS.md").write_text("ROOT-RULES\n")
    (git_repo / "sub").mkdir()
    (git_repo / "sub" / "AGENTS.md").write_text("NESTED\n")
    with (git_repo / ".git" / "config").open("a") as f:
        f.write(f"[core]\n\tfsmonitor = {program}\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
    subprocess.run(["git", "status", "--porcelain"], cwd=git_repo, env=env, check=True,
                   capture_output=True, timeout=60)
    assert marker.exists(), "premise: this git runs core.fsmonitor"
    marker.unlink()
    (git_repo / "supervise.toml").write_text(
        'budget = 20\n[[stages]]\nname = "repo"\nbuiltin = "repo"\n'
        '[[stages]]\nname = "instructions"\nbuiltin = "instructions"\n')
    run = run_cli("digest", cwd=git_repo, timeout=60)
    assert run.returncode == 0, run.stderr
    assert "## Repository" in run.stdout.decode() and "ROOT-RULES" in run.stdout.decode()
    assert not marker.exists(), "a stage's git ran the planted core.fsmonitor"
