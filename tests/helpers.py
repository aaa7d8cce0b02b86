"""Helpers for tests: run the real CLI as a process."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import psutil


def alive_and_ours(pid: int) -> bool:
    """True when ``pid`` is a live (not zombie) process this test started, directly or not: it
    carries the test's ``WATCHKEEPER_TEST_TOKEN`` (tests/conftest.py). A pid alone is no proof:
    pid_max is 32768 on CI hosts and fork-and-exit chains (ours and parallel runs') spend
    thousands of pids a second, so a dead stage's pid may already name another process."""
    import psutil

    token = os.environ.get("WATCHKEEPER_TEST_TOKEN")
    try:
        proc = psutil.Process(pid)
        if proc.status() == psutil.STATUS_ZOMBIE:
            return False
        return token is None or proc.environ().get("WATCHKEEPER_TEST_TOKEN") == token
    except psutil.NoSuchProcess:
        return False
    except psutil.AccessDenied:  # another user's process: not one this test started
        return False


def carriers(token: str) -> "list[psutil.Process]":
    """Live (not zombie) processes other than this one whose environment carries ``token`` as
    ``WATCHKEEPER_TEST_TOKEN``: every process the test started, directly or not."""
    import psutil

    found = []
    me = os.getpid()
    for proc in psutil.process_iter(["pid"]):
        if proc.pid == me:
            continue
        try:
            if proc.status() == psutil.STATUS_ZOMBIE:
                continue
            if proc.environ().get("WATCHKEEPER_TEST_TOKEN") == token:
                found.append(proc)
        except (psutil.Error, OSError):
            continue
    return found


def end_our_processes(settle: float = 1.0, bound: float = 15.0) -> None:
    """Kill, by pid, every process this test started (``carriers`` of its token) until none
    has been seen for ``settle`` seconds, or ``bound`` seconds passed. For a test that leaves
    a detached runner on purpose: the runner may still be starting (no ``running.json`` yet)
    and spawn its stage after a one-shot cleanup looked."""
    import time

    import psutil

    token = os.environ["WATCHKEEPER_TEST_TOKEN"]
    end = time.monotonic() + bound
    quiet_since = time.monotonic()
    while time.monotonic() < end and time.monotonic() - quiet_since < settle:
        found = carriers(token)
        if found:
            quiet_since = time.monotonic()
        for proc in found:
            try:
                proc.kill()
            except psutil.Error:
                pass
        time.sleep(0.05)


def python_script(path: Path, body: str) -> Path:
    """Make ``path`` an executable that runs the Python source ``body`` (``sys.argv[1:]`` its
    arguments) with this interpreter: ``body`` goes to ``path`` + ``.py`` and ``path`` is a
    ``/bin/sh`` line that execs the interpreter on it. A ``#!`` line holding the interpreter's
    path does not work where that path has a space (a clone under ``~/My projects``): the
    kernel cuts the line there and the command cannot start."""
    import shlex

    source = path.with_name(path.name + ".py")
    source.write_text(body)
    path.write_text(f"#!/bin/sh\nexec {shlex.quote(sys.executable)} {shlex.quote(str(source))} \"$@\"\n")
    path.chmod(0o755)
    return path


def supervise_cmd(*args: str) -> list[str]:
    """argv that runs the CLI from this checkout with the test interpreter."""
    return [sys.executable, "-m", "supervisor", *args]


def run_cli(*args: str, cwd: Path | None = None, input: bytes | None = None,
            env: dict[str, str] | None = None, timeout: float = 30) -> subprocess.CompletedProcess[bytes]:
    """Run ``supervise ARGS`` as a real process and return the completed process (bytes)."""
    full_env = {**os.environ, **(env or {})}
    return subprocess.run(supervise_cmd(*args), cwd=cwd, input=input if input is not None else b"",
                          capture_output=True, env=full_env, timeout=timeout)


def peak_rss_until_exit(proc: subprocess.Popen[bytes]) -> int:
    """Poll ``proc``'s peak resident set (``VmHWM``, Linux) until it exits; bytes (0 when
    ``/proc`` cannot tell)."""
    import time

    peak = 0
    status = Path(f"/proc/{proc.pid}/status")
    while proc.poll() is None:
        try:
            for line in status.read_text().splitlines():
                if line.startswith("VmHWM:"):
                    peak = max(peak, int(line.split()[1]) * 1024)
        except OSError:
            break
        time.sleep(0.01)
    return peak


def write_result(folder: "Path", run: str, record: dict[str, object]) -> "Path":
    """Write ``folder/result-<run>.json`` as our deferred runner does: signed with this
    (isolated) user's result key, ``name`` = the folder's name and ``run_id`` = ``run``
    unless the record says otherwise. Returns the file."""
    from supervisor.engine._deferred import _encode_result, result_key

    folder.mkdir(parents=True, exist_ok=True)
    data = {"name": folder.name, "run_id": run, **record}
    path = folder / f"result-{run}.json"
    path.write_bytes(_encode_result(data, 1 << 30, result_key(create=True)))
    return path


def configure_deferred(project: "Path", stage: str) -> None:
    """Append a deferred stage ``stage`` (``run = ["true"]``) to ``project``'s supervise.toml:
    a result is delivered only for a stage the effective config marks deferred."""
    toml = project / "supervise.toml"
    body = toml.read_text() if toml.exists() else ""
    if f'name = "{stage}"' not in body:
        toml.write_text(body + f'\n[[stages]]\nname = "{stage}"\nrun = ["true"]\ndeferred = true\n')


SDK_IMPORT_GATE = """import os, sys, time
GATE = os.environ["MCP_IMPORT_GATE"]
class Gate:
    # holds the MCP SDK's import (its first submodule) until the gate file exists
    def find_spec(self, name, path=None, target=None):
        if name.startswith("mcp.") and not os.path.exists(GATE):
            open(GATE + ".waiting", "w").close()
            while not os.path.exists(GATE):
                time.sleep(0.01)
        return None
sys.meta_path.insert(0, Gate())
"""


def sdk_import_gated(folder: "Path", gate: "Path", env: dict[str, str]) -> dict[str, str]:
    """``env`` for a Python whose import of the MCP SDK waits until the file ``gate`` exists
    (a ``sitecustomize`` module in ``folder`` on ``PYTHONPATH``; it creates ``gate.waiting``
    when the import starts): a loaded host's slow import, held as long as a test wants."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "sitecustomize.py").write_text(SDK_IMPORT_GATE)
    return {**env, "PYTHONPATH": str(folder), "MCP_IMPORT_GATE": str(gate)}
