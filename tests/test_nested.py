"""Nested AGENTS.md on demand (supervisor/session/_nested.py): once per session and compaction epoch.

Regression (seed 003, opencode PR #43723): the in-flight claim used to outlive the load, so after
a compaction the nested instructions never came back. Invariant: after ``advance_epoch`` the next
read in the subtree injects them again; concurrent reads inject exactly once.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from supervisor.config._context import SessionContext
from supervisor._errors import StateError
from supervisor.session._nested import advance_epoch, handle_post_tool, nested_files


@pytest.fixture
def project(git_repo: Path) -> Path:
    (git_repo / "AGENTS.md").write_text("root rules\n")
    deep = git_repo / "sub dir" / "déep"
    deep.mkdir(parents=True)
    (git_repo / "sub dir" / "AGENTS.md").write_text("SUB-RULES: tabs only\n")
    (deep / "file.txt").write_text("x\n")
    (deep / "other.txt").write_text("y\n")
    return git_repo


def ctx(project: Path, session: str = "sess-1", harness: str = "claude") -> SessionContext:
    return SessionContext.for_project(project, harness=harness, session_id=session)


def read_payload(project: Path, rel: str, session: str = "sess-1", tool: str = "Read") -> dict[str, object]:
    return {"tool_name": tool, "tool_input": {"file_path": str(project / rel)},
            "session_id": session, "cwd": str(project), "hook_event_name": "PostToolUse"}


def run_module(args: list[str], payload: dict[str, object], cwd: Path) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run([sys.executable, "-m", "supervisor.session._nested", *args], cwd=cwd,
                          input=json.dumps(payload).encode(), capture_output=True, timeout=30)


def test_seed_003_scenario_through_the_module_cli(project: Path) -> None:
    payload = read_payload(project, "sub dir/déep/file.txt")
    first = run_module(["post-tool"], payload, project)
    assert first.returncode == 0, first.stderr
    assert f"Instructions from: {project / 'sub dir' / 'AGENTS.md'}" in first.stdout.decode()
    assert "SUB-RULES: tabs only" in first.stdout.decode()
    assert "root rules" not in first.stdout.decode()  # the root file is the digest's job

    again = run_module(["post-tool"], read_payload(project, "sub dir/déep/other.txt"), project)
    assert again.returncode == 0 and again.stdout == b""

    epoch = run_module(["advance-epoch"], {"session_id": "sess-1", "cwd": str(project)}, project)
    assert epoch.stdout.strip() == b"1"

    after = run_module(["post-tool"], payload, project)
    assert b"SUB-RULES: tabs only" in after.stdout


def test_concurrent_reads_inject_exactly_once(project: Path) -> None:
    # A large file widens the window between "not delivered yet" and "recorded": without the
    # claim, several of the processes below inject it.
    (project / "sub dir" / "AGENTS.md").write_text("SUB-RULES\n" + "x" * (3 * 1024 * 1024) + "\n")
    payload = json.dumps(read_payload(project, "sub dir/déep/file.txt")).encode()
    procs = [subprocess.Popen([sys.executable, "-m", "supervisor.session._nested", "post-tool"], cwd=project,
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
             for _ in range(6)]
    # Every process is started and waiting on stdin before any of them gets its payload.
    for p in procs:
        assert p.stdin is not None
        p.stdin.write(payload)
    for p in procs:
        assert p.stdin is not None
        p.stdin.close()
    outs = []
    for p in procs:
        assert p.stdout is not None and p.stderr is not None
        outs.append((p.stdout.read(), p.stderr.read()))
        p.stdout.close()
        p.stderr.close()
        p.wait(timeout=30)
    injected = [o for o, _e in outs if str(project / "sub dir" / "AGENTS.md").encode() in o]
    assert len(injected) == 1, [e for _o, e in outs]


def test_sessions_are_independent_and_ids_never_appear_raw(project: Path) -> None:
    assert handle_post_tool(read_payload(project, "sub dir/déep/file.txt", "a/../../x"), ctx(project)) is not None
    assert handle_post_tool(read_payload(project, "sub dir/déep/file.txt", "other"), ctx(project)) is not None
    assert handle_post_tool(read_payload(project, "sub dir/déep/file.txt", "other"), ctx(project)) is None
    names = [p.name for p in (project / ".supervise" / "nested").iterdir()]
    assert names and not any("other" in n or "x" == n or ".." in n for n in names)
    ledger = next(p for p in (project / ".supervise" / "nested").glob("*.json"))
    assert "epoch" in json.loads(ledger.read_text())


def test_non_file_tools_outside_paths_and_cwd_files_give_nothing(project: Path) -> None:
    c = ctx(project)
    assert handle_post_tool({"tool_name": "Bash", "tool_input": {"command": "cat x"}}, c) is None
    assert handle_post_tool(read_payload(project, "README.md"), c) is None  # root: digest's job
    outside = read_payload(project, "x")
    outside["tool_input"] = {"file_path": "/etc/hostname"}
    assert handle_post_tool(outside, c) is None
    assert handle_post_tool({"tool_name": "Read", "tool_input": "junk"}, c) is None


def test_relative_file_path_and_edit_tools(project: Path) -> None:
    payload = read_payload(project, "x", tool="Edit")
    payload["tool_input"] = {"file_path": "sub dir/déep/file.txt"}
    assert "SUB-RULES" in (handle_post_tool(payload, ctx(project)) or "")


def test_nearest_file_comes_last_and_override_wins(project: Path) -> None:
    (project / "sub dir" / "déep" / "AGENTS.md").write_text("deep rules\n")
    (project / "sub dir" / "déep" / "AGENTS.override.md").write_text("deep override\n")
    text = handle_post_tool(read_payload(project, "sub dir/déep/file.txt"), ctx(project)) or ""
    assert text.index("SUB-RULES") < text.index("deep override")
    assert "deep rules" not in text


def test_claude_symlinked_pair_is_left_to_claude(project: Path) -> None:
    (project / "sub dir" / "CLAUDE.md").symlink_to("AGENTS.md")
    assert nested_files(project / "sub dir" / "déep" / "file.txt", project, "claude") == []
    assert handle_post_tool(read_payload(project, "sub dir/déep/file.txt"), ctx(project)) is None
    # Pi has no such loader: it gets the file.
    assert nested_files(project / "sub dir" / "déep" / "file.txt", project, "pi") == [str(project / "sub dir" / "AGENTS.md")]


def test_claude_md_importing_agents_md_is_left_to_claude(project: Path) -> None:
    (project / "sub dir" / "CLAUDE.md").write_text("Follow @AGENTS.md\n")
    assert handle_post_tool(read_payload(project, "sub dir/déep/file.txt"), ctx(project)) is None


def test_unreadable_file_is_skipped_then_retried_without_a_read_storm(project: Path) -> None:
    nested = project / "sub dir" / "AGENTS.md"
    nested.unlink()
    os.mkfifo(nested)  # opening a FIFO for reading would block: it must be refused, not read
    c = ctx(project)
    payload = read_payload(project, "sub dir/déep/file.txt")
    assert handle_post_tool(payload, c, retry_after=3600) == (  # named, never silently skipped
        f"Instructions at {nested} not injected: a FIFO, not a regular file; not read.\n")
    nested.unlink()
    nested.write_text("SUB-RULES now readable\n")
    # Inside the retry window the file is not tried again (negative cache)...
    assert handle_post_tool(payload, c, retry_after=3600) is None
    # ...and once the window is over (here: a zero window on the next failure) it is.
    ledger = next((project / ".supervise" / "nested").glob("*.json"))
    data = json.loads(ledger.read_text())
    data["retry_at"] = {k: 0 for k in data["retry_at"]}
    ledger.write_text(json.dumps(data))
    assert "now readable" in (handle_post_tool(payload, c) or "")


def test_dangling_symlink_is_recorded_and_retried(project: Path) -> None:
    nested = project / "sub dir" / "AGENTS.md"
    nested.unlink()
    nested.symlink_to("missing-target.md")
    payload = read_payload(project, "sub dir/déep/file.txt")
    assert handle_post_tool(payload, ctx(project), retry_after=0) is None
    (project / "sub dir" / "missing-target.md").write_text("SUB-RULES via link\n")
    assert "via link" in (handle_post_tool(payload, ctx(project), retry_after=0) or "")


def test_claim_of_a_killed_holder_is_released(project: Path) -> None:
    """The claim is a flock: a holder that dies never blocks later loads."""
    c = ctx(project)
    payload = read_payload(project, "sub dir/déep/file.txt")
    handle_post_tool({"tool_name": "Read"}, c)  # no-op, creates nothing
    advance_epoch(c)  # creates the ledger and its lock file
    lock = next((project / ".supervise" / "nested").glob("*.lock"))
    holder = subprocess.Popen(
        [sys.executable, "-c",
         "import fcntl,os,sys;fd=os.open(sys.argv[1],os.O_RDWR);fcntl.flock(fd,fcntl.LOCK_EX);"
         "print('locked',flush=True);sys.stdin.read()", str(lock)],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    try:
        assert holder.stdout is not None and holder.stdout.readline() == b"locked\n"
        assert handle_post_tool(payload, c, lock_wait=0.05) is None  # busy: skipped, not blocked
        with pytest.raises(StateError, match="busy"):
            advance_epoch(c, lock_wait=0.05)
    finally:
        holder.kill()
        holder.wait(timeout=10)
        for pipe in (holder.stdin, holder.stdout):
            if pipe is not None:
                pipe.close()
    assert "SUB-RULES" in (handle_post_tool(payload, c) or "")


def test_non_utf8_nested_file_is_flagged(project: Path) -> None:
    (project / "sub dir" / "AGENTS.md").write_bytes(b"caf\xe9 rules\n")
    text = handle_post_tool(read_payload(project, "sub dir/déep/file.txt"), ctx(project)) or ""
    assert "caf\ufffd rules" in text and "not valid UTF-8" in text


def test_unwritable_state_dir_raises_state_error(project: Path, tmp_path: Path) -> None:
    blocker = tmp_path / "state-is-a-file"
    blocker.write_text("")
    c = SessionContext(project_dir=project, state_dir=blocker, harness="claude", session_id="s")
    with pytest.raises(StateError, match="ledger"):
        handle_post_tool(read_payload(project, "sub dir/déep/file.txt", "s"), c)


def hook(project: Path, payload: dict[str, object], *args: str) -> str:
    from helpers import run_cli

    proc = run_cli("hook", "claude", *args, cwd=project, input=json.dumps(payload).encode())
    assert proc.returncode == 0, proc.stderr
    if not proc.stdout.strip():
        return ""
    return str(json.loads(proc.stdout)["hookSpecificOutput"]["additionalContext"])


def test_seed_003_through_supervise_hook_claude_post_tool(project: Path) -> None:
    payload = read_payload(project, "sub dir/déep/file.txt")
    assert "SUB-RULES" in hook(project, payload, "--event", "post-tool")
    assert hook(project, payload, "--event", "post-tool") == ""


def test_compact_through_the_hook_reinjects_nested_instructions(project: Path) -> None:
    payload = read_payload(project, "sub dir/déep/file.txt")
    assert "SUB-RULES" in hook(project, payload, "--event", "post-tool")
    hook(project, {"hook_event_name": "SessionStart", "source": "compact", "session_id": "sess-1",
                   "cwd": str(project)})
    assert "SUB-RULES" in hook(project, payload, "--event", "post-tool")


def test_symlinked_state_dir_is_never_written(project: Path, tmp_path: Path) -> None:
    """Adversarial report: post-tool wrote its ledger through a symlinked .supervise."""
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    state = project / ".supervise"
    if state.exists():
        import shutil

        shutil.rmtree(state)
    state.symlink_to(elsewhere)
    payload = read_payload(project, "sub dir/déep/file.txt")
    assert hook(project, payload, "--event", "post-tool") == ""
    assert list(elsewhere.iterdir()) == []


def test_clear_through_the_hook_also_reinjects(project: Path) -> None:
    """`clear` loses context like `compact`: the epoch advances, the next read injects again."""
    payload = read_payload(project, "sub dir/déep/file.txt")
    assert "SUB-RULES" in hook(project, payload, "--event", "post-tool")
    assert hook(project, payload, "--event", "post-tool") == ""
    hook(project, {"hook_event_name": "SessionStart", "source": "clear", "session_id": "sess-1",
                   "cwd": str(project)})
    assert "SUB-RULES" in hook(project, payload, "--event", "post-tool")


# -- the shim's injected index (supervisor/session/_fastpath.py, issue 13) --------------------
def index_entries(project: Path, session: str = "sess-1") -> set[str]:
    root = project / ".supervise" / "fastpath" / "nested" / session
    return {"/" + str(p.relative_to(root)) for p in root.rglob("*") if p.is_file()}


def test_index_holds_what_the_ledger_injected_until_the_epoch_advances(project: Path) -> None:
    context = ctx(project)
    assert handle_post_tool(read_payload(project, "sub dir/déep/file.txt"), context)
    assert index_entries(project) == {str(project / "sub dir" / "AGENTS.md")}
    (project / "sub dir" / "déep" / "AGENTS.md").write_text("DEEP\n")
    assert handle_post_tool(read_payload(project, "sub dir/déep/file.txt"), context)
    assert index_entries(project) == {str(project / "sub dir" / "AGENTS.md"),
                                      str(project / "sub dir" / "déep" / "AGENTS.md")}
    advance_epoch(context)
    assert not (project / ".supervise" / "fastpath" / "nested" / "sess-1").exists()
    assert index_entries(project, "sess-1") == set()
    leftovers = list((project / ".supervise" / "fastpath" / "nested").iterdir())
    assert leftovers == []  # renamed away, then removed


def test_index_leaves_out_links_and_odd_session_ids(project: Path, tmp_path: Path) -> None:
    real = tmp_path / "real rules.md"
    real.write_text("LINKED\n")
    (project / "sub dir" / "déep" / "AGENTS.md").symlink_to(real)
    outside_ok = handle_post_tool(read_payload(project, "sub dir/déep/file.txt"), ctx(project))
    assert outside_ok and "SUB-RULES" in outside_ok
    # the link's real path is outside the project: named, recorded, but never indexed
    assert index_entries(project) == {str(project / "sub dir" / "AGENTS.md")}
    for odd in ("../x", ".hidden", "a b", "x" * 129):
        assert handle_post_tool(read_payload(project, "sub dir/déep/other.txt", odd), ctx(project, odd))
    names = {p.name for p in (project / ".supervise" / "fastpath" / "nested").iterdir()}
    assert names == {"sess-1"}


def test_index_is_removed_when_a_corrupt_ledger_starts_over(project: Path) -> None:
    context = ctx(project)
    assert handle_post_tool(read_payload(project, "sub dir/déep/file.txt"), context)
    assert index_entries(project)
    for ledger in (project / ".supervise" / "nested").glob("*.json"):
        ledger.write_text("[1, 2")
    # the ledger starts over (the file is injected again) and the index restarts with it
    assert "SUB-RULES" in (handle_post_tool(read_payload(project, "sub dir/déep/file.txt"),
                                            context) or "")
    assert index_entries(project) == {str(project / "sub dir" / "AGENTS.md")}


def test_index_of_a_session_long_gone_is_pruned(project: Path) -> None:
    old = project / ".supervise" / "fastpath" / "nested" / "old-session"
    (old / "x").mkdir(parents=True)
    (old / "x" / "AGENTS.md").write_text("")
    os.utime(old, (1.0, 1.0))
    recent = old.parent / "recent-session"
    recent.mkdir()
    assert handle_post_tool(read_payload(project, "sub dir/déep/file.txt"), ctx(project))
    assert {p.name for p in old.parent.iterdir()} == {"recent-session", "sess-1"}


@pytest.mark.parametrize("raw", ["sess\x01one", "s" * 300, "sess\x1b[2Jtwo" + "x" * 300])
def test_post_tool_and_epoch_use_one_cleaned_session_id(project: Path, raw: str) -> None:
    from supervisor.session._payload import clean_session_id

    context = ctx(project, clean_session_id(raw))  # as the hook builds it from the payload
    payload = read_payload(project, "sub dir/déep/file.txt", session=raw)
    assert "SUB-RULES" in (handle_post_tool(payload, context) or "")
    assert handle_post_tool(payload, context) is None  # once per epoch
    advance_epoch(context)  # compact / clear: the ledger post-tool wrote starts over
    assert "SUB-RULES" in (handle_post_tool(payload, context) or "")


def test_claude_from_2_1_281_loads_a_nested_agents_md_itself(tmp_path: Path) -> None:
    """The post-tool injection leaves out a nested AGENTS.md that Claude Code >= 2.1.281
    loads itself on the read (no CLAUDE file from the root down to its folder); with a CLAUDE
    file on the way, or under the floor's rule, it is injected."""
    from supervisor.session._nested import nested_files

    (tmp_path / "pkg" / "deep").mkdir(parents=True)
    (tmp_path / "pkg" / "AGENTS.md").write_text("pkg rules\n")
    read = str(tmp_path / "pkg" / "deep" / "f.py")
    assert nested_files(read, str(tmp_path), "claude", rule="claude") == [str(tmp_path / "pkg" / "AGENTS.md")]
    assert nested_files(read, str(tmp_path), "claude", rule="claude-agents") == []
    (tmp_path / "CLAUDE.md").write_text("root claude\n")
    assert nested_files(read, str(tmp_path), "claude", rule="claude-agents") == [
        str(tmp_path / "pkg" / "AGENTS.md")]
