"""The engine's portable path (what runs on macOS: no child subreaper, no ``/proc``, no cgroup;
psutil scans and the token sweep), forced on Linux with ``SUPERVISE_PORTABLE=1`` and run
against the same hostile-tree tests as the Linux path: all of ``tests/test_engine.py`` and
the watchdog's real-process tests in ``tests/test_watchdog.py`` (fork-and-exit chains, CPU
starvation, fork bombs, caps, early signals), each also under the synthetic CPU load. Left
out: the config-number tests (no process tree) and the reaping of adopted orphans, which
needs the subreaper (without it they are init's; docs/engine.md, "Platforms"). The switch is
read at import, and a child subreaper cannot be turned off again in a process, so each run
is a fresh pytest process."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

PROBE = """
from supervisor import _cgroup, _procinfo, _proctable, _tree
assert _proctable.PORTABLE and not _proctable._LINUX and not _procinfo._LINUX
assert _tree.enable_subreaper() is False
assert _cgroup.cgroup_root() is None
print("portable")
"""


def _env(**extra: str) -> dict[str, str]:
    return {**os.environ, "SUPERVISE_PORTABLE": "1", **extra}


def test_the_switch_forces_every_portable_branch() -> None:
    proc = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True,
                          env=_env(), timeout=60)
    assert proc.returncode == 0 and proc.stdout.strip() == "portable", proc.stderr
    off = subprocess.run([sys.executable, "-c", "from supervisor import _proctable as p; "
                          "print(p.PORTABLE)"], capture_output=True, text=True, timeout=60,
                         env={**os.environ, "SUPERVISE_PORTABLE": "0"})
    assert off.stdout.strip() == "False"


@pytest.mark.timeout(900)
def test_hostile_trees_on_the_portable_path() -> None:
    """Every hostile-tree test passes with the portable path forced (pytest in a fresh
    process; its own conftest still fails any test that leaves a process behind)."""
    proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                           "tests/test_engine.py", "tests/test_watchdog.py",
                           "-k", "not adopted_orphans_are_reaped and not non_finite"],
                          cwd=ROOT, capture_output=True, text=True, env=_env(), timeout=880)
    tail = proc.stdout[-4000:] + proc.stderr[-2000:]
    assert proc.returncode == 0, tail
    assert " passed" in proc.stdout and " failed" not in proc.stdout, tail
