"""Rules files reach the harnesses that do not load them, with the real CLIs against the fake
model server: Codex CLI receives a Claude Code rule (``.claude/rules``), whole and without its
frontmatter, in the model request of its first turn."""

from __future__ import annotations

from pathlib import Path

import pytest

from conftest import FakeModel, Project
from test_codex import codex_home as codex_home  # noqa: F401 - the fixture, reused
from test_codex import start

pytestmark = pytest.mark.e2e


def test_codex_receives_a_claude_rule(project: Project, fake_model: FakeModel,
                                      codex_home: Path) -> None:  # noqa: F811
    rules = project.path / ".claude" / "rules"
    rules.mkdir(parents=True)
    (rules / "style.md").write_text(f"---\ndescription: house style {project.mark}-META\n---\n"
                                    f"RULEBODY-{project.mark}: indent with tabs.\n")
    (rules / "py.md").write_text(f'---\npaths: ["src/**/*.py"]\n---\nSCOPED-{project.mark}\n')
    project.configure('[[stages]]\nname = "instructions"\nbuiltin = "instructions"\n')
    start(project, codex_home)
    assert fake_model.seen(f"RULEBODY-{project.mark}: indent with tabs.")
    assert not fake_model.seen(f"{project.mark}-META")  # the frontmatter is not context
    assert not fake_model.seen(f"SCOPED-{project.mark}")  # path-scoped: listed, not injected
    assert fake_model.seen(".claude/rules/py.md: src/**/*.py")
