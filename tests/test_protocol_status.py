"""``supervise status``: lock owner, completion record, last digest, pending deferred results."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from fake_harness import FakeHarness
from helpers import run_cli

CONFIG = """\
budget = 30
[[stages]]
name = "alpha"
run = ["sh", "-c", "echo ALPHA"]
[[stages]]
name = "beta"
run = ["sh", "-c", "echo BETA"]
"""


@pytest.fixture
def harness(tmp_path: Path) -> Iterator[FakeHarness]:
    with FakeHarness(tmp_path / "h", "codex") as h:
        yield h


def status(project: Path, *args: str) -> tuple[int, str]:
    proc = run_cli("status", "-C", str(project), *args)
    return proc.returncode, proc.stdout.decode()


def test_status_of_a_fresh_project(git_repo: Path) -> None:
    code, out = status(git_repo, "--format", "json")
    doc = json.loads(out)
    assert code == 0
    assert (doc["lock"], doc["completion"], doc["last_digest"], doc["pending"]) == (None, None, None, [])
    assert not (git_repo / ".supervise").exists(), "status never writes"
    code, text = status(git_repo)
    assert "lock       free" in text and "completion none" in text


def test_status_after_a_start(git_repo: Path, harness: FakeHarness) -> None:
    (git_repo / "supervise.toml").write_text(CONFIG)
    payload = json.dumps({"session_id": "S-1", "cwd": str(git_repo), "source": "startup"}).encode()
    assert harness.run(["hook", "codex"], cwd=git_repo, stdin=payload).returncode == 0
    code, out = status(git_repo, "--format", "json")
    doc = json.loads(out)
    assert code == 0
    assert doc["lock"]["pid"] == harness.pid and doc["lock"]["alive"] is True
    assert doc["lock"]["harness"] == "codex" and doc["lock"]["session_id"] == "S-1"
    assert "nonce" not in doc["lock"]
    assert doc["completion"]["matches_lock"] is True
    last = doc["last_digest"]
    assert (last["mode"], last["source"], last["complete"]) == ("full", "startup", True)
    assert [(s["name"], s["status"]) for s in last["stages"]] == [("alpha", "ok"), ("beta", "ok")]
    _, text = status(git_repo)
    assert f"codex pid {harness.pid}, session S-1" in text and ": alive" in text
    assert "matches the lock" in text and "alpha" in text and "beta" in text
    harness.close()
    _, text = status(git_repo)
    # a session that ended is the usual case: said plainly, not in capitals like a fault
    assert ": stale, not a problem: its owner is gone (that session ended)" in text, text


def test_status_lists_pending_deferred_results(git_repo: Path) -> None:
    stage = git_repo / ".supervise" / "deferred" / "net"
    from helpers import write_result

    write_result(stage, "1", {"status": "ok", "seconds": 2.0, "finished": 1_700_000_000})
    (stage / "delivered-0.json").write_text("{}")
    doc = json.loads(status(git_repo, "--format", "json")[1])
    assert [p["stage"] for p in doc["pending"]] == ["net"]
    assert "1 deferred result(s)" in status(git_repo)[1]


def test_status_refuses_a_symlinked_state_dir(git_repo: Path, tmp_path: Path) -> None:
    (tmp_path / "real").mkdir()
    (git_repo / ".supervise").symlink_to(tmp_path / "real")
    code, out = status(git_repo)
    assert code == 1 and "symlink" in out


def test_status_totals_exposure_per_file_and_source(git_repo: Path) -> None:
    """Each injection the memory stage makes is logged; status totals them (issue 7 item 5)."""
    remember = git_repo / ".remember"
    remember.mkdir()
    (remember / "identity.md").write_text("I am careful.\n")
    (git_repo / ".git" / "info" / "exclude").write_text(".remember/\n.supervise/\n")
    (git_repo / "supervise.toml").write_text('[[stages]]\nname = "memory"\nbuiltin = "memory"\n')
    assert run_cli("digest", "--session-start", "-C", str(git_repo)).returncode == 0
    code, out = status(git_repo, "--format", "json")
    doc = json.loads(out)
    files = {f["what"]: f for f in doc["exposure"]["files"]}
    assert any(what.endswith("identity.md") and f["count"] == 1 for what, f in files.items())
    code, text = status(git_repo)
    assert "exposure: 1 injections" in text or "exposure:" in text and "identity.md: 1x" in text


def test_status_records_a_crash_left_empty_are_set_aside_and_rewritten(git_repo: Path) -> None:
    """The digest writes ``last-digest.json`` and ``digest-history.json`` without fsync (they
    only feed this command): a crash may leave either empty or cut. Status still answers, and
    the next digest sets the remains aside and writes both whole."""
    (git_repo / "supervise.toml").write_text(CONFIG)
    state = git_repo / ".supervise"
    state.mkdir()
    (state / "last-digest.json").write_bytes(b"")
    (state / "digest-history.json").write_bytes(b'{"entries": [{"finished_at": 1')
    code, out = status(git_repo, "--format", "json")
    assert code == 0 and json.loads(out)["last_digest"] is None
    assert run_cli("digest", "--session-start", cwd=git_repo).returncode == 0
    last = json.loads((state / "last-digest.json").read_text())
    assert [s["name"] for s in last["stages"]] == ["alpha", "beta"]
    history = json.loads((state / "digest-history.json").read_text())
    assert len(history["entries"]) == 1
    code, out = status(git_repo, "--format", "json")
    assert code == 0 and json.loads(out)["last_digest"] is not None
