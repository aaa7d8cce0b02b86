"""The public door and the hook's hot path."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import supervisor


def test_every_public_name_resolves() -> None:
    """`supervisor.__all__` is the public API; each name imports lazily and is documented."""
    assert list(supervisor.__all__) == sorted(supervisor.__all__)
    for name in supervisor.__all__:
        obj = getattr(supervisor, name)
        assert obj.__doc__, f"{name} has no docstring"
    assert set(dir(supervisor)) >= set(supervisor.__all__)


def test_hook_on_an_empty_digest_loads_no_heavy_dependency(git_repo: Path) -> None:
    """pydantic, anyio and psutil stay off the hook's hot path when there is nothing to run
    (config cached as JSON, records as typed dataclasses, ancestry from /proc on Linux)."""
    (git_repo / "supervise.toml").write_text("budget = 10\nstages = []\n")  # an empty digest
    payload = json.dumps({"session_id": "s", "cwd": str(git_repo), "source": "startup"}).encode()
    argv = [sys.executable, "-X", "importtime", "-m", "supervisor", "hook", "claude"]
    for _ in range(2):  # the first run validates the config and fills the cache
        proc = subprocess.run(argv, input=payload, capture_output=True, cwd=git_repo, timeout=60)
        assert proc.returncode == 0
    loaded = {line.split("|")[-1].strip() for line in proc.stderr.decode().splitlines()
              if line.startswith("import time:")}
    if sys.platform.startswith("linux"):
        assert "psutil" not in loaded
    assert not loaded & {"pydantic", "anyio", "asyncio"}, sorted(loaded & {"pydantic", "anyio", "asyncio"})
