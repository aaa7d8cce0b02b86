"""A hostile state dir (issue 11, items 1-4 and 9): planted links, FIFOs, folders, deep and huge
files in every state file the product knows; deferred results lost to a full disk or a kill."""

from __future__ import annotations

import json
import os
import resource
import signal
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

import psutil
import pytest

from helpers import run_cli, supervise_cmd

DEEP = "[" * 60_000


def write_config(project: Path, body: str) -> None:
    (project / "supervise.toml").write_text(body)


def stage(name: str, run: str, **extra: object) -> str:
    lines = ["[[stages]]", f"name = {json.dumps(name)}", f"run = {json.dumps(run)}"]
    lines += [f"{k} = {json.dumps(v)}" for k, v in extra.items()]
    return "\n".join(lines) + "\n"


def wait_for(predicate: Callable[[], object], seconds: float = 20.0) -> None:
    deadline = time.monotonic() + seconds
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError("condition not reached")
        time.sleep(0.02)


def plant(path: Path, kind: str, victim: Path) -> None:
    """Put a hostile ``kind`` at ``path`` (its folder is created)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    if kind == "symlink":
        path.symlink_to(victim)
    elif kind == "fifo":
        os.mkfifo(path)
    elif kind == "directory":
        path.mkdir()
        (path / "x").write_text("x")
    elif kind == "deep":
        path.write_text(DEEP)
    elif kind == "oversized":
        with open(path, "wb") as f:  # sparse 3 GiB: costs no disk, would cost 3 GiB to read
            f.truncate(3 << 30)
    else:  # pragma: no cover
        raise AssertionError(kind)


KINDS = ("symlink", "fifo", "directory", "deep", "oversized")


@pytest.mark.parametrize("kind", KINDS)
def test_prompt_hook_is_bounded_by_a_planted_result(tmp_path: Path, kind: str) -> None:
    """Issue 11 item 2 and 4: a FIFO result blocked the prompt hook forever; a 3 GiB one took
    6.3 GB of RSS. Now each is set aside, named once, and the hook exits 0 at once."""
    project = tmp_path / "p"
    project.mkdir()
    victim = tmp_path / "victim.json"
    victim.write_text('{"name": "net", "output": "VICTIM"}')
    plant(project / ".supervise" / "deferred" / "net" / "result-1-x.json", kind, victim)
    proc = subprocess.run(supervise_cmd("hook", "claude", "--event", "prompt"), cwd=project,
                          stdin=subprocess.DEVNULL, capture_output=True, timeout=30)
    assert proc.returncode == 0
    assert b"VICTIM" not in proc.stdout and b"Traceback" not in proc.stderr
    assert proc.stderr.decode().count("result-1-x.json was ") == 1, proc.stderr
    again = subprocess.run(supervise_cmd("hook", "claude", "--event", "prompt"), cwd=project,
                           stdin=subprocess.DEVNULL, capture_output=True, timeout=30)
    assert again.returncode == 0 and b"result-1-x" not in again.stderr  # named once
    assert victim.read_text() == '{"name": "net", "output": "VICTIM"}'


@pytest.mark.parametrize("kind", ["symlink", "fifo", "deep"])
def test_planted_deferred_folder_never_receives_a_result(tmp_path: Path, kind: str) -> None:
    """`.supervise/deferred -> elsewhere` (or a FIFO, a file there): the runner's records are
    never written through it; a fresh folder replaces it."""
    project = tmp_path / "p"
    project.mkdir()
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    plant(project / ".supervise" / "deferred", kind, elsewhere)
    write_config(project, stage("net", "echo reachable", deferred=True, timeout=10))
    assert run_cli("digest", cwd=project).returncode == 0
    results = project / ".supervise" / "deferred" / "net"
    wait_for(lambda: list(results.glob("result-*.json")))
    wait_for(lambda: not (results / "running.json").exists())
    assert list(elsewhere.iterdir()) == []
    assert "reachable" in run_cli("digest", cwd=project).stdout.decode()
    wait_for(lambda: not (results / "running.json").exists())


def _full_disk() -> None:  # preexec_fn: any file past 64 KiB fails with EFBIG ("disk full")
    resource.setrlimit(resource.RLIMIT_FSIZE, (64 * 1024, 64 * 1024))
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)


def test_result_lost_to_a_full_disk_is_reported_by_the_next_digest(tmp_path: Path) -> None:
    """Issue 11 item 9: the digest promised "delivered once, later", the runner could not
    write its result, and nothing ever said so."""
    write_config(tmp_path, stage("net", "python3 -c \"print('x' * 200000)\"", deferred=True,
                                 timeout=10))
    first = subprocess.run(supervise_cmd("digest"), cwd=tmp_path, capture_output=True,
                           timeout=30, preexec_fn=_full_disk)
    assert "delivered once, later" in first.stdout.decode()
    folder = tmp_path / ".supervise" / "deferred" / "net"
    wait_for(lambda: list(folder.glob("lost-*.json")))
    assert not list(folder.glob("result-*.json"))
    second = run_cli("digest", cwd=tmp_path).stdout.decode()
    assert second.count("LOST: deferred stage 'net'") == 1, second
    assert "File too large" in second and "NOT delivered" in second
    wait_for(lambda: list(folder.glob("result-*.json")))
    third = run_cli("digest", cwd=tmp_path).stdout.decode()
    assert "LOST" not in third and third.count("xxxx") >= 1  # the next run's result arrives
    wait_for(lambda: not (folder / "running.json").exists())


def test_result_of_a_killed_runner_is_reported_by_the_next_digest(tmp_path: Path) -> None:
    gate = tmp_path / "gate"
    write_config(tmp_path, stage("net", f"sh -c 'while [ ! -e {gate} ]; do sleep 0.05; done; "
                                        "echo done'", deferred=True, timeout=30))
    assert run_cli("digest", cwd=tmp_path).returncode == 0
    folder = tmp_path / ".supervise" / "deferred" / "net"
    wait_for(lambda: (folder / "running.json").exists())
    runner = psutil.Process(json.loads((folder / "running.json").read_text())["pid"])
    wait_for(lambda: runner.children(recursive=True))
    for proc in [*runner.children(recursive=True), runner]:  # all started by this test
        try:
            proc.kill()
        except psutil.NoSuchProcess:
            pass
    psutil.wait_procs([runner], timeout=10)
    second = run_cli("digest", cwd=tmp_path).stdout.decode()
    assert second.count("LOST: deferred stage 'net'") == 1, second
    assert "runner was killed" in second
    gate.touch()
    wait_for(lambda: list(folder.glob("result-*.json")))
    third = run_cli("digest", cwd=tmp_path).stdout.decode()
    assert "LOST" not in third and "done" in third
    wait_for(lambda: not (folder / "running.json").exists())
