"""A built-in stage may start a process on purpose to outlive it (the memory stage's
consolidation wrapper); nothing else may detach from the watchdog that way.

The mark is ``SUPERVISE_DETACHED_FROM=<stage name>`` in a process that left the stage's session
(``supervisor.config._context.DETACH_VAR``). Real processes; the pid file tells what survived.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path


from helpers import alive_and_ours, supervise_cmd

from supervisor.config._context import DETACH_VAR  # the name's one home

# A configured stage that imitates the built-in detach: a setsid child with the mark set to its
# own stage name and no stage token. The stage writes the child's pid, then waits for it to end,
# ignoring SIGTERM: it lives until the digest's kill (the test ends the digest with SIGTERM once
# the pid is written) has frozen and SIGKILLed it, so the watchdog's scans (the kill's own
# included) see the child while its parent, a member, lives. (A child that leaves every handle
# behind before any scan saw it is a known limit without a cgroup, docs/engine.md; this test
# is about the mark, not that race.)
IMPOSTOR = r"""
import os, signal, subprocess, sys
signal.signal(signal.SIGTERM, signal.SIG_IGN)
env = {k: v for k, v in os.environ.items() if k != "SUPERVISE_STAGE_TOKEN"}
env[sys.argv[2]] = "impostor"
child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"], env=env,
                         start_new_session=True, stdin=subprocess.DEVNULL,
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
with open(sys.argv[1] + ".tmp", "w") as f:
    f.write(str(child.pid))
os.rename(sys.argv[1] + ".tmp", sys.argv[1])
child.wait()
"""


def _gone(pid: int) -> bool:
    return not alive_and_ours(pid)  # a reused pid is not our child


def test_a_configured_stage_cannot_detach_with_the_mark(tmp_path: Path) -> None:
    """Through the CLI (the subreaper on, as in every hook): the marked child is still a member
    and dies with the digest."""
    pidfile = tmp_path / "child.pid"
    script = tmp_path / "impostor.py"
    script.write_text(IMPOSTOR)
    (tmp_path / "supervise.toml").write_text(
        f'budget = 60\n[[stages]]\nname = "impostor"\n'
        f'run = [{json.dumps(sys.executable)}, {json.dumps(str(script))}, '
        f'{json.dumps(str(pidfile))}, "{DETACH_VAR}"]\n')
    digest = subprocess.Popen(supervise_cmd("digest"), cwd=tmp_path, stdin=subprocess.DEVNULL,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 30  # the premise (the child is up), bounded
        while not pidfile.exists() and digest.poll() is None and time.monotonic() < deadline:
            time.sleep(0.01)
        digest.send_signal(signal.SIGTERM)  # the CLI's abort: the whole-tree kill of each stage
        out, err = digest.communicate(timeout=60)
    finally:
        if digest.poll() is None:
            digest.kill()
            digest.communicate()
    assert pidfile.exists(), out + err
    assert digest.returncode == 128 + signal.SIGTERM, (digest.returncode, out + err)
    pid = int(pidfile.read_text())
    deadline = time.monotonic() + 5
    while not _gone(pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    if not _gone(pid):
        os.kill(pid, 9)
        raise AssertionError("a configured stage's marked setsid child outlived the digest")


# A built-in stage's leader whose child is caught by a scan before its exec: still in the
# stage's session with the stage's environment (its token, no mark). On "go" the child leaves
# the session and execs a program that carries the mark and no token, writes its pid, and lives;
# the leader exits once the child has exec'd.
EARLY_DETACH = r"""
import os, sys, time
forked, go, execd = sys.argv[1:4]
pid = os.fork()
if pid == 0:
    open(forked, "w").close()
    while not os.path.exists(go):
        time.sleep(0.01)
    os.setsid()
    env = {k: v for k, v in os.environ.items() if k != "SUPERVISE_STAGE_TOKEN"}
    env["SUPERVISE_DETACHED_FROM"] = "memory"
    code = f"import os, time; open({execd!r} + '.tmp', 'w').write(str(os.getpid())); " \
           f"os.rename({execd!r} + '.tmp', {execd!r}); time.sleep(60)"
    os.execve(sys.executable, [sys.executable, "-c", code], env)
while not os.path.exists(execd):
    time.sleep(0.01)
"""


def test_a_detach_a_scan_caught_before_its_exec_is_spared(tmp_path: Path) -> None:
    """The memory stage's consolidation wrapper, caught by a scan between its fork and its
    exec (the stage's session and token, no mark yet), was a member for the watchdog's
    caches: the leftover sweep at the stage's end found it in the members (stale row) and
    among our adopted children (cached token) and killed it while it started (the
    consolidation never ran: test_consolidation's flake under load, pytest being a child
    subreaper). Its current session and mark now decide, before the sweep acts."""
    from supervisor.engine import _loop, _tree
    from supervisor.engine._reaper import enable_subreaper

    enable_subreaper()  # as the CLI: the orphaned wrapper becomes our child
    forked, go, execd = tmp_path / "forked", tmp_path / "go", tmp_path / "execd"
    token = os.urandom(16).hex()
    leader = subprocess.Popen([sys.executable, "-c", EARLY_DETACH, str(forked), str(go),
                               str(execd)], env={**os.environ, "SUPERVISE_STAGE_TOKEN": token},
                              start_new_session=True, stdin=subprocess.DEVNULL)
    child = 0
    try:
        async def body() -> bool:
            nonlocal child
            watch = _tree.Watch()
            tree = _tree.StageTree(leader.pid, lambda: leader.returncode is None, token,
                                   detach_mark="memory")
            watch.add(tree)
            end = time.monotonic() + 30
            while not forked.exists():
                assert time.monotonic() < end, "the leader never forked"
                await _loop.sleep(0.01)
            while len(tree.members) < 2:  # the premise: a scan caught the child pre-exec
                assert time.monotonic() < end, tree.members
                await watch.refresh(_loop.current_time() + 5)
            go.write_text("go")
            while not execd.exists():
                assert time.monotonic() < end, "the child never exec'd"
                await _loop.sleep(0.01)
            child = int(execd.read_text())
            leader.wait(timeout=30)  # the stage's leader ended: its leftovers are swept
            now = _loop.current_time()
            if await watch.has_leftovers(tree, now + 5):
                await watch.kill_stage(tree, 0.2, _loop.current_time() + 5)
            return alive_and_ours(child)

        assert _loop.run(body), "the leftover sweep killed the stage's deliberate detach"
    finally:
        if leader.poll() is None:
            leader.kill()
            leader.wait()
        if child and alive_and_ours(child):
            os.kill(child, signal.SIGKILL)  # the process this test started, by its pid
