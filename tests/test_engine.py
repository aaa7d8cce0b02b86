"""The digest engine against hostile stages: real processes, real signals, no mocks."""

from __future__ import annotations

import os
import signal
import sys
import time
from functools import partial
from pathlib import Path
from typing import Any

import anyio
import pytest

from helpers import alive_and_ours

from supervisor import DigestConfig, SessionContext, StageSpec, run_digest
from supervisor.engine._results import DigestResult
from supervisor.engine._output import BufferSink
from supervisor.engine._reaper import HARD_PHASE
from supervisor.engine._tree import group_is_ours

RES = Path(__file__).parent / "resources"
HOSTILE = [sys.executable, str(RES / "hostile.py")]


def digest(tmp_path: Path, stages: list[dict[str, Any]], *, budget: float = 10,
           grace: float = 0.3, **kwargs: Any) -> DigestResult:
    config = DigestConfig(budget=budget, grace=grace, stages=tuple(StageSpec(**s) for s in stages),
                          **kwargs)
    ctx = SessionContext(project_dir=tmp_path, state_dir=tmp_path / ".supervise")
    return anyio.run(partial(run_digest, config, ctx))


def digest_aborted_once(tmp_path: Path, stages: list[dict[str, Any]], ready: Path, *,
                        grace: float = 0.1) -> DigestResult:
    """Run a digest and abort it (as a SIGTERM to the CLI does) once ``ready`` exists: the
    kill comes after the stage reached the state the test is about, however slow the host
    (a 1-1.5 s timeout or budget only guessed that a Python stage had started by then)."""
    config = DigestConfig(budget=60, grace=grace, stages=tuple(StageSpec(**s) for s in stages))
    ctx = SessionContext(project_dir=tmp_path, state_dir=tmp_path / ".supervise")

    async def main() -> DigestResult:
        abort = anyio.Event()
        async with anyio.create_task_group() as tg:
            async def abort_once_ready() -> None:
                with anyio.fail_after(30):  # the premise, bounded
                    while not ready.exists():
                        await anyio.sleep(0.01)
                abort.set()

            tg.start_soon(abort_once_ready)
            result = await run_digest(config, ctx, abort=abort, abort_reason="SIGTERM")
        return result

    return anyio.run(main)


def hostile(name: str, kind: str, *args: str, **extra: Any) -> dict[str, Any]:
    return {"name": name, "run": [*HOSTILE, kind, *args], **extra}


def _dying(pid: int) -> bool:
    """Whether ``pid`` is a zombie or gone, is exiting (``PF_EXITING`` in ``/proc/<pid>/stat``'s
    flags: it took its SIGKILL and runs ``do_exit``), or has SIGKILL pending (``SigPnd`` or
    ``ShdPnd`` in ``/proc/<pid>/status``): nothing it does can keep it alive."""
    try:
        with open(f"/proc/{pid}/status") as f:
            status = dict(line.split(":", 1) for line in f.read().splitlines() if ":" in line)
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read()
    except OSError:
        return True
    if status.get("State", "").strip()[:1] in ("Z", "X"):
        return True
    kill_bit = 1 << (signal.SIGKILL - 1)
    if any(int(status.get(key, "0").strip() or "0", 16) & kill_bit
           for key in ("SigPnd", "ShdPnd")):
        return True
    flags = int(stat[stat.rindex(b")") + 2:].split()[6])  # field 9: the task's flags
    return bool(flags & 0x4)  # PF_EXITING


def pid_dead(path: Path, within: float = HARD_PHASE / 2) -> bool:
    """When ``run_digest`` has returned, the process whose pid ``path`` holds must be beyond
    saving: gone (its pid may now name a process this test did not start: pids are reused),
    a zombie, exiting, or with SIGKILL pending (:func:`_dying`). A kill that ends at its bound
    has sent SIGKILL, but the process may not have been scheduled yet to die (the portable
    path under load); a wait for it to die would hide a kill that returned with a member
    still running, never signalled (the regression commit 5cf4362 fixed), so the only wait
    allowed is ``within`` seconds, below the engine's own :data:`HARD_PHASE` reserve, for a
    SIGKILL sent as the kill returned to show in ``/proc``."""
    pid = int(path.read_text())
    deadline = time.monotonic() + within
    while alive_and_ours(pid) and not _dying(pid):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.005)
    return True


@pytest.fixture
def piddir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    d = tmp_path / "pids"
    d.mkdir()
    monkeypatch.setenv("PIDDIR", str(d))
    return d


def test_background_leftover_does_not_hold_the_stage(tmp_path: Path, cpu_load: str) -> None:
    """Rule 1 + 8: `sh -c 'sleep 30 & exit 0'` ends at once and leaves no `sleep` behind."""
    result = digest(tmp_path, [{"name": "bg", "run": ["sh", "-c", "sleep 30 & echo started"]}])
    stage = result.stages[0]
    assert stage.status == "ok" and stage.output == "started\n"
    assert stage.seconds < 20  # 30 s if we had waited for the pipe to close
    assert result.complete


def test_stage_gets_own_group_and_devnull_stdin(tmp_path: Path) -> None:
    """Rule 2: own session/process group; `cat` sees /dev/null and exits at once."""
    code = "import os; print(os.getpgid(0) == os.getpid(), os.getsid(0) == os.getpid())"
    result = digest(tmp_path, [{"name": "cat", "run": ["cat"]},
                               {"name": "grp", "run": [sys.executable, "-c", code]},
                               hostile("stdin", "stdin-reader")])
    assert [s.status for s in result.stages] == ["ok", "ok", "ok"]
    assert result.stages[1].output == "True True\n"
    assert result.stages[2].output == "read 0 bytes from stdin\n"


@pytest.mark.parametrize(("kind", "roles"), [
    ("term-ignoring-child", ["leader", "child"]),
    ("setsid-escapee", ["leader", "escapee"]),
    ("double-fork", ["leader", "daemon"]),
])
def test_budget_kills_the_whole_tree(tmp_path: Path, piddir: Path, kind: str, roles: list[str], cpu_load: str) -> None:
    """Rule 7: TERM-ignoring group members, setsid escapees and double-forked daemons all die;
    escalation looks at every member, not only the leader (coreutils timeout, supervisord#1101)."""
    result = digest(tmp_path, [hostile("evil", kind)], budget=2.0, grace=0.2)
    assert result.truncated and result.reason == "budget"
    assert result.stages[0].status == "killed"
    assert "leader ready" in result.stages[0].output
    for role in roles:
        assert pid_dead(piddir / f"{role}.pid"), role
    assert "STARTUP TRUNCATED" in result.text and "'evil'" in result.text


def test_grandchild_holding_the_pipe_does_not_block(tmp_path: Path, piddir: Path, cpu_load: str) -> None:
    """Rule 6: a setsid grandchild holding stdout for 60 s: the stage ends when its leader exits
    (then the leftover is swept) instead of reading to EOF."""
    result = digest(tmp_path, [hostile("hold", "hold-pipe")], budget=30)
    assert result.stages[0].status == "ok"
    assert result.stages[0].output == "leader done\n"
    assert result.stages[0].seconds < 20  # 60 s if we had read to EOF
    assert pid_dead(piddir / "holder.pid")


def test_leader_dies_on_term_child_ignores_it(tmp_path: Path, piddir: Path, cpu_load: str) -> None:
    """The coreutils `timeout` hole: the leader dies on TERM, its child ignores TERM; the
    child must still be gone after the grace period. The tree is two shells, not Python: it
    must be up within the 1 s timeout (a stage timeout cannot wait for a handshake), and a
    shell is ready in a few milliseconds of CPU where Python needs tens."""
    tree = ('sh -c \'trap "" TERM; echo $$ > "$PIDDIR/child.pid"; exec sleep 60\' & '
            'echo $$ > "$PIDDIR/leader.pid"; echo leader ready; exec sleep 60')
    result = digest(tmp_path, [{"name": "t", "run": ["sh", "-c", tree], "timeout": 1.0}],
                    grace=0.2)
    assert result.stages[0].status == "timed_out"
    assert (piddir / "child.pid").exists(), "the premise: the tree was up before its timeout"
    assert pid_dead(piddir / "child.pid")
    assert not result.truncated  # a per-stage timeout is not a digest truncation


def test_ten_megabyte_line_and_multibyte_text_are_byte_identical(tmp_path: Path) -> None:
    """Rule 5: raw bytes, no line-length limit, no split multibyte characters."""
    n = 10 * 1024 * 1024
    sink = BufferSink()
    config = DigestConfig(budget=60, max_output=32 * 1024 * 1024,
                          stages=(StageSpec(**hostile("big", "big-line", str(n))),
                                  StageSpec(**hostile("cafe", "coffee"))))
    ctx = SessionContext(project_dir=tmp_path, state_dir=tmp_path / ".s")
    result = anyio.run(partial(run_digest, config, ctx, sink=sink))
    data = sink.getvalue()
    assert data == b"x" * n + b"\n" + ("\u2615" * 100000).encode() + b"\n"
    assert result.stages[0].bytes == n and not result.stages[0].truncated


def test_unflushed_writer_killed_mid_run_shows_its_first_line(tmp_path: Path, piddir: Path) -> None:
    """PYTHONUNBUFFERED=1: a block-buffered writer killed mid-run (here once it has printed:
    its pid file comes after its lines) still shows its lines."""
    result = digest_aborted_once(tmp_path, [hostile("buf", "buffered-then-hang")],
                                 piddir / "leader.pid")
    assert result.stages[0].status == "killed"
    assert result.stages[0].output.startswith("first line before the hang\nsecond line\n")


def test_character_cut_by_a_kill_becomes_replacement_char(tmp_path: Path, piddir: Path) -> None:
    """Rule 12: `abc\\xe2\\x86` then a kill: `abc\\ufffd\\n` and the banner after it. The kill
    comes once the stage has written (its pid file follows its bytes)."""
    result = digest_aborted_once(tmp_path, [hostile("split", "split-utf8")], piddir / "leader.pid")
    assert result.text.startswith("abc\ufffd\n")
    assert "STARTUP TRUNCATED" in result.text
    result.text.encode("utf-8")  # valid UTF-8 throughout


def test_per_stage_timeout_kills_only_that_stage(tmp_path: Path) -> None:
    result = digest(tmp_path, [hostile("slow", "ignore-term", timeout=0.5),
                               hostile("after", "echo", "still here")], grace=0.1)
    slow, after = result.stages
    assert slow.status == "timed_out" and "timed out after 0.5s" in slow.output
    assert after.status == "ok" and after.output == "still here\n"
    assert not result.truncated and not result.complete


def test_output_in_declared_order_while_running_concurrently(tmp_path: Path) -> None:
    """The first unfinished stage streams; later ones buffer and flush in order."""
    marker = tmp_path / "second-done"
    wait_for_second = (f"import os, time\n"
                       f"while not os.path.exists({str(marker)!r}): time.sleep(0.01)\n"
                       f"print('one')")
    result = digest(tmp_path, [
        {"name": "first", "run": [sys.executable, "-c", wait_for_second]},
        {"name": "second", "run": ["sh", "-c", f"echo two; touch '{marker}'"]},
    ])
    assert result.text == "one\ntwo\n"  # second finished first, printed second
    assert [s.status for s in result.stages] == ["ok", "ok"]


def test_needs_orders_starts(tmp_path: Path) -> None:
    flag = tmp_path / "flag"
    result = digest(tmp_path, [
        {"name": "reader", "run": ["sh", "-c", f"cat '{flag}'"], "needs": ["writer"]},
        {"name": "writer", "run": ["sh", "-c", f"echo written > '{flag}'"]},
    ])
    assert result.stages[0].output == "written\n"


def test_two_hundred_tiny_stages_under_a_tight_budget(tmp_path: Path) -> None:
    stages = [{"name": f"s{i:03d}", "run": ["sh", "-c", f"echo {i}"]} for i in range(200)]
    result = digest(tmp_path, stages, budget=4, grace=0.1)
    printed = [int(line) for line in result.text.splitlines() if line.isdigit()]
    assert printed == sorted(printed)  # declared order, whatever finished first
    statuses = {s.status for s in result.stages}
    assert statuses <= {"ok", "killed", "not_started"}
    if result.truncated:
        assert "STARTUP TRUNCATED" in result.text
    else:
        assert printed == list(range(200))


def test_flood_is_capped_with_a_loud_marker(tmp_path: Path) -> None:
    result = digest(tmp_path, [hostile("flood", "flood", "50"), hostile("next", "echo", "tail")],
                    budget=60, max_output=256 * 1024)
    flood = result.stages[0]
    assert flood.bytes == 50 * 1024 * 1024 and flood.truncated
    assert "OUTPUT CUT" in result.text and "'flood'" in result.text
    assert len(result.text.encode()) < 256 * 1024 + 2048


def test_group_guard_never_signals_a_reaped_empty_group() -> None:
    """Rule 10: with the leader reaped and no verified member left, killpg is not allowed."""
    assert group_is_ours(False, [], 12345) is False
    assert group_is_ours(True, [], 12345) is True


def test_spawn_error_is_a_failed_stage_not_a_crash(tmp_path: Path) -> None:
    result = digest(tmp_path, [{"name": "missing", "run": ["/nonexistent/program"]},
                               {"name": "ok", "run": ["echo", "fine"]}])
    assert result.stages[0].status == "failed"
    assert "could not start" in result.stages[0].output
    assert result.stages[1].output == "fine\n"


def test_stage_environment_carries_the_session_context(tmp_path: Path,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GIT_DIR", "/elsewhere")
    config = DigestConfig(stages=(StageSpec(**hostile(
        "env", "env", "SUPERVISE_SOURCE", "SUPERVISE_MODE", "SUPERVISE_HARNESS", "GIT_DIR",
        "SUPERVISE_STAGE_OPTIONS", "PYTHONUNBUFFERED", "SUPERVISE_PROJECT_DIR",
        "SUPERVISE_STATE_DIR", "SUPERVISE_CWD", "SUPERVISE_SESSION_ID", "SUPERVISE_STAGE_NAME",
        options={"k": 1})),))
    ctx = SessionContext(project_dir=tmp_path, state_dir=tmp_path / ".s", source="compact",
                         mode="reemit", harness="claude", session_id="abc",
                         cwd=tmp_path / "sub")
    result = anyio.run(partial(run_digest, config, ctx))
    assert result.stages[0].output.splitlines() == [
        "SUPERVISE_SOURCE=compact", "SUPERVISE_MODE=reemit", "SUPERVISE_HARNESS=claude",
        "GIT_DIR=<unset>", 'SUPERVISE_STAGE_OPTIONS={"k": 1}', "PYTHONUNBUFFERED=1",
        f"SUPERVISE_PROJECT_DIR={tmp_path}", f"SUPERVISE_STATE_DIR={tmp_path / '.s'}",
        f"SUPERVISE_CWD={tmp_path / 'sub'}", "SUPERVISE_SESSION_ID=abc",
        "SUPERVISE_STAGE_NAME=env"]


def test_only_runs_the_selected_stages(tmp_path: Path) -> None:
    config = DigestConfig(stages=(StageSpec(name="a", run=["echo", "a"]),
                                  StageSpec(name="b", run=["echo", "b"], reemit=True)))
    ctx = SessionContext(project_dir=tmp_path, state_dir=tmp_path / ".s")
    result = anyio.run(partial(run_digest, config, ctx, only={"b"}))
    assert [s.status for s in result.stages] == ["skipped", "ok"]
    assert result.text == "b\n"


def test_caller_cancellation_kills_the_stages(tmp_path: Path, piddir: Path, cpu_load: str) -> None:
    """Embedding: cancelling run_digest (an extension bridge's newer generation) kills the tree
    and propagates the cancellation. The cancel comes once both members have written their
    pids (a handshake: a cancel 1.5 s after the start once came, on a loaded host, before the
    tree was up, and there was nothing to check)."""
    config = DigestConfig(grace=0.1, stages=(StageSpec(**hostile("t", "term-ignoring-child")),))
    ctx = SessionContext(project_dir=tmp_path, state_dir=tmp_path / ".s")
    members = [piddir / "leader.pid", piddir / "child.pid"]

    async def main() -> bool:
        with anyio.CancelScope() as scope:
            async with anyio.create_task_group() as tg:
                async def cancel_once_up() -> None:
                    with anyio.fail_after(30):  # the premise, bounded
                        while not all(p.exists() for p in members):
                            await anyio.sleep(0.01)
                    scope.cancel()

                tg.start_soon(cancel_once_up)
                await run_digest(config, ctx)
        return scope.cancelled_caught

    assert anyio.run(main)
    assert pid_dead(members[0]) and pid_dead(members[1])


def test_a_cancelled_stage_that_needed_sigkill_says_so_in_its_log(tmp_path: Path,
                                                                  piddir: Path) -> None:
    """Cancelling run_digest kills a stage whose leader ignores TERM with SIGKILL: the kill's
    report is in the stage log (``supervise status``), as at a timeout. On this path it was
    computed and dropped."""
    config = DigestConfig(grace=0.1, stages=(StageSpec(**hostile("t", "ignore-term")),))
    ctx = SessionContext(project_dir=tmp_path, state_dir=tmp_path / ".s")
    leader = piddir / "leader.pid"

    async def main() -> bool:
        with anyio.CancelScope() as scope:
            async with anyio.create_task_group() as tg:
                async def cancel_once_up() -> None:
                    with anyio.fail_after(30):  # the premise, bounded
                        while not leader.exists():
                            await anyio.sleep(0.01)
                    scope.cancel()

                tg.start_soon(cancel_once_up)
                await run_digest(config, ctx)
        return scope.cancelled_caught

    assert anyio.run(main)
    assert pid_dead(leader)
    log = (tmp_path / ".s" / "logs" / "t.log").read_text()
    assert "cancelled" in log and "1 needed SIGKILL" in log, log


def test_fork_and_exit_chain_is_frozen_then_killed(tmp_path: Path, piddir: Path, cpu_load: str) -> None:
    """Adversarial report: a chain where each generation forks, setsids and exits outran two
    snapshots and survived. The hard phase freezes (SIGSTOP) every member found until a fresh
    snapshot finds nothing new, then kills them all."""
    from supervisor.engine._reaper import enable_subreaper

    enable_subreaper()  # as the CLI does: orphans of the chain come to us
    # The leader exits only once the chain's first generation has written its pid (a chain
    # that never ran proves nothing: under load CI once swept it before its first write).
    result = digest(tmp_path, [hostile("chain", "fork-chain", timeout=0.5)], grace=0.1)
    assert result.stages[0].status in ("timed_out", "ok")
    assert (piddir / "chain.pid").exists(), "the chain never started: no generation to kill"
    last = (piddir / "chain.pid").read_text()
    assert pid_dead(piddir / "chain.pid")
    time.sleep(0.3)  # a live chain would have written ~30 new generations by now
    assert (piddir / "chain.pid").read_text() == last


def test_stage_output_reports_what_the_total_cap_let_through(tmp_path: Path) -> None:
    """Adversarial report: the hook's inline digest showed a stage the total cap had cut."""
    result = digest(tmp_path, [hostile("big", "flood", "1"), hostile("small", "echo", "SMALL")],
                    max_output=64 * 1024)
    small = result.stages[1]
    assert "SMALL" not in small.output and "SMALL" not in result.text
    assert "'small'" in result.text  # the cut notice names it


def test_an_idle_rule_that_raises_never_escapes_the_stage(tmp_path: Path,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """``idle_builtin`` promised never to raise out of a stage's task but caught only
    OSError, ValueError and ConfigError: any other exception from the idle rule (a rule file
    that fails, a RecursionError) ended the whole digest. Now the stage is just spawned and
    decides itself."""
    import supervisor.engine._launch as launch_module

    def broken(name: str, env: Any) -> bool:
        raise RuntimeError("the idle rule failed")

    monkeypatch.setattr(launch_module, "idle", broken)
    result = digest(tmp_path, [{"name": "memory", "builtin": "memory"}], budget=30)
    assert [s.status for s in result.stages] == ["ok"], result.stages
