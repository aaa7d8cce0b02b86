"""The harness plugins of ``plugins/``, loaded by the real CLIs from a local path, against the
fake model server (Claude Code 2.1.197: ``claude --plugin-dir DIR``).

The plugin's hooks run ``supervise-hook`` found on ``PATH`` (the wheel installs it beside
``supervise``: pipx, uv tool, a venv), so here ``PATH`` starts with this interpreter's bin
folder and no settings file registers anything: what reaches the model came through the
plugin.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from conftest import ROOT, FakeModel, Project, harness_bin
from test_claude import claude_env
from conftest import run_harness

pytestmark = pytest.mark.e2e

CLAUDE_PLUGIN = ROOT / "plugins" / "claude"


def on_path(env: dict[str, str]) -> dict[str, str]:
    """``env`` with the folder of this interpreter's ``supervise-hook`` first on ``PATH``."""
    bin_dir = Path(sys.executable).parent
    assert (bin_dir / "supervise-hook").is_file(), (
        "supervise-hook is not installed beside this interpreter: reinstall the package "
        "(pip install -e .) so the wheel's shared script is placed")
    return {**env, "PATH": f"{bin_dir}{os.pathsep}{env.get('PATH', '')}"}


def claude_plugin(project: Project, fake: FakeModel, *args: str) -> dict:
    import json

    proc = run_harness([harness_bin("claude"), "--plugin-dir", CLAUDE_PLUGIN, *args,
                        "--output-format", "json"], project.path, on_path(claude_env(fake)))
    assert proc.returncode == 0, f"claude {args} failed: {proc.stderr[-2000:]}"
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_claude_plugin_delivers_the_digest_and_the_reemit_after_compact(
        project: Project, fake_model: FakeModel) -> None:
    assert not (project.path / ".claude").exists()  # nothing registered in settings
    sid = claude_plugin(project, fake_model, "-p", "turn 1")["session_id"]
    assert fake_model.seen(f"{project.mark}-startup-full")
    claude_plugin(project, fake_model, "--resume", sid, "-p", "turn 2")
    for _ in range(3):
        result = claude_plugin(project, fake_model, "--resume", sid, "-p", "/compact").get("result", "")
        if not str(result).startswith("Not enough messages"):
            break
    since = fake_model.count()
    claude_plugin(project, fake_model, "--resume", sid, "-p", "after compact")
    assert fake_model.seen(f"{project.mark}-compact-reemit", since)


def test_install_plugin_moves_a_settings_install_to_the_plugin(project: Project, fake_model: FakeModel,
                                                               tmp_path: Path) -> None:
    """``supervise install claude --plugin`` with the real CLI on PATH (its own HOME): the
    settings hooks go, the plugin is enabled and cached, and the next session gets the digest
    once, through the plugin."""
    import json
    import subprocess

    claude_bin = harness_bin("claude")
    home = tmp_path / "home"
    home.mkdir()
    env = on_path(claude_env(fake_model, HOME=str(home)))
    env["PATH"] = f"{claude_bin.parent}{os.pathsep}{env['PATH']}"
    project.install("claude")
    proc = subprocess.run([sys.executable, "-m", "supervisor", "install", "claude", "--plugin"],
                          cwd=project.path, env=env, capture_output=True, text=True, timeout=300,
                          stdin=subprocess.DEVNULL)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    settings = json.loads((project.path / ".claude" / "settings.json").read_text())
    assert settings == {"enabledPlugins": {"watchkeeper@watchkeeper": True}}
    run = run_harness([claude_bin, "-p", "turn 1", "--output-format", "json"], project.path, env)
    assert run.returncode == 0, run.stderr[-2000:]
    bodies = fake_model.bodies()
    assert sum(body.count(f"{project.mark}-startup-full") for body in bodies[-1:]) == 1


GEMINI_EXTENSION = ROOT  # the repository is the extension (gemini-extension.json at the root)


def test_gemini_extension_linked_from_a_local_path_delivers_the_digest(project: Project,
                                                                      fake_model: FakeModel) -> None:
    """``supervise install gemini --plugin`` runs ``gemini extensions link <checkout>`` (0.61.0:
    the repository's root is the extension, its gemini-extension.json and hooks/hooks.json),
    and drops the project's settings hooks: the extension's SessionStart hook runs supervise-hook
    from PATH, the digest reaches the model, and the budget is clamped to the timeout of the
    extension's own hooks file, found through ``${extensionPath}``."""
    import json
    import subprocess

    from conftest import clean_env

    gemini = harness_bin("gemini")
    home = os.environ["HOME"]  # isolated per test by the root conftest
    os.makedirs(f"{home}/.gemini", exist_ok=True)
    with open(f"{home}/.gemini/settings.json", "w") as f:
        json.dump({"security": {"auth": {"selectedType": "gemini-api-key"}, "folderTrust": {"enabled": False}},
                   "privacy": {"usageStatisticsEnabled": False}, "telemetry": {"enabled": False},
                   "general": {"disableAutoUpdate": True, "disableUpdateNag": True}}, f)
    env = on_path(clean_env(GEMINI_API_KEY="dummy", GOOGLE_GEMINI_BASE_URL=fake_model.url))
    env["PATH"] = f"{gemini.parent}{os.pathsep}{env['PATH']}"
    project.install("gemini")  # the settings install first: --plugin moves it to the extension
    link = subprocess.run([sys.executable, "-m", "supervisor", "install", "gemini", "--plugin"],
                          cwd=project.path, env=env, capture_output=True, text=True, timeout=120,
                          stdin=subprocess.DEVNULL)
    assert link.returncode == 0, link.stdout + link.stderr
    extension = Path(home) / ".gemini" / "extensions" / "watchkeeper" / ".gemini-extension-install.json"
    assert json.loads(extension.read_text())["source"] == str(GEMINI_EXTENSION)
    from conftest import marker_toml

    # a budget above the extension's 180 s timeout: the hook reads that timeout from the
    # extension's own hooks file (--registered-in "${extensionPath}/...") and clamps to it
    project.configure(marker_toml(project.mark, budget=400))
    proc = run_harness([gemini, "-m", "fake-model", "-p", "turn 1"], project.path, env)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert not (project.path / ".gemini" / "settings.json").exists()
    assert fake_model.seen(f"{project.mark}-startup-full")
    assert fake_model.seen("budget clamped to 174.5s: the configured budget (400s) does not fit "
                           "the 180s hook timeout registered with gemini")


def test_gemini_extension_installs_straight_from_the_git_repository(project: Project,
                                                                   fake_model: FakeModel,
                                                                   tmp_path: Path) -> None:
    """``gemini extensions install <repository URL>`` (0.61.0) clones the repository (``git
    clone --depth 1``) and loads the ``gemini-extension.json`` at its root, as it installs a
    public extension: this repository's committed HEAD, served by git's smart HTTP on
    127.0.0.1 (tests/e2e/git_http_server.py), installs, and its SessionStart hook delivers the
    digest in a project that opted in. Before, the manifest was generated, never committed,
    and not at the root: the install failed ("Configuration file not found")."""
    import json
    import subprocess

    from conftest import clean_env

    gemini = harness_bin("gemini")
    home = os.environ["HOME"]  # isolated per test by the root conftest
    os.makedirs(f"{home}/.gemini", exist_ok=True)
    with open(f"{home}/.gemini/settings.json", "w") as f:
        json.dump({"security": {"auth": {"selectedType": "gemini-api-key"}, "folderTrust": {"enabled": False}},
                   "privacy": {"usageStatisticsEnabled": False}, "telemetry": {"enabled": False},
                   "general": {"disableAutoUpdate": True, "disableUpdateNag": True}}, f)
    env = on_path(clean_env(GEMINI_API_KEY="dummy", GOOGLE_GEMINI_BASE_URL=fake_model.url))
    served = tmp_path / "served"
    served.mkdir()
    subprocess.run(["git", "clone", "-q", "--bare", str(ROOT), str(served / "watchkeeper.git")],
                   check=True, capture_output=True, timeout=120, env=clean_env())
    server = subprocess.Popen([sys.executable, str(Path(__file__).with_name("git_http_server.py")),
                               str(served)], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                              stdin=subprocess.DEVNULL, text=True)
    try:
        assert server.stdout is not None
        line = server.stdout.readline()
        assert line.startswith("git http server on "), line
        url = line.split(" on ", 1)[1].strip() + "watchkeeper.git"
        added = run_harness([gemini, "extensions", "install", url, "--consent"], project.path, env)
        assert added.returncode == 0, added.stdout + added.stderr
    finally:
        server.kill()
        server.wait()
        if server.stdout is not None:
            server.stdout.close()
    installed = Path(home) / ".gemini" / "extensions" / "watchkeeper"
    manifest = json.loads((installed / "gemini-extension.json").read_text())
    assert manifest == json.loads((ROOT / "gemini-extension.json").read_text())
    assert (installed / "hooks" / "hooks.json").is_file()
    proc = run_harness([gemini, "-m", "fake-model", "-p", "turn 1"], project.path, env)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert fake_model.seen(f"{project.mark}-startup-full")


def test_pi_package_installed_from_a_local_path_delivers_the_digest(project: Project,
                                                                   fake_model: FakeModel,
                                                                   tmp_path: Path) -> None:
    """``supervise install pi --plugin`` runs ``pi install plugins/pi -l`` (0.73.1) with the
    real CLI on PATH: the package's extension finds the installed package through
    ``supervise-hook --where`` (no copy of the bridge) and the digest reaches the model;
    ``supervise uninstall pi`` removes it (``pi remove``)."""
    import json
    import subprocess

    from conftest import clean_env

    pi = harness_bin("pi")
    agent = tmp_path / "pi-agent"
    agent.mkdir()
    (agent / "models.json").write_text(json.dumps({"providers": {"fake": {
        "baseUrl": f"{fake_model.url}/v1", "api": "openai-completions", "apiKey": "dummy",
        "compat": {"supportsDeveloperRole": False, "supportsReasoningEffort": False},
        "models": [{"id": "fake-model", "contextWindow": 32000, "maxTokens": 4096}]}}}))
    env = on_path(clean_env(PI_CODING_AGENT_DIR=str(agent), PI_OFFLINE="1",
                            PI_SKIP_VERSION_CHECK="1", PI_TELEMETRY="0"))
    env["PATH"] = f"{pi.parent}{os.pathsep}{env['PATH']}"
    added = subprocess.run([sys.executable, "-m", "supervisor", "install", "pi", "--plugin"],
                           cwd=project.path, env=env, capture_output=True, text=True, timeout=180,
                           stdin=subprocess.DEVNULL)
    assert added.returncode == 0, added.stdout + added.stderr
    assert json.loads((project.path / ".pi" / "settings.json").read_text())["packages"]
    assert not (project.path / ".pi" / "extensions").exists()  # nothing placed by us
    proc = run_harness([pi, "--provider", "fake", "--model", "fake-model", "-p", "turn 1"],
                       project.path, env)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert fake_model.seen(f"{project.mark}-startup-full")
    gone = subprocess.run([sys.executable, "-m", "supervisor", "uninstall", "pi"], cwd=project.path,
                          env=env, capture_output=True, text=True, timeout=180, stdin=subprocess.DEVNULL)
    assert gone.returncode == 0, gone.stdout + gone.stderr
    settings = project.path / ".pi" / "settings.json"  # it held only "packages": [] then
    assert not settings.exists(), settings.read_text()


def test_opencode_package_named_by_path_delivers_the_digest(project: Project, fake_model: FakeModel,
                                                           tmp_path: Path) -> None:
    """``supervise install opencode --plugin`` adds ``"file://.../plugins/opencode"`` to the
    ``plugin`` list of the project's opencode.json (every other key kept): OpenCode 1.18.33
    loads it and the package finds the installed package through ``supervise-hook --where``."""
    import json

    from conftest import clean_env
    from test_opencode import seed_plugin_dependency

    opencode = harness_bin("opencode")
    (project.path / "opencode.json").write_text(json.dumps({
        "$schema": "https://opencode.ai/config.json",
        "provider": {"fake": {"npm": "@ai-sdk/openai-compatible", "name": "Fake",
                              "options": {"baseURL": f"{fake_model.url}/v1", "apiKey": "dummy"},
                              "models": {"fake-model": {"name": "Fake",
                                                        "limit": {"context": 100000, "output": 1000}}}}},
        "model": "fake/fake-model", "small_model": "fake/fake-model", "autoupdate": False,
        "share": "disabled"}))
    xdg = tmp_path / "oc-xdg"
    for folder in (xdg / "config" / "opencode", project.path / ".opencode"):
        seed_plugin_dependency(folder)
    env = on_path(clean_env(XDG_CONFIG_HOME=str(xdg / "config"), XDG_DATA_HOME=str(xdg / "data"),
                            XDG_CACHE_HOME=str(tmp_path / "oc-cache"), XDG_STATE_HOME=str(xdg / "state"),
                            OPENCODE_DISABLE_MODELS_FETCH="1", OPENCODE_DISABLE_AUTOUPDATE="1",
                            OPENCODE_DISABLE_LSP_DOWNLOAD="1", PWD=str(project.path)))
    import subprocess
    import sys

    added = subprocess.run([sys.executable, "-m", "supervisor", "install", "opencode", "--plugin"],
                           cwd=project.path, env=env, capture_output=True, text=True, timeout=60,
                           stdin=subprocess.DEVNULL)
    assert added.returncode == 0, added.stdout + added.stderr
    config = json.loads((project.path / "opencode.json").read_text())
    assert config["plugin"] == [(ROOT / "plugins" / "opencode").as_uri()] and config["model"]
    proc = run_harness([opencode, "run", "turn 1"], project.path, env)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert not (project.path / ".opencode" / "plugins").exists()  # nothing placed by us
    assert fake_model.seen(f"{project.mark}-startup-full")
