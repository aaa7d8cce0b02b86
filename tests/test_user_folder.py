"""A harness's user folder has one home, ``Harness.user_folder``: its variable read as the
harness reads it (as written, ``~`` expanded, or absolute only), else below the home folder;
``install``, ``uninstall``, ``doctor``, the bridges, the MCP clients' files, the plugin
packages and the instruction loaders all ask it."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from supervisor._harnesses import BY_NAME, ROWS
from supervisor.commands import _plugins

ROOT = Path(__file__).resolve().parent.parent

# What each harness's own CLI does with its variable (the row's docstring cites the proof):
# Codex 0.171.0 ran in ./~/c for CODEX_HOME=~/c, Copilot CLI 1.0.102 wrote ./~/cop, Pi
# 0.73.1 expands ~/ with the home folder, goose (etcetera) ignores a relative XDG_CONFIG_HOME.
CASES = [
    ("codex", "~/c", "~/c"), ("codex", "rel", "rel"), ("codex", "/abs", "/abs"),
    ("codex", "", "/h/.codex"), ("copilot", "~/cop", "~/cop"), ("copilot", "", "/h/.copilot"),
    ("pi", "~/agent", "/h/agent"), ("pi", "~", "/h"), ("pi", "~other/agent", "~other/agent"),
    ("pi", "rel", "rel"), ("pi", "", "/h/.pi/agent"), ("opencode", "rel", "rel"),
    ("opencode", "", "/h/.config"), ("goose", "rel", "/h/.config"), ("goose", "/x", "/x"),
    ("claude", "", "/h/.claude"), ("grok", "", "/h/.grok"),
    ("gemini", "/g", "/g/.gemini"), ("gemini", "rel", "rel/.gemini"), ("gemini", "", "/h/.gemini"),
]


@pytest.mark.parametrize("harness,value,folder", CASES)
def test_the_variable_is_read_as_the_harness_reads_it(harness: str, value: str, folder: str) -> None:
    row = BY_NAME[harness]
    environ = {row.user_dir_env: value} if row.user_dir_env else {}
    assert row.user_folder("/h", environ) == folder
    assert row.user_file("/h", environ) == f"{folder}/{row.user}"


def test_no_home_is_none_unless_the_variable_names_the_folder() -> None:
    """Never a relative ``~/.pi/agent`` (or ``None/.codex``) in the working directory."""
    pi, codex = BY_NAME["pi"], BY_NAME["codex"]
    assert pi.user_folder(None, {}) is None
    assert pi.user_folder(None, {"PI_CODING_AGENT_DIR": "~/agent"}) is None
    assert pi.user_folder(None, {"PI_CODING_AGENT_DIR": "/agent"}) == "/agent"
    assert codex.user_folder(None, {"CODEX_HOME": "/c"}) == "/c"


def test_the_variables_are_read_in_one_place() -> None:
    """No module outside the harness table names a user-folder variable in a string: each
    reader asks ``Harness.user_folder``. Three readers of their own (the settings files, the
    bridges, the plugin packages) and the loaders each had their rule, with or without ``~``."""
    names = sorted({row.user_dir_env for row in ROWS if row.user_dir_env})
    pattern = re.compile("[\"'](" + "|".join(names) + ")[\"']")
    found = []
    for folder in ("supervisor", "stages", "bin"):
        for path in sorted((ROOT / folder).rglob("*")):
            if path.suffix not in (".py", ".mjs", ".ts", ".sh") or path.name == "_harnesses.py":
                continue
            for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
                if pattern.search(line):
                    found.append(f"{path.relative_to(ROOT)}:{number}: {line.strip()}")
    assert not found, found


def _supervise(args: list[str], cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "supervisor", *args], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)


def test_goose_entry_goes_where_goose_reads_despite_a_relative_xdg(git_repo: Path,
                                                                    tmp_path: Path) -> None:
    """goose ignores a relative ``XDG_CONFIG_HOME`` (the XDG specification); ``install mcp
    --for goose`` wrote ``./cfg/goose/config.yaml`` in the working directory, which goose
    never reads."""
    home = tmp_path / "home"
    home.mkdir()
    env = {**os.environ, "HOME": str(home), "XDG_CONFIG_HOME": "cfg"}
    proc = _supervise(["install", "mcp", "--for", "goose"], git_repo, env)
    assert proc.returncode == 0, proc.stderr
    assert "supervise" in (home / ".config" / "goose" / "config.yaml").read_text()
    assert not (git_repo / "cfg").exists()


def test_a_pi_agent_dir_written_with_a_tilde_is_found(git_repo: Path, isolated_home: Path,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """Pi expands ``PI_CODING_AGENT_DIR=~/agent``; the plugin lookup took ``~/agent`` as a
    relative folder, so ``doctor`` and ``install pi --plugin`` missed a user-scope package."""
    monkeypatch.setenv("PI_CODING_AGENT_DIR", "~/agent")
    settings = isolated_home / "agent" / "settings.json"
    settings.parent.mkdir()
    settings.write_text('{"packages": ["npm:pi-watchkeeper"]}')
    assert _plugins.package_config("pi", "user", git_repo, isolated_home) == settings
    uses = _plugins.package_uses("pi", git_repo, isolated_home)
    assert [path for path, _ in uses] == [settings], uses


def test_codex_user_hooks_follow_codex_home_in_every_verb(git_repo: Path, tmp_path: Path) -> None:
    """``install``, ``doctor`` and ``uninstall`` agree on ``$CODEX_HOME/hooks.json``."""
    home, codex = tmp_path / "home", tmp_path / "codex-home"
    home.mkdir()
    codex.mkdir()
    env = {**os.environ, "HOME": str(home), "CODEX_HOME": str(codex)}
    assert _supervise(["install", "codex", "--scope", "user"], git_repo, env).returncode == 0
    assert "hook codex" in (codex / "hooks.json").read_text() and not (home / ".codex").exists()
    doctor = _supervise(["doctor", "codex"], git_repo, env)
    assert str(codex / "hooks.json") in doctor.stdout + doctor.stderr, doctor.stdout
    assert _supervise(["uninstall", "codex", "--scope", "user"], git_repo, env).returncode == 0
    hooks = codex / "hooks.json"
    assert not hooks.exists() or "hook codex" not in hooks.read_text()


def test_gemini_user_settings_follow_gemini_cli_home(git_repo: Path, tmp_path: Path) -> None:
    """Gemini CLI reads ``$GEMINI_CLI_HOME/.gemini/settings.json`` when that is set; ``install
    gemini --scope user`` wrote ``~/.gemini/settings.json``, which that Gemini never read, and
    doctor's trust check read the other folder than install wrote."""
    home, gemini_home = tmp_path / "home", tmp_path / "gemini-home"
    home.mkdir()
    gemini_home.mkdir()
    env = {**os.environ, "HOME": str(home), "GEMINI_CLI_HOME": str(gemini_home)}
    proc = _supervise(["install", "gemini", "--scope", "user"], git_repo, env)
    assert proc.returncode == 0, proc.stderr
    assert "hook gemini" in (gemini_home / ".gemini" / "settings.json").read_text()
    assert not (home / ".gemini").exists()
    from supervisor.commands._gemini_trust import gemini_trust

    trust = gemini_home / ".gemini" / "trustedFolders.json"
    trust.write_text('{"%s": "TRUST_FOLDER"}' % os.path.realpath(git_repo))
    assert gemini_trust(git_repo, env={"GEMINI_CLI_HOME": str(gemini_home)})[0] == "ok"
