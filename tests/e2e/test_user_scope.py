"""A user-scope install the projects opt into, with the real Claude Code, Pi and OpenCode
CLIs: a session started in ``packages/widget/`` of an opted-in project (its supervise.toml)
gets the digest, run with that folder as ``SUPERVISE_CWD``; a session in a repository that
did not opt in gets nothing, and nothing is created there (the Pi and OpenCode extensions
placed at user scope carry ``opt_in`` in their watchkeeper.json)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import FakeModel, Project, clean_env, harness_bin, run_harness
from test_claude import claude_env

pytestmark = pytest.mark.e2e


def test_user_scope_serves_a_package_session_and_stays_out_of_other_repos(
        project: Project, fake_model: FakeModel, tmp_path: Path) -> None:
    harness_bin("claude")
    widget = project.path / "packages" / "widget"
    widget.mkdir(parents=True)
    project.configure('budget = 30\n[[stages]]\nname = "where"\n'
                      f'run = ["sh", "-c", "echo WHERE-{project.mark} cwd=[$SUPERVISE_CWD]"]\n')
    proc = subprocess.run([sys.executable, "-m", "supervisor", "install", "claude", "--scope",
                           "user"], cwd=project.path, env=clean_env(), capture_output=True,
                          text=True, timeout=60, stdin=subprocess.DEVNULL)
    assert proc.returncode == 0, proc.stderr
    run = run_harness([harness_bin("claude"), "-p", f"turn {project.mark}", "--output-format",
                       "json"], widget, claude_env(fake_model))
    assert run.returncode == 0, run.stderr[-2000:]
    assert fake_model.seen(f"WHERE-{project.mark} cwd=[{widget}]"), "the package session got no digest"

    other = tmp_path / "other"
    other.mkdir()
    subprocess.run(["git", "init", "-q", str(other)], check=True, env=clean_env())
    since = fake_model.count()
    run = run_harness([harness_bin("claude"), "-p", "turn other", "--output-format", "json"],
                      other, claude_env(fake_model))
    assert run.returncode == 0, run.stderr[-2000:]
    bodies = fake_model.bodies(since)
    assert bodies and not any("## Repository" in b or "SessionStart" in b for b in bodies)
    assert not (other / ".supervise").exists()


WHERE = 'budget = 30\n[[stages]]\nname = "where"\nrun = ["sh", "-c", "echo WHERE-{mark} cwd=[$SUPERVISE_CWD]"]\n'


def _monorepo(project: Project, tmp_path: Path) -> tuple[Path, Path]:
    """``(packages/widget of the opted-in project, another repository that did not opt in)``."""
    widget = project.path / "packages" / "widget"
    widget.mkdir(parents=True)
    project.configure(WHERE.format(mark=project.mark))
    other = tmp_path / "other"
    (other / "packages").mkdir(parents=True)
    subprocess.run(["git", "init", "-q", str(other)], check=True, env=clean_env())
    return widget, other


def _install_user(harness: str, project: Project, env: dict[str, str]) -> None:
    proc = subprocess.run([sys.executable, "-m", "supervisor", "install", harness, "--scope",
                           "user"], cwd=project.path, env=env, capture_output=True, text=True,
                          timeout=60, stdin=subprocess.DEVNULL)
    assert proc.returncode == 0, proc.stderr


def _served_and_silent(project: Project, fake_model: FakeModel, widget: Path, other: Path,
                       run: object) -> None:
    assert callable(run)
    run(widget, f"turn {project.mark}")
    assert fake_model.seen(f"WHERE-{project.mark} cwd=[{widget}]"), "the package session got no digest"
    since = fake_model.count()
    run(other / "packages", "turn other")
    bodies = fake_model.bodies(since)
    assert bodies and not any("WHERE-" in b or "SUPERVISE_OP" in b or "## Repository" in b
                              for b in bodies)
    assert not (other / ".supervise").exists()
    assert "supervise" not in (other / ".git" / "info" / "exclude").read_text()


def _pi_agent(tmp_path: Path, fake: FakeModel) -> tuple[Path, dict[str, str]]:
    """Pi's agent folder naming the fake model (``models.json``) and the environment that
    points Pi at it, offline."""
    agent = tmp_path / "pi-agent"
    agent.mkdir()
    (agent / "models.json").write_text(json.dumps({"providers": {"fake": {
        "baseUrl": f"{fake.url}/v1", "api": "openai-completions", "apiKey": "dummy",
        "compat": {"supportsDeveloperRole": False, "supportsReasoningEffort": False},
        "models": [{"id": "fake-model", "contextWindow": 32000, "maxTokens": 4096}]}}}))
    return agent, clean_env(PI_CODING_AGENT_DIR=str(agent), PI_OFFLINE="1",
                            PI_SKIP_VERSION_CHECK="1", PI_TELEMETRY="0")


def test_a_user_scope_pi_extension_serves_only_opted_in_projects(
        project: Project, fake_model: FakeModel, tmp_path: Path) -> None:
    pi = harness_bin("pi")
    widget, other = _monorepo(project, tmp_path)
    agent, env = _pi_agent(tmp_path, fake_model)
    _install_user("pi", project, env)
    assert json.loads((agent / "extensions" / "watchkeeper" / "watchkeeper.json").read_text())["opt_in"]

    def run(cwd: Path, prompt: str) -> None:
        proc = run_harness([pi, "--provider", "fake", "--model", "fake-model", "-p", prompt], cwd, env)
        assert proc.returncode == 0, proc.stderr[-2000:]

    _served_and_silent(project, fake_model, widget, other, run)


def test_a_user_scope_opencode_plugin_serves_only_opted_in_projects(
        project: Project, fake_model: FakeModel, tmp_path: Path) -> None:
    from test_opencode import seed_plugin_dependency

    opencode = harness_bin("opencode")
    widget, other = _monorepo(project, tmp_path)
    xdg = tmp_path / "oc-xdg"
    config = xdg / "config" / "opencode"
    seed_plugin_dependency(config)
    (config / "opencode.json").write_text(json.dumps({  # the user's config: every project
        "$schema": "https://opencode.ai/config.json",
        "provider": {"fake": {"npm": "@ai-sdk/openai-compatible", "name": "Fake",
                              "options": {"baseURL": f"{fake_model.url}/v1", "apiKey": "dummy"},
                              "models": {"fake-model": {"name": "Fake",
                                                        "limit": {"context": 100000, "output": 1000}}}}},
        "model": "fake/fake-model", "small_model": "fake/fake-model", "autoupdate": False,
        "share": "disabled"}))
    env = clean_env(XDG_CONFIG_HOME=str(xdg / "config"), XDG_DATA_HOME=str(xdg / "data"),
                    XDG_CACHE_HOME=str(xdg / "cache"), XDG_STATE_HOME=str(xdg / "state"),
                    OPENCODE_DISABLE_MODELS_FETCH="1", OPENCODE_DISABLE_AUTOUPDATE="1",
                    OPENCODE_DISABLE_LSP_DOWNLOAD="1")
    _install_user("opencode", project, env)
    assert json.loads((config / "plugins" / "watchkeeper" / "watchkeeper.json").read_text())["opt_in"]

    def run(cwd: Path, prompt: str) -> None:
        proc = run_harness([opencode, "run", prompt], cwd, {**env, "PWD": str(cwd)})
        assert proc.returncode == 0, proc.stderr[-2000:]

    _served_and_silent(project, fake_model, widget, other, run)


def test_the_gemini_extension_serves_only_opted_in_projects(
        project: Project, fake_model: FakeModel, tmp_path: Path) -> None:
    """``supervise install gemini --plugin --scope user`` links the extension (user level:
    Gemini 0.61.0 loads it in every folder); its hooks carry ``--opt-in``, so a
    ``packages/widget/`` session of the opted-in project gets the digest and a session in a
    repository that did not opt in gets nothing, nothing created there (the old extension ran
    the digest in every repository)."""
    import os

    from test_harness_plugins import on_path
    from test_rules_harnesses import _gemini_settings

    gemini = harness_bin("gemini")
    widget, other = _monorepo(project, tmp_path)
    home = os.environ["HOME"]  # isolated per test by the root conftest
    _gemini_settings()
    env = on_path(clean_env(GEMINI_API_KEY="dummy", GOOGLE_GEMINI_BASE_URL=fake_model.url))
    env["PATH"] = f"{gemini.parent}{os.pathsep}{env['PATH']}"
    proc = subprocess.run([sys.executable, "-m", "supervisor", "install", "gemini", "--plugin",
                           "--scope", "user"], cwd=project.path, env=env, capture_output=True,
                          text=True, timeout=120, stdin=subprocess.DEVNULL)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert (Path(home) / ".gemini" / "extensions" / "watchkeeper").is_dir()
    assert not (project.path / ".gemini").exists()  # no project registration: the toml opts in

    def run(cwd: Path, prompt: str) -> None:
        done = run_harness([gemini, "-m", "fake-model", "-p", prompt], cwd, env)
        assert done.returncode == 0, done.stderr[-2000:]

    _served_and_silent(project, fake_model, widget, other, run)


def test_a_project_pi_package_beside_the_user_bridge_delivers_the_digest_once(
        project: Project, fake_model: FakeModel, tmp_path: Path) -> None:
    """A project that loads our Pi package (``pi install plugins/pi -l``, 0.73.1) and has no
    supervise.toml, beside the bridge placed at user scope: both load in the one Pi process
    and the first to load serves. Pi loads the user's extension first, so the old gate, which
    did not count the package as the project's opt-in, left the user's bridge holding the
    load and silent: no digest. The package counts now: the digest arrives once, and doctor
    passes the pair."""
    from test_harness_plugins import on_path

    pi = harness_bin("pi")
    (project.path / "supervise.toml").unlink()  # the default digest: only the package opts in
    env = on_path(_pi_agent(tmp_path, fake_model)[1])
    env["PATH"] = f"{pi.parent}:{env['PATH']}"
    _install_user("pi", project, env)
    added = subprocess.run([sys.executable, "-m", "supervisor", "install", "pi", "--plugin"],
                           cwd=project.path, env=env, capture_output=True, text=True,
                           timeout=180, stdin=subprocess.DEVNULL)
    assert added.returncode == 0, added.stdout + added.stderr
    assert json.loads((project.path / ".pi" / "settings.json").read_text())["packages"]
    assert not (project.path / "supervise.toml").exists()
    doctor = subprocess.run([sys.executable, "-m", "supervisor", "doctor", "pi"], cwd=project.path,
                            env=env, capture_output=True, text=True, timeout=180,
                            stdin=subprocess.DEVNULL)
    assert "registered 2 times" not in doctor.stdout, doctor.stdout
    assert "the user-scope bridge serves this project" in doctor.stdout, doctor.stdout
    since = fake_model.count()
    proc = run_harness([pi, "--provider", "fake", "--model", "fake-model", "-p", "turn 1"],
                       project.path, env)
    assert proc.returncode == 0, proc.stderr[-2000:]
    bodies = fake_model.bodies(since)
    assert bodies and bodies[-1].count("## Repository") == 1, bodies[-1][:3000]
