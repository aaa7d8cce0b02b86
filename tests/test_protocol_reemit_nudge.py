"""Re-emit budget and labels; ``supervise nudge`` bytes and its silence rule."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from fake_harness import FakeHarness
from supervisor.config._schema import parse_config
from supervisor.config._context import SessionContext
from supervisor.engine._results import DigestResult, StageResult
from supervisor.session._nudge import NUDGE_TEXT
from supervisor.session._routing import compose_reemit, route

CONFIG = """\
budget = 30
reemit_budget = 2048
[[stages]]
name = "big"
run = ["python3", "-c", "print('B' * 5000)"]
reemit = true
[[stages]]
name = "small"
run = ["sh", "-c", "echo SMALL-REEMIT"]
reemit = true
[[stages]]
name = "rest"
run = ["sh", "-c", "echo REST"]
"""


@pytest.fixture
def harness(tmp_path: Path) -> Iterator[FakeHarness]:
    with FakeHarness(tmp_path / "h", "claude", nest=2, helper_session="s") as h:
        yield h


def _payload(project: Path, source: str) -> bytes:
    return json.dumps({"session_id": "s", "cwd": str(project), "source": source}).encode()


def test_nudge_bytes_exactly() -> None:
    assert NUDGE_TEXT.encode() == (
        b"\xe2\x81\xa3SUPERVISE_OP: v1 session-start: Run `supervise digest --session-start` now, exactly once, "
        b"before executing any other instructions.\n")


def test_routing_table() -> None:
    assert [route(s) for s in ("startup", "new", "clear", "compact", "resume", "reload", "fork", "",
                               "Compact")] == ["full", "full", "reemit", "reemit", "nudge", "nudge",
                                               "nudge", "full", "full"]


def test_reemit_over_budget_blocks_become_one_line(git_repo: Path, harness: FakeHarness) -> None:
    (git_repo / "supervise.toml").write_text(CONFIG)
    full = harness.run(["hook"], cwd=git_repo, stdin=_payload(git_repo, "startup"))
    assert "B" * 5000 in full.text and "REST" in full.text
    run = harness.run(["hook"], cwd=git_repo, stdin=_payload(git_repo, "compact"))
    assert run.returncode == 0
    assert run.text.startswith("SESSION START (CONTEXT RE-EMIT after compact)")
    assert "NOT repeated: rest" in run.text and "REST" not in run.text
    assert "B" * 100 not in run.text
    assert "RE-EMIT BUDGET: big omitted (5001 bytes" in run.text
    assert "Read it directly: supervise digest" in run.text
    assert "SMALL-REEMIT" in run.text
    assert len(run.stdout) <= 2048


def test_compose_reemit_marks_a_failed_block_and_truncation(tmp_path: Path) -> None:
    config = parse_config({"stages": [{"name": "a", "run": ["x"], "reemit": True},
                                      {"name": "b", "run": ["y"]}]}, "test")
    result = DigestResult((StageResult("a", "timed_out", None, 1.0, 3, False, "abc"),
                           StageResult("b", "skipped")), True, 5.0, 5.0, "budget")
    ctx = SessionContext.for_project(tmp_path, source="clear", mode="reemit")
    text = compose_reemit(config, result, ctx)
    assert "after clear" in text and "NOT repeated: b" in text
    assert "abc\n(a: timed_out)\n" in text and "RE-EMIT TRUNCATED" in text
    assert text.endswith(f"RE-EMIT SIZE: {len(text.rsplit('RE-EMIT SIZE', 1)[0].encode())} of 24576 bytes.\n")


def test_nudge_silent_once_the_digest_ran_here(git_repo: Path, harness: FakeHarness, tmp_path: Path) -> None:
    (git_repo / "supervise.toml").write_text(CONFIG)
    first = harness.run(["nudge"], cwd=git_repo, stdin=b"")
    assert (first.returncode, first.stdout) == (0, NUDGE_TEXT.encode())
    assert not (git_repo / ".supervise").exists()
    harness.run(["hook"], cwd=git_repo, stdin=_payload(git_repo, "startup"))
    assert harness.run(["nudge"], cwd=git_repo, stdin=b"").stdout == b""
    with FakeHarness(tmp_path / "other", "codex") as other:
        again = other.run(["nudge", "codex"], cwd=git_repo, stdin=b"")
    doc = json.loads(again.stdout)
    assert doc["hookSpecificOutput"]["additionalContext"] == NUDGE_TEXT


def test_nudge_with_a_broken_config_still_nudges(git_repo: Path, harness: FakeHarness) -> None:
    (git_repo / "supervise.toml").write_text("stages = 5\n")
    run = harness.run(["nudge", "--bogus"], cwd=git_repo, stdin=None)
    assert (run.returncode, run.stdout) == (0, NUDGE_TEXT.encode())
    assert b"--bogus" in run.stderr
