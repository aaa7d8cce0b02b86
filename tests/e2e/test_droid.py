"""Factory Droid (``droid exec``, the harness table's pin and its Linux binary), offline.

Facts used (``docs/harnesses/droid.md``): a BYOK custom model (``customModels`` in
``~/.factory/settings.json``, ``generic-chat-completion-api``, a local ``baseUrl``) needs no
login; project hooks in ``.factory/settings.json`` run in ``droid exec`` with no trust step;
``droid exec -s ID`` (resume) needs Factory's servers, so only a session start runs here.
"""

from __future__ import annotations

import json
import os

import pytest

from conftest import FakeModel, Project, clean_env, harness_bin, run_harness, tally, matrix_toml

pytestmark = pytest.mark.e2e


def test_startup_digest_reaches_the_model_once(project: Project, fake_model: FakeModel) -> None:
    droid = harness_bin("droid")
    home = os.environ["HOME"]  # isolated per test by the root conftest
    os.makedirs(f"{home}/.factory", exist_ok=True)
    with open(f"{home}/.factory/settings.json", "w") as f:
        json.dump({"customModels": [{"model": "fake-model", "displayName": "Fake",
                                     "baseUrl": f"{fake_model.url}/v1", "apiKey": "dummy",
                                     "provider": "generic-chat-completion-api",
                                     "maxOutputTokens": 1000}]}, f)
    project.configure(matrix_toml(project.mark))
    project.install("droid")
    proc = run_harness([droid, "exec", "-m", "custom:fake-model", "turn 1"], project.path,
                       clean_env())
    assert proc.returncode == 0, proc.stdout[-1000:] + proc.stderr[-2000:]
    bodies = [b for b in fake_model.bodies() if project.mark in b]
    assert bodies, "the digest reached no request"
    counts = tally(bodies[0], project.mark)
    assert counts["full"] == 1 and counts["nudge"] == 0, counts
    assert f"{project.mark}-startup-full" in bodies[0]
