"""Rules files (``.claude/rules/*.md``, ``.cursor/rules/*.mdc``) reach every harness that does
not load them itself: always-applied rules whole (without their frontmatter), path-scoped
and agent-requested ones listed, broken ones named. The instructions stage runs as a real
process on real files; frontmatter is parsed by PyYAML."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from supervisor.config._builtins import builtin_argv

STAGE = Path(builtin_argv("instructions")[-1])


@pytest.fixture
def project(tmp_path: Path) -> Path:
    root = tmp_path / "p"
    (root / ".claude" / "rules" / "lang").mkdir(parents=True)
    (root / ".cursor" / "rules").mkdir(parents=True)
    subprocess.run(["git", "init", "-q", str(root)], check=True, timeout=30)
    rules = {
        ".claude/rules/style.md": "---\ndescription: house style\n---\nCLAUDE-ALWAYS: tabs.\n",
        ".claude/rules/plain.md": "CLAUDE-PLAIN: no frontmatter at all.\n",
        ".claude/rules/lang/py.md": '---\npaths:\n  - "src/**/*.py"\n---\nCLAUDE-SCOPED-PY\n',
        ".cursor/rules/base.mdc": "---\nalwaysApply: true\n---\nCURSOR-ALWAYS\n",
        ".cursor/rules/ts.mdc": "---\ndescription: TypeScript\nglobs: src/**/*.ts, web/*.tsx\n"
                                "alwaysApply: false\n---\nCURSOR-SCOPED-TS\n",
        ".cursor/rules/mig.mdc": "---\ndescription: When writing migrations\n---\nCURSOR-REQ\n",
        ".cursor/rules/bad.mdc": "---\nglobs: [unclosed\n---\nCURSOR-BAD\n",
    }
    for rel, text in rules.items():
        (root / rel).write_text(text)
    return root


def run(project: Path, harness: str, state: Path | None = None) -> str:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SUPERVISE_")}
    env.update({"SUPERVISE_HARNESS": harness, "SUPERVISE_PROJECT_DIR": str(project),
                "SUPERVISE_STAGE_NAME": "instructions", "SUPERVISE_STATE_DIR": str(state or ""),
                "HOME": str(project.parent / "home")})
    proc = subprocess.run([sys.executable, str(STAGE)], cwd=project, env=env, capture_output=True,
                          timeout=60)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.decode()


def test_codex_gets_claude_and_cursor_rules_without_frontmatter(project: Path) -> None:
    out = run(project, "codex")
    for always in ("CLAUDE-ALWAYS: tabs.", "CLAUDE-PLAIN", "CURSOR-ALWAYS"):
        assert always in out
    assert "description: house style" not in out and "alwaysApply" not in out
    scoped = out[out.index("Rules for some files only"):]
    assert "- .claude/rules/lang/py.md: src/**/*.py" in scoped
    assert "- .cursor/rules/ts.mdc: src/**/*.ts, web/*.tsx" in scoped
    assert "CLAUDE-SCOPED-PY" not in out and "CURSOR-SCOPED-TS" not in out  # listed, not shown
    assert "- .cursor/rules/mig.mdc: When writing migrations" in out and "CURSOR-REQ" not in out
    assert ".cursor/rules/bad.mdc: rule not applied: its frontmatter is not valid YAML" in out
    assert "CURSOR-BAD" not in out


def test_claude_never_gets_claude_rules_and_cursor_never_gets_its_own(project: Path) -> None:
    claude = run(project, "claude")
    assert "CURSOR-ALWAYS" in claude and "- .cursor/rules/ts.mdc" in claude
    assert "CLAUDE-ALWAYS" not in claude and "CLAUDE-PLAIN" not in claude
    assert ".claude/rules/lang/py.md" not in claude  # Claude loads its scoped rules itself
    cursor = run(project, "cursor")
    assert "CLAUDE-ALWAYS" in cursor and "- .claude/rules/lang/py.md: src/**/*.py" in cursor
    assert "CURSOR-ALWAYS" not in cursor and ".cursor/rules" not in cursor


def test_the_terminal_and_pi_get_every_rule(project: Path) -> None:
    for harness in ("", "pi", "gemini"):
        out = run(project, harness)
        assert "CLAUDE-ALWAYS" in out and "CURSOR-ALWAYS" in out, harness


def test_scoped_rules_are_indexed_for_the_read_hooks(project: Path, tmp_path: Path) -> None:
    state = tmp_path / "state"
    run(project, "pi", state)
    index = json.loads((state / "rules" / "pi.json").read_text())
    assert {r["path"]: r["globs"] for r in index["rules"]} == {
        str(project / ".claude/rules/lang/py.md"): ["src/**/*.py"],
        str(project / ".cursor/rules/ts.mdc"): ["src/**/*.ts", "web/*.tsx"]}
    for rel in (".claude/rules/lang/py.md", ".cursor/rules/ts.mdc"):
        (project / rel).unlink()
    run(project, "pi", state)
    assert not (state / "rules" / "pi.json").exists()


def test_a_rule_linked_out_of_the_project_is_refused(project: Path, tmp_path: Path) -> None:
    secret = tmp_path / "secret.md"
    secret.write_text("SECRET-OUTSIDE\n")
    (project / ".cursor" / "rules" / "evil.mdc").symlink_to(secret)
    out = run(project, "codex")
    assert "SECRET-OUTSIDE" not in out and "evil.mdc" in out
