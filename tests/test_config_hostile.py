"""A config file planted as hostile input (issue 11's kinds in the config, issue 14 item 5).

Regression for: ``supervise.toml`` holding 60,000 ``[`` made every hook print "internal error
... RecursionError ... The session-start digest did NOT run" (and `digest`/`doctor` exit 3); a
3 GiB ``supervise.toml`` was read and parsed whole (the hook blew its deadline), a 3 GiB
``pyproject.toml`` was read whole to look for ``[tool.supervise``; a FIFO, folder or link to
``/dev/zero`` named ``supervise.toml`` was silently ignored (the user's config not applied, no
word said); ``builtin = []`` was an internal error (TypeError) instead of a config error.
Invariant: whatever sits at the config's name, the hook exits 0 within its deadline with the
config error named once in the digest (the embedded default runs), and `digest` exits 1 with
one line naming the file and the reason.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path

import pytest

from helpers import run_cli

DEEP = "[tool.supervise]\na = " + "[" * 60000 + "]" * 60000 + "\n"


def _sparse(path: Path) -> None:
    with path.open("wb") as f:
        f.truncate(3 << 30)  # 3 GiB of holes: no disk used, but a whole read would take it


def _oversized_pyproject(path: Path) -> None:
    with path.open("wb") as f:
        f.write(b"[tool.supervise]\nbudget = 5\n")
        f.truncate(3 << 30)


PLANTS: dict[str, tuple[str, Callable[[Path], None], str]] = {
    "fifo": ("supervise.toml", os.mkfifo, "not a regular file"),
    "folder": ("supervise.toml", os.mkdir, "not a regular file"),
    "dev-zero": ("supervise.toml", lambda p: p.symlink_to("/dev/zero"), "not a regular file"),
    "dangling": ("supervise.toml", lambda p: p.symlink_to("nowhere"), "cannot read"),
    "deep": ("supervise.toml", lambda p: p.write_text(DEEP), "nested too deeply to parse"),
    "deep-pyproject": ("pyproject.toml", lambda p: p.write_text(DEEP), "nested too deeply"),
    "huge": ("supervise.toml", _sparse, "too large (3221225472 bytes"),
    "huge-pyproject": ("pyproject.toml", _oversized_pyproject, "too large (3221225472 bytes"),
    "not-utf8": ("supervise.toml", lambda p: p.write_bytes(b"budget = 5 # \xff\n"), "not UTF-8"),
    "builtin-list": ("supervise.toml", lambda p: p.write_text(
        '[[stages]]\nname = "a"\nbuiltin = []\n'), "key 'builtin': must be a string"),
    "builtin-table": ("supervise.toml", lambda p: p.write_text(
        '[[stages]]\nname = "a"\nbuiltin = { x = 1 }\n'), "key 'builtin': must be a string"),
}


@pytest.mark.parametrize("kind", list(PLANTS))
def test_hostile_config_is_a_config_error_never_a_hang_or_crash(git_repo: Path, kind: str) -> None:
    name, plant, reason = PLANTS[kind]
    plant(git_repo / name)
    payload = json.dumps({"session_id": "s", "cwd": str(git_repo), "source": "startup"}).encode()
    hook = run_cli("hook", "claude", cwd=git_repo, input=payload, timeout=60)
    assert hook.returncode == 0, hook.stderr
    context = json.loads(hook.stdout)["hookSpecificOutput"]["additionalContext"]
    assert context.startswith(f"[supervise] configuration error: {git_repo / name}: ")
    assert reason in context.splitlines()[0] and "internal error" not in context
    assert "## Repository" in context  # the embedded default ran
    digest = run_cli("digest", cwd=git_repo, timeout=60)
    assert digest.returncode == 1
    lines = digest.stderr.decode().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"supervise: {git_repo / name}: "), lines
    assert reason in lines[0]


def test_pyproject_mentioning_the_table_only_in_a_comment_is_not_a_config(git_repo: Path) -> None:
    (git_repo / "pyproject.toml").write_text('tool = 1\n# see [tool.supervise] in the docs\n')
    run = run_cli("digest", cwd=git_repo)
    assert run.returncode == 0 and run.stderr == b"", run.stderr


def test_special_pyproject_is_not_ours_to_judge(git_repo: Path) -> None:
    os.mkfifo(git_repo / "pyproject.toml")  # never opened for a blocking read
    run = run_cli("digest", cwd=git_repo)
    assert run.returncode == 0 and run.stderr == b"", run.stderr
