"""A person running ``supervise digest`` to look (a preview) counts no delivery and advances no
record, the config-error fallback included; ``--session-start`` (what the nudge asks a model to
run) is the session start it stands for. Real CLI processes on real temporary projects."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from helpers import configure_deferred, run_cli, write_result

NOTE = "# Handoff\nnext: ship the parser\n"


@pytest.fixture
def project(tmp_path: Path) -> Path:
    root = tmp_path / "p"
    (root / ".remember").mkdir(parents=True)
    (root / ".remember" / "remember.md").write_text(NOTE)
    subprocess.run(["git", "init", "-q", str(root)], check=True, timeout=30)
    return root


def digest(project: Path, *args: str) -> str:
    proc = run_cli("digest", "-C", str(project), *args)
    assert proc.returncode in (0, 1), proc.stderr
    return proc.stdout.decode()


RECORD = Path(".supervise/memory/handoff.delivered")


def test_previews_count_no_delivery_and_session_start_does(project: Path) -> None:
    for _ in range(5):  # past max_redeliveries (3): the note must still be shown whole
        out = digest(project)
        assert "next: ship the parser" in out and "Already delivered" not in out
    assert not (project / RECORD).exists()
    assert not (project / ".supervise" / "exposure.jsonl").exists()
    assert not (project / ".supervise" / "last-digest.json").exists()
    digest(project, "--session-start")
    assert "deliveries=1" in (project / RECORD).read_text()
    assert (project / ".supervise" / "exposure.jsonl").exists()
    assert (project / ".supervise" / "last-digest.json").exists()
    out = digest(project)  # the preview shows what the next session gets, and counts nothing
    assert "Already delivered 1 time" in out
    assert "deliveries=1" in (project / RECORD).read_text()
    assert "Already delivered 1 time" in digest(project, "--session-start")
    assert "deliveries=2" in (project / RECORD).read_text()


def test_config_error_fallback_is_a_preview_too(project: Path) -> None:
    (project / "supervise.toml").write_text("budget = 'soon'\n")
    for _ in range(4):
        out = digest(project)
        assert "config error" in out and "next: ship the parser" in out
        assert "Body not repeated" not in out
    assert not (project / RECORD).exists()


def test_a_preview_leaves_a_deferred_result_pending(project: Path) -> None:
    configure_deferred(project, "slow")
    folder = project / ".supervise" / "deferred" / "slow"
    write_result(folder, "1-aa", {"status": "ok", "exit_code": 0, "output": "LATE-RESULT\n",
                                  "started": 1.0, "ended": 2.0})
    assert "LATE-RESULT" in digest(project)
    assert "LATE-RESULT" in digest(project)  # still pending: the preview claimed nothing
    assert "LATE-RESULT" in digest(project, "--session-start")
    assert "LATE-RESULT" not in digest(project, "--session-start")  # delivered once


def test_the_nudge_asks_for_the_session_start() -> None:
    from supervisor.session._nudge import NUDGE_TEXT

    assert "`supervise digest --session-start`" in NUDGE_TEXT
