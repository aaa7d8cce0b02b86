"""Context fidelity on real sessions (issue 12): the session's working directory, the nudge
tier, double-fired starts, owner identity, pid namespaces and the registered timeout.

Every hook runs as the real CLI below a live fake harness process (``fake_harness``).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from fake_harness import FakeHarness, HookRun
from supervisor._nudge import NUDGE_TEXT

ROOT = Path(__file__).resolve().parent.parent

CONFIG = """\
budget = 30
grace = 0.2
[[stages]]
name = "where"
run = ["sh", "-c", "echo WHERE cwd=[$SUPERVISE_CWD] project=[$SUPERVISE_PROJECT_DIR]"]
reemit = true
[[stages]]
name = "instructions"
builtin = "instructions"
reemit = true
[stages.options]
list_nested = false
[[stages]]
name = "fleet"
run = ["sh", "-c", "echo FLEET-EXCLUSIVE; echo x >> \\"$SUPERVISE_STATE_DIR/fleet.count\\""]
exclusive = true
"""

Harnesses = Callable[..., FakeHarness]


@pytest.fixture
def project(git_repo: Path) -> Path:
    (git_repo / "supervise.toml").write_text(CONFIG)
    (git_repo / "AGENTS.md").write_text("ROOT-RULES\n")
    (git_repo / "pkg").mkdir()
    (git_repo / "pkg" / "AGENTS.md").write_text("PKG-RULES\n")
    return git_repo


@pytest.fixture
def harnesses(tmp_path: Path) -> Iterator[Harnesses]:
    made: list[FakeHarness] = []

    def make(name: str = "claude", **kwargs: object) -> FakeHarness:
        h = FakeHarness(tmp_path / "harnesses", name, **kwargs)  # type: ignore[arg-type]
        made.append(h)
        return h

    yield make
    for h in made:
        h.close()


def payload(source: str | None, cwd: Path, sid: str = "s1") -> bytes:
    data: dict[str, object] = {"session_id": sid, "cwd": str(cwd), "hook_event_name": "SessionStart"}
    if source is not None:
        data["source"] = source
    return json.dumps(data).encode()


def hook(h: FakeHarness, cwd: Path, source: str | None, *args: str, sid: str = "s1",
         run_in: Path | None = None) -> HookRun:
    run = h.run(["hook", *args], cwd=run_in or cwd, stdin=payload(source, cwd, sid))
    assert run.returncode == 0, run.stderr
    return run


def context_of(run: HookRun) -> str:
    """The additionalContext of a Claude-shaped output, or the plain text."""
    text = run.text
    if text.startswith("{"):
        return str(json.loads(text)["hookSpecificOutput"]["additionalContext"])
    return text


def fleet_runs(project: Path) -> int:
    path = project / ".supervise" / "fleet.count"
    return len(path.read_text().splitlines()) if path.exists() else 0


# -- item 1: the session's working directory ------------------------------------------------

@pytest.mark.parametrize("harness", ["claude", "codex", "gemini", "qwen"])
def test_payload_cwd_is_supervise_cwd_and_its_instructions_arrive(
        project: Path, harnesses: Harnesses, harness: str) -> None:
    h = harnesses(harness)
    text = context_of(hook(h, project / "pkg", "startup", harness, run_in=project))
    assert f"WHERE cwd=[{project / 'pkg'}] project=[{project}]" in text
    agents_native = harness in ("codex", "qwen")
    for marker in ("ROOT-RULES", "PKG-RULES"):
        assert text.count(marker) == (0 if agents_native else 1), (harness, marker, text)


def test_cursor_workspace_root_is_the_cwd(project: Path, harnesses: Harnesses) -> None:
    h = harnesses("cursor-agent")
    data = json.dumps({"conversation_id": "c1", "workspace_roots": [str(project / "pkg")],
                       "hook_event_name": "sessionStart"}).encode()
    run = h.run(["hook", "cursor", "--source", "startup"], cwd=project, stdin=data)
    text = json.loads(run.text)["additional_context"]
    assert f"WHERE cwd=[{project / 'pkg'}]" in text
    assert "PKG-RULES" not in text and "ROOT-RULES" not in text  # Cursor applies AGENTS.md itself


def test_digest_in_a_terminal_uses_its_cwd(project: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SUPERVISE_")}
    proc = subprocess.run([sys.executable, "-m", "supervisor", "digest"], cwd=project / "pkg",
                          env=env, capture_output=True, text=True, timeout=60,
                          stdin=subprocess.DEVNULL)
    assert f"WHERE cwd=[{project / 'pkg'}] project=[{project}]" in proc.stdout, proc.stderr
    assert proc.stdout.count("PKG-RULES") == 1 and proc.stdout.count("ROOT-RULES") == 1
    proc = subprocess.run([sys.executable, "-m", "supervisor", "digest", "-C", str(project)],
                          cwd=project / "pkg", env=env, capture_output=True, text=True,
                          timeout=60, stdin=subprocess.DEVNULL)
    assert f"WHERE cwd=[{project}]" in proc.stdout and "PKG-RULES" not in proc.stdout


def test_bridge_cwd_is_supervise_cwd(project: Path, harnesses: Harnesses) -> None:
    h = harnesses("pi")
    run = h.run(["bridge", "--harness", "pi", "--source", "startup", "--session-id", "p1",
                 "--cwd", str(project / "pkg")], cwd=project, stdin=None)
    doc = json.loads(run.text)
    assert f"WHERE cwd=[{project / 'pkg'}]" in doc["text"], doc
    assert "PKG-RULES" not in doc["text"]  # Pi loads AGENTS.md from cwd up itself


def test_a_payload_cwd_that_is_not_a_directory_falls_back(project: Path, harnesses: Harnesses) -> None:
    h = harnesses("claude")
    text = context_of(hook(h, project / "missing", "startup", "claude", run_in=project))
    assert f"WHERE cwd=[{project}]" in text and "PKG-RULES" not in text


# -- item 2: the nudge tier has no side effect --------------------------------------------

def test_grok_gets_the_nudge_alone_and_nothing_is_written(project: Path, harnesses: Harnesses) -> None:
    h = harnesses("grok")
    for source in ("startup", "startup", "compact", "resume", "startup"):
        run = hook(h, project, source, "grok")
        assert run.text == NUDGE_TEXT
    for event in ("prompt", "post-tool"):
        run = h.run(["hook", "grok", "--event", event], cwd=project,
                    stdin=json.dumps({"session_id": "s1", "cwd": str(project),
                                      "tool_name": "Read",
                                      "tool_input": {"file_path": str(project / "pkg" / "x")}}).encode())
        assert run.returncode == 0 and run.stdout == b""
    assert not (project / ".supervise").exists()  # no lock, no count, no claim, no ledger
    assert fleet_runs(project) == 0
