"""The attack kinds of docs/security.md, re-run on every reader whose text becomes context
(issue 20): the instructions stage (through the terminal digest and the hook), the post-tool
nested injection, the instruction-change refresh, the memory and summary stages. Each kind
is planted where the reader reads; every reader exits 0, never blocks, never prints a secret,
the password file or hidden text, and names what it refused."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from helpers import run_cli

SECRET = "sk-secret-of-the-hook-0123"
HIDDEN = "rule \x1b[8mconcealed\x1b[0m\u202e\U000e0041\n"


def _sparse(path: Path) -> None:
    with path.open("wb") as f:
        f.truncate(3 << 30)


def _loop(path: Path) -> None:
    other = path.with_name(path.name + ".loop")
    other.symlink_to(path)
    path.symlink_to(other)


KINDS: dict[str, Callable[[Path], object]] = {
    "environ": lambda p: p.symlink_to("/proc/self/environ"),
    "passwd": lambda p: p.symlink_to("/etc/passwd"),
    "devzero": lambda p: p.symlink_to("/dev/zero"),
    "fifo": lambda p: os.mkfifo(p),
    "huge": _sparse,
    "binary": lambda p: p.write_bytes(b"rules\0\0binary\n"),
    "hidden": lambda p: p.write_text(HIDDEN),
    "loop": _loop,
}
"""Each attack kind, planted at a path."""


def _env() -> dict[str, str]:
    return {**{k: v for k, v in os.environ.items() if not k.startswith("SUPERVISE_")},
            "MY_API_KEY": SECRET}


def _clean(text: str) -> None:
    assert SECRET not in text and "MY_API_KEY" not in text
    assert "root:x:" not in text and "root:*:" not in text
    assert "\x1b" not in text and "\u202e" not in text and "\U000e0041" not in text
    assert "\0" not in text


def _context(out: bytes) -> str:
    return str(json.loads(out)["hookSpecificOutput"]["additionalContext"]) if out.strip() else ""


def test_instructions_imports_of_every_kind(git_repo: Path) -> None:
    """``@import`` of each kind from AGENTS.md, through the terminal digest and the hook."""
    for kind, make in KINDS.items():
        make(git_repo / f"{kind}.md")
    (git_repo / "AGENTS.md").write_text("rules\n" + "".join(f"see @{k}.md\n" for k in KINDS))
    (git_repo / "supervise.toml").write_text(
        'budget = 30\n[[stages]]\nname = "instructions"\nbuiltin = "instructions"\n'
        "options = { list_nested = false }\n")
    digest = run_cli("digest", cwd=git_repo, env=_env())
    assert digest.returncode == 0, digest.stderr
    payload = json.dumps({"session_id": "s", "cwd": str(git_repo), "source": "startup"}).encode()
    hook = run_cli("hook", "codex", cwd=git_repo, input=payload, env=_env())
    assert hook.returncode == 0, hook.stderr
    for text in (digest.stdout.decode(), hook.stdout.decode()):
        _clean(text)
        for kind in ("environ", "passwd", "devzero", "fifo", "huge", "binary", "loop"):
            assert f"@{kind}.md in AGENTS.md: " in text, (kind, text)
        assert "rule concealed" in text  # the hidden kind: shown, cleaned, counted
    assert "in /proc (a kernel or device file system); never read" in digest.stdout.decode()


def test_post_tool_nested_of_every_kind(git_repo: Path) -> None:
    for kind, make in KINDS.items():
        (git_repo / kind).mkdir()
        make(git_repo / kind / "AGENTS.md")
        (git_repo / kind / "file.py").write_text("")
    texts = []
    for kind in KINDS:
        payload = json.dumps({"session_id": "s", "cwd": str(git_repo), "tool_name": "Read",
                              "hook_event_name": "PostToolUse",
                              "tool_input": {"file_path": str(git_repo / kind / "file.py")}})
        run = subprocess.run([sys.executable, "-m", "supervisor", "hook", "claude", "--event",
                              "post-tool"], input=payload.encode(), capture_output=True,
                             cwd=git_repo, env=_env(), timeout=60)
        assert run.returncode == 0, run.stderr
        texts.append(_context(run.stdout))
    joined = "\n".join(texts)
    _clean(joined)
    for kind in ("environ", "passwd", "devzero", "fifo", "huge", "binary", "loop"):
        assert f"Instructions at {git_repo / kind / 'AGENTS.md'} not injected: " in joined, kind
    assert "rule concealed" in joined


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_refresh_to_every_kind(git_repo: Path, kind: str) -> None:
    """A plain AGENTS.md at start, turned into each kind during the session."""
    (git_repo / "AGENTS.md").write_text("plain rules\n")
    (git_repo / "supervise.toml").write_text(
        'budget = 30\n[[stages]]\nname = "instructions"\nbuiltin = "instructions"\n')
    start = json.dumps({"session_id": "s1", "cwd": str(git_repo), "source": "startup"}).encode()
    run = subprocess.run([sys.executable, "-m", "supervisor", "hook", "claude"], input=start,
                         capture_output=True, cwd=git_repo, env=_env(), timeout=60)
    assert run.returncode == 0, run.stderr
    (git_repo / "AGENTS.md").unlink()
    KINDS[kind](git_repo / "AGENTS.md")
    prompt = json.dumps({"session_id": "s1", "cwd": str(git_repo), "prompt": "go"}).encode()
    run = subprocess.run([sys.executable, "-P", "-m", "supervisor", "hook", "claude", "--event",
                          "prompt"], input=prompt, capture_output=True, cwd=git_repo, env=_env(),
                         timeout=60)
    assert run.returncode == 0, run.stderr
    text = _context(run.stdout)
    _clean(text)
    assert text.startswith("INSTRUCTIONS CHANGED: AGENTS.md"), text
    if kind == "hidden":
        assert "rule concealed" in text
    elif kind == "huge":  # hashed by its head, never injected
        assert "read it again directly" in text
    else:
        assert "stop following its old version" in text


def test_memory_files_of_every_kind(git_repo: Path, tmp_path: Path) -> None:
    from test_stage_memory import TODAY, run_stage

    store = git_repo / ".remember"
    store.mkdir()
    names = ["identity.md", "core-memories.md", f"today-{TODAY}.md", "now.md", "recent.md",
             "archive.md", "remember.md"]
    kinds = [k for k in KINDS if k != "hidden"]
    for name, kind in zip(names, kinds):
        KINDS[kind](store / name)
    (store / "remember.md").unlink(missing_ok=True)
    (store / "remember.md").write_text("# Handoff\n" + HIDDEN)
    proc = run_stage(git_repo, tmp_path / "state", env={"MY_API_KEY": SECRET})
    assert proc.returncode == 0, proc.stdout
    text = proc.stdout.decode()
    _clean(text)
    assert "rule concealed" in text


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_summary_of_every_kind(git_repo: Path, tmp_path: Path, kind: str,
                               monkeypatch: pytest.MonkeyPatch) -> None:
    from test_stage_summary import run

    path = git_repo / "memory" / "summary.md"
    path.parent.mkdir()
    KINDS[kind](path)
    monkeypatch.setenv("MY_API_KEY", SECRET)
    _clean(run(git_repo, tmp_path / "state"))
