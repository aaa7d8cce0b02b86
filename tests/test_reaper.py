"""The reaper, children listing and timing table the engine and `supervise run` share
(`supervisor/engine/_reaper.py`): one home, and what it does."""

from __future__ import annotations

import ast
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
LINUX = sys.platform.startswith("linux")


def _shared_names() -> set[str]:
    """The upper-case names `_reaper` assigns at module level (its table and switches)."""
    tree = ast.parse((ROOT / "supervisor" / "engine" / "_reaper.py").read_text())
    return {target.id for node in tree.body if isinstance(node, (ast.Assign, ast.AnnAssign))
            for target in (node.targets if isinstance(node, ast.Assign) else [node.target])
            if isinstance(target, ast.Name) and target.id.isupper() and target.id != "TYPE_CHECKING"}


def test_no_other_module_assigns_a_shared_number() -> None:
    """The timing table and the switches live in `_reaper` alone: no module of the package
    assigns one of its names at module level (a copy would drift; the lean path used to keep
    seven)."""
    names = _shared_names()
    assert {"KILL_MARGIN", "DRAIN", "TOKEN_VAR", "PORTABLE", "REAP_BATCH", "KILL_WAIT"} <= names
    copies = []
    for path in sorted((ROOT / "supervisor").rglob("*.py")):
        if path.name == "_reaper.py":
            continue
        for node in ast.parse(path.read_text()).body:
            targets = (node.targets if isinstance(node, ast.Assign)
                       else [node.target] if isinstance(node, ast.AnnAssign) else [])
            copies += [f"{path.relative_to(ROOT)}: {t.id}" for t in targets
                       if isinstance(t, ast.Name) and t.id in names]
    assert not copies, copies


_PROBE = """
import os, sys, time
from supervisor.engine._reaper import reap_zombie_children
def zombies(n):
    pids = [os.posix_spawn("/bin/true", ["true"], dict(os.environ)) for _ in range(n)]
    for pid in pids:  # bounded: each exits at once
        for _ in range(5000):
            with open(f"/proc/{pid}/stat") as f:
                if f.read().rsplit(")", 1)[1].split()[0] == "Z":
                    break
            time.sleep(0.002)
    return pids
def reaped_before(pid):  # then reaps it here if it was not
    try:
        os.waitpid(pid, os.WNOHANG)
        return False
    except ChildProcessError:
        return True
pids = zombies(3)
print(reap_zombie_children(limit=2), sum(map(reaped_before, pids)))
kept = zombies(1)[0]
print(reap_zombie_children(keep={kept}), reaped_before(kept))
"""


@pytest.mark.skipif(not LINUX, reason="reads /proc/<pid>/stat")
def test_the_reaper_stops_at_its_limit_and_at_a_kept_pid() -> None:
    """`reap_zombie_children(limit=2)` reaps two of three zombies (the lean path's wakeup stays
    bounded); a kept pid (the command `supervise run` waits for) is never reaped. In a fresh
    process, whose only children are the probe's."""
    proc = subprocess.run([sys.executable, "-c", _PROBE], capture_output=True, text=True,
                          timeout=60)
    assert proc.stdout.split("\n")[:2] == ["2 2", "0 False"], proc.stdout + proc.stderr


@pytest.mark.parametrize("value, unknown", [("1", True), ("0", False)])
def test_the_children_listing_is_unknown_on_the_portable_path(value: str, unknown: bool) -> None:
    """Without /proc's children lists (the portable path) the listing is None, never [] (which
    would say "nothing left"): `supervise run`'s leftover check then assumes there may be."""
    code = ("from supervisor.engine import _reaper as r; c = r.our_children(); "
            "print(c is None, r.PORTABLE)")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=60, env={**os.environ, "SUPERVISE_PORTABLE": value})
    expected = f"{unknown or not LINUX} {value == '1'}"
    assert proc.stdout.strip() == expected, proc.stderr
