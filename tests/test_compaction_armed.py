"""Compaction where no SessionStart follows (issue 24): the arm (``supervisor.session._armed``)
and the prompt hook that delivers it once.

- Copilot CLI ``PreCompact`` arms a re-emit (no SessionStart follows a compaction there); the
  next ``UserPromptSubmit`` of the same process delivers it once, and the one after it nothing.
- Claude's ``PreCompact`` hands the summariser the names of the re-emitted stages.

Every hook runs as the real CLI below a fake harness process named like the harness.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from fake_harness import FakeHarness, Harnesses, HookRun
from supervisor.session import _armed
from supervisor.state._delivery import Delivery

CONFIG = """\
budget = 30
grace = 0.2
[[stages]]
name = "alpha"
title = "Alpha notes"
run = ["sh", "-c", "echo ALPHA mode=$SUPERVISE_MODE source=[$SUPERVISE_SOURCE]"]
reemit = true
[[stages]]
name = "context"
run = ["sh", "-c", "echo CONTEXT-FULL-ONLY"]
"""


@pytest.fixture
def project(git_repo: Path) -> Path:
    (git_repo / "supervise.toml").write_text(CONFIG)
    return git_repo


def run(h: FakeHarness, project: Path, harness: str, *args: str, sid: str = "s1",
        source: str | None = "startup", event: str = "SessionStart") -> HookRun:
    data: dict[str, object] = {"session_id": sid, "cwd": str(project), "hook_event_name": event}
    if source is not None:
        data["source"] = source
    result = h.run(["hook", harness, *args], cwd=project, stdin=json.dumps(data).encode())
    assert result.returncode == 0, result.stderr
    return result


def context(result: HookRun, harness: str) -> str:
    """The model-facing text of one hook's stdout in ``harness``'s envelope ("" for none)."""
    if not result.stdout.strip():
        return ""
    obj = json.loads(result.stdout)
    if harness == "copilot":
        return str(obj["additionalContext"])
    if harness == "cline":
        return str(obj["contextModification"])
    return str(obj["hookSpecificOutput"]["additionalContext"])


def wake(project: Path) -> Path:
    return project / ".supervise" / "fastpath" / "wake-armed"


def test_pre_compact_arms_a_reemit_the_next_prompt_delivers_once(
        project: Path, harnesses: Harnesses) -> None:
    harness = "copilot"
    h = harnesses(harness)
    assert "CONTEXT-FULL-ONLY" in context(run(h, project, harness, source="new"), harness)
    armed = run(h, project, harness, "--event", "pre-compact", source=None, event="PreCompact")
    assert armed.stdout == b"", "the harness drops this event's output: nothing is printed"
    assert wake(project).exists(), "the fast path must run Python for the next prompt"
    text = context(run(h, project, harness, "--event", "prompt", source=None), harness)
    assert text.startswith("SESSION START (CONTEXT RE-EMIT after compact)"), text
    assert "ALPHA mode=reemit source=[compact]" in text and "CONTEXT-FULL-ONLY" not in text
    assert run(h, project, harness, "--event", "prompt", source=None).stdout == b"", \
        "the re-emit is delivered once"
    assert not wake(project).exists(), "no arm is left: the fast path may answer again"


def test_an_arm_is_per_session(project: Path, harnesses: Harnesses) -> None:
    h = harnesses("copilot")
    run(h, project, "copilot", source="startup", sid="A")
    run(h, project, "copilot", source="startup", sid="B")
    run(h, project, "copilot", "--event", "pre-compact", source=None, sid="A")
    assert run(h, project, "copilot", "--event", "prompt", source=None, sid="B").stdout == b""
    assert "RE-EMIT" in context(run(h, project, "copilot", "--event", "prompt", source=None,
                                    sid="A"), "copilot")


def test_an_unproven_session_gets_the_full_digest_at_the_armed_prompt(
        project: Path, harnesses: Harnesses) -> None:
    h = harnesses("copilot")
    run(h, project, "copilot", "--event", "pre-compact", source=None, sid="never-started")
    text = context(run(h, project, "copilot", "--event", "prompt", source=None,
                       sid="never-started"), "copilot")
    assert "CONTEXT-FULL-ONLY" in text and "RE-EMIT" not in text


def test_a_session_start_delivered_directly_drops_the_arm(project: Path,
                                                           harnesses: Harnesses) -> None:
    """Compact, then a new process resumes (Copilot): one re-emit from SessionStart, none
    more at the next prompt."""
    first = harnesses("copilot")
    run(first, project, "copilot", source="new")
    run(first, project, "copilot", "--event", "pre-compact", source=None)
    first.close()
    second = harnesses("copilot")
    text = context(run(second, project, "copilot", source="resume"), "copilot")
    assert text.startswith("SESSION START (CONTEXT RE-EMIT after resume)"), text
    assert run(second, project, "copilot", "--event", "prompt", source=None).stdout == b""
    assert not wake(project).exists(), "the delivered start dropped the arm"


def test_claude_pre_compact_names_the_reemitted_stages_for_the_summary(
        project: Path, harnesses: Harnesses) -> None:
    h = harnesses("claude")
    note = run(h, project, "claude", "--event", "pre-compact", source=None).text
    assert note.startswith("watchkeeper: right after this compaction"), note
    assert "Alpha notes" in note and "context" not in note.split(":", 2)[2].split(".")[0]
    assert "keep everything else" in note
    assert not wake(project).exists(), "Claude fires SessionStart(compact): nothing armed"


def test_claude_pre_compact_says_nothing_when_no_stage_is_reemitted(
        project: Path, harnesses: Harnesses) -> None:
    (project / "supervise.toml").write_text(CONFIG.replace("reemit = true\n", ""))
    h = harnesses("claude")
    assert run(h, project, "claude", "--event", "pre-compact", source=None).stdout == b""


def test_take_commits_only_with_the_delivery(tmp_path: Path) -> None:
    state = tmp_path / ".supervise"
    state.mkdir()
    assert _armed.arm(state, "copilot", "s", "compact")
    failed = Delivery(state)
    assert _armed.take(state, "copilot", "s", failed) == "compact"
    failed.settle(False)  # the envelope did not go out: the arm stays
    delivered = Delivery(state)
    assert _armed.take(state, "copilot", "s", delivered) == "compact"
    delivered.settle(True)
    assert _armed.take(state, "copilot", "s", Delivery(state)) is None
    assert not (state / "fastpath" / "wake-armed").exists()


def test_an_arm_dated_in_the_future_or_planted_is_dropped(tmp_path: Path) -> None:
    state = tmp_path / ".supervise"
    state.mkdir()
    assert _armed.arm(state, "copilot", "s", "compact")
    (record,) = (state / "armed").iterdir()
    data = json.loads(record.read_text())
    record.write_text(json.dumps({**data, "at": data["at"] + 3600}))
    assert _armed.take(state, "copilot", "s", Delivery(state)) is None
    assert not record.exists()
    assert _armed.arm(state, "copilot", "s", "compact")
    (record,) = (state / "armed").iterdir()
    record.write_text(json.dumps({**data, "source": "rm -rf"}))
    assert _armed.take(state, "copilot", "s", Delivery(state)) is None
    assert not _armed.arm(state, "copilot", "", "compact"), "no session id: nothing armed"


def test_an_arm_is_delivered_only_by_the_harness_process_that_armed_it(
        project: Path, harnesses: Harnesses) -> None:
    """A new process of the session gets its context from its own SessionStart (Copilot runs
    it concurrently with the first prompt hook): the prompt hook never adds a second copy."""
    first = harnesses("copilot")
    run(first, project, "copilot", source="new")
    run(first, project, "copilot", "--event", "pre-compact", source=None)
    first.close()
    second = harnesses("copilot")
    assert run(second, project, "copilot", "--event", "prompt", source=None).stdout == b""


def test_a_resume_after_a_stored_reemit_adds_no_second_one(project: Path,
                                                          harnesses: Harnesses) -> None:
    """Copilot stores a prompt hook's context with the prompt: once the re-emit went out at
    UserPromptSubmit, a resumed process already holds it and its SessionStart prints nothing
    (the old code re-emitted again: two re-emits in one request, LAB 1.0.102 --acp then
    --resume). A later compaction drops it again: the next resume re-emits once more."""
    first = harnesses("copilot")
    run(first, project, "copilot", source="new")
    run(first, project, "copilot", "--event", "pre-compact", source=None)
    assert "RE-EMIT" in context(run(first, project, "copilot", "--event", "prompt",
                                    source=None), "copilot")
    first.close()
    second = harnesses("copilot")
    assert run(second, project, "copilot", source="resume").stdout == b""
    run(second, project, "copilot", "--event", "pre-compact", source=None)  # drops what it held
    second.close()
    third = harnesses("copilot")
    assert context(run(third, project, "copilot", source="resume"), "copilot").startswith(
        "SESSION START (CONTEXT RE-EMIT after resume)")


def test_cline_task_start_arms_and_the_first_tool_hook_delivers(project: Path,
                                                                  harnesses: Harnesses) -> None:
    """Cline drops TaskStart's output (LAB 3.0.65): it arms the start, prints nothing, and
    the task's first PreToolUse delivers the full digest once (the old code printed the
    digest where Cline drops it, and the model never had it)."""
    h = harnesses("cline")
    payload = {"taskId": "conv_1", "workspaceRoots": [str(project)], "hookName": "agent_start"}
    started = h.run(["hook", "cline"], cwd=project, stdin=json.dumps(payload).encode())
    assert started.returncode == 0 and started.stdout == b"", started.stderr
    tool = {**payload, "hookName": "tool_call", "preToolUse": {"toolName": "run_commands"}}
    first = h.run(["hook", "cline", "--event", "prompt"], cwd=project,
                  stdin=json.dumps(tool).encode())
    text = context(first, "cline")
    assert "CONTEXT-FULL-ONLY" in text and "ALPHA mode=full source=[startup]" in text, first.stderr
    second = h.run(["hook", "cline", "--event", "prompt"], cwd=project,
                   stdin=json.dumps(tool).encode())
    assert second.stdout == b"", "the digest is delivered once per task"


def test_cline_resumed_task_starts_as_a_resume_not_a_second_digest(project: Path,
                                                                    harnesses: Harnesses) -> None:
    """``cline --id SESSION`` (LAB 3.0.65) fires TaskStart, not TaskResume, for a new task id
    under the same ``sessionContext.rootSessionId``, with the earlier turns (and the digest
    the first PreToolUse gave them) restored: that start is a resume (the nudge), not a
    second full digest (the old code keyed the session by the task id and ran it again)."""
    first, daemon = harnesses("cline"), harnesses("cline")  # LAB: the resume's hooks ran in
    # the hub daemon, the first task's in the `cline` command
    base = {"workspaceRoots": [str(project)], "sessionContext": {"rootSessionId": "1796_q2"}}
    for h, task, expect in ((first, "conv_1", "CONTEXT-FULL-ONLY"),
                            (daemon, "conv_2", "SUPERVISE_OP: v1")):
        start = {**base, "taskId": task, "hookName": "agent_start"}
        assert h.run(["hook", "cline"], cwd=project,
                     stdin=json.dumps(start).encode()).stdout == b""
        tool = {**base, "taskId": task, "hookName": "tool_call"}
        text = context(h.run(["hook", "cline", "--event", "prompt"], cwd=project,
                             stdin=json.dumps(tool).encode()), "cline")
        assert expect in text, (task, text)
        if task == "conv_2":
            assert "CONTEXT-FULL-ONLY" not in text and "ALPHA" not in text, text
