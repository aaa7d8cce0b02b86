"""Pi 0.73.1 with the watchkeeper extension (``supervise install pi``) against the fake model
server (OpenAI chat completions).

Facts used (brief, harnesses.md section 4): a project extension in ``.pi/extensions/*/index.ts``
loads in ``-p`` and RPC modes without a prompt; the ``before_agent_start`` message is sent as an
extra user message and stored in the session; ``pi -c`` reports ``session_start`` reason
``startup``; RPC ``{"type": "compact"}`` fires ``session_compact``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import (RUN_TIMEOUT, FakeModel, Project, clean_env, harness_bin, marker_toml, matrix_toml,
                      run_harness, tally)

pytestmark = pytest.mark.e2e

NUDGE = "SUPERVISE_OP: v1 session-start"
TRUNCATED = "SESSION-START DELIVERY TRUNCATED"


@pytest.fixture
def pi_env(project: Project, fake_model: FakeModel, tmp_path: Path) -> dict[str, str]:
    harness_bin("pi")
    agent = tmp_path / "pi-agent"
    agent.mkdir()
    (agent / "models.json").write_text(json.dumps({"providers": {"fake": {
        "baseUrl": f"{fake_model.url}/v1", "api": "openai-completions", "apiKey": "dummy",
        "compat": {"supportsDeveloperRole": False, "supportsReasoningEffort": False},
        "models": [{"id": "fake-model", "contextWindow": 32000, "maxTokens": 4096}]}}}))
    project.install("pi")
    return clean_env(PI_CODING_AGENT_DIR=str(agent), PI_OFFLINE="1", PI_SKIP_VERSION_CHECK="1",
                     PI_TELEMETRY="0")


def pi(project: Project, env: dict[str, str], *args: str) -> str:
    proc = run_harness([harness_bin("pi"), "--provider", "fake", "--model", "fake-model", *args],
                       project.path, env)
    assert proc.returncode == 0, f"pi {args} failed: {proc.stderr[-2000:]}"
    return proc.stdout


class Rpc:
    """``pi --mode rpc``: send one command, read events until the one that ends it."""

    def __init__(self, project: Project, env: dict[str, str], *args: str) -> None:
        self.proc = subprocess.Popen([str(harness_bin("pi")), "--provider", "fake", "--model", "fake-model",
                                      "--mode", "rpc", *args], cwd=project.path, env=env, text=True,
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)

    def send(self, command: dict, until: str) -> None:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write(json.dumps(command) + "\n")
        self.proc.stdin.flush()
        for line in self.proc.stdout:
            try:
                event = json.loads(line)
            except ValueError:
                continue
            if event.get("type") == until or (event.get("type") == "response" and event.get("id") == command["id"]
                                              and event.get("success") is False):
                assert event.get("success", True), event
                return
        raise AssertionError(f"pi rpc ended before {until!r}")

    def close(self) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.close()
        try:
            self.proc.wait(timeout=RUN_TIMEOUT)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        if self.proc.stdout:
            self.proc.stdout.close()


def test_startup_digest_reaches_the_model_once(project: Project, fake_model: FakeModel, pi_env: dict[str, str]) -> None:
    pi(project, pi_env, "-p", "turn 1")
    bodies = fake_model.bodies()
    assert sum(b.count(f"{project.mark}-startup-full") for b in bodies) == 1


def test_resumed_session_is_routed_as_resume(project: Project, fake_model: FakeModel, pi_env: dict[str, str]) -> None:
    pi(project, pi_env, "-p", "turn 1")
    since = fake_model.count()
    pi(project, pi_env, "-c", "-p", "turn 2")
    assert not fake_model.seen(NUDGE, since)  # the stored digest is there: no nudge...
    assert not fake_model.seen(f"{project.mark}-resume-", since)  # ...and no digest runs for it
    assert fake_model.seen(f"{project.mark}-startup-full", since)  # the stored start is still there


def test_re_emit_after_rpc_compact_reaches_the_next_request_once(project: Project, fake_model: FakeModel,
                                                                 pi_env: dict[str, str]) -> None:
    keep_recent(pi_env, 1)  # the compaction drops the startup digest (kept: see the matrix)
    rpc = Rpc(project, pi_env)
    try:
        rpc.send({"id": "1", "type": "prompt", "message": "turn 1"}, until="agent_end")
        assert fake_model.seen(f"{project.mark}-startup-full")
        rpc.send({"id": "1b", "type": "prompt", "message": "turn 2"}, until="agent_end")
        rpc.send({"id": "2", "type": "compact"}, until="compaction_end")
        since = fake_model.count()
        rpc.send({"id": "3", "type": "prompt", "message": "after compact"}, until="agent_end")
        rpc.send({"id": "4", "type": "prompt", "message": "later"}, until="agent_end")
    finally:
        rpc.close()
    first, *later = fake_model.bodies(since)
    assert first.count(f"{project.mark}-compact-reemit") == 1
    assert first.count("CONTEXT RE-EMIT after compact") == 1
    assert all(b.count("CONTEXT RE-EMIT after compact") == 1 for b in later)  # stored once, not re-sent
    assert f"{project.mark}-startup-" not in first


def test_a_digest_over_512_KiB_arrives_cut_on_a_character_boundary(project: Project, fake_model: FakeModel,
                                                                   pi_env: dict[str, str]) -> None:
    # one ASCII byte, then 700,000 bytes of 2-byte characters: a cut at 512 KiB splits one
    project.configure(f"""\
        budget = 20
        grace = 0.5
        max_output = 4000000

        [[stages]]
        name = "mark"
        run = ["sh", "-c", "echo {project.mark}-$SUPERVISE_SOURCE-$SUPERVISE_MODE"]

        [[stages]]
        name = "big"
        max_output = 2000000
        run = ["python3", "-c", "import sys; sys.stdout.write('x' + chr(233) * 350000)"]
        """)
    pi(project, pi_env, "-p", "turn 1")
    body = next(b for b in fake_model.bodies() if TRUNCATED in b)
    assert body.count(TRUNCATED) == 1
    assert "\ufffd" not in body and "\\ufffd" not in body
    text = json.loads(body)  # the request as sent: find the message carrying the digest
    content = next(m["content"] for m in text["messages"] if TRUNCATED in json.dumps(m, ensure_ascii=False))
    if isinstance(content, list):
        content = "".join(part.get("text", "") for part in content)
    kept = content[:content.index("\n\nSESSION-START DELIVERY TRUNCATED")]
    assert project.mark in kept
    assert len(kept.encode("utf-8")) <= 512 * 1024
    assert kept.endswith("\u00e9")  # whole characters only


def test_a_deferred_result_reaches_the_next_turn_once(project: Project, fake_model: FakeModel,
                                                      pi_env: dict[str, str]) -> None:
    """Turn 1 gets the digest (the deferred stage still running); turn 2, after it finished,
    gets its result through before_agent_start; turn 3 does not get it again.
    Handshakes, not sleeps: the stage ends only once the test releases it after turn 1, and
    turn 2 starts only once the runner has written its result (a `sleep 2` stage and a 4 s
    wait were two guesses about a loaded host)."""
    flag = project.path.parent / "release-deferred"
    project.configure(f"""\
        budget = 20
        grace = 0.5

        [[stages]]
        name = "mark"
        run = ["sh", "-c", "echo {project.mark}-$SUPERVISE_SOURCE-$SUPERVISE_MODE"]

        [[stages]]
        name = "late"
        deferred = true
        timeout = 60
        run = ["sh", "-c", "while [ ! -e '{flag}' ]; do sleep 0.05; done; echo {project.mark}-DEFERRED-RESULT"]
        """)
    result = f"{project.mark}-DEFERRED-RESULT"
    results = project.path / ".supervise" / "deferred" / "late"
    rpc = Rpc(project, pi_env)
    try:
        rpc.send({"id": "1", "type": "prompt", "message": "turn 1"}, until="agent_end")
        first = fake_model.count()
        flag.write_text("go")
        deadline = time.monotonic() + 30
        while not list(results.glob("result-*.json")):  # the runner's own completion record
            assert time.monotonic() < deadline, "deferred stage never finished"
            time.sleep(0.05)
        rpc.send({"id": "2", "type": "prompt", "message": "turn 2"}, until="agent_end")
        second = fake_model.count()
        rpc.send({"id": "3", "type": "prompt", "message": "turn 3"}, until="agent_end")
    finally:
        flag.touch()  # the stage ends, so no process outlives the test
        rpc.close()
    bodies = fake_model.bodies()
    assert all(result not in b for b in bodies[:first])
    assert "IN PROGRESS: deferred stage 'late'" in bodies[first - 1]
    assert bodies[second - 1].count(result) == 1  # turn 2: delivered
    assert bodies[-1].count(result) == 1  # turn 3: stored once in the session, not sent again


def test_a_changed_instruction_file_reaches_the_next_turn_once(project: Project, fake_model: FakeModel,
                                                               pi_env: dict[str, str]) -> None:
    """AGENTS.md (which Pi loads itself) edited between turns: turn 2 gets the new version once
    through before_agent_start; turn 3 gets no second copy."""
    old, new = f"RULEONE{project.mark}", f"RULETWO{project.mark}"
    agents = project.path / "AGENTS.md"
    agents.write_text(f"# Rules\n- {old}\n")
    past = time.time() - 60
    os.utime(agents, (past, past))
    project.configure(marker_toml(project.mark, extra=(
        '\n[[stages]]\nname = "instructions"\nbuiltin = "instructions"\n')))
    rpc = Rpc(project, pi_env)
    try:
        rpc.send({"id": "1", "type": "prompt", "message": "turn 1"}, until="agent_end")
        first = fake_model.count()
        agents.write_text(f"# Rules\n- {old}\n- {new}\n")
        rpc.send({"id": "2", "type": "prompt", "message": "turn 2"}, until="agent_end")
        second = fake_model.count()
        rpc.send({"id": "3", "type": "prompt", "message": "turn 3"}, until="agent_end")
    finally:
        rpc.close()
    bodies = fake_model.bodies()
    assert all(new not in b for b in bodies[:first])
    assert bodies[second - 1].count(new) == 1
    assert bodies[second - 1].count("INSTRUCTIONS CHANGED: AGENTS.md") == 1
    assert bodies[-1].count(new) == 1  # stored once in the session, not injected again


# -- the context-fidelity matrix (docs/harnesses/README.md) -----------------------------------------

def keep_recent(pi_env: dict[str, str], tokens: int) -> None:
    """Pi's compaction keeps about ``tokens`` of recent messages (settings.json)."""
    Path(pi_env["PI_CODING_AGENT_DIR"], "settings.json").write_text(
        json.dumps({"compaction": {"keepRecentTokens": tokens}}))


def compact_in_rpc(project: Project, fake: FakeModel, env: dict[str, str], *args: str,
                   turns: int = 2) -> dict[str, int]:
    """``pi --mode rpc ARGS``: ``turns`` prompts, compact, one prompt; the tally of that
    prompt's request (the first after the compaction)."""
    rpc = Rpc(project, env, *args)
    try:
        for i in range(turns):
            rpc.send({"id": f"t{i}", "type": "prompt", "message": f"turn {i}"}, until="agent_end")
        rpc.send({"id": "c", "type": "compact"}, until="compaction_end")
        since = fake.count()
        rpc.send({"id": "a", "type": "prompt", "message": "after compact"}, until="agent_end")
    finally:
        rpc.close()
    return tally(fake.bodies(since)[0], project.mark)


@pytest.fixture
def matrix(project: Project, pi_env: dict[str, str]) -> dict[str, str]:
    project.configure(matrix_toml(project.mark))
    return pi_env


def test_matrix_a_compact_that_keeps_the_digest_adds_no_reemit(project: Project, fake_model: FakeModel,
                                                                matrix: dict[str, str]) -> None:
    """One process, prompt/compact/prompt: Pi kept the startup digest among recent messages."""
    got = compact_in_rpc(project, fake_model, matrix)
    assert got == {"full": 1, "reemit": 0, "reemit_mark": 0, "nudge": 0}, got


def test_matrix_a_compact_that_drops_the_digest_holds_the_reemit_once(project: Project, fake_model: FakeModel,
                                                                      matrix: dict[str, str]) -> None:
    keep_recent(matrix, 1)
    got = compact_in_rpc(project, fake_model, matrix, turns=3)
    assert got == {"full": 0, "reemit": 1, "reemit_mark": 1, "nudge": 0}, got


def test_matrix_a_continue_then_compact_adds_no_second_digest(project: Project, fake_model: FakeModel,
                                                               matrix: dict[str, str]) -> None:
    """`pi -c` then compact, a new process: no nudge at the resume, no re-emit over the kept
    digest (it used to hold a full startup digest and a full compact digest)."""
    pi(project, matrix, "-p", "turn 0")
    got = compact_in_rpc(project, fake_model, matrix, "-c", turns=1)
    assert got == {"full": 1, "reemit": 0, "reemit_mark": 0, "nudge": 0}, got


def test_matrix_a_continue_then_compact_that_drops_it_reemits_by_session(
        project: Project, fake_model: FakeModel, matrix: dict[str, str]) -> None:
    """The compact of a session whose full start completed in an earlier process: the
    re-emit (the session's start is remembered), not a full digest."""
    keep_recent(matrix, 1)
    pi(project, matrix, "-p", "turn 0")
    got = compact_in_rpc(project, fake_model, matrix, "-c", turns=2)
    assert got == {"full": 0, "reemit": 1, "reemit_mark": 1, "nudge": 0}, got


def test_matrix_b_resume_holds_the_digest_once_and_no_nudge(project: Project, fake_model: FakeModel,
                                                            matrix: dict[str, str]) -> None:
    pi(project, matrix, "-p", "turn 1")
    for i in (2, 3):
        since = fake_model.count()
        pi(project, matrix, "-c", "-p", f"turn {i}")
        got = tally(fake_model.bodies(since)[-1], project.mark)
        assert got == {"full": 1, "reemit": 0, "reemit_mark": 0, "nudge": 0}, (i, got)


def test_the_project_and_the_user_extension_deliver_once(project: Project, fake_model: FakeModel,
                                                         pi_env: dict[str, str]) -> None:
    """Issue 22: `install pi --scope user` beside the project's extension (which may be
    committed) leaves the project's files alone; both load in this project, the first copy
    serves and the other stands down: the digest once, one generation."""
    entry = project.path / ".pi" / "extensions" / "watchkeeper" / "index.ts"
    before = entry.read_bytes()
    proc = subprocess.run([sys.executable, "-m", "supervisor", "install", "pi", "--scope", "user"],
                          cwd=project.path, env=pi_env, capture_output=True, text=True, timeout=60,
                          stdin=subprocess.DEVNULL)
    assert proc.returncode == 0, proc.stderr
    assert entry.read_bytes() == before  # the old install removed the project's extension
    user = Path(pi_env["PI_CODING_AGENT_DIR"]) / "extensions" / "watchkeeper"
    log = tag_interpreters(project.path, {"project": entry.parent, "user": user})
    pi(project, pi_env, "-p", "turn 1")
    bodies = fake_model.bodies()
    assert sum(b.count(f"{project.mark}-startup-full") for b in bodies) == 1, bodies
    starts = [line for line in log.read_text().splitlines() if "--source startup" in line]
    assert len(starts) == 1, starts  # one copy served; without the claim both ran a start


def tag_interpreters(root: Path, folders: dict[str, Path]) -> Path:
    """Point each placed bridge's ``watchkeeper.json`` at a wrapper that logs ``<name> <argv>``
    and runs the real interpreter; the log's path."""
    log = root.parent / "bridge-launches.log"
    for name, folder in folders.items():
        settings = folder / "watchkeeper.json"
        data = json.loads(settings.read_text())
        wrapper = root.parent / f"python-{name}"
        wrapper.write_text(f'#!/bin/sh\necho "{name} $*" >> "{log}"\nexec "{data["python"]}" "$@"\n')
        wrapper.chmod(0o755)
        settings.write_text(json.dumps({**data, "python": str(wrapper)}))
    return log
