"""Claude Code 2.1.197, headless (``claude -p``), against the fake model server.

Each case proves that what our hook printed reached the model: the marker printed by the
digest's stage (or the nudge, or the banner) is found in a logged request body. Facts used
(brief, harnesses.md section 1): the context arrives as a system message; ``--resume`` fires
``source=resume``; ``-p /clear`` fires ``source=clear`` in a new session; the first headless
``/compact`` of a session may answer "Not enough messages to compact.", a repeat compacts.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import time
from pathlib import Path

import pytest

from conftest import (RUN_TIMEOUT, FakeModel, Project, clean_env, harness_bin, marker_toml, matrix_toml,
                      run_harness, tally)

pytestmark = pytest.mark.e2e

NUDGE = "SUPERVISE_OP: v1 session-start"


def claude_env(fake: FakeModel, **extra: str) -> dict[str, str]:
    return clean_env(ANTHROPIC_BASE_URL=fake.url, ANTHROPIC_API_KEY="dummy", DISABLE_TELEMETRY="1",
                     CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC="1", DISABLE_AUTOUPDATER="1",
                     DISABLE_ERROR_REPORTING="1", **extra)


def claude(project: Project, fake: FakeModel, *args: str, floor: bool = False) -> dict:
    """Run ``claude ARGS --output-format json`` in the project (``floor``: the supported
    floor version of the harness table, else the newest pin); return its JSON result."""
    env = claude_env(fake)
    proc = run_harness([harness_bin("claude", floor), *args, "--output-format", "json"],
                       project.path, env)
    assert proc.returncode == 0, f"claude {args} failed: {proc.stderr[-2000:]}"
    return json.loads(proc.stdout.strip().splitlines()[-1])


@pytest.fixture
def installed(project: Project) -> Project:
    harness_bin("claude")
    project.install("claude")
    return project


def compact(project: Project, fake: FakeModel, sid: str, floor: bool = False) -> None:
    """Headless ``/compact``, repeated while Claude answers "Not enough messages" (LAB)."""
    for _ in range(3):
        result = claude(project, fake, "--resume", sid, "-p", "/compact", floor=floor).get("result", "")
        if not str(result).startswith("Not enough messages"):
            return
    pytest.fail("claude never compacted: 'Not enough messages to compact.' three times")


FLOOR = pytest.mark.parametrize("floor", [False, True], ids=["newest", "floor"])
"""The core subset (startup, compact, resume) also runs against the harness table's supported
floor (the second pinned set)."""


@FLOOR
def test_startup_digest_reaches_the_model(installed: Project, fake_model: FakeModel, floor: bool) -> None:
    claude(installed, fake_model, "-p", "turn 1", floor=floor)
    assert fake_model.seen(f"{installed.mark}-startup-")


def test_resume_of_an_unknown_transcript_gets_the_nudge(installed: Project, fake_model: FakeModel) -> None:
    sid = claude(installed, fake_model, "-p", "turn 1")["session_id"]
    # the digest never reached this session (as if run before install): the nudge asks for it
    (installed.path / ".supervise" / "sessions.json").unlink()
    since = fake_model.count()
    claude(installed, fake_model, "--resume", sid, "-p", "turn 2")
    assert fake_model.seen(NUDGE, since)


def test_clear_digest_reaches_the_model(installed: Project, fake_model: FakeModel) -> None:
    claude(installed, fake_model, "-p", "turn 1")
    cleared = claude(installed, fake_model, "-p", "/clear")["session_id"]
    since = fake_model.count()
    claude(installed, fake_model, "--resume", cleared, "-p", "after clear")
    assert fake_model.seen(f"{installed.mark}-clear-", since)


@FLOOR
def test_compact_digest_reaches_the_model(installed: Project, fake_model: FakeModel, floor: bool) -> None:
    sid = claude(installed, fake_model, "-p", "turn 1", floor=floor)["session_id"]
    for i in (2, 3):
        claude(installed, fake_model, "--resume", sid, "-p", f"turn {i}", floor=floor)
    compact(installed, fake_model, sid, floor=floor)
    since = fake_model.count()
    claude(installed, fake_model, "--resume", sid, "-p", "after compact", floor=floor)
    assert fake_model.seen(f"{installed.mark}-compact-", since)


def _session_context(fake: FakeModel, needle: str) -> str:
    """The SessionStart context text (as the model got it) of the first request holding ``needle``."""
    for request in fake.requests():
        for message in (request.get("body") or {}).get("messages", []):
            content = message.get("content")
            texts = [content] if isinstance(content, str) else [
                c.get("text", "") for c in content or [] if isinstance(c, dict)]
            for text in texts:
                if needle in text and "SessionStart" in text:
                    return text
    raise AssertionError(f"no request carried a SessionStart context with {needle!r}")


def test_large_digest_is_inlined_within_the_cap_and_saved_whole(project: Project, fake_model: FakeModel) -> None:
    harness_bin("claude")
    big = f"BIGSTAGE{project.mark}"
    project.configure(marker_toml(project.mark, extra=(
        '\n[[stages]]\nname = "big"\n'
        f"run = [\"python3\", \"-c\", \"print('## Big'); print('{big}'); print('y' * 20000); "
        f"print('{big}-END')\"]\n")))
    project.install("claude")
    claude(project, fake_model, "-p", "turn 1")
    context = _session_context(fake_model, f"{project.mark}-startup-")
    # Claude replaces hook output over ~10,000 characters with a 2 KB preview (LAB)
    assert "persisted-output" not in context and "Output too large" not in context
    assert len(context) < 10_000
    assert f"{big}-END" not in context
    cut = [ln for ln in context.splitlines() if "cut from this inline" in ln and "big" in ln.lower()]
    assert len(cut) == 1 and "20,0" in cut[0]  # names the stage and its size
    found = re.search(r"(/\S+/digests/digest-[0-9a-f]+\.txt)", cut[0])
    assert found, cut[0]
    whole = Path(found.group(1)).read_text("utf-8")
    assert f"{project.mark}-startup-" in whole and f"{big}-END" in whole and "y" * 20000 in whole


def test_stage_hanging_past_the_budget_gives_the_banner(project: Project, fake_model: FakeModel) -> None:
    harness_bin("claude")
    project.configure(marker_toml(project.mark, budget=3, extra=(
        '\n[[stages]]\nname = "hang"\nrun = ["sleep", "600"]\n')))
    project.install("claude")
    registered = json.loads((project.path / ".claude" / "settings.json").read_text())
    timeout = registered["hooks"]["SessionStart"][0]["hooks"][0]["timeout"]
    started = time.monotonic()
    claude(project, fake_model, "-p", "turn 1")
    elapsed = time.monotonic() - started
    assert fake_model.seen("STARTUP TRUNCATED")
    assert fake_model.seen(f"{project.mark}-startup-")
    # The hook returned on its own budget, long before Claude's registered timeout would kill it
    # (a killed hook delivers no context at all, so the banner above already proves it).
    assert elapsed < timeout


def test_deferred_stage_is_delivered_by_the_prompt_hook_exactly_once(
        project: Project, fake_model: FakeModel) -> None:
    harness_bin("claude")
    late = f"LATE{project.mark}"
    flag = project.path / "release-deferred"
    project.configure(marker_toml(project.mark, extra=(
        '\n[[stages]]\nname = "late"\ndeferred = true\ntimeout = 60\n'
        f"run = [\"sh\", \"-c\", \"while [ ! -e '{flag}' ]; do sleep 0.05; done; echo {late}\"]\n")))
    project.install("claude")
    sid = claude(project, fake_model, "-p", "turn 1")["session_id"]
    assert fake_model.seen("IN PROGRESS")
    assert not fake_model.seen(late)
    flag.write_text("go")
    results = project.path / ".supervise" / "deferred" / "late"
    deadline = time.monotonic() + 30
    while not list(results.glob("result-*.json")):  # the runner's own completion record
        assert time.monotonic() < deadline, "deferred stage never finished"
        time.sleep(0.05)
    since = fake_model.count()
    claude(project, fake_model, "--resume", sid, "-p", "turn 2")
    turn2 = [b.count(late) for b in fake_model.bodies(since)]
    assert any(turn2), f"the prompt hook did not deliver the deferred result (turn 2 bodies: {turn2})"
    assert max(turn2) == 1, f"delivered more than once in one request: {turn2}"
    since = fake_model.count()
    claude(project, fake_model, "--resume", sid, "-p", "turn 3")
    # Turn 3 re-sends the transcript (the delivered text once) but no second delivery.
    turn3 = [b.count(late) for b in fake_model.bodies(since)]
    assert max(turn3, default=0) <= 1, f"delivered again at turn 3: {turn3}"
    assert not list(results.glob("result-*.json"))


# -- the context-fidelity matrix (docs/harnesses/README.md) -----------------------------------------

@pytest.fixture
def matrix(project: Project) -> Project:
    harness_bin("claude")
    project.configure(matrix_toml(project.mark))
    project.install("claude")
    return project


def test_matrix_a_compact_in_a_new_process_holds_the_reemit_once(matrix: Project, fake_model: FakeModel) -> None:
    """`claude -p --resume ID /compact` is a new process: the re-emit, not a second full digest;
    the compaction's summary request carries the PreCompact note naming the re-emitted stage."""
    sid = claude(matrix, fake_model, "-p", "turn 1")["session_id"]
    for i in (2, 3):
        claude(matrix, fake_model, "--resume", sid, "-p", f"turn {i}")
    before = fake_model.count()
    compact(matrix, fake_model, sid)
    # PreCompact's stdout reaches the summariser: it names the re-emitted stage alone
    notes = [b for b in fake_model.bodies(before) if "right after this compaction" in b]
    assert notes, "the PreCompact note is in no request of the compaction"
    assert "sent to the model again: mark." in notes[-1] and "again: fullonly" not in notes[-1]
    since = fake_model.count()
    claude(matrix, fake_model, "--resume", sid, "-p", "after compact")
    last = tally(fake_model.bodies(since)[-1], matrix.mark)
    assert last == {"full": 0, "reemit": 1, "reemit_mark": 1, "nudge": 0}, last
    assert (matrix.path / ".supervise" / "lock.json").exists()


@FLOOR
def test_matrix_b_resume_holds_the_digest_once_and_no_nudge(matrix: Project, fake_model: FakeModel,
                                                           floor: bool) -> None:
    sid = claude(matrix, fake_model, "-p", "turn 1", floor=floor)["session_id"]
    for i in (2, 3):  # two resumes: nothing accumulates
        since = fake_model.count()
        claude(matrix, fake_model, "--resume", sid, "-p", f"turn {i}", floor=floor)
        last = tally(fake_model.bodies(since)[-1], matrix.mark)
        assert last == {"full": 1, "reemit": 0, "reemit_mark": 0, "nudge": 0}, (i, last)


@FLOOR
def test_a_changed_instruction_file_reaches_the_next_request_once(
        project: Project, fake_model: FakeModel, floor: bool) -> None:
    """AGENTS.md is edited between turns; turn 2's request carries the new version once.
    At the floor (2.1.197) the digest injected it, so the new version comes under the
    one-line note; turn 3 carries no second copy (the transcript holds the delivered one).
    From 2.1.281 Claude loads AGENTS.md itself and the resumed process reads the new version:
    issue 22, item 3, the note would be a second copy (the old code added it)."""
    harness_bin("claude", floor)
    old, new = f"RULEONE{project.mark}", f"RULETWO{project.mark}"
    agents = project.path / "AGENTS.md"
    agents.write_text(f"# Rules\n- {old}\n")
    past = time.time() - 60
    os.utime(agents, (past, past))
    project.configure(marker_toml(project.mark, extra=(
        '\n[[stages]]\nname = "instructions"\nbuiltin = "instructions"\n')))
    project.install("claude")
    sid = claude(project, fake_model, "-p", "turn 1", floor=floor)["session_id"]
    assert fake_model.seen(old) and not fake_model.seen("INSTRUCTIONS CHANGED")
    agents.write_text(f"# Rules\n- {old}\n- {new}\n")
    since = fake_model.count()
    claude(project, fake_model, "--resume", sid, "-p", "turn 2", floor=floor)
    turn2 = fake_model.bodies(since)
    assert any(new in b for b in turn2), "the changed file did not reach the model"
    assert max(b.count(new) for b in turn2) == 1
    assert max(b.count("INSTRUCTIONS CHANGED: AGENTS.md") for b in turn2) == (1 if floor else 0)
    since = fake_model.count()
    claude(project, fake_model, "--resume", sid, "-p", "turn 3", floor=floor)
    turn3 = fake_model.bodies(since)
    assert max((b.count(new) for b in turn3), default=0) <= 1  # not injected again
    assert max((b.count("INSTRUCTIONS CHANGED") for b in turn3), default=0) <= 1


class StreamClaude:
    """One long-lived ``claude -p --input-format stream-json`` process: a user message in, its
    events out until the ``result``. Auto-compaction is made reachable with a small window
    (``CLAUDE_CODE_AUTO_COMPACT_WINDOW``, ``CLAUDE_AUTOCOMPACT_PCT_OVERRIDE``) and one reply
    reporting a large input (the fake model's one-shot usage)."""

    def __init__(self, project: Project, fake: FakeModel) -> None:
        env = claude_env(fake, CLAUDE_CODE_AUTO_COMPACT_WINDOW="20000",
                         CLAUDE_AUTOCOMPACT_PCT_OVERRIDE="50")
        self.events: list[dict] = []
        self.proc = subprocess.Popen(
            [str(harness_bin("claude")), "-p", "--input-format", "stream-json",
             "--output-format", "stream-json", "--verbose"],
            cwd=project.path, env=env, text=True, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL)

    def send(self, text: str) -> dict:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write(json.dumps({"type": "user", "message": {"role": "user", "content": text}}) + "\n")
        self.proc.stdin.flush()
        for line in self.proc.stdout:
            try:
                event = json.loads(line)
            except ValueError:
                continue
            self.events.append(event)
            if event.get("type") == "result":
                return event
        raise AssertionError("claude stream-json ended before a result")

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


def test_matrix_a_compact_in_one_long_lived_process_holds_the_reemit_once(
        matrix: Project, fake_model: FakeModel) -> None:
    """The re-emit path itself: one process (the lock's owner alive), auto-compaction between
    two turns, SessionStart(compact) proven by this very process."""
    stream = StreamClaude(matrix, fake_model)
    try:
        for i in range(4):
            stream.send(f"turn {i}")
        fake_model.report_tokens_once(200_000)  # this reply reports a full window...
        stream.send("turn big")
        stream.send("turn next")  # ...so this turn compacts first
        since = fake_model.count()
        stream.send("after compact")
    finally:
        stream.close()
    boundaries = [e for e in stream.events if e.get("subtype") == "compact_boundary"]
    assert boundaries, "claude never compacted"
    last = tally(fake_model.bodies(since)[-1], matrix.mark)
    assert last == {"full": 0, "reemit": 1, "reemit_mark": 1, "nudge": 0}, last
    assert all(tally(b, matrix.mark)["full"] <= 1 for b in fake_model.bodies())


def test_a_hook_registered_at_two_scopes_delivers_the_digest_once(project: Project,
                                                                  fake_model: FakeModel) -> None:
    """Issue 22, item 2: our hook in the project's and the user's settings (as two installs
    with different budgets left it: ``--registered-timeout 80`` and ``90``) fires twice per
    start; the model gets the digest once (the old code printed it again, byte for byte, and
    Claude added both)."""
    harness_bin("claude")
    project.install("claude")
    settings = (project.path / ".claude" / "settings.json").read_text()
    assert "--registered-timeout 80" in settings
    user = Path(clean_env()["HOME"], ".claude", "settings.json")
    user.parent.mkdir(parents=True, exist_ok=True)
    user.write_text(settings.replace("--registered-timeout 80", "--registered-timeout 90")
                    .replace('"timeout": 80', '"timeout": 90'))
    claude(project, fake_model, "-p", "turn 1")
    bodies = fake_model.bodies()
    assert bodies and bodies[0].count(f"{project.mark}-startup-") == 1, bodies[0][:3000]
