"""A linked worktree shares the main checkout's memory store (git common dir), as
claude-remember keys a worktree's memory to the main checkout (its PR #127); the store's own
records (the handoff delivery count, the consolidation lock) live with the store, so two
worktrees never double-count or consolidate at once. ``share_worktrees = false`` keeps them
apart. Real git worktrees, the real CLI and the real stage program."""

from __future__ import annotations

import datetime as dt
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from helpers import run_cli
from supervisor.config._builtins import builtin_argv
from test_consolidation import command, wait_for, wait_lock_free

STAGE = Path(builtin_argv("memory")[-1])


def git(cwd: Path, *args: str) -> None:
    subprocess.run(["git", "-C", str(cwd), "-c", "user.email=t@t", "-c", "user.name=t", *args],
                   check=True, capture_output=True, timeout=60)


@pytest.fixture
def checkouts(tmp_path: Path) -> tuple[Path, Path]:
    """``(main checkout, linked worktree)``; the main one holds a git-ignored store."""
    main = tmp_path / "main"
    main.mkdir()
    git(main, "init", "-q", "-b", "main")
    (main / "a.txt").write_text("a\n")
    git(main, "add", "a.txt")
    git(main, "commit", "-q", "-m", "initial")
    (main / ".git" / "info" / "exclude").write_text("/.remember/\n")
    (main / ".remember").mkdir()
    (main / ".remember" / "remember.md").write_text("# Handoff\nnext: the shared step\n")
    tree = tmp_path / "feature"
    git(main, "worktree", "add", "-q", str(tree))
    return main, tree


def digest(cwd: Path, *args: str) -> str:
    env = {k: v for k, v in os.environ.items() if k != "SUPERVISE_STATE_DIR"}
    proc = subprocess.run([sys.executable, "-m", "supervisor", "digest", "--session-start",
                           "--only", "memory", *args], cwd=cwd, env=env, capture_output=True,
                          timeout=60)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.decode()


def test_a_worktree_session_gets_the_main_checkout_s_handoff_counted_once(
        checkouts: tuple[Path, Path]) -> None:
    main, tree = checkouts
    first = digest(tree)
    assert "next: the shared step" in first and "Already delivered" not in first
    assert f"Last handoff ({main / '.remember' / 'remember.md'})" in first
    record = main / ".supervise" / "memory" / "handoff.delivered"
    assert "deliveries=1" in record.read_text()  # with the store, not in the worktree
    assert not (tree / ".supervise" / "memory" / "handoff.delivered").exists()
    again = digest(main)  # the main checkout sees the same count: never counted twice
    assert "Already delivered 1 time" in again
    assert "deliveries=2" in record.read_text()


def test_the_hook_in_a_worktree_commits_the_count_with_the_store(
        checkouts: tuple[Path, Path]) -> None:
    """Under a hook the count is staged until the envelope went out whole; staged in the
    store's state dir, it is settled by the worktree's delivery."""
    main, tree = checkouts
    (tree / "supervise.toml").write_text('scope = "any"\n[[stages]]\nname = "memory"\n'
                                         'builtin = "memory"\n')
    payload = json.dumps({"session_id": "w1", "cwd": str(tree), "source": "startup",
                          "hook_event_name": "SessionStart"}).encode()
    env = {k: v for k, v in os.environ.items() if k != "SUPERVISE_STATE_DIR"}
    proc = subprocess.run([sys.executable, "-m", "supervisor", "hook", "claude"], cwd=tree,
                          env=env, input=payload, capture_output=True, timeout=60)
    assert proc.returncode == 0 and b"next: the shared step" in proc.stdout, proc.stderr
    record = main / ".supervise" / "memory" / "handoff.delivered"
    assert "deliveries=1" in record.read_text()
    assert not list((main / ".supervise" / "staged").glob("*/*"))  # settled, nothing left


def test_share_worktrees_false_keeps_them_apart(checkouts: tuple[Path, Path]) -> None:
    _main, tree = checkouts
    (tree / "supervise.toml").write_text('[[stages]]\nname = "memory"\nbuiltin = "memory"\n'
                                         '[stages.options]\nshare_worktrees = false\n')
    assert "shared step" not in digest(tree)


def test_two_worktrees_never_consolidate_at_once(checkouts: tuple[Path, Path],
                                                 tmp_path: Path) -> None:
    main, tree = checkouts
    past = (dt.date.today() - dt.timedelta(days=2)).isoformat()
    (main / ".remember" / f"today-{past}.md").write_text("## 10:00 | main\nold work\n")
    marks, release = tmp_path / "marks", tmp_path / "release"
    marks.mkdir()
    options = json.dumps({"consolidate": command(marks, release)})
    try:
        outs = []
        for cwd in (main, tree):
            env = {k: v for k, v in os.environ.items() if not k.startswith("SUPERVISE_")}
            env.update({"SUPERVISE_SOURCE": "startup", "SUPERVISE_PROJECT_DIR": str(cwd),
                        "SUPERVISE_STATE_DIR": str(cwd / ".supervise"),
                        "SUPERVISE_STAGE_NAME": "memory", "SUPERVISE_STAGE_OPTIONS": options})
            proc = subprocess.run([sys.executable, str(STAGE)], env=env, cwd=cwd,
                                  stdin=subprocess.DEVNULL, capture_output=True, timeout=60)
            outs.append(proc.stdout.decode())
            if cwd == main:
                wait_for(marks / "started")
        assert "running consolidation in the background" in outs[0]
        assert "a consolidation is already running" in outs[1]
    finally:
        release.write_text("go")
    wait_for(marks / "done")
    wait_lock_free(main / ".supervise")
    assert len((marks / "starts.log").read_text().splitlines()) == 1
