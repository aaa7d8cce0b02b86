"""Built-in context stages through the real Claude Code CLI (the harness table's newest pin,
and its floor where said) and the fake model.

- Seed 000: after ``/compact`` the model's request holds identity in full and every other
  memory file as its path and byte size, never its body.
- Seed 003: a Read below a nested AGENTS.md injects that file once (PostToolUse hook); after
  a compaction the next Read in the subtree injects it again.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from conftest import FakeModel, Project
from test_claude import claude, compact

pytestmark = pytest.mark.e2e


@pytest.fixture
def installed(project: Project) -> Project:
    from conftest import harness_bin

    harness_bin("claude")
    project.install("claude")
    return project


def test_memory_recap_then_compact_reaches_the_model(installed: Project, fake_model: FakeModel) -> None:
    remember = installed.path / ".remember"
    remember.mkdir()
    (remember / "identity.md").write_text("IDENTITYE2E I am the careful agent.\n")
    (remember / "now.md").write_text("NOWE2E writing tests\n")
    (remember / "recent.md").write_text("RECENTE2E fixed a bug\n")
    (remember / "remember.md").write_text("# Handoff\nHANDOFFE2E finish it\n")
    installed.configure('budget = 20\ngrace = 0.5\n[[stages]]\nname = "memory"\nbuiltin = "memory"\n'
                        'reemit = true\n')
    sid = claude(installed, fake_model, "-p", "turn 1")["session_id"]
    assert fake_model.seen("NOWE2E") and fake_model.seen("IDENTITYE2E")
    for i in (2, 3):
        claude(installed, fake_model, "--resume", sid, "-p", f"turn {i}")
    compact(installed, fake_model, sid)
    since = fake_model.count()
    claude(installed, fake_model, "--resume", sid, "-p", "after compact")
    after = [b for b in fake_model.bodies(since) if "Not re-injected at compact" in b]
    assert after, "no request after /compact carried the compact recap"
    text = after[-1]
    assert "IDENTITYE2E" in text and "HANDOFFE2E" in text
    assert f"{remember / 'now.md'} (21 bytes)" in text and "NOWE2E" not in text


def _nested_hits(fake: FakeModel, since: int) -> int:
    """Requests from ``since`` on that carry the nested AGENTS.md text for the first time in
    their own conversation (an injection shows up in every later request of the session)."""
    return sum("NESTEDE2E" in body for body in fake.bodies(since))


@pytest.mark.parametrize("floor", [False, True], ids=["newest", "floor"])
def test_nested_agents_md_injected_on_read_and_again_after_compaction(
        installed: Project, fake_model: FakeModel, floor: bool) -> None:
    """At the floor (2.1.197) the post-tool hook injects the nested AGENTS.md once per
    compaction epoch. From 2.1.281 Claude Code loads it itself on the read, so the hook never
    injects it (its ``Instructions from:`` block is in no request). That Claude's own load
    repeats in a resumed process (two copies after ``--resume`` and a second read: seen with
    no hook installed at all) is Claude's, recorded in docs/harnesses/claude.md."""
    sub = installed.path / "pkg" / "inner"
    sub.mkdir(parents=True)
    (installed.path / "pkg" / "AGENTS.md").write_text("NESTEDE2E rules for pkg: use tabs.\n")
    target = sub / "file.txt"
    target.write_text("hello from the file\n")
    installed.configure('budget = 20\ngrace = 0.5\n[[stages]]\nname = "instructions"\n'
                        'builtin = "instructions"\nreemit = true\n')
    read = ("-p", f"FAKE_READ {target}", "--allowedTools", "Read")
    sid = claude(installed, fake_model, *read, floor=floor)["session_id"]
    assert fake_model.seen("hello from the file"), "the fake model never saw the Read result"
    assert fake_model.seen("NESTEDE2E"), "the nested AGENTS.md did not reach the model"
    ours = f"Instructions from: {installed.path / 'pkg' / 'AGENTS.md'}"
    # A second read in the same session: the text is already in the conversation, and the
    # hook must not add a second copy.
    since = fake_model.count()
    claude(installed, fake_model, "--resume", sid, *read, floor=floor)
    last = fake_model.bodies(since)[-1]
    if floor:
        assert last.count("NESTEDE2E rules") == 1
    compact(installed, fake_model, sid, floor=floor)
    since = fake_model.count()
    claude(installed, fake_model, "--resume", sid, *read, floor=floor)
    assert any("NESTEDE2E rules" in body for body in fake_model.bodies(since)), \
        "after compaction the nested AGENTS.md was not injected again"
    assert fake_model.seen(ours) == floor, "the hook injected what Claude loads itself"


def test_resident_summary_reaches_the_model_without_its_frontmatter(
        installed: Project, fake_model: FakeModel) -> None:
    """Seed 002 through the real Claude CLI: the summary body, framed as background, reaches
    the model; its YAML frontmatter never does."""
    (installed.path / ".remember").mkdir()
    (installed.path / ".remember" / "identity.md").write_text("IDENTITY2E\n")
    memory = installed.path / "memory"
    memory.mkdir()
    (memory / "summary.md").write_text(
        "---\nupdated_at: 2026-11-29\nsources: FRONTMATTER2E\n---\nSUMMARY2E the plan\n")
    installed.configure('budget = 20\ngrace = 0.5\n[[stages]]\nname = "memory"\nbuiltin = "memory"\n'
                        '[[stages]]\nname = "summary"\nbuiltin = "summary"\n')
    claude(installed, fake_model, "-p", "turn 1")
    assert fake_model.seen("SUMMARY2E the plan")
    assert not fake_model.seen("FRONTMATTER2E")
    assert fake_model.seen("never overrides current user instructions")


def _agents_tree(project: Project) -> Path:
    """A project whose only instruction files are AGENTS.md files: the root's and one in
    ``pkg/``, with a file below it to read; the digest runs the instructions stage."""
    mark = project.mark
    (project.path / "AGENTS.md").write_text(f"ROOTAGENTS{mark} root rules.\n")
    (project.path / "pkg" / "inner").mkdir(parents=True)
    (project.path / "pkg" / "AGENTS.md").write_text(f"PKGAGENTS{mark} pkg rules.\n")
    target = project.path / "pkg" / "inner" / "file.txt"
    target.write_text("hello from the file\n")
    project.configure('budget = 20\ngrace = 0.5\n[[stages]]\nname = "instructions"\n'
                      'builtin = "instructions"\nreemit = true\n')
    return target


@pytest.mark.parametrize("floor", [False, True], ids=["newest", "floor"])
def test_agents_md_reaches_the_model_once_at_start_and_on_a_nested_read(
        project: Project, fake_model: FakeModel, floor: bool) -> None:
    """Issue 22, item 1: Claude Code 2.1.332 loads AGENTS.md itself (from 2.1.281, the harness
    table's era; 2.1.197 does not). With the version learned from the harness package, the
    root AGENTS.md is in the first request exactly once (the old code's digest added a second
    copy beside Claude's own), and a read below ``pkg/`` brings ``pkg/AGENTS.md`` exactly once
    (the old post-tool hook injected it beside Claude's own nested load). At the floor the
    digest and the post-tool hook supply them, once each."""
    from conftest import harness_bin

    harness_bin("claude", floor)
    target = _agents_tree(project)
    project.install("claude")
    mark = project.mark
    read = ("-p", f"FAKE_READ {target}", "--allowedTools", "Read")
    claude(project, fake_model, *read, floor=floor)
    bodies = fake_model.bodies()
    assert bodies, "no request reached the fake model"
    assert bodies[0].count(f"ROOTAGENTS{mark}") == 1, bodies[0][:3000]
    assert max(b.count(f"ROOTAGENTS{mark}") for b in bodies) == 1
    assert max(b.count(f"PKGAGENTS{mark}") for b in bodies) == 1, "pkg/AGENTS.md not once"


def test_instructions_loaded_reports_claude_md_files_but_not_agents_md(
        project: Project, fake_model: FakeModel, tmp_path: Path) -> None:
    """Issue 22: what Claude Code's ``InstructionsLoaded`` hook reports at the newest pin
    (2.1.332). It fires, at project scope in ``-p`` mode, for the CLAUDE.md family: the root
    ``CLAUDE.md`` with ``load_reason`` ``session_start``, and ``pkg/CLAUDE.md`` with
    ``nested_traversal`` and the read file as ``trigger_file_path``. It never fires for the
    AGENTS.md files Claude loads itself (from 2.1.281, when no CLAUDE file is on the path),
    although their text reaches the model: so it cannot tell watchkeeper the one
    version-dependent fact (docs/harnesses/claude.md says why it is not used). A version
    that starts reporting AGENTS.md fails this test, and the hook becomes worth reading."""
    import json

    from conftest import harness_bin

    harness_bin("claude")
    log = tmp_path / "instructions-loaded.jsonl"
    settings = {"hooks": {"InstructionsLoaded": [{"hooks": [{"type": "command", "command":
                f"sh -c 'cat >> \"{log}\"; echo >> \"{log}\"'"}]}]}}
    mark = project.mark
    (project.path / ".claude").mkdir()
    (project.path / ".claude" / "settings.json").write_text(json.dumps(settings))
    pkg = project.path / "pkg"
    pkg.mkdir()
    (pkg / "code.txt").write_text("code\n")

    def events() -> list[dict]:
        if not log.exists():
            return []
        return [json.loads(line) for line in log.read_text().splitlines() if line.strip()]

    (project.path / "CLAUDE.md").write_text(f"ROOTCLAUDE{mark}\n@AGENTS.md\n")
    (project.path / "AGENTS.md").write_text(f"INCLUDED{mark}\n")
    (pkg / "CLAUDE.md").write_text(f"PKGCLAUDE{mark}\n")
    claude(project, fake_model, "-p", f"FAKE_READ {pkg / 'code.txt'}", "--allowedTools", "Read")
    got = {(e["file_path"], e.get("load_reason"), e.get("trigger_file_path")) for e in events()}
    assert (str(project.path / "CLAUDE.md"), "session_start", None) in got, got
    assert (str(pkg / "CLAUDE.md"), "nested_traversal", str(pkg / "code.txt")) in got, got
    included = [e for e in events() if e["file_path"] == str(project.path / "AGENTS.md")]
    assert [(e["load_reason"], e.get("parent_file_path")) for e in included] == [
        ("include", str(project.path / "CLAUDE.md"))], included  # an AGENTS.md only as an include
    assert all(e["hook_event_name"] == "InstructionsLoaded" and e["memory_type"] == "Project"
               for e in events())

    log.unlink()
    for name in ("CLAUDE.md", "pkg/CLAUDE.md"):
        (project.path / name).unlink()
    (project.path / "AGENTS.md").write_text(f"ROOTAGENTS{mark}\n")
    (pkg / "AGENTS.md").write_text(f"PKGAGENTS{mark}\n")
    since = fake_model.count()
    claude(project, fake_model, "-p", f"FAKE_READ {pkg / 'code.txt'}", "--allowedTools", "Read")
    assert fake_model.seen(f"ROOTAGENTS{mark}", since) and fake_model.seen(f"PKGAGENTS{mark}", since)
    assert events() == [], events()  # Claude loaded both and reported neither


def test_claude_itself_notes_an_edited_nested_claude_md_once(
        project: Project, fake_model: FakeModel) -> None:
    """Why InstructionsLoaded is not used for the refresh either: the CLAUDE.md files it
    reports mid-session (``pkg/CLAUDE.md`` on a read below ``pkg/``, ``nested_traversal``)
    are files Claude Code 2.1.332 tracks as read, and an edit of one reaches the next request
    from Claude itself ("... changed on disk since you last read it"), once. Adding the
    reported file to our refresh baseline (tried) gave the model a second copy under our
    INSTRUCTIONS CHANGED note. The files loaded at start (root CLAUDE.md, AGENTS.md) get no
    such note from Claude: our refresh gives them, once (test_claude.py)."""
    import json
    import subprocess

    from conftest import RUN_TIMEOUT, harness_bin
    from test_claude import claude_env

    harness_bin("claude")
    mark = project.mark
    pkg = project.path / "pkg"
    pkg.mkdir()
    (pkg / "code.txt").write_text("code\n")
    (project.path / "CLAUDE.md").write_text(f"ROOTCLAUDE{mark}\n")
    (pkg / "CLAUDE.md").write_text(f"OLDPKG{mark}\n")
    project.configure(f'budget = 20\ngrace = 0.5\n[[stages]]\nname = "instructions"\n'
                      f'builtin = "instructions"\n')
    project.install("claude")
    proc = subprocess.Popen(
        [str(harness_bin("claude")), "-p", "--input-format", "stream-json", "--output-format",
         "stream-json", "--verbose", "--allowedTools", "Read"],
        cwd=project.path, env=claude_env(fake_model), text=True, stdin=subprocess.PIPE,
        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)

    def send(text: str) -> None:
        assert proc.stdin is not None and proc.stdout is not None
        proc.stdin.write(json.dumps({"type": "user", "message": {"role": "user", "content": text}})
                         + "\n")
        proc.stdin.flush()
        for line in proc.stdout:
            if '"type":"result"' in line.replace(" ", ""):
                return
        raise AssertionError("claude stream-json ended before a result")

    try:
        send(f"FAKE_READ {pkg / 'code.txt'}")
        assert fake_model.seen(f"OLDPKG{mark}"), "the premise: Claude loaded pkg/CLAUDE.md itself"
        (pkg / "CLAUDE.md").write_text(f"NEWPKG{mark}\n")
        since = fake_model.count()
        send("next turn")
        last = fake_model.bodies(since)[-1]
        assert last.count(f"NEWPKG{mark}") == 1, last[-3000:]
        assert "changed on disk since you last read it" in last  # Claude's own note
        assert "INSTRUCTIONS CHANGED" not in last
    finally:
        assert proc.stdin is not None
        proc.stdin.close()
        try:
            proc.wait(timeout=RUN_TIMEOUT)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        if proc.stdout:
            proc.stdout.close()


def test_parallel_reads_below_a_folder_inject_its_agents_md_once(
        project: Project, fake_model: FakeModel) -> None:
    """Issue 22, item 6, through the real CLI: one reply with six Read calls below ``pkg/``
    (Claude runs them and fires PostToolUse for each): ``pkg/AGENTS.md`` reaches the model
    once. A CLAUDE.md at the root keeps Claude's own AGENTS.md loader off, so the post-tool
    hook is the one that injects it. Claude reads each hook's output at once, which keeps the
    race window narrow: with the old code this test passed in 4 of 4 runs here, so the proof
    that fails on the old code is tests/test_parallel_hooks.py (real hook processes raced,
    their output read one after the other); this one guards the whole path."""
    from conftest import harness_bin

    floor = False
    harness_bin("claude", floor)
    mark = project.mark
    (project.path / "CLAUDE.md").write_text(f"ROOTCLAUDE{mark}\n")
    pkg = project.path / "pkg"
    pkg.mkdir()
    (pkg / "AGENTS.md").write_text(f"PKGAGENTS{mark}\n")
    files = []
    for i in range(6):
        (pkg / f"f{i}.txt").write_text(f"{i}\n")
        files.append(str(pkg / f"f{i}.txt"))
    project.install("claude")
    claude(project, fake_model, "-p", f"FAKE_READS {','.join(files)}", "--allowedTools", "Read",
           floor=floor)
    bodies = fake_model.bodies()
    results = [b for b in bodies if '"tool_result"' in b]
    assert results and all(b.count('"tool_use_id"') >= 6 for b in results[:1]), "not six reads"
    assert max(b.count(f"PKGAGENTS{mark}") for b in bodies) == 1, [b.count(f"PKGAGENTS{mark}") for b in bodies]
