"""Codex CLI 0.171.0 (``codex exec``), against the fake model server (Responses API).

Facts used (brief, harnesses.md section 2): project ``.codex/hooks.json`` loads only for a
trusted project, and unmanaged hooks run only once trusted, so the tests trust the project in
``config.toml`` and pass ``--dangerously-bypass-hook-trust``; ``codex exec resume ID`` fires
``source=resume``; with ``model_auto_compact_token_limit = 1000`` a reply reporting 200,000
input tokens makes the next turn compact first, firing ``source=compact``.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from conftest import FakeModel, Project, clean_env, harness_bin, matrix_toml, run_harness, tally

pytestmark = pytest.mark.e2e

NUDGE = "SUPERVISE_OP: v1 session-start"


@pytest.fixture
def codex_home(project: Project, fake_model: FakeModel, tmp_path: Path) -> Path:
    harness_bin("codex")
    home = tmp_path / "codex-home"
    home.mkdir()
    (home / "config.toml").write_text(
        'model = "fake-model"\nmodel_provider = "fake"\ncheck_for_update_on_startup = false\n'
        "model_auto_compact_token_limit = 1000\n\n"
        f'[model_providers.fake]\nname = "fake"\nbase_url = "{fake_model.url}/v1"\n'
        'wire_api = "responses"\nenv_key = "FAKE_API_KEY"\n\n'
        f'[projects."{project.path}"]\ntrust_level = "trusted"\n\n[analytics]\nenabled = false\n')
    project.configure(matrix_toml(project.mark))
    project.install("codex")
    return home


def codex(project: Project, home: Path, *args: str) -> str:
    """Run ``codex exec ARGS`` in the project; return stdout."""
    env = clean_env(CODEX_HOME=str(home), FAKE_API_KEY="dummy")
    proc = run_harness([harness_bin("codex"), "exec", "--dangerously-bypass-hook-trust",
                        "--skip-git-repo-check", *args], project.path, env)
    assert proc.returncode == 0, f"codex exec {args} failed: {proc.stderr[-2000:]}"
    return proc.stdout


def start(project: Project, home: Path) -> str:
    """A new ``codex exec`` session; returns its thread id."""
    for line in codex(project, home, "--json", "turn 1").splitlines():
        event = json.loads(line)
        if event.get("type") == "thread.started":
            return str(event["thread_id"])
    raise AssertionError("codex exec --json printed no thread.started event")


def test_startup_digest_reaches_the_model(project: Project, fake_model: FakeModel, codex_home: Path) -> None:
    start(project, codex_home)
    assert fake_model.seen(f"{project.mark}-startup-")


def test_resume_of_an_unknown_transcript_gets_the_nudge(project: Project, fake_model: FakeModel,
                                                       codex_home: Path) -> None:
    tid = start(project, codex_home)
    (project.path / ".supervise" / "sessions.json").unlink()  # as if the digest never ran here
    since = fake_model.count()
    codex(project, codex_home, "resume", tid, "turn 2")
    assert fake_model.seen(NUDGE, since)


def test_compact_digest_reaches_the_model(project: Project, fake_model: FakeModel, codex_home: Path) -> None:
    tid = start(project, codex_home)
    fake_model.report_tokens_once(200_000)  # the next reply reports a full context...
    codex(project, codex_home, "resume", tid, "turn 2")
    since = fake_model.count()
    codex(project, codex_home, "resume", tid, "turn 3")  # ...so this turn compacts first
    assert fake_model.seen(f"{project.mark}-compact-", since)


# -- the context-fidelity matrix (docs/harnesses/README.md) -----------------------------------------

def test_matrix_a_compact_in_a_new_process_holds_the_reemit_once(project: Project, fake_model: FakeModel,
                                                                 codex_home: Path) -> None:
    """`codex exec resume` compacts in a new process: the re-emit once, no full digest, and
    no nudge from the SessionStart(resume) that fires just before SessionStart(compact)."""
    tid = start(project, codex_home)
    fake_model.report_tokens_once(200_000)
    codex(project, codex_home, "resume", tid, "turn 2")
    since = fake_model.count()
    codex(project, codex_home, "resume", tid, "turn 3")
    last = tally(fake_model.bodies(since)[-1], project.mark)
    assert last == {"full": 0, "reemit": 1, "reemit_mark": 1, "nudge": 0}, last


def test_matrix_b_resume_holds_the_digest_once_and_no_nudge(project: Project, fake_model: FakeModel,
                                                            codex_home: Path) -> None:
    tid = start(project, codex_home)
    for i in (2, 3):  # nudge lines used to pile up: two after two resumes
        since = fake_model.count()
        codex(project, codex_home, "resume", tid, f"turn {i}")
        last = tally(fake_model.bodies(since)[-1], project.mark)
        assert last == {"full": 1, "reemit": 0, "reemit_mark": 0, "nudge": 0}, (i, last)


def test_an_agents_md_edited_between_two_processes_arrives_once(
        project: Project, fake_model: FakeModel, codex_home: Path) -> None:
    """Issue 22, item 3: Codex loads AGENTS.md itself; edited between ``codex exec`` and
    ``codex exec resume``, the new process reads the new version, so the prompt hook must not
    inject it again under INSTRUCTIONS CHANGED (the old code did: two copies)."""
    import os
    import time

    old, new = f"RULEONE{project.mark}", f"RULETWO{project.mark}"
    agents = project.path / "AGENTS.md"
    agents.write_text(f"# Rules\n- {old}\n")
    past = time.time() - 60
    os.utime(agents, (past, past))
    project.configure(matrix_toml(project.mark) + (
        '\n[[stages]]\nname = "instructions"\nbuiltin = "instructions"\n'))
    tid = start(project, codex_home)
    assert fake_model.seen(old)
    agents.write_text(f"# Rules\n- {old}\n- {new}\n")
    since = fake_model.count()
    codex(project, codex_home, "resume", tid, "turn 2")
    turn2 = fake_model.bodies(since)
    assert turn2 and new in turn2[-1], "the resumed process did not read the new AGENTS.md"
    assert turn2[-1].count(new) == 1, turn2[-1][:3000]
    assert "INSTRUCTIONS CHANGED" not in turn2[-1]
