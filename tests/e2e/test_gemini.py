"""Gemini CLI 0.61.0 (``gemini -p``), against the fake model server (Gemini API).

Facts used (brief, harnesses.md section 6): hooks are on by default; project settings need a
trusted folder, so the user settings turn folder trust off; the SessionStart context is
prepended to the prompt as ``<hook_context>`` in non-interactive mode.
"""

from __future__ import annotations

import json
import os

import pytest

from conftest import FakeModel, Project, clean_env, harness_bin, run_harness

pytestmark = pytest.mark.e2e


def test_startup_digest_reaches_the_model(project: Project, fake_model: FakeModel) -> None:
    gemini = harness_bin("gemini")
    home = os.environ["HOME"]  # isolated per test by the root conftest
    os.makedirs(f"{home}/.gemini", exist_ok=True)
    with open(f"{home}/.gemini/settings.json", "w") as f:
        json.dump({"security": {"auth": {"selectedType": "gemini-api-key"}, "folderTrust": {"enabled": False}},
                   "privacy": {"usageStatisticsEnabled": False}, "telemetry": {"enabled": False},
                   "general": {"disableAutoUpdate": True, "disableUpdateNag": True}}, f)
    project.install("gemini")
    env = clean_env(GEMINI_API_KEY="dummy", GOOGLE_GEMINI_BASE_URL=fake_model.url)
    proc = run_harness([gemini, "-m", "fake-model", "-p", "turn 1"], project.path, env)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert fake_model.seen(f"{project.mark}-startup-")


def test_resume_gets_the_digest_again(project: Project, fake_model: FakeModel) -> None:
    """Issue 22, item 5: ``gemini -r latest`` sends no earlier turn (the first digest
    included), so the resume is served as a re-emit: the resumed request holds the digest's
    marker (the old code gave it only the nudge)."""
    gemini = harness_bin("gemini")
    home = os.environ["HOME"]
    os.makedirs(f"{home}/.gemini", exist_ok=True)
    with open(f"{home}/.gemini/settings.json", "w") as f:
        json.dump({"security": {"auth": {"selectedType": "gemini-api-key"}, "folderTrust": {"enabled": False}},
                   "privacy": {"usageStatisticsEnabled": False}, "telemetry": {"enabled": False},
                   "general": {"disableAutoUpdate": True, "disableUpdateNag": True}}, f)
    project.install("gemini")
    env = clean_env(GEMINI_API_KEY="dummy", GOOGLE_GEMINI_BASE_URL=fake_model.url)
    proc = run_harness([gemini, "-m", "fake-model", "-p", "turn 1"], project.path, env)
    assert proc.returncode == 0, proc.stderr[-2000:]
    since = fake_model.count()
    proc = run_harness([gemini, "-m", "fake-model", "-r", "latest", "-p", "turn 2"], project.path, env)
    assert proc.returncode == 0, proc.stderr[-2000:]
    resumed = [b for b in fake_model.bodies(since) if "turn 2" in b]
    assert resumed, "the resumed turn never reached the model"
    assert "turn 1" not in resumed[-1]  # the premise: Gemini dropped the earlier turn
    assert resumed[-1].count(f"{project.mark}-") >= 1, resumed[-1][:3000]
