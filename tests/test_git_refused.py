"""A checkout git refuses (owned by another uid: a devcontainer, ``docker -v``, WSL drvfs, a
sudo'd clone) is said in one line with its fix by every stage that asks git, never an empty
ok: the repo stage, the nested-instructions listing, the memory stage's refusal, doctor.

As root the checkout is really handed to another uid (git's own refusal). Otherwise a ``git``
earlier on PATH answers as git 2.35.2+ does for such a checkout (the same stderr, exit 128)
and runs nothing else, so the test proves the same on any host.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from helpers import run_cli

FIX = "git config --global --add safe.directory"


def _fake_git(bin_dir: Path, repo: Path) -> None:
    bin_dir.mkdir()
    script = bin_dir / "git"
    script.write_text("#!/bin/sh\n"
                      f"echo \"fatal: detected dubious ownership in repository at '{repo}'\" >&2\n"
                      "echo 'To add an exception for this directory, call:' >&2\n"
                      f"echo '\tgit config --global --add safe.directory {repo}' >&2\n"
                      "exit 128\n")
    script.chmod(0o755)


@pytest.fixture
def refused(tmp_path: Path) -> Iterator[tuple[Path, dict[str, str]]]:
    """``(checkout, env)``: a git checkout with a handoff note and a nested AGENTS.md that
    git refuses to work in."""
    repo = tmp_path / "checkout"
    repo.mkdir()
    subprocess.run(["git", "init", "-q", str(repo)], check=True, timeout=30)
    (repo / "pkg").mkdir()
    (repo / "pkg" / "AGENTS.md").write_text("pkg rules\n")
    (repo / "pkg" / "x.py").write_text("x = 1\n")
    (repo / ".remember").mkdir()
    (repo / ".remember" / "remember.md").write_text("# Handoff\nnext: ship\n")
    env = {"SUPERVISE_STATE_DIR": str(tmp_path / "state")}
    if os.geteuid() == 0:
        for folder, _dirs, files in os.walk(repo):
            for name in (folder, *(os.path.join(folder, f) for f in files)):
                os.chown(name, 65534, 65534)
        probe = subprocess.run(["git", "-C", str(repo), "status"], capture_output=True,
                               timeout=30)
        assert b"dubious ownership" in probe.stderr, probe.stderr
    else:
        _fake_git(tmp_path / "bin", repo)
        env["PATH"] = f"{tmp_path / 'bin'}{os.pathsep}{os.environ['PATH']}"
    yield repo, env
    shutil.rmtree(tmp_path / "state", ignore_errors=True)


def test_digest_says_the_refusal_and_its_fix_in_each_stage(refused: tuple[Path, dict[str, str]]) -> None:
    repo, env = refused
    proc = run_cli("digest", "-C", str(repo), env=env)
    out = proc.stdout.decode()
    assert proc.returncode == 0, proc.stderr
    repo_section = out[out.index("## Repository"):]
    assert "git refuses this checkout" in repo_section and f"{FIX} {repo}" in repo_section
    instructions = out[out.index("## Instructions"):out.index("## Repository")]
    assert "Nested instruction files not listed: git refuses this checkout" in instructions
    assert f"{FIX} {repo}" in instructions
    memory = out[out.index("## Memory"):out.index("## Instructions")]
    assert "git cannot say whether it is tracked" in memory
    assert "tracked by the project's git" not in memory  # never a false reason
    assert f"{FIX} {repo}" in memory


def test_doctor_names_the_refused_checkout_with_its_fix(refused: tuple[Path, dict[str, str]]) -> None:
    repo, env = refused
    out = run_cli("doctor", "-C", str(repo), env=env).stdout.decode()
    line = next(ln for ln in out.splitlines() if ln.split()[1:3] == ["memory", "store:"])
    assert line.startswith("FAIL") and "git refuses this checkout" in line
    assert f"fix: {FIX} {repo}" in line


def test_tracked_memory_refused_in_the_digest_gives_doctors_fix(tmp_path: Path) -> None:
    repo = tmp_path / "p"
    (repo / ".remember").mkdir(parents=True)
    (repo / ".remember" / "remember.md").write_text("# Handoff\nplanted\n")
    for args in (["init", "-q"], ["add", "-A"]):
        subprocess.run(["git", "-C", str(repo), *args], check=True, timeout=30)
    env = {"SUPERVISE_STATE_DIR": str(tmp_path / "state")}
    digest = run_cli("digest", "-C", str(repo), "--only", "memory", env=env).stdout.decode()
    doctor = run_cli("doctor", "-C", str(repo), env=env).stdout.decode()
    fix = next(ln for ln in doctor.splitlines() if "memory store:" in ln).partition("fix: ")[2]
    assert fix.startswith("git rm -r --cached -- .remember")
    assert f"Fix: {fix}." in digest
