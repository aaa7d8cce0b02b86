"""The ``network`` stage, run as a real process; remotes are local paths and 127.0.0.1 only."""

from __future__ import annotations

import json
import os
import shlex
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from supervisor.config._builtins import builtin_argv

STAGE = Path(builtin_argv("network")[-1])  # stages/network.py or stages/network/__main__.py


def run_stage(cwd: Path, options: dict[str, object] | None = None,
              path: str | None = None) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "SUPERVISE_STAGE_NAME": "network",
           "SUPERVISE_STAGE_OPTIONS": json.dumps({"gh": False} if options is None else options)}
    if path is not None:
        env["PATH"] = path
    # The timeout here only guards against a hang of the test itself.
    proc = subprocess.run([sys.executable, str(STAGE)], cwd=cwd, env=env, capture_output=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    return subprocess.CompletedProcess(proc.args, 0, proc.stdout.decode(), proc.stderr.decode())


def set_origin(repo: Path, url: str) -> None:
    subprocess.run(["git", "-C", str(repo), "remote", "add", "origin", url], check=True)


@pytest.fixture
def silent_listener() -> Iterator[int]:
    """A 127.0.0.1 port that accepts TCP connections (kernel backlog) but never answers."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    sock.listen(16)
    try:
        yield sock.getsockname()[1]
    finally:
        sock.close()


def closed_port() -> int:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    sock.close()
    return port


def fake_gh(bin_dir: Path, body: str) -> str:
    """A ``gh`` executable on a PATH of its own (plus git's dir); returns that PATH."""
    bin_dir.mkdir(exist_ok=True)
    gh = bin_dir / "gh"
    # a sh wrapper, not `#!<python>`: a shebang cannot name a path with spaces (a clone in
    # "my projects/...")
    (bin_dir / "gh.py").write_text(f"import sys, time\n{body}\n")
    gh.write_text(f"#!/bin/sh\nexec {shlex.quote(sys.executable)} "
                  f"{shlex.quote(str(bin_dir / 'gh.py'))} \"$@\"\n")
    gh.chmod(0o755)
    git_dir = os.path.dirname(subprocess.run(["which", "git"], capture_output=True, text=True).stdout.strip())
    return f"{bin_dir}{os.pathsep}{git_dir}"


def test_reachable_local_bare_remote(git_repo: Path, tmp_path: Path) -> None:
    bare = tmp_path / "remote.git"
    subprocess.run(["git", "init", "-q", "--bare", str(bare)], check=True)
    set_origin(git_repo, str(bare))
    out = run_stage(git_repo).stdout
    assert out.startswith("## Network\n")
    assert f"Remote origin ({bare}): reachable" in out


def test_nonexistent_path_remote_is_unreachable(git_repo: Path, tmp_path: Path) -> None:
    set_origin(git_repo, str(tmp_path / "no-such-remote.git"))
    out = run_stage(git_repo).stdout
    assert "Remote origin" in out and "UNREACHABLE" in out


def test_closed_port_is_unreachable(git_repo: Path) -> None:
    set_origin(git_repo, f"http://127.0.0.1:{closed_port()}/repo.git")
    out = run_stage(git_repo, {"gh": False, "timeout": 20}).stdout
    assert "UNREACHABLE" in out and "no answer" not in out  # refused, not timed out


def test_silent_server_hits_the_deadline_and_the_whole_group_dies(git_repo: Path, silent_listener: int) -> None:
    """git's http helper is a grandchild; the autouse leak check fails the test if it survives."""
    set_origin(git_repo, f"http://127.0.0.1:{silent_listener}/repo.git")
    out = run_stage(git_repo, {"gh": False, "timeout": 1}).stdout
    assert "Remote origin" in out and "UNREACHABLE: no answer within 1 s" in out


def test_credentials_in_the_url_are_never_printed(git_repo: Path) -> None:
    set_origin(git_repo, f"http://alice:s3cret@127.0.0.1:{closed_port()}/repo.git")
    out = run_stage(git_repo).stdout
    assert "s3cret" not in out and "alice" not in out and "http://***@127.0.0.1" in out


def test_branch_remote_wins_over_origin(git_repo: Path, tmp_path: Path) -> None:
    bare = tmp_path / "up.git"
    subprocess.run(["git", "init", "-q", "--bare", str(bare)], check=True)
    set_origin(git_repo, str(tmp_path / "missing.git"))
    subprocess.run(["git", "-C", str(git_repo), "remote", "add", "up", str(bare)], check=True)
    subprocess.run(["git", "-C", str(git_repo), "config", "branch.main.remote", "up"], check=True)
    out = run_stage(git_repo).stdout
    assert "Remote up" in out and "Remote origin" not in out


def test_silent_without_remote_or_gh(git_repo: Path, tmp_path: Path) -> None:
    assert run_stage(git_repo).stdout == ""
    plain = tmp_path / "plain"
    plain.mkdir()
    only_git = tmp_path / "only-git"
    only_git.mkdir()
    git_exe = subprocess.run(["which", "git"], capture_output=True, text=True).stdout.strip()
    (only_git / "git").symlink_to(git_exe)
    assert run_stage(plain, {}, path=str(only_git)).stdout == ""  # gh enabled but not on PATH


def test_gh_logged_in(git_repo: Path, tmp_path: Path) -> None:
    path = fake_gh(tmp_path / "bin", "print('github.com\\n  \\u2713 Logged in to github.com account tester (keyring)\\n"
                                     "  - Token: gho_************')")
    out = run_stage(git_repo, {}, path=path).stdout
    assert "GitHub CLI: Logged in to github.com account tester (keyring)" in out
    assert "gho_" not in out


def test_gh_not_logged_in(git_repo: Path, tmp_path: Path) -> None:
    path = fake_gh(tmp_path / "bin", "sys.stderr.write('You are not logged into any GitHub hosts.\\n'); sys.exit(1)")
    out = run_stage(git_repo, {}, path=path).stdout
    assert "GitHub CLI: NOT logged in" in out and "gh auth login" in out


def test_gh_that_hangs_is_killed_at_the_deadline(git_repo: Path, tmp_path: Path) -> None:
    path = fake_gh(tmp_path / "bin", "time.sleep(600)")
    out = run_stage(git_repo, {"timeout": 0.5}, path=path).stdout
    assert "GitHub CLI: auth status unknown: no answer within 0.5 s" in out


def test_deferred_through_the_digest_offline(git_repo: Path) -> None:
    """No network: the digest does not wait for the stage; its UNREACHABLE result is shown
    inline when done, else delivered by a later digest."""
    from helpers import run_cli

    set_origin(git_repo, f"http://127.0.0.1:{closed_port()}/repo.git")
    (git_repo / "supervise.toml").write_text(
        'budget = 30\n[[stages]]\nname = "network"\nbuiltin = "network"\ndeferred = true\n'
        'options = { timeout = 5, gh = false }\n')
    first = run_cli("digest", "--session-start", cwd=git_repo)
    assert first.returncode == 0, first.stderr
    text = first.stdout.decode()
    assert "IN PROGRESS" in text or "UNREACHABLE" in text
    for _ in range(40):  # each digest is a real run; a refused connection ends the stage at once
        if "Remote origin" in text:
            break
        text = run_cli("digest", "--session-start", cwd=git_repo).stdout.decode()
    assert "UNREACHABLE" in text and "reachable (" not in text


def test_network_builtin_is_deferred_unless_said_otherwise() -> None:
    """Issue 6: the network stage runs off the startup path by default."""
    from supervisor.config._schema import parse_config

    on = parse_config({"stages": [{"name": "n", "builtin": "network"}]}, "t")
    off = parse_config({"stages": [{"name": "n", "builtin": "network", "deferred": False}]}, "t")
    assert on.stages[0].deferred is True and off.stages[0].deferred is False
