"""Qwen Code 0.24.4 (``qwen -p``), against the fake model server (OpenAI Chat Completions).

Facts used (observed with 0.24.4): hooks are on by default; project settings need a trusted
folder, so the user settings turn folder trust off; SessionStart fires in one-shot mode too
(0.15.10 fired it only interactively) and its context reaches the first request; a resumed
session (``-c``) sends the earlier turns but not their hook context; PostToolUse context is
appended to the tool's result (``read_file``, ``tool_input.file_path``).
"""

from __future__ import annotations

import json
import os

import pytest

from conftest import FakeModel, Project, clean_env, harness_bin, run_harness

pytestmark = pytest.mark.e2e


def qwen_env(fake: FakeModel) -> dict[str, str]:
    """The user settings (OpenAI auth, folder trust off, no telemetry or update check) in the
    test's own HOME, and the environment naming the fake model."""
    home = os.environ["HOME"]  # isolated per test by the root conftest
    os.makedirs(f"{home}/.qwen", exist_ok=True)
    path = f"{home}/.qwen/settings.json"
    data = json.load(open(path)) if os.path.exists(path) else {}
    data.update({"security": {"auth": {"selectedType": "openai"}, "folderTrust": {"enabled": False}},
                 "privacy": {"usageStatisticsEnabled": False}, "telemetry": {"enabled": False},
                 "general": {"enableAutoUpdate": False}})
    with open(path, "w") as f:
        json.dump(data, f)
    return clean_env(OPENAI_API_KEY="dummy", OPENAI_BASE_URL=f"{fake.url}/v1",
                     OPENAI_MODEL="fake-model")


def qwen(project: Project, env: dict[str, str], *args: str) -> None:
    proc = run_harness([harness_bin("qwen"), *args], project.path, env)
    assert proc.returncode == 0, f"qwen {args} failed: {proc.stderr[-2000:]}"


def test_startup_digest_reaches_the_model_in_one_shot_mode(project: Project,
                                                          fake_model: FakeModel) -> None:
    harness_bin("qwen")
    project.install("qwen")
    qwen(project, qwen_env(fake_model), "-p", "turn 1")
    first = [b for b in fake_model.bodies() if "turn 1" in b][0]
    assert first.count(f"{project.mark}-startup-full") == 1, first[-3000:]


def test_a_real_compression_in_a_new_process_gets_the_reemit_once(project: Project,
                                                                 fake_model: FakeModel) -> None:
    """Issue 24: turn 1's reply reports 800,000 prompt tokens, so ``qwen -c -p "turn 2"``
    really compresses before its turn (a summariser request holding turn 1 and the digest,
    then the history restarts from the ``<state_snapshot>``: turn 1 is gone). Qwen also reads
    the summariser's reported usage to judge the result (a small one is "inflated" and the
    compression fails), so that reply reports 800,000 too. The new process's SessionStart is a
    resume (not ``compact``): its re-emit reaches turn 2's request once, no full digest, no
    nudge; turn 3 holds one re-emit, not two (the context is not stored in the session)."""
    from conftest import matrix_toml, tally

    harness_bin("qwen")
    project.configure(matrix_toml(project.mark))
    project.install("qwen")
    env = qwen_env(fake_model)
    fake_model.report_tokens_once(800_000)
    qwen(project, env, "-p", "turn 1")
    since = fake_model.count()
    fake_model.report_tokens_once(800_000)  # the summariser's reply: a real shrink
    qwen(project, env, "-c", "-p", "turn 2")
    turn2 = fake_model.bodies(since)
    summaries = [b for b in turn2 if "state_snapshot" in b and "turn 1" in b]
    assert summaries, "no real compression happened (the premise)"
    main2 = [b for b in turn2 if "turn 2" in b][0]
    assert "turn 1" not in main2, "the history was not replaced by the summary (the premise)"
    want = {"full": 0, "reemit": 1, "reemit_mark": 0, "nudge": 0}
    assert tally(main2, project.mark) == want, main2[-3000:]
    assert main2.count(f"{project.mark}-resume-reemit") == 1
    since = fake_model.count()
    qwen(project, env, "-c", "-p", "turn 3")
    main3 = [b for b in fake_model.bodies(since) if "turn 3" in b][0]
    assert tally(main3, project.mark) == want, "the re-emit piled up"
