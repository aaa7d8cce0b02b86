"""The built-in stages' own child processes (``stages/_common.py``: :class:`Child`, ``spawn``,
``finish``): git and the other commands a stage runs, started without ``subprocess``."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from helpers import alive_and_ours

STAGES = Path(__file__).resolve().parent.parent / "stages"
sys.path.insert(0, str(STAGES))  # as a stage program has it: its helpers import as `_common`

import _common  # noqa: E402

_RUN_AND_LIST = """
import os, sys
out = os.environ.pop("WK_MODULES_OUT")
program = sys.argv[1]
sys.argv = [program]
try:
    with open(program, "rb") as f:
        exec(compile(f.read(), program, "exec"), {"__name__": "__main__", "__file__": program})
finally:
    with open(out, "w") as f:
        f.write("\\n".join(sys.modules))
"""
"""Runs a stage program as its interpreter would (``python PROGRAM``) and writes the names in
``sys.modules`` when it ends."""


@pytest.mark.parametrize(("stage", "heading"), [("repo", "## Repository"),
                                                ("instructions", "## Instructions")])
def test_the_default_stages_run_git_without_subprocess(git_repo: Path, tmp_path: Path,
                                                       stage: str, heading: str) -> None:
    """The ``repo`` stage's three git calls and the ``instructions`` stage's nested listing
    (a terminal digest: no harness, so it lists) run without importing ``subprocess``, whose
    import (``threading``, ``selectors``, ``locale``) was about 3.5 ms of CPU of each stage's
    start, twice per session start; the output shows git answered."""
    (git_repo / "AGENTS.md").write_text("# Root rules\n")
    (git_repo / "pkg").mkdir()
    (git_repo / "pkg" / "AGENTS.md").write_text("# Rules of pkg\n")  # untracked: listed too
    (git_repo / "README.md").write_text("changed\n")
    out = tmp_path / "modules.txt"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("GIT_", "SUPERVISE_"))}
    env.update({"WK_MODULES_OUT": str(out), "SUPERVISE_STAGE_NAME": stage,
                "SUPERVISE_PROJECT_DIR": str(git_repo), "SUPERVISE_HARNESS": "",
                "SUPERVISE_STAGE_OPTIONS": json.dumps({})})
    proc = subprocess.run([sys.executable, "-c", _RUN_AND_LIST, str(STAGES / stage / "__main__.py")],
                          cwd=git_repo, env=env, capture_output=True, timeout=60)
    assert proc.returncode == 0 and proc.stderr == b"", proc.stderr
    text = proc.stdout.decode()
    assert text.startswith(heading), text
    assert ("README.md" in text) if stage == "repo" else ("pkg/AGENTS.md" in text), text
    loaded = set(out.read_text().split("\n"))
    assert "_common" in loaded
    heavy = loaded & {"subprocess", "threading", "selectors", "json"}  # json: Gemini settings only
    assert not heavy, sorted(heavy)


@pytest.mark.parametrize("where", ["here", "elsewhere"])
def test_a_child_runs_in_its_folder_with_its_environment(tmp_path: Path, where: str) -> None:
    """In this process's working directory (``posix_spawn``) or another folder (a fork that
    enters it first): the command's folder, environment and stdin (``/dev/null``) are as
    given, and both streams are read whole (1 MiB each, the pipes' buffers many times over)."""
    folder = Path.cwd() if where == "here" else tmp_path
    code = ("import os, sys; print(os.getcwd()); print(os.environ['WK_X']); "
            "print(repr(sys.stdin.read())); sys.stdout.write('o' * 2**20); "
            "sys.stderr.write('e' * 2**20)")
    child = _common.Child([sys.executable, "-c", code], folder, {**os.environ, "WK_X": "x1"},
                          new_session=False)
    out, err = child.communicate(timeout=30)
    assert child.returncode == 0
    lines = out.decode().split("\n")
    assert lines[:3] == [str(folder), "x1", "''"], lines[:3]
    assert lines[3] == "o" * 2**20 and err == b"e" * 2**20


@pytest.mark.parametrize("where", ["here", "elsewhere"])
def test_a_command_that_is_not_there_raises_as_popen_did(tmp_path: Path, where: str) -> None:
    folder = Path.cwd() if where == "here" else tmp_path
    with pytest.raises(FileNotFoundError):
        _common.Child(["no-such-command-of-watchkeeper"], folder, dict(os.environ),
                      new_session=True)
    with pytest.raises(OSError):
        _common.Child(["true"], tmp_path / "missing", dict(os.environ), new_session=True)


def test_finish_kills_a_child_past_its_timeout_with_its_group(tmp_path: Path) -> None:
    """``finish``: past the timeout the child's whole session is killed (SIGKILL to its
    group: a background grandchild goes too) and the returncode is None; the stage leaves
    nothing behind."""
    child = _common.spawn(["sh", "-c", "sleep 60 & echo $!; exec sleep 60"], tmp_path,
                          dict(os.environ))
    code, out, _ = _common.finish(child, 0.5)
    assert code is None and child.returncode is not None
    grandchild = int(out.split()[0])
    for _ in range(200):  # SIGKILLed: gone once the kernel tore it down (bounded wait)
        if not alive_and_ours(grandchild):
            break
        __import__("time").sleep(0.01)
    assert not alive_and_ours(grandchild), "the background sleep outlived finish()"


@pytest.mark.skipif(not os.path.exists("/proc/self/status"), reason="reads SigIgn from /proc")
@pytest.mark.parametrize("where", ["here", "elsewhere"])
def test_a_child_gets_sigpipe_back_at_its_default(tmp_path: Path, where: str) -> None:
    """Python ignores SIGPIPE; a child gets it back at its default, as ``subprocess`` gave it
    (a git writing into a closed pipe dies instead of looping on EPIPE)."""
    import signal

    folder = Path.cwd() if where == "here" else tmp_path
    child = _common.spawn(["cat", "/proc/self/status"], folder, dict(os.environ))
    code, out, _ = _common.finish(child, 30)
    assert code == 0
    [ignored] = [line.split()[1] for line in out.decode().splitlines() if line.startswith("SigIgn:")]
    assert not int(ignored, 16) & (1 << (signal.SIGPIPE - 1)), ignored
