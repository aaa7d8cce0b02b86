"""GitHub Copilot CLI (``copilot -p``, the harness table's pin), offline against the fake model.

Facts used (``docs/harnesses/copilot.md``): BYOK (``COPILOT_PROVIDER_BASE_URL`` with
``COPILOT_OFFLINE=true``) needs no GitHub login; repository hooks in ``.github/hooks/`` load
in prompt mode once the folder is trusted (``COPILOT_ALLOW_ALL=true`` trusts the working
directory); ``--resume=ID`` starts a new process of the same session (SessionStart
``source=resume``). The CLI unpacks its package (about 235 MB) into
``$XDG_CACHE_HOME/copilot`` on first start: the tests keep that cache inside the harness cache
(:data:`XDG_CACHE`), so only the first test of a fresh cache pays for it.
"""

from __future__ import annotations

import json
import re

import pytest

from conftest import CACHE, FakeModel, Project, clean_env, harness_bin, matrix_toml, run_harness, tally

pytestmark = pytest.mark.e2e

RESUME = re.compile(r"copilot --resume=([0-9a-f-]{36})")
XDG_CACHE = CACHE / "copilot-xdg-cache"
"""Where the Copilot CLI unpacks itself (``XDG_CACHE_HOME``): inside the harness cache."""


def copilot(project: Project, fake_model: FakeModel, *args: str) -> str:
    """Run ``copilot ARGS`` in the project; returns the session id it printed."""
    env = clean_env(COPILOT_OFFLINE="true", COPILOT_ALLOW_ALL="true",
                    COPILOT_PROVIDER_BASE_URL=f"{fake_model.url}/v1",
                    COPILOT_PROVIDER_API_KEY="dummy", COPILOT_MODEL="fake-model",
                    XDG_CACHE_HOME=str(XDG_CACHE), COPILOT_AUTO_UPDATE="false")
    proc = run_harness([harness_bin("copilot"), *args, "--no-auto-update"], project.path, env)
    assert proc.returncode == 0, f"copilot {args} failed: {proc.stdout[-1000:]} {proc.stderr[-2000:]}"
    found = RESUME.search(proc.stdout + proc.stderr)
    assert found, f"copilot printed no session id: {proc.stdout[-1000:]}"
    return found.group(1)


@pytest.fixture
def installed(project: Project) -> Project:
    harness_bin("copilot")
    project.configure(matrix_toml(project.mark))
    project.install("copilot")
    return project


def test_startup_digest_then_resume_gets_the_reemit_once(installed: Project,
                                                         fake_model: FakeModel) -> None:
    """The digest reaches the model before the first prompt, once; a ``--resume`` process
    (Copilot sends it only what its own SessionStart printed) gets the re-emit once: no
    second full digest, no nudge (the old code nudged, and the model had nothing)."""
    sid = copilot(installed, fake_model, "-p", "turn 1")
    (request,) = [r for r in fake_model.requests() if r["path"].endswith("/chat/completions")]
    messages = request["body"]["messages"]
    first_user = next(m for m in messages if m["role"] == "user")
    assert f"{installed.mark}-new-full" in json.dumps(first_user), messages[:3]
    assert tally(json.dumps(request["body"]), installed.mark)["full"] == 1
    since = fake_model.count()
    copilot(installed, fake_model, "-p", "turn 2", f"--resume={sid}")
    (body,) = fake_model.bodies(since)
    assert "turn 1" in body, "the premise: the resumed request holds the earlier turn"
    counts = tally(body, installed.mark)
    assert counts["full"] == 0 and counts["reemit"] == 1 and counts["nudge"] == 0, counts
    assert body.count(f"{installed.mark}-resume-reemit") == 1, body[-3000:]
