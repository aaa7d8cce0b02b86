"""Shared fixtures: every test is bounded and leaves no process behind.

Each test gets a unique ``WATCHKEEPER_TEST_TOKEN`` in the environment; every process it spawns
inherits it (stages, deferred runners, fake harnesses). After the test, any live process still
carrying the token is a leak: it is killed (by pid, processes we started) and the test fails.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from fake_harness import FakeHarness, Harnesses
from helpers import carriers as _carriers

TOKEN_VAR = "WATCHKEEPER_TEST_TOKEN"
ROOT = Path(__file__).resolve().parent.parent


_PYTEST_PID = os.getpid()
_real_exit = os._exit


def _exit_guard(status: int) -> None:
    """``os._exit`` in pytest's own process would end the whole run at once, with that status
    (0 for the hook's quiet exit): the suite stopped silently halfway and CI read success. In
    this process it is a test failure instead; a forked child still exits for real."""
    if os.getpid() == _PYTEST_PID:
        raise AssertionError(f"os._exit({status}) was called in pytest's own process: it would "
                             "have ended the test run silently")
    _real_exit(status)


os._exit = _exit_guard


@pytest.fixture(autouse=True)
def no_leaked_processes(monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """Fail the test if any process it started (directly or not) is still alive after it."""
    token = uuid.uuid4().hex
    monkeypatch.setenv(TOKEN_VAR, token)
    yield token
    deadline = time.monotonic() + 3.0  # processes on their way out (a kill in flight) get 3 s
    left = _carriers(token)
    while left and time.monotonic() < deadline:
        time.sleep(0.05)
        left = [p for p in left if p.is_running() and p.status() != psutil.STATUS_ZOMBIE]
    if left:
        desc = []
        for p in left:
            try:
                desc.append(f"{p.pid} {' '.join(p.cmdline())[:120]}")
                p.kill()
            except psutil.Error:
                pass
        pytest.fail("test left processes behind: " + "; ".join(desc))
    # Reap our own zombie children so they do not pile up across tests.
    for child in psutil.Process().children():
        try:
            if child.status() == psutil.STATUS_ZOMBIE:
                os.waitpid(child.pid, os.WNOHANG)
        except (psutil.Error, ChildProcessError):
            pass


@pytest.fixture(autouse=True)
def isolated_home(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Tests never touch the real $HOME, the user's git config, or a repository named by an
    inherited ``GIT_*`` variable (every one is removed)."""
    home = tmp_path_factory.mktemp("home")
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(home / ".config"))
    monkeypatch.setenv("XDG_STATE_HOME", str(home / ".local" / "state"))
    for var in [v for v in os.environ if v.startswith("GIT_")]:
        # a test run from a git hook (or `git rebase --exec`) inherits GIT_DIR, GIT_INDEX_FILE,
        # GIT_WORK_TREE...: a test's `git init` would then act on the outer repository
        monkeypatch.delenv(var)
    monkeypatch.setenv("GIT_CONFIG_NOSYSTEM", "1")
    monkeypatch.setenv("GIT_AUTHOR_NAME", "Test")
    monkeypatch.setenv("GIT_AUTHOR_EMAIL", "test@example.invalid")
    monkeypatch.setenv("GIT_COMMITTER_NAME", "Test")
    monkeypatch.setenv("GIT_COMMITTER_EMAIL", "test@example.invalid")
    for var in ("SUPERVISE_TIMEOUT", "SUPERVISE_GRACE", "SUPERVISE_STATE_DIR"):
        monkeypatch.delenv(var, raising=False)
    return home


@pytest.fixture
def git_repo(tmp_path: Path) -> Path:
    """A fresh git repo with one commit, on branch ``main``."""
    repo = tmp_path / "repo"
    repo.mkdir()
    subprocess.run(["git", "init", "-q", "-b", "main", str(repo)], check=True)
    (repo / "README.md").write_text("hello\n")
    subprocess.run(["git", "-C", str(repo), "add", "."], check=True)
    subprocess.run(["git", "-C", str(repo), "commit", "-q", "-m", "initial"], check=True)
    return repo


@pytest.fixture(params=["idle", "loaded"])
def cpu_load(request: pytest.FixtureRequest) -> Iterator[str]:
    """The hostile tests run twice: as they are, and under a synthetic CPU load (one busy
    loop per core, plus one, for the test's whole duration; issue 10, "How it is checked")."""
    if request.param == "idle":
        yield "idle"
        return
    n = (os.cpu_count() or 1) + 1
    procs = [subprocess.Popen([sys.executable, "-c", "while True: pass"],
                              stdin=subprocess.DEVNULL) for _ in range(n)]
    try:
        yield "loaded"
    finally:
        for p in procs:  # processes this fixture started: end them by pid
            p.kill()
        for p in procs:
            p.wait()


@pytest.fixture
def harnesses(tmp_path: Path) -> Iterator[Harnesses]:
    """Fake harness processes for session-protocol tests; each is closed after the test."""
    made: list[FakeHarness] = []

    def make(name: str = "claude", **kwargs: object) -> FakeHarness:
        h = FakeHarness(tmp_path / "harnesses", name, **kwargs)  # type: ignore[arg-type]
        made.append(h)
        return h

    yield make
    for h in made:
        h.close()
