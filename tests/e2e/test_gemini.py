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


def tui_session(project: Project, fake_model: FakeModel, prompts: list[str | int],
                env: dict[str, str]) -> None:
    """One interactive ``gemini`` process on a pseudo-terminal: each prompt typed and sent
    (Enter), the next one once the fake model got that prompt's request and the log has
    been quiet for 3 s; an int instead of a prompt makes the next reply report that many
    input tokens (a real compression on the turn after it). The process group is ended by
    its pid (``gemini`` relaunches itself as a child) when the prompts are done."""
    import pty
    import select
    import signal
    import threading
    import time

    from conftest import RUN_TIMEOUT

    gemini = harness_bin("gemini")
    pid, fd = pty.fork()  # the child leads a new session (and process group) on the pty
    if pid == 0:  # pragma: no cover - the child
        os.chdir(project.path)
        os.execve(str(gemini), [str(gemini), "-m", "fake-model"],
                  {**env, "TERM": "xterm-256color"})
    import fcntl
    import struct
    import termios

    fcntl.ioctl(fd, termios.TIOCSWINSZ, struct.pack("HHHH", 40, 120, 0, 0))  # 40 x 120
    done, ready = threading.Event(), threading.Event()
    screen: list[bytes] = []

    def drain() -> None:  # the TUI blocks once the terminal's buffer is full: keep reading
        while not done.is_set():
            if select.select([fd], [], [], 0.2)[0]:
                try:
                    chunk = os.read(fd, 65536)
                except OSError:
                    return
                if not chunk:
                    return
                screen.append(chunk)
                del screen[:-64]
                if b"Type your message" in b"".join(screen[-2:]):
                    ready.set()  # the empty input box is on the screen

    reader = threading.Thread(target=drain, daemon=True)
    reader.start()

    def settle(before: int, text: str) -> None:
        deadline = time.monotonic() + RUN_TIMEOUT
        while time.monotonic() < deadline:
            if any(text in b for b in fake_model.bodies(before)):
                break
            time.sleep(0.3)
        else:
            import re

            shown = re.sub(rb"\x1b\[[0-9;?]*[A-Za-z]|\x1b[()][A-Z0-9]", b"", b"".join(screen))
            pytest.fail(f"gemini (TUI): the prompt {text!r} never reached the model; the "
                        f"screen's end: {shown[-1500:]!r}")
        count = fake_model.count()
        quiet = time.monotonic()
        while time.monotonic() - quiet < 3.0 and time.monotonic() < deadline:
            time.sleep(0.3)
            if fake_model.count() != count:
                count, quiet = fake_model.count(), time.monotonic()

    try:
        # the TUI runs SessionStart in the background and shows its input box at once: a
        # prompt sent before the hook ended goes without the digest (added to the history
        # when the hook ends), so wait for the digest's record, and a moment after it
        deadline = time.monotonic() + RUN_TIMEOUT
        while not (project.path / ".supervise" / "last-digest.json").exists():
            if time.monotonic() > deadline:
                pytest.fail("gemini (TUI): SessionStart never ran the digest")
            time.sleep(0.3)
        time.sleep(2.0)
        for prompt in prompts:
            if isinstance(prompt, int):
                fake_model.report_tokens_once(prompt)
                continue
            if not ready.wait(RUN_TIMEOUT):  # keys typed before the box is up are lost
                pytest.fail("gemini (TUI): no input box")
            time.sleep(1.0)
            ready.clear()
            before = fake_model.count()
            os.write(fd, prompt.encode())
            time.sleep(0.5)
            os.write(fd, b"\r")
            settle(before, prompt)
    finally:
        try:
            os.killpg(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        os.waitpid(pid, 0)
        done.set()
        reader.join(timeout=5)
        os.close(fd)


def test_a_compression_in_the_tui_reemits_once_at_the_next_prompt(
        project: Project, fake_model: FakeModel, no_leaked_processes: str) -> None:
    """Issue 24: one interactive process; the reply to turn 2 reports 800,000 input tokens, so
    turn 3 really compresses (two summariser requests, then the history restarts from the
    ``<state_snapshot>``: the digest is gone). Turns 2 and 3 get no re-emit (``PreCompress``
    fired before each, compression or not), turn 4 gets it once (the transcript traced the
    compression), turn 5 nothing new. The old code never re-emitted after a compression."""
    from conftest import matrix_toml, tally

    home = os.environ["HOME"]
    os.makedirs(f"{home}/.gemini", exist_ok=True)
    with open(f"{home}/.gemini/settings.json", "w") as f:
        json.dump({"security": {"auth": {"selectedType": "gemini-api-key"}, "folderTrust": {"enabled": False}},
                   "privacy": {"usageStatisticsEnabled": False}, "telemetry": {"enabled": False},
                   "general": {"disableAutoUpdate": True, "disableUpdateNag": True}}, f)
    project.configure(matrix_toml(project.mark))
    project.install("gemini")
    env = clean_env(GEMINI_API_KEY="dummy", GOOGLE_GEMINI_BASE_URL=fake_model.url)
    tui_session(project, fake_model, ["turn 1", 800_000, "turn 2", "turn 3", "turn 4", "turn 5"],
                env)
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
