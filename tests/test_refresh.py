"""Changed instructions refreshed: an instruction file the session already has (injected by
the digest, or loaded by the harness itself) that changes during the session is injected once
at the next per-prompt hook, with a one-line note; never an unchanged file; per session; and
the per-event fast path does not hide it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from supervisor.commands.install import FAST_PATH, SHELL

CONFIG = """\
budget = 30
[[stages]]
name = "instructions"
builtin = "instructions"
"""
NOTE = "INSTRUCTIONS CHANGED: "


@pytest.fixture
def project(git_repo: Path) -> Path:
    (git_repo / "supervise.toml").write_text(CONFIG)
    (git_repo / "AGENTS.md").write_text("rule one\nrule two\n")
    (git_repo / "CLAUDE.md").write_text("claude rule\n")
    old = time.time() - 60  # files that predate the session, as in real life
    for name in ("AGENTS.md", "CLAUDE.md"):
        os.utime(git_repo / name, (old, old))
    return git_repo


def env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if k != "SUPERVISE_STATE_DIR"}


def payload(project: Path, sid: str, source: str | None = None) -> bytes:
    data = {"session_id": sid, "cwd": str(project)}
    if source:
        data["source"] = source
    return json.dumps(data, separators=(",", ":")).encode()  # compact, as harnesses send it


def context_of(out: bytes) -> str:
    if not out.strip():
        return ""
    return str(json.loads(out)["hookSpecificOutput"]["additionalContext"])


def start(project: Path, sid: str, harness: str = "claude") -> str:
    proc = subprocess.run([sys.executable, "-m", "supervisor", "hook", harness],
                          input=payload(project, sid, "startup"), capture_output=True,
                          cwd=project, env=env(), timeout=60)
    assert proc.returncode == 0, proc.stderr
    return context_of(proc.stdout)


def prompt(project: Path, sid: str, harness: str = "claude", *, fast: bool = False,
           starts: Path | None = None) -> str:
    argv = [sys.executable, "-P", "-m", "supervisor", "hook", harness, "--event", "prompt"]
    if fast:
        assert starts is not None
        wrapper = starts.parent / "python"
        if not wrapper.exists():
            wrapper.write_text(f'#!/bin/sh\necho started >> "{starts}"\nexec "{sys.executable}" "$@"\n')
            wrapper.chmod(0o755)
        argv = [SHELL, str(FAST_PATH), str(wrapper), *argv[1:]]
    proc = subprocess.run(argv, input=payload(project, sid), capture_output=True, cwd=project,
                          env=env(), timeout=60)
    assert proc.returncode == 0, proc.stderr
    return context_of(proc.stdout)


def edit(path: Path, text: str) -> None:
    path.write_text(text)
    stamp = time.time() - 1  # still after the watch list's stamp (written 2 s in the past)
    os.utime(path, (stamp, stamp))


def test_a_changed_file_is_injected_once_with_a_note(project: Path) -> None:
    assert "rule two" in start(project, "s1")  # AGENTS.md injected; CLAUDE.md Claude's own
    assert prompt(project, "s1") == ""  # nothing changed: nothing re-injected
    edit(project / "AGENTS.md", "rule one\nrule 2, stricter\nrule three\n")
    text = prompt(project, "s1")
    assert text.count(NOTE) == 1
    first = text.splitlines()[0]
    assert first == ("INSTRUCTIONS CHANGED: AGENTS.md (which the session-start digest gave you) "
                     "was edited during this session (+2 -1 lines, first change at line 2); its "
                     "current version follows and replaces the one you had.")
    assert "### AGENTS.md (current version)\nrule one\nrule 2, stricter\nrule three\n" in text
    assert prompt(project, "s1") == ""  # once
    edit(project / "CLAUDE.md", "claude rule, revised\n")  # loaded by Claude itself
    text = prompt(project, "s1")
    assert "CLAUDE.md (which Claude Code loaded at start) was edited" in text
    assert "claude rule, revised" in text and "rule three" not in text  # only what changed
    (project / "CLAUDE.md").unlink()
    assert "CLAUDE.md (which Claude Code loaded at start) was deleted" in prompt(project, "s1")
    assert prompt(project, "s1") == ""


def test_each_session_gets_the_change_once_through_the_fast_path(project: Path,
                                                                  tmp_path: Path) -> None:
    starts = tmp_path / "starts"
    # the files were just written: wait until their ctime is past the watch list's slack
    newest = max(p.stat().st_ctime for p in project.iterdir() if p.is_file())
    time.sleep(max(0.0, newest + 2.05 - time.time()))
    start(project, "s1")
    start(project, "s2")
    assert prompt(project, "s1", fast=True, starts=starts) == ""
    assert not starts.exists()  # nothing changed: the shell answered without Python
    edit(project / "AGENTS.md", "rule one\nnew rule\n")
    assert prompt(project, "s1", fast=True, starts=starts).count("new rule") == 1
    # s1's delivery must not hide the change from s2
    assert prompt(project, "s2", fast=True, starts=starts).count("new rule") == 1
    assert prompt(project, "s1", fast=True, starts=starts) == ""
    assert prompt(project, "s2", fast=True, starts=starts) == ""
    time.sleep(2.2)  # past the watch list's slack: the next Python run re-stamps it
    assert prompt(project, "s1", fast=True, starts=starts) == ""
    starts.unlink(missing_ok=True)
    assert prompt(project, "s2", fast=True, starts=starts) == ""
    assert not starts.exists()  # settled: the fast path answers alone again


def test_a_big_file_is_named_not_injected(project: Path) -> None:
    start(project, "s1")
    edit(project / "AGENTS.md", "x" * (80 * 1024) + "\n")
    text = prompt(project, "s1")
    assert "AGENTS.md (which the session-start digest gave you) was edited" in text
    assert "read it again directly" in text and "xxxx" not in text


def test_no_session_id_no_baseline_and_a_fifo_never_hangs(project: Path) -> None:
    start(project, "")
    assert not (project / ".supervise" / "refresh").exists() or not list(
        (project / ".supervise" / "refresh").glob("*.json"))
    start(project, "s1")
    (project / "AGENTS.md").unlink()
    os.mkfifo(project / "AGENTS.md")
    assert ("AGENTS.md (which the session-start digest gave you) changed during this session and "
            "is no longer given to you (a FIFO, not a regular file; not read)") in prompt(project, "s1")


def test_the_option_turns_it_off(project: Path) -> None:
    (project / "supervise.toml").write_text(CONFIG + "[stages.options]\nrefresh = false\n")
    start(project, "s1")
    edit(project / "AGENTS.md", "changed\n")
    assert prompt(project, "s1") == ""


def test_a_changed_rule_is_refreshed_as_its_body_once(project: Path) -> None:
    """A rules file edited mid-session is refreshed as the digest gave it: its body, never
    its frontmatter (the old code sent the whole file, ``description:`` and ``globs:``
    included), once; an edit of the frontmatter alone refreshes nothing."""
    rules = project / ".cursor" / "rules"
    rules.mkdir(parents=True)
    rule = rules / "base.mdc"
    rule.write_text("---\nalwaysApply: true\ndescription: house rule\n---\nCURSOR-ALWAYS one\n")
    old = time.time() - 60
    os.utime(rule, (old, old))
    first = start(project, "s1", "codex")
    assert "CURSOR-ALWAYS one" in first and "alwaysApply" not in first
    assert prompt(project, "s1", "codex") == ""
    edit(rule, "---\nalwaysApply: true\ndescription: house rule\n---\nCURSOR-ALWAYS one\n"
               "CURSOR-ALWAYS two\n")
    text = prompt(project, "s1", "codex")
    assert text.count(NOTE) == 1 and text.count("CURSOR-ALWAYS two") == 1
    assert "alwaysApply" not in text and "description: house rule" not in text, text
    assert "(+1 -0 lines, first change at line 2)" in text  # the body's lines
    assert "### .cursor/rules/base.mdc (current version)\nCURSOR-ALWAYS one\nCURSOR-ALWAYS two\n" in text
    assert prompt(project, "s1", "codex") == ""  # once
    edit(rule, "---\nalwaysApply: true\ndescription: the house rule, reworded\n---\n"
               "CURSOR-ALWAYS one\nCURSOR-ALWAYS two\n")
    assert prompt(project, "s1", "codex") == ""  # the model was never given the frontmatter
