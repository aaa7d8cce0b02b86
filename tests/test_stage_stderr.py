"""Stage stderr kept apart (``stderr = "context" | "log" | "drop"``): by default the model
reads stdout only; the stderr goes to a bounded, rotated log in the state dir that
``supervise status`` shows with a count of lines since the last view."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from helpers import run_cli
from supervisor.config._schema import parse_config
from supervisor._errors import ConfigError
from supervisor.engine._stagelog import LOG_BYTES

CONFIG = """\
budget = 30
grace = 0.2
[[stages]]
name = "noisy"
run = ["sh", "-c", "echo OUT-NOISY; echo 'Traceback (most recent call last):' >&2; printf 'ValueError: bad\\\\033[2J' >&2"]
[[stages]]
name = "failing"
run = ["sh", "-c", "echo OUT-FAILING; echo 'first' >&2; echo 'fatal: the reason' >&2; exit 4"]
[[stages]]
name = "merged"
stderr = "context"
run = ["sh", "-c", "echo OUT-MERGED; echo ERR-MERGED >&2"]
[[stages]]
name = "dropped"
stderr = "drop"
run = ["sh", "-c", "echo OUT-DROPPED; echo ERR-DROPPED >&2"]
"""


@pytest.fixture
def project(git_repo: Path) -> Path:
    (git_repo / "supervise.toml").write_text(CONFIG)
    return git_repo


def logs(project: Path) -> Path:
    return project / ".supervise" / "logs"


def test_the_key_is_validated_and_shown() -> None:
    with pytest.raises(ConfigError) as err:
        parse_config({"stages": [{"name": "x", "run": ["true"], "stderr": "model"}]}, "f.toml")
    assert "[[stages]] 'x'" in str(err.value) and "stderr" in str(err.value)
    config = parse_config({"stages": [{"name": "x", "run": ["true"]}]}, "f.toml")
    assert config.stages[0].stderr == "log"  # the default: the model reads stdout


def test_stderr_is_kept_out_of_the_digest_by_default(project: Path) -> None:
    run = run_cli("digest", cwd=project)
    text = run.stdout.decode()
    assert run.returncode == 0, run.stderr
    for shown in ("OUT-NOISY", "OUT-FAILING", "OUT-MERGED", "ERR-MERGED", "OUT-DROPPED"):
        assert shown in text
    for hidden in ("Traceback", "ValueError", "ERR-DROPPED", "first"):
        assert hidden not in text
    # a failure still says why, in one line: the last stderr line and where the rest is
    assert ("[supervise] stage 'failing' exited with status 4; its stderr ends: "
            "'fatal: the reason'") in text
    assert f"{logs(project) / 'failing.log'}" in text
    noisy = (logs(project) / "noisy.log").read_bytes()
    assert b"Traceback (most recent call last):\nValueError: bad" in noisy
    assert noisy.startswith(b"--- ") and b"full digest, source -, harness terminal: ok ---" in noisy
    assert not (logs(project) / "merged.log").exists()
    assert not (logs(project) / "dropped.log").exists()


def test_status_shows_the_last_lines_and_the_count_since_the_last_view(project: Path) -> None:
    run_cli("digest", cwd=project)
    first = run_cli("status", cwd=project).stdout.decode()
    assert "stderr     2 stage log(s)" in first
    assert "  failing                  2 new line(s) since the last view, 2 in all" in first
    assert "    | fatal: the reason" in first
    # escapes never printed, removed whole (parameters too: issue 11 item 8)
    assert "\x1b" not in first and "    | ValueError: bad\n" in first
    again = run_cli("status", cwd=project).stdout.decode()
    assert "  failing                  nothing new, 2 in all" in again
    run_cli("digest", cwd=project)
    doc = json.loads(run_cli("status", "--format", "json", cwd=project).stdout)
    failing = next(d for d in doc["stderr_logs"] if d["stage"] == "failing")
    assert (failing["new"], failing["lines"]) == (2, 4)
    assert failing["tail"][-1] == "fatal: the reason"


def test_the_log_is_bounded_and_rotated(git_repo: Path) -> None:
    (git_repo / "supervise.toml").write_text(
        'budget = 30\n[[stages]]\nname = "flood"\n'
        'run = ["sh", "-c", "echo OUT; head -c 300000 /dev/zero | tr \'\\\\0\' x >&2; echo >&2 END"]\n')
    for _ in range(3):
        run = run_cli("digest", cwd=git_repo)
        assert run.stdout.decode().strip() == "OUT" and run.returncode == 0
    log = logs(git_repo) / "flood.log"
    assert log.stat().st_size <= LOG_BYTES + 1024
    assert (logs(git_repo) / "flood.log.1").stat().st_size <= LOG_BYTES + 1024
    assert not (logs(git_repo) / "flood.log.2").exists()
    body = log.read_bytes()
    assert b"earlier bytes of stderr dropped]" in body and body.endswith(b"END\n")


def test_a_planted_link_is_not_followed(project: Path, tmp_path: Path) -> None:
    victim = tmp_path / "victim"
    victim.write_text("keep me\n")
    logs(project).mkdir(parents=True)
    (logs(project) / "noisy.log").symlink_to(victim)
    run = run_cli("digest", cwd=project)
    assert run.returncode == 0
    assert victim.read_text() == "keep me\n"
    assert b"ValueError" in (logs(project) / "noisy.log").read_bytes()


def test_hook_output_has_no_stderr(project: Path) -> None:
    payload = json.dumps({"session_id": "s", "cwd": str(project), "source": "startup"}).encode()
    run = run_cli("hook", "claude", cwd=project, input=payload)
    text = json.loads(run.stdout)["hookSpecificOutput"]["additionalContext"]
    assert "OUT-NOISY" in text and "Traceback" not in text and "ERR-MERGED" in text


def test_status_bounds_each_shown_line(git_repo: Path) -> None:
    """A stage writing megabytes of stderr without a newline: status shows each log line cut
    to TAIL_LINE_CHARS with a marker (was one 65,414-character line)."""
    (git_repo / "supervise.toml").write_text(
        'budget = 30\n[[stages]]\nname = "flood"\n'
        'run = ["sh", "-c", "echo OUT; head -c 3000000 /dev/zero | tr \'\\\\0\' x >&2"]\n')
    assert run_cli("digest", cwd=git_repo).returncode == 0
    text = run_cli("status", cwd=git_repo).stdout.decode()
    shown = [line for line in text.splitlines() if line.startswith("    | ")]
    assert shown and max(len(line) for line in shown) < 360
    assert any("more characters cut]" in line for line in shown)
    doc = json.loads(run_cli("status", "--format", "json", cwd=git_repo).stdout)
    tail = next(d for d in doc["stderr_logs"] if d["stage"] == "flood")["tail"]
    assert max(len(line) for line in tail) < 360


@pytest.mark.parametrize("stderr", ["log", "drop"])
def test_a_kill_that_needed_sigkill_is_in_the_stage_log_and_status(git_repo: Path,
                                                                   stderr: str) -> None:
    """A stage that ignores TERM is killed at its timeout with SIGKILL: the kill's report
    (members, how many needed SIGKILL, survivors) goes to the stage log, whatever `stderr`
    says, and `supervise status` shows it; the model's context does not get it. Before, the
    report was computed and dropped."""
    (git_repo / "supervise.toml").write_text(
        f'budget = 30\ngrace = 0.2\n[[stages]]\nname = "stubborn"\ntimeout = 1\n'
        f'stderr = "{stderr}"\n'
        f'run = ["sh", "-c", "trap \'\' TERM; echo READY; sleep 30 & wait"]\n')
    digest = run_cli("digest", "--format", "json", cwd=git_repo)
    doc = json.loads(digest.stdout)
    assert doc["stages"][0]["status"] == "timed_out", doc
    assert "SIGKILL" not in doc["stages"][0]["output"]
    log = (logs(git_repo) / "stubborn.log").read_text()
    assert "[supervise] the kill reached" in log and "needed SIGKILL" in log, log
    status = run_cli("status", cwd=git_repo).stdout.decode()
    assert "needed SIGKILL" in status, status


def test_a_quiet_stage_logs_no_kill(project: Path) -> None:
    """A stage that exits by itself logs no kill line."""
    run_cli("digest", cwd=project)
    assert "the kill reached" not in (logs(project) / "noisy.log").read_text()
