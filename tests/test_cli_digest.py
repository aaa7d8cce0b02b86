"""`supervise digest`, `supervise run` and `supervise config` as real processes."""

from __future__ import annotations

import json
import os
import shlex
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from helpers import alive_and_ours, peak_rss_until_exit, run_cli, supervise_cmd

RES = Path(__file__).parent / "resources"
HOSTILE = shlex.join([sys.executable, str(RES / "hostile.py")])  # a clone's path may hold spaces


def write_config(project: Path, body: str) -> None:
    (project / "supervise.toml").write_text(body)


def stage(name: str, run: str, **extra: object) -> str:
    lines = ["[[stages]]", f"name = {json.dumps(name)}", f"run = {json.dumps(run)}"]
    lines += [f"{k} = {json.dumps(v)}" for k, v in extra.items()]
    return "\n".join(lines) + "\n"


def test_digest_runs_configured_stages_in_order(tmp_path: Path) -> None:
    write_config(tmp_path, "budget = 10\n" + stage("a", "echo alpha") + stage("b", "echo beta"))
    proc = run_cli("digest", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == b"alpha\nbeta\n"


def test_json_format_has_per_stage_fields(tmp_path: Path) -> None:
    write_config(tmp_path, stage("a", "echo alpha") + stage("b", "sh -c 'exit 3'"))
    proc = run_cli("digest", "--format", "json", cwd=tmp_path)
    doc = json.loads(proc.stdout)
    assert doc["truncated"] is False and doc["budget"] == 120
    a, b = doc["stages"]
    assert a == {"name": "a", "status": "ok", "exit_code": 0, "seconds": a["seconds"],
                 "bytes": 6, "truncated": False, "output": "alpha\n"}
    assert b["status"] == "failed" and b["exit_code"] == 3


def test_json_marks_a_digest_wide_cut_as_truncated(tmp_path: Path) -> None:
    """The digest-wide ``max_output`` cut the second stage mid-line: the text prints its cut
    marker, and the JSON says ``truncated: true`` (reason ``max_output``) and marks the stage
    it cut (it said ``truncated: false`` everywhere)."""
    write_config(tmp_path, "max_output = 4096\n" + stage("a", "yes alpha | head -c 3000", shell=True)
                 + stage("b", "yes 0123456789 | head -c 3000", shell=True))
    text = run_cli("digest", cwd=tmp_path)
    assert b"digest reached its 4096-byte limit" in text.stdout, text.stdout[-300:]
    doc = json.loads(run_cli("digest", "--format", "json", cwd=tmp_path).stdout)
    assert doc["truncated"] is True and doc["reason"] == "max_output", doc["reason"]
    a, b = doc["stages"]
    assert a["truncated"] is False and a["status"] == "ok" and len(a["output"]) == 3000
    assert b["truncated"] is True and b["bytes"] == 3000 and len(b["output"]) < 3000, b


def test_a_low_open_files_limit_waits_for_a_slot(tmp_path: Path) -> None:
    """``ulimit -n 24`` and eight stages at once: each waits for descriptors another stage
    frees instead of failing with "Too many open files" (three of eight did)."""
    import resource

    write_config(tmp_path, "".join(stage(f"s{i}", f"sleep 0.2; echo hi{i}", shell=True) for i in range(8)))

    def low_limit() -> None:
        resource.setrlimit(resource.RLIMIT_NOFILE, (24, 24))

    proc = subprocess.run(supervise_cmd("digest", "--format", "json"), cwd=tmp_path,
                          capture_output=True, stdin=subprocess.DEVNULL, timeout=60,
                          preexec_fn=low_limit)
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    assert [(s["status"], s["output"]) for s in doc["stages"]] == [
        ("ok", f"hi{i}\n") for i in range(8)], doc["stages"]


def test_bad_config_is_one_line_naming_file_and_key_and_digest_still_prints(tmp_path: Path) -> None:
    write_config(tmp_path, "budgett = 3\n")
    proc = run_cli("digest", cwd=tmp_path)
    err = proc.stderr.decode().strip()
    assert len(err.splitlines()) == 1
    assert "supervise.toml" in err and "budgett" in err
    assert b"config error" in proc.stdout  # the embedded default digest still ran
    assert proc.returncode == 1


def test_invalid_toml_is_one_line(tmp_path: Path) -> None:
    write_config(tmp_path, "[[stages]\n")
    proc = run_cli("config", cwd=tmp_path)
    assert proc.returncode == 1
    assert proc.stderr.decode().count("\n") == 1 and "not valid TOML" in proc.stderr.decode()


def test_pyproject_tool_table_and_env_override(tmp_path: Path) -> None:
    (tmp_path / "pyproject.toml").write_text(
        "[project]\nname='x'\n[tool.supervise]\nbudget = 7\n"
        + stage("p", "echo from-pyproject").replace("[[stages]]", "[[tool.supervise.stages]]"))
    proc = run_cli("digest", "--format", "json", cwd=tmp_path, env={"SUPERVISE_TIMEOUT": "9"})
    doc = json.loads(proc.stdout)
    assert doc["budget"] == 9 and doc["stages"][0]["output"] == "from-pyproject\n"


def test_string_run_is_split_like_a_shell_and_shell_is_opt_in(tmp_path: Path) -> None:
    write_config(tmp_path, stage("split", "printf '%s|' 'a b' c")
                 + stage("sh", "echo $((1+2))", shell=True))
    proc = run_cli("digest", cwd=tmp_path)
    assert proc.stdout == b"a b|c|\n3\n"


def test_digest_into_head_exits_zero_without_traceback(tmp_path: Path) -> None:
    """Rule 13: our stdout closing (`| head -1`) is not an error."""
    write_config(tmp_path, stage("flood", f"{HOSTILE} flood 4") + stage("x", "echo after"))
    cmd = shlex.join(supervise_cmd("digest")) + " | head -1; echo \"rc=${PIPESTATUS[0]}\" >&2"
    proc = subprocess.run(["bash", "-c", cmd], cwd=tmp_path, capture_output=True, timeout=60)
    assert proc.stdout == b"y" * 1023 + b"\n"
    assert proc.stderr.decode().strip() == "rc=0"


def test_sigterm_to_the_supervisor_kills_the_stage_and_prints_the_banner(tmp_path: Path) -> None:
    """Rule 15: SIGTERM mid-stage takes the deadline path: kill, banner, exit 128+15."""
    piddir = tmp_path / "pids"
    piddir.mkdir()
    write_config(tmp_path, "grace = 0.2\n" + stage("first", "echo done-first")
                 + stage("stuck", f"{HOSTILE} term-ignoring-child") + stage("never", "echo x",
                                                                             needs=["stuck"]))
    proc = subprocess.Popen(supervise_cmd("digest"), cwd=tmp_path, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, env={**os.environ, "PIDDIR": str(piddir)})
    assert proc.stdout is not None
    lines = [proc.stdout.readline(), proc.stdout.readline()]
    assert lines == [b"done-first\n", b"leader ready\n"]
    while not (piddir / "child.pid").exists():
        time.sleep(0.01)
    proc.send_signal(signal.SIGTERM)
    rest, err = proc.communicate(timeout=20)
    assert proc.returncode == 128 + signal.SIGTERM, err
    text = rest.decode()
    assert "STARTUP TRUNCATED" in text and "SIGTERM" in text
    assert "'stuck'" in text and "Never started: 'never'" in text
    for role in ("leader", "child"):
        assert not alive_and_ours(int((piddir / f"{role}.pid").read_text()))


def test_budget_banner_names_the_rerun_command(tmp_path: Path) -> None:
    write_config(tmp_path, "budget = 1.5\ngrace = 0.1\n" + stage("hang", "sleep 30"))
    proc = run_cli("digest", cwd=tmp_path)
    assert proc.returncode == 0
    text = proc.stdout.decode()
    assert "STARTUP TRUNCATED" in text and "within its 1.5s budget;" in text
    assert f"supervise digest -C {tmp_path.resolve()} --budget 31.5" in text
    assert "'hang' (ran" in text


def test_the_banners_rerun_command_works_from_any_folder(tmp_path: Path) -> None:
    """A relative ``--config`` is read from the working directory, not from ``-C``: the
    banner's command names it by its absolute path, so it runs the same digest from any
    folder. Fails on the old code (the relative name, read from elsewhere: "cannot read")."""
    project, elsewhere = tmp_path / "proj", tmp_path / "elsewhere"
    project.mkdir()
    elsewhere.mkdir()
    (project / "hang.toml").write_text("budget = 1\ngrace = 0.1\n" + stage("hang", "sleep 30"))
    proc = run_cli("digest", "--config", "hang.toml", cwd=project)
    banner = proc.stdout.decode()
    line = next(ln for ln in banner.splitlines() if "supervise digest -C" in ln)
    command = shlex.split(line[line.index("supervise digest -C"):].rstrip(".`'\"):;"))
    assert command[command.index("--config") + 1] == str((project / "hang.toml").resolve())
    at = command.index("--budget")
    del command[at:at + 2]  # the config's own 1 s budget: the same digest, cut again
    again = run_cli(*command[1:], cwd=elsewhere)
    assert again.returncode == 0 and b"cannot read" not in again.stderr, again.stderr
    assert b"'hang' (ran" in again.stdout


def test_deferred_stage_never_holds_the_digest_and_is_delivered_once(tmp_path: Path) -> None:
    """Rule 14: `out=$(supervise digest)` returns while the deferred stage sleeps; its result
    is delivered exactly once, by the next digest.

    Gates, not timing: the first run ends only when `go` exists, every later run only when
    `release` does. (With one gate the second digest's own run could end before that digest
    collected, under load 2 of 2: then it rightly showed its own result, the earlier one
    superseded, and the test's premise was gone.)"""
    gates = tmp_path / "gates"
    gates.mkdir()
    script = (f"if [ -e {gates}/ran-once ]; then until [ -e {gates}/release ]; do sleep 0.02; "
              f"done; else touch {gates}/ran-once; until [ -e {gates}/go ]; do sleep 0.02; done; "
              "fi; echo upstream reachable")
    write_config(tmp_path, stage("net", f"sh -c '{script}'", deferred=True, timeout=20)
                 + stage("main", "echo main"))
    results = tmp_path / ".supervise" / "deferred" / "net"

    def wait_for_a_result() -> None:
        deadline = time.monotonic() + 15
        while not list(results.glob("result-*.json")):
            assert time.monotonic() < deadline, "the deferred runner wrote no result"
            time.sleep(0.02)

    try:
        first = run_cli("digest", "--session-start", cwd=tmp_path, timeout=15)  # capture_output: a pipe, like $(...)
        text = first.stdout.decode()
        assert text.startswith("main\n")
        assert "IN PROGRESS" in text and "'net'" in text
        (gates / "go").touch()
        wait_for_a_result()
        second = run_cli("digest", "--session-start", cwd=tmp_path).stdout.decode()
        assert second.count("upstream reachable") == 1
        assert "result of an EARLIER run" in second
        # the second digest's own run ends now; the third digest shows only that one
        (gates / "release").touch()
        wait_for_a_result()
        third = run_cli("digest", "--session-start", cwd=tmp_path).stdout.decode()
        assert third.count("upstream reachable") == 1
    finally:
        (gates / "go").touch()
        (gates / "release").touch()  # every run ends, so no process outlives the test
    deadline = time.monotonic() + 15
    while (results / "running.json").exists() and time.monotonic() < deadline:
        time.sleep(0.02)


def test_deferred_stage_past_its_deadline_is_killed(tmp_path: Path) -> None:
    write_config(tmp_path, stage("slow", "sleep 30", deferred=True, timeout=0.5))
    first = run_cli("digest", "--session-start", cwd=tmp_path).stdout.decode()
    assert "IN PROGRESS" in first
    results = tmp_path / ".supervise" / "deferred" / "slow"
    deadline = time.monotonic() + 15
    while not list(results.glob("result-*.json")) and time.monotonic() < deadline:
        time.sleep(0.02)
    data = json.loads(next(results.glob("result-*.json")).read_text())
    assert data["status"] == "timed_out" and "STARTUP TRUNCATED" not in data["output"]
    assert data["seconds"] >= 0.5  # the stage got its whole timeout


def test_run_exit_codes_like_timeout(tmp_path: Path) -> None:
    assert run_cli("run", "--", "sh", "-c", "exit 7").returncode == 7
    assert run_cli("run", "--", "no-such-program-xyz").returncode == 127
    proc = run_cli("run", "--budget", "1", "--grace", "0.1", "--", "sh", "-c",
                   "echo out; sleep 30 & sleep 30")
    assert proc.returncode == 124
    assert proc.stdout == b"out\n"
    assert b"killed after its 1s budget" in proc.stderr


def test_run_passes_bytes_through_unchanged(tmp_path: Path) -> None:
    proc = run_cli("run", "--", sys.executable, "-c",
                   "import sys; sys.stdout.buffer.write(bytes(range(256)))")
    assert proc.returncode == 0 and proc.stdout == bytes(range(256))


def test_config_default_prints_the_embedded_digest(tmp_path: Path) -> None:
    proc = run_cli("config", "--default", cwd=tmp_path)
    assert proc.returncode == 0 and b"[[stages]]" in proc.stdout


@pytest.mark.parametrize("argv", [["digest", "--budget", "-1"], ["digest", "-C", "no-such-dir"],
                                  ["nosuchverb"]])
def test_usage_errors_are_one_line(argv: list[str], tmp_path: Path) -> None:
    """One error line, after at most argparse's usage block (an unknown verb printed the
    whole 18-line help after its error)."""
    proc = run_cli(*argv, cwd=tmp_path)
    assert proc.returncode == 2
    assert b"Traceback" not in proc.stderr
    lines = proc.stderr.decode().splitlines()
    assert lines[-1].startswith("supervise") and "usage" not in lines[-1], lines
    usage = lines[:-1]
    assert usage == [] or (usage[0].startswith("usage: supervise")
                           and all(line.startswith(" ") for line in usage[1:])), lines


def test_two_hundred_megabyte_stage_keeps_memory_bounded(tmp_path: Path) -> None:
    """A stage printing 200 MB: the digest shows its cap marker and our RSS stays bounded
    (we read and drop, never buffer it all). The figure itself is in docs/benchmarks.md."""
    write_config(tmp_path, "max_output = 65536\n" + stage("flood", f"{HOSTILE} flood 200"))
    proc = subprocess.Popen(supervise_cmd("digest"), cwd=tmp_path, stdout=subprocess.PIPE,
                            stderr=subprocess.DEVNULL)
    assert proc.stdout is not None
    chunks: list[bytes] = []
    reader = threading.Thread(target=lambda: chunks.append(proc.stdout.read()))  # type: ignore[union-attr]
    reader.start()
    peak = peak_rss_until_exit(proc)
    reader.join(timeout=30)
    proc.wait(timeout=30)
    proc.stdout.close()
    out = b"".join(chunks)
    assert proc.returncode == 0
    assert b"OUTPUT CUT" in out and b"209715200 bytes" in out
    assert len(out) < 70000
    assert 0 < peak < 150 * 1024 * 1024  # 200 MB buffered would be far above this


def test_first_digest_leaves_no_untracked_state_dir(git_repo: Path) -> None:
    """A digest in a project that never ran `install` creates .supervise/ for its stages and
    excludes it from git at once (new-user report: `git status` showed `?? .supervise/`)."""
    write_config(git_repo, stage("d", "echo later", deferred=True, timeout=5))
    assert run_cli("digest", cwd=git_repo).returncode == 0
    assert (git_repo / ".supervise").is_dir()
    status = subprocess.run(["git", "status", "--porcelain"], cwd=git_repo, capture_output=True,
                            text=True, check=True).stdout
    assert ".supervise" not in status
    results = git_repo / ".supervise" / "deferred" / "d"
    deadline = time.monotonic() + 15
    while (results / "running.json").exists() and time.monotonic() < deadline:
        time.sleep(0.02)


def test_config_error_names_the_stage_and_the_unknown_key(tmp_path: Path) -> None:
    write_config(tmp_path, stage("a", "true") + stage("todo", "true") + "timeuot = 5\n")
    err = run_cli("config", cwd=tmp_path).stderr.decode().strip()
    assert err.endswith("[[stages]] 'todo' (number 2): key 'timeuot': unknown key: did you "
                        "mean 'timeout'? (see docs/stage-authors.md for the keys a stage takes)")
    assert err.count("\n") == 0


def test_bad_environment_override_is_ignored_not_fatal(tmp_path: Path) -> None:
    write_config(tmp_path, stage("a", "echo from-config"))
    proc = run_cli("digest", cwd=tmp_path, env={"SUPERVISE_TIMEOUT": "abc"})
    assert proc.returncode == 0 and proc.stdout == b"from-config\n"
    assert b"SUPERVISE_TIMEOUT='abc'" in proc.stderr and b"ignored" in proc.stderr


def test_hook_with_a_broken_config_still_prints_a_digest(git_repo: Path) -> None:
    """Issue 2: in a hook path a bad file never stops the digest from being printed."""
    (git_repo / "supervise.toml").write_text("budgett = 3\n")
    payload = json.dumps({"session_id": "s", "cwd": str(git_repo), "source": "startup"}).encode()
    proc = run_cli("hook", input=payload, cwd=git_repo)
    assert proc.returncode == 0
    assert b"[supervise] configuration error: " in proc.stdout[:300]  # first, before any stage
    assert b"## Repository" in proc.stdout  # the embedded default's repo stage ran


def test_a_reader_that_never_reads_does_not_stall_the_budget(tmp_path: Path) -> None:
    """Adversarial report: a blocking write(1) on a full pipe froze the event loop, deadlines
    and signals included. Our stdout is a pipe nobody reads; the digest still ends."""
    write_config(tmp_path, "budget = 2\ngrace = 0.2\n"
                 + stage("flood", f"{HOSTILE} flood 1") + stage("hang", "sleep 300"))
    r, w = os.pipe()
    try:
        proc = subprocess.Popen(supervise_cmd("digest"), cwd=tmp_path, stdout=w,
                                stderr=subprocess.DEVNULL, stdin=subprocess.DEVNULL)
        os.close(w)
        try:
            code = proc.wait(timeout=20)  # hangs forever without the fix
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    finally:
        os.close(r)
    assert code == 0


def test_run_passes_stdin_and_keeps_stderr_apart(tmp_path: Path) -> None:
    """`supervise run` behaves like GNU timeout for stdio: the command's own stdin, stdout
    and stderr."""
    proc = run_cli("run", "--", "sh", "-c", "cat; echo err >&2", input=b"piped in\n", cwd=tmp_path)
    assert proc.returncode == 0
    assert proc.stdout == b"piped in\n" and proc.stderr == b"err\n"
    assert not (tmp_path / ".supervise").exists()


@pytest.mark.parametrize("bad", ['run = ["echo", "a\\u0000b"]', 'run = "true"\nenv = { "A=B" = "c" }',
                                 'run = "true"\ncwd = "a\\u0000b"'])
def test_values_execve_cannot_carry_are_config_errors(tmp_path: Path, bad: str) -> None:
    """Adversarial report: a NUL in argv/env/cwd or '=' in an env name crashed the digest."""
    write_config(tmp_path, f'[[stages]]\nname = "b"\n{bad}\n')
    proc = run_cli("config", cwd=tmp_path)
    assert proc.returncode == 1 and b"[[stages]] 'b' (number 1):" in proc.stderr
    digest = run_cli("digest", cwd=tmp_path)
    assert digest.returncode == 1 and b"Traceback" not in digest.stderr


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_a_deferred_runner_stopped_by_a_signal_kills_its_stage(tmp_path: Path,
                                                              sig: signal.Signals,
                                                              cpu_load: str) -> None:
    """A TERM (a logout, a shutdown, a user's ``kill``) or INT to the detached runner of a
    deferred stage: the runner died at once (no handler) and its stage ran on, orphaned, with
    no deadline, no result and ``running.json`` left behind. Now the signal aborts the run as
    it aborts a digest: the stage's tree is killed and a result says it was stopped."""
    started = tmp_path / "stage.pid"
    write_config(tmp_path, stage("slow", f"sh -c 'echo $$ > {started}.tmp; "
                                         f"mv {started}.tmp {started}; sleep 60'",
                                 deferred=True, timeout=120))
    assert "IN PROGRESS" in run_cli("digest", "--session-start", cwd=tmp_path).stdout.decode()
    results = tmp_path / ".supervise" / "deferred" / "slow"
    deadline = time.monotonic() + 60
    while not started.exists() and time.monotonic() < deadline:  # handshake: the stage runs
        time.sleep(0.02)
    stage_pid = int(started.read_text())
    runner = json.loads((results / "running.json").read_text())["pid"]
    try:
        os.kill(runner, sig)
        deadline = time.monotonic() + 60
        while alive_and_ours(runner) and time.monotonic() < deadline:
            time.sleep(0.02)
        assert not alive_and_ours(runner)
        assert not alive_and_ours(stage_pid), "the stage outlived its runner"
        # the run is aborted, not lost: a signed result saying the stage was killed, and no
        # lost-*.json (a lost record has no status, so "status != ok" accepted it)
        names = sorted(p.name for p in results.iterdir())
        found = list(results.glob("result-*.json"))
        assert len(found) == 1 and not list(results.glob("lost-*.json")), names
        data = json.loads(found[0].read_text())
        assert data.get("status") == "killed" and data.get("name") == "slow", data
        assert not (results / "running.json").exists()
    finally:
        for pid in (stage_pid, runner):
            try:
                os.killpg(pid, signal.SIGKILL)  # each leads its own process group
            except OSError:
                pass


_RUNNER_AT_THE_WINDOW = """
import signal, sys
from supervisor.engine import _deferred_runner, _signals
sig, where = int(sys.argv[1]), sys.argv[2]
if where == "teardown":  # the loop still runs; with_signals has put back the handlers found
    real = _signals.with_signals
    async def late(body, *args):
        done = await real(body, *args)
        signal.raise_signal(sig)
        return done
    _signals.with_signals = late
else:  # the result being encoded, before its fsynced write: no loop runs
    real_encode = _deferred_runner._encode_result
    def encode(*args):
        signal.raise_signal(sig)
        return real_encode(*args)
    _deferred_runner._encode_result = encode
sys.exit(_deferred_runner.main(sys.argv[3:]))
"""


@pytest.mark.parametrize("where", ["teardown", "write"])
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT, signal.SIGHUP])
def test_a_signal_after_the_deferred_stage_ended_keeps_its_result(
        tmp_path: Path, sig: signal.Signals, where: str, cpu_load: str) -> None:
    """A TERM, INT or HUP to the deferred runner after its stage ended (while its event loop
    shuts down, or while the result is encoded and written): the handlers with_signals put
    back were SIG_DFL (TERM, HUP: the runner died, its result lost and running.json left,
    so the next digest reported the run LOST) and asyncio's SIGINT handler (a
    KeyboardInterrupt wrote lost-*.json for a stage that had completed). Now the signal is
    recorded and acted on once the result is written: the result is there, ``ok``, nothing
    is reported lost, and the runner then leaves with ``128 + n``. The signal is raised in
    the runner's own process at the window (a wrapper around its ``main``)."""
    state = tmp_path / ".supervise"
    results = state / "deferred" / "quick"
    results.mkdir(parents=True)
    run_id = "run1"
    (results / "running.json").write_text(json.dumps({"run_id": run_id, "pid": 1}))
    spec = json.dumps({"name": "quick", "run": ["sh", "-c", "echo done"]})
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
    proc = subprocess.run(
        [sys.executable, "-c", _RUNNER_AT_THE_WINDOW, str(int(sig)), where,
         "--dir", str(results), "--run-id", run_id, "--spec", spec, "--deadline", "60",
         "--cwd", str(tmp_path)],
        cwd=tmp_path, env=env, stdin=subprocess.DEVNULL, capture_output=True, timeout=120)
    names = sorted(p.name for p in results.iterdir())
    assert proc.returncode == 128 + sig, (proc.returncode, proc.stderr.decode()[-2000:], names)
    assert f"result-{run_id}.json" in names and not any(n.startswith("lost-") for n in names), names
    data = json.loads((results / f"result-{run_id}.json").read_text())
    assert data.get("status") == "ok", data
    assert "running.json" not in names
    assert b"Traceback" not in proc.stderr, proc.stderr.decode()[-2000:]
