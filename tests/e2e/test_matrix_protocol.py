"""The session protocol per harness, in one session each, with the real pinned CLI (issue 22):
start, compaction in the same process where the harness compacts, resume, and a deferred
result delivered once, with our hook registered twice where the harness has two settings
scopes (Claude, Codex, Gemini: both fire on every event); at the newest pin of every row of the harness table with a pinned CLI,
and at the floor where the floor differs (Claude).

Every request the model received is counted (``conftest.tally``: full digests, re-emits,
nudges) together with the deferred stage's result marker; each request must hold what the
protocol promises exactly once. The digest is ``matrix_toml`` (a re-emitted marker stage and
a ``fullonly`` stage) plus a deferred stage that ends when the test opens its gate, so the
first request always says IN PROGRESS and the result arrives later.

Cells a harness cannot reach are named in :data:`NOT_REACHABLE` with the reason (and the
harness doc that says so), so the test says what it does not prove. The other files hold the
single cells and their edge cases; this one proves they hold together in one session.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import time
from pathlib import Path

import pytest

from conftest import (RUN_TIMEOUT, FakeModel, Project, clean_env, harness_bin, matrix_toml,
                      run_harness, tally)

pytestmark = pytest.mark.e2e

NOT_REACHABLE = {
    ("gemini", "compact"): "`gemini -p` is one prompt per process: a compression in the same "
                           "process needs the TUI, proven by test_gemini.py::test_a_compression_"
                           "in_the_tui_reemits_once_at_the_next_prompt (docs/harnesses/gemini.md)",
    ("qwen", "compact"): "Qwen Code 0.24.4 compresses only a history it judges big enough "
                         "(`/compress` in a short session: \"not beneficial\"); not driven "
                         "(docs/harnesses/qwen.md)",
    ("droid", "resume"): "droid exec -s needs Factory's servers (docs/harnesses/droid.md)",
    ("droid", "compact"): "needs a second prompt of the session: Factory's servers",
    ("droid", "deferred"): "the per-prompt hook needs a second prompt: Factory's servers",
    ("cline", "compact"): "Cline 3.0.65 runs no PreCompact and fires nothing after a compaction "
                          "(docs/harnesses/cline.md)",
    ("cline", "resume"): "`cline --id` is interactive: proven on a pseudo-terminal by "
                         "test_cline.py::test_a_resumed_task_gets_no_second_digest",
    ("cline", "deferred"): "needs a second tool call after the gate opens; one `cline` prompt "
                           "makes one",
}
"""Cells of the matrix a harness cannot reach offline, with why."""


def _pinned() -> list[tuple[str, bool]]:
    """``(harness, floor)`` for each row with a pinned CLI: the newest pin, and the floor
    where it differs from it."""
    from supervisor._harnesses import ROWS

    out = []
    for row in ROWS:
        if row.packages and row.newest:
            out.append((row.name, False))
            if row.floor and row.floor != row.newest:
                out.append((row.name, True))
    return out


PINNED = _pinned()


def _deferred_toml(mark: str, gate: Path) -> str:
    return matrix_toml(mark) + (
        '\n[[stages]]\nname = "late"\ndeferred = true\ntimeout = 120\n'
        f"run = [\"sh\", \"-c\", \"while [ ! -e '{gate}' ]; do sleep 0.05; done; "
        f"echo DEFERRED-{mark}\"]\n")


class Session:
    """The project, the fake model and the deferred stage's gate of one matrix run."""

    def __init__(self, project: Project, fake: FakeModel) -> None:
        self.project, self.fake = project, fake
        self.gate = project.path.parent / "gate"
        self.result = f"DEFERRED-{project.mark}"
        project.configure(_deferred_toml(project.mark, self.gate))

    def release(self) -> None:
        """Open the gate and wait for the runner's own result record (bounded)."""
        self.gate.touch()
        folder = self.project.path / ".supervise" / "deferred" / "late"
        deadline = time.monotonic() + 60
        while not list(folder.glob("result-*.json")) and not list(folder.glob("delivered-*.json")):
            assert time.monotonic() < deadline, "the deferred stage never finished"
            time.sleep(0.05)

    def tallies(self, since: int = 0, keep=lambda body: True) -> list[dict[str, int]]:
        """One tally per request from ``since`` on (``keep``: which bodies count), with the
        deferred result as ``deferred``."""
        return [{**tally(body, self.project.mark), "deferred": body.count(self.result)}
                for body in self.fake.bodies(since) if keep(body)]

    def close(self) -> None:
        self.gate.touch()  # the stage ends whatever happened: no process outlives the test


@pytest.fixture
def session(project: Project, fake_model: FakeModel) -> Session:
    got = Session(project, fake_model)
    yield got
    got.close()


def _register_twice(project: Project, rel: str, user_file: Path) -> Path:
    """A second registration of ours at the user scope, as two installs with different
    budgets (or a hand copy) leave it: the project's hooks with another registered timeout
    (issue 22, item 2: both fire on every event). Merged into ``user_file`` when it exists.
    Its interpreter is a wrapper that logs each run: the log's path (the premise: it fired)."""
    import sys

    log = project.path.parent / "second-registration.log"
    wrapper = project.path.parent / "python-second"
    wrapper.write_text(f'#!/bin/sh\necho "$*" >> "{log}"\nexec "{sys.executable}" "$@"\n')
    wrapper.chmod(0o755)
    text = (project.path / rel).read_text().replace(sys.executable, str(wrapper))
    text = re.sub(r"--registered-timeout (\d+)", lambda m: f"--registered-timeout {int(m[1]) + 10}", text)
    text = re.sub(r'"timeout": (80|80000)\b', lambda m: f'"timeout": {int(m[1]) * 9 // 8}', text)
    data = json.loads(text)
    if user_file.exists():
        data = {**json.loads(user_file.read_text()), "hooks": data["hooks"]}
    user_file.parent.mkdir(parents=True, exist_ok=True)
    user_file.write_text(json.dumps(data))
    return log


def _assert_start(first: dict[str, int], bodies_first: str) -> None:
    assert (first["full"], first["reemit"], first["nudge"], first["deferred"]) == (1, 0, 0, 0), first
    assert "IN PROGRESS: deferred stage 'late'" in bodies_first


def _assert_once(tallies: list[dict[str, int]]) -> None:
    """No request holds anything twice: the digest, a re-emit, a nudge or the result."""
    assert all(max(t["full"], t["reemit"], t["nudge"], t["deferred"]) <= 1 for t in tallies), tallies


# -- Claude Code ---------------------------------------------------------------------------------

def _claude(session: Session, floor: bool) -> None:
    from test_claude import claude, claude_env

    project, fake = session.project, session.fake
    project.install("claude")
    second = _register_twice(project, ".claude/settings.json",
                             Path(clean_env()["HOME"], ".claude", "settings.json"))
    env = claude_env(fake, CLAUDE_CODE_AUTO_COMPACT_WINDOW="20000",
                     CLAUDE_AUTOCOMPACT_PCT_OVERRIDE="50")
    proc = subprocess.Popen(
        [str(harness_bin("claude", floor)), "-p", "--input-format", "stream-json",
         "--output-format", "stream-json", "--verbose"],
        cwd=project.path, env=env, text=True, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL)
    events: list[dict] = []

    def send(text: str) -> dict:
        assert proc.stdin is not None and proc.stdout is not None
        proc.stdin.write(json.dumps({"type": "user", "message": {"role": "user", "content": text}})
                         + "\n")
        proc.stdin.flush()
        for line in proc.stdout:
            try:
                event = json.loads(line)
            except ValueError:
                continue
            events.append(event)
            if event.get("type") == "result":
                return event
        raise AssertionError("claude stream-json ended before a result")

    try:
        sid = send("turn 0")["session_id"]
        _assert_start(session.tallies()[0], fake.bodies()[0])
        session.release()
        since = fake.count()
        send("turn 1")  # the prompt hook delivers the result
        assert session.tallies(since)[-1]["deferred"] == 1
        for i in (2, 3):
            send(f"turn {i}")
        fake.report_tokens_once(200_000)  # this reply reports a full window...
        send("turn big")
        send("turn next")  # ...so this turn compacts first, in this process
        since = fake.count()
        send("after compact")
    finally:
        assert proc.stdin is not None
        proc.stdin.close()
        try:
            proc.wait(timeout=RUN_TIMEOUT)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        if proc.stdout:
            proc.stdout.close()
    assert any(e.get("subtype") == "compact_boundary" for e in events), "claude never compacted"
    after = session.tallies(since)[-1]
    assert (after["full"], after["reemit"], after["reemit_mark"], after["nudge"]) == (0, 1, 1, 0), after
    since = fake.count()
    claude(project, fake, "--resume", sid, "-p", "resumed", floor=floor)  # a new process
    resumed = session.tallies(since)[-1]
    assert (resumed["full"], resumed["reemit"], resumed["nudge"]) == (0, 1, 0), resumed
    _assert_once(session.tallies())
    assert second.exists(), "the premise: the second registration fired"


# -- Codex CLI -----------------------------------------------------------------------------------

def _codex(session: Session, tmp_path: Path) -> None:
    from test_codex import codex

    project, fake = session.project, session.fake
    harness_bin("codex")
    home = tmp_path / "codex-home"
    home.mkdir()
    (home / "config.toml").write_text(
        'model = "fake-model"\nmodel_provider = "fake"\ncheck_for_update_on_startup = false\n'
        "model_auto_compact_token_limit = 1000\n\n"
        f'[model_providers.fake]\nname = "fake"\nbase_url = "{fake.url}/v1"\n'
        'wire_api = "responses"\nenv_key = "FAKE_API_KEY"\n\n'
        f'[projects."{project.path}"]\ntrust_level = "trusted"\n\n[analytics]\nenabled = false\n')
    project.install("codex")
    second = _register_twice(project, ".codex/hooks.json", home / "hooks.json")
    out = codex(project, home, "--json", "turn 1")
    tid = next(str(json.loads(line)["thread_id"]) for line in out.splitlines()
               if json.loads(line).get("type") == "thread.started")
    _assert_start(session.tallies()[0], fake.bodies()[0])
    session.release()
    since = fake.count()
    codex(project, home, "resume", tid, "turn 2")  # resume: the result, the digest once
    resumed = session.tallies(since)[-1]
    assert (resumed["full"], resumed["nudge"], resumed["deferred"]) == (1, 0, 1), resumed
    fake.report_tokens_once(200_000)
    codex(project, home, "resume", tid, "turn 3")
    since = fake.count()
    codex(project, home, "resume", tid, "turn 4")  # compacts before its turn, in this process
    after = session.tallies(since)[-1]
    assert (after["full"], after["reemit"], after["reemit_mark"], after["nudge"]) == (0, 1, 1, 0), after
    _assert_once(session.tallies())
    assert second.exists(), "the premise: the second registration fired"


# -- Gemini CLI ----------------------------------------------------------------------------------

def _gemini(session: Session) -> None:
    project, fake = session.project, session.fake
    gemini = harness_bin("gemini")
    home = os.environ["HOME"]
    os.makedirs(f"{home}/.gemini", exist_ok=True)
    with open(f"{home}/.gemini/settings.json", "w") as f:
        json.dump({"security": {"auth": {"selectedType": "gemini-api-key"},
                                "folderTrust": {"enabled": False}},
                   "privacy": {"usageStatisticsEnabled": False}, "telemetry": {"enabled": False},
                   "general": {"disableAutoUpdate": True, "disableUpdateNag": True}}, f)
    project.install("gemini")
    second = _register_twice(project, ".gemini/settings.json", Path(home, ".gemini", "settings.json"))
    env = clean_env(GEMINI_API_KEY="dummy", GOOGLE_GEMINI_BASE_URL=fake.url)
    run = run_harness([gemini, "-m", "fake-model", "-p", "turn 1"], project.path, env)
    assert run.returncode == 0, run.stderr[-2000:]
    first = [i for i, b in enumerate(fake.bodies()) if "turn 1" in b][0]
    _assert_start(session.tallies()[first], fake.bodies()[first])
    session.release()
    since = fake.count()
    run = run_harness([gemini, "-m", "fake-model", "-r", "latest", "-p", "turn 2"], project.path, env)
    assert run.returncode == 0, run.stderr[-2000:]
    # the resume drops every earlier turn: the digest comes again (re-emit), and the result
    resumed = session.tallies(since, keep=lambda b: "turn 2" in b)[-1]
    assert (resumed["full"], resumed["reemit"], resumed["nudge"], resumed["deferred"]) == (0, 1, 0, 1), resumed
    _assert_once(session.tallies())
    assert second.exists(), "the premise: the second registration fired"


# -- Qwen Code -----------------------------------------------------------------------------------

MEMORY = "Managed memory has TWO directories"
"""Qwen Code 0.24.4's request that extracts managed memory after a turn (not the turn's own)."""


def _qwen(session: Session) -> None:
    from test_qwen import qwen_env

    project, fake = session.project, session.fake
    qwen = harness_bin("qwen")
    env = qwen_env(fake)
    project.install("qwen")
    second = _register_twice(project, ".qwen/settings.json",
                             Path(os.environ["HOME"], ".qwen", "settings.json"))
    run = run_harness([qwen, "-p", "turn 1"], project.path, env)
    assert run.returncode == 0, run.stderr[-2000:]
    first = [i for i, b in enumerate(fake.bodies()) if "turn 1" in b and MEMORY not in b][0]
    _assert_start(session.tallies()[first], fake.bodies()[first])
    session.release()
    since = fake.count()
    run = run_harness([qwen, "-c", "-p", "turn 2"], project.path, env)
    assert run.returncode == 0, run.stderr[-2000:]
    # `-c` sends the earlier turns without their hook context: the digest comes again as a
    # re-emit, and the deferred result with the prompt. After each turn Qwen asks the model,
    # in a request of its own, what to write to its managed memory: that one carries the
    # conversation without any hook context (the startup digest neither), so the turn's own
    # request is the one counted.
    turn = [t for t in session.tallies(since, keep=lambda b: "turn 2" in b and MEMORY not in b)]
    assert len(turn) == 1, turn
    resumed = turn[0]
    assert (resumed["full"], resumed["reemit"], resumed["nudge"], resumed["deferred"]) == (0, 1, 0, 1), resumed
    _assert_once(session.tallies())
    assert second.exists(), "the premise: the second registration fired"


# -- Pi ------------------------------------------------------------------------------------------

def _pi(session: Session, tmp_path: Path) -> None:
    from test_pi import Rpc, keep_recent, pi

    project, fake = session.project, session.fake
    harness_bin("pi")
    agent = tmp_path / "pi-agent"
    agent.mkdir()
    (agent / "models.json").write_text(json.dumps({"providers": {"fake": {
        "baseUrl": f"{fake.url}/v1", "api": "openai-completions", "apiKey": "dummy",
        "compat": {"supportsDeveloperRole": False, "supportsReasoningEffort": False},
        "models": [{"id": "fake-model", "contextWindow": 32000, "maxTokens": 4096}]}}}))
    project.install("pi")
    env = clean_env(PI_CODING_AGENT_DIR=str(agent), PI_OFFLINE="1", PI_SKIP_VERSION_CHECK="1",
                    PI_TELEMETRY="0")
    keep_recent(env, 1)  # the compaction drops the digest: the re-emit must come, once
    rpc = Rpc(project, env)
    try:
        rpc.send({"id": "t0", "type": "prompt", "message": "turn 0"}, until="agent_end")
        _assert_start(session.tallies()[0], fake.bodies()[0])
        session.release()
        since = fake.count()
        rpc.send({"id": "t1", "type": "prompt", "message": "turn 1"}, until="agent_end")
        assert session.tallies(since)[0]["deferred"] == 1
        rpc.send({"id": "t2", "type": "prompt", "message": "turn 2"}, until="agent_end")
        rpc.send({"id": "c", "type": "compact"}, until="compaction_end")  # in this process
        since = fake.count()
        rpc.send({"id": "a", "type": "prompt", "message": "after compact"}, until="agent_end")
    finally:
        rpc.close()
    after = session.tallies(since)[0]
    assert (after["full"], after["reemit"], after["reemit_mark"], after["nudge"]) == (0, 1, 1, 0), after
    since = fake.count()
    pi(project, env, "-c", "-p", "resumed")  # a new process: the stored re-emit, nothing more
    resumed = session.tallies(since)[0]
    assert (resumed["full"], resumed["reemit"], resumed["nudge"]) == (0, 1, 0), resumed
    _assert_once(session.tallies())


# -- OpenCode ------------------------------------------------------------------------------------

def _opencode(session: Session, tmp_path: Path) -> None:
    from test_opencode import TITLE, opencode, seed_plugin_dependency

    project, fake = session.project, session.fake
    harness_bin("opencode")
    (project.path / "opencode.json").write_text(json.dumps({
        "$schema": "https://opencode.ai/config.json",
        "provider": {"fake": {"npm": "@ai-sdk/openai-compatible", "name": "Fake",
                              "options": {"baseURL": f"{fake.url}/v1", "apiKey": "dummy"},
                              "models": {"fake-model": {"name": "Fake",
                                                        "limit": {"context": 100000, "output": 1000}}}}},
        "model": "fake/fake-model", "small_model": "fake/fake-model", "autoupdate": False,
        "share": "disabled"}))
    project.install("opencode")
    xdg = tmp_path / "oc-xdg"
    for folder in (xdg / "config" / "opencode", project.path / ".opencode"):
        seed_plugin_dependency(folder)
    env = clean_env(XDG_CONFIG_HOME=str(xdg / "config"), XDG_DATA_HOME=str(xdg / "data"),
                    XDG_CACHE_HOME=str(xdg / "cache"), XDG_STATE_HOME=str(xdg / "state"),
                    OPENCODE_DISABLE_MODELS_FETCH="1", OPENCODE_DISABLE_AUTOUPDATE="1",
                    OPENCODE_DISABLE_LSP_DOWNLOAD="1")
    main = lambda body: TITLE not in body  # noqa: E731 - the title calls carry nothing
    opencode(project, env, "turn 1")
    first = session.tallies(keep=main)[0]
    _assert_start(first, [b for b in fake.bodies() if main(b)][0])
    session.release()
    fake.report_tokens_once(200_000)  # the first reply of `run -c` overflows: it compacts
    since = fake.count()
    opencode(project, env, "-c", "turn 2")  # resume (a full start again) and compaction, one process
    bodies = [b for b in fake.bodies(since) if main(b)]
    summaries = [i for i, b in enumerate(bodies) if "You are a context summarization agent." in b]
    assert summaries, "no compaction happened"
    resumed = session.tallies(since, keep=main)[0]
    assert (resumed["full"], resumed["nudge"], resumed["deferred"]) == (1, 0, 1), resumed
    after = {**tally(bodies[summaries[0] + 1], project.mark),
             "deferred": bodies[summaries[0] + 1].count(session.result)}
    assert (after["full"], after["reemit"], after["reemit_mark"], after["nudge"]) == (0, 1, 1, 0), after
    _assert_once(session.tallies(keep=main))


# -- GitHub Copilot CLI --------------------------------------------------------------------------

def _copilot(session: Session) -> None:
    from test_copilot import acp_session, copilot

    project, fake = session.project, session.fake
    harness_bin("copilot")
    project.install("copilot")
    seen: dict[str, int] = {}

    def between(text: str) -> None:  # before each prompt of the one --acp process
        seen[text] = fake.count()
        if text == "turn 2":
            _assert_start(session.tallies()[0], fake.bodies()[0])
            session.release()

    sid = acp_session(project, fake, ["turn 1", "turn 2", "turn 3", "/compact", "after compact"],
                      before=between)
    assert session.tallies(seen["turn 2"])[0]["deferred"] == 1  # the prompt hook delivered it
    after = session.tallies(seen["after compact"])[-1]  # PreCompact armed, this prompt delivered
    assert (after["full"], after["reemit"], after["reemit_mark"], after["nudge"]) == (0, 1, 1, 0), after
    since = fake.count()
    copilot(project, fake, "-p", "resumed", f"--resume={sid}")  # a new process: the re-emit
    resumed = session.tallies(since)[-1]
    assert (resumed["full"], resumed["reemit"], resumed["nudge"]) == (0, 1, 0), resumed
    _assert_once(session.tallies())


# -- Factory Droid -------------------------------------------------------------------------------

def _droid(session: Session) -> None:
    project, fake = session.project, session.fake
    droid = harness_bin("droid")
    home = os.environ["HOME"]
    os.makedirs(f"{home}/.factory", exist_ok=True)
    with open(f"{home}/.factory/settings.json", "w") as f:
        json.dump({"customModels": [{"model": "fake-model", "displayName": "Fake",
                                     "baseUrl": f"{fake.url}/v1", "apiKey": "dummy",
                                     "provider": "generic-chat-completion-api",
                                     "maxOutputTokens": 1000}]}, f)
    project.install("droid")
    run = run_harness([droid, "exec", "-m", "custom:fake-model", "turn 1"], project.path, clean_env())
    assert run.returncode == 0, run.stdout[-1000:] + run.stderr[-2000:]
    first = [i for i, b in enumerate(fake.bodies()) if project.mark in b][0]
    _assert_start(session.tallies()[first], fake.bodies()[first])
    _assert_once(session.tallies())


# -- Cline CLI -----------------------------------------------------------------------------------

def _cline(session: Session, token: str) -> None:
    from test_cline import stop_hub

    project, fake = session.project, session.fake
    cline = harness_bin("cline")
    project.install("cline")
    env = clean_env()
    try:
        auth = run_harness([cline, "auth", "-p", "openai", "-k", "dummy", "-m", "fake-model",
                            "-b", f"{fake.url}/v1"], project.path, env)
        assert auth.returncode == 0, auth.stderr[-2000:]
        run = run_harness([cline, "turn 1 FAKE_BASH echo hi"], project.path, env)
        assert run.returncode == 0, run.stdout[-1000:] + run.stderr[-2000:]
    finally:
        stop_hub(token)
    bodies = fake.bodies()
    first = [i for i, b in enumerate(bodies) if project.mark in b][0]
    assert first >= 1, "TaskStart's output is dropped: the digest comes with the first tool call"
    _assert_start(session.tallies()[first], bodies[first])
    _assert_once(session.tallies())


@pytest.mark.parametrize(("harness", "floor"), PINNED,
                         ids=[f"{h}-{'floor' if f else 'newest'}" for h, f in PINNED])
def test_the_session_protocol_holds_in_one_session(harness: str, floor: bool, session: Session,
                                                   tmp_path: Path, no_leaked_processes: str) -> None:
    if harness == "claude":
        _claude(session, floor)
    elif harness == "codex":
        _codex(session, tmp_path)
    elif harness == "gemini":
        _gemini(session)
    elif harness == "qwen":
        _qwen(session)
    elif harness == "pi":
        _pi(session, tmp_path)
    elif harness == "opencode":
        _opencode(session, tmp_path)
    elif harness == "copilot":
        _copilot(session)
    elif harness == "droid":
        _droid(session)
    elif harness == "cline":
        _cline(session, no_leaked_processes)
    else:
        pytest.fail(f"the harness table pins {harness} but the matrix has no driver for it: add "
                    "one here (or name its unreachable cells in NOT_REACHABLE)")
