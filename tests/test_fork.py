"""Built-in stages forked from the supervising process (issue 26): no new interpreter, and
still a bounded stage in its own session and process group, under the same watchdog, kill,
caps, leftover sweep and banner as a spawned one.

The hostile programs here are made built-ins of a digest run the way the CLI runs one
(tests/resources/forked_digest.py: subreaper, the first stages started before the event loop),
in a fresh process, so that the fork happens in a process with one thread. Each kill test runs
idle and under a synthetic CPU load (``cpu_load``).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import pytest

from helpers import alive_and_ours, run_cli

DRIVER = Path(__file__).resolve().parent / "resources" / "forked_digest.py"


def forked_digest(tmp_path: Path, programs: dict[str, str], stages: list[dict[str, Any]], *,
                  budget: float = 30, grace: float = 0.3, abandon: bool = False,
                  env: dict[str, str] | None = None) -> dict[str, Any]:
    """Run ``stages`` (``builtin`` names from ``programs``: name -> program source) through the
    driver; its JSON line."""
    folder = tmp_path / "builtins"
    folder.mkdir(exist_ok=True)
    for name, source in programs.items():
        (folder / f"{name}.py").write_text(textwrap.dedent(source))
    project = tmp_path / "project"
    project.mkdir(exist_ok=True)
    config = {"budget": budget, "grace": grace, "stages": stages}
    argv = [sys.executable, str(DRIVER), str(folder), str(project), json.dumps(config)]
    proc = subprocess.run([*argv, *(["--abandon"] if abandon else [])], capture_output=True,
                          timeout=budget + 30, env={**os.environ, **(env or {})})
    assert proc.returncode == 0, proc.stderr.decode()[-3000:]
    got: dict[str, Any] = json.loads(proc.stdout.decode().splitlines()[-1])
    return got


def stage(result: dict[str, Any], name: str) -> dict[str, Any]:
    found: dict[str, Any] = next(s for s in result["result"]["stages"] if s["name"] == name)
    return found


def pids_in(path: Path) -> list[int]:
    return [int(x) for x in path.read_text().split()] if path.exists() else []


PROBE = """
    import json, os, sys
    fds = []
    for fd in range(3, 64):
        try:
            os.fstat(fd)
            fds.append(fd)
        except OSError:
            pass
    print(json.dumps({
        "pid": os.getpid(), "pgid": os.getpgid(0), "sid": os.getsid(0), "cwd": os.getcwd(),
        "fds": fds, "argv": sys.argv, "path": sys.path, "stdin": sys.stdin.read(),
        "stderr_is_stdout": os.fstat(1).st_ino == os.fstat(2).st_ino,
        "name": os.environ.get("SUPERVISE_STAGE_NAME"),
        "token": bool(os.environ.get("SUPERVISE_STAGE_TOKEN")),
        "unbuffered": os.environ.get("PYTHONUNBUFFERED"),
        "git_dir": os.environ.get("GIT_DIR"), "main": __name__,
        "inherited": "supervisor.engine._launch" in sys.modules,  # a fork, not an interpreter
    }))
    print("to the log", file=sys.stderr)
    sys.exit(3)
"""


def test_a_forked_builtin_is_its_own_session_with_only_its_environment(tmp_path: Path) -> None:
    """The forked child is what ``[python, -I, -u, program]`` would be: session and group
    leader, the stage's working directory, argv, an isolated ``sys.path``, environment
    (GIT_DIR stripped), stdin at EOF, stderr on its own pipe (the log), no descriptor of the
    supervisor's, its exit status."""
    (tmp_path / "project" / "sub").mkdir(parents=True)
    got = forked_digest(tmp_path, {"probe": PROBE},
                        [{"name": "probe", "builtin": "probe", "cwd": "sub"}],
                        env={"GIT_DIR": "/nonexistent", "PYTHONPATH": str(tmp_path / "shadow")})
    assert got["forked"] == {"probe": True}
    entry = stage(got, "probe")
    assert (entry["status"], entry["exit_code"]) == ("failed", 3)
    seen = json.loads(entry["output"].splitlines()[0])
    assert seen["pid"] == seen["pgid"] == seen["sid"] == got["leaders"]["probe"]
    assert Path(seen["cwd"]) == (tmp_path / "project" / "sub").resolve()
    program = str(tmp_path / "builtins" / "probe.py")
    assert seen["argv"] == [program]
    # sys.path as `python -I` has it: neither the program's folder nor the caller's PYTHONPATH
    assert not {str(tmp_path / "builtins"), str(tmp_path / "shadow")} & set(seen["path"])
    assert seen["fds"] == [] and seen["stdin"] == "" and not seen["stderr_is_stdout"]
    assert (seen["name"], seen["token"], seen["unbuffered"]) == ("probe", True, "1")
    assert seen["git_dir"] is None and seen["main"] == "__main__" and seen["inherited"]
    assert "its stderr ends: 'to the log'" in entry["output"]


def test_an_uncaught_exception_in_a_forked_builtin_is_status_1(tmp_path: Path) -> None:
    got = forked_digest(tmp_path, {"boom": "raise ValueError('boom')\n"},
                        [{"name": "boom", "builtin": "boom"}])
    entry = stage(got, "boom")
    assert got["forked"] == {"boom": True}
    assert (entry["status"], entry["exit_code"]) == ("failed", 1)
    assert "ValueError: boom" in entry["output"]


HOLDER = """
    import os, signal, subprocess, sys, time
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    here = os.path.dirname(os.path.abspath(__file__))
    kids = [subprocess.Popen(["sleep", "60"]),
            subprocess.Popen(["sleep", "61"], start_new_session=True)]  # an escapee
    with open(os.path.join(here, "pids"), "w") as f:
        f.write(" ".join(str(k.pid) for k in kids))
    print("started", flush=True)
    time.sleep(60)
"""


def test_a_forked_builtin_is_killed_whole_at_its_timeout(tmp_path: Path, cpu_load: str) -> None:
    got = forked_digest(tmp_path, {"holder": HOLDER},
                        [{"name": "holder", "builtin": "holder", "timeout": 4}])
    entry = stage(got, "holder")
    pids = pids_in(tmp_path / "builtins" / "pids")
    assert got["forked"] == {"holder": True} and len(pids) == 2, got  # the premise
    assert entry["status"] == "timed_out", entry
    assert entry["output"].startswith("started\n")
    assert not alive_and_ours(got["leaders"]["holder"])
    assert not [p for p in pids if alive_and_ours(p)]


BOMB = """
    import os, sys, time
    here = os.path.dirname(os.path.abspath(__file__))
    with open(os.path.join(here, "pids"), "w") as f:
        for _ in range(40):
            pid = os.fork()
            if pid == 0:
                time.sleep(60)
                os._exit(0)
            f.write(f"{pid} ")
            f.flush()
    print("forked", flush=True)
    time.sleep(60)
"""


def test_a_forked_builtin_over_max_tasks_is_killed_whole(tmp_path: Path, cpu_load: str) -> None:
    got = forked_digest(tmp_path, {"bomb": BOMB},
                        [{"name": "bomb", "builtin": "bomb", "max_tasks": 10}],
                        env={"SUPERVISE_CGROUP_ROOT": "off"})
    entry = stage(got, "bomb")
    assert got["forked"] == {"bomb": True}
    assert entry["status"] == "killed", entry
    assert "went over max_tasks = 10" in entry["output"]
    assert got["result"]["reason"] is None or got["result"]["reason"] == "stage"
    assert not [p for p in pids_in(tmp_path / "builtins" / "pids") if alive_and_ours(p)]


def test_the_budget_banner_names_a_forked_builtin(tmp_path: Path, cpu_load: str) -> None:
    slow = "import sys, time\nsys.stdout.write('partial')\nsys.stdout.flush()\ntime.sleep(60)\n"
    got = forked_digest(tmp_path, {"slow": slow}, [{"name": "slow", "builtin": "slow"}],
                        budget=4)
    entry = stage(got, "slow")
    assert got["forked"] == {"slow": True}
    assert entry["status"] == "killed" and got["result"]["truncated"]
    assert got["result"]["reason"] == "budget"
    assert entry["output"].startswith("partial")
    assert got["result"]["seconds"] <= 4 + 0.25 + 0.5  # the engine's own clock, a bound
    assert not alive_and_ours(got["leaders"]["slow"])


LEAVER = """
    import os, subprocess
    here = os.path.dirname(os.path.abspath(__file__))
    kid = subprocess.Popen(["sleep", "30"])
    with open(os.path.join(here, "pids"), "w") as f:
        f.write(str(kid.pid))
    print("done")
"""


def test_what_a_forked_builtin_leaves_behind_is_swept(tmp_path: Path, cpu_load: str) -> None:
    got = forked_digest(tmp_path, {"leaver": LEAVER}, [{"name": "leaver", "builtin": "leaver"}])
    entry = stage(got, "leaver")
    pids = pids_in(tmp_path / "builtins" / "pids")
    assert got["forked"] == {"leaver": True} and pids
    assert (entry["status"], entry["output"]) == ("ok", "done\n")
    assert not alive_and_ours(pids[0])


def test_stages_the_engine_never_took_are_killed_and_reaped(tmp_path: Path) -> None:
    """A signal or an error between the start of the first stages and the engine's event loop
    (:meth:`Prestart.abandon` in the CLI's ``finally``): nothing keeps running."""
    sleeper = "import time\ntime.sleep(60)\n"
    got = forked_digest(tmp_path, {"sleeper": sleeper},
                        [{"name": "sleeper", "builtin": "sleeper"}], abandon=True)
    assert got["forked"] == {"sleeper": True}
    assert not alive_and_ours(got["leaders"]["sleeper"])


def test_a_sigkilled_supervisor_leaves_no_prestarted_stage(tmp_path: Path, cpu_load: str) -> None:
    """SIGKILL while the first stages run and the engine is not yet loaded (the hook's
    harness at its timeout): the guardian, started before the first fork, kills them."""
    import signal

    holder = "import signal, time\nsignal.signal(signal.SIGTERM, signal.SIG_IGN)\ntime.sleep(300)\n"
    folder = tmp_path / "builtins"
    folder.mkdir()
    (folder / "holder.py").write_text(holder)
    project = tmp_path / "project"
    project.mkdir()
    config = {"budget": 60, "stages": [{"name": "holder", "builtin": "holder"}]}
    proc = subprocess.Popen([sys.executable, str(DRIVER), str(folder), str(project),
                             json.dumps(config), "--hang"], stdout=subprocess.PIPE)
    try:
        assert proc.stdout is not None
        got = json.loads(proc.stdout.readline())
        assert got["forked"] == {"holder": True}
        leader = got["leaders"]["holder"]
        assert alive_and_ours(leader)  # the premise: it runs, and no engine is there
    finally:
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
        if proc.stdout is not None:
            proc.stdout.close()
    end = time.monotonic() + 5.0  # a lower bound for the guardian's kill on a loaded host
    while alive_and_ours(leader) and time.monotonic() < end:
        time.sleep(0.02)
    assert not alive_and_ours(leader)


def _git_logging_parents(tmp_path: Path) -> tuple[dict[str, str], Path]:
    """An environment whose ``git`` is a stand-in that appends its parent's command line and
    its own arguments (``PARENT <- ARGS``) to the returned log file, then runs the real git."""
    import shutil

    real = shutil.which("git")
    assert real is not None
    fake = tmp_path / "bin"
    fake.mkdir()
    log = tmp_path / "parents.log"
    (fake / "git").write_text(f"#!/bin/sh\ntr '\\000' ' ' < /proc/$PPID/cmdline >> '{log}'\n"
                              f"echo \" <- $*\" >> '{log}'\nexec '{real}' \"$@\"\n")
    (fake / "git").chmod(0o755)
    return {"PATH": f"{fake}{os.pathsep}{os.environ['PATH']}",
            "SUPERVISE_STATE_DIR": str(tmp_path / "state")}, log


def test_the_cli_starts_no_interpreter_for_a_builtin_stage(git_repo: Path, tmp_path: Path) -> None:
    """`supervise digest` and a SessionStart hook run the default digest's built-ins
    (instructions, repo) as forks of the supervising process: the git they start (a stand-in
    on PATH that logs its parent's command line) has the supervisor's command line as its
    parent's, never a ``python -I -u .../__main__.py``. With ``SUPERVISE_FORK_STAGES=0`` each
    built-in is an interpreter again (the check can fail)."""
    (git_repo / "AGENTS.md").write_text("# Rules\n")
    env, log = _git_logging_parents(tmp_path)
    payload = json.dumps({"session_id": "s", "cwd": str(git_repo), "source": "startup",
                          "hook_event_name": "SessionStart"}).encode()
    for fork in ("1", "0"):
        log.unlink(missing_ok=True)
        digest = run_cli("digest", cwd=git_repo, env={**env, "SUPERVISE_FORK_STAGES": fork})
        hook = run_cli("hook", "claude", cwd=git_repo, input=payload,
                       env={**env, "SUPERVISE_FORK_STAGES": fork})
        assert b"## Repository" in digest.stdout and b"## Instructions" in digest.stdout
        assert b"## Repository" in hook.stdout
        parents = [line.split(" <- ")[0] for line in log.read_text().splitlines()
                   if line.split(" <- ")[0].strip()]  # a parent that has exited shows none
        assert parents  # the premise: the stages ran git
        interpreters = [line for line in parents if "__main__.py" in line]
        if fork == "1":
            assert interpreters == [] and all("-m supervisor" in p for p in parents), parents
        else:
            assert interpreters, parents


def test_a_builtin_started_after_its_needs_is_a_fork_too(git_repo: Path, tmp_path: Path) -> None:
    """A built-in the engine starts later (after a ``needs``, here ``repo`` after
    ``instructions``) is forked from the supervising process as the first ones are: its git's
    parent is the supervisor, never a ``python -I -u .../__main__.py`` (it was a new
    interpreter). The git stand-in logs its parent's command line."""
    (git_repo / "AGENTS.md").write_text("# Rules\n")
    (git_repo / "supervise.toml").write_text(
        'budget = 30\n[[stages]]\nname = "instructions"\nbuiltin = "instructions"\n'
        '[[stages]]\nname = "repo"\nbuiltin = "repo"\nneeds = ["instructions"]\n')
    env, log = _git_logging_parents(tmp_path)
    digest = run_cli("digest", cwd=git_repo, env=env)
    assert b"## Repository" in digest.stdout and b"## Instructions" in digest.stdout, digest
    parents = [line for line in log.read_text().splitlines() if line.strip()]
    assert any("status" in line for line in parents), parents  # the premise: repo ran git
    assert [line for line in parents if "__main__.py" in line] == [], parents
