"""``supervise install mcp --for CLIENT`` / ``uninstall`` / ``doctor mcp``: each client's own
configuration file gets our ``supervise mcp --for CLIENT`` entry, every other byte or key of
the user kept, and loses it again."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
import yaml


def _supervise(args: list[str], project: Path, home: Path) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in ("CODEX_HOME", "XDG_CONFIG_HOME")}
    env["HOME"] = str(home)
    env["PATH"] = f"{Path(sys.executable).parent}:/usr/bin:/bin"
    return subprocess.run([sys.executable, "-m", "supervisor", *args], cwd=project, env=env,
                          capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)


@pytest.fixture
def place(git_repo: Path, tmp_path: Path) -> tuple[Path, Path]:
    home = tmp_path / "home"
    home.mkdir()
    return git_repo, home


ENTRY = ["mcp", "--for"]


@pytest.mark.parametrize("client,rel", [("claude", ".mcp.json"), ("cursor", ".cursor/mcp.json"),
                                        ("gemini", ".gemini/settings.json")])
def test_json_clients_keep_other_servers(place: tuple[Path, Path], client: str, rel: str) -> None:
    project, home = place
    path = project / rel
    path.parent.mkdir(exist_ok=True)
    path.write_text(json.dumps({"theme": "dark", "mcpServers": {"other": {"command": "x"}}}))
    assert _supervise(["install", "mcp", "--for", client], project, home).returncode == 0
    data = json.loads(path.read_text())
    trust = {"trust": True} if client == "gemini" else {}  # Gemini -p: else no tool is offered
    assert data["mcpServers"]["watchkeeper"] == {"command": "supervise", "args": [*ENTRY, client], **trust}
    assert data["mcpServers"]["other"] == {"command": "x"} and data["theme"] == "dark"
    again = _supervise(["install", "mcp", "--for", client], project, home)
    assert "unchanged" in again.stdout
    assert _supervise(["uninstall", "mcp", "--for", client], project, home).returncode == 0
    assert json.loads(path.read_text()) == {"theme": "dark", "mcpServers": {"other": {"command": "x"}}}


@pytest.mark.parametrize("client,rel", [("codex", ".codex/config.toml"),
                                        ("cursor", ".cursor/mcp.json"),
                                        ("gemini", ".gemini/settings.json")])
def test_uninstall_leaves_no_folder_it_made(place: tuple[Path, Path], client: str, rel: str) -> None:
    """``install mcp`` made the client's folder for its file; ``uninstall`` removes both when
    they hold nothing else (the old code left an empty ``.codex/``), and keeps a folder that
    holds anything else."""
    project, home = place
    assert _supervise(["install", "mcp", "--for", client], project, home).returncode == 0
    assert (project / rel).is_file()
    assert _supervise(["uninstall", "mcp", "--for", client], project, home).returncode == 0
    assert not (project / rel).parent.exists()
    assert _supervise(["install", "mcp", "--for", client], project, home).returncode == 0
    (project / rel).parent.joinpath("other").write_text("kept\n")
    assert _supervise(["uninstall", "mcp", "--for", client], project, home).returncode == 0
    assert not (project / rel).exists() and (project / rel).parent.joinpath("other").is_file()


def test_codex_toml_keeps_every_other_byte(place: tuple[Path, Path]) -> None:
    project, home = place
    path = project / ".codex" / "config.toml"
    path.parent.mkdir()
    original = '# mine\nmodel = "o"\n\n[mcp_servers.other]\ncommand = "x"  # keep\n'
    path.write_text(original)
    assert _supervise(["install", "mcp", "--for", "codex"], project, home).returncode == 0
    data = tomllib.loads(path.read_text())
    from supervisor.commands.mcp import ANSWER_WITHIN

    # Codex drops a server slower than its 10 s default start-up bound: ours gets its own
    assert data["mcp_servers"]["watchkeeper"] == {"command": "supervise", "args": [*ENTRY, "codex"],
                                                  "startup_timeout_sec": ANSWER_WITHIN}
    # codex exec waits for an optional server about 1 s unless told: the wait comes first
    # (a top-level key), as long as the server may take to answer
    assert data["mcp_optional_startup_grace_ms"] == ANSWER_WITHIN * 1000
    first, rest = path.read_text().split("\n", 1)
    assert first.startswith("mcp_optional_startup_grace_ms = ")
    assert data["mcp_servers"]["other"] == {"command": "x"} and rest.startswith(original)
    assert "unchanged" in _supervise(["install", "mcp", "--for", "codex"], project, home).stdout
    assert _supervise(["uninstall", "mcp", "--for", "codex"], project, home).returncode == 0
    assert path.read_text().rstrip("\n") == original.rstrip("\n")


def test_codex_keeps_the_users_own_wait_and_doctor_warns_when_it_is_short(
        place: tuple[Path, Path]) -> None:
    project, home = place
    path = project / ".codex" / "config.toml"
    path.parent.mkdir()
    original = 'mcp_optional_startup_grace_ms = 500\n'
    path.write_text(original)
    proc = _supervise(["install", "mcp", "--for", "codex"], project, home)
    assert proc.returncode == 0, proc.stderr
    assert "mcp_optional_startup_grace_ms in .codex/config.toml is below" in proc.stdout
    assert tomllib.loads(path.read_text())["mcp_optional_startup_grace_ms"] == 500
    doctor = _supervise(["doctor", "mcp"], project, home)
    assert "WARN  mcp (codex): mcp_optional_startup_grace_ms" in doctor.stdout, doctor.stdout
    assert _supervise(["uninstall", "mcp", "--for", "codex"], project, home).returncode == 0
    assert path.read_text().rstrip("\n") == original.rstrip("\n")


def test_goose_is_user_scope_yaml(place: tuple[Path, Path]) -> None:
    project, home = place
    path = home / ".config" / "goose" / "config.yaml"
    path.parent.mkdir(parents=True)
    path.write_text("GOOSE_PROVIDER: openai\nextensions:\n  dev:\n    type: builtin\n")
    proc = _supervise(["install", "mcp", "--for", "goose"], project, home)
    assert proc.returncode == 0, proc.stderr
    data = yaml.safe_load(path.read_text())
    ours = data["extensions"]["watchkeeper"]
    assert (ours["type"], ours["cmd"], ours["args"], ours["enabled"]) == ("stdio", "supervise", [*ENTRY, "goose"], True)
    assert data["extensions"]["dev"] == {"type": "builtin"} and data["GOOSE_PROVIDER"] == "openai"
    assert _supervise(["uninstall", "mcp", "--for", "goose"], project, home).returncode == 0
    assert yaml.safe_load(path.read_text()) == {"GOOSE_PROVIDER": "openai", "extensions": {"dev": {"type": "builtin"}}}


def test_a_linked_configuration_is_refused(place: tuple[Path, Path], tmp_path: Path) -> None:
    project, home = place
    target = tmp_path / "elsewhere.json"
    target.write_text("{}")
    (project / ".mcp.json").symlink_to(target)
    proc = _supervise(["install", "mcp", "--for", "claude"], project, home)
    assert proc.returncode == 1 and target.read_text() == "{}"


def test_mcp_needs_for_and_doctor_checks_the_entry(place: tuple[Path, Path]) -> None:
    project, home = place
    assert _supervise(["install", "mcp"], project, home).returncode == 2
    assert _supervise(["doctor", "mcp"], project, home).returncode == 1  # nothing registered
    assert _supervise(["install", "mcp", "--for", "claude"], project, home).returncode == 0
    doctor = _supervise(["doctor", "mcp"], project, home)
    assert doctor.returncode == 0, doctor.stdout
    assert "mcp (claude): server registered in" in doctor.stdout
    (project / ".mcp.json").write_text(json.dumps({"mcpServers": {"watchkeeper": {"command": "old"}}}))
    doctor = _supervise(["doctor", "mcp"], project, home)
    assert doctor.returncode == 1 and "does not run `supervise mcp --for claude`" in doctor.stdout
    # Gemini: an entry of the old shape, without trust, is flagged and rewritten by install
    gemini = project / ".gemini" / "settings.json"
    gemini.parent.mkdir()
    gemini.write_text(json.dumps({"mcpServers": {"watchkeeper": {
        "command": "supervise", "args": [*ENTRY, "gemini"]}}}))
    doctor = _supervise(["doctor", "mcp"], project, home)
    assert "does not run `supervise mcp --for gemini` with trust = true" in doctor.stdout
    assert _supervise(["install", "mcp", "--for", "gemini"], project, home).returncode == 0
    assert json.loads(gemini.read_text())["mcpServers"]["watchkeeper"]["trust"] is True
