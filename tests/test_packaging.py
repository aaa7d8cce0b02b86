"""The wheel carries everything a non-editable install needs (pipx, uv tool): the built-in
stages, the embedded default digest, the bridge extensions, the typing marker, the plugins' entry script
and our own `supervise` launcher."""

from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.timeout(300)
def test_wheel_ships_stages_default_and_bridges(tmp_path: Path) -> None:
    proc = subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w",
                           str(tmp_path), str(ROOT)], capture_output=True, text=True, timeout=280)
    if proc.returncode != 0 and "No matching distribution found for hatchling" in proc.stderr:
        pytest.skip("the build backend (hatchling) cannot be fetched here")
    assert proc.returncode == 0, proc.stderr[-2000:]
    wheel = next(tmp_path.glob("watchkeeper-*.whl"))
    names = set(zipfile.ZipFile(wheel).namelist())
    stages = {p.relative_to(ROOT / "stages").as_posix() for p in (ROOT / "stages").rglob("*.py")
              if "__pycache__" not in p.parts}
    assert stages and all(f"supervisor/_stages/{name}" in names for name in stages)
    for needed in ("supervisor/default.toml", "supervisor/py.typed", "supervisor/bridges/core.mjs",
                   "supervisor/bridges/pi/index.ts", "supervisor/bridges/opencode/watchkeeper.ts"):
        assert needed in names, needed
    assert not any(n.startswith(("tests/", "stages/")) for n in names)
    # the plugins' entry, installed beside `supervise` (pipx and uv tool link it onto PATH too)
    for needed in ("supervisor/_plugins/.claude-plugin/marketplace.json",
                   "supervisor/_plugins/plugins/claude/.claude-plugin/plugin.json",
                   "supervisor/_plugins/plugins/claude/hooks/hooks.json"):
        assert needed in names, needed
    [script] = [n for n in names if n.endswith(".data/scripts/supervise-hook")]
    assert zipfile.ZipFile(wheel).getinfo(script).external_attr >> 16 & 0o111
    # `supervise` is our launcher (bin/supervise), its first line for the installer to point at
    # the environment's interpreter; no console-script entry, whose wrapper imports `re`
    [launcher] = [n for n in names if n.endswith(".data/scripts/supervise")]
    archive = zipfile.ZipFile(wheel)
    assert archive.getinfo(launcher).external_attr >> 16 & 0o111
    assert archive.read(launcher).startswith(b"#!python\n")
    entry_points = [n for n in names if n.endswith(".dist-info/entry_points.txt")]
    assert not entry_points or b"supervise" not in archive.read(entry_points[0])
