"""Cline CLI (``cline "PROMPT"``, the harness table's pin), offline against the fake model.

Facts used (``docs/harnesses/cline.md``): ``cline auth -p openai -b URL`` configures an
OpenAI-compatible provider, no login; ``TaskStart``'s output is dropped, so it arms the start and
the first ``PreToolUse`` (the fake model's ``FAKE_BASH`` answer is one ``run_commands`` call)
delivers it, once. Hooks run in Cline's hub daemon, which outlives the command: the test ends
the daemon it started, by pid (the processes carrying this test's token whose command line is
``--cline-hub-daemon``).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import psutil
import pytest

from conftest import FakeModel, Project, clean_env, harness_bin, matrix_toml, run_harness, tally

pytestmark = pytest.mark.e2e


def stop_hub(token: str) -> None:
    """End the hub daemon(s) this test started: processes carrying our token whose command
    line is Cline's ``--cline-hub-daemon``, each by its pid (TERM, then KILL after 10 s)."""
    for proc in psutil.process_iter(["pid"]):
        try:
            if "--cline-hub-daemon" in proc.cmdline() and \
                    proc.environ().get("WATCHKEEPER_TEST_TOKEN") == token:
                proc.terminate()
                try:
                    proc.wait(10)
                except psutil.TimeoutExpired:
                    proc.kill()
                    proc.wait(10)
        except (psutil.Error, OSError):
            continue


def installed(project: Project, fake_model: FakeModel) -> tuple[Path, dict[str, str]]:
    """The matrix digest installed for Cline, its provider pointed at the fake model: the
    CLI and the environment to run it in."""
    cline = harness_bin("cline")
    project.configure(matrix_toml(project.mark))
    project.install("cline")
    env = clean_env()
    auth = run_harness([cline, "auth", "-p", "openai", "-k", "dummy", "-m", "fake-model",
                        "-b", f"{fake_model.url}/v1"], project.path, env)
    assert auth.returncode == 0, auth.stderr[-2000:]
    return cline, env


def test_the_digest_arrives_with_the_first_tool_call_once(project: Project, fake_model: FakeModel,
                                                          no_leaked_processes: str) -> None:
    """TaskStart's output never reaches the model (the old code printed the digest there):
    the first request holds nothing of ours, the request after the first tool call holds
    the digest once (in PreToolUse's ``hook_context``), and no arm is left."""
    cline, env = installed(project, fake_model)
    try:
        proc = run_harness([cline, "turn 1 FAKE_BASH echo hi"], project.path, env)
        assert proc.returncode == 0, proc.stdout[-1000:] + proc.stderr[-2000:]
    finally:
        stop_hub(no_leaked_processes)
    requests = [r for r in fake_model.requests() if r["path"].endswith("/chat/completions")]
    assert len(requests) >= 2, "the fake model's tool call did not run"
    first, after_tool = json.dumps(requests[0]["body"]), json.dumps(requests[1]["body"])
    assert project.mark not in first, "TaskStart's output is dropped: nothing before the tool"
    counts = tally(after_tool, project.mark)
    assert counts["full"] == 1 and counts["nudge"] == 0, counts
    assert "PreToolUse" in after_tool
    assert not os.path.exists(project.path / ".supervise" / "fastpath" / "wake-armed")


def test_a_resumed_task_gets_no_second_digest(project: Project,
                                                           fake_model: FakeModel,
                                                           no_leaked_processes: str) -> None:
    """``cline --id SESSION`` (interactive, on a pseudo-terminal; LAB 3.0.65) restores the
    earlier turns, the digest the first PreToolUse gave them included, and fires TaskStart
    (not TaskResume) for a new task of the same ``rootSessionId`` in the hub daemon. The
    request after the resumed task's first tool call holds the digest once (the restored
    one); the old code keyed the session by the task and ran a second full digest there."""
    from conftest import tui_session

    cline, env = installed(project, fake_model)
    try:
        # a first task leaves Cline's hub daemon running: the next task's hooks, and the
        # resumed one's, run in that one process (LAB: where the old code gave the resumed
        # task a second full digest)
        for prompt in ("warm up", "turn 1 FAKE_BASH echo hi"):
            proc = run_harness([cline, prompt], project.path, env)
            assert proc.returncode == 0, proc.stdout[-1000:] + proc.stderr[-2000:]
        listed = run_harness([cline, "history", "--json"], project.path, env)
        assert listed.returncode == 0, listed.stderr[-2000:]
        [session] = [s["sessionId"] for s in json.loads(listed.stdout)  # (its prompt is
                     if s["metadata"]["title"] == "turn 1 FAKE_BASH echo hi"]  # wrapped there)
        since = fake_model.count()
        tui_session([cline, "--id", session], project.path, env, fake_model,
                    ["turn 2 FAKE_BASH echo again"], ready=b"Ask anything")
    finally:
        stop_hub(no_leaked_processes)
    resumed = [json.dumps(r["body"]) for r in fake_model.requests()[since:]
               if r["path"].endswith("/chat/completions")]
    assert len(resumed) >= 2, "the resumed task's tool call did not run"
    assert "turn 1" in resumed[0], "the premise: the earlier turns are restored"
    assert tally(resumed[0], project.mark)["full"] == 1, "the restored digest"
    counts = tally(resumed[1], project.mark)
    # the restored digest alone: a resume, silent since that daemon ran the digest itself
    # (another process would add the one-line nudge); the old code ran it again (full 2)
    assert counts == {"full": 1, "reemit": 0, "reemit_mark": 0, "nudge": 0}, counts
