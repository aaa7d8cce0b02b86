"""The one door to the state dir: no link followed, nothing blocks, reads capped, corrupt files
set aside and replaced (issue 11, items 1-4)."""

from __future__ import annotations

import json
import os
import stat
from collections.abc import Callable
from pathlib import Path

import pytest

from supervisor._errors import StateError
from supervisor.state._statedir import CORRUPT_SUFFIX, RECORD_CAP, StateDir, take_notices

DEEP = b"[" * 60_000


def plant_symlink(path: Path, victim: Path) -> None:
    path.symlink_to(victim)


def plant_fifo(path: Path, victim: Path) -> None:
    os.mkfifo(path)


def plant_dir(path: Path, victim: Path) -> None:
    path.mkdir()
    (path / "inner").write_text("x")


def plant_deep(path: Path, victim: Path) -> None:
    path.write_bytes(DEEP)


def plant_huge(path: Path, victim: Path) -> None:
    with open(path, "wb") as f:  # sparse: 3 GiB that costs no disk
        f.truncate(3 << 30)


PLANTS: dict[str, Callable[[Path, Path], None]] = {
    "symlink": plant_symlink, "fifo": plant_fifo, "directory": plant_dir,
    "deep-json": plant_deep, "oversized": plant_huge,
}


@pytest.fixture
def victim(tmp_path: Path) -> Path:
    v = tmp_path / "victim.txt"
    v.write_text('{"precious": true}')
    return v


@pytest.fixture
def state(tmp_path: Path) -> Path:
    s = tmp_path / "proj" / ".supervise"
    s.mkdir(parents=True)
    take_notices()
    return s


@pytest.mark.parametrize("kind", PLANTS)
def test_read_json_sets_a_planted_file_aside(kind: str, state: Path, victim: Path) -> None:
    PLANTS[kind](state / "lock.json", victim)
    with StateDir.open(state) as sd:
        assert sd.read_json("lock.json", RECORD_CAP) is None
        sd.write_json("lock.json", {"ok": 1})
        assert sd.read_json("lock.json", RECORD_CAP) == {"ok": 1}
    assert victim.read_text() == '{"precious": true}'
    assert os.path.lexists(state / ("lock.json" + CORRUPT_SUFFIX))
    notes = take_notices()
    assert len(notes) == 1 and "lock.json" in notes[0] and "set aside" in notes[0], notes
    assert take_notices() == []  # named once


@pytest.mark.parametrize("kind", PLANTS)
def test_write_replaces_a_planted_file_without_following(kind: str, state: Path, victim: Path) -> None:
    PLANTS[kind](state / "rec.json", victim)
    with StateDir.open(state) as sd:
        sd.write("rec.json", b"new", fsync=True)
    assert (state / "rec.json").read_bytes() == b"new"
    assert victim.read_text() == '{"precious": true}'


@pytest.mark.parametrize("kind", ["symlink", "fifo", "directory"])
def test_append_and_flock_never_go_through_a_plant(kind: str, state: Path, victim: Path) -> None:
    PLANTS[kind](state / "x.log", victim)
    PLANTS[kind](state / "x.flock", victim)
    with StateDir.open(state) as sd:
        sd.append("x.log", b"line\n", max_bytes=1 << 20)
        with sd.flock("x.flock", timeout=1.0) as held:
            assert held
    assert (state / "x.log").read_bytes() == b"line\n"
    assert stat.S_ISREG(os.lstat(state / "x.flock").st_mode)
    assert victim.read_text() == '{"precious": true}'


def test_append_rotates_at_its_cap(state: Path) -> None:
    with StateDir.open(state) as sd:
        for _ in range(30):
            sd.append("a.log", b"x" * 99 + b"\n", max_bytes=1000)
    assert (state / "a.log").stat().st_size <= 1000
    assert (state / "a.log.1").stat().st_size <= 1000


@pytest.mark.parametrize("kind", ["symlink", "fifo", "deep-json"])
def test_sub_folder_plant_is_set_aside_and_recreated(kind: str, state: Path, tmp_path: Path) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    PLANTS[kind](state / "deferred", elsewhere)
    with StateDir.open(state) as sd:
        with sd.sub("deferred", create=True) as sub:  # type: ignore[union-attr]
            sub.write("f", b"1")
    assert (state / "deferred" / "f").read_bytes() == b"1"
    assert list(elsewhere.iterdir()) == []


def test_symlinked_state_dir_is_refused(tmp_path: Path) -> None:
    real = tmp_path / "real"
    real.mkdir()
    (tmp_path / ".supervise").symlink_to(real)
    with pytest.raises(StateError, match="symlink"):
        StateDir.open(tmp_path / ".supervise", create=True)
    with pytest.raises(StateError, match="symlink"):
        StateDir.open_existing(tmp_path / ".supervise")
    assert list(real.iterdir()) == []


def test_shape_check_failure_is_corrupt(state: Path) -> None:
    (state / "r.json").write_text("[1, 2]")

    def must_be_object(v: object) -> dict[str, object]:
        if not isinstance(v, dict):
            raise ValueError("expected an object")
        return v

    with StateDir.open(state) as sd:
        assert sd.read_json("r.json", 100, must_be_object) is None
    assert (state / "r.json.corrupt").read_text() == "[1, 2]"


def test_invalid_utf8_is_corrupt(state: Path) -> None:
    (state / "r.json").write_bytes(b'"\xff\xfe"')
    with StateDir.open(state) as sd:
        assert sd.read_json("r.json", 100) is None
    assert "UnicodeDecodeError" in take_notices()[0]


def test_disk_full_leaves_the_old_content(tmp_path: Path) -> None:
    """A write that fails half-way (EFBIG under RLIMIT_FSIZE: the same path as ENOSPC) raises
    StateError, keeps the old content and leaves no temp file; an append says so too."""
    import subprocess
    import sys

    state = tmp_path / "s"
    state.mkdir()
    (state / "r.json").write_text("old")
    (state / "a.log").write_text("")
    child = """
import resource, signal, sys
from pathlib import Path
from supervisor._errors import StateError
from supervisor.state._statedir import StateDir
resource.setrlimit(resource.RLIMIT_FSIZE, (4096, 4096))
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
with StateDir.open(Path(sys.argv[1])) as sd:
    for call in (lambda: sd.write("r.json", b"x" * 100_000, fsync=True),
                 lambda: sd.append("a.log", b"y" * 100_000, max_bytes=1 << 20)):
        try:
            call()
        except StateError as err:
            print("StateError:", err)
"""
    proc = subprocess.run([sys.executable, "-c", child, str(state)], capture_output=True,
                          text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.count("StateError:") == 2 and "File too large" in proc.stdout, proc.stdout
    assert (state / "r.json").read_text() == "old"
    assert sorted(p.name for p in state.iterdir()) == ["a.log", "r.json"]


def test_names_are_bounded_and_single_components(state: Path) -> None:
    with StateDir.open(state) as sd:
        with pytest.raises(StateError):
            sd.read("../escape", 10)
        with pytest.raises(StateError):
            sd.write("a/b", b"")
        sd.write("result-1.json", b"{}")
        sd.write("result-2.json", b"{}")
        assert sd.names("result-*.json") == ["result-1.json", "result-2.json"]


def test_stale_temp_files_are_cleaned_by_the_next_write(state: Path) -> None:
    old = state / ".lock.json.123.abcd.tmp"
    old.write_text("partial")
    os.utime(old, (1, 1))
    with StateDir.open(state) as sd:
        sd.write("lock.json", json.dumps({}).encode())
    assert not old.exists()


def test_every_state_record_reader_survives_deep_json() -> None:
    """Readers that parse state bytes themselves treat 60,000-deep JSON as no record."""
    from supervisor.session import _starts

    assert _starts._load(DEEP, 0.0, "x", b"k" * 32) is None
    assert _starts._load(b"[" * 5_000, 0.0, "x", b"k" * 32) is None


def test_write_json_keeps_what_it_is_given(state: Path) -> None:
    """One JSON writer for state records (the lock, completion and start-ledger writes each
    encoded their own): UTF-8 text, a newline, and a lone surrogate (a file name that is not
    UTF-8, as ``os.fsdecode`` gives it) kept as its escape, where it used to become ``?``."""
    value = {"path": os.fsdecode(b"/p/bad\xff"), "name": "caf\u00e9", "n": 1}
    with StateDir.open(state, create=True) as sd:
        sd.write_json("x.json", value)
        assert sd.read_json("x.json", 4096) == value
        sd.write_json("y.json", {"name": "caf\u00e9"})
    assert (state / "x.json").read_bytes().endswith(b"\n")
    assert (state / "y.json").read_bytes() == '{"name": "caf\u00e9"}\n'.encode()


def test_lock_records_round_trip_through_write_json(tmp_path: Path) -> None:
    """The lock's record writer goes through write_json: what it writes reads back whole."""
    from supervisor.session import _lock
    from supervisor.session._lock import CompletionRecord

    path = tmp_path / ".supervise" / "complete.json"
    done = CompletionRecord(nonce="ab" * 16, pid=os.getpid(), session_id="s-\u00e9",
                            completed_at=1.5)
    _lock.write_record(path, done, fsync=False)
    assert _lock.read_record(path, CompletionRecord) == done
    assert path.read_bytes().endswith(b"\n") and "s-\u00e9".encode() in path.read_bytes()


@pytest.mark.parametrize("pattern", ["*", "*.json", "result-*.json", "*/.no-mistakes/repos/*.git",
                                     "a*b*c", "**", "*a*a*", "x", "", "ab*ba", "*.git*",
                                     "[ab]*", "?x*", "a*[!c]"])
def test_name_matcher_answers_as_fnmatchcase(pattern: str) -> None:
    """`name_matcher` (no `re` for `*`-only patterns) gives fnmatchcase's answer on each name."""
    import fnmatch

    from supervisor.state._statedir import name_matcher

    names = ["", "a", "ab", "aba", "abba", "abcabc", "abc", "acb", "x", "xx", "result-.json",
             "result-1.json", "result-1.json.tmp", ".json", "a.json", "/h/.no-mistakes/repos/r.git",
             "/h/.no-mistakes/repos/r.gitx", "/h/.no-mistakes/repos/.git", "aXa", "aa", "aaa",
             "r.git/y", "bx", "?x", "ac", "ad", "ab\nba"]
    matches = name_matcher(pattern)
    for name in names:
        assert matches(name) == fnmatch.fnmatchcase(name, pattern), (pattern, name)


@pytest.mark.parametrize("slashes", ["/", "//"])
def test_a_trailing_slash_is_no_way_past_the_link_refusal(tmp_path: Path, slashes: str) -> None:
    """``os.open("link/", O_NOFOLLOW | O_DIRECTORY)`` follows the link (a trailing slash makes
    the kernel resolve the last component) and ``os.path.islink("link/")`` is False: the state
    dir ``link/`` was opened and written through into the link's target, the lock, ledger and
    stage log with it, and ``state_dir_problem`` said nothing. Every entry is refused now."""
    from supervisor.engine._stagelog import StderrCapture, write_entry
    from supervisor.session._ledger import record_start
    from supervisor.session._lock import state_mutex, write_record
    from supervisor.state._project import state_dir_problem
    from supervisor.state._statedir import link_reference, usable_path

    target = tmp_path / "elsewhere"
    target.mkdir()
    link = tmp_path / "state"
    link.symlink_to(target)
    given = str(link) + slashes
    for create in (False, True):
        with pytest.raises(StateError, match="symlink"):
            StateDir.open(given, create=create)
    with pytest.raises(StateError, match="symlink"):
        StateDir.open_existing(given)
    assert state_dir_problem(given) is not None
    assert link_reference(given) is not None and usable_path(given) == ""
    with pytest.raises(StateError):
        write_record(given + "lock.json", {"a": 1})
    with pytest.raises(StateError):
        with state_mutex(given):
            pass
    with pytest.raises(StateError):
        record_start(given, "claude", "s1", "n1")
    capture = StderrCapture()
    capture.feed(b"boom\n")
    with pytest.raises(StateError):
        write_entry(given, "stage", "header", capture)  # type: ignore[arg-type]
    assert list(target.iterdir()) == []
