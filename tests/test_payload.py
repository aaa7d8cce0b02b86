"""The hook payload: bounded stdin read, models, source recognition, project directory."""

from __future__ import annotations

import json
import os
import pty
import subprocess
import time
from pathlib import Path

import pytest

from helpers import run_cli
from supervisor.session import _payload
from supervisor.session._payload import (
    SOURCES,
    CursorPayload,
    HookPayload,
    decode_payload,
    parse_payload,
    payload_session_id,
    payload_source,
    project_dir,
    read_stdin_bounded,
    recognize_source,
)


def _pipe_with(data: bytes, *, close: bool = True) -> tuple[int, int]:
    r, w = os.pipe()
    os.write(w, data)
    if close:
        os.close(w)
        w = -1
    return r, w


def test_reads_a_closed_pipe_to_eof() -> None:
    r, _ = _pipe_with(b'{"source": "startup"}')
    try:
        assert read_stdin_bounded(r) == b'{"source": "startup"}'
    finally:
        os.close(r)


def test_pipe_never_closed_is_no_payload() -> None:
    """A harness that never closes our stdin must not stall the session start."""
    r, w = _pipe_with(b'{"source": "startup"}', close=False)
    try:
        assert read_stdin_bounded(r, timeout=0.2) is None
    finally:
        os.close(r)
        os.close(w)


def test_tty_is_no_payload() -> None:
    master, slave = pty.openpty()
    try:
        os.write(master, b'{"source": "startup"}\n')
        assert read_stdin_bounded(slave, timeout=0.2) is None
    finally:
        os.close(master)
        os.close(slave)


def test_closed_fd_is_no_payload() -> None:
    r, _ = _pipe_with(b"")
    os.close(r)
    assert read_stdin_bounded(r, timeout=0.2) is None


def test_over_the_byte_bound_is_no_payload(tmp_path: Path) -> None:
    big = tmp_path / "big.json"
    big.write_bytes(b'{"source": "startup", "x": "' + b"a" * (_payload.MAX_PAYLOAD + 10) + b'"}')
    with big.open("rb") as f:
        assert read_stdin_bounded(f.fileno()) is None
        f.seek(0)
        assert read_stdin_bounded(f.fileno(), max_bytes=_payload.MAX_PAYLOAD * 2) is not None


@pytest.mark.parametrize("raw", [
    None, b"", b"   ", b"not json", b"\xff\xfe\x00binary\x80junk", b'["startup"]', b'"startup"',
    b"42", b"null", b'{"source": "startup"', b"[" * 100000,
])
def test_junk_decodes_to_no_payload(raw: bytes | None) -> None:
    assert decode_payload(raw) is None


@pytest.mark.parametrize("source", SOURCES)
def test_every_recognized_source(source: str) -> None:
    payload = parse_payload(decode_payload(json.dumps({"source": source}).encode()))
    assert payload_source(payload) == source


@pytest.mark.parametrize("value", [
    "", "Startup", "STARTUP", " startup", "startup ", "startup\n", "start", "compaction", 5,
    None, ["startup"], {"v": "startup"}, True,
])
def test_anything_else_is_unrecognized(value: object) -> None:
    payload = parse_payload({"source": value, "session_id": "s"})
    assert payload_source(payload) == ""
    assert recognize_source(value) == ""


def test_source_only_from_the_top_level_key() -> None:
    payload = parse_payload({"hook_event_name": "SessionStart",
                             "data": {"source": "compact"}, "extra": "compact"})
    assert payload_source(payload) == ""


def test_claude_payload_keeps_extra_keys_and_tolerates_bad_types() -> None:
    payload = parse_payload({"session_id": 7, "cwd": ["x"], "source": "compact", "model": "m",
                             "prompt_id": "p"})
    assert isinstance(payload, HookPayload)
    assert payload.session_id is None and payload.cwd is None
    assert payload.source == "compact"
    assert payload.extra == {"model": "m", "prompt_id": "p"}


def test_cursor_payload_has_no_source() -> None:
    data = {"conversation_id": "c1", "workspace_roots": ["/w", 3], "hook_event_name": "sessionStart",
            "cursor_version": "1.0"}
    payload = parse_payload(data)
    assert isinstance(payload, CursorPayload)
    assert payload.workspace_roots == ("/w",)
    assert payload_source(payload) == ""
    assert payload_session_id(payload) == "c1"
    assert isinstance(parse_payload({"session_id": "s"}, harness="cursor"), CursorPayload)


def test_project_dir_order(tmp_path: Path, git_repo: Path) -> None:
    sub = git_repo / "a" / "b"
    sub.mkdir(parents=True)
    other = tmp_path / "other"
    other.mkdir()
    env = {"CLAUDE_PROJECT_DIR": str(other)}
    # payload cwd first, resolved to the git top level
    # (a str: the hook paths do not import pathlib)
    assert project_dir(parse_payload({"cwd": str(sub)}), env, cwd=tmp_path) == str(git_repo.resolve())
    # Cursor: workspace_roots[0]
    assert project_dir(parse_payload({"workspace_roots": [str(sub)]}), env) == str(git_repo.resolve())
    # a payload cwd that does not exist falls through to the environment
    assert project_dir(parse_payload({"cwd": str(tmp_path / "gone")}), env) == str(other.resolve())
    assert project_dir(None, {"GEMINI_PROJECT_DIR": str(sub)}) == str(git_repo.resolve())
    # relative or NUL-bearing candidates are never used
    assert project_dir(parse_payload({"cwd": "relative/dir"}), {}, cwd=other) == str(other.resolve())
    assert project_dir(parse_payload({"cwd": "/tmp\0x"}), {}, cwd=other) == str(other.resolve())
    assert project_dir(None, {}, cwd=sub) == str(git_repo.resolve())
    assert project_dir(None, {}, cwd=str(sub)) == str(git_repo.resolve())  # either kind of path


def test_linked_worktree_is_its_own_top_level(git_repo: Path, tmp_path: Path) -> None:
    wt = tmp_path / "wt"
    subprocess.run(["git", "-C", str(git_repo), "worktree", "add", "-q", str(wt)], check=True)
    (wt / "deep").mkdir()
    assert project_dir(parse_payload({"cwd": str(wt / "deep")}), {}) == str(wt.resolve())


@pytest.mark.parametrize("raw", ["a\u0000b", "\ud800x", "x" * 140_000])
def test_hostile_session_ids_are_cleaned(raw: str, tmp_path: Path) -> None:
    """Adversarial report: NUL or a lone surrogate crashed the hook (env cannot carry them);
    140,000 characters overflowed every stage's argv+env; 70,000 overflowed the lock record."""
    from supervisor.session._payload import MAX_SESSION_ID, clean_session_id

    clean = clean_session_id(raw)
    assert "\0" not in clean and len(clean) <= MAX_SESSION_ID
    clean.encode("utf-8")  # no lone surrogates left
    (tmp_path / "supervise.toml").write_text('[[stages]]\nname = "a"\nrun = "echo ran"\n')
    payload = json.dumps({"session_id": raw, "cwd": str(tmp_path), "source": "startup"})
    proc = run_cli("hook", "claude", input=payload.encode("utf-8", "surrogatepass"), cwd=tmp_path)
    assert proc.returncode == 0
    assert "ran" in json.loads(proc.stdout)["hookSpecificOutput"]["additionalContext"]


class _VirtualClock:
    """``time.monotonic`` for :func:`read_stdin`, moved only by the test: each call advances
    it by ``step`` seconds, so the read's deadlines pass at a known point in its loop whatever
    the host's load (no thread or writer that must be scheduled in time)."""

    def __init__(self, step: float, start: float = 1000.0) -> None:
        self.now = start
        self.step = step

    def monotonic(self) -> float:
        self.now += self.step
        return self.now


def _messages(count: int, size: int) -> tuple[int, int]:
    """A read end holding ``count`` messages of ``size`` bytes, then EOF: a SEQPACKET socket,
    so each ``os.read`` returns one message, as a writer's separate writes would arrive."""
    import socket

    a, b = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    rfd, wfd = a.detach(), b.detach()
    for _ in range(count):
        os.write(wfd, b"x" * size)
    return rfd, wfd


def test_an_oversized_payload_from_a_slow_writer_is_drained_to_its_end(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Over the byte bound, the read goes on past the first timeout while data keeps coming
    (a harness writing a big Write payload slowly): 50 writes, 0.1 s of the read's clock
    apart (5 s in all: five times the timeout), are all read to EOF, the head kept."""
    from supervisor.session._payload import read_stdin

    monkeypatch.setattr(_payload, "time", _VirtualClock(step=0.05))
    rfd, wfd = _messages(50, 50)
    os.close(wfd)
    try:
        read = read_stdin(rfd, timeout=1.0, max_bytes=100)
        assert _payload.time.now - 1000.0 > 4.0  # the read ran well past its first timeout
        assert os.read(rfd, 65536) == b""  # drained to its end: nothing left before EOF
    finally:
        os.close(rfd)
    assert read.oversize and read.data is None and read.head == b"x" * 100


def test_a_payload_waiting_when_this_process_wakes_late_is_read(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The timeout bounds the writer's silence, not a stall of the hook: a payload and its EOF
    already in the pipe when the hook's clock shows the deadline past (descheduled on a
    starved host) is read whole (the loop checked the deadline first and dropped it)."""
    from supervisor.session._payload import read_stdin

    monkeypatch.setattr(_payload, "time", _VirtualClock(step=2.0))  # each look: 2 s later
    rfd, wfd = _messages(3, 7)
    os.close(wfd)
    try:
        read = read_stdin(rfd, timeout=1.0, max_bytes=1000)
    finally:
        os.close(rfd)
    assert read.data == b"x" * 21 and not read.oversize
