"""The off switch (``SUPERVISE_OFF`` and ``.supervise/off``): every hook and verb honours it,
states it once where it applies, runs no stage and writes no state."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from fake_harness import FakeHarness
from helpers import run_cli

CONFIG = """\
budget = 30
grace = 0.2
[[stages]]
name = "mark"
reemit = true
run = ["sh", "-c", "echo STAGE-RAN; touch ran-$SUPERVISE_SOURCE"]
"""
LINE = "watchkeeper is off: "


@pytest.fixture
def project(git_repo: Path) -> Path:
    (git_repo / "supervise.toml").write_text(CONFIG)
    return git_repo


@pytest.fixture
def claude(tmp_path: Path) -> Iterator[FakeHarness]:
    h = FakeHarness(tmp_path / "harnesses", "claude")
    yield h
    h.close()


def payload(project: Path, source: str = "startup", **extra: object) -> bytes:
    return json.dumps({"session_id": "s1", "cwd": str(project), "source": source,
                       "hook_event_name": "SessionStart", **extra}).encode()


def turn_off_by_file(project: Path, note: str = "") -> Path:
    (project / ".supervise").mkdir(exist_ok=True)
    path = project / ".supervise" / "off"
    path.write_text(note)
    return path


def assert_nothing_ran(project: Path) -> None:
    assert not list(project.glob("ran-*"))
    state = project / ".supervise"
    assert not state.exists() or {p.name for p in state.iterdir()} <= {"off"}


@pytest.mark.parametrize("how", ["env", "file"])
@pytest.mark.parametrize("source", ["startup", "compact", "resume"])
def test_session_start_hook_states_it_once_and_runs_nothing(
        project: Path, claude: FakeHarness, how: str, source: str) -> None:
    env = {"SUPERVISE_OFF": "1"} if how == "env" else {}
    if how == "file":
        turn_off_by_file(project, "paused for the release\n\x1b[31mred")
    run = claude.run(["hook", "claude"], cwd=project, stdin=payload(project, source), env=env)
    assert run.returncode == 0
    doc = json.loads(run.stdout)
    text = doc["hookSpecificOutput"]["additionalContext"]
    assert text.count(LINE) == 1 and text.endswith("\n") and text.count("\n") == 1, text
    if how == "env":
        assert "SUPERVISE_OFF=1 is set" in text
    else:
        assert ".supervise/off exists" in text and "(paused for the release)" in text
        assert "\x1b" not in text  # only the first line, printable characters only
    assert "STAGE-RAN" not in text
    assert_nothing_ran(project)


@pytest.mark.parametrize("event", ["prompt", "post-tool"])
def test_per_prompt_and_read_hooks_add_nothing(project: Path, claude: FakeHarness,
                                               event: str) -> None:
    turn_off_by_file(project)
    data = payload(project, hook_event_name="UserPromptSubmit", tool_name="Read",
                   tool_input={"file_path": str(project / "README")})
    run = claude.run(["hook", "claude", "--event", event], cwd=project, stdin=data)
    assert (run.returncode, run.stdout) == (0, b"")


def test_an_explicit_on_wins_over_the_project_file(project: Path, claude: FakeHarness) -> None:
    turn_off_by_file(project)
    for value in ("0", "false", "", "NO"):  # each its own session: a repeat prints nothing
        run = claude.run(["hook", "claude"], cwd=project, stdin=payload(project, session_id=value or "e"),
                         env={"SUPERVISE_OFF": value})
        assert "STAGE-RAN" in run.text and LINE not in run.text, value
    os.unlink(project / ".supervise" / "off")
    run = claude.run(["hook", "claude"], cwd=project, stdin=payload(project, session_id="last"))
    assert "STAGE-RAN" in run.text and LINE not in run.text


def test_a_fifo_named_off_counts_and_never_hangs(project: Path, claude: FakeHarness) -> None:
    (project / ".supervise").mkdir()
    os.mkfifo(project / ".supervise" / "off")
    run = claude.run(["hook", "claude"], cwd=project, stdin=payload(project))
    assert LINE in run.text and "STAGE-RAN" not in run.text


def test_the_state_dir_override_is_honoured(project: Path, claude: FakeHarness,
                                            tmp_path: Path) -> None:
    state = tmp_path / "elsewhere"
    state.mkdir()
    (state / "off").write_text("")
    run = claude.run(["hook", "claude"], cwd=project, stdin=payload(project),
                     env={"SUPERVISE_STATE_DIR": str(state)})
    assert LINE in run.text and str(state / "off") in run.text
    assert not list(project.glob("ran-*"))


def test_nudge_says_off_instead_of_asking_for_a_digest(project: Path, claude: FakeHarness) -> None:
    run = claude.run(["nudge", "claude"], cwd=project, stdin=payload(project, "resume"),
                     env={"SUPERVISE_OFF": "yes"})
    assert run.returncode == 0 and run.text.count(LINE) == 1
    assert "do not run `supervise digest`" in run.text


def test_bridge_delivers_the_line_as_its_text(project: Path, tmp_path: Path) -> None:
    pi = FakeHarness(tmp_path / "harnesses", "pi")
    try:
        run = pi.run(["bridge", "--harness", "pi", "--source", "startup"], cwd=project,
                     env={"SUPERVISE_OFF": "1"})
        pre = pi.run(["bridge", "--harness", "pi", "--prerequisite"], cwd=project,
                     env={"SUPERVISE_OFF": "1"})
    finally:
        pi.close()
    doc = json.loads(run.stdout)
    assert (doc["kind"], doc["action"]) == ("ready", "off")
    assert doc["text"].count(LINE) == 1 and "STAGE-RAN" not in doc["text"]
    assert (pre.returncode, pre.stdout) == (0, b"")  # go on, so the run can say it is off
    assert_nothing_ran(project)


def test_terminal_digest_runs_nothing_and_says_so(project: Path) -> None:
    env = {"SUPERVISE_OFF": "1"}
    run = run_cli("digest", cwd=project, env=env)
    assert run.returncode == 0 and run.stdout.decode().count(LINE) == 1
    run = run_cli("digest", "--format", "json", cwd=project, env=env)
    doc = json.loads(run.stdout)
    assert doc["off"].startswith(LINE) and doc["stages"] == []
    assert_nothing_ran(project)


def test_status_doctor_config_and_install_state_it(project: Path) -> None:
    turn_off_by_file(project, "maintenance")
    status = run_cli("status", cwd=project)
    assert status.returncode == 0
    assert [ln for ln in status.stdout.decode().splitlines() if ln.startswith("off ")] == [
        f"off        {LINE}.supervise/off exists in {project} (maintenance) (remove it, or "
        "set SUPERVISE_OFF=0, to turn it on)"]
    doc = json.loads(run_cli("status", "--format", "json", cwd=project).stdout)
    assert "maintenance" in doc["off"]
    doctor = run_cli("doctor", cwd=project).stdout.decode()
    assert sum(LINE in ln for ln in doctor.splitlines()) == 1
    config = run_cli("config", cwd=project)
    assert config.returncode == 0 and json.loads(config.stdout)["stages"][0]["name"] == "mark"
    assert config.stderr.decode().count(LINE) == 1
    install = run_cli("install", "claude", cwd=project).stdout.decode()
    assert install.count(LINE) == 1 and "stay quiet" in install
    assert (project / ".claude" / "settings.json").is_file()  # still installs


def test_status_says_nothing_when_on(project: Path) -> None:
    doc = json.loads(run_cli("status", "--format", "json", cwd=project).stdout)
    assert doc["off"] is None
    assert LINE not in run_cli("status", cwd=project).stdout.decode()
