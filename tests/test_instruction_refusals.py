"""Instruction and memory files stay inside the project, and every file not read is named with
its true reason (issue 11, item 7).

Regression for: ``ln -s /etc/passwd AGENTS.md`` put ``/etc/passwd`` in the model's context
although an ``@import`` of the same target was refused as "outside the project"; an
``AGENTS.md`` over 4 MiB or a FIFO silently disappeared; a binary file got a misleading message.
Invariant: a file resolving outside the project (or into ``/proc``, ``/sys``, ``/dev``) is
refused like an import and named; the harness's documented home files stay allowed; oversized,
special and binary files are each named with the true reason.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import pytest

from helpers import run_cli

INSTRUCTIONS = ('[[stages]]\nname = "instructions"\nbuiltin = "instructions"\n'
                "options = {{ list_nested = false{extra} }}\n")


def _digest(project: Path, harness: str = "", extra: str = "") -> str:
    (project / "supervise.toml").write_text("budget = 30\n" + INSTRUCTIONS.format(extra=extra))
    env = {"SUPERVISE_HARNESS": harness} if harness else None
    if harness:  # the stage reads the harness from the hook's context: run the hook
        payload = json.dumps({"session_id": "s", "cwd": str(project), "source": "startup"})
        run = run_cli("hook", harness, "--take-lock", cwd=project, input=payload.encode(), env=env)
        assert run.returncode == 0, run.stderr
        if not run.stdout.strip():
            return ""  # nothing to supply
        return str(json.loads(run.stdout)["hookSpecificOutput"]["additionalContext"])
    run = run_cli("digest", cwd=project)
    assert run.returncode == 0, run.stderr
    return run.stdout.decode()


# -- links out of the project ------------------------------------------------------------------

@pytest.mark.parametrize("harness, name", [("claude", "AGENTS.md"), ("codex", "CLAUDE.md"),
                                           ("", "CLAUDE.local.md")])
def test_link_to_etc_passwd_is_refused_like_an_import(git_repo: Path, harness: str,
                                                      name: str) -> None:
    (git_repo / name).symlink_to("/etc/passwd")
    text = _digest(git_repo, harness)
    assert "root:" not in text
    assert (f"- {git_repo / name}: refused: it resolves to /etc/passwd, outside the project; "
            "allow it with the allow_outside or allow_paths option") in text


def test_link_into_proc_is_refused_even_with_allow_outside(git_repo: Path) -> None:
    (git_repo / "AGENTS.md").symlink_to("/proc/self/environ")
    (git_repo / "CLAUDE.md").write_text("see @/proc/self/status\n")
    text = _digest(git_repo, extra=", allow_outside = true")
    assert "HOME=" not in text and "VmRSS" not in text
    assert re.search(f"- {re.escape(str(git_repo / 'AGENTS.md'))}: refused: it resolves to "
                     r"/proc/\d+/environ, in /proc \(a kernel or device file system\); never "
                     "read", text), text
    assert "- @/proc/self/status in CLAUDE.md: refused: it resolves to /proc/" in text


def test_link_to_dev_zero_never_blocks_or_reads(git_repo: Path) -> None:
    (git_repo / "AGENTS.md").symlink_to("/dev/zero")
    text = _digest(git_repo)
    assert "in /dev (a kernel or device file system); never read" in text


def test_link_inside_the_project_and_allowed_paths_still_work(git_repo: Path,
                                                              tmp_path: Path) -> None:
    (git_repo / "docs").mkdir()
    (git_repo / "docs" / "rules.md").write_text("INSIDE RULES\n")
    (git_repo / "AGENTS.md").symlink_to("docs/rules.md")
    shared = tmp_path / "shared"
    shared.mkdir()
    (shared / "team.md").write_text("TEAM RULES\n")
    (git_repo / "CLAUDE.md").symlink_to(shared / "team.md")
    text = _digest(git_repo, extra=f", allow_paths = [{json.dumps(str(shared))}]")
    assert "INSIDE RULES" in text and "TEAM RULES" in text
    assert "refused" not in text


def test_home_instruction_file_may_link_anywhere(git_repo: Path, tmp_path: Path) -> None:
    """The user's own home file (a documented harness location) is not project input: a
    dotfiles link is followed."""
    home = Path(os.environ["HOME"])
    dotfiles = tmp_path / "dotfiles"
    dotfiles.mkdir()
    (dotfiles / "claude.md").write_text("MY GLOBAL RULES\n")
    (home / ".claude").mkdir(parents=True, exist_ok=True)
    (home / ".claude" / "CLAUDE.md").symlink_to(dotfiles / "claude.md")
    text = _digest(git_repo, "codex", extra=", global = true")
    assert "MY GLOBAL RULES" in text


# -- special, oversized and binary files -------------------------------------------------------

def test_fifo_is_named_not_lost_and_never_blocks(git_repo: Path) -> None:
    os.mkfifo(git_repo / "AGENTS.md")
    text = _digest(git_repo)
    assert f"- {git_repo / 'AGENTS.md'}: a FIFO, not a regular file; not read" in text


def test_oversized_file_is_named_with_its_size(git_repo: Path) -> None:
    big = git_repo / "AGENTS.md"
    with big.open("wb") as f:
        f.truncate(4 * 1024 * 1024 + 1)
        f.seek(0)
        f.write(b"# rules\n")
    text = _digest(git_repo)
    assert (f"- {big}: too large ({4 * 1024 * 1024 + 1} bytes; files over "
            f"{4 * 1024 * 1024} bytes are not read)") in text


@pytest.mark.parametrize("name", ["AGENTS.md", "CLAUDE.md"])
def test_binary_file_is_named_as_binary(git_repo: Path, name: str) -> None:
    (git_repo / name).write_bytes(b"\x7fELF\x02\x01\x01\x00\x00\x00binary")
    text = _digest(git_repo)
    assert f"- {git_repo / name}: binary (it contains NUL bytes); not read" in text
    assert "ELF" not in text and "replacement characters" not in text


# -- nested instructions (post-tool) -----------------------------------------------------------

def _post_tool(project: Path, file: Path) -> str:
    payload = json.dumps({"session_id": "s7", "cwd": str(project), "tool_name": "Read",
                          "hook_event_name": "PostToolUse",
                          "tool_input": {"file_path": str(file)}}).encode()
    run = run_cli("hook", "claude", "--event", "post-tool", cwd=project, input=payload)
    assert run.returncode == 0, run.stderr
    return str(json.loads(run.stdout)["hookSpecificOutput"]["additionalContext"]) if run.stdout else ""


def test_nested_link_out_of_the_project_is_refused(git_repo: Path) -> None:
    sub = git_repo / "pkg"
    sub.mkdir()
    (sub / "AGENTS.md").symlink_to("/etc/passwd")
    (sub / "m.py").write_text("")
    text = _post_tool(git_repo, sub / "m.py")
    assert "root:" not in text
    assert text == (f"Instructions at {sub / 'AGENTS.md'} not injected: refused: it resolves to "
                    "/etc/passwd, outside the project.\n")
    assert _post_tool(git_repo, sub / "m.py") == ""  # said once per epoch


@pytest.mark.parametrize("content, reason", [
    (b"\x00\x01binary", "binary (it contains NUL bytes); not read"),
])
def test_nested_binary_is_named(git_repo: Path, content: bytes, reason: str) -> None:
    sub = git_repo / "lib"
    sub.mkdir()
    (sub / "AGENTS.md").write_bytes(content)
    (sub / "m.py").write_text("")
    assert _post_tool(git_repo, sub / "m.py") == (
        f"Instructions at {sub / 'AGENTS.md'} not injected: {reason}.\n")


def test_digest_listing_and_post_tool_name_the_same_nested_file(git_repo: Path) -> None:
    """The digest's list of nested files (harnesses without a read hook) names, per folder, the
    file the post-tool injection picks, with the same reason when it cannot be used: an
    AGENTS.override.md beside an AGENTS.md, a link to /dev/zero, a FIFO, a link out of the
    project, and an override that is a dangling link (it still shadows AGENTS.md)."""
    plant = {
        "ovr": lambda d: ((d / "AGENTS.md").write_text("plain\n"),
                          (d / "AGENTS.override.md").write_text("override\n")),
        "zero": lambda d: (d / "AGENTS.md").symlink_to("/dev/zero"),
        "fifo": lambda d: os.mkfifo(d / "AGENTS.md"),
        "out": lambda d: (d / "AGENTS.md").symlink_to("/etc/passwd"),
        "deep/er": lambda d: (d / "AGENTS.md").write_text("deep\n"),
    }
    for folder, make in plant.items():
        (git_repo / folder).mkdir(parents=True)
        make(git_repo / folder)
        (git_repo / folder / "m.py").write_text("")
    (git_repo / "supervise.toml").write_text(
        'budget = 30\n[[stages]]\nname = "instructions"\nbuiltin = "instructions"\n')
    run = run_cli("digest", "--harness", "codex", cwd=git_repo)
    assert run.returncode == 0, run.stderr
    listed = run.stdout.decode().split("before working in it):\n", 1)[1].splitlines()
    expected = {
        "ovr": ("ovr/AGENTS.override.md", None),
        "zero": ("zero/AGENTS.md", "refused: it resolves to /dev/zero, in /dev (a kernel or "
                                   "device file system); never read"),
        "fifo": ("fifo/AGENTS.md", "a FIFO, not a regular file; not read"),
        "out": ("out/AGENTS.md", "refused: it resolves to /etc/passwd, outside the project"),
        "deep/er": ("deep/er/AGENTS.md", None),
    }
    assert listed == [f"- {rel}" + (f": {why}" if why else "")
                      for rel, why in sorted(expected.values())]
    for folder, (rel, why) in expected.items():
        text = _post_tool(git_repo, git_repo / folder / "m.py")
        if why is None:
            assert text.startswith(f"Instructions from: {git_repo / rel}\n"), text
        else:
            assert text == f"Instructions at {git_repo / rel} not injected: {why}.\n"


# -- memory files ------------------------------------------------------------------------------

def _memory(project: Path) -> str:
    (project / "supervise.toml").write_text(
        'budget = 30\n[[stages]]\nname = "memory"\nbuiltin = "memory"\n'
        "options = { exposure = false }\n")
    (project / ".git" / "info" / "exclude").write_text(".remember/\n.supervise/\n")
    run = run_cli("digest", cwd=project)
    assert run.returncode == 0, run.stderr
    return run.stdout.decode()


def test_memory_fifo_and_binary_are_named(git_repo: Path) -> None:
    store = git_repo / ".remember"
    store.mkdir()
    os.mkfifo(store / "identity.md")
    (store / "core-memories.md").write_bytes(b"core\x00\x00binary")
    (store / "remember.md").write_bytes(b"\x00handoff")
    text = _memory(git_repo)
    assert f"Not read {store / 'identity.md'}: a FIFO, not a regular file." in text
    assert f"Binary (it contains NUL bytes); not shown:\n- {store / 'core-memories.md'}" in text
    assert f"Not shown {store / 'remember.md'}: binary (it contains NUL bytes); not read." in text
    assert "planted memory" not in text  # not the misleading reason


def test_memory_link_out_of_the_project_is_refused(git_repo: Path) -> None:
    store = git_repo / ".remember"
    store.mkdir()
    (store / "identity.md").symlink_to("/etc/passwd")
    text = _memory(git_repo)
    assert "root:" not in text
    assert f"Refused {store / 'identity.md'}: a symlink" in text


# -- issue 20: one file under two names, an import loop ---------------------------------------

def test_a_hard_link_of_claude_md_is_not_supplied_to_claude(git_repo: Path) -> None:
    """``ln AGENTS.md CLAUDE.md``: no symlink to resolve, one inode. Claude loads CLAUDE.md
    itself, so ``hook claude`` must not supply AGENTS.md (its copy); the old code compared
    real paths and supplied ``### AGENTS.md`` (issue 20 item 5)."""
    (git_repo / "AGENTS.md").write_text("the one rule\n")
    os.link(git_repo / "AGENTS.md", git_repo / "CLAUDE.md")
    text = _digest(git_repo, "claude")
    assert "the one rule" not in text and "### AGENTS.md" not in text


def test_a_hard_linked_pair_is_printed_once_in_the_terminal(git_repo: Path) -> None:
    """The terminal digest supplies both conventions: a hard-linked pair is one file, printed
    once (the old code printed the text twice)."""
    (git_repo / "AGENTS.md").write_text("the one rule\n")
    os.link(git_repo / "AGENTS.md", git_repo / "CLAUDE.md")
    text = _digest(git_repo)
    assert text.count("the one rule") == 1, text


def test_an_import_that_is_a_link_loop_names_its_reason(git_repo: Path) -> None:
    """Issue 20 item 6: ``@loop.md`` where loop.md is a symlink loop was named "not found";
    now the reason is given."""
    (git_repo / "loop.md").symlink_to(git_repo / "loop2.md")
    (git_repo / "loop2.md").symlink_to(git_repo / "loop.md")
    (git_repo / "AGENTS.md").write_text("rules\nsee @loop.md\n")
    text = _digest(git_repo)
    assert ("- @loop.md in AGENTS.md: a symbolic link loop (too many levels of symbolic "
            "links); not read") in text
    assert "not found" not in text
