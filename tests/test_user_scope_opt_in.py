"""A user-scope install that a project opts into: the registration (``--opt-in``) stays silent
in a repository that did not opt in and creates nothing there; it serves every subdirectory
session of one that did (a supervise.toml, a [tool.supervise] table, or a project-scope
install, which Claude Code does not load from a subdirectory); doctor explains the monorepo
case and its fix is the right one. Real CLI processes; the command run is the one install
registered."""

from __future__ import annotations

import json
import shlex
import subprocess
from pathlib import Path

import pytest

from helpers import run_cli


def repo(path: Path) -> Path:
    (path / "packages" / "widget").mkdir(parents=True)
    subprocess.run(["git", "init", "-q", str(path)], check=True, timeout=30)
    return path


def registered(home: Path, event: str = "SessionStart") -> list[str]:
    data = json.loads((home / ".claude" / "settings.json").read_text())
    return shlex.split(data["hooks"][event][0]["hooks"][0]["command"])


def fire(argv: list[str], cwd: Path, payload: dict[str, object]) -> str:
    proc = subprocess.run(argv, cwd=cwd, input=json.dumps(payload).encode(), capture_output=True,
                          timeout=60)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.decode()


def start(cwd: Path, sid: str = "s1") -> dict[str, object]:
    return {"session_id": sid, "cwd": str(cwd), "source": "startup",
            "hook_event_name": "SessionStart"}


@pytest.fixture
def installed(isolated_home: Path, tmp_path: Path) -> list[str]:
    where = repo(tmp_path / "where-installed")
    (where / "supervise.toml").write_text("budget = 30\n")
    assert run_cli("install", "claude", "--scope", "user", cwd=where).returncode == 0
    argv = registered(isolated_home)
    assert "--opt-in" in argv
    assert json.loads((isolated_home / ".claude" / "settings.json").read_text())[
        "hooks"]["SessionStart"][0]["hooks"][0]["timeout"] == 180  # the default budget fits
    assert "--opt-in" in registered(isolated_home, "PostToolUse")
    return argv


MARK = '[[stages]]\nname = "mark"\nrun = ["sh", "-c", "echo OPTED-IN-$SUPERVISE_CWD"]\n'


def test_silent_and_creates_nothing_in_a_repository_that_did_not_opt_in(
        installed: list[str], tmp_path: Path) -> None:
    other = repo(tmp_path / "other")
    assert fire(installed, other / "packages" / "widget", start(other / "packages" / "widget")) == ""
    assert fire(installed, other, start(other)) == ""
    assert not (other / ".supervise").exists()
    assert "supervise" not in (other / ".git" / "info" / "exclude").read_text()


def test_serves_every_subdirectory_session_of_an_opted_in_project(
        installed: list[str], tmp_path: Path) -> None:
    mono = repo(tmp_path / "mono")
    (mono / "supervise.toml").write_text(MARK)
    out = fire(installed, mono / "packages" / "widget", start(mono / "packages" / "widget"))
    assert f"OPTED-IN-{mono / 'packages' / 'widget'}" in out


def test_a_pyproject_table_opts_in_too(installed: list[str], tmp_path: Path) -> None:
    mono = repo(tmp_path / "py")
    (mono / "pyproject.toml").write_text("[project]\nname = 'x'\n\n[tool.supervise]\n"
                                         + MARK.replace("[[stages]]", "[[tool.supervise.stages]]"))
    assert "OPTED-IN-" in fire(installed, mono / "packages", start(mono / "packages"))


def test_a_project_install_counts_and_its_own_registration_serves_the_root(
        installed: list[str], tmp_path: Path, isolated_home: Path) -> None:
    mono = repo(tmp_path / "proj")
    assert run_cli("install", "claude", cwd=mono).returncode == 0  # a project-scope install
    # at the root Claude loads .claude/settings.json itself: the user registration is silent
    assert fire(installed, mono, start(mono)) == ""
    # in packages/widget Claude loads no project settings: the user registration serves
    widget = mono / "packages" / "widget"
    assert "## Repository" in fire(installed, widget, start(widget, "s2"))


def test_doctor_explains_the_monorepo_case_with_the_right_fix(
        isolated_home: Path, tmp_path: Path) -> None:
    mono = repo(tmp_path / "mono")
    assert run_cli("install", "claude", cwd=mono).returncode == 0
    out = run_cli("doctor", "claude", "-C", str(mono / "packages" / "widget")).stdout.decode()
    line = next(ln for ln in out.splitlines() if "gets no digest" in ln)
    assert "supervise install claude --scope user" in line
    assert run_cli("install", "claude", "--scope", "user", cwd=mono).returncode == 0
    out = run_cli("doctor", "claude", "-C", str(mono / "packages" / "widget")).stdout.decode()
    assert "the user-scope registration serves this project" in out
    assert "gets no digest" not in out
    other = repo(tmp_path / "other")
    out = run_cli("doctor", "claude", "-C", str(other)).stdout.decode()
    assert "the user-scope registration stays silent here: this project did not opt in" in out
    assert "supervise config --default >" in out
    assert "fix: supervise install claude\n" not in out + "\n"  # never a second registration


# ------------------------------------------------- the Pi and OpenCode extensions (bridges)

def placed_argv(folder: Path, harness: str, cwd: Path, sid: str = "s1") -> list[str]:
    """The ``supervise bridge`` command the placed ``core.mjs`` runs for a session start, as
    its own ``loadSettings`` and ``bridgeArgv`` build it from the placed watchkeeper.json."""
    import shutil

    node = shutil.which("node")
    if node is None:
        pytest.skip("node is not installed")
    script = ("const c = await import(process.argv[1]); const s = c.loadSettings(process.argv[2]);"
              "process.stdout.write(JSON.stringify(c.bridgeArgv(s, process.argv[3], 'startup',"
              " process.argv[4], process.argv[5])))")
    proc = subprocess.run([node, "--input-type=module", "-e", script, str(folder / "core.mjs"),
                           str(folder), harness, sid, str(cwd)], capture_output=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    return list(json.loads(proc.stdout))


def bridge(argv: list[str], cwd: Path) -> dict[str, object]:
    proc = subprocess.run(argv, cwd=cwd, capture_output=True, timeout=60,
                          stdin=subprocess.DEVNULL)
    assert proc.returncode == 0, proc.stderr
    return dict(json.loads(proc.stdout.decode().strip().splitlines()[-1]))


@pytest.fixture
def placed(isolated_home: Path, tmp_path: Path) -> dict[str, Path]:
    """The Pi and OpenCode bridges placed at user scope (their folders of core.mjs)."""
    where = repo(tmp_path / "where-installed")
    (where / "supervise.toml").write_text("budget = 30\n")
    for harness in ("pi", "opencode"):
        proc = run_cli("install", harness, "--scope", "user", cwd=where)
        assert proc.returncode == 0, proc.stderr
    folders = {"pi": isolated_home / ".pi" / "agent" / "extensions" / "watchkeeper",
               "opencode": isolated_home / ".config" / "opencode" / "plugins" / "watchkeeper"}
    for folder in folders.values():
        assert json.loads((folder / "watchkeeper.json").read_text())["opt_in"] is True
    return folders


@pytest.mark.parametrize("harness", ["pi", "opencode"])
def test_a_user_scope_extension_is_silent_where_no_one_opted_in(
        placed: dict[str, Path], harness: str, tmp_path: Path) -> None:
    """The old code placed no opt-in mark: the user-scope extension ran the digest in every
    repository opened (a .supervise/ and an exclude line in each)."""
    other = repo(tmp_path / "other")
    widget = other / "packages" / "widget"
    argv = placed_argv(placed[harness], harness, widget)
    assert "--opt-in" in argv
    got = bridge(argv, widget)
    assert got["kind"] == "ineligible" and "did not opt in" in str(got["error"]), got
    hook = [argv[0], "-I", "-m", "supervisor", "hook", harness, "--event", "prompt", "--opt-in"]
    assert fire(hook, widget, {"session_id": "s1", "cwd": str(widget)}) == ""
    assert not (other / ".supervise").exists()
    assert "supervise" not in (other / ".git" / "info" / "exclude").read_text()


@pytest.mark.parametrize("harness", ["pi", "opencode"])
def test_a_user_scope_extension_serves_every_subdirectory_of_an_opted_in_project(
        placed: dict[str, Path], harness: str, tmp_path: Path) -> None:
    mono = repo(tmp_path / "mono")
    (mono / "supervise.toml").write_text(MARK)
    widget = mono / "packages" / "widget"
    got = bridge(placed_argv(placed[harness], harness, widget), widget)
    assert got["kind"] == "ready" and f"OPTED-IN-{widget}" in str(got["text"]), got


def test_a_project_extension_opts_the_project_in(placed: dict[str, Path], tmp_path: Path) -> None:
    """A project-scope bridge opts its project in: the user-scope one serves there, at the
    root and in every subdirectory (where both copies load in one harness process, one of
    them stands down: core.mjs claimLoad, tests/js)."""
    mono = repo(tmp_path / "proj")
    for harness in ("pi", "opencode"):
        assert run_cli("install", harness, cwd=mono).returncode == 0  # project scope
    widget = mono / "packages" / "widget"
    for harness in ("pi", "opencode"):
        for cwd in (mono, widget):
            got = bridge(placed_argv(placed[harness], harness, cwd), cwd)
            assert got["kind"] == "ready", (harness, cwd, got["error"])


def test_doctor_explains_the_monorepo_case_for_pi(isolated_home: Path, tmp_path: Path) -> None:
    """Pi loads extensions from its working directory only: doctor in packages/widget says a
    session there gets nothing from the project's extension, and the fix is the user scope;
    after it, doctor says the user-scope bridge serves (OpenCode loads the root's itself)."""
    mono = repo(tmp_path / "mono")
    for harness in ("pi", "opencode"):
        assert run_cli("install", harness, cwd=mono).returncode == 0
    widget = str(mono / "packages" / "widget")
    out = run_cli("doctor", "pi", "-C", widget).stdout.decode()
    line = next(ln for ln in out.splitlines() if "gets no digest" in ln)
    assert "supervise install pi --scope user" in out and "Pi" in line
    assert "gets no digest" not in run_cli("doctor", "opencode", "-C", widget).stdout.decode()
    assert run_cli("install", "pi", "--scope", "user", cwd=mono).returncode == 0
    out = run_cli("doctor", "pi", "-C", widget).stdout.decode()
    assert "the user-scope bridge serves this project" in out and "gets no digest" not in out
    assert "registered 2 times" not in out


@pytest.mark.parametrize("harness", ["pi", "opencode"])
def test_a_user_scope_extension_waits_at_least_the_default_budget(
        isolated_home: Path, tmp_path: Path, harness: str) -> None:
    """Placed from a project with a 30 s budget, the user-scope extension must not cut the
    wait of every other project to 30 s (the old code wrote the installing project's budget,
    and doctor warned in every project left at the 120 s default)."""
    where = repo(tmp_path / "small")
    (where / "supervise.toml").write_text("budget = 30\n")
    assert run_cli("install", harness, "--scope", "user", cwd=where).returncode == 0
    [settings] = [p for p in isolated_home.rglob("watchkeeper.json")]
    assert json.loads(settings.read_text())["budget"] == 120
    plain = repo(tmp_path / "plain")
    (plain / "supervise.toml").write_text("budget = 120\n")
    out = run_cli("doctor", harness, "-C", str(plain)).stdout.decode()
    assert "says budget" not in out, out
    big = repo(tmp_path / "big")
    (big / "supervise.toml").write_text("budget = 200\n")
    out = run_cli("doctor", harness, "-C", str(big)).stdout.decode()
    line = next(ln for ln in out.splitlines() if "says budget 120s" in ln)
    assert f"supervise install {harness} --scope user" in line, line


def name_the_package(harness: str, project: Path, where: str = "project") -> Path:
    """Our package of ``plugins/`` named as ``pi install DIR [-l]`` (0.73.1) and an
    ``opencode.json`` ``plugin`` entry (1.18.33) name it: in the project's configuration, or
    (``where="user"``) in the user's; returns that file."""
    import os

    folder = Path(__file__).resolve().parent.parent / "plugins" / harness
    if harness == "pi":
        base = project / ".pi" if where == "project" else Path(os.environ["HOME"], ".pi", "agent")
        config, entry = base / "settings.json", os.path.relpath(folder, base)
        key = "packages"
    else:
        config = (project / "opencode.json" if where == "project" else
                  Path(os.environ["HOME"], ".config", "opencode", "opencode.json"))
        entry, key = folder.as_uri(), "plugin"
    config.parent.mkdir(parents=True, exist_ok=True)
    data = json.loads(config.read_text()) if config.is_file() else {}
    data.setdefault(key, []).append(entry)
    config.write_text(json.dumps(data))
    return config


@pytest.mark.parametrize("harness", ["pi", "opencode"])
def test_a_project_package_beside_the_user_bridge_never_loses_the_digest(
        placed: dict[str, Path], harness: str, tmp_path: Path) -> None:
    """A project that loads our package (``pi install plugins/pi -l``, opencode.json) but has
    no supervise.toml, beside the user-scope bridge: both load in one harness process and the
    first to load serves, the other stands down (core.mjs claimLoad). The old gate did not
    count the package as the project's opt-in, so when the user's bridge loaded first it
    claimed the load and then stood silent: no digest at all. The package counts now, so
    whichever copy serves delivers, at the root and in every subdirectory; doctor passes the
    pair (one delivery) instead of failing it."""
    mono = repo(tmp_path / "mono")
    name_the_package(harness, mono)
    widget = mono / "packages" / "widget"
    for cwd in (mono, widget):
        got = bridge(placed_argv(placed[harness], harness, cwd), cwd)
        assert got["kind"] == "ready", (cwd, got["error"])
    out = run_cli("doctor", harness, "-C", str(mono)).stdout.decode()
    assert "the user-scope bridge serves this project" in out, out
    assert "is loaded from" in out and "registered 2 times" not in out, out
    # the package asks with --opt-in at either scope (plugins/*/index.ts): in a repository
    # that did not opt in, loaded from the user's configuration, it stays silent
    entry = (Path(__file__).resolve().parent.parent / "plugins" / harness / "index.ts").read_text()
    assert "optIn: true" in entry
    other = repo(tmp_path / "other")
    argv = placed_argv(placed[harness], harness, other)  # the same argv: --opt-in
    got = bridge(argv, other)
    assert got["kind"] == "ineligible" and not (other / ".supervise").exists(), got


@pytest.mark.parametrize("harness", ["pi", "opencode"])
def test_doctor_fails_two_user_level_copies_with_the_one_fix(
        placed: dict[str, Path], harness: str, tmp_path: Path) -> None:
    """The package in the user's configuration beside the user-scope bridge: both ask with
    --opt-in and both load in every opted-in project, so it is a double; the fix keeps one."""
    mono = repo(tmp_path / "mono")
    (mono / "supervise.toml").write_text("budget = 30\n")
    config = name_the_package(harness, mono, where="user")
    out = run_cli("doctor", harness, "-C", str(mono)).stdout.decode()
    [twice] = [ln for ln in out.splitlines() if "registered 2 times" in ln]
    assert twice.startswith("FAIL") and f"({config})" in twice, twice
    assert twice.endswith(f"keep one: `supervise uninstall {harness} --scope user`"), twice
