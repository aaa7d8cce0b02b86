"""Registered commands are immune to the harness's Python environment (issue 27, item 5): with
another package named ``supervisor`` on ``PYTHONPATH`` (supervisord's import name) the
SessionStart command exited 1 ("No module named supervisor.__main__"), and a built-in stage
lost its output. Every registered command, the sh fast path's Python start, the bridges, the
deferred runner and the built-in stages run in isolated mode (``-I``); ``doctor`` warns about a
registration written before and fails on a foreign ``supervisor`` on the hook's path;
``install`` rewrites the registration."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from helpers import run_cli, supervise_cmd

from supervisor.adapters import ADAPTERS
from supervisor.commands.install import FAST_PATH, SHELL, hook_command


@pytest.fixture
def foreign(tmp_path: Path) -> Path:
    """A folder for ``PYTHONPATH`` holding a real (fake) supervisord package ``supervisor``."""
    top = tmp_path / "pythonpath"
    pkg = top / "supervisor"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text("# supervisord's package, which has no __main__\n")
    (pkg / "supervisord.py").write_text("def main() -> None:\n    raise SystemExit(7)\n")
    return top


@pytest.fixture
def project(git_repo: Path) -> Path:
    (git_repo / "AGENTS.md").write_text("# Agents\nMARK-AGENTS\n")
    (git_repo / "supervise.toml").write_text(
        '[[stages]]\nname = "cmd"\nrun = ["echo", "MARK-CMD"]\n'
        '[[stages]]\nname = "instructions"\nbuiltin = "instructions"\n')
    return git_repo


def _hostile_env(foreign: Path, tmp_path: Path) -> dict[str, str]:
    startup = tmp_path / "startup.py"
    startup.write_text(f"open({str(tmp_path / 'startup-ran')!r}, 'w').close()\n")
    return {**os.environ, "PYTHONPATH": str(foreign), "PYTHONHOME": str(tmp_path / "no-home"),
            "PYTHONSTARTUP": str(startup)}


def test_the_registered_session_command_runs_with_a_foreign_supervisor_on_pythonpath(
        project: Path, foreign: Path, tmp_path: Path) -> None:
    """The SessionStart command as ``install`` writes it, with ``PYTHONPATH`` naming another
    ``supervisor`` and a ``PYTHONHOME`` that does not exist: the digest is delivered, the
    built-in stage's output included."""
    command = hook_command(ADAPTERS["claude"])
    payload = json.dumps({"session_id": "s-iso", "cwd": str(project),
                          "hook_event_name": "SessionStart", "source": "startup"}).encode()
    proc = subprocess.run(["/bin/sh", "-c", command], input=payload, cwd=project,
                          capture_output=True, env=_hostile_env(foreign, tmp_path), timeout=120)
    assert proc.returncode == 0, proc.stderr
    context = json.loads(proc.stdout)["hookSpecificOutput"]["additionalContext"]
    assert "MARK-CMD" in context and "MARK-AGENTS" in context, (context, proc.stderr)
    assert not (tmp_path / "startup-ran").exists()


def test_the_fast_path_starts_python_isolated(project: Path, foreign: Path, tmp_path: Path) -> None:
    """The sh fast path, handed a payload it cannot decide (not JSON it reads), starts Python
    itself: isolated, for the ``-I`` shape and for a ``-P`` registration written before."""
    for flag in ("-I", "-P"):
        argv = [SHELL, str(FAST_PATH), sys.executable, flag, "-m", "supervisor", "hook",
                "claude", "--event", "prompt"]
        proc = subprocess.run(argv, input=b"not json", cwd=project, capture_output=True,
                              env=_hostile_env(foreign, tmp_path), timeout=60)
        assert proc.returncode == 0 and b"No module named" not in proc.stderr, (flag, proc.stderr)
        assert b"supervise" in proc.stderr or proc.stderr == b"", proc.stderr


def test_digest_stages_import_our_package_under_a_foreign_pythonpath(
        project: Path, foreign: Path, tmp_path: Path) -> None:
    """A digest started isolated still starts its built-in stages with the environment's
    ``PYTHONPATH`` set: they run isolated too (they printed nothing before)."""
    proc = subprocess.run([sys.executable, "-I", "-m", "supervisor", "digest", "--harness",
                           "claude", "--format", "json"], cwd=project, capture_output=True,
                          env=_hostile_env(foreign, tmp_path), stdin=subprocess.DEVNULL,
                          timeout=120)
    assert proc.returncode == 0, proc.stderr
    stages = {s["name"]: s for s in json.loads(proc.stdout)["stages"]}
    assert "MARK-AGENTS" in stages["instructions"]["output"], stages["instructions"]


def _old_registration(project: Path) -> None:
    """The session handler rewritten to the shape installs wrote before (``-P``)."""
    path = project / ".claude" / "settings.json"
    data = json.loads(path.read_text())
    for group in data["hooks"]["SessionStart"]:
        for handler in group["hooks"]:
            argv = shlex.split(handler["command"])
            assert argv[1] == "-I", argv
            argv[1] = "-P"
            handler["command"] = shlex.join(argv)
    path.write_text(json.dumps(data))


def test_doctor_flags_an_old_registration_and_a_foreign_package(
        project: Path, foreign: Path, tmp_path: Path) -> None:
    """A ``-P`` registration: a warn naming isolated mode; with a foreign ``supervisor`` on the
    ``PYTHONPATH`` the hook runs with: a FAIL naming it, whose fix is ``install``; ``install``
    rewrites the registration with ``-I`` and doctor is content again."""
    assert run_cli("install", "claude", cwd=project).returncode == 0
    _old_registration(project)
    doctor = [sys.executable, "-I", "-m", "supervisor", "doctor", "claude"]
    plain = subprocess.run(doctor, cwd=project, capture_output=True, timeout=120,
                           stdin=subprocess.DEVNULL)
    lines = plain.stdout.decode().splitlines()
    assert any(line.startswith("warn  claude: registered before isolated mode") for line in lines), lines
    env = {**os.environ, "PYTHONPATH": str(foreign)}
    shadowed = subprocess.run(doctor, cwd=project, capture_output=True, timeout=120, env=env,
                              stdin=subprocess.DEVNULL)
    fails = [line for line in shadowed.stdout.decode().splitlines() if line.startswith("FAIL")]
    assert shadowed.returncode == 1 and len(fails) == 1, shadowed.stdout
    assert "foreign 'supervisor' package" in fails[0] and str(foreign) in fails[0], fails
    assert "fix: supervise install claude" in fails[0], fails
    again = subprocess.run(supervise_cmd("install", "claude"), cwd=project, capture_output=True,
                           timeout=120, stdin=subprocess.DEVNULL)
    assert again.returncode == 0, again.stderr
    settings = (project / ".claude" / "settings.json").read_text()
    assert " -P " not in settings and " -I -m supervisor hook claude" in settings, settings
    fixed = subprocess.run(doctor, cwd=project, capture_output=True, timeout=120, env=env,
                           stdin=subprocess.DEVNULL)
    assert fixed.returncode == 0, fixed.stdout
    assert not [ln for ln in fixed.stdout.decode().splitlines() if "isolated" in ln or "foreign" in ln]


def test_the_supervise_launcher_runs_with_a_foreign_supervisor_on_pythonpath(
        project: Path, foreign: Path, tmp_path: Path) -> None:
    """``bin/supervise`` (the command a user types), installed where the path holds a space,
    with ``PYTHONPATH`` naming another ``supervisor``: ``-V`` and ``doctor`` run ours (the
    launcher ran ``python FILE``, which read ``PYTHONPATH``: "cannot import name
    '_main' from 'supervisor'")."""
    scripts = tmp_path / "env with space" / "bin"
    scripts.mkdir(parents=True)
    launcher = scripts / "supervise"
    launcher.write_bytes((Path(__file__).resolve().parent.parent / "bin" / "supervise").read_bytes())
    launcher.chmod(0o755)
    (scripts / "python").symlink_to(sys.executable)
    venv = Path(sys.prefix)  # this environment, seen from a folder whose path holds a space
    (scripts.parent / "pyvenv.cfg").write_bytes((venv / "pyvenv.cfg").read_bytes())
    (scripts.parent / "lib").symlink_to(venv / "lib")
    env = {**os.environ, "PYTHONPATH": str(foreign)}
    version = subprocess.run([str(launcher), "-V"], cwd=project, capture_output=True, env=env,
                             timeout=60)
    assert version.returncode == 0 and b"watchkeeper" in version.stdout, version.stderr
    doctor = subprocess.run([str(launcher), "doctor"], cwd=project, capture_output=True, env=env,
                            timeout=120)
    assert b"Traceback" not in doctor.stderr
    assert b"config" in doctor.stdout, (doctor.stdout, doctor.stderr)
