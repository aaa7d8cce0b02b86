"""A built-in stage may start a process on purpose to outlive it (the memory stage's
consolidation wrapper); nothing else may detach from the watchdog that way.

The mark is ``SUPERVISE_DETACHED_FROM=<stage name>`` in a process that left the stage's session
(``supervisor.engine._tree.DETACH_VAR``). Real processes; the pid file tells what survived.
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

DETACH_VAR = "SUPERVISE_DETACHED_FROM"

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


def test_the_stage_constant_matches_the_engine() -> None:
    from supervisor.engine._tree import DETACH_VAR as ENGINE_VAR

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "stages"))
    try:
        from memory import consolidate
    finally:
        sys.path.pop(0)
    assert consolidate.DETACHED_MARK == ENGINE_VAR == DETACH_VAR


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
