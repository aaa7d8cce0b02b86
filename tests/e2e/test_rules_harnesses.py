"""Rules files reach the harnesses that do not load them, with the real CLIs against the fake
model server: Codex CLI receives a Claude Code rule (``.claude/rules``) whole and without its
frontmatter; Claude Code gets a path-scoped Cursor rule once on the Read of a matching file;
Pi gets a path-scoped Claude rule on its read of a matching file."""

from __future__ import annotations

import json
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


def test_claude_gets_a_path_scoped_cursor_rule_once_on_a_matching_read(
        project: Project, fake_model: FakeModel) -> None:
    from conftest import harness_bin
    from test_claude import claude

    harness_bin("claude")
    project.install("claude")
    rules = project.path / ".cursor" / "rules"
    rules.mkdir(parents=True)
    (rules / "ts.mdc").write_text(f"---\ndescription: TS {project.mark}-META\nglobs: src/**/*.ts\n"
                                  f"alwaysApply: false\n---\nCURSORTS-{project.mark}: prefer types.\n")
    (project.path / "src").mkdir()
    target = project.path / "src" / "app.ts"
    target.write_text("let fromTheFile = 1\n")
    project.configure('[[stages]]\nname = "instructions"\nbuiltin = "instructions"\nreemit = true\n')
    read = ("-p", f"FAKE_READ {target}", "--allowedTools", "Read")
    sid = claude(project, fake_model, *read)["session_id"]
    assert fake_model.seen("fromTheFile"), "the fake model never saw the Read result"
    assert fake_model.seen(f"CURSORTS-{project.mark}: prefer types."), "the rule was not injected"
    assert not fake_model.seen(f"{project.mark}-META")
    since = fake_model.count()
    claude(project, fake_model, "--resume", sid, *read)  # a second read: no second copy
    assert fake_model.bodies(since)[-1].count(f"CURSORTS-{project.mark}") == 1


def test_pi_gets_a_path_scoped_rule_on_a_matching_read(project: Project, fake_model: FakeModel,
                                                       tmp_path: Path) -> None:
    from conftest import clean_env, harness_bin
    from test_pi import pi

    harness_bin("pi")
    agent = tmp_path / "pi-agent"
    agent.mkdir()
    (agent / "models.json").write_text(json.dumps({"providers": {"fake": {
        "baseUrl": f"{fake_model.url}/v1", "api": "openai-completions", "apiKey": "dummy",
        "compat": {"supportsDeveloperRole": False, "supportsReasoningEffort": False},
        "models": [{"id": "fake-model", "contextWindow": 32000, "maxTokens": 4096}]}}}))
    project.install("pi")
    env = clean_env(PI_CODING_AGENT_DIR=str(agent), PI_OFFLINE="1", PI_SKIP_VERSION_CHECK="1",
                    PI_TELEMETRY="0")
    rules = project.path / ".claude" / "rules"
    rules.mkdir(parents=True)
    (rules / "py.md").write_text(f'---\npaths:\n  - "src/**/*.py"\n---\nPYRULE-{project.mark}\n')
    (project.path / "src").mkdir()
    target = project.path / "src" / "mod.py"
    target.write_text("from_the_file = 1\n")
    project.configure('[[stages]]\nname = "instructions"\nbuiltin = "instructions"\nreemit = true\n')
    pi(project, env, "-p", f"FAKE_READ {target}")
    assert fake_model.seen("from_the_file"), "the fake model never saw the read result"
    hits = [b for b in fake_model.bodies() if f"PYRULE-{project.mark}" in b]
    assert hits, "the path-scoped rule did not reach the model"
    assert hits[-1].count(f"PYRULE-{project.mark}") == 1


def _gemini_settings() -> None:
    import os

    home = os.environ["HOME"]  # isolated per test by the root conftest
    os.makedirs(f"{home}/.gemini", exist_ok=True)
    with open(f"{home}/.gemini/settings.json", "w") as f:
        json.dump({"security": {"auth": {"selectedType": "gemini-api-key"},
                                "folderTrust": {"enabled": False}},
                   "privacy": {"usageStatisticsEnabled": False}, "telemetry": {"enabled": False},
                   "general": {"disableAutoUpdate": True, "disableUpdateNag": True}}, f)


def _ts_rules(project: Project) -> Path:
    """A Cursor rule (``globs``) and a Claude rule (``paths``) covering ``src/app.ts``, the
    instructions stage alone configured; returns that file (``fromTheFile`` inside)."""
    cursor, claude = project.path / ".cursor" / "rules", project.path / ".claude" / "rules"
    cursor.mkdir(parents=True)
    claude.mkdir(parents=True)
    (cursor / "ts.mdc").write_text(f"---\ndescription: TS {project.mark}-META\nglobs: src/**/*.ts\n"
                                   f"alwaysApply: false\n---\nCURSORTS-{project.mark}: prefer types.\n")
    (claude / "ts.md").write_text(f'---\npaths: ["src/*.ts"]\n---\nCLAUDETS-{project.mark}\n')
    (project.path / "src").mkdir()
    target = project.path / "src" / "app.ts"
    target.write_text("let fromTheFile = 1\n")
    project.configure('[[stages]]\nname = "instructions"\nbuiltin = "instructions"\n')
    return target


def test_gemini_gets_a_path_scoped_rule_once_on_a_matching_read(
        project: Project, fake_model: FakeModel) -> None:
    """Gemini CLI's AfterTool context reaches the model with the read_file result (0.61.0:
    appended to the tool's result as ``<hook_context>``): a Cursor rule (globs) and a Claude
    rule (paths) covering the file read arrive once each, without their frontmatter."""
    from conftest import clean_env, harness_bin, run_harness

    gemini = harness_bin("gemini")
    _gemini_settings()
    project.install("gemini")
    target = _ts_rules(project)
    env = clean_env(GEMINI_API_KEY="dummy", GOOGLE_GEMINI_BASE_URL=fake_model.url)
    proc = run_harness([gemini, "-m", "fake-model", "-p", f"FAKE_READ {target}"], project.path, env)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert fake_model.seen("fromTheFile"), "the fake model never saw the read_file result"
    after = [b for b in fake_model.bodies() if "fromTheFile" in b]
    assert after[-1].count(f"CURSORTS-{project.mark}: prefer types.") == 1, after[-1][-3000:]
    assert after[-1].count(f"CLAUDETS-{project.mark}") == 1
    assert not fake_model.seen(f"{project.mark}-META")  # the frontmatter is not context
    # `gemini -r latest` drops the earlier prompt but keeps the read_file call and its
    # result (our rule inside it), so the resumed session's read adds no second copy
    since = fake_model.count()
    proc = run_harness([gemini, "-m", "fake-model", "-r", "latest", "-p", f"FAKE_READ {target}"],
                       project.path, env)
    assert proc.returncode == 0, proc.stderr[-2000:]
    resumed = [json.loads(b) for b in fake_model.bodies(since) if "fromTheFile" in b]
    assert resumed, "the resumed turn's read never reached the model"
    results = [json.dumps(part) for content in resumed[-1]["contents"]
               for part in content.get("parts") or [] if "functionResponse" in part]
    assert len(results) >= 2 and f"CURSORTS-{project.mark}" in results[0]  # kept by Gemini
    assert "fromTheFile" in results[-1] and f"CURSORTS-{project.mark}" not in results[-1]


def test_qwen_gets_a_path_scoped_rule_once_on_a_matching_read(
        project: Project, fake_model: FakeModel) -> None:
    """Qwen Code's PostToolUse context reaches the model with the read_file result (0.24.4:
    appended to the tool's result): a Cursor rule (globs) and a Claude rule (paths) covering
    the file read arrive once each, without their frontmatter. Before, Qwen got only the
    listing of path-scoped rules (no PostToolUse was registered)."""
    from conftest import harness_bin
    from test_qwen import qwen, qwen_env

    harness_bin("qwen")
    project.install("qwen")
    target = _ts_rules(project)
    qwen(project, qwen_env(fake_model), "-p", f"FAKE_READ {target}", "--yolo")
    assert fake_model.seen("fromTheFile"), "the fake model never saw the read_file result"
    after = [json.loads(b) for b in fake_model.bodies() if "fromTheFile" in b]
    results = [json.dumps(m["content"]) for m in after[-1]["messages"] if m.get("role") == "tool"]
    assert len(results) == 1 and "fromTheFile" in results[0], results
    assert results[0].count(f"CURSORTS-{project.mark}: prefer types.") == 1, results[0]
    assert results[0].count(f"CLAUDETS-{project.mark}") == 1, results[0]
    assert not fake_model.seen(f"{project.mark}-META")  # the frontmatter is not context
