"""Context-fidelity matrix, cell (c): a session started in a subdirectory gets that
subdirectory's instructions, once (issue 12, item 1), with the real pinned CLIs.

The project has ``AGENTS.md`` (ROOT-RULES) and ``pkg/AGENTS.md`` (PKG-RULES) and
``pkg/CLAUDE.md`` (PKG-CLAUDE); each harness starts in ``pkg``. Whatever the harness loads
by itself (Claude: CLAUDE.md; Codex, Pi, OpenCode: AGENTS.md) and whatever our digest supplies
(the rest) must add up to every marker **exactly once** in every request of the turn: a
missing one is lost context, a second copy a duplicate. The digest's own stage prints
``SUPERVISE_CWD``, which must be ``pkg`` (our hook or bridge really ran there).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import FakeModel, Project, clean_env, harness_bin, run_harness
from test_codex import codex_home  # noqa: F401 - fixture
from test_opencode import SUMMARY, TITLE, oc_cache, oc_env  # noqa: F401 - fixtures
from test_pi import pi_env  # noqa: F401 - fixture

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(300)]

TOML = """\
budget = 30
grace = 0.5

[[stages]]
name = "where"
reemit = true
run = ["sh", "-c", "echo WHERE-{mark} cwd=[$SUPERVISE_CWD]"]

[[stages]]
name = "instructions"
builtin = "instructions"
reemit = true
[stages.options]
list_nested = false
"""


def subdir_project(project: Project) -> Path:
    """Write the instruction files and the config; return ``pkg``."""
    mark = project.mark
    (project.path / "AGENTS.md").write_text(f"ROOT-RULES-{mark}\n")
    pkg = project.path / "pkg"
    pkg.mkdir()
    (pkg / "AGENTS.md").write_text(f"PKG-RULES-{mark}\n")
    (pkg / "CLAUDE.md").write_text(f"PKG-CLAUDE-{mark}\n")
    (pkg / "code.py").write_text("print('hello')\n")
    env = clean_env()
    subprocess.run(["git", "-C", str(project.path), "add", "."], check=True, env=env)
    subprocess.run(["git", "-C", str(project.path), "commit", "-q", "-m", "rules"], check=True, env=env)
    project.configure(TOML.format(mark=mark))
    return pkg


def assert_each_once(project: Project, bodies: list[str], pkg: Path) -> None:
    """Every marker exactly once in every request, and the digest ran with cwd ``pkg``."""
    mark = project.mark
    assert bodies, "the model got no request"
    for i, body in enumerate(bodies):
        counts = {name: body.count(f"{name}-{mark}")
                  for name in ("ROOT-RULES", "PKG-RULES", "PKG-CLAUDE", "WHERE")}
        assert counts == dict.fromkeys(counts, 1), (i, counts)
        assert f"WHERE-{mark} cwd=[{pkg}]" in body, (i, body[:3000])


def test_claude_session_in_a_subdirectory(project: Project, fake_model: FakeModel) -> None:
    pkg = subdir_project(project)
    harness_bin("claude")
    # Claude Code reads project settings from <cwd>/.claude only (LAB: a project-scope hook
    # at the root did not fire for a session started in pkg): the user-scope install does.
    proc = subprocess.run([sys.executable, "-m", "supervisor", "install", "claude", "--scope",
                           "user"], cwd=project.path, env=clean_env(), capture_output=True,
                          text=True, timeout=60, stdin=subprocess.DEVNULL)
    assert proc.returncode == 0, proc.stderr
    env = clean_env(ANTHROPIC_BASE_URL=fake_model.url, ANTHROPIC_API_KEY="dummy",
                    DISABLE_TELEMETRY="1", CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC="1",
                    DISABLE_AUTOUPDATER="1", DISABLE_ERROR_REPORTING="1")
    proc = run_harness([harness_bin("claude"), "-p", f"turn {project.mark}", "--output-format",
                        "json"], pkg, env)
    assert proc.returncode == 0, proc.stderr[-2000:]
    bodies = [b for b in fake_model.bodies() if f"turn {project.mark}" in b]
    assert_each_once(project, bodies, pkg)


def test_codex_session_in_a_subdirectory(project: Project, fake_model: FakeModel,
                                         codex_home: Path) -> None:  # noqa: F811
    pkg = subdir_project(project)
    env = clean_env(CODEX_HOME=str(codex_home), FAKE_API_KEY="dummy")
    proc = run_harness([harness_bin("codex"), "exec", "--dangerously-bypass-hook-trust",
                        "--skip-git-repo-check", f"turn {project.mark}"], pkg, env)
    assert proc.returncode == 0, proc.stderr[-2000:]
    bodies = [b for b in fake_model.bodies() if f"turn {project.mark}" in b]
    assert_each_once(project, bodies, pkg)


def test_pi_session_in_a_subdirectory(project: Project, fake_model: FakeModel,
                                      pi_env: dict[str, str]) -> None:  # noqa: F811
    pkg = subdir_project(project)
    # Pi loads extensions from <cwd>/.pi/extensions only (pi-coding-agent package-manager.js),
    # so a session started in pkg needs the user-scope install (the agent dir's extensions).
    proc = subprocess.run([sys.executable, "-m", "supervisor", "install", "pi", "--scope", "user"],
                          cwd=project.path, env=pi_env, capture_output=True, text=True,
                          timeout=60, stdin=subprocess.DEVNULL)
    assert proc.returncode == 0, proc.stderr
    proc = run_harness([harness_bin("pi"), "--provider", "fake", "--model", "fake-model", "-p",
                        f"turn {project.mark}"], pkg, pi_env)
    assert proc.returncode == 0, proc.stderr[-2000:]
    bodies = [b for b in fake_model.bodies() if f"turn {project.mark}" in b]
    assert_each_once(project, bodies, pkg)


def test_opencode_session_in_a_subdirectory(project: Project, fake_model: FakeModel,
                                            oc_env: dict[str, str]) -> None:  # noqa: F811
    pkg = subdir_project(project)
    proc = run_harness([harness_bin("opencode"), "run", f"turn {project.mark}"], pkg,
                       {**oc_env, "PWD": str(pkg)})
    assert proc.returncode == 0, proc.stderr[-2000:]
    bodies = [b for b in fake_model.bodies()
              if f"turn {project.mark}" in b and TITLE not in b and SUMMARY not in b]
    assert_each_once(project, bodies, pkg)
