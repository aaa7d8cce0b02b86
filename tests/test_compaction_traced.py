"""Compaction traced in the transcript (issue 24): Gemini CLI fires nothing after a real
compression, and its ``PreCompress`` fires on every turn, compression or not; a real one
ends with the transcript line ``{"$set":{"sessionId":...}}`` (the harness table's
``compact_trace``). The prompt hook (``BeforeAgent``) re-emits once when that count grew
within the process, and never on a turn without one.

Every hook runs as the real CLI below a fake harness process named like the harness; the
transcript is a real file written as Gemini 0.61.0 writes it (LAB).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from fake_harness import FakeHarness, Harnesses, HookRun
from test_compaction_armed import CONFIG  # a re-emitted stage and a full-only one
from supervisor._harnesses import BY_NAME
from supervisor.session._fastpath import read_trace, set_trace
from supervisor.session._transcript import count_lines_with

MARK = BY_NAME["gemini"].compact_trace


SID = "6308bcd8-03b0-4ac9-bb9c-70c01dc568bc"


@pytest.fixture
def project(git_repo: Path) -> Path:
    (git_repo / "supervise.toml").write_text(CONFIG)
    return git_repo


@pytest.fixture
def transcript(tmp_path: Path) -> Path:
    """A Gemini session file as 0.61.0 starts it: the metadata line, a message."""
    path = tmp_path / "chats" / "session-2026-12-02T02-28-6308bcd8.jsonl"
    path.parent.mkdir()
    path.write_text(json.dumps({"sessionId": SID, "projectHash": "f2", "kind": "main"}) + "\n"
                    + json.dumps({"id": "1", "type": "user", "content": [{"text": "turn 1"}]})
                    + "\n")
    return path


def add(transcript: Path, *records: dict[str, object]) -> None:
    with transcript.open("a") as f:
        for record in records:
            f.write(json.dumps(record, separators=(",", ":")) + "\n")


def compression(transcript: Path) -> None:
    """What a real compression appends: the restarted chat's ``$set`` of the session id."""
    add(transcript, {"$set": {"sessionId": SID}})


def turn(transcript: Path, text: str) -> None:
    """What a turn without a compression appends (messages and ``lastUpdated``), the user's
    text quoting the mark itself (inside a JSON string, so escaped: not a mark line)."""
    add(transcript, {"id": text, "type": "user", "content": [{"text": f"{text} {MARK}"}]},
        {"$set": {"lastUpdated": "2026-12-02T02:28:36.825Z"}},
        {"id": text + "r", "type": "gemini", "content": "ok", "tokens": {"input": 800000}})


def run(h: FakeHarness, project: Path, transcript: Path, event: str,
        source: str | None = None) -> HookRun:
    data: dict[str, object] = {"session_id": SID, "transcript_path": str(transcript),
                               "cwd": str(project), "hook_event_name": event}
    args = ["hook", "gemini"]
    if source is not None:
        data["source"] = source
    else:
        args += ["--event", "prompt"]
    result = h.run(args, cwd=project, stdin=json.dumps(data).encode())
    assert result.returncode == 0, result.stderr
    return result


def context(result: HookRun) -> str:
    if not result.stdout.strip():
        return ""
    return str(json.loads(result.stdout)["hookSpecificOutput"]["additionalContext"])


def test_a_compression_reemits_once_at_the_next_prompt(project: Path, transcript: Path,
                                                       harnesses: Harnesses) -> None:
    """Turns without a compression re-emit nothing; the prompt after one gets the re-emit
    (old code: nothing, the digest was gone from the history), the prompt after that nothing."""
    h = harnesses("gemini")
    assert "CONTEXT-FULL-ONLY" in context(run(h, project, transcript, "SessionStart", "startup"))
    assert read_trace(project / ".supervise", SID) == (0, MARK)
    turn(transcript, "turn 1")
    assert context(run(h, project, transcript, "BeforeAgent")) == ""
    turn(transcript, "turn 2")
    compression(transcript)
    turn(transcript, "turn 3")
    text = context(run(h, project, transcript, "BeforeAgent"))
    assert text.startswith("SESSION START (CONTEXT RE-EMIT after compact)"), text
    assert "ALPHA mode=reemit source=[compact]" in text and "CONTEXT-FULL-ONLY" not in text
    turn(transcript, "turn 4")
    assert context(run(h, project, transcript, "BeforeAgent")) == "", "re-emitted once"
    assert read_trace(project / ".supervise", SID) == (1, MARK)


def test_a_resumed_process_takes_its_own_mark_as_the_baseline(
        project: Path, transcript: Path, harnesses: Harnesses) -> None:
    """A resumed Gemini process writes the mark before its first prompt, and its SessionStart
    names another file (LAB): the count is unknown until that prompt, which re-emits nothing
    for it (the resume got its own re-emit); a compression after it does."""
    h = harnesses("gemini")
    run(h, project, transcript, "SessionStart", "startup")
    turn(transcript, "turn 1")
    elsewhere = transcript.with_name("session-2026-12-02T02-29-6308bcd8.jsonl")
    resumed = context(run(h, project, elsewhere, "SessionStart", "resume"))
    assert "ALPHA" in resumed
    assert read_trace(project / ".supervise", SID) == (None, MARK)
    compression(transcript)  # the resumed process's own restart of the chat
    assert context(run(h, project, transcript, "BeforeAgent")) == ""
    assert read_trace(project / ".supervise", SID) == (1, MARK)
    turn(transcript, "turn 2")
    compression(transcript)
    assert "RE-EMIT after compact" in context(run(h, project, transcript, "BeforeAgent"))


def test_an_unreadable_transcript_changes_nothing(project: Path, transcript: Path,
                                                  harnesses: Harnesses, tmp_path: Path) -> None:
    """No transcript to count (absent, a FIFO): no re-emit and the baseline is kept."""
    import os

    h = harnesses("gemini")
    run(h, project, transcript, "SessionStart", "startup")
    fifo = tmp_path / "fifo.jsonl"
    os.mkfifo(fifo)
    for path in (tmp_path / "absent.jsonl", fifo):
        assert context(run(h, project, path, "BeforeAgent")) == ""
        assert read_trace(project / ".supervise", SID) == (0, MARK)


def test_count_lines_with_counts_as_grep(tmp_path: Path) -> None:
    """``grep -c -F`` semantics (the fast path compares the two counts): lines holding the
    mark, a mark split across read chunks, a last line without its newline."""
    path = tmp_path / "t.jsonl"
    body = b"x" * ((1 << 20) - 5) + MARK.encode() + b"}\n" + b"y\n" + MARK.encode()
    path.write_bytes(body)
    assert count_lines_with(path, MARK) == 2
    assert count_lines_with(tmp_path / "absent", MARK) is None
    assert count_lines_with(path, "") is None


def test_a_trace_record_is_one_entry_or_none(tmp_path: Path) -> None:
    """The record is the name of its folder's one entry; anything else reads as none."""
    set_trace(tmp_path, SID, 3, MARK)
    assert read_trace(tmp_path, SID) == (3, MARK)
    set_trace(tmp_path, SID, None, MARK)
    assert read_trace(tmp_path, SID) == (None, MARK)
    (tmp_path / "fastpath" / "trace" / SID / "7:other").write_bytes(b"")
    assert read_trace(tmp_path, SID) is None
    set_trace(tmp_path, "not/plain", 1, MARK)
    assert not (tmp_path / "fastpath" / "trace" / "not").exists()
