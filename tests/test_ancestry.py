"""Design rule 16: lock ownership by ancestry (real process chains, no mocks of the kernel)."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from fake_harness import harness_binary
from supervisor.session import _ancestry

PROBE = ("import json, os; from supervisor.session import _ancestry as a; c = a.ancestry(); "
         "h = a.find_harness(c); print(json.dumps({'depth': len(c), 'harness': h and h.harness, "
         "'pid': h and h.ident.pid}))")


def test_a_real_16_deep_chain_finds_the_harness(tmp_path: Path) -> None:
    """A harness 16 processes above the hook is found; every hop is a real process (`; :`
    keeps each `sh -c` from exec-ing its command)."""
    codex = harness_binary(tmp_path / "bin", "codex")
    command = f"{shlex.quote(sys.executable)} -c {json.dumps(PROBE)}"  # a path may hold a space
    for _ in range(14):
        command = f"sh -c {json.dumps(command + '; :')}"
    proc = subprocess.Popen([str(codex), "-c", command + "; :"], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE)
    out, err = proc.communicate(timeout=30)
    found = json.loads(out)
    assert found["harness"] == "codex", err
    assert found["pid"] == proc.pid
    assert found["depth"] >= 16


def test_an_ancestor_vanishing_mid_walk_ends_the_walk_without_error(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Rule 16 (fault injection): the parent vanishes between reading our ppid and reading
    it; the walk ends there, with no exception, and ownership checks see no ancestor."""
    import os

    real = _ancestry.proc_info
    parent = os.getppid()
    monkeypatch.setattr(_ancestry, "proc_info", lambda pid: None if pid == parent else real(pid))
    chain = _ancestry.ancestry()
    assert [p.pid for p in chain] == [os.getpid()]
    assert _ancestry.find_harness(chain) is None
    ident = _ancestry.identify(parent)
    assert ident is None and not _ancestry.is_alive(_ancestry.ProcessId(parent, 0.0))


def test_walk_stops_at_a_parent_younger_than_its_child() -> None:
    """psutil's parent() guard: a "parent" created after its child is a reused pid."""
    from supervisor.session._procinfo import ProcInfo

    me = _ancestry.ancestry(hops=1)
    assert len(me) >= 1
    assert isinstance(me[0], ProcInfo)
    young = [p for p in _ancestry.ancestry() if p.create_time > me[0].create_time + 1.0]
    assert young == []  # every ancestor is older than us


def test_installed_version_reads_the_harness_package_not_the_cli(tmp_path: Path) -> None:
    """The version of a harness process comes from its npm package's package.json beside the
    executable it runs (or Claude's ``versions/<v>`` name), never from running it."""
    import shutil
    import subprocess
    import time

    from supervisor.session._ancestry import installed_version

    package = tmp_path / "node_modules" / "@anthropic-ai" / "claude-code"
    (package / "bin").mkdir(parents=True)
    (package / "package.json").write_text('{"name": "@anthropic-ai/claude-code", "version": "2.1.332"}')
    sleeper = package / "bin" / "claude.exe"
    shutil.copy("/bin/sleep", sleeper)
    native = tmp_path / "claude" / "versions" / "2.1.290"
    native.parent.mkdir(parents=True)
    shutil.copy("/bin/sleep", native)
    other = tmp_path / "other" / "bin" / "claude"
    other.parent.mkdir(parents=True)
    shutil.copy("/bin/sleep", other)
    (other.parent.parent / "package.json").write_text('{"name": "not-claude", "version": "9.9.9"}')
    procs = [subprocess.Popen([str(p), "30"]) for p in (sleeper, native, other)]
    try:
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and not all(
                os.path.exists(f"/proc/{p.pid}/exe") and os.readlink(f"/proc/{p.pid}/exe") != "/bin/sleep"
                for p in procs):
            time.sleep(0.05)
        assert [installed_version(p.pid, "claude") for p in procs] == ["2.1.332", "2.1.290", ""]
        assert installed_version(procs[0].pid, "cursor") == ""  # no npm package in its row
    finally:
        for p in procs:
            p.kill()
            p.wait()


@pytest.mark.parametrize("plant", ["fifo", "huge", "proc link", "escape"])
def test_a_planted_package_json_names_no_version_and_never_blocks(tmp_path: Path, plant: str) -> None:
    """A harness's ``package.json`` is read guarded: a FIFO there used to hold every hook that
    asked the harness's version; a huge file, a link into ``/proc`` or a version with an
    escape sequence names no version."""
    package = tmp_path / "node_modules" / "@anthropic-ai" / "claude-code"
    (package / "bin").mkdir(parents=True)
    manifest = package / "package.json"
    if plant == "fifo":
        os.mkfifo(manifest)
    elif plant == "huge":
        with manifest.open("wb") as f:
            f.write(b'{"name": "@anthropic-ai/claude-code", "version": "2.1.332", "x": "')
            f.truncate(3 << 30)
    elif plant == "proc link":
        manifest.symlink_to("/proc/self/environ")
    else:
        manifest.write_text('{"name": "@anthropic-ai/claude-code", "version": "2.1.332\\u001b[8m"}')
    code = ("import sys; from supervisor.session._ancestry import _package_version; "
            "print(repr(_package_version(sys.argv[1], ('@anthropic-ai/claude-code',))))")
    proc = subprocess.run([sys.executable, "-c", code, str(package / "bin" / "claude")],
                          capture_output=True, text=True, timeout=30)
    assert proc.returncode == 0 and proc.stdout.strip() == "''", proc.stderr
