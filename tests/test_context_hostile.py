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


REFUSED = ("environ", "passwd", "devzero", "fifo", "huge", "binary", "loop")
"""The kinds a reader names and never reads (``hidden`` is read, cleaned and counted)."""


def _imports_of_every_kind(repo: Path) -> None:
    for kind, make in KINDS.items():
        make(repo / f"{kind}.md")
    (repo / "AGENTS.md").write_text("rules\n" + "".join(f"see @{k}.md\n" for k in KINDS))
    (repo / "supervise.toml").write_text(
        'budget = 30\n[[stages]]\nname = "instructions"\nbuiltin = "instructions"\n'
        "options = { list_nested = false }\n")


def test_rules_files_of_every_kind(git_repo: Path) -> None:
    """``.cursor/rules`` files of each kind, through the terminal digest, the Codex hook and
    the Pi bridge (each supplies Cursor's rules itself)."""
    rules = git_repo / ".cursor" / "rules"
    rules.mkdir(parents=True)
    for kind, make in KINDS.items():
        make(rules / f"{kind}.mdc")
    (rules / "hidden.mdc").unlink()
    (rules / "hidden.mdc").write_text("---\nalwaysApply: true\n---\n" + HIDDEN)
    digest = run_cli("digest", cwd=git_repo, env=_env())
    payload = json.dumps({"session_id": "s", "cwd": str(git_repo), "source": "startup"}).encode()
    hook = run_cli("hook", "codex", cwd=git_repo, input=payload, env=_env())
    bridge = run_cli("bridge", "--harness", "pi", "--source", "startup", "--cwd", str(git_repo),
                     "--session-id", "s2", cwd=git_repo, env=_env())
    for run in (digest, hook, bridge):
        assert run.returncode == 0, run.stderr
        text = run.stdout.decode()
        _clean(text)
        assert "rule concealed" in text, text
        for kind in ("environ", "passwd", "devzero", "fifo", "huge", "binary"):
            assert f"{kind}.mdc" in text, (kind, text)


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_a_scoped_rule_turned_into_every_kind_is_never_injected_on_a_read(git_repo: Path,
                                                                          kind: str) -> None:
    """A path-scoped rule indexed at the start, turned into each kind before the read that
    would inject it (Claude's PostToolUse, Cursor's rule)."""
    rules = git_repo / ".cursor" / "rules"
    rules.mkdir(parents=True)
    rule = rules / "ts.mdc"
    rule.write_text("---\nglobs: '**/*.ts'\n---\nplain rule\n")
    (git_repo / "app.ts").write_text("let x = 1\n")
    start = json.dumps({"session_id": "s1", "cwd": str(git_repo), "source": "startup",
                        "hook_event_name": "SessionStart"}).encode()
    assert run_cli("hook", "claude", cwd=git_repo, input=start, env=_env()).returncode == 0
    assert (git_repo / ".supervise" / "rules" / "claude.json").exists()
    rule.unlink()
    if kind == "hidden":
        rule.write_text("---\nglobs: '**/*.ts'\n---\n" + HIDDEN)
    else:
        KINDS[kind](rule)
    read = json.dumps({"session_id": "s1", "cwd": str(git_repo), "tool_name": "Read",
                       "hook_event_name": "PostToolUse",
                       "tool_input": {"file_path": str(git_repo / "app.ts")}}).encode()
    run = run_cli("hook", "claude", "--event", "post-tool", cwd=git_repo, input=read, env=_env())
    assert run.returncode == 0, run.stderr
    text = _context(run.stdout)
    _clean(text)
    if kind == "hidden":
        assert "rule concealed" in text and "globs" not in text
    else:
        assert f"Instructions at {rule} not injected: " in text, text


def test_the_bridge_and_the_re_emit_of_every_kind(git_repo: Path) -> None:
    """``@import`` of each kind, through the Pi bridge's start and Claude's re-emit after
    ``compact`` (the same door as the session start)."""
    _imports_of_every_kind(git_repo)
    bridge = run_cli("bridge", "--harness", "pi", "--source", "startup", "--cwd", str(git_repo),
                     "--session-id", "b1", cwd=git_repo, env=_env())
    texts = [bridge.stdout.decode()]
    assert bridge.returncode == 0, bridge.stderr
    for source in ("startup", "compact"):
        payload = json.dumps({"session_id": "s1", "cwd": str(git_repo), "source": source,
                              "hook_event_name": "SessionStart"}).encode()
        run = run_cli("hook", "claude", cwd=git_repo, input=payload, env=_env())
        assert run.returncode == 0, run.stderr
        texts.append(_context(run.stdout))
    for text in texts:
        _clean(text)
        for kind in REFUSED:
            assert f"@{kind}.md in AGENTS.md: " in text, (kind, text)
        assert "rule concealed" in text


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_mcp_resources_of_every_kind(git_repo: Path, kind: str) -> None:
    """An instruction or memory resource of each kind: listed only as a regular file, read
    only through the door; a memory name with hidden text or a line feed is not offered."""
    from supervisor._errors import ConfigError
    from supervisor.commands import mcp

    KINDS[kind](git_repo / "AGENTS.md")
    store = git_repo / ".remember"
    store.mkdir()
    KINDS[kind](store / "core.md")
    (store / "a\x1b[8mb.md").write_text("named\n")
    (store / "c\u202ed.md").write_text("named\n")
    listed = dict(mcp._resources(git_repo))
    assert not any("\x1b" in uri or "\u202e" in uri for uri in listed)
    for uri in ("watchkeeper://instructions/AGENTS.md", "watchkeeper://memory/core.md"):
        if uri not in listed:
            assert kind in ("environ", "passwd", "devzero", "fifo", "loop"), (kind, uri)
            continue
        os.environ["MY_API_KEY"] = SECRET
        try:
            text = mcp.read_resource_text(git_repo, uri)
        except ConfigError as err:
            text = str(err)
        finally:
            del os.environ["MY_API_KEY"]
        _clean(text)


@pytest.mark.parametrize("folder", [".cursor/rules", ".claude/rules"])
def test_a_rules_folder_linked_out_of_the_project_is_not_walked(git_repo: Path, tmp_path: Path,
                                                               folder: str) -> None:
    """``.cursor/rules -> /`` made the instructions stage walk the whole file system (its
    budget spent, the digest without instructions); a rules folder outside the project is
    not walked, and one flooded with names is walked only so far."""
    outside = tmp_path / "outside"
    (outside / "deep").mkdir(parents=True)
    (outside / "deep" / "secret.mdc").write_text("---\nalwaysApply: true\n---\nOUTSIDE-RULE\n")
    (outside / "deep" / "secret.md").write_text("OUTSIDE-RULE\n")
    link = git_repo / folder
    link.parent.mkdir()
    link.symlink_to(outside)
    (git_repo / "AGENTS.md").write_text("inside rules\n")
    digest = run_cli("digest", cwd=git_repo, env=_env())
    assert digest.returncode == 0, digest.stderr
    text = digest.stdout.decode()
    assert "inside rules" in text and "OUTSIDE-RULE" not in text and "secret" not in text


def test_a_rules_folder_flooded_with_names_is_walked_only_so_far(git_repo: Path) -> None:
    """A rules folder of 5,000 rules is walked to the cap, not to its end."""
    rules = git_repo / ".cursor" / "rules"
    rules.mkdir(parents=True)
    for i in range(5000):
        (rules / f"r{i:05}.mdc").touch()
    code = ("import sys; from pathlib import Path; sys.path.insert(0, sys.argv[1]); "
            "from instructions.rules import rule_files; from instructions.files import Place; "
            "root = Path(sys.argv[2]); print(len(rule_files(Place(root, root, root))))")
    stages = Path(__file__).resolve().parent.parent / "stages"
    run = subprocess.run([sys.executable, "-c", code, str(stages), str(git_repo)],
                         capture_output=True, text=True, timeout=60)
    assert run.returncode == 0, run.stderr
    assert int(run.stdout) <= 4096


def test_a_worktree_rules_folder_linked_into_its_main_checkout_is_read(git_repo: Path,
                                                                        tmp_path: Path) -> None:
    """The main checkout of a linked worktree is inside the door's scope: a worktree's
    ``.cursor/rules`` linked there is walked and its rules supplied."""
    shared = git_repo / "shared-rules"
    shared.mkdir()
    (shared / "all.mdc").write_text("---\nalwaysApply: true\n---\nMAIN-CHECKOUT-RULE\n")
    linked = tmp_path / "linked"
    subprocess.run(["git", "-C", str(git_repo), "worktree", "add", "-q", str(linked)],
                   check=True, timeout=30)
    (linked / ".cursor").mkdir()
    (linked / ".cursor" / "rules").symlink_to(shared)
    digest = run_cli("digest", cwd=linked, env=_env())
    assert digest.returncode == 0, digest.stderr
    assert "MAIN-CHECKOUT-RULE" in digest.stdout.decode()


def _remove_chain(top: Path) -> None:
    """Remove a folder chain too deep for ``shutil.rmtree`` (recursive in Python 3.11: it and
    pytest's own clean-up of old temporary folders raise RecursionError on it), descending
    by descriptors."""
    import stat

    fds = [os.open(top, os.O_RDONLY | os.O_DIRECTORY)]
    while fds:
        sub = None
        for name in os.listdir(fds[-1]):
            if stat.S_ISDIR(os.stat(name, dir_fd=fds[-1], follow_symlinks=False).st_mode):
                sub = name
                break
            os.unlink(name, dir_fd=fds[-1])
        if sub is not None:
            fds.append(os.open(sub, os.O_RDONLY | os.O_DIRECTORY, dir_fd=fds[-1]))
            continue
        os.close(fds.pop())
        if fds:
            for name in os.listdir(fds[-1]):
                try:
                    os.rmdir(name, dir_fd=fds[-1])  # the emptied child
                except OSError:
                    pass
    os.rmdir(top)


def test_a_deep_rules_tree_leaves_the_instructions_whole(git_repo: Path) -> None:
    """A 1,200-deep folder chain under ``.cursor/rules`` overflowed the walk's recursion
    (``rglob``, ``os.walk``): the instructions stage died and the digest lost AGENTS.md."""
    (git_repo / "AGENTS.md").write_text("top rules\n")
    rules = git_repo / ".cursor" / "rules"
    rules.mkdir(parents=True)
    fd = os.open(rules, os.O_RDONLY | os.O_DIRECTORY)
    try:
        try:
            for _ in range(1200):
                os.mkdir("a", dir_fd=fd)
                deeper = os.open("a", os.O_RDONLY | os.O_DIRECTORY, dir_fd=fd)
                os.close(fd)
                fd = deeper
            made = os.open("x.mdc", os.O_WRONLY | os.O_CREAT, 0o644, dir_fd=fd)
            os.write(made, b"---\nalwaysApply: true\n---\nDEEP\n")
            os.close(made)
        finally:
            os.close(fd)
        digest = run_cli("digest", cwd=git_repo, env=_env())
        assert digest.returncode == 0, digest.stderr
        assert "top rules" in digest.stdout.decode(), digest.stdout.decode()
    finally:
        _remove_chain(rules / "a")


def test_a_rule_with_deeply_nested_frontmatter_is_named_not_fatal(git_repo: Path) -> None:
    """PyYAML composes recursively: a 20,000-deep ``globs: [[[...`` frontmatter raised
    RecursionError through the instructions stage, and the digest lost AGENTS.md."""
    (git_repo / "AGENTS.md").write_text("top rules\n")
    rules = git_repo / ".cursor" / "rules"
    rules.mkdir(parents=True)
    (rules / "deep.mdc").write_text("---\nglobs: " + "[" * 20000 + "]" * 20000 + "\n---\nbody\n")
    digest = run_cli("digest", cwd=git_repo, env=_env())
    assert digest.returncode == 0, digest.stderr
    text = digest.stdout.decode()
    assert "top rules" in text, text
    assert "deep.mdc: rule not applied: its frontmatter is nested too deeply to parse" in text
