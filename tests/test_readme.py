"""The README's commands and examples, run exactly as printed (issue 14: what a new user tries)."""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from helpers import run_cli

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text("utf-8")


def section(title: str) -> str:
    """The text of the README's ``## title`` section."""
    start = README.index(f"\n## {title}\n")
    end = README.find("\n## ", start + 1)
    return README[start:end if end != -1 else None]


def blocks(text: str, lang: str) -> list[str]:
    """The fenced code blocks of ``lang`` in ``text``, verbatim."""
    return re.findall(rf"```{lang}\n(.*?)```", text, flags=re.S)


def inline_commands() -> list[str]:
    """Every complete ``supervise ...`` command the README prints inline (not a synopsis with
    placeholders, alternatives or optional parts)."""
    found = re.findall(r"`(supervise [^`]+)`", README)
    return [c for c in found
            if not re.search(r"\[|\.\.\.|\\\||(?<!-)\b[A-Z]+\b", c)]


def toy_project(tmp_path: Path) -> Path:
    """A small git project as a new user has one: a source file, one commit."""
    project = tmp_path / "toy"
    (project / "src").mkdir(parents=True)
    (project / "src" / "app.py").write_text("print('hello')\n")
    (project / "README.md").write_text("# toy\n")
    env = {**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@example.com",
           "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@example.com"}
    for argv in (["git", "init", "-q"], ["git", "add", "-A"], ["git", "commit", "-qm", "init"]):
        subprocess.run(argv, cwd=project, check=True, env=env, capture_output=True, timeout=30)
    return project


def test_quick_start_is_two_one_line_commands() -> None:
    commands = blocks(section("Quick start"), "sh")
    assert len(commands) == 2, commands
    assert all(c.count("\n") == 1 for c in commands), commands
    assert commands[0].startswith("python3 -m venv .venv && .venv/bin/pip install -e . && ")
    assert ".venv/bin/python -m pytest" in commands[1]


def test_configuration_example_runs_as_printed(tmp_path: Path) -> None:
    (example,) = blocks(section("Configuration"), "toml")
    project = toy_project(tmp_path)
    (project / "supervise.toml").write_text(example)
    proc = run_cli("config", cwd=project)
    assert proc.returncode == 0, proc.stderr
    proc = run_cli("digest", cwd=project)
    assert proc.returncode == 0, proc.stderr
    text = proc.stdout.decode()
    assert "exited with status" not in text, text  # no TODO: nothing alarming
    assert "## Open TODOs" not in text
    (project / "src" / "app.py").write_text("print('hello')  # TODO: greet by name\n")
    subprocess.run(["git", "add", "-A"], cwd=project, check=True, timeout=30)
    text = run_cli("digest", cwd=project).stdout.decode()
    assert "## Open TODOs\nsrc/app.py:1:print('hello')  # TODO: greet by name\n" in text, text


def test_inline_commands_run_as_printed(tmp_path: Path) -> None:
    commands = inline_commands()
    assert "supervise install claude --scope local" in commands and "supervise -V" in commands
    for n, command in enumerate(commands):
        if n == 0 or command.startswith("supervise install "):
            # each install is an alternative the README offers (project or local scope): a
            # fresh project, since a second scope is refused (both would fire)
            project = toy_project(tmp_path / str(n))
        proc = run_cli(*shlex.split(command)[1:], cwd=project)
        assert proc.returncode == 0, (command, proc.stdout, proc.stderr)


@pytest.mark.e2e
@pytest.mark.timeout(660)  # its own: tests/e2e/conftest.py's 300 s applies only when tests/e2e is
# collected, so `pytest tests/test_readme.py` gave it the global 60 s (pip timed out under load)
def test_quick_start_first_command_on_a_fresh_copy(tmp_path: Path) -> None:
    """The first Quick start command, verbatim, in a fresh copy of this checkout (it installs
    the runtime dependencies with pip: a package registry or the machine's pip config)."""
    copy = tmp_path / "watchkeeper"
    files = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True,
                           timeout=30).stdout.decode().split("\0")
    for name in filter(None, files):
        src = ROOT / name
        if src.is_file():
            (copy / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, copy / name)
    subprocess.run(["git", "init", "-q"], cwd=copy, check=True, timeout=30)
    first = blocks(section("Quick start"), "sh")[0].strip()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("VIRTUAL_ENV", "PYTHON"))}
    env["PATH"] = os.pathsep.join(p for p in env.get("PATH", "").split(os.pathsep)
                                  if not p.startswith(str(Path(sys.executable).parent)))
    proc = subprocess.run(["sh", "-c", first], cwd=copy, capture_output=True, env=env, timeout=600)
    assert proc.returncode == 0, proc.stderr.decode()[-2000:]
    assert b"## Repository" in proc.stdout
