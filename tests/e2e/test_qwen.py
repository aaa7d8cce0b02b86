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
