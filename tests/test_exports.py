"""The public door and the hook's hot path."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

import supervisor


def test_every_public_name_resolves() -> None:
    """`supervisor.__all__` is the public API; each name imports lazily and is documented."""
    assert list(supervisor.__all__) == sorted(supervisor.__all__)
    for name in supervisor.__all__:
        obj = getattr(supervisor, name)
        assert obj.__doc__, f"{name} has no docstring"
    assert set(dir(supervisor)) >= set(supervisor.__all__)


HEAVY = frozenset({"pydantic", "anyio", "asyncio", "dataclasses", "typing", "inspect",
                   "hashlib", "argparse", "signal", "shutil"} | ({"psutil"} if sys.platform.startswith("linux") else set()))
"""Modules a Python hook path must not import (beyond what the interpreter itself loads at
start): pydantic, anyio and asyncio belong to config validation and the engine; psutil is for
kill time (ancestry reads /proc on Linux); dataclasses (with inspect, ast, dis), typing and
hashlib cost about a third of a hook's CPU (docs/benchmarks.md, 2026-11-30 21:05 UTC): the hot
path's value classes are `supervisor._record` records, typing names live under TYPE_CHECKING,
hashes come from `supervisor._hashing`; signal builds three IntEnums at import (the hook's
handlers use `_signal`); shutil (with bz2 and lzma) is imported only when a folder is removed."""


def _imported(argv: list[str], **run: object) -> tuple[subprocess.CompletedProcess[bytes], set[str]]:
    """Run ``argv`` under ``-X importtime``; the process and the modules it imported."""
    proc = subprocess.run([sys.executable, "-X", "importtime", *argv], capture_output=True,
                          timeout=60, **run)  # type: ignore[call-overload]
    return proc, {line.split("|")[-1].strip() for line in proc.stderr.decode().splitlines()
                  if line.startswith("import time:")}


def _interpreter_start() -> set[str]:
    """What ``python -c pass`` imports by itself (site, encodings, a .pth hook's imports)."""
    return _imported(["-c", "pass"])[1]


def _payload(cwd: Path, event: str, session: str = "s", **extra: object) -> bytes:
    return json.dumps({"session_id": session, "cwd": str(cwd), "hook_event_name": event,
                       **extra}).encode()


@pytest.mark.parametrize("path", ["session-start", "resume", "prompt-delivery", "post-tool-nested"])
def test_python_hook_paths_import_nothing_heavy(git_repo: Path, path: str) -> None:
    """The Python hook paths the benchmark times (a SessionStart on an empty digest, a prompt
    delivering a deferred result, a post-tool injecting a nested AGENTS.md; and the resume
    nudge, which reads the transcript) import none of :data:`HEAVY`. Each run does its work:
    the test would pass vacuously on a hook that failed early."""
    from helpers import configure_deferred, write_result

    (git_repo / "nested").mkdir()
    (git_repo / "nested" / "AGENTS.md").write_text("nested rules\n")
    if path == "prompt-delivery":  # a result is delivered only for a stage configured deferred
        (git_repo / "supervise.toml").write_text("budget = 10\n")
        configure_deferred(git_repo, "net")
    else:
        (git_repo / "supervise.toml").write_text("budget = 10\nstages = []\n")  # an empty digest
    base = ["-P", "-m", "supervisor", "hook", "claude"]
    for attempt in range(2):  # the first run validates the config and fills the cache
        if path == "session-start":
            argv, stdin = base, _payload(git_repo, "SessionStart", source="startup")
        elif path == "resume":
            argv, stdin = base, _payload(git_repo, "SessionStart", source="resume")
        elif path == "prompt-delivery":
            write_result(git_repo / ".supervise" / "deferred" / "net", f"{attempt}-run",
                         {"title": "net", "status": "ok", "seconds": 0.1, "output": "NET RESULT"})
            argv = [*base, "--event", "prompt"]
            stdin = _payload(git_repo, "UserPromptSubmit", prompt="go")
        else:
            argv = [*base, "--event", "post-tool"]
            stdin = _payload(git_repo, "PostToolUse", session=f"s{attempt}", tool_name="Read",
                             tool_input={"file_path": str(git_repo / "nested" / "a.py")})
        proc, loaded = _imported(argv, input=stdin, cwd=git_repo)
        assert proc.returncode == 0, proc.stderr[-2000:]
    out = proc.stdout.decode()
    if path == "session-start":
        assert "supervisor.session._routing" in loaded  # routed and ran the (empty) digest
    elif path == "resume":
        assert "supervise digest" in out, out  # the nudge
    elif path == "prompt-delivery":
        assert "NET RESULT" in out, (out, proc.stderr[-2000:])
    else:
        assert "nested rules" in out, out
    heavy = (loaded - _interpreter_start()) & HEAVY
    assert not heavy, sorted(heavy)
