"""An internal error keeps its traceback and version in a crash log and names it in its one
line (as pre-commit's error_handler does): the state dir, else the user's cache dir, else
stderr when there is no home."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from supervisor._version import VERSION

# `status` made to fail with a bug of ours (its collect raises), run through the real entry
BROKEN_STATUS = ("import sys; import supervisor.commands.status as s\n"
                 "def boom(*a): raise ZeroDivisionError('planted bug')\n"
                 "s.collect = boom; sys.argv = ['supervise', 'status']\n"
                 "from supervisor._main import entry; entry()\n")
BROKEN_HOOK = ("import sys; import supervisor.commands.hook as h\n"
               "def boom(*a): raise ZeroDivisionError('planted bug')\n"
               "h._run = boom; sys.argv = ['supervise', 'hook', 'claude']\n"
               "from supervisor._main import entry; entry()\n")


def _crash(code: str, cwd: Path, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", code], cwd=cwd, capture_output=True, text=True,
                          timeout=60, stdin=subprocess.DEVNULL,
                          env={**os.environ, "XDG_CACHE_HOME": str(cwd / "cache"), **env})


def _is_report(text: str) -> None:
    assert f"watchkeeper {VERSION}" in text and "Traceback (most recent call last)" in text
    assert "ZeroDivisionError: planted bug" in text and "in boom" in text


def test_the_state_dir_keeps_the_traceback_and_the_line_names_it(git_repo: Path) -> None:
    (git_repo / ".supervise").mkdir()
    proc = _crash(BROKEN_STATUS, git_repo)
    log = git_repo / ".supervise" / "crash.log"
    assert proc.returncode == 3
    assert proc.stderr.splitlines() == [
        f"supervise: internal error: ZeroDivisionError: planted bug (traceback and version: {log})"]
    _is_report(log.read_text())


def test_without_a_state_dir_the_cache_dir_keeps_it(git_repo: Path) -> None:
    """No `.supervise/` is created for a crash: the user's cache dir holds the log."""
    proc = _crash(BROKEN_STATUS, git_repo)
    log = git_repo / "cache" / "watchkeeper" / "crash.log"
    assert proc.stderr.strip().endswith(f"(traceback and version: {log})"), proc.stderr
    _is_report(log.read_text())
    assert not (git_repo / ".supervise").exists()


def test_with_no_home_the_traceback_goes_to_stderr(git_repo: Path) -> None:
    proc = _crash(BROKEN_STATUS, git_repo, HOME="", XDG_CACHE_HOME="")
    _is_report(proc.stderr)
    assert proc.stderr.splitlines()[-1].endswith("(traceback and version above, no folder to "
                                                 "keep them)"), proc.stderr
    assert not list(git_repo.rglob("crash.log"))


def test_a_hook_names_the_log_and_still_exits_0(git_repo: Path) -> None:
    (git_repo / ".supervise").mkdir()
    proc = _crash(BROKEN_HOOK, git_repo)
    log = git_repo / ".supervise" / "crash.log"
    assert proc.returncode == 0
    assert f"(traceback and version: {log})" in proc.stderr, proc.stderr
    assert "internal error" in proc.stdout  # the model is told the digest did not run
    _is_report(log.read_text())
