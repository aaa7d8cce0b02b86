"""The consolidation trigger (brief memory.md #9; claude-remember #342).

The consolidation command in these tests is a short Python program that records how it was
started (its session, its stdio, its environment), optionally waits for a release file, writes a
``done`` marker and exits. Tests wait for markers (handshakes, no sleeps) and then for the
consolidation lock to come free, so no detached process outlives its test.
"""

from __future__ import annotations

import datetime as dt
import fcntl
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import anyio
import pytest

from supervisor.config._builtins import builtin_argv

ROOT = Path(__file__).resolve().parent.parent
STAGE = Path(builtin_argv("memory")[-1])  # stages/memory/__main__.py or stages/memory/__main__.py
TODAY = dt.date.today()
PAST = (TODAY - dt.timedelta(days=2)).isoformat()
YESTERDAY = (TODAY - dt.timedelta(days=1)).isoformat()

COMMAND = r"""
import json, os, sys, time
from pathlib import Path
marks = Path(sys.argv[1])
with open(marks / "starts.log", "a") as f:
    f.write(f"{os.getpid()}\n")
fds = {}
for n in sorted(os.listdir("/proc/self/fd")) if os.path.isdir("/proc/self/fd") else []:
    try:
        fds[n] = os.readlink(f"/proc/self/fd/{n}")
    except OSError:
        pass
info = {"sid": os.getsid(0), "pid": os.getpid(), "fds": fds, "cwd": os.getcwd(),
        "memory_dir": os.environ.get("SUPERVISE_MEMORY_DIR"),
        "token": os.environ.get("SUPERVISE_STAGE_TOKEN")}
(marks / f"info-{os.getpid()}.json").write_text(json.dumps(info))
(marks / "started").write_text("1")
if len(sys.argv) > 2:
    release = Path(sys.argv[2])
    deadline = time.monotonic() + 30
    while not release.exists() and time.monotonic() < deadline:
        time.sleep(0.01)
print("consolidated")
(marks / "done").write_text("1")
"""


def wait_for(path: Path, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while not path.exists():
        if time.monotonic() > deadline:
            pytest.fail(f"{path.name} never appeared (consolidation did not run?)")
        time.sleep(0.01)


def wait_lock_free(state: Path, timeout: float = 20.0) -> None:
    """The wrapper holds the lock for its whole life: free lock = wrapper gone."""
    lock = state / "memory" / "consolidate.lock"
    deadline = time.monotonic() + timeout
    fd = os.open(lock, os.O_RDWR)
    try:
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                fcntl.flock(fd, fcntl.LOCK_UN)
                return
            except BlockingIOError:
                if time.monotonic() > deadline:
                    pytest.fail("the consolidation wrapper never released its lock")
                time.sleep(0.01)
    finally:
        os.close(fd)


def run(project: Path, state: Path, source: str, options: dict) -> str:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SUPERVISE_")}
    env.update({"SUPERVISE_SOURCE": source, "SUPERVISE_PROJECT_DIR": str(project),
                "SUPERVISE_STATE_DIR": str(state), "SUPERVISE_STAGE_NAME": "memory",
                "SUPERVISE_STAGE_TOKEN": "tok-123",
                "SUPERVISE_STAGE_OPTIONS": json.dumps({"today": TODAY.isoformat(), **options})})
    # communicate() returns only when every holder of the stage's stdout pipe has closed it: a
    # consolidation that inherited stdio would hold this call until it ends.
    proc = subprocess.Popen([sys.executable, str(STAGE)], env=env, cwd=project, stdin=subprocess.DEVNULL,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    out, _ = proc.communicate(timeout=20)
    assert proc.returncode == 0, out
    return out.decode("utf-8")


@pytest.fixture
def store(git_repo: Path) -> Path:
    remember = git_repo / ".remember"
    remember.mkdir()
    (remember / "identity.md").write_text("IDENTITY\n")
    (remember / f"today-{PAST}.md").write_text("## 10:00 | main\nold work\n")
    (remember / f"today-{YESTERDAY}.md").write_text("## 10:00 | main\nolder work\n")
    (remember / f"today-{TODAY.isoformat()}.md").write_text("## 10:00 | main\ntoday\n")
    return remember


@pytest.fixture
def marks(tmp_path: Path) -> Path:
    path = tmp_path / "marks"
    path.mkdir()
    return path


@pytest.fixture
def state(tmp_path: Path) -> Path:
    return tmp_path / "state"


def command(marks: Path, release: Path | None = None) -> list[str]:
    return [sys.executable, "-c", COMMAND, str(marks), *([str(release)] if release else [])]


def test_pending_days_start_the_command_detached(store: Path, state: Path, marks: Path) -> None:
    out = run(store.parent, state, "startup", {"consolidate": command(marks)})
    lines = [line for line in out.splitlines() if line.startswith("Memory consolidation:")]
    assert len(lines) == 1
    assert lines[0].startswith(f"Memory consolidation: 2 day(s) of memory staging to consolidate "
                               f"(today-{PAST}.md .. today-{YESTERDAY}.md); running consolidation in the "
                               "background (pid ")
    wait_for(marks / "done")
    wait_lock_free(state)
    info = json.loads(next(marks.glob("info-*.json")).read_text())
    assert info["sid"] != os.getsid(0)  # its own session
    assert info["token"] is None  # not a member of the stage: the engine's sweep leaves it alone
    assert info["memory_dir"] == str(store)
    assert info["cwd"] == str(store.parent)
    if info["fds"]:
        assert info["fds"]["0"] == "/dev/null"
        log = str(state / "logs" / "consolidation.log")
        assert info["fds"]["1"] == log and info["fds"]["2"] == log  # never the digest's pipe
        extra = {n for n, target in info["fds"].items() if n not in ("0", "1", "2")
                 and not target.startswith("/proc/")}
        assert not extra, info["fds"]  # close_fds: no inherited lock or pipe
    assert "consolidated" in (state / "logs" / "consolidation.log").read_text()


@pytest.mark.parametrize("source", ["compact"])
def test_never_at_compact(store: Path, state: Path, marks: Path, source: str) -> None:
    out = run(store.parent, state, source, {"consolidate": command(marks)})
    assert "consolidation" not in out.lower()
    assert not (marks / "starts.log").exists()


@pytest.mark.parametrize("source", ["startup", "clear", "resume", "", "Compact"])
def test_other_sources_trigger(store: Path, state: Path, marks: Path, source: str) -> None:
    out = run(store.parent, state, source, {"consolidate": command(marks)})
    assert "running consolidation in the background" in out
    wait_for(marks / "done")
    wait_lock_free(state)


def test_nothing_pending_nothing_started(git_repo: Path, state: Path, marks: Path) -> None:
    remember = git_repo / ".remember"
    remember.mkdir()
    (remember / "identity.md").write_text("IDENTITY\n")
    (remember / f"today-{TODAY.isoformat()}.md").write_text("today\n")
    (remember / f"today-{PAST}.done.md").write_text("done\n")
    (remember / "today-2026-02-30.md").write_text("impossible date\n")
    out = run(git_repo, state, "startup", {"consolidate": command(marks)})
    assert "consolidation" not in out.lower()
    assert not (marks / "starts.log").exists()


def test_at_most_one_at_a_time(store: Path, state: Path, marks: Path, tmp_path: Path) -> None:
    release = tmp_path / "release"
    options = {"consolidate": command(marks, release)}
    try:
        first = run(store.parent, state, "startup", options)  # returns while the command waits
        assert "running consolidation in the background" in first
        wait_for(marks / "started")
        assert not (marks / "done").exists()
        second = run(store.parent, state, "startup", options)
        assert "a consolidation is already running" in second
        assert "IDENTITY" in second
    finally:
        release.write_text("go")
    wait_for(marks / "done")
    wait_lock_free(state)
    assert len((marks / "starts.log").read_text().splitlines()) == 1
    lock = (state / "memory" / "consolidate.lock").read_text()
    assert lock.startswith("pid=") and "started=" in lock


def test_no_command_configured_says_so(store: Path, state: Path) -> None:
    out = run(store.parent, state, "startup", {})
    assert "Memory consolidation: 2 day(s)" in out and "no `consolidate` command is configured" in out


def test_command_that_cannot_start_is_reported_not_fatal(store: Path, state: Path) -> None:
    out = run(store.parent, state, "startup", {"consolidate": ["/nonexistent/consolidate-me"]})
    assert "Memory consolidation: 2 day(s)" in out
    wait_lock_free(state)
    assert "cannot start" in (state / "logs" / "consolidation.log").read_text()


def test_timeout_kills_a_hung_command(store: Path, state: Path, marks: Path, tmp_path: Path) -> None:
    options = {"consolidate": command(marks, tmp_path / "never"), "consolidate_timeout": 0.5}
    run(store.parent, state, "startup", options)
    wait_for(marks / "started")
    wait_lock_free(state)
    assert not (marks / "done").exists()
    assert "killed after 0.5s (consolidate_timeout)" in (state / "logs" / "consolidation.log").read_text()


def test_string_command_is_split_like_a_shell(store: Path, state: Path, marks: Path) -> None:
    script = marks.parent / "consolidate me.py"
    script.write_text(COMMAND)
    import shlex

    out = run(store.parent, state, "startup", {"consolidate": shlex.join([sys.executable, str(script), str(marks)])})
    assert "running consolidation in the background" in out
    wait_for(marks / "done")
    wait_lock_free(state)


def test_the_digest_does_not_wait_for_consolidation(store: Path, state: Path, marks: Path, tmp_path: Path) -> None:
    """Through the real engine: the stage completes while the command still runs, and the
    engine's leftover sweep does not kill it."""
    from supervisor.config._schema import parse_config
    from supervisor.config._context import SessionContext
    from supervisor.engine._run import run_digest

    release = tmp_path / "release"
    config = parse_config({"budget": 30, "stages": [{
        "name": "memory", "builtin": "memory", "options": {"consolidate": command(marks, release)}}]}, "<test>")
    context = SessionContext(project_dir=store.parent, state_dir=state, source="startup")
    try:
        result = anyio.run(run_digest, config, context)
        assert result.complete and result.stages[0].status == "ok", result.text
        assert "running consolidation in the background" in result.text
        wait_for(marks / "started")
        assert not (marks / "done").exists()
    finally:
        release.write_text("go")
    wait_for(marks / "done")  # it survived the stage's end and the engine's sweep
    wait_lock_free(state)


@pytest.mark.parametrize("sig", ["SIGTERM", "SIGHUP"])
def test_a_signal_to_the_wrapper_stops_the_command(store: Path, state: Path, marks: Path,
                                                   tmp_path: Path, sig: str,
                                                   cpu_load: str) -> None:
    """A TERM or HUP to the detached wrapper (a logout, a shutdown, a ``kill``): the wrapper
    died at once, its lock came free and the command ran on in its own session with no
    timeout (a next session could start a second one beside it). Now the wrapper stops the
    command (TERM, then KILL after a grace), logs it, and only then lets the lock go."""
    import signal

    from helpers import alive_and_ours

    options = {"consolidate": command(marks, tmp_path / "never")}
    run(store.parent, state, "startup", options)
    wait_for(marks / "started")
    lock = (state / "memory" / "consolidate.lock").read_text()
    wrapper = int(lock.split("\n")[0].removeprefix("pid="))
    child = int((marks / "starts.log").read_text().split()[0])
    try:
        os.kill(wrapper, getattr(signal, sig))
        wait_lock_free(state)
        assert not alive_and_ours(child), "the command outlived its wrapper"
        assert f"stopped by {sig}" in (state / "logs" / "consolidation.log").read_text()
    finally:
        try:
            os.killpg(child, signal.SIGKILL)  # it leads its own session
        except OSError:
            pass
