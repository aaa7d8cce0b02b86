"""The refresh's watch list against the fast path (``supervisor/hook-fast.sh``): a second
session starting, a deleted instruction file, an edit made while a baseline is recorded, and
a missing watch list. Each case runs the shim with an interpreter that records whether it was
started, and compares with what Python's :func:`take_changed` would deliver."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from supervisor.commands.install import FAST_PATH, SHELL
from supervisor.session import _fastpath, _refresh
from supervisor.session._refresh import record_baseline, take_changed

pytestmark = pytest.mark.usefixtures("future_stamp")


@pytest.fixture
def future_stamp(monkeypatch: pytest.MonkeyPatch) -> None:
    """Stamp the watch list 60 s ahead: every ctime is then before the stamp, so the shim's
    answer rests on the recorded ctimes alone (what a baseline older than the slack gets),
    with no waiting for the clock."""
    monkeypatch.setattr(_fastpath, "MTIME_SLACK", -60.0)


@pytest.fixture
def project(tmp_path: Path) -> Path:
    root = tmp_path / "my project"
    root.mkdir()
    subprocess.run(["git", "init", "-q", str(root)], check=True,
                   env={k: v for k, v in os.environ.items() if not k.startswith("GIT_")})
    (root / "CLAUDE.md").write_text("rule one\n")
    return root


def ran_python(project: Path, tmp_path: Path, sid: str, *, harness: str = "claude",
               data: dict[str, object] | None = None) -> bool:
    folder = tmp_path / "py dir"
    folder.mkdir(exist_ok=True)
    record = folder / "starts"
    wrapper = folder / "python"
    if not wrapper.exists():  # records its start, runs nothing (the answer is Python's below)
        wrapper.write_text(f'#!/bin/sh\necho started >> "{record}"\ncat >/dev/null\n')
        wrapper.chmod(0o755)
    record.unlink(missing_ok=True)
    payload = json.dumps(data or {"session_id": sid, "cwd": str(project), "prompt": "x"},
                         separators=(",", ":")).encode()
    env = {k: v for k, v in os.environ.items() if k not in ("PATH", "SUPERVISE_STATE_DIR")}
    proc = subprocess.run([SHELL, str(FAST_PATH), str(wrapper), "-P", "-m", "supervisor", "hook",
                           harness, "--event", "prompt"], input=payload, capture_output=True,
                          cwd=project, env=env, timeout=30)
    assert proc.returncode == 0, proc.stderr
    return record.exists()


def baseline(project: Path, sid: str) -> None:
    record_baseline(project / ".supervise", sid, "claude",
                    [(str(project / "CLAUDE.md"), "CLAUDE.md", "harness")], project)


def test_a_second_session_starting_keeps_the_first_ones_change(project: Path,
                                                                 tmp_path: Path) -> None:
    state = project / ".supervise"
    baseline(project, "sA")
    assert not ran_python(project, tmp_path, "sA")
    (project / "CLAUDE.md").write_text("rule one, revised\n")
    baseline(project, "sB")  # re-stamps the list: A's baseline is still stale
    assert ran_python(project, tmp_path, "sA")
    assert take_changed(state, "sA", project).startswith("INSTRUCTIONS CHANGED: CLAUDE.md")
    assert take_changed(state, "sB", project) == ""
    assert not ran_python(project, tmp_path, "sA")  # settled: no Python for either
    assert not ran_python(project, tmp_path, "sB")


def test_a_deleted_file_is_quiet_once_delivered_and_its_return_is_a_change(
        project: Path, tmp_path: Path) -> None:
    state = project / ".supervise"
    baseline(project, "sA")
    (project / "CLAUDE.md").unlink()
    assert ran_python(project, tmp_path, "sA")
    assert "was deleted" in take_changed(state, "sA", project)
    assert not ran_python(project, tmp_path, "sA")  # delivered: no Python on every prompt
    assert take_changed(state, "sA", project) == ""
    (project / "CLAUDE.md").write_text("back again\n")
    assert ran_python(project, tmp_path, "sA")
    assert "back again" in take_changed(state, "sA", project)
    (project / "CLAUDE.md").unlink()
    assert "was deleted" in take_changed(state, "sA", project)
    (project / "CLAUDE.md").symlink_to(tmp_path / "nowhere")  # a dangling link: a change
    assert ran_python(project, tmp_path, "sA")


def test_a_deleted_file_with_its_folder_is_quiet_once_delivered(project: Path,
                                                                tmp_path: Path) -> None:
    state = project / ".supervise"
    sub = project / "sub"
    sub.mkdir()
    (sub / "AGENTS.md").write_text("x\n")
    record_baseline(state, "sA", "claude", [(str(sub / "AGENTS.md"), "sub/AGENTS.md", "digest")],
                    project)
    (sub / "AGENTS.md").unlink()
    sub.rmdir()
    assert "was deleted" in take_changed(state, "sA", project)
    assert not ran_python(project, tmp_path, "sA")


def test_an_edit_between_the_hash_and_the_watch_stamp_is_seen(
        project: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    state = project / ".supervise"
    rules = project / "CLAUDE.md"
    real = _refresh.read_file
    edited: list[str] = []

    def read_then_edit(path: str, scope: object) -> object:
        found = real(path, scope)  # type: ignore[arg-type]
        if not edited:  # the hook point: right after the baseline's hash, before its stamp
            rules.write_text("edited while the baseline was written\n")
            edited.append(path)
        return found

    monkeypatch.setattr(_refresh, "read_file", read_then_edit)
    baseline(project, "sA")
    monkeypatch.setattr(_refresh, "read_file", real)
    assert edited
    assert ran_python(project, tmp_path, "sA")
    assert "edited while the baseline" in take_changed(state, "sA", project)


def test_baselines_without_a_watch_list_run_python(project: Path, tmp_path: Path) -> None:
    state = project / ".supervise"
    baseline(project, "sA")
    assert not ran_python(project, tmp_path, "sA")
    (state / "fastpath" / "watch").unlink()
    (project / "CLAUDE.md").write_text("changed\n")
    assert ran_python(project, tmp_path, "sA")
    assert "changed" in take_changed(state, "sA", project)
