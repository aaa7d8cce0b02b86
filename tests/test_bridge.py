"""``supervise bridge``: the JSON document, routing through the session protocol under a fake
Pi ancestor, the prerequisite exit code, placement by install/uninstall/doctor, the packaged
extension files, and the extension logic tests (``node --test tests/js``)."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from fake_harness import FakeHarness
from helpers import run_cli
from supervisor.bridges._protocol import KINDS
from supervisor._exitcodes import EXIT_STAND_DOWN
from supervisor.session._nudge import NUDGE_TEXT

ROOT = Path(__file__).resolve().parent.parent
CORE = ROOT / "supervisor" / "bridges" / "core.mjs"

CONFIG = """\
budget = 30
grace = 0.2
[[stages]]
name = "mark"
reemit = true
run = ["sh", "-c", "echo MARK-$SUPERVISE_SOURCE-$SUPERVISE_MODE-$SUPERVISE_HARNESS-[$SUPERVISE_SESSION_ID]"]
[[stages]]
name = "other"
run = ["sh", "-c", "echo OTHER-FULL-ONLY"]
"""


@pytest.fixture
def project(git_repo: Path) -> Path:
    (git_repo / "supervise.toml").write_text(CONFIG)
    return git_repo


@pytest.fixture
def pi_harness(tmp_path: Path) -> Iterator[FakeHarness]:
    h = FakeHarness(tmp_path / "harnesses", "pi")
    yield h
    h.close()


def bridge_doc(out: bytes) -> dict:
    lines = out.decode("utf-8").splitlines()
    assert len(lines) == 1, lines  # exactly one JSON document
    doc = json.loads(lines[0])
    assert doc["kind"] in KINDS and doc["protocol"] == 1
    return doc


def test_startup_under_pi_takes_the_lock_then_compact_re_emits(project: Path, pi_harness: FakeHarness) -> None:
    run = pi_harness.run(["bridge", "--harness", "pi", "--source", "startup", "--session-id", "S1",
                          "--cwd", str(project)], cwd=project)
    assert run.returncode == 0
    doc = bridge_doc(run.stdout)
    assert doc["kind"] == "ready" and doc["mode"] == "full" and doc["action"] == "digest"
    assert "MARK-startup-full-pi-[S1]" in doc["text"] and "OTHER-FULL-ONLY" in doc["text"]
    lock = json.loads((project / ".supervise" / "lock.json").read_text())
    assert lock["pid"] == pi_harness.pid and lock["harness"] == "pi"
    doc = bridge_doc(pi_harness.run(["bridge", "--harness", "pi", "--source", "compact",
                                     "--session-id", "S1"], cwd=project).stdout)
    assert doc["kind"] == "ready" and doc["mode"] == "reemit" and doc["action"] == "reemit"
    assert "MARK-compact-reemit-pi" in doc["text"] and "OTHER-FULL-ONLY" not in doc["text"]
    assert "CONTEXT RE-EMIT after compact" in doc["text"]


def test_resume_is_the_nudge_and_reload_nothing_new(project: Path, pi_harness: FakeHarness) -> None:
    doc = bridge_doc(pi_harness.run(["bridge", "--harness", "pi", "--source", "resume"], cwd=project).stdout)
    assert doc["kind"] == "ready" and doc["action"] == "nudge" and doc["mode"] == "nudge"
    assert doc["text"] == NUDGE_TEXT
    assert not (project / ".supervise" / "lock.json").exists()


def test_an_unrecognized_source_is_a_full_start(project: Path, pi_harness: FakeHarness) -> None:
    doc = bridge_doc(pi_harness.run(["bridge", "--harness", "pi", "--source", "Startup"], cwd=project).stdout)
    assert doc["source"] == "" and doc["mode"] == "full" and "MARK--full-pi" in doc["text"]


def test_a_gate_is_ineligible_with_no_text_and_no_state(project: Path) -> None:
    proc = run_cli("bridge", "--harness", "pi", "--source", "startup", cwd=project,
                   env={"NO_MISTAKES_GATE": ""})
    assert proc.returncode == 0
    doc = bridge_doc(proc.stdout)
    assert doc["kind"] == "ineligible" and doc["text"] == "" and "NO_MISTAKES_GATE" in doc["error"]
    assert not (project / ".supervise").exists()


def test_prerequisite_exits_3_to_stand_down_and_0_to_go_on(project: Path) -> None:
    gated = run_cli("bridge", "--harness", "pi", "--prerequisite", cwd=project, env={"NO_MISTAKES_GATE": "1"})
    assert (gated.returncode, gated.stdout) == (EXIT_STAND_DOWN, b"")
    fine = run_cli("bridge", "--harness", "pi", "--prerequisite", cwd=project)
    assert (fine.returncode, fine.stdout) == (0, b"")


def test_a_linked_worktree_is_out_of_scope(project: Path, tmp_path: Path) -> None:
    subprocess.run(["git", "-C", str(project), "add", "."], check=True)
    subprocess.run(["git", "-C", str(project), "commit", "-qm", "c", "--allow-empty"], check=True)
    worktree = tmp_path / "wt"
    subprocess.run(["git", "-C", str(project), "worktree", "add", "-q", str(worktree)], check=True)
    doc = bridge_doc(run_cli("bridge", "--harness", "opencode", "--source", "startup", cwd=worktree).stdout)
    assert doc["kind"] == "ineligible" and ".supervise-primary" in doc["error"]
    assert run_cli("bridge", "--harness", "pi", "--prerequisite", cwd=worktree).returncode == EXIT_STAND_DOWN


def test_a_config_error_is_failed_exit_0(project: Path) -> None:
    (project / "supervise.toml").write_text("budget = 'soon'\n")
    proc = run_cli("bridge", "--harness", "pi", "--source", "startup", cwd=project)
    assert proc.returncode == 0
    doc = bridge_doc(proc.stdout)
    assert doc["kind"] == "failed" and doc["text"] == "" and "budget" in doc["error"]


@pytest.mark.parametrize("argv", [[], ["--harness"], ["--harness", "pi", "--what"]])
def test_bad_usage_is_a_failed_document_exit_0(project: Path, argv: list[str]) -> None:
    proc = run_cli("bridge", *argv, cwd=project)
    assert proc.returncode == 0
    assert bridge_doc(proc.stdout)["kind"] == "failed"


def test_a_missing_cwd_is_failed(project: Path, tmp_path: Path) -> None:
    doc = bridge_doc(run_cli("bridge", "--harness", "pi", "--cwd", str(tmp_path / "nope"), cwd=project).stdout)
    assert doc["kind"] == "failed" and "not a directory" in doc["error"]


def test_sigterm_is_cancelled(project: Path) -> None:
    (project / "supervise.toml").write_text(
        'budget = 30\ngrace = 0.2\n[[stages]]\nname = "hang"\nrun = ["sh", "-c", "echo started; exec sleep 60"]\n')
    from helpers import supervise_cmd

    proc = subprocess.Popen(supervise_cmd("bridge", "--harness", "pi", "--source", "startup"), cwd=project,
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, stdin=subprocess.DEVNULL)
    try:
        status = project / ".supervise" / "last-digest.json"
        import psutil

        me = psutil.Process(proc.pid)
        polls = 2000  # wait (bounded) until the stage's sleep runs, then signal the bridge
        while polls and not any(c.name() == "sleep" for c in me.children(recursive=True)):
            polls -= 1
            psutil.wait_procs([], timeout=0.01)
        assert polls, "the stage never started"
        proc.terminate()
        out, _ = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    doc = bridge_doc(out)
    assert doc["kind"] == "cancelled" and "started" in doc["text"]
    assert not status.exists() or json.loads(status.read_text())["complete"] is False


def test_the_nudge_line_has_one_home() -> None:
    """The nudge sentence is written once, in the packaged ``supervisor/nudge.txt``, which
    the Python side reads and the extension bridge reads beside the package (or from the
    ``watchkeeper.json`` install writes from it). Before, ``_nudge.py``, ``_protocol.py``
    and ``core.mjs`` each held a copy, kept equal by a test."""
    sentence = "exactly once, before executing"
    holders = sorted(p.relative_to(ROOT).as_posix()
                     for folder in ("supervisor", "stages", "plugins", "bin")
                     for p in (ROOT / folder).rglob("*") if p.is_file()
                     and "__pycache__" not in p.parts and sentence in p.read_text("utf-8", "replace"))
    assert holders == ["supervisor/nudge.txt"]
    assert NUDGE_TEXT == (ROOT / "supervisor" / "nudge.txt").read_text("utf-8")


def test_a_placed_bridge_carries_the_nudge_line(project: Path) -> None:
    """A placed ``core.mjs`` has no package beside it: install writes the nudge line into its
    ``watchkeeper.json`` (what a failed generation delivers there)."""
    assert run_cli("install", "pi", cwd=project).returncode == 0
    settings = json.loads((project / ".pi" / "extensions" / "watchkeeper" / "watchkeeper.json")
                          .read_text("utf-8"))
    assert settings["nudge"] + "\n" == NUDGE_TEXT


# ---------------------------------------------------------------- placement


def test_install_places_pi_and_opencode_without_path_and_uninstall_removes_them(project: Path) -> None:
    proc = run_cli("install", "pi", "opencode", cwd=project)
    assert proc.returncode == 0, proc.stderr
    pi_entry = project / ".pi" / "extensions" / "watchkeeper" / "index.ts"
    oc_entry = project / ".opencode" / "plugins" / "watchkeeper.ts"
    for entry, folder in ((pi_entry, pi_entry.parent), (oc_entry, oc_entry.parent / "watchkeeper")):
        assert "watchkeeper-bridge" in entry.read_text()
        assert (folder / "core.mjs").read_text() == CORE.read_text()
        settings = json.loads((folder / "watchkeeper.json").read_text())
        assert os.path.isabs(settings["python"]) and settings["budget"] == 30
    again = run_cli("install", "pi", "opencode", cwd=project)
    assert b"unchanged" in again.stdout
    doctor = run_cli("doctor", "pi", "opencode", cwd=project)
    assert doctor.returncode == 0, doctor.stdout.decode()
    assert b"bridge command works without PATH" in doctor.stdout
    gone = run_cli("uninstall", "pi", "opencode", cwd=project)
    assert gone.returncode == 0, gone.stderr
    assert not (project / ".pi").exists() and not (project / ".opencode").exists()


def test_doctor_fails_on_a_missing_interpreter_and_a_missing_bridge(project: Path) -> None:
    assert run_cli("install", "pi", cwd=project).returncode == 0
    settings = project / ".pi" / "extensions" / "watchkeeper" / "watchkeeper.json"
    settings.write_text(json.dumps({"python": "python3", "budget": 30}))
    doctor = run_cli("doctor", "pi", "opencode", cwd=project)
    assert doctor.returncode == 1
    out = doctor.stdout.decode()
    assert "not an absolute path" in out and "no watchkeeper bridge found for OpenCode" in out


def test_install_leaves_a_foreign_entry_alone(project: Path) -> None:
    entry = project / ".opencode" / "plugins" / "watchkeeper.ts"
    entry.parent.mkdir(parents=True)
    entry.write_text("export const Mine = async () => ({})\n")
    proc = run_cli("install", "opencode", cwd=project)
    assert proc.returncode == 1 and b"not watchkeeper's" in proc.stderr
    assert entry.read_text() == "export const Mine = async () => ({})\n"
    assert b"not watchkeeper's" in run_cli("uninstall", "opencode", cwd=project).stdout
    assert entry.exists()


def test_user_scope_follows_the_harness_config_dirs(project: Path, tmp_path: Path) -> None:
    agent, xdg = tmp_path / "agent", tmp_path / "xdg"
    env = {"PI_CODING_AGENT_DIR": str(agent), "XDG_CONFIG_HOME": str(xdg)}
    assert run_cli("install", "pi", "opencode", "--scope", "user", cwd=project, env=env).returncode == 0
    assert (agent / "extensions" / "watchkeeper" / "index.ts").is_file()
    assert (xdg / "opencode" / "plugins" / "watchkeeper.ts").is_file()
    assert (xdg / "opencode" / "plugins" / "watchkeeper" / "watchkeeper.json").is_file()
    assert run_cli("uninstall", "pi", "opencode", "--scope", "user", cwd=project, env=env).returncode == 0
    assert not (agent / "extensions" / "watchkeeper").exists()
    assert not (xdg / "opencode" / "plugins" / "watchkeeper.ts").exists()


# ---------------------------------------------------------------- the extension logic (node)


def test_extension_logic_under_node() -> None:
    node = shutil.which("node")
    if node is None:
        pytest.skip("node is not installed: the extension logic tests (tests/js) need node >= 18")
    proc = subprocess.run([node, "--test", str(ROOT / "tests" / "js")], capture_output=True, text=True,
                          timeout=120, stdin=subprocess.DEVNULL, cwd=ROOT)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
    assert re.search(r"^# fail 0$", proc.stdout, re.M) and re.search(r"^# pass [1-9]", proc.stdout, re.M)


def test_resume_after_a_start_in_this_process_is_empty(project: Path, pi_harness: FakeHarness) -> None:
    """The `empty` kind: the digest already ran under this Pi process, so the resume nudge is
    silent and the extension delivers nothing."""
    start = bridge_doc(pi_harness.run(["bridge", "--harness", "pi", "--source", "startup",
                                       "--session-id", "S1"], cwd=project).stdout)
    assert start["kind"] == "ready"
    doc = bridge_doc(pi_harness.run(["bridge", "--harness", "pi", "--source", "resume",
                                     "--session-id", "S1"], cwd=project).stdout)
    assert doc["kind"] == "empty" and doc["text"] == "" and doc["action"] == "nudge"


def test_pi_read_gets_the_nested_agents_md_once_per_epoch(git_repo: Path, pi_harness: FakeHarness) -> None:
    """Seed 003 for Pi: the extension's `tool_result` handler (node) asks the Python side for
    the nested AGENTS.md of a file Pi read; once per session, again after a compaction."""
    import shutil as _shutil

    node = _shutil.which("node")
    if node is None:
        pytest.skip("node is not installed")
    (git_repo / "pkg" / "deep").mkdir(parents=True)
    (git_repo / "pkg" / "AGENTS.md").write_text("PI-NESTED rules: tabs\n")
    (git_repo / "pkg" / "deep" / "f.txt").write_text("data\n")
    (git_repo / "supervise.toml").write_text(CONFIG)
    core = Path(__file__).resolve().parent.parent / "supervisor" / "bridges" / "core.mjs"
    script = (f"import {{ nestedForRead }} from {json.dumps(core.as_uri())};\n"
              f"const s = {{ python: {json.dumps(sys.executable)} }};\n"
              f"const a = {{ path: {json.dumps(str(git_repo / 'pkg' / 'deep' / 'f.txt'))}, "
              f"cwd: {json.dumps(str(git_repo))}, sessionId: 'P1' }};\n"
              "process.stdout.write(JSON.stringify([await nestedForRead(s, a), await nestedForRead(s, a)]));\n")

    def reads() -> list[str]:
        proc = subprocess.run([node, "--input-type=module", "-e", script], capture_output=True,
                              cwd=git_repo, timeout=60)
        assert proc.returncode == 0, proc.stderr.decode()
        return list(json.loads(proc.stdout))

    first, second = reads()
    assert "PI-NESTED rules" in first and second == ""
    doc = bridge_doc(pi_harness.run(["bridge", "--harness", "pi", "--source", "compact",
                                     "--session-id", "P1"], cwd=git_repo).stdout)
    assert doc["kind"] in ("ready", "empty")
    first, _ = reads()
    assert "PI-NESTED rules" in first  # the compaction re-armed it


def test_a_planted_nested_ledger_is_dropped_at_a_bridge_startup(git_repo: Path,
                                                                 pi_harness: FakeHarness) -> None:
    """Issue 11's kind (planted files) for Pi and OpenCode: a nested ledger planted in a
    clone's ``.supervise/`` saying the subtree's AGENTS.md was injected made the first read
    skip it. The bridge's startup drops it, as the hook's does, and the read injects."""
    from supervisor._hashing import sha256

    (git_repo / "pkg").mkdir()
    rules = git_repo / "pkg" / "AGENTS.md"
    rules.write_text("PI-NESTED rules: tabs\n")
    (git_repo / "supervise.toml").write_text(CONFIG)
    ledgers = git_repo / ".supervise" / "nested"
    ledgers.mkdir(parents=True)
    (ledgers / f"{sha256(b'P1').hexdigest()[:32]}.json").write_text(json.dumps(
        {"version": 1, "epoch": 0, "injected": {str(rules): 0}, "retry_at": {}}))
    doc = bridge_doc(pi_harness.run(["bridge", "--harness", "pi", "--source", "startup",
                                     "--session-id", "P1"], cwd=git_repo).stdout)
    assert doc["kind"] in ("ready", "empty"), doc
    payload = json.dumps({"hook_event_name": "PostToolUse", "tool_name": "Read",
                          "session_id": "P1", "cwd": str(git_repo),
                          "tool_input": {"file_path": str(git_repo / "pkg" / "f.txt")}})
    env = {k: v for k, v in os.environ.items() if not k.startswith(("GIT_", "SUPERVISE_"))}
    proc = subprocess.run([sys.executable, "-m", "supervisor", "hook", "pi", "--event",
                           "post-tool"], input=payload.encode(), capture_output=True,
                          cwd=git_repo, env=env, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert b"PI-NESTED rules" in proc.stdout, (proc.stdout, proc.stderr)
