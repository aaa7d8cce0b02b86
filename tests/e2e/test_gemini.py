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


def test_a_compression_in_the_tui_reemits_once_at_the_next_prompt(
        project: Project, fake_model: FakeModel, no_leaked_processes: str) -> None:
    """Issue 24: one interactive process; the reply to turn 2 reports 800,000 input tokens, so
    turn 3 really compresses (two summariser requests, then the history restarts from the
    ``<state_snapshot>``: the digest is gone). Turns 2 and 3 get no re-emit (``PreCompress``
    fired before each, compression or not), turn 4 gets it once (the transcript traced the
    compression), turn 5 nothing new. The old code never re-emitted after a compression."""
    import time

    from conftest import RUN_TIMEOUT, matrix_toml, tally, tui_session

    home = os.environ["HOME"]
    os.makedirs(f"{home}/.gemini", exist_ok=True)
    with open(f"{home}/.gemini/settings.json", "w") as f:
        json.dump({"security": {"auth": {"selectedType": "gemini-api-key"}, "folderTrust": {"enabled": False}},
                   "privacy": {"usageStatisticsEnabled": False}, "telemetry": {"enabled": False},
                   "general": {"disableAutoUpdate": True, "disableUpdateNag": True}}, f)
    project.configure(matrix_toml(project.mark))
    project.install("gemini")
    env = clean_env(GEMINI_API_KEY="dummy", GOOGLE_GEMINI_BASE_URL=fake_model.url)
    def digest_ran() -> None:
        # the TUI runs SessionStart in the background and shows its input box at once: a
        # prompt sent before the hook ended goes without the digest (added to the history
        # when the hook ends), so wait for the digest's record, and a moment after it
        deadline = time.monotonic() + RUN_TIMEOUT
        while not (project.path / ".supervise" / "last-digest.json").exists():
            if time.monotonic() > deadline:
                pytest.fail("gemini (TUI): SessionStart never ran the digest")
            time.sleep(0.3)
        time.sleep(2.0)

    tui_session([harness_bin("gemini"), "-m", "fake-model"], project.path, env, fake_model,
                ["turn 1", 800_000, "turn 2", "turn 3", "turn 4", "turn 5"],
                ready=b"Type your message", startup=digest_ran)
    bodies = fake_model.bodies()
    # each turn's own request to the chosen model (Gemini also asks flash-lite models, e.g.
    # to route, and the summariser another): the first to hold its prompt (later ones hold
    # it as history)
    chat = [json.dumps(r.get("body"), ensure_ascii=False) for r in fake_model.requests()
            if "/fake-model:" in r["path"]]
    mains = {t: [b for b in chat if f"turn {t}" in b][0] for t in range(1, 6)}
    assert tally(mains[1], project.mark)["full"] == 1, "the start digest came with turn 1"
    summaries = [b for b in bodies if "state_snapshot" in b]
    assert len(summaries) >= 1, "no real compression happened (the premise)"
    assert "Got it. Thanks for the additional context!" in mains[3]
    assert tally(mains[3], project.mark) == {"full": 0, "reemit": 0, "reemit_mark": 0,
                                             "nudge": 0}, "the compression dropped the digest"
    assert tally(mains[2], project.mark)["reemit"] == 0, "no compression, no re-emit"
    counts = tally(mains[4], project.mark)
    assert counts == {"full": 0, "reemit": 1, "reemit_mark": 1, "nudge": 0}, counts
    assert tally(mains[5], project.mark) == counts, "the re-emit was delivered again"
