"""The session protocol end to end: the real CLI under a real fake-harness ancestor.

Every hook here runs as ``python -m supervisor hook`` three or more process levels below a
copied shell binary whose own process name is ``claude`` (or ``codex``, ``pi``), which stays
alive between hook events as a real harness does.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from fake_harness import FakeHarness, Harnesses, HookRun
from supervisor.session._nudge import NUDGE_TEXT
from supervisor.session._payload import SOURCES

CONFIG = """\
budget = 30
grace = 0.2
[[stages]]
name = "alpha"
run = ["sh", "-c", "echo ALPHA mode=$SUPERVISE_MODE source=[$SUPERVISE_SOURCE] harness=$SUPERVISE_HARNESS sid=[$SUPERVISE_SESSION_ID] state=$SUPERVISE_STATE_DIR"]
reemit = true
[[stages]]
name = "fleet"
run = ["sh", "-c", "echo FLEET-EXCLUSIVE"]
exclusive = true
[[stages]]
name = "context"
run = ["sh", "-c", "if [ -f slow ]; then sleep 30; fi; echo CONTEXT-FULL-ONLY"]
"""



@pytest.fixture
def project(git_repo: Path) -> Path:
    (git_repo / "supervise.toml").write_text(CONFIG)
    return git_repo


def payload(source: str | None, project: Path, sid: str = "s1", **extra: object) -> bytes:
    data: dict[str, object] = {"session_id": sid, "cwd": str(project),
                               "hook_event_name": "SessionStart", **extra}
    if source is not None:
        data["source"] = source
    return json.dumps(data).encode()


def hook(h: FakeHarness, project: Path, source: str | None, *args: str, sid: str = "s1",
         stdin: bytes | str | None = None, env: dict[str, str] | None = None) -> HookRun:
    run = h.run(["hook", *args], cwd=project,
                stdin=payload(source, project, sid) if stdin is None else stdin, env=env)
    assert run.returncode == 0, run.stderr
    return run


def lock(project: Path) -> dict[str, object]:
    return json.loads((project / ".supervise" / "lock.json").read_text())


def is_full(run: HookRun, mode: str = "full") -> bool:
    return (f"ALPHA mode={mode}" in run.text and "CONTEXT-FULL-ONLY" in run.text
            and "RE-EMIT" not in run.text)


def is_reemit(run: HookRun) -> bool:
    return (run.text.startswith("SESSION START (CONTEXT RE-EMIT")
            and "ALPHA mode=reemit" in run.text and "NOT repeated: fleet, context" in run.text
            and "FLEET-EXCLUSIVE" not in run.text and "CONTEXT-FULL-ONLY" not in run.text)


def is_read_only(run: HookRun) -> bool:
    return (run.text.startswith("READ-ONLY SESSION") and "ALPHA mode=read-only" in run.text
            and "FLEET-EXCLUSIVE" not in run.text and "fleet" in run.text.split("\n\n")[0])


# -- routing -----------------------------------------------------------------------------------

@pytest.mark.parametrize("source", SOURCES)
def test_every_source_routes(source: str, project: Path, harnesses: Harnesses) -> None:
    h = harnesses()
    run = hook(h, project, source)
    if source in ("resume", "reload", "fork"):
        assert run.stdout == NUDGE_TEXT.encode()
        assert not (project / ".supervise").exists(), "a nudge takes no lock and writes no state"
    else:  # startup/new: a true start; clear/compact with no proven start: full as well
        assert is_full(run), run.text
        assert f"source=[{source}]" in run.text
        assert lock(project)["pid"] == h.pid
        assert (project / ".supervise" / "complete.json").exists()


@pytest.mark.parametrize("stdin", [
    None, "inherit", b"", b"{not json", b"\xff\xfe\x00\x80junk", b'["startup"]', b'"startup"',
    b'{"source": "Startup"}', b'{"source": " startup"}', b'{"source": 5}', b'{"session_id": "s"}',
    b'{"data": {"source": "resume"}}',
], ids=["closed", "never-closed", "empty", "invalid", "binary", "array", "string", "case",
        "padded", "number", "missing", "nested"])
def test_malformed_payload_is_unrecognized_and_runs_full(stdin: bytes | str | None, project: Path,
                                                         harnesses: Harnesses) -> None:
    h = harnesses()
    run = h.run(["hook"], cwd=project, stdin=stdin)
    assert run.returncode == 0
    assert is_full(run) and "source=[]" in run.text, run.text


def test_tty_stdin_is_no_payload(project: Path) -> None:
    import pty

    master, slave = pty.openpty()
    try:
        os.write(master, b'{"source": "resume"}\n')
        proc = subprocess.run([sys.executable, "-m", "supervisor", "hook", "--take-lock"],
                              stdin=slave, capture_output=True, cwd=project, timeout=60)
    finally:
        os.close(master)
        os.close(slave)
    assert proc.returncode == 0
    assert b"ALPHA mode=full source=[]" in proc.stdout


def test_source_flag_wins(project: Path, harnesses: Harnesses) -> None:
    h = harnesses()
    assert hook(h, project, "startup", "--source", "resume").stdout == NUDGE_TEXT.encode()
    assert "source=[]" in hook(h, project, "resume", "--source=Resume").text
    cursor = json.dumps({"conversation_id": "c", "workspace_roots": [str(project)]}).encode()
    assert "source=[new]" in hook(h, project, None, "--source", "new", stdin=cursor).text


def test_claude_envelope(project: Path, harnesses: Harnesses) -> None:
    run = hook(harnesses(), project, "startup", "claude")
    doc = json.loads(run.stdout)
    text = doc["hookSpecificOutput"]["additionalContext"]
    assert "ALPHA mode=full" in text and "harness=claude" in text


# -- lock, completion, re-emit -------------------------------------------------------------------

def test_startup_then_compact_reemits(project: Path, harnesses: Harnesses) -> None:
    h = harnesses()
    assert is_full(hook(h, project, "startup"))
    nonce = lock(project)["nonce"]
    run = hook(h, project, "compact")
    assert is_reemit(run), run.text
    assert "RE-EMIT SIZE:" in run.text
    assert lock(project)["nonce"] == nonce, "a re-emit neither renews nor clears"
    assert is_reemit(hook(h, project, "clear", sid="new-id-after-clear"))


def test_compact_without_completion_runs_full(project: Path, harnesses: Harnesses) -> None:
    h = harnesses()
    hook(h, project, "startup")
    (project / ".supervise" / "complete.json").unlink()
    assert is_full(hook(h, project, "compact"))
    shutil.rmtree(project / ".supervise" / "starts")  # a later compaction, not a double fire
    assert is_reemit(hook(h, project, "compact"))


def test_clear_after_dead_owner_runs_full_and_replaces_lock(project: Path, harnesses: Harnesses) -> None:
    a = harnesses()
    hook(a, project, "startup", sid="first")
    old = lock(project)
    a.close()
    b = harnesses()
    run = hook(b, project, "clear", sid="other")
    assert is_full(run), run.text
    new = lock(project)
    assert new["pid"] == b.pid and new["nonce"] != old["nonce"]


def test_clear_of_the_same_session_in_a_new_process_reemits(project: Path, harnesses: Harnesses) -> None:
    """Compaction and clear re-emit by session, not by process (issue 12, item 7)."""
    a = harnesses()
    hook(a, project, "startup", sid="same")
    old = lock(project)
    a.close()
    b = harnesses()
    assert is_reemit(hook(b, project, "clear", sid="same"))
    assert lock(project) == old


def test_resume_nudges_and_takes_no_lock(project: Path, harnesses: Harnesses) -> None:
    h = harnesses()
    assert hook(h, project, "resume").stdout == NUDGE_TEXT.encode()
    assert not (project / ".supervise").exists()
    hook(h, project, "startup")
    before = lock(project)
    assert hook(h, project, "resume").stdout == b"", "the digest already ran in this harness"
    assert lock(project) == before


def test_a_b_completion(project: Path, harnesses: Harnesses) -> None:
    """PR #1781: A completes, B runs read-only, A exits; B's clear must run B's full start."""
    a, b = harnesses(), harnesses()
    assert is_full(hook(a, project, "startup", sid="A"))
    run = hook(b, project, "startup", sid="B")
    assert is_read_only(run), run.text
    assert f"pid {a.pid} (session A)" in run.text.split("\n\n")[0]
    assert is_read_only(hook(b, project, "compact", sid="B")), "no re-emit on A's proof"
    a.close()
    run = hook(b, project, "clear", sid="B")
    assert is_full(run), run.text
    assert lock(project)["pid"] == b.pid
    assert is_reemit(hook(b, project, "compact", sid="B"))


WIDEN_RACE = """\
import os, time
import supervisor.session._lock as lock
_read = lock.read_record
def read_record(path, model):
    record = _read(path, model)
    if os.path.basename(path) == "lock.json":  # a str or a path-like
        time.sleep(0.03)  # fault injection: widen the read-decide-write window
    return record
lock.read_record = read_record
"""


@pytest.mark.timeout(240)  # 40 real hooks at once: 23-45 s of wall on a loaded 2-core host
def test_forty_concurrent_starts_have_one_owner(project: Path, harnesses: Harnesses,
                                                tmp_path: Path) -> None:
    """Exactly one owner even when each start lingers between reading and writing the lock
    (without the flock, several would read "free" and all claim it)."""
    inject = tmp_path / "inject"
    inject.mkdir()
    (inject / "sitecustomize.py").write_text(WIDEN_RACE)
    hs = [harnesses() for _ in range(40)]
    started = [(h, h.start(["hook"], cwd=project, stdin=payload("startup", project, f"s{i}"),
                           env={"PYTHONPATH": str(inject)}))
               for i, h in enumerate(hs)]
    runs = [(h, h.wait(n)) for h, n in started]
    assert all(r.returncode == 0 for _, r in runs)
    owners = [h for h, r in runs if is_full(r)]
    readers = [r for _, r in runs if is_read_only(r)]
    assert len(owners) == 1 and len(readers) == 39
    assert lock(project)["pid"] == owners[0].pid


def test_pid_reuse_is_stale(project: Path, harnesses: Harnesses) -> None:
    h, other = harnesses(), harnesses()
    hook(h, project, "startup")
    record = lock(project)
    state = project / ".supervise"
    # Our own harness pid, another create time: not us, even though the pid is an ancestor.
    (state / "lock.json").write_text(json.dumps({**record, "create_time": record["create_time"] - 1000}))
    run = hook(h, project, "compact", sid="s2")  # (s1 itself would re-emit: its start completed)
    assert is_full(run), run.text
    assert lock(project)["create_time"] == pytest.approx(record["create_time"], abs=1)
    # A live foreign pid with another create time: stale, not a live foreign owner.
    (state / "lock.json").write_text(json.dumps({**lock(project), "pid": other.pid,
                                                 "create_time": record["create_time"] - 1000}))
    assert is_full(hook(h, project, "startup"))
    assert lock(project)["pid"] == h.pid


def test_truncated_start_writes_no_completion(project: Path, harnesses: Harnesses) -> None:
    (project / "supervise.toml").write_text(CONFIG.replace("budget = 30", "budget = 1.5"))
    (project / "slow").write_text("")
    h = harnesses()
    run = hook(h, project, "startup")
    assert "STARTUP TRUNCATED" in run.text and "CONTEXT-FULL-ONLY" not in run.text
    assert "SESSION_START_COMPLETION: not recorded" in run.text
    assert not (project / ".supervise" / "complete.json").exists()
    (project / "slow").unlink()
    assert is_full(hook(h, project, "compact"))
    assert (project / ".supervise" / "complete.json").exists()


def test_outermost_claude_and_innermost_other(project: Path, harnesses: Harnesses) -> None:
    outer = harnesses("claude", nest=3, helper_session="s1")
    hook(outer, project, "startup")
    assert lock(project)["pid"] == outer.pid and lock(project)["harness"] == "claude"
    outer.close()
    codex = harnesses("codex", inner=("pi",))
    hook(codex, project, "startup")
    rec = lock(project)
    assert rec["harness"] == "pi" and rec["pid"] != codex.pid


# -- read-only states -------------------------------------------------------------------------

def test_unwritable_state_dir_is_read_only(project: Path, harnesses: Harnesses, tmp_path: Path) -> None:
    blocker = tmp_path / "blocker"
    blocker.write_text("")
    run = hook(harnesses(), project, "startup", env={"SUPERVISE_STATE_DIR": str(blocker / "state")})
    assert is_read_only(run), run.text
    assert "cannot be created" in run.text.split("\n\n")[0]


def test_symlinked_lock_file_is_set_aside_and_replaced(project: Path, harnesses: Harnesses,
                                                      tmp_path: Path) -> None:
    target = tmp_path / "target.json"
    target.write_text("precious")
    (project / ".supervise").mkdir()
    (project / ".supervise" / "lock.json").symlink_to(target)
    run = hook(harnesses(), project, "startup")
    assert not is_read_only(run), run.text
    assert run.text.count("lock.json was a symlink; set aside as lock.json.corrupt") == 1, run.text
    assert target.read_text() == "precious"
    assert (project / ".supervise" / "lock.json.corrupt").is_symlink()


def test_deeply_nested_lock_is_replaced_not_an_internal_error(project: Path, harnesses: Harnesses) -> None:
    """Issue 11 item 3: 60,000 '[' made every hook fail with RecursionError until deleted."""
    (project / ".supervise").mkdir()
    for depth, why in ((60_000, "was larger than 16,384 bytes"), (5_000, "was not valid (RecursionError)")):
        (project / ".supervise" / "lock.json").write_text("[" * depth)
        run = hook(harnesses(), project, "startup")
        assert "internal error" not in run.text and not is_read_only(run), run.text
        assert f"lock.json {why}; set aside as lock.json.corrupt" in run.text
        again = hook(harnesses(), project, "startup")
        assert "set aside" not in again.text  # named once: the record was replaced


def test_terminal_without_exclusive_stages_says_nothing_about_locks(project: Path) -> None:
    (project / "supervise.toml").write_text(CONFIG.replace("exclusive = true", ""))
    proc = subprocess.run([sys.executable, "-m", "supervisor", "hook"], cwd=project,
                          stdin=subprocess.DEVNULL, capture_output=True, timeout=60)
    assert proc.returncode == 0
    assert proc.stdout.startswith(b"ALPHA mode=read-only") and b"lock" not in proc.stdout.lower()
    assert not (project / ".supervise" / "lock.json").exists()


def test_session_id_is_never_a_path(project: Path, harnesses: Harnesses, tmp_path: Path) -> None:
    h = harnesses()

    def files() -> set[Path]:
        return {p for p in tmp_path.rglob("*") if "harnesses" not in p.parts and ".git" not in p.parts}

    before = files()
    run = hook(h, project, "startup", sid="../../x")
    assert "sid=[../../x]" in run.text
    assert lock(project)["session_id"] == "../../x"
    added = {p.relative_to(project) for p in files() - before}
    assert all(p.parts[0] == ".supervise" for p in added), added
    assert not any(p.name == "x" for p in files())


# -- gates and scope --------------------------------------------------------------------------

def test_gate_env_is_silent(project: Path, harnesses: Harnesses) -> None:
    h = harnesses()
    for args in (["hook"], ["nudge"]):
        run = h.run(args, cwd=project, stdin=payload("startup", project), env={"NO_MISTAKES_GATE": ""})
        assert (run.returncode, run.stdout) == (0, b"")
    (project / "supervise.toml").write_text('gate_env = ["MY_GATE"]\n' + CONFIG)
    run = h.run(["hook"], cwd=project, stdin=payload("startup", project), env={"MY_GATE": "1"})
    assert (run.returncode, run.stdout) == (0, b"")
    assert not (project / ".supervise").exists()


def test_prerequisite_mode_is_the_only_non_zero_exit(project: Path, harnesses: Harnesses) -> None:
    """Bridges ask "should I run at all?": 3 = intentional stand-down, 0 = go; never prints."""
    h = harnesses()
    run = h.run(["hook", "pi", "--prerequisite"], cwd=project, stdin=b"", env={"NO_MISTAKES_GATE": "1"})
    assert (run.returncode, run.stdout) == (3, b"")
    run = h.run(["hook", "pi", "--prerequisite"], cwd=project, stdin=b"")
    assert (run.returncode, run.stdout) == (0, b"")
    assert not (project / ".supervise").exists()


def _worktree(repo: Path, where: Path) -> Path:
    subprocess.run(["git", "-C", str(repo), "worktree", "add", "-q", str(where)], check=True)
    (where / "supervise.toml").write_text(CONFIG)
    return where


def test_gate_common_dir_is_silent(git_repo: Path, tmp_path: Path, harnesses: Harnesses) -> None:
    bare = tmp_path / "gate" / ".no-mistakes" / "repos" / "proj.git"
    subprocess.run(["git", "clone", "-q", "--bare", str(git_repo), str(bare)], check=True)
    wt = _worktree(bare, tmp_path / "gate-wt")
    (wt / ".supervise-primary").write_text("")  # scope allows it: only the gate silences it
    run = hook(harnesses(), wt, "startup")
    assert run.stdout == b""
    assert not (wt / ".supervise").exists()


def test_linked_worktree_scope(project: Path, tmp_path: Path, harnesses: Harnesses) -> None:
    wt = _worktree(project, tmp_path / "wt")
    h = harnesses()
    assert hook(h, wt, "startup").stdout == b""
    assert hook(h, wt, "resume").stdout == b""
    assert not (wt / ".supervise").exists()
    (wt / ".supervise-primary").write_text("")
    assert is_full(hook(h, wt, "startup"))
    (wt / ".supervise-primary").unlink()
    (wt / "supervise.toml").write_text('scope = "any"\n' + CONFIG)
    # another session: the same start again within seconds would be a repeat (prints nothing)
    assert "ALPHA" in hook(h, wt, "startup", sid="s2").text


# -- exit codes -------------------------------------------------------------------------------

def test_internal_error_exits_zero_and_says_so(project: Path, harnesses: Harnesses, tmp_path: Path) -> None:
    inject = tmp_path / "inject"
    inject.mkdir()
    (inject / "sitecustomize.py").write_text(
        "import supervisor.session._routing as s\n"
        "def boom(*a, **k):\n    raise RuntimeError('injected fault')\n"
        "s.run_session = boom\n")
    run = hook(harnesses(), project, "startup", env={"PYTHONPATH": str(inject)})
    assert "internal error" in run.text and "injected fault" in run.text
    assert b"injected fault" in run.stderr


def test_config_error_exits_zero_and_says_so(project: Path, harnesses: Harnesses) -> None:
    (project / "supervise.toml").write_text("budget = 'soon'\n")
    run = hook(harnesses(), project, "startup")
    assert "configuration error" in run.text and "budget" in run.text


def test_bad_arguments_are_ignored(project: Path, harnesses: Harnesses) -> None:
    run = hook(harnesses(), project, "startup", "--bogus", "--source")
    assert is_full(run) and b"--bogus" in run.stderr


def test_prompt_and_post_tool_events_exit_zero(project: Path, harnesses: Harnesses) -> None:
    h = harnesses()
    assert hook(h, project, None, "--event", "prompt").stdout == b""
    hook(h, project, None, "--event", "post-tool")


def test_custom_gate_common_dirs_are_honoured(git_repo: Path, tmp_path: Path,
                                              harnesses: Harnesses) -> None:
    """`gate_common_dirs` is configurable: a project whose git common dir matches a custom
    pattern stays silent; the default pattern no longer applies once replaced."""
    bare = tmp_path / "review-farm" / "repos" / "proj.git"
    subprocess.run(["git", "clone", "-q", "--bare", str(git_repo), str(bare)], check=True)
    wt = _worktree(bare, tmp_path / "farm-wt")
    (wt / ".supervise-primary").write_text("")
    (wt / "supervise.toml").write_text('gate_common_dirs = ["*/review-farm/repos/*.git"]\n' + CONFIG)
    assert hook(harnesses(), wt, "startup").stdout == b""
    (wt / "supervise.toml").write_text(CONFIG)
    assert "ALPHA" in hook(harnesses(), wt, "startup").text
