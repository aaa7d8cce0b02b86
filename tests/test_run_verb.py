"""`supervise run`: the lean path (posix_spawn and one wait, the watchdog only when there is
something to kill), GNU timeout's exit statuses, the whole tree at the deadline, on a signal
and after a normal exit, orphans reaped, and what the path imports."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from helpers import alive_and_ours, run_cli, supervise_cmd

LINUX = sys.platform.startswith("linux")
HEAVY = {"anyio", "asyncio", "ssl", "psutil", "pydantic", "dataclasses", "pathlib",
         "supervisor.engine._tree", "supervisor.engine._run", "supervisor.engine._stage",
         "supervisor.engine._proctable"}


def _loaded(argv: list[str], cwd: Path, env: dict[str, str] | None = None) -> set[str]:
    proc = subprocess.run([sys.executable, "-X", "importtime", "-m", "supervisor", *argv],
                          capture_output=True, cwd=cwd, timeout=60, env={**os.environ, **(env or {})})
    assert proc.returncode == 0, proc.stderr
    return {line.split("|")[-1].strip() for line in proc.stderr.decode().splitlines()
            if line.startswith("import time:")}


def _alive(pid: int) -> bool:
    """For a process that cleared its environment (no test token to tell it from a process that
    reused its pid): any live process with that pid."""
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def _stop(proc: subprocess.Popen[bytes]) -> None:
    """End a `supervise run` this test started (by pid): SIGTERM first, so that it kills its
    tree, then SIGKILL; close its pipes."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    for pipe in (proc.stdout, proc.stderr):
        if pipe is not None:
            pipe.close()


def _pids(folder: Path) -> list[int]:
    return [int(p.read_text()) for p in sorted(folder.glob("*.pid"))]


# A tree with every kind of member: one in the group that ignores TERM, a setsid escapee, and
# a double-forked setsid daemon (its parent exits: an orphan, adopted by the subreaper). The
# leader prints `ready` once all three have written their pid (the handshake).
TREE = """
trap '' TERM
sh -c 'echo $$ > a.pid; exec sleep 300' &
setsid sh -c 'echo $$ > b.pid; exec sleep 300' &
(setsid sh -c 'echo $$ > c.pid; exec sleep 300' &)
while [ ! -s a.pid ] || [ ! -s b.pid ] || [ ! -s c.pid ]; do sleep 0.01; done
echo ready
"""


@pytest.mark.skipif(not LINUX, reason="the lean path is Linux's (a child subreaper)")
def test_hot_path_imports_no_engine(tmp_path: Path) -> None:
    """`supervise run -- true` never imports the engine (its loop, the watchdog), anyio, asyncio nor
    psutil, pydantic or dataclasses; a command that leaves a background process behind does
    start the watchdog (the sweep), which shows this check can fail."""
    # a delegated cgroup would be created (a cost); the portable path uses the engine
    off = {"SUPERVISE_CGROUP_ROOT": "off", "SUPERVISE_PORTABLE": "0"}
    quick = _loaded(["run", "--", "true"], tmp_path, off)
    assert not quick & HEAVY, sorted(quick & HEAVY)
    swept = _loaded(["run", "--", "sh", "-c", "sleep 30 & exit 0"], tmp_path, off)
    assert {"supervisor.engine._loop", "supervisor.engine._tree"} <= swept


def test_leftovers_of_a_normal_exit_are_swept(tmp_path: Path, cpu_load: str) -> None:
    """`sh -c 'sleep 30 & exit 0'`: the command's status is the leader's (0) and what it left
    behind, in its group or not, dies with it (as a digest sweeps a stage)."""
    script = TREE + "exit 0\n"
    proc = run_cli("run", "--grace", "0.2", "--", "sh", "-c", script, cwd=tmp_path, timeout=60)
    assert proc.stdout == b"ready\n" and proc.returncode == 0, proc.stderr
    pids = _pids(tmp_path)
    assert len(pids) == 3 and not [p for p in pids if alive_and_ours(p)]


def test_the_budget_kills_the_whole_tree(tmp_path: Path, cpu_load: str) -> None:
    """At the budget: 124, one notice, and every member dead, the TERM-ignoring one by KILL
    after the grace."""
    script = TREE + "exec sleep 300\n"
    proc = run_cli("run", "--budget", "3", "--grace", "0.2", "--", "sh", "-c", script,
                   cwd=tmp_path, timeout=60)
    assert proc.stdout == b"ready\n", proc.stderr  # the premise: the tree was up in time
    assert proc.returncode == 124 and b"killed after its 3s budget" in proc.stderr
    pids = _pids(tmp_path)
    assert len(pids) == 3 and not [p for p in pids if alive_and_ours(p)]


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT, signal.SIGHUP])
def test_a_signal_to_run_kills_the_whole_tree(tmp_path: Path, sig: int, cpu_load: str) -> None:
    """SIGTERM, SIGINT or SIGHUP to `supervise run`: the whole tree dies (with grace), and
    `run` exits 128+n without a budget notice."""
    script = TREE + "exec sleep 300\n"
    proc = subprocess.Popen(supervise_cmd("run", "--grace", "0.2", "--", "sh", "-c", script),
                            cwd=tmp_path, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE)
    try:
        assert proc.stdout is not None
        assert proc.stdout.readline() == b"ready\n"  # the handshake
        proc.send_signal(sig)
        _, err = proc.communicate(timeout=30)
    finally:
        _stop(proc)
    assert proc.returncode == 128 + sig and b"budget" not in err, err
    pids = _pids(tmp_path)
    assert len(pids) == 3 and not [p for p in pids if alive_and_ours(p)]


@pytest.mark.skipif(not LINUX, reason="the child subreaper is Linux's")
def test_adopted_orphans_are_reaped_while_the_command_runs(tmp_path: Path) -> None:
    """Fifty short-lived orphans (each one's parent exits first) are adopted by `run` (the
    child subreaper) and reaped as they end, not left as zombies until the command ends."""
    script = ("i=0; while [ $i -lt 50 ]; do (true &); i=$((i+1)); done; echo ready; "
              "exec sleep 300")
    proc = subprocess.Popen(supervise_cmd("run", "--grace", "0.2", "--", "sh", "-c", script),
                            cwd=tmp_path, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE)
    try:
        assert proc.stdout is not None
        assert proc.stdout.readline() == b"ready\n"

        def zombies() -> int:
            count = 0
            for kid in psutil.Process(proc.pid).children():
                try:
                    count += kid.status() == psutil.STATUS_ZOMBIE
                except (psutil.Error, OSError):  # reaped while we looked: not a zombie
                    continue
            return count

        give_up = time.monotonic() + 20
        while zombies() > 0 and time.monotonic() < give_up:
            time.sleep(0.02)
        assert zombies() == 0
        proc.send_signal(signal.SIGTERM)
        proc.communicate(timeout=30)
    finally:
        _stop(proc)
    assert proc.returncode == 128 + signal.SIGTERM


def test_exit_statuses_like_timeout(tmp_path: Path) -> None:
    """CMD's status; 128+n for its own death by signal n (no notice: it is CMD's status);
    127 not found; 126 not executable (a directory, a file without the x bit)."""
    assert run_cli("run", "--", "sh", "-c", "exit 7", cwd=tmp_path).returncode == 7
    own = run_cli("run", "--", "sh", "-c", "kill -TERM $$", cwd=tmp_path)
    assert own.returncode == 143 and own.stderr == b""
    assert run_cli("run", "--", "no-such-program-xyz", cwd=tmp_path).returncode == 127
    assert run_cli("run", "--", str(tmp_path / "missing"), cwd=tmp_path).returncode == 127
    plain = tmp_path / "plain"
    plain.write_text("echo hi\n")
    for target in (plain, tmp_path):
        proc = run_cli("run", "--", str(target), cwd=tmp_path)
        assert proc.returncode == 126 and b"not executable" in proc.stderr


def test_environment_passes_through_with_the_token(tmp_path: Path) -> None:
    """Like GNU timeout, CMD gets our environment unchanged (git's variables too), plus the
    watchdog's token; no stage variables."""
    env = {"GIT_DIR": str(tmp_path / "elsewhere"), "WK13B_PROBE": "kept"}
    proc = run_cli("run", "--", "env", cwd=tmp_path, env=env)
    seen = dict(line.split("=", 1) for line in proc.stdout.decode().splitlines() if "=" in line)
    assert seen["WK13B_PROBE"] == "kept" and seen["GIT_DIR"] == env["GIT_DIR"]
    assert len(seen["SUPERVISE_STAGE_TOKEN"]) == 32 and "SUPERVISE_STAGE_NAME" not in seen


def test_json_captures_merged_output_with_stdin_closed(tmp_path: Path) -> None:
    """`--format json`: stdin is /dev/null, stdout and stderr are captured merged, byte
    counts and status are CMD's."""
    proc = run_cli("run", "--format", "json", "--", "sh", "-c",
                   "cat; echo out; echo err >&2; exit 3", input=b"not read\n", cwd=tmp_path)
    doc = json.loads(proc.stdout)
    assert proc.returncode == 3
    assert (doc["status"], doc["exit_code"], doc["output"], doc["bytes"], doc["timed_out"]) == (
        "failed", 3, "out\nerr\n", 8, False)
    killed = run_cli("run", "--format", "json", "--budget", "2", "--grace", "0.1", "--", "sh",
                     "-c", "echo ready; exec sleep 300", cwd=tmp_path)
    doc = json.loads(killed.stdout)
    assert killed.returncode == 124 and doc["output"] == "ready\n"
    assert (doc["status"], doc["timed_out"]) == ("killed", True)


def test_a_large_captured_output_is_whole(tmp_path: Path) -> None:
    """8 MiB through the capture pipe (more than a pipe holds): all of it, in order."""
    code = "import sys; sys.stdout.buffer.write(bytes(range(256)) * 32768)"
    proc = run_cli("run", "--format", "json", "--", sys.executable, "-c", code, cwd=tmp_path)
    doc = json.loads(proc.stdout)
    assert proc.returncode == 0 and doc["bytes"] == 8 << 20
    assert doc["output"].startswith("\x00\x01\x02")


def test_the_engine_path_gives_the_same_answers(tmp_path: Path) -> None:
    """Where posix_spawn cannot start a session, `run` uses the engine (run_command): the
    same statuses and document."""
    code = ("import sys; import supervisor.engine._runwait as r; r.available = lambda: False; "
            "from supervisor._main import main; sys.exit(main(sys.argv[1:]))")

    def engine(*args: str) -> subprocess.CompletedProcess[bytes]:
        return subprocess.run([sys.executable, "-c", code, "run", *args], cwd=tmp_path,
                              capture_output=True, timeout=60)

    assert engine("--", "sh", "-c", "exit 5").returncode == 5
    doc = json.loads(engine("--format", "json", "--", "sh", "-c", "echo hi; exit 2").stdout)
    assert (doc["status"], doc["exit_code"], doc["output"]) == ("failed", 2, "hi\n")
    late = engine("--budget", "2", "--grace", "0.1", "--", "sh", "-c", "echo ready; exec sleep 300")
    assert late.returncode == 124 and late.stdout == b"ready\n"


def test_help_and_usage_errors_come_from_the_table() -> None:
    """`--help` lists the table's options (exit 0); a bad value is one usage error, exit 125."""
    help_out = run_cli("run", "--help")
    assert help_out.returncode == 0 and b"--budget S" in help_out.stdout
    assert b"(default 120)" in help_out.stdout  # the record's default, not a second copy
    bad = run_cli("run", "--format", "xml", "--", "true")
    assert bad.returncode == 125
    assert bad.stderr.decode().splitlines()[-1] == (
        "supervise run: error: unknown --format 'xml' (known: text, json)")


from test_cgroup import cgroup_root  # noqa: E402,F401  (the fixture: a writable cgroup v2 root)

RES = Path(__file__).parent / "resources"


@pytest.mark.skipif(not LINUX, reason="cgroup v2 is Linux's")
def test_an_environment_clearing_daemon_dies_with_the_cgroup(cgroup_root: Path,  # noqa: F811
                                                             tmp_path: Path) -> None:
    """Where a cgroup is delegated, the lean path runs CMD in a cgroup of its own: a daemon
    that double-forks, calls setsid, ignores TERM and clears its environment (no token, no
    group) still dies at the budget, and the cgroup is removed."""
    piddir = tmp_path / "pids"
    piddir.mkdir()
    proc = run_cli("run", "--budget", "3", "--grace", "0.2", "--", sys.executable,
                   str(RES / "hostile.py"), "env-clearing-daemon", cwd=tmp_path,
                   env={"PIDDIR": str(piddir)}, timeout=60)
    daemon = int((piddir / "daemon.pid").read_text())
    alive = _alive(daemon)
    if alive:
        os.kill(daemon, signal.SIGKILL)  # a process this test started (by its pid)
    assert proc.stdout == b"leader ready\n" and proc.returncode == 124, proc.stderr
    assert not alive
    assert not [p for p in cgroup_root.iterdir() if p.is_dir()]  # its cgroup is gone


@pytest.mark.parametrize("portable", ["0", "1"], ids=["lean", "portable"])
def test_a_kill_that_needed_sigkill_is_reported(tmp_path: Path, portable: str) -> None:
    """`run` states a kill that needed SIGKILL on stderr and in the JSON document (`kill`:
    members, hard_killed, survivors, seconds; null when no kill ran), on the lean path and on
    the engine's (``SUPERVISE_PORTABLE=1``, macOS). Before, the report was computed and
    dropped; then the engine's path still dropped it (``"kill": null``)."""
    env = {"SUPERVISE_PORTABLE": portable}
    proc = run_cli("run", "--format", "json", "--budget", "1", "--grace", "0.2", "--", "sh",
                   "-c", "trap '' TERM; echo ready; sleep 30", cwd=tmp_path, timeout=60, env=env)
    doc = json.loads(proc.stdout)
    assert proc.returncode == 124 and doc["output"] == "ready\n"
    assert doc["kill"]["hard_killed"] >= 1 and doc["kill"]["survivors"] == 0, doc
    assert b"needed SIGKILL" in proc.stderr, proc.stderr
    quiet = run_cli("run", "--format", "json", "--", "true", cwd=tmp_path, env=env)
    assert json.loads(quiet.stdout)["kill"] is None and b"SIGKILL" not in quiet.stderr
