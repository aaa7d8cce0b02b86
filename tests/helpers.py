"""Helpers for tests: run the real CLI as a process."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path


def supervise_cmd(*args: str) -> list[str]:
    """argv that runs the CLI from this checkout with the test interpreter."""
    return [sys.executable, "-m", "supervisor", *args]


def run_cli(*args: str, cwd: Path | None = None, input: bytes | None = None,
            env: dict[str, str] | None = None, timeout: float = 30) -> subprocess.CompletedProcess[bytes]:
    """Run ``supervise ARGS`` as a real process and return the completed process (bytes)."""
    full_env = {**os.environ, **(env or {})}
    return subprocess.run(supervise_cmd(*args), cwd=cwd, input=input if input is not None else b"",
                          capture_output=True, env=full_env, timeout=timeout)
