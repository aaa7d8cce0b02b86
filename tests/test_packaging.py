"""The wheel carries everything a non-editable install needs (pipx, uv tool): the built-in
stages, the embedded default digest, the bridge extensions, the typing marker, the plugins' entry script
and our own `supervise` launcher."""

from __future__ import annotations

import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The project's wheel, built once for this module's tests."""
    folder = tmp_path_factory.mktemp("wheel")
    proc = subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w",
                           str(folder), str(ROOT)], capture_output=True, text=True, timeout=280)
    if proc.returncode != 0 and "No matching distribution found for hatchling" in proc.stderr:
        pytest.skip("the build backend (hatchling) cannot be fetched here")
    assert proc.returncode == 0, proc.stderr[-2000:]
    return next(folder.glob("watchkeeper-*.whl"))


@pytest.mark.timeout(300)
def test_wheel_ships_stages_default_and_bridges(wheel: Path) -> None:
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
                   "supervisor/_plugins/plugins/claude/hooks/hooks.json",
                   # the Gemini CLI extension (the repository's root), the version's one home
                   "supervisor/_plugins/gemini-extension.json", "supervisor/_plugins/hooks/hooks.json"):
        assert needed in names, needed
    import json

    manifest = json.loads((ROOT / "gemini-extension.json").read_text("utf-8"))
    assert wheel.name.startswith(f"watchkeeper-{manifest['version']}-")
    assert json.loads(zipfile.ZipFile(wheel).read("supervisor/_plugins/gemini-extension.json")) == manifest
    [script] = [n for n in names if n.endswith(".data/scripts/supervise-hook")]
    assert zipfile.ZipFile(wheel).getinfo(script).external_attr >> 16 & 0o111
    # `supervise` is our launcher (bin/supervise), a /bin/sh prelude the installer leaves as it
    # is (it rewrites only a `#!python` line); no console-script entry, whose wrapper imports `re`
    [launcher] = [n for n in names if n.endswith(".data/scripts/supervise")]
    archive = zipfile.ZipFile(wheel)
    assert archive.getinfo(launcher).external_attr >> 16 & 0o111
    assert archive.read(launcher).startswith(b"#!/bin/sh\n")
    entry_points = [n for n in names if n.endswith(".dist-info/entry_points.txt")]
    assert not entry_points or b"supervise" not in archive.read(entry_points[0])


@pytest.mark.timeout(300)
def test_the_installed_supervise_starts_from_a_path_with_spaces(wheel: Path, tmp_path: Path) -> None:
    """The wheel installed by pip into an environment whose path holds a space, as the
    README's Quick start does in a clone under ``~/My projects``: ``supervise`` runs, called
    by its path and through a link on PATH (pipx, uv tool). With a ``#!python`` first line pip
    wrote ``#!/…/My projects/…/python`` unquoted (pypa/pip#13389): the kernel cut it at the
    space and the command did not start ("required file not found", exit 127)."""
    env_dir = tmp_path / "My projects" / "env"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(env_dir)], check=True,
                   capture_output=True, timeout=120)
    python = env_dir / "bin" / "python"
    proc = subprocess.run([sys.executable, "-m", "pip", "--python", str(python), "install", "-q",
                           "--no-deps", "--no-index", str(wheel)],
                          capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0, proc.stderr[-2000:]
    launcher = env_dir / "bin" / "supervise"
    links = tmp_path / "links"
    links.mkdir()
    (links / "supervise").symlink_to(launcher)
    # a python3 on PATH that is not the environment's: the launcher must not fall back to it
    (links / "python3").write_text("#!/bin/sh\necho 'not the environment python' >&2\nexit 9\n")
    (links / "python3").chmod(0o755)
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTHON")}
    env["PATH"] = f"{links}{os.pathsep}{env.get('PATH', '')}"
    for argv in ([str(launcher), "--version"], ["supervise", "--version"]):
        done = subprocess.run(argv, capture_output=True, env=env, cwd=tmp_path,
                              stdin=subprocess.DEVNULL, timeout=60)
        assert done.returncode == 0, (argv, done)
        assert done.stdout.startswith(b"supervise (watchkeeper) "), (argv, done.stdout)


@pytest.mark.timeout(300)
@pytest.mark.parametrize("how", ["--user", "--prefix"])
def test_a_user_or_prefix_install_runs_with_its_own_python(wheel: Path, tmp_path: Path, how: str) -> None:
    """A ``pip install --user`` (or ``--prefix``) made by python3.X, with a ``python3`` on PATH
    of another minor version: ``supervise`` runs with the python3.X on PATH it was installed
    for, found from its own ``lib/python3.X/*-packages`` (the old fallback, ``python3``, raised
    ModuleNotFoundError). The ``--prefix`` folder is on no interpreter's path."""
    base = tmp_path / "base"
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTHON")}
    if how == "--user":  # pip refuses --user inside a venv: install for the base interpreter
        python = Path(getattr(sys, "_base_executable", sys.executable))
        target = ["--user"]
        env["PYTHONUSERBASE"] = str(base)
    else:
        python, target = Path(sys.executable), ["--prefix", str(base)]
    proc = subprocess.run([sys.executable, "-m", "pip", "--python", str(python), "install", "-q",
                           "--no-deps", "--no-index", "--no-warn-script-location",
                           "--ignore-installed", *target,  # never uninstall the venv's own
                           str(wheel)], capture_output=True, text=True, timeout=240, env=env)
    assert proc.returncode == 0, proc.stderr[-2000:]
    [launcher] = base.rglob("bin/supervise")
    links = tmp_path / "links"
    links.mkdir()
    version = f"python{sys.version_info[0]}.{sys.version_info[1]}"
    (links / version).symlink_to(python.resolve())
    (links / "python3").write_text("#!/bin/sh\necho 'python3 of another minor version' >&2\nexit 9\n")
    (links / "python3").chmod(0o755)
    env.pop("PYTHONUSERBASE", None)  # the user's shell later: the default user base
    env["PATH"] = f"{launcher.parent}{os.pathsep}{links}{os.pathsep}/usr/bin{os.pathsep}/bin"
    done = subprocess.run(["supervise", "--version"], capture_output=True, env=env, cwd=tmp_path,
                          stdin=subprocess.DEVNULL, timeout=60)
    assert done.returncode == 0, done
    assert done.stdout.startswith(b"supervise (watchkeeper) "), done.stdout
