"""The harness plugins of ``plugins/`` and the ``supervise-hook`` entry they run.

A plugin's hooks find ``supervise-hook`` on ``PATH``: the wheel installs it (the checkout's
``bin/supervise-hook``, one file) beside ``supervise`` in the environment pipx, uv tool or a
venv made, and pipx and uv tool put a link to it on ``PATH``. Through that link it finds the
environment's interpreter and the fast path inside the installed package, never a copy.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from helpers import python_script

ROOT = Path(__file__).resolve().parent.parent
SHIM = ROOT / "bin" / "supervise-hook"
CLAUDE_PLUGIN = ROOT / "plugins" / "claude"


def _plugin_commands(hooks_file: Path) -> dict[str, str]:
    data = json.loads(hooks_file.read_text("utf-8"))
    out = {}
    for event, groups in data["hooks"].items():
        [group] = groups
        [handler] = group["hooks"]
        assert handler["type"] == "command"
        out[event] = handler["command"]
    return out


@pytest.fixture
def installed(tmp_path: Path) -> tuple[Path, Path]:
    """An environment laid out as pipx/uv tool make one (``<env>/pyvenv.cfg``, ``bin/``,
    ``lib/pythonX.Y/site-packages/supervisor/``), its ``supervise-hook`` linked from a
    ``PATH`` folder; the env's ``python`` records each start. Returns (PATH folder, record)."""
    env = tmp_path / "tools env"
    (env / "bin").mkdir(parents=True)
    (env / "pyvenv.cfg").write_text("home = /usr/bin\n")
    site = env / "lib" / f"python{sys.version_info.major}.{sys.version_info.minor}" / "site-packages"
    site.mkdir(parents=True)
    (site / "supervisor").symlink_to(ROOT / "supervisor")  # the installed package
    record = tmp_path / "starts"
    python = env / "bin" / "python"
    python.write_text(f'#!/bin/sh\necho started >> "{record}"\nexec "{sys.executable}" "$@"\n')
    python.chmod(0o755)
    shim = env / "bin" / "supervise-hook"
    shim.write_bytes(SHIM.read_bytes())
    shim.chmod(0o755)
    on_path = tmp_path / "local bin"
    on_path.mkdir()
    (on_path / "supervise-hook").symlink_to(shim)
    return on_path, record


def _git_project(tmp_path: Path, toml: str = "") -> Path:
    project = tmp_path / "proj"
    project.mkdir()
    subprocess.run(["git", "init", "-q", str(project)], check=True)
    if toml:
        (project / "supervise.toml").write_text(toml)
    return project


def _run(command: str, project: Path, path: str, payload: dict[str, object]) -> subprocess.CompletedProcess[bytes]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SUPERVISE_", "CLAUDE"))}
    env.update(PATH=path, CLAUDE_PLUGIN_ROOT=str(CLAUDE_PLUGIN))
    return subprocess.run(["/bin/sh", "-c", command], cwd=project, input=json.dumps(payload, separators=(",", ":")).encode(),
                          capture_output=True, env=env, timeout=60)


def test_claude_marketplace_names_the_plugin_folder() -> None:
    market = json.loads((ROOT / ".claude-plugin" / "marketplace.json").read_text("utf-8"))
    [entry] = market["plugins"]
    folder = (ROOT / entry["source"]).resolve()
    assert folder == CLAUDE_PLUGIN
    manifest = json.loads((folder / ".claude-plugin" / "plugin.json").read_text("utf-8"))
    assert manifest["name"] == entry["name"] == "watchkeeper"


def test_claude_plugin_registers_each_event_through_the_shim() -> None:
    from supervisor.adapters import ADAPTERS

    claude = ADAPTERS["claude"]
    commands = _plugin_commands(CLAUDE_PLUGIN / "hooks" / "hooks.json")
    assert set(commands) == {claude.session_event, claude.prompt_event, claude.post_tool_event,
                             claude.compact_event}
    assert "exec supervise-hook claude --opt-in;" in commands[claude.session_event]
    assert "exec supervise-hook claude --opt-in --event prompt;" in commands[claude.prompt_event]
    assert "exec supervise-hook claude --opt-in --event post-tool;" in commands[claude.post_tool_event]
    assert "exec supervise-hook claude --opt-in --event pre-compact;" in commands["PreCompact"]


def test_plugin_hook_is_silent_where_the_project_did_not_opt_in(
        installed: tuple[Path, Path], tmp_path: Path) -> None:
    """A user-scope plugin serves every repository: without supervise.toml, [tool.supervise]
    or the plugin enabled in the project's settings, its hook prints and creates nothing;
    enabled in ``.claude/settings.json`` (install --plugin at project scope) it serves."""
    on_path, _ = installed
    project = _git_project(tmp_path)
    command = _plugin_commands(CLAUDE_PLUGIN / "hooks" / "hooks.json")["SessionStart"]
    payload = {"session_id": "s", "cwd": str(project), "source": "startup",
               "hook_event_name": "SessionStart"}
    proc = _run(command, project, f"{on_path}:/usr/bin:/bin", payload)
    assert (proc.returncode, proc.stdout) == (0, b""), proc.stderr
    assert not (project / ".supervise").exists()
    (project / ".claude").mkdir(exist_ok=True)
    (project / ".claude" / "settings.json").write_text(
        '{"enabledPlugins": {"watchkeeper@watchkeeper": true}}')
    proc = _run(command, project, f"{on_path}:/usr/bin:/bin", payload)
    assert proc.returncode == 0 and b"additionalContext" in proc.stdout, proc.stderr


def test_plugin_hook_runs_the_installed_package(installed: tuple[Path, Path], tmp_path: Path) -> None:
    on_path, record = installed
    project = _git_project(tmp_path, 'budget = 20\n[[stages]]\nname = "m"\nrun = ["/bin/echo", "PLUGIN-OK"]\n')
    command = _plugin_commands(CLAUDE_PLUGIN / "hooks" / "hooks.json")["SessionStart"]
    proc = _run(command, project, f"{on_path}:/usr/bin:/bin",
                {"session_id": "s", "cwd": str(project), "source": "startup",
                 "hook_event_name": "SessionStart"})
    assert proc.returncode == 0, proc.stderr
    assert "PLUGIN-OK" in json.loads(proc.stdout)["hookSpecificOutput"]["additionalContext"]
    assert record.exists()  # the environment's own interpreter, found through the link


def test_plugin_prompt_hook_takes_the_installed_fast_path(installed: tuple[Path, Path],
                                                           tmp_path: Path) -> None:
    on_path, record = installed
    project = _git_project(tmp_path)
    command = _plugin_commands(CLAUDE_PLUGIN / "hooks" / "hooks.json")["UserPromptSubmit"]
    payload = {"session_id": "s-1", "transcript_path": "/nowhere/t.jsonl", "cwd": str(project),
               "hook_event_name": "UserPromptSubmit", "prompt": "hello"}
    proc = _run(command, project, f"{on_path}:/usr/bin:/bin", payload)
    # nothing pending: the package's hook-fast.sh answered without starting Python
    assert (proc.returncode, proc.stdout, proc.stderr, record.exists()) == (0, b"", b"", False)
    from helpers import configure_deferred, write_result

    configure_deferred(project, "network")
    write_result(project / ".supervise" / "deferred" / "network", "1-abc",
                 {"title": "network", "status": "ok", "exit_code": 0, "seconds": 0.1,
                  "started": 1.0, "finished": 2.0, "output": "NETWORK-OK"})
    proc = _run(command, project, f"{on_path}:/usr/bin:/bin", payload)
    assert proc.returncode == 0 and record.exists() and b"NETWORK-OK" in proc.stdout


def test_plugin_hook_without_supervise_says_one_line_and_exits_zero(tmp_path: Path) -> None:
    project = _git_project(tmp_path)
    for command in _plugin_commands(CLAUDE_PLUGIN / "hooks" / "hooks.json").values():
        proc = _run(command, project, "/usr/bin:/bin", {"session_id": "s", "cwd": str(project)})
        assert proc.returncode == 0 and proc.stdout == b""
        [line] = proc.stderr.decode().strip().splitlines()
        assert "supervise-hook is not on PATH" in line


def _supervise(args: list[str], project: Path, home: Path, path: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SUPERVISE_", "CLAUDE"))}
    env.update(HOME=str(home), PATH=path)
    return subprocess.run([sys.executable, "-m", "supervisor", *args], cwd=project, env=env,
                          capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)


@pytest.fixture
def fake_claude(tmp_path: Path) -> tuple[str, Path]:
    """A ``claude`` on PATH that logs its arguments and, for ``plugin install``, records the
    install in ``~/.claude/plugins/installed_plugins.json`` as the real CLI does (2.1.197)."""
    folder = tmp_path / "cli bin"
    folder.mkdir()
    log = tmp_path / "claude-calls"
    script = folder / "claude"
    python_script(script, f"""import json, os, sys
open({str(log)!r}, "a").write(" ".join(sys.argv[1:]) + "\\n")
if sys.argv[1:3] == ["plugin", "install"]:
    path = os.path.join(os.environ["HOME"], ".claude", "plugins", "installed_plugins.json")
    os.makedirs(os.path.dirname(path), exist_ok=True)
    scope = sys.argv[sys.argv.index("--scope") + 1]
    json.dump({{"version": 2, "plugins": {{sys.argv[3]: [{{"scope": scope, "projectPath": os.getcwd()}}]}}}},
              open(path, "w"))
""")
    script.chmod(0o755)
    return f"{folder}:{Path(sys.executable).parent}:/usr/bin:/bin", log


def test_install_plugin_moves_the_project_to_the_plugin_and_back(tmp_path: Path,
                                                                 fake_claude: tuple[str, Path]) -> None:
    path, log = fake_claude
    home = tmp_path / "home"
    home.mkdir()
    project = _git_project(tmp_path)
    settings = project / ".claude" / "settings.json"
    assert _supervise(["install", "claude"], project, home, path).returncode == 0
    assert "hooks" in json.loads(settings.read_text())
    moved = _supervise(["install", "claude", "--plugin"], project, home, path)
    assert moved.returncode == 0, moved.stderr
    data = json.loads(settings.read_text())
    # the committed file names nothing of this machine: no hooks, the plugin enabled
    assert data == {"enabledPlugins": {"watchkeeper@watchkeeper": True}}
    calls = log.read_text().splitlines()
    assert calls[0].startswith("plugin marketplace add ") and Path(calls[0].split(" ", 3)[3], ".claude-plugin").is_dir()
    assert calls[1] == "plugin install watchkeeper@watchkeeper --scope project"
    doctor = _supervise(["doctor", "claude"], project, home, path)
    assert doctor.returncode == 0, doctor.stdout
    assert "plugin watchkeeper@watchkeeper enabled in" in doctor.stdout and "supervise-hook" in doctor.stdout
    back = _supervise(["install", "claude"], project, home, path)
    assert back.returncode == 0, back.stderr
    data = json.loads(settings.read_text())
    assert "enabledPlugins" not in data and "SessionStart" in data["hooks"]
    gone = _supervise(["uninstall", "claude"], project, home, path)
    assert gone.returncode == 0 and not settings.exists()


def test_doctor_sees_the_plugin_beside_settings_hooks_and_a_plugin_not_installed(
        tmp_path: Path, fake_claude: tuple[str, Path]) -> None:
    path, _ = fake_claude
    home = tmp_path / "home"
    home.mkdir()
    project = _git_project(tmp_path)
    assert _supervise(["install", "claude"], project, home, path).returncode == 0
    local = project / ".claude" / "settings.local.json"
    local.write_text(json.dumps({"enabledPlugins": {"watchkeeper@my-fork": True}}))
    doctor = _supervise(["doctor", "claude"], project, home, path)
    lines = doctor.stdout.splitlines()
    # the one double-registration rule (doctor, issue 22): FAIL, with the fix
    [twice] = [ln for ln in lines if "registered 2 times" in ln and "the plugin watchkeeper@my-fork" in ln]
    assert twice.startswith("FAIL") and "keep one" in twice
    [absent] = [ln for ln in lines if "not installed" in ln]
    assert absent.startswith("FAIL") and "supervise install claude --plugin --scope local" in absent
    assert doctor.returncode == 1
    # uninstall takes both away, each file keeping what is not ours
    assert _supervise(["uninstall", "claude", "--scope", "local"], project, home, path).returncode == 0
    assert not local.exists()


def test_install_plugin_without_the_cli_enables_it_and_says_how_to_finish(tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    project = _git_project(tmp_path)
    proc = _supervise(["install", "claude", "--plugin"], project, home,
                      f"{Path(sys.executable).parent}:/usr/bin:/bin")
    assert proc.returncode == 1
    assert json.loads((project / ".claude" / "settings.json").read_text()) == {
        "enabledPlugins": {"watchkeeper@watchkeeper": True}}
    [line] = proc.stderr.strip().splitlines()
    assert "claude is not on PATH" in line and "claude plugin install watchkeeper@watchkeeper" in line


GEMINI_EXTENSION = ROOT  # the repository is the extension: its manifest and hooks/ at the root


def test_gemini_extension_registers_its_events_through_the_shim() -> None:
    from supervisor.adapters import ADAPTERS
    from supervisor.commands.doctor import _timeout_check
    from supervisor.config._schema import DEFAULT_BUDGET

    gemini = ADAPTERS["gemini"]
    data = json.loads((GEMINI_EXTENSION / "hooks" / "hooks.json").read_text("utf-8"))
    commands = _plugin_commands(GEMINI_EXTENSION / "hooks" / "hooks.json")
    assert set(commands) == {gemini.session_event, gemini.prompt_event, gemini.post_tool_event}
    # the command names its own hooks file (Gemini substitutes ${extensionPath}) instead of
    # repeating the timeout: the file's number is its one home
    assert ('exec supervise-hook gemini --opt-in --registered-in "${extensionPath}/hooks/hooks.json";'
            in commands[gemini.session_event])
    assert "--registered-timeout" not in commands[gemini.session_event]
    # user level (Gemini loads it in every folder): it serves only projects that opted in;
    # the prompt hook may re-emit after a compression (the row's compact_trace): it clamps
    # its budget to its own registered timeout, which fits the budget as the start's does
    assert ('exec supervise-hook gemini --opt-in --event prompt --registered-in '
            '"${extensionPath}/hooks/hooks.json";' in commands[gemini.prompt_event])
    [prompt_handler] = data["hooks"][gemini.prompt_event][0]["hooks"]
    assert _timeout_check(gemini, prompt_handler, DEFAULT_BUDGET).status == "ok"
    assert "exec supervise-hook gemini --opt-in --event post-tool;" in commands[gemini.post_tool_event]
    # the extension's read hook matches the tools settings registrations do
    assert data["hooks"][gemini.post_tool_event][0]["matcher"] == gemini.post_tool_matcher
    # Gemini's own default (60 s) is below the budget: the extension registers one that fits,
    # as doctor judges a settings registration
    [handler] = data["hooks"][gemini.session_event][0]["hooks"]
    assert _timeout_check(gemini, handler, DEFAULT_BUDGET).status == "ok"


def test_the_gemini_extension_hook_clamps_the_budget_to_its_own_file(tmp_path: Path) -> None:
    """``--registered-in FILE``: the session-start timeout of the extension's hooks file (ms for
    Gemini) clamps the budget, as ``--registered-timeout`` does for a settings install; the
    old hook knew no such option and ran the whole budget past Gemini's kill."""
    project = _git_project(tmp_path, 'budget = 20\ngrace = 0.5\n[[stages]]\nname = "m"\n'
                           'run = ["/bin/echo", "EXT-OK"]\n')
    hooks = tmp_path / "hooks.json"
    hooks.write_text(json.dumps({"hooks": {"SessionStart": [{"matcher": "", "hooks": [
        {"type": "command", "command": "x", "timeout": 8000}]}]}}))
    proc = subprocess.run([sys.executable, "-m", "supervisor", "hook", "gemini", "--take-lock",
                           "--registered-in", str(hooks)], cwd=project, capture_output=True,
                          timeout=60, input=json.dumps({"hook_event_name": "SessionStart",
                                                        "source": "startup", "session_id": "s",
                                                        "cwd": str(project)}).encode())
    assert proc.returncode == 0, proc.stderr
    context = json.loads(proc.stdout)["hookSpecificOutput"]["additionalContext"]
    assert "budget clamped to 2.5s" in context and "8s hook timeout" in context, context
    assert "EXT-OK" in context
    proc = subprocess.run([sys.executable, "-m", "supervisor", "hook", "gemini", "--take-lock",
                           "--registered-in", str(tmp_path / "missing.json")], cwd=project,
                          capture_output=True, timeout=60, input=b"{}")
    assert proc.returncode == 0 and b"EXT-OK" in proc.stdout
    assert b"--registered-in:" in proc.stderr and b"not clamped" in proc.stderr


def test_the_gemini_extension_is_the_repository_root_and_holds_the_version() -> None:
    """``gemini extensions install <repository URL>`` clones the repository and loads the
    ``gemini-extension.json`` at its root (Gemini's registry wants it there, with a required
    ``version``): both it and ``hooks/hooks.json`` are committed at the root. Its version is
    the package's one: the build reads it (the installed metadata) and so does
    ``supervisor._version`` (no second copy)."""
    import importlib.metadata
    import subprocess as sp

    from supervisor._version import MANIFEST, VERSION, read_version

    tracked = sp.run(["git", "-C", str(ROOT), "ls-files", MANIFEST, "hooks/hooks.json"],
                     capture_output=True, text=True, timeout=30).stdout.split()
    assert tracked == [MANIFEST, "hooks/hooks.json"]
    manifest = json.loads((ROOT / MANIFEST).read_text("utf-8"))
    assert manifest["name"] == "watchkeeper" and manifest["version"]
    assert VERSION == read_version() == manifest["version"]
    assert importlib.metadata.version("watchkeeper") == manifest["version"]
    assert manifest["version"] not in (ROOT / "supervisor" / "_version.py").read_text()


def test_a_link_to_the_old_extension_folder_is_named_and_relinked(tmp_path: Path) -> None:
    """A link made before the repository's root became the extension points at
    ``plugins/gemini``, gone now: Gemini loads nothing from it. Doctor fails on it with the
    fix, and ``install gemini --plugin`` unlinks and links again (the old code saw an
    extension installed and did nothing)."""
    folder = tmp_path / "cli bin"
    folder.mkdir()
    log = tmp_path / "gemini-calls"
    script = folder / "gemini"
    python_script(script, f"""import json, os, shutil, sys
open({str(log)!r}, "a").write(" ".join(sys.argv[1:]) + "\\n")
folder = os.path.join(os.environ["HOME"], ".gemini", "extensions", "watchkeeper")
if sys.argv[2] == "uninstall":
    shutil.rmtree(folder)
else:
    os.makedirs(folder, exist_ok=True)
    json.dump({{"source": sys.argv[3], "type": "link"}}, open(os.path.join(folder, ".gemini-extension-install.json"), "w"))
""")
    script.chmod(0o755)
    path = f"{folder}:{Path(sys.executable).parent}:/usr/bin:/bin"
    home = tmp_path / "home"
    linked = home / ".gemini" / "extensions" / "watchkeeper"
    linked.mkdir(parents=True)
    old = tmp_path / "checkout" / "plugins" / "gemini"  # moved away since
    (linked / ".gemini-extension-install.json").write_text(json.dumps({"source": str(old), "type": "link"}))
    project = _git_project(tmp_path)
    doctor = _supervise(["doctor", "gemini"], project, home, path)
    assert doctor.returncode != 0
    assert f"is linked to {old}, which holds no gemini-extension.json" in doctor.stdout, doctor.stdout
    assert "supervise install gemini --plugin" in doctor.stdout
    moved = _supervise(["install", "gemini", "--plugin"], project, home, path)
    assert moved.returncode == 0, moved.stderr
    uninstall, link = log.read_text().splitlines()
    assert uninstall == "extensions uninstall watchkeeper"
    assert link.startswith("extensions link ") and link.endswith(" --consent")
    # the logged line joins the arguments with spaces: the folder is what lies between
    folder = link.removeprefix("extensions link ").removesuffix(" --consent")
    assert Path(folder, "gemini-extension.json").is_file(), link
    doctor = _supervise(["doctor", "gemini"], project, home, path)
    assert "holds no gemini-extension.json" not in doctor.stdout
    assert "extension watchkeeper installed in" in doctor.stdout, doctor.stdout


def test_gemini_extension_hook_runs_the_installed_package(installed: tuple[Path, Path],
                                                          tmp_path: Path) -> None:
    on_path, record = installed
    project = _git_project(tmp_path, 'budget = 20\n[[stages]]\nname = "m"\nrun = ["/bin/echo", "EXT-OK"]\n')
    command = _plugin_commands(GEMINI_EXTENSION / "hooks" / "hooks.json")["SessionStart"]
    proc = _run(command, project, f"{on_path}:/usr/bin:/bin",
                {"session_id": "s", "cwd": str(project), "source": "startup",
                 "hook_event_name": "SessionStart"})
    assert proc.returncode == 0, proc.stderr
    assert "EXT-OK" in json.loads(proc.stdout)["hookSpecificOutput"]["additionalContext"]


def test_install_gemini_plugin_links_the_extension_and_doctor_sees_it(tmp_path: Path) -> None:
    """A recording ``gemini`` on PATH that links as the real CLI does (0.61.0:
    ``~/.gemini/extensions/watchkeeper/.gemini-extension-install.json``)."""
    folder = tmp_path / "cli bin"
    folder.mkdir()
    log = tmp_path / "gemini-calls"
    script = folder / "gemini"
    python_script(script, f"""import json, os, sys
open({str(log)!r}, "a").write(" ".join(sys.argv[1:]) + "\\n")
folder = os.path.join(os.environ["HOME"], ".gemini", "extensions", "watchkeeper")
os.makedirs(folder, exist_ok=True)
json.dump({{"source": sys.argv[3], "type": "link"}}, open(os.path.join(folder, ".gemini-extension-install.json"), "w"))
""")
    script.chmod(0o755)
    path = f"{folder}:{Path(sys.executable).parent}:/usr/bin:/bin"
    home = tmp_path / "home"
    home.mkdir()
    project = _git_project(tmp_path)
    assert _supervise(["install", "gemini"], project, home, path).returncode == 0
    doctor = _supervise(["doctor", "gemini"], project, home, path)
    assert "extension watchkeeper" not in doctor.stdout
    moved = _supervise(["install", "gemini", "--plugin"], project, home, path)
    assert moved.returncode == 0, moved.stderr
    [call] = log.read_text().splitlines()
    assert call.startswith("extensions link ") and call.endswith(" --consent")
    folder = call.removeprefix("extensions link ").removesuffix(" --consent")  # may hold a space
    assert Path(folder, "gemini-extension.json").is_file(), call
    assert not (project / ".gemini" / "settings.json").exists()  # it held only our hooks
    # the extension serves only projects that opted in, and the settings hooks it replaced
    # were this project's opt-in: install opts it in with a supervise.toml of defaults
    from supervisor.commands.install import OPT_IN_TOML

    assert (project / "supervise.toml").read_text() == OPT_IN_TOML
    doctor = _supervise(["doctor", "gemini"], project, home, path)
    assert doctor.returncode == 0, doctor.stdout
    assert "extension watchkeeper installed in" in doctor.stdout
    assert "the extension watchkeeper serves this project" in doctor.stdout, doctor.stdout
    # the settings install again beside the extension: the extension (--opt-in) stays silent
    # where the project's own registration serves, so the digest arrives once: no FAIL
    assert _supervise(["install", "gemini"], project, home, path).returncode == 0
    doctor = _supervise(["doctor", "gemini"], project, home, path)
    assert "registered 2 times" not in doctor.stdout
    assert ("the extension watchkeeper stays silent here: the project's own registration "
            "serves this session") in doctor.stdout, doctor.stdout
    # a user-scope settings install beside it: both carry --opt-in, both serve a subdirectory
    # session of this project (Gemini reads .gemini/settings.json from the working directory
    # only): a FAIL whose one fix keeps the extension
    assert _supervise(["install", "gemini", "--scope", "user"], project, home, path).returncode == 0
    doctor = _supervise(["doctor", "gemini"], project, home, path)
    [twice] = [ln for ln in doctor.stdout.splitlines() if "registered 2 times" in ln]
    assert twice.startswith("FAIL") and "the extension watchkeeper" in twice, twice
    assert "keep one: `supervise uninstall gemini --scope user`" in doctor.stdout, doctor.stdout
    again = _supervise(["install", "gemini", "--plugin"], project, home, path)
    assert again.returncode == 0 and len(log.read_text().splitlines()) == 1  # linked already


def test_the_gemini_extension_serves_only_projects_that_opted_in(installed: tuple[Path, Path],
                                                                 tmp_path: Path) -> None:
    """The extension is user level (Gemini loads it in every folder): its hooks carry
    ``--opt-in``, so a repository without a supervise.toml, [tool.supervise] or project
    registration gets nothing and nothing is created there; an opted-in project gets the digest
    in every subdirectory session; where the working directory's .gemini/settings.json holds
    our project registration, that one serves and the extension stays silent (the old
    extension ran the digest in every repository and beside a project registration)."""
    on_path, _ = installed
    path = f"{on_path}:/usr/bin:/bin"
    commands = _plugin_commands(GEMINI_EXTENSION / "hooks" / "hooks.json")

    def start(cwd: Path) -> subprocess.CompletedProcess[bytes]:
        return _run(commands["SessionStart"], cwd, path,
                    {"session_id": "s", "cwd": str(cwd), "source": "startup",
                     "hook_event_name": "SessionStart"})

    other = tmp_path / "other"
    other.mkdir()
    subprocess.run(["git", "init", "-q", str(other)], check=True)
    proc = start(other)
    assert proc.returncode == 0 and proc.stdout == b"", proc.stdout
    for event, payload in (("BeforeAgent", {"prompt": "hi"}),
                           ("AfterTool", {"tool_name": "read_file",
                                          "tool_input": {"file_path": str(other / "x")}})):
        proc = _run(commands[event], other, path, {"session_id": "s", "cwd": str(other),
                                                    "hook_event_name": event, **payload})
        assert proc.returncode == 0 and proc.stdout == b"", (event, proc.stdout)
    assert not (other / ".supervise").exists()
    assert "supervise" not in (other / ".git" / "info" / "exclude").read_text()

    project = _git_project(tmp_path, 'budget = 20\n[[stages]]\nname = "m"\n'
                           'run = ["/bin/sh", "-c", "echo EXT-OK in=$SUPERVISE_CWD"]\n')
    widget = project / "packages" / "widget"
    widget.mkdir(parents=True)
    proc = start(widget)
    assert proc.returncode == 0, proc.stderr
    assert f"EXT-OK in={widget}" in json.loads(proc.stdout)["hookSpecificOutput"]["additionalContext"]

    (widget / ".gemini").mkdir()
    (widget / ".gemini" / "settings.json").write_text(json.dumps({"hooks": {"SessionStart": [
        {"hooks": [{"type": "command", "command": f"{sys.executable} -I -m supervisor hook gemini"}]}]}}))
    proc = _run(commands["SessionStart"], widget, path,
                {"session_id": "s2", "cwd": str(widget), "source": "startup",
                 "hook_event_name": "SessionStart"})
    assert proc.returncode == 0 and proc.stdout == b"", proc.stdout


def test_doctor_judges_an_extension_without_opt_in_as_one_serving_every_project(
        tmp_path: Path) -> None:
    """An extension copied by an older version (its hooks without ``--opt-in``) runs in every
    repository: doctor warns with the fix that links this version's, and beside the project's
    settings hooks it is a double registration (both fire)."""
    home = tmp_path / "home"
    folder = home / ".gemini" / "extensions" / "watchkeeper"
    (folder / "hooks").mkdir(parents=True)
    (folder / "gemini-extension.json").write_text('{"name": "watchkeeper", "version": "0.0.1"}')
    old = (GEMINI_EXTENSION / "hooks" / "hooks.json").read_text().replace(" --opt-in", "")
    assert "--opt-in" not in old
    (folder / "hooks" / "hooks.json").write_text(old)
    project = _git_project(tmp_path, "budget = 20\n")
    path = f"{Path(sys.executable).parent}:/usr/bin:/bin"
    assert _supervise(["install", "gemini"], project, home, path).returncode == 0
    doctor = _supervise(["doctor", "gemini"], project, home, path)
    assert "the extension watchkeeper runs in every repository you open" in doctor.stdout
    assert "gemini extensions uninstall watchkeeper && supervise install gemini --plugin" in doctor.stdout
    [twice] = [ln for ln in doctor.stdout.splitlines() if "registered 2 times" in ln]
    assert twice.startswith("FAIL"), doctor.stdout


def test_shim_where_names_the_environment_and_its_package(installed: tuple[Path, Path]) -> None:
    """``supervise-hook --where`` (what the Pi and OpenCode packages ask, once at load): the
    environment's interpreter, and the folder of the package it imports."""
    on_path, _ = installed
    proc = subprocess.run(["/bin/sh", "-c", "supervise-hook --where"], capture_output=True,
                          text=True, timeout=60, env={**os.environ, "PATH": f"{on_path}:/usr/bin:/bin"})
    assert proc.returncode == 0, proc.stderr
    python, package = proc.stdout.splitlines()
    assert python.endswith("/tools env/bin/python") and os.path.isabs(python)
    assert Path(package, "bridges", "core.mjs").is_file()
    assert Path(package).resolve() == (ROOT / "supervisor").resolve()


@pytest.mark.parametrize("name", ["pi", "opencode"])
def test_extension_packages_load_the_installed_bridge_not_a_copy(name: str) -> None:
    folder = ROOT / "plugins" / name
    manifest = json.loads((folder / "package.json").read_text("utf-8"))
    if name == "pi":
        assert "pi-package" in manifest["keywords"] and manifest["pi"]["extensions"] == ["./index.ts"]
        entry = folder / "index.ts"
    else:
        entry = folder / manifest["main"]
    text = entry.read_text("utf-8")
    assert 'execFileSync("supervise-hook", ["--where"]' in text and '"bridges", "core.mjs"' in text
    assert sorted(p.name for p in folder.iterdir()) == sorted(["package.json", entry.name])


@pytest.mark.parametrize("harness", ["pi", "opencode"])
def test_doctor_sees_an_extension_package_and_one_beside_the_placed_bridge(tmp_path: Path,
                                                                          harness: str) -> None:
    """As ``pi install PATH -l`` (0.73.1) and an ``opencode.json`` ``plugin`` entry (1.18.33)
    name the package: doctor reports it, and warns when the placed bridge loads too."""
    home = tmp_path / "home"
    home.mkdir()
    project = _git_project(tmp_path)
    path = f"{Path(sys.executable).parent}:/usr/bin:/bin"
    assert _supervise(["doctor", harness], project, home, path).returncode == 1  # nothing yet
    with (project / ".git" / "info" / "exclude").open("a") as exclude:
        exclude.write("/.supervise/\n")  # as any install does; a package install writes none
    folder = ROOT / "plugins" / harness

    def name_the_package() -> None:
        if harness == "pi":
            (project / ".pi").mkdir(exist_ok=True)
            (project / ".pi" / "settings.json").write_text(json.dumps({"packages": [os.path.relpath(folder, project / ".pi")]}))
        else:
            (project / "opencode.json").write_text(json.dumps({"plugin": [folder.as_uri()]}))

    name_the_package()
    doctor = _supervise(["doctor", harness], project, home, path)
    assert doctor.returncode == 0, doctor.stdout
    assert "package" in doctor.stdout and "is loaded from" in doctor.stdout
    (project / ("opencode.json" if harness == "opencode" else ".pi/settings.json")).unlink()
    assert _supervise(["install", harness], project, home, path).returncode == 0
    name_the_package()  # by hand, beside the placed bridge (install would move it back)
    doctor = _supervise(["doctor", harness], project, home, path)
    [twice] = [ln for ln in doctor.stdout.splitlines() if "registered 2 times" in ln]
    assert twice.startswith("FAIL") and f"supervise uninstall {harness}" in twice


@pytest.mark.parametrize("plant", ["fifo", "huge", "deep", "device link"])
def test_doctor_names_a_planted_plugin_list_and_never_blocks_on_it(tmp_path: Path, plant: str) -> None:
    """Claude Code's ``installed_plugins.json`` is read guarded: a FIFO there used to hold
    ``doctor`` forever, a link to ``/dev/zero`` to read without end. Each is one line."""
    home = tmp_path / "home"
    listing = home / ".claude" / "plugins" / "installed_plugins.json"
    listing.parent.mkdir(parents=True)
    if plant == "fifo":
        os.mkfifo(listing)
    elif plant == "huge":
        with listing.open("wb") as f:
            f.truncate(3 << 30)  # sparse: one fstat, never read
    elif plant == "deep":
        listing.write_text("[" * 100_000 + "]" * 100_000)
    else:
        listing.symlink_to("/dev/zero")
    project = _git_project(tmp_path)
    (project / ".claude").mkdir()
    (project / ".claude" / "settings.json").write_text(
        json.dumps({"enabledPlugins": {"watchkeeper@watchkeeper": True}}))
    doctor = _supervise(["doctor", "claude"], project, home, f"{Path(sys.executable).parent}:/usr/bin:/bin")
    [line] = [ln for ln in doctor.stdout.splitlines() if "cache has it is unknown" in ln]
    why = {"fifo": "not a regular file", "huge": "too large (3221225472 bytes",
           "deep": "not valid JSON (RecursionError)", "device link": "not a regular file"}[plant]
    assert line.startswith("warn") and why in line and str(listing) in line, line


@pytest.fixture
def fake_pi(tmp_path: Path) -> tuple[str, Path]:
    """A ``pi`` on PATH that logs its arguments and, for ``install DIR [-l]`` and ``remove DIR
    [-l]``, edits ``packages`` as the real CLI does (0.73.1: the path relative to the
    settings file's folder; ``-l`` the project's ``.pi/settings.json``)."""
    folder = tmp_path / "pi bin"
    folder.mkdir()
    log = tmp_path / "pi-calls"
    script = folder / "pi"
    python_script(script, f"""import json, os, sys
open({str(log)!r}, "a").write(" ".join(sys.argv[1:]) + "\\n")
verb, source, *rest = sys.argv[1:]
where = os.path.join(".pi") if "-l" in rest else os.environ["PI_CODING_AGENT_DIR"]
path = os.path.join(where, "settings.json")
data = json.load(open(path)) if os.path.exists(path) else {{}}
rel = os.path.relpath(source, where)
if verb == "install":
    data.setdefault("packages", []).append(rel)
else:
    data["packages"] = [p for p in data.get("packages", []) if os.path.abspath(os.path.join(where, p)) != os.path.abspath(source)]
os.makedirs(where, exist_ok=True)
json.dump(data, open(path, "w"))
""")
    script.chmod(0o755)
    return f"{folder}:{Path(sys.executable).parent}:/usr/bin:/bin", log


@pytest.mark.parametrize("harness", ["pi", "opencode"])
def test_install_plugin_moves_a_bridge_harness_to_its_package_and_back(
        tmp_path: Path, harness: str, fake_pi: tuple[str, Path]) -> None:
    """``install pi|opencode --plugin`` loads the package of ``plugins/`` (``pi install DIR -l``;
    OpenCode's ``plugin`` list, every other key kept) and removes the bridge placed at that
    scope; doctor sees the package alone; ``install`` without ``--plugin`` moves back;
    ``uninstall`` removes the package. Before, ``--plugin`` placed the bridge as if absent."""
    path, log = fake_pi
    home = tmp_path / "home"
    home.mkdir()
    agent = tmp_path / "agent"
    project = _git_project(tmp_path)
    config = project / (".pi/settings.json" if harness == "pi" else "opencode.json")
    if harness == "opencode":
        config.write_text(json.dumps({"theme": "dark", "plugin": ["other-plugin"]}))
    env_path = path

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith(("SUPERVISE_", "XDG_"))}
        env.update(HOME=str(home), PATH=env_path, PI_CODING_AGENT_DIR=str(agent))
        return subprocess.run([sys.executable, "-m", "supervisor", *args], cwd=project, env=env,
                              capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)

    entry = project / (".pi/extensions/watchkeeper/index.ts" if harness == "pi"
                       else ".opencode/plugins/watchkeeper.ts")
    assert run("install", harness).returncode == 0 and entry.exists()
    moved = run("install", harness, "--plugin")
    assert moved.returncode == 0, moved.stderr
    assert not entry.exists(), moved.stdout  # the placed bridge gave way to the package
    data = json.loads(config.read_text())
    folder = ROOT / "plugins" / harness
    if harness == "pi":
        assert log.read_text().splitlines() == [f"install {folder} -l"]
        assert data["packages"] == [os.path.relpath(folder, project / ".pi")]
    else:
        assert data == {"theme": "dark", "plugin": ["other-plugin", folder.as_uri()]}
    doctor = run("doctor", harness)
    assert doctor.returncode == 0, doctor.stdout
    assert "is loaded from" in doctor.stdout and "registered 2 times" not in doctor.stdout
    assert "unchanged" in run("install", harness, "--plugin").stdout
    back = run("install", harness)  # back to the placed bridge
    assert back.returncode == 0, back.stderr
    assert entry.exists() and "is loaded from" not in run("doctor", harness).stdout
    assert run("install", harness, "--plugin").returncode == 0
    gone = run("uninstall", harness)
    assert gone.returncode == 0, gone.stderr
    assert "is loaded from" not in run("doctor", harness).stdout
    if harness == "opencode":
        assert json.loads(config.read_text()) == {"theme": "dark", "plugin": ["other-plugin"]}


@pytest.mark.parametrize("before", [None, {"theme": "dark"}])
def test_uninstall_pi_leaves_no_empty_package_list(tmp_path: Path, fake_pi: tuple[str, Path],
                                                  before: dict[str, str] | None) -> None:
    """``pi remove`` (0.73.1, and the fake) leaves ``"packages": []``: ``uninstall pi`` drops
    it, the file when it held nothing else and the ``.pi/`` folder when then empty; the
    user's other keys are kept. The old code left ``{"packages": []}``."""
    path, _ = fake_pi
    home = tmp_path / "home"
    home.mkdir()
    project = _git_project(tmp_path)
    config = project / ".pi" / "settings.json"
    if before is not None:
        config.parent.mkdir()
        config.write_text(json.dumps(before))
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SUPERVISE_", "XDG_"))}
    env.update(HOME=str(home), PATH=path, PI_CODING_AGENT_DIR=str(tmp_path / "agent"))

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "supervisor", *args], cwd=project, env=env,
                              capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)

    assert run("install", "pi", "--plugin").returncode == 0
    assert json.loads(config.read_text())["packages"]
    gone = run("uninstall", "pi")
    assert gone.returncode == 0, gone.stderr
    if before is None:
        assert not (project / ".pi").exists()
    else:
        assert json.loads(config.read_text()) == before


def test_install_pi_plugin_without_the_cli_says_how_to_finish(tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    project = _git_project(tmp_path)
    proc = _supervise(["install", "pi", "--plugin"], project, home,
                      f"{Path(sys.executable).parent}:/usr/bin:/bin")
    assert proc.returncode == 1
    assert "pi is not on PATH; run by hand: pi install " in proc.stderr and proc.stderr.strip().endswith("-l")
