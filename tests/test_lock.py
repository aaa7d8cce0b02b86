"""Lock and completion record: ownership, staleness (pid reuse), refusal of symlinks."""

from __future__ import annotations


import json
import os
import stat
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from supervisor._record import replace
from supervisor.session import _ancestry, _lock
from supervisor.session._ancestry import ProcessId, identify
from supervisor.session._lock import (
    COMPLETE_FILE,
    LOCK_FILE,
    CompletionRecord,
    LockRecord,
    LockView,
    acquire_for_full_start,
    proven_start,
    read_record,
    read_state,
    record_completion,
)


@pytest.fixture
def other_process() -> Iterator[ProcessId]:
    """A live process that is not one of our ancestors (a foreign harness)."""
    proc = subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.read()"],
                            stdin=subprocess.PIPE)
    ident = identify(proc.pid)
    assert ident is not None
    yield ident
    assert proc.stdin is not None
    proc.stdin.close()
    proc.wait(timeout=10)


def dead_process() -> ProcessId:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    ident = identify(proc.pid) or ProcessId(proc.pid, 1.0)
    proc.wait(timeout=10)
    return ident


def me() -> tuple[ProcessId, list[ProcessId]]:
    ancestors = _ancestry.ancestor_ids(_ancestry.ancestry())
    return ancestors[0], ancestors


def test_first_start_takes_the_lock_and_clears_completion(tmp_path: Path) -> None:
    state = tmp_path / "state"
    state.mkdir()
    (state / COMPLETE_FILE).write_text('{"nonce": "old", "pid": 1, "session_id": "", "completed_at": 0}')
    owner, ancestors = me()
    out = acquire_for_full_start(state, owner, "claude", "s1", ancestors)
    assert out.status == "acquired" and out.record is not None
    assert not (state / COMPLETE_FILE).exists()
    on_disk = read_record(state / LOCK_FILE, LockRecord)
    assert on_disk == out.record
    assert (on_disk.pid, on_disk.harness, on_disk.session_id) == (owner.pid, "claude", "s1")
    assert len(on_disk.nonce) == 32


def test_renewal_by_the_owner_rotates_the_nonce(tmp_path: Path) -> None:
    owner, ancestors = me()
    first = acquire_for_full_start(tmp_path, owner, "claude", "s1", ancestors)
    second = acquire_for_full_start(tmp_path, owner, "claude", "s2", ancestors)
    assert second.status == "acquired" and first.record and second.record
    assert second.record.nonce != first.record.nonce
    assert second.previous == first.record


def test_live_foreign_owner_is_kept(tmp_path: Path, other_process: ProcessId) -> None:
    owner, ancestors = me()
    assert acquire_for_full_start(tmp_path, other_process, "codex", "A", [other_process]).status == "acquired"
    out = acquire_for_full_start(tmp_path, owner, "claude", "B", ancestors)
    assert out.status == "foreign" and out.record is not None
    assert out.record.pid == other_process.pid


def test_dead_owner_is_stale_and_replaced(tmp_path: Path) -> None:
    dead = dead_process()
    assert acquire_for_full_start(tmp_path, dead, "claude", "A", [dead]).status == "acquired"
    owner, ancestors = me()
    out = acquire_for_full_start(tmp_path, owner, "claude", "B", ancestors)
    assert out.status == "acquired" and out.record is not None and out.record.pid == owner.pid


def test_pid_reuse_is_stale(tmp_path: Path, other_process: ProcessId) -> None:
    """A live pid whose create time differs is another process that reused the pid."""
    reused = ProcessId(other_process.pid, other_process.create_time - 1000)
    acquire_for_full_start(tmp_path, reused, "claude", "A", [reused])
    owner, ancestors = me()
    out = acquire_for_full_start(tmp_path, owner, "claude", "B", ancestors)
    assert out.status == "acquired" and out.record is not None and out.record.pid == owner.pid


def test_pid_reuse_of_an_ancestor_is_not_ownership(tmp_path: Path) -> None:
    owner, ancestors = me()
    parent = ancestors[1]
    fake = ProcessId(parent.pid, parent.create_time - 1000)
    acquire_for_full_start(tmp_path, fake, "claude", "A", [fake])
    out = acquire_for_full_start(tmp_path, owner, "claude", "B", ancestors)
    assert out.record is not None
    assert (out.record.pid, out.record.create_time) == (owner.pid, owner.create_time)


def test_same_session_id_in_another_live_process_is_not_ownership(
        tmp_path: Path, other_process: ProcessId) -> None:
    """A session is (harness process, session id): a second live process carrying the same
    id is another owner candidate, never us (issue 12, item 4: 40 processes, one owner)."""
    acquire_for_full_start(tmp_path, other_process, "claude", "S", [other_process])
    owner, ancestors = me()
    assert acquire_for_full_start(tmp_path, owner, "claude", "S", ancestors).status == "foreign"
    view = read_state(tmp_path)
    assert view.lock is not None and view.lock.pid == other_process.pid


def test_corrupt_lock_is_replaced(tmp_path: Path) -> None:
    (tmp_path / LOCK_FILE).write_text("{not json")
    owner, ancestors = me()
    assert acquire_for_full_start(tmp_path, owner, "pi", "", ancestors).status == "acquired"


@pytest.mark.parametrize("plant", ["symlink", "fifo", "directory", "deep", "huge"])
@pytest.mark.parametrize("name", [LOCK_FILE, COMPLETE_FILE, _lock.MUTEX_FILE])
def test_planted_state_file_is_set_aside_and_replaced(tmp_path: Path, plant: str, name: str) -> None:
    """Issue 11 items 1-3: a link is never written through, a FIFO never blocks, a 60,000-deep
    or oversized record is corrupt: each is set aside, named once, and the lock is taken."""
    from supervisor.state._statedir import take_notices

    target = tmp_path / "elsewhere.json"
    target.write_text("{}")
    state = tmp_path / "state"
    state.mkdir()
    path = state / name
    if plant == "symlink":
        path.symlink_to(target)
    elif plant == "fifo":
        os.mkfifo(path)
    elif plant == "directory":
        path.mkdir()
    elif plant == "deep":
        path.write_text("[" * 60_000)
    else:
        with open(path, "wb") as f:
            f.truncate(1 << 30)
    take_notices()
    owner, ancestors = me()
    out = acquire_for_full_start(state, owner, "claude", "", ancestors)
    assert out.status == "acquired", out.reason
    assert target.read_text() == "{}"
    assert read_state(state).lock == out.record
    assert record_completion(state, out.record.nonce, "") == ""
    assert stat.S_ISREG(os.lstat(state / COMPLETE_FILE).st_mode)
    # complete.json is removed (a link is unlinked, not followed); the mutex is never read
    read_back = name == LOCK_FILE or plant in ("symlink", "fifo", "directory")
    if read_back and not (name == COMPLETE_FILE and plant in ("symlink", "fifo")):
        notes = take_notices()
        assert len(notes) == 1 and name in notes[0] and "set aside" in notes[0], notes


def test_symlinked_state_dir_is_refused(tmp_path: Path) -> None:
    real = tmp_path / "real"
    real.mkdir()
    (tmp_path / "state").symlink_to(real)
    owner, ancestors = me()
    out = acquire_for_full_start(tmp_path / "state", owner, "claude", "", ancestors)
    assert out.status == "unusable" and "symlink" in out.reason
    assert list(real.iterdir()) == []


def test_unwritable_state_dir_is_refused(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("")
    owner, ancestors = me()
    out = acquire_for_full_start(blocker / "state", owner, "claude", "", ancestors)
    assert out.status == "unusable" and "cannot be created" in out.reason


def test_completion_needs_the_same_nonce(tmp_path: Path) -> None:
    owner, ancestors = me()
    out = acquire_for_full_start(tmp_path, owner, "claude", "s", ancestors)
    assert out.record is not None
    assert record_completion(tmp_path, "other-nonce", "s") != ""
    assert not (tmp_path / COMPLETE_FILE).exists()
    assert record_completion(tmp_path, out.record.nonce, "s") == ""
    done = read_record(tmp_path / COMPLETE_FILE, CompletionRecord)
    assert done is not None and done.nonce == out.record.nonce
    assert proven_start(read_state(tmp_path), ancestors, "s")


def test_completion_of_another_session_proves_nothing(tmp_path: Path, other_process: ProcessId) -> None:
    """PR #1781: A completes; B must not re-emit on A's proof."""
    a = acquire_for_full_start(tmp_path, other_process, "claude", "A", [other_process])
    assert a.record is not None and record_completion(tmp_path, a.record.nonce, "A") == ""
    _, ancestors = me()
    view = read_state(tmp_path)
    assert view.completion is not None and view.lock is not None
    assert view.completion.nonce == view.lock.nonce
    assert not proven_start(view, ancestors, "B")
    # and a matching nonce without ownership, or ownership without nonce, are both refused
    assert not proven_start(LockView(view.lock, replace(view.completion, nonce="x")),
                            [other_process], "A")
    assert proven_start(view, [other_process], "A")


def test_records_are_json(tmp_path: Path) -> None:
    owner, ancestors = me()
    acquire_for_full_start(tmp_path, owner, "claude", "../../x", ancestors)
    data = json.loads((tmp_path / LOCK_FILE).read_text())
    assert set(data) == {"pid", "create_time", "harness", "session_id", "nonce", "acquired_at",
                         "pid_ns", "boot_id"}
    assert data["session_id"] == "../../x"
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([LOCK_FILE, _lock.MUTEX_FILE])


def test_match_harness() -> None:
    m = _ancestry.match_harness
    assert m("claude", ["claude"]) == "claude"
    assert m("2.1.197", ["/home/u/.local/share/claude/versions/2.1.197"]) == "claude"
    assert m("node", ["node", "/usr/lib/node_modules/@openai/codex/bin/codex.js"]) == "codex"
    assert m("bun", ["bun", "/x/node_modules/opencode-ai/bin/opencode"]) == "opencode"
    assert m("cursor-agent", ["cursor-agent"]) == "cursor"
    assert m("pi", ["pi", "-p"]) == "pi"
    assert m("node", ["node", "/usr/local/bin/gemini"]) == "gemini"
    assert m("python3", ["python3", "pi.py"]) is None
    assert m("bash", ["bash", "/home/pi/x.sh"]) is None
    assert m("pip", ["pip"]) is None
    assert m("sh", []) is None


def test_dead_process_is_not_alive() -> None:
    assert not _ancestry.is_alive(dead_process())
    here = identify(os.getpid())
    assert here is not None and _ancestry.is_alive(here)
