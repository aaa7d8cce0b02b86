"""Design rule 11: optional cgroup v2 containment (skipped where no writable cgroup v2 exists)."""

from __future__ import annotations

import os
import sys
import uuid
from collections.abc import Iterator
from functools import partial
from pathlib import Path

import anyio
import psutil
import pytest

from supervisor import DigestConfig, SessionContext, StageSpec, run_digest

RES = Path(__file__).parent / "resources"


def _cgroup2_mount() -> Path | None:
    try:
        for line in Path("/proc/mounts").read_text().splitlines():
            fields = line.split()
            if len(fields) > 2 and fields[2] == "cgroup2":
                return Path(fields[1])
    except OSError:
        pass
    return None


@pytest.fixture
def cgroup_root(monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    mount = _cgroup2_mount()
    if mount is None or not os.access(mount, os.W_OK):
        pytest.skip("no writable cgroup v2 hierarchy on this machine")
    root = mount / f"watchkeeper-test-{uuid.uuid4().hex[:8]}"
    try:
        root.mkdir()
    except OSError as err:
        pytest.skip(f"cannot create a cgroup under {mount}: {err.strerror}")
    monkeypatch.setenv("SUPERVISE_CGROUP_ROOT", str(root))
    yield root
    for child in root.iterdir():
        if child.is_dir():
            child.rmdir()
    root.rmdir()


def test_env_clearing_double_fork_daemon_dies_with_the_cgroup(cgroup_root: Path,
                                                               tmp_path: Path,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    """A daemon that double-forks, calls setsid, ignores TERM and clears its environment has
    neither our pgid nor our token; only the cgroup still knows it."""
    piddir = tmp_path / "pids"
    piddir.mkdir()
    monkeypatch.setenv("PIDDIR", str(piddir))
    config = DigestConfig(budget=2, grace=0.2, stages=(StageSpec(
        name="evil", run=[sys.executable, str(RES / "hostile.py"), "env-clearing-daemon"]),))
    ctx = SessionContext(project_dir=tmp_path, state_dir=tmp_path / ".s")
    try:
        result = anyio.run(partial(run_digest, config, ctx))
        assert result.stages[0].status == "killed"
        daemon = int((piddir / "daemon.pid").read_text())
        try:
            assert psutil.Process(daemon).status() == psutil.STATUS_ZOMBIE
        except psutil.NoSuchProcess:
            pass
        assert [p for p in cgroup_root.iterdir() if p.is_dir()] == []  # stage cgroup removed
    finally:
        if (piddir / "daemon.pid").exists():  # a process we started: end it by pid
            try:
                psutil.Process(int((piddir / "daemon.pid").read_text())).kill()
            except psutil.Error:
                pass


def test_normal_stage_in_a_cgroup(cgroup_root: Path, tmp_path: Path) -> None:
    config = DigestConfig(stages=(StageSpec(name="a", run=["sh", "-c", "echo hi; sleep 30 &"]),))
    ctx = SessionContext(project_dir=tmp_path, state_dir=tmp_path / ".s")
    result = anyio.run(partial(run_digest, config, ctx))
    assert result.stages[0].output == "hi\n" and result.stages[0].status == "ok"


def test_a_delegated_subtree_is_found_and_the_root_never_used_implicitly(tmp_path: Path) -> None:
    """Issue 10: a writable delegated cgroup v2 subtree (a systemd user session) is used
    automatically; the hierarchy's root, a foreign-owned or a read-only one is not."""
    from supervisor.engine._cgroup import delegated_root

    mount = tmp_path / "cg"
    scope = mount / "user.slice" / "user-1000.slice" / "user@1000.service" / "app.slice" / "x.scope"
    scope.mkdir(parents=True)
    (scope / "cgroup.kill").write_text("")
    mounts = f"cgroup2 {mount} cgroup2 rw,nosuid 0 0\n"
    own = "0::/user.slice/user-1000.slice/user@1000.service/app.slice/x.scope\n"
    assert delegated_root(own, mounts, os.geteuid()) == scope
    assert delegated_root("0::/\n", mounts, os.geteuid()) is None  # the whole machine's
    assert delegated_root(own, mounts, os.geteuid() + 1) is None  # not delegated to us
    assert delegated_root(own, "proc /proc proc rw 0 0\n", os.geteuid()) is None  # no cgroup2
    assert delegated_root("0::/../etc\n", mounts, os.geteuid()) is None
    (scope / "cgroup.kill").unlink()
    assert delegated_root(own, mounts, os.geteuid()) is None  # kernel < 5.14: no cgroup.kill


def test_cgroup_root_off_disables_containment(monkeypatch: pytest.MonkeyPatch) -> None:
    from supervisor.engine._cgroup import cgroup_root

    monkeypatch.setenv("SUPERVISE_CGROUP_ROOT", "off")
    assert cgroup_root() is None


def test_a_cap_is_enforced_inside_a_cgroup_too(cgroup_root: Path, tmp_path: Path) -> None:
    """With a cgroup (pids.max where the controller is enabled, else the watchdog) a stage
    over max_tasks is killed whole, with the one line naming the cap."""
    bomb = "import os, time\nfor _ in range(7):\n    os.fork()\ntime.sleep(30)\n"
    config = DigestConfig(budget=20, grace=0.2, stages=(StageSpec(
        name="bomb", run=[sys.executable, "-c", bomb], max_tasks=20),))
    ctx = SessionContext(project_dir=tmp_path, state_dir=tmp_path / ".s")
    result = anyio.run(partial(run_digest, config, ctx))
    assert result.stages[0].status == "killed"
    assert "went over max_tasks = 20 tasks (processes and their threads) and was killed whole" in result.stages[0].output
    assert [p for p in cgroup_root.iterdir() if p.is_dir()] == []
