"""OpenCode 1.18.33 with the watchkeeper plugin (``supervise install opencode``) against the
fake model server (``@ai-sdk/openai-compatible``).

Facts used (brief, harnesses.md section 5): a project plugin in ``.opencode/plugins/`` loads
with no install step; ``experimental.chat.system.transform`` runs before every model call,
title generation included; a reply reporting more input tokens than the model's context limit
makes OpenCode compact (summary request, ``session.compacted``, then a "Continue" turn). The
usage is reported once (one-shot file): a constant one loops compaction.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from conftest import FakeModel, Project, clean_env, harness_bin, matrix_toml, run_harness, tally

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(300)]  # the first run installs the provider


@pytest.fixture(scope="module")
def oc_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One XDG cache for the module: OpenCode installs the provider package there once."""
    return tmp_path_factory.mktemp("oc-cache")

TITLE = "You are a title generator."
SUMMARY = "You are a context summarization agent."


@pytest.fixture
def oc_env(project: Project, fake_model: FakeModel, tmp_path: Path, oc_cache: Path) -> dict[str, str]:
    harness_bin("opencode")
    (project.path / "opencode.json").write_text(json.dumps({
        "$schema": "https://opencode.ai/config.json",
        "provider": {"fake": {"npm": "@ai-sdk/openai-compatible", "name": "Fake",
                              "options": {"baseURL": f"{fake_model.url}/v1", "apiKey": "dummy"},
                              "models": {"fake-model": {"name": "Fake",
                                                        "limit": {"context": 100000, "output": 1000}}}}},
        "model": "fake/fake-model", "small_model": "fake/fake-model", "autoupdate": False,
        "share": "disabled"}))
    project.install("opencode")
    xdg = tmp_path / "oc-xdg"
    for folder in (xdg / "config" / "opencode", project.path / ".opencode"):
        seed_plugin_dependency(folder)
    return clean_env(XDG_CONFIG_HOME=str(xdg / "config"), XDG_DATA_HOME=str(xdg / "data"),
                     XDG_CACHE_HOME=str(oc_cache), XDG_STATE_HOME=str(xdg / "state"),
                     OPENCODE_DISABLE_MODELS_FETCH="1", OPENCODE_DISABLE_AUTOUPDATE="1",
                     OPENCODE_DISABLE_LSP_DOWNLOAD="1")


OPENCODE_PIN = "1.18.33"


def seed_plugin_dependency(folder: Path) -> None:
    """Mark ``@opencode-ai/plugin`` as installed in one of OpenCode's config folders.

    At start OpenCode adds that package (type definitions for plugin authors; our plugin imports
    nothing from it) to every config folder it reads, the global one and each ``.opencode``,
    with an npm install from the registry unless ``node_modules`` exists and ``package-lock.json``
    already lists every dependency (OpenCode 1.18.33, ``Npm.install``). Per test that was a
    network install before the first model call: 90 s and more on a loaded host, inside the
    120 s a CLI run gets (CI failed three OpenCode tests at once that way). A user's second
    session finds the folder as this leaves it."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "node_modules").mkdir(exist_ok=True)
    deps = {"@opencode-ai/plugin": OPENCODE_PIN}
    (folder / "package.json").write_text(json.dumps({"dependencies": deps}))
    (folder / "package-lock.json").write_text(json.dumps(
        {"lockfileVersion": 3, "requires": True, "packages": {"": {"dependencies": deps}}}))


def opencode(project: Project, env: dict[str, str], *args: str) -> None:
    # OpenCode takes its directory from $PWD, which a subprocess cwd does not set
    proc = run_harness([harness_bin("opencode"), "run", *args], project.path, {**env, "PWD": str(project.path)})
    assert proc.returncode == 0, f"opencode run {args} failed: {proc.stderr[-2000:]}"


def test_startup_digest_reaches_the_model_once_and_not_the_title_call(
        project: Project, fake_model: FakeModel, oc_env: dict[str, str]) -> None:
    opencode(project, oc_env, "turn 1")
    bodies = fake_model.bodies()
    main = [b for b in bodies if TITLE not in b]
    titles = [b for b in bodies if TITLE in b]
    assert main and all(b.count(f"{project.mark}-startup-full") == 1 for b in main)
    assert all(project.mark not in b for b in titles)


def test_re_emit_after_auto_compaction_reaches_the_next_request_once(
        project: Project, fake_model: FakeModel, oc_env: dict[str, str]) -> None:
    opencode(project, oc_env, "turn 1")
    fake_model.report_tokens_once(200_000)  # the next reply reports an overflowing context
    since = fake_model.count()
    opencode(project, oc_env, "-c", "turn 2")
    bodies = fake_model.bodies(since)
    summaries = [i for i, b in enumerate(bodies) if SUMMARY in b]
    assert summaries, "no compaction happened"
    assert project.mark not in bodies[summaries[0]]  # not added to the compaction summary request
    after = [b for b in bodies[summaries[0] + 1:] if TITLE not in b]
    assert after, "no request followed the compaction"
    assert after[0].count("CONTEXT RE-EMIT after compact") == 1
    assert after[0].count(f"{project.mark}-compact-reemit") == 1
    assert f"{project.mark}-startup-" not in after[0]  # the re-emit replaced the start digest


DEFERRED_TOML = """\
budget = 20
grace = 0.5

[[stages]]
name = "mark"
run = ["sh", "-c", "echo {mark}-$SUPERVISE_SOURCE-$SUPERVISE_MODE"]

[[stages]]
name = "late"
deferred = true
timeout = 60
run = ["sh", "-c", "while [ ! -e '{flag}' ]; do sleep 0.05; done; echo {mark}-DEFERRED-RESULT"]
"""


def test_a_deferred_result_reaches_a_later_request_of_the_turn_once(
        project: Project, fake_model: FakeModel, oc_env: dict[str, str]) -> None:
    """The digest says the deferred stage is in progress; the model's bash call waits past its
    end; the next request of the same turn carries the result (per-request transform), once,
    and no request before it does.

    Handshakes, not sleeps (a `sleep 2` stage and a `sleep 4` tool call were two guesses about
    a loaded host): the stage ends only when the tool call releases it, and the tool call ends
    only once the runner has written its result, then waits out the plugin's per-turn
    interval (TURN_INTERVAL_MS, 1 s; a sleep as a lower bound, never as a premise)."""
    # Paths inside the project, relative: OpenCode asks before a tool touches another directory.
    flag = project.path / "release-deferred"
    project.configure(DEFERRED_TOML.format(mark=project.mark, flag=flag))
    config = json.loads((project.path / "opencode.json").read_text())
    (project.path / "opencode.json").write_text(json.dumps({**config, "permission": {"bash": "allow"}}))
    try:
        opencode(project, oc_env, "turn 1: FAKE_BASH touch release-deferred; until ls "
                                  ".supervise/deferred/late/result-*.json; do sleep 0.05; done; "
                                  "sleep 1.2")
    finally:
        flag.touch()  # the stage ends, so no process outlives the test
    main = [b for b in fake_model.bodies() if TITLE not in b]
    result = f"{project.mark}-DEFERRED-RESULT"
    assert len(main) >= 2, "the bash tool call made no second request"
    # the premise: the tool call really waited (a malformed command ends at once, and the next
    # request then comes before the stage ends, within the per-turn throttle)
    assert "unexpected EOF" not in main[1] and "syntax error" not in main[1], main[1][-400:]
    assert main[0].count(f"{project.mark}-startup-full") == 1
    assert "IN PROGRESS: deferred stage 'late'" in main[0] and result not in main[0]
    assert main[-1].count(result) == 1  # arrived, once
    assert all(b.count(result) <= 1 for b in main)


# -- the context-fidelity matrix (docs/harnesses/README.md) -----------------------------------------

def main_requests(fake: FakeModel, since: int = 0) -> list[dict]:
    """Bodies of the model calls that are not OpenCode's internal title calls."""
    return [r["body"] for r in fake.requests()[since:]
            if isinstance(r.get("body"), dict) and TITLE not in json.dumps(r["body"])]


def roles(body: dict) -> list[str]:
    return [m.get("role", "") for m in body.get("messages", [])]


@pytest.fixture
def matrix(project: Project, oc_env: dict[str, str]) -> dict[str, str]:
    project.configure(matrix_toml(project.mark))
    return oc_env


def test_matrix_every_request_has_one_system_message(project: Project, fake_model: FakeModel,
                                                     matrix: dict[str, str]) -> None:
    """Backends that accept one leading system message (vLLM with Qwen3 templates, several
    OpenAI-compatible gateways) answer 400 to `system, system, user`."""
    opencode(project, matrix, "turn 1")
    bodies = main_requests(fake_model)
    assert bodies
    for body in bodies:
        assert roles(body).count("system") == 1 and roles(body)[0] == "system", roles(body)
    first = bodies[0]["messages"][0]["content"]
    text = first if isinstance(first, str) else json.dumps(first)
    assert text.count(f"{project.mark}-startup-full") == 1 and f"FULLONLY-{project.mark}" in text


def test_matrix_a_compaction_holds_the_reemit_once(project: Project, fake_model: FakeModel,
                                                   matrix: dict[str, str]) -> None:
    opencode(project, matrix, "turn 1")
    fake_model.report_tokens_once(200_000)
    since = fake_model.count()
    opencode(project, matrix, "-c", "turn 2")
    bodies = [json.dumps(b, ensure_ascii=False) for b in main_requests(fake_model, since)]
    summaries = [i for i, b in enumerate(bodies) if SUMMARY in b]
    assert summaries, "no compaction happened"
    after = bodies[summaries[0] + 1:]
    assert after, "no request followed the compaction"
    got = tally(after[0], project.mark)
    assert got == {"full": 0, "reemit": 1, "reemit_mark": 1, "nudge": 0}, got
    assert all(roles(json.loads(b)).count("system") == 1 for b in after)


def test_matrix_b_continued_session_holds_the_digest_once_and_no_nudge(
        project: Project, fake_model: FakeModel, matrix: dict[str, str]) -> None:
    """OpenCode does not store the system prompt: a continued session (`run -c`) needs the
    digest again, once, in its one system message."""
    opencode(project, matrix, "turn 1")
    since = fake_model.count()
    opencode(project, matrix, "-c", "turn 2")
    bodies = main_requests(fake_model, since)
    assert bodies
    for body in bodies:
        got = tally(json.dumps(body, ensure_ascii=False), project.mark)
        assert got == {"full": 1, "reemit": 0, "reemit_mark": 0, "nudge": 0}, got
        assert roles(body).count("system") == 1


def test_the_project_and_the_user_plugin_deliver_once(project: Project, fake_model: FakeModel,
                                                      oc_env: dict[str, str]) -> None:
    """Issue 22: `install opencode --scope user` beside the project's plugin (which may be
    committed) leaves the project's files alone; both load, the first copy serves and the
    other stands down: the digest once per request."""
    import subprocess
    import sys

    entry = project.path / ".opencode" / "plugins" / "watchkeeper.ts"
    before = entry.read_bytes()
    proc = subprocess.run([sys.executable, "-m", "supervisor", "install", "opencode", "--scope",
                           "user"], cwd=project.path, env=oc_env, capture_output=True, text=True,
                          timeout=60, stdin=subprocess.DEVNULL)
    assert proc.returncode == 0, proc.stderr
    assert entry.read_bytes() == before  # the old install removed the project's plugin
    user = Path(oc_env["XDG_CONFIG_HOME"]) / "opencode" / "plugins" / "watchkeeper"
    from test_pi import tag_interpreters

    log = tag_interpreters(project.path, {"project": entry.parent / "watchkeeper", "user": user})
    opencode(project, oc_env, "turn 1")
    main = [b for b in fake_model.bodies() if TITLE not in b]
    assert main and all(b.count(f"{project.mark}-startup-full") == 1 for b in main), main
    starts = [line for line in log.read_text().splitlines() if "--source startup" in line]
    assert len(starts) == 1, starts  # one copy served; without the claim both ran a start


RUN_GATED_TOML = """\
budget = 20
grace = 0.5

[[stages]]
name = "mark"
run = ["sh", "-c", "echo {mark}-$SUPERVISE_SOURCE-$SUPERVISE_MODE"]

[[stages]]
name = "late"
deferred = true
timeout = 60
run = ["sh", "-c", "n=$(ls '{runs}' | wc -l); touch '{runs}'/run-$n; while [ ! -e '{gates}'/gate-$n ]; do sleep 0.05; done; echo {mark}-DEFERRED-RESULT"]
"""


def test_a_continued_session_sees_a_deferred_result_once(
        project: Project, fake_model: FakeModel, oc_env: dict[str, str]) -> None:
    """Issue 22, item 7: `run` ends before its deferred stage does; `run -c` (a full start
    again: OpenCode keeps no system text) shows that earlier result while its own run is in
    progress; its own run then finishes with the same output within the turn. The old code
    put both results in one request (each delivered once, the output seen twice); now the
    second is one line saying nothing changed.

    Each run of the stage waits for its own gate (gate-0, gate-1); the second turn's bash
    call opens gate-1 and waits for that run's result file."""
    runs = project.path.parent / "runs"
    runs.mkdir()
    project.configure(RUN_GATED_TOML.format(mark=project.mark, runs=runs, gates=project.path))
    config = json.loads((project.path / "opencode.json").read_text())
    (project.path / "opencode.json").write_text(json.dumps({**config, "permission": {"bash": "allow"}}))
    result = f"{project.mark}-DEFERRED-RESULT"
    folder = project.path / ".supervise" / "deferred" / "late"
    try:
        opencode(project, oc_env, "turn 1")
        assert not fake_model.seen(result)
        (project.path / "gate-0").touch()
        deadline = time.monotonic() + 60
        while not list(folder.glob("result-*.json")):  # the first run's own completion record
            assert time.monotonic() < deadline, "the first deferred run never finished"
            time.sleep(0.05)
        since = fake_model.count()
        opencode(project, oc_env, "-c", "turn 2: FAKE_BASH touch gate-1; until ls "
                                        ".supervise/deferred/late/result-*.json; do sleep 0.05; "
                                        "done; sleep 1.2")
    finally:
        for n in range(3):
            (project.path / f"gate-{n}").touch()  # every run ends: no process outlives the test
    main = [b for b in fake_model.bodies(since) if TITLE not in b]
    assert len(main) >= 2, "the bash tool call made no second request"
    assert len(list(runs.iterdir())) == 2  # the premise: `run -c` ran the stage again
    assert "EARLIER run" in main[0] and main[0].count(result) == 1  # shown at the start
    # the output once in every request (the old code: [1, 2])
    assert all(b.count(result) == 1 for b in main), [b.count(result) for b in main]
    assert "nothing new" in main[-1]  # its own run arrived, said in one line
