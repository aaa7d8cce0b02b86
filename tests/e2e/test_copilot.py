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
import queue
import re
import subprocess
import threading
import time
from collections.abc import Callable

import pytest

from conftest import (CACHE, RUN_TIMEOUT, FakeModel, Project, clean_env, harness_bin, matrix_toml,
                      run_harness, tally)

pytestmark = pytest.mark.e2e

RESUME = re.compile(r"copilot --resume=([0-9a-f-]{36})")
XDG_CACHE = CACHE / "copilot-xdg-cache"
"""Where the Copilot CLI unpacks itself (``XDG_CACHE_HOME``): inside the harness cache."""


def copilot_env(fake_model: FakeModel) -> dict[str, str]:
    """BYOK against the fake model, the folder trusted, the unpacked CLI in the cache."""
    return clean_env(COPILOT_OFFLINE="true", COPILOT_ALLOW_ALL="true",
                     COPILOT_PROVIDER_BASE_URL=f"{fake_model.url}/v1",
                     COPILOT_PROVIDER_API_KEY="dummy", COPILOT_MODEL="fake-model",
                     XDG_CACHE_HOME=str(XDG_CACHE), COPILOT_AUTO_UPDATE="false")


def copilot(project: Project, fake_model: FakeModel, *args: str) -> str:
    """Run ``copilot ARGS`` in the project; returns the session id it printed."""
    env = copilot_env(fake_model)
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


def test_matrix_compact_arms_the_reemit_and_the_next_process_holds_it_once(
        installed: Project, fake_model: FakeModel) -> None:
    """``-p /compact`` fires PreCompact, whose output Copilot drops and after which no
    SessionStart follows: it arms the re-emit. The next process's SessionStart delivers it
    and drops the arm, so its request carries the re-emit once, and no prompt hook repeats it."""
    sid = copilot(installed, fake_model, "-p", "turn 1")
    copilot(installed, fake_model, "-p", "turn 2", f"--resume={sid}")
    before = fake_model.count()
    copilot(installed, fake_model, "-p", "/compact", f"--resume={sid}")
    assert any("summar" in b.lower() for b in fake_model.bodies(before)), \
        "the /compact run made no summary request"
    wake = installed.path / ".supervise" / "fastpath" / "wake-armed"
    assert wake.exists(), "PreCompact did not arm the re-emit"
    since = fake_model.count()
    copilot(installed, fake_model, "-p", "turn 3", f"--resume={sid}")
    (body,) = fake_model.bodies(since)
    counts = tally(body, installed.mark)
    assert counts["full"] == 0 and counts["reemit"] == 1 and counts["nudge"] == 0, counts
    assert not wake.exists(), "the delivered start dropped the arm"


def acp_session(project: Project, fake_model: FakeModel, prompts: list[str],
                before: Callable[[str], None] = lambda text: None) -> str:
    """One ``copilot --acp`` process (Agent Client Protocol, JSON-RPC lines on stdio): a new
    session, then each prompt as its own turn, in order (``before(prompt)`` runs before each);
    ``/compact`` compacts in place (PreCompact fires, then a summary request). Permission
    requests are cancelled. Returns the session id (``--resume=ID`` takes it). The process
    ends when its stdin closes, else it is killed (bounded)."""
    proc = subprocess.Popen([str(harness_bin("copilot")), "--acp", "--no-auto-update"],
                            cwd=project.path, env=copilot_env(fake_model), text=True,
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.DEVNULL)
    assert proc.stdin is not None and proc.stdout is not None
    lines: queue.Queue[str] = queue.Queue()
    reader = threading.Thread(target=lambda: [lines.put(line) for line in proc.stdout or ()],
                              daemon=True)
    reader.start()
    ids = iter(range(1, 100))

    def call(method: str, params: dict[str, object]) -> dict[str, object]:
        assert proc.stdin is not None
        ident = next(ids)
        proc.stdin.write(json.dumps({"jsonrpc": "2.0", "id": ident, "method": method,
                                     "params": params}) + "\n")
        proc.stdin.flush()
        deadline = time.monotonic() + RUN_TIMEOUT
        while time.monotonic() < deadline:
            try:
                msg = json.loads(lines.get(timeout=1))
            except queue.Empty:
                continue
            if msg.get("id") == ident and "method" not in msg:
                assert "result" in msg, f"{method}: {msg}"
                return dict(msg["result"])
            if "method" in msg and "id" in msg:  # the agent asks (a permission): refuse
                proc.stdin.write(json.dumps({"jsonrpc": "2.0", "id": msg["id"], "result":
                                             {"outcome": {"outcome": "cancelled"}}}) + "\n")
                proc.stdin.flush()
        pytest.fail(f"copilot --acp: no answer to {method} in {RUN_TIMEOUT:g}s")

    try:
        call("initialize", {"protocolVersion": 1, "clientCapabilities": {}})
        sid = call("session/new", {"cwd": str(project.path), "mcpServers": []})["sessionId"]
        for text in prompts:
            before(text)
            call("session/prompt", {"sessionId": sid, "prompt": [{"type": "text", "text": text}]})
    finally:
        proc.stdin.close()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        reader.join(timeout=10)  # at the pipe's end once the process is gone
        proc.stdout.close()
    return str(sid)


def test_matrix_compact_in_the_same_process_reemits_once_at_the_next_prompt(
        installed: Project, fake_model: FakeModel) -> None:
    """``/compact`` in one ``copilot --acp`` process drops the SessionStart context from the
    history. PreCompact arms the re-emit, the next turn's UserPromptSubmit (same process)
    delivers it once: that request holds it once and no full digest; the turn after it holds
    nothing new (the old code: no re-emit at all, the context was gone)."""
    acp_session(installed, fake_model, ["turn 1", "turn 2", "/compact", "turn 3", "turn 4"])
    bodies = fake_model.bodies()
    summaries = [i for i, b in enumerate(bodies) if "summary of the conversation" in b]
    assert summaries, "the /compact turn made no summary request"
    after = [b for b in bodies[summaries[-1] + 1:] if "turn 3" in b]
    assert after, "no request after the compaction"
    # the premise: the compaction dropped the SessionStart context (the summary request held it)
    assert tally(bodies[summaries[-1]], installed.mark)["full"] == 1
    counts = tally(after[0], installed.mark)
    assert counts == {"full": 0, "reemit": 1, "reemit_mark": 1, "nudge": 0}, counts
    last = [b for b in bodies if "turn 4" in b][-1]
    assert tally(last, installed.mark) == counts, "the re-emit was delivered again"
