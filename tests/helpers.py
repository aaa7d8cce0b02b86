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


def peak_rss_until_exit(proc: subprocess.Popen[bytes]) -> int:
    """Poll ``proc``'s peak resident set (``VmHWM``, Linux) until it exits; bytes (0 when
    ``/proc`` cannot tell)."""
    import time

    peak = 0
    status = Path(f"/proc/{proc.pid}/status")
    while proc.poll() is None:
        try:
            for line in status.read_text().splitlines():
                if line.startswith("VmHWM:"):
                    peak = max(peak, int(line.split()[1]) * 1024)
        except OSError:
            break
        time.sleep(0.01)
    return peak
