"""Stage spawning without asyncio's subprocess machinery (supervisor.engine._spawn, issue 13): both
ways of starting a leader (posix_spawn from the project directory, fork elsewhere), both ways
of waiting for it (pidfd, polling), and the drain of output past a stage's cap."""

from __future__ import annotations

import os
import sys
from functools import partial
from pathlib import Path
from typing import Any

import anyio
import pytest

from supervisor import DigestConfig, SessionContext, StageSpec, run_digest
from supervisor.engine import _spawn
from supervisor.engine._results import DigestResult

LINUX = sys.platform.startswith("linux")


def digest(tmp_path: Path, stages: list[dict[str, Any]], *, budget: float = 20,
           **kwargs: Any) -> DigestResult:
    config = DigestConfig(budget=budget, grace=0.3,
                          stages=tuple(StageSpec(**s) for s in stages), **kwargs)
    ctx = SessionContext(project_dir=tmp_path, state_dir=tmp_path / ".supervise")
    return anyio.run(partial(run_digest, config, ctx))


@pytest.fixture(params=["posix_spawn", "fork"])
def start(request: pytest.FixtureRequest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    """Run the test's digest from the project directory (posix_spawn) or from elsewhere
    (the fork fallback), and prove which path ran."""
    calls: list[str] = []
    for name in ("_posix_spawn", "_popen"):
        real = getattr(_spawn, name)

        def spy(*args: Any, _real: Any = real, _name: str = name) -> int:
            calls.append(_name)
            return int(_real(*args))
        monkeypatch.setattr(_spawn, name, spy)
    if request.param == "posix_spawn":
        monkeypatch.chdir(tmp_path)
        monkeypatch.setattr(_spawn, "may_vfork", lambda: True)
    request.addfinalizer(lambda: _check(calls, request.param))
    return str(request.param)


def _check(calls: list[str], param: str) -> None:
    assert calls, "no stage was spawned"
    assert set(calls) == {"_posix_spawn" if param == "posix_spawn" else "_popen"}


def test_stage_runs_in_its_directory_with_its_path(tmp_path: Path, start: str) -> None:
    sub = tmp_path / "sub dir"
    sub.mkdir()
    stages: list[dict[str, Any]] = [
        {"name": "pwd", "run": ["pwd"], "cwd": "sub dir" if start == "fork" else None},
        {"name": "missing", "run": ["no-such-program-13c"]},
        {"name": "err", "run": ["sh", "-c", "echo out; echo err >&2; exit 3"],
         "stderr": "context"}]
    result = digest(tmp_path, stages)
    pwd, missing, err = result.stages
    assert pwd.status == "ok"
    want = sub if start == "fork" else tmp_path
    assert Path(pwd.output.strip()).resolve() == want.resolve()
    assert missing.status == "failed"
    assert "could not start" in missing.output and "no-such-program-13c" in missing.output
    assert err.status == "failed" and err.exit_code == 3
    assert "out\nerr\n" in err.output


def test_a_script_without_a_shebang_runs_with_the_shell(tmp_path: Path, start: str,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    """execvp's ENOEXEC rule: an executable file without ``#!`` runs with ``/bin/sh``, by path
    and found on ``PATH`` (the stage never started: "Exec format error")."""
    bindir = tmp_path / "bin dir"
    bindir.mkdir()
    for where in (tmp_path / "plain.sh", bindir / "plain-on-path"):
        where.write_text('echo "ran $0 with [$1] [$2]"\n')
        where.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bindir}{os.pathsep}{os.environ['PATH']}")
    result = digest(tmp_path, [{"name": "by-path", "run": [str(tmp_path / "plain.sh"), "a b", "c"]},
                               {"name": "on-path", "run": ["plain-on-path", "x"]}])
    by_path, on_path = result.stages
    assert by_path.status == "ok", by_path
    assert by_path.output == f"ran {tmp_path / 'plain.sh'} with [a b] [c]\n"
    assert on_path.status == "ok" and on_path.output == f"ran {bindir / 'plain-on-path'} with [x] []\n"


@pytest.mark.skipif(not LINUX, reason="reads /proc/self/status")
def test_stage_gets_default_sigpipe(tmp_path: Path, start: str) -> None:
    """Python ignores SIGPIPE; a stage must not inherit that (`yes | head` must end)."""
    result = digest(tmp_path, [{"name": "sig", "run": ["grep", "SigIgn", "/proc/self/status"]}])
    ignored = int(result.stages[0].output.split()[1], 16)
    assert not ignored & (1 << (13 - 1)), result.stages[0].output  # SIGPIPE = 13


@pytest.mark.skipif(not LINUX, reason="lists /proc/self/fd")
def test_inherited_descriptor_never_reaches_a_stage(tmp_path: Path,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """A descriptor our parent left inheritable: posix_spawn would pass it on, so the engine
    forks instead (close_fds); `own_descriptors` (the CLI) makes it non-inheritable."""
    monkeypatch.chdir(tmp_path)  # posix_spawn's directory condition holds
    r, w = os.pipe()
    high = os.dup2(w, 200, inheritable=True)
    os.close(w)
    try:
        lister = [sys.executable, "-c",
                  "import os; print(sorted(int(x) for x in os.listdir('/proc/self/fd')))"]
        stages = [{"name": "fds", "run": lister}]
        assert _spawn.may_vfork() is False
        assert "200" not in digest(tmp_path, stages).stages[0].output
        _spawn.own_descriptors()
        assert not os.get_inheritable(high)
        assert _spawn.may_vfork() is True
        assert "200" not in digest(tmp_path, stages).stages[0].output
    finally:
        os.close(high)
        os.close(r)


def test_polling_wait_where_there_is_no_pidfd(tmp_path: Path, start: str,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    """The portable wait (macOS): waitpid polled with a backoff; exits, deadlines and kills
    come out as with a pidfd."""
    monkeypatch.setattr(_spawn, "PIDFD", False)
    result = digest(tmp_path, [{"name": "quick", "run": ["sh", "-c", "echo hi"]},
                               {"name": "slow", "run": ["sleep", "30"], "timeout": 0.5}],
                    budget=10)
    quick, slow = result.stages
    assert quick.status == "ok" and quick.output == "hi\n"
    assert slow.status == "timed_out"


def test_output_past_the_cap_is_counted_exactly(tmp_path: Path, start: str) -> None:
    """Past its cap a stage's pipe is drained off the event loop; the cut notice still
    gives the exact count, and what is kept is the head of the output."""
    size = 3 * 1024 * 1024 + 17
    flood = [sys.executable, "-c",
             f"import sys; sys.stdout.buffer.write(b'a' * {size})"]
    result = digest(tmp_path, [{"name": "flood", "run": flood, "max_output": 4096},
                               {"name": "next", "run": ["echo", "after"]}])
    stage = result.stages[0]
    assert stage.bytes == size and stage.truncated
    assert f"printed {size} bytes" in result.text
    assert stage.output.startswith("a" * 4000)
    assert result.stages[1].output == "after\n"


def test_drain_stops_when_a_leftover_holds_the_pipe(tmp_path: Path, start: str,
                                                    cpu_load: str) -> None:
    """A stage past its cap that leaves a process holding its pipe and flooding it: the
    leftover is killed (it runs before the leader's exit: a handshake, not a sleep) and the
    drain is stopped without reading to end of file (rule 6); the digest ends and counts
    what came."""
    script = ("import os, sys\n"
              "sys.stdout.buffer.write(b'x' * 200000); sys.stdout.flush()\n"
              "r, w = os.pipe()\n"
              "if os.fork() == 0:\n"
              "    os.close(r); os.write(w, b'1')\n"
              "    while True: os.write(1, b'y' * 65536)\n"
              "os.close(w); os.read(r, 1)\n")  # the child is running: now exit, leaving it
    result = digest(tmp_path, [{"name": "held", "run": [sys.executable, "-c", script],
                                "max_output": 1024}], budget=30)
    stage = result.stages[0]
    assert stage.status == "ok"
    assert stage.bytes >= 200000 and stage.truncated
    assert f"printed {stage.bytes} bytes" in result.text


def test_abort_ends_running_and_waiting_stages(tmp_path: Path) -> None:
    """An abort cancels each stage's one wait: the running stage is killed whole, the stage
    waiting for it (`needs`) never starts, and the banner names the abort."""
    config = DigestConfig(budget=30, grace=0.3, stages=(
        StageSpec(name="long", run=["sleep", "60"]),
        StageSpec(name="after", run=["echo", "late"], needs=("long",))))
    ctx = SessionContext(project_dir=tmp_path, state_dir=tmp_path / ".supervise")

    async def main() -> DigestResult:
        abort = anyio.Event()

        def started(name: str, result: object) -> None:
            if name == "long" and result is None:  # spawned: abort now
                abort.set()
        return await run_digest(config, ctx, abort=abort, abort_reason="SIGTERM",
                                on_stage=started)
    result = anyio.run(main)
    long, after = result.stages
    assert long.status == "killed" and after.status == "not_started"
    assert result.truncated and result.reason == "SIGTERM"


@pytest.mark.parametrize("fmt", ["text", "json"])
def test_run_runs_a_script_without_a_shebang_with_the_shell(tmp_path: Path, fmt: str) -> None:
    """``supervise run`` follows execvp's ENOEXEC rule as GNU ``timeout`` does: it exited 126
    ("Exec format error") for an executable script without ``#!``."""
    import json
    import subprocess

    from helpers import supervise_cmd

    script = tmp_path / "no shebang"
    script.write_text('echo "ran with [$1]"\n')
    script.chmod(0o755)
    proc = subprocess.run(supervise_cmd("run", "--format", fmt, "--", str(script), "a b"),
                          capture_output=True, stdin=subprocess.DEVNULL, timeout=60)
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)["output"] if fmt == "json" else proc.stdout.decode()
    assert out == "ran with [a b]\n"
