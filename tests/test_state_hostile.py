"""A hostile state dir (issue 11, items 1-4 and 9): planted links, FIFOs, folders, deep and huge
files in every state file the product knows; deferred results lost to a full disk or a kill."""

from __future__ import annotations

import json
import os
import resource
import signal
import sys
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psutil
import pytest

from helpers import run_cli, supervise_cmd

DEEP = "[" * 60_000


def write_config(project: Path, body: str) -> None:
    (project / "supervise.toml").write_text(body)


def stage(name: str, run: str, **extra: object) -> str:
    lines = ["[[stages]]", f"name = {json.dumps(name)}", f"run = {json.dumps(run)}"]
    lines += [f"{k} = {json.dumps(v)}" for k, v in extra.items()]
    return "\n".join(lines) + "\n"


def wait_for(predicate: Callable[[], object], seconds: float = 20.0) -> None:
    deadline = time.monotonic() + seconds
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError("condition not reached")
        time.sleep(0.02)


def plant(path: Path, kind: str, victim: Path) -> None:
    """Put a hostile ``kind`` at ``path`` (its folder is created)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    if kind == "symlink":
        path.symlink_to(victim)
    elif kind == "fifo":
        os.mkfifo(path)
    elif kind == "directory":
        path.mkdir()
        (path / "x").write_text("x")
    elif kind == "deep":
        path.write_text(DEEP)
    elif kind == "oversized":
        with open(path, "wb") as f:  # sparse 3 GiB: costs no disk, would cost 3 GiB to read
            f.truncate(3 << 30)
    else:  # pragma: no cover
        raise AssertionError(kind)


KINDS = ("symlink", "fifo", "directory", "deep", "oversized")


@pytest.mark.parametrize("kind", KINDS)
def test_prompt_hook_is_bounded_by_a_planted_result(tmp_path: Path, kind: str) -> None:
    """Issue 11 item 2 and 4: a FIFO result blocked the prompt hook forever; a 3 GiB one took
    6.3 GB of RSS. Now each is set aside, named once, and the hook exits 0 at once."""
    project = tmp_path / "p"
    project.mkdir()
    (project / "supervise.toml").write_text('[[stages]]\nname = "net"\nrun = ["true"]\n'
                                            'deferred = true\n')  # read, not refused unread
    victim = tmp_path / "victim.json"
    victim.write_text('{"name": "net", "output": "VICTIM"}')
    plant(project / ".supervise" / "deferred" / "net" / "result-1-x.json", kind, victim)
    proc = subprocess.run(supervise_cmd("hook", "claude", "--event", "prompt"), cwd=project,
                          stdin=subprocess.DEVNULL, capture_output=True, timeout=30)
    assert proc.returncode == 0
    assert b"VICTIM" not in proc.stdout and b"Traceback" not in proc.stderr
    assert proc.stderr.decode().count("result-1-x.json was ") == 1, proc.stderr
    again = subprocess.run(supervise_cmd("hook", "claude", "--event", "prompt"), cwd=project,
                           stdin=subprocess.DEVNULL, capture_output=True, timeout=30)
    assert again.returncode == 0 and b"result-1-x" not in again.stderr  # named once
    assert victim.read_text() == '{"name": "net", "output": "VICTIM"}'


@pytest.mark.parametrize("kind", ["symlink", "fifo", "deep"])
def test_planted_deferred_folder_never_receives_a_result(tmp_path: Path, kind: str) -> None:
    """`.supervise/deferred -> elsewhere` (or a FIFO, a file there): the runner's records are
    never written through it; a fresh folder replaces it."""
    project = tmp_path / "p"
    project.mkdir()
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    plant(project / ".supervise" / "deferred", kind, elsewhere)
    write_config(project, stage("net", "echo reachable", deferred=True, timeout=10))
    assert run_cli("digest", "--session-start", cwd=project).returncode == 0
    results = project / ".supervise" / "deferred" / "net"
    wait_for(lambda: list(results.glob("result-*.json")))
    wait_for(lambda: not (results / "running.json").exists())
    assert list(elsewhere.iterdir()) == []
    assert "reachable" in run_cli("digest", "--session-start", cwd=project).stdout.decode()
    wait_for(lambda: not (results / "running.json").exists())


def _full_disk() -> None:  # preexec_fn: any file past 64 KiB fails with EFBIG ("disk full")
    resource.setrlimit(resource.RLIMIT_FSIZE, (64 * 1024, 64 * 1024))
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)


def test_result_lost_to_a_full_disk_is_reported_by_the_next_digest(tmp_path: Path) -> None:
    """Issue 11 item 9: the digest promised "delivered once, later", the runner could not
    write its result, and nothing ever said so."""
    write_config(tmp_path, stage("net", "python3 -c \"print('x' * 200000)\"", deferred=True,
                                 timeout=10))
    first = subprocess.run(supervise_cmd("digest", "--session-start"), cwd=tmp_path, capture_output=True,
                           timeout=30, preexec_fn=_full_disk)
    assert "delivered once, later" in first.stdout.decode()
    folder = tmp_path / ".supervise" / "deferred" / "net"
    wait_for(lambda: list(folder.glob("lost-*.json")))
    assert not list(folder.glob("result-*.json"))
    second = run_cli("digest", "--session-start", cwd=tmp_path).stdout.decode()
    assert second.count("LOST: deferred stage 'net'") == 1, second
    assert "File too large" in second and "NOT delivered" in second
    wait_for(lambda: list(folder.glob("result-*.json")))
    third = run_cli("digest", "--session-start", cwd=tmp_path).stdout.decode()
    assert "LOST" not in third and third.count("xxxx") >= 1  # the next run's result arrives
    wait_for(lambda: not (folder / "running.json").exists())


def test_result_of_a_killed_runner_is_reported_by_the_next_digest(tmp_path: Path) -> None:
    gate = tmp_path / "gate"
    write_config(tmp_path, stage("net", f"sh -c 'while [ ! -e {gate} ]; do sleep 0.05; done; "
                                        "echo done'", deferred=True, timeout=30))
    assert run_cli("digest", "--session-start", cwd=tmp_path).returncode == 0
    folder = tmp_path / ".supervise" / "deferred" / "net"
    wait_for(lambda: (folder / "running.json").exists())
    runner = psutil.Process(json.loads((folder / "running.json").read_text())["pid"])
    wait_for(lambda: runner.children(recursive=True))
    for proc in [*runner.children(recursive=True), runner]:  # all started by this test
        try:
            proc.kill()
        except psutil.NoSuchProcess:
            pass
    psutil.wait_procs([runner], timeout=10)
    second = run_cli("digest", "--session-start", cwd=tmp_path).stdout.decode()
    assert second.count("LOST: deferred stage 'net'") == 1, second
    assert "runner was killed" in second
    gate.touch()
    wait_for(lambda: list(folder.glob("result-*.json")))
    third = run_cli("digest", "--session-start", cwd=tmp_path).stdout.decode()
    assert "LOST" not in third and "done" in third
    wait_for(lambda: not (folder / "running.json").exists())


# -- the walk: every state file the product knows ---------------------------------------------
SESSION = "s1"
NESTED_KEY = __import__("hashlib").sha256(SESSION.encode()).hexdigest()[:32]
REFRESH_KEY = __import__("supervisor.session._refresh", fromlist=["session_key"]).session_key(SESSION)
STATE_FOLDERS = ("deferred", "deferred/net", "nested", "memory", "logs", "fastpath", "digests",
                 "refresh", "starts", "staged", "rules")
"""Every folder of the state dir (relative)."""
STATE_FILES = (
    "lock.json", "complete.json", "lock.flock", "last-digest.json", "sessions.json",
    "exposure.jsonl", "exposure.jsonl.1",
    "deferred/net/.lock", "deferred/net/running.json", "deferred/net/result-1-x.json",
    "deferred/net/delivered-1-x.json", "deferred/net/lost-1-x.json",
    f"nested/{NESTED_KEY}.json", f"nested/{NESTED_KEY}.lock",
    "memory/handoff.delivered", "memory/handoff.lock", "memory/consolidate.lock",
    "logs/memory.log", "logs/consolidation.log", "logs/hello.log",
    "fastpath/watch", "fastpath/wake-x", "digests/digest-000000000000.txt",
    "logs/hello.count.json", "logs/.count.flock", f"refresh/{REFRESH_KEY}.json", "refresh/.flock",
    "starts/0123456789abcdef0123456789abcdef.json", "deferred/net/reserved-1-1-x.json",
    "staged/x", "rules/claude.json",
)
"""Every file of the state dir (relative; ``off`` is left out: its presence is the switch)."""
WALK_CONFIG = """budget = 30
inline_cap = { claude = 2000 }
[[stages]]
name = "hello"
run = "python3 -c \\"print('hello ' * 800)\\""
[[stages]]
name = "net"
run = "echo reachable"
deferred = true
timeout = 10
[[stages]]
name = "memory"
builtin = "memory"
timeout = 10
options = { consolidate = ["true"] }
"""


def _walk_project(tmp_path: Path) -> tuple[Path, Path, Path]:
    """A git project with a memory store (a handoff note, a past staging day) and every stage
    kind; returns (project, victim file, elsewhere folder)."""
    import datetime as dt

    project = tmp_path / "repo"
    project.mkdir()
    subprocess.run(["git", "init", "-q", str(project)], check=True, timeout=30)
    (project / "supervise.toml").write_text(WALK_CONFIG)
    store = project / ".remember"
    store.mkdir()
    (store / "remember.md").write_text("handoff note\n")
    past = (dt.date.today() - dt.timedelta(days=3)).isoformat()
    (store / f"today-{past}.md").write_text("## 10:00 | main\nold work\n")
    sub = project / "sub"
    sub.mkdir()
    (sub / "AGENTS.md").write_text("nested rules\n")
    rules = project / ".cursor" / "rules"  # a path-scoped rule: the post-tool hook reads
    rules.mkdir(parents=True)  # its index (rules/claude.json)
    (rules / "py.mdc").write_text("---\nglobs: '**/*.py'\n---\nscoped rule\n")
    victim = tmp_path / "victim.txt"
    victim.write_text("PRECIOUS")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    for i in range(10):  # a digests/ link used to write here and prune all but 8 of these
        (elsewhere / f"digest-{i:012x}.txt").write_text("someone else's file\n")
    return project, victim, elsewhere


def _snapshot(root: Path) -> dict[str, tuple[int, int]]:
    """Every path under ``root`` (links not followed) with its size and mtime."""
    out = {}
    for dirpath, dirnames, filenames in os.walk(root, followlinks=False):
        for name in dirnames + filenames:
            path = Path(dirpath) / name
            st = path.lstat()
            out[str(path.relative_to(root))] = (st.st_size, st.st_mtime_ns)
    return out


def _verbs(project: Path) -> list[tuple[str, list[str], bytes]]:
    """(label, argv, stdin) of every verb and hook that touches the state dir."""
    def payload(source: str, **extra: object) -> bytes:
        return json.dumps({"session_id": SESSION, "cwd": str(project), "source": source,
                           "hook_event_name": "SessionStart", **extra}).encode()

    post_tool = payload("", hook_event_name="PostToolUse", tool_name="Read",
                        tool_input={"file_path": str(project / "sub" / "x.py")})
    return [
        ("hook startup", ["hook", "claude"], payload("startup")),
        ("hook compact", ["hook", "claude"], payload("compact")),
        ("hook resume", ["hook", "claude"], payload("resume")),
        ("hook prompt", ["hook", "claude", "--event", "prompt"], payload("")),
        ("hook post-tool", ["hook", "claude", "--event", "post-tool"], post_tool),
        ("digest", ["digest"], b""),
        ("status", ["status"], b""),
        ("nudge", ["nudge", "claude"], b""),
        ("doctor", ["doctor", "claude"], b""),
    ]


DOCUMENTED_EXIT = {"status": (0, 1), "doctor": (0, 1), "digest": (0,)}
"""Exit codes each verb may give (docs/session-protocol.md §11); hooks always exit 0."""


def _settle(keep: int = 0, timeout: float = 30.0) -> None:
    """Wait until the detached runners and consolidations this test started have ended (all
    processes carrying the test's token but ``keep``, the fake harness)."""
    token = os.environ["WATCHKEEPER_TEST_TOKEN"]  # set for each test by tests/conftest.py

    def carriers() -> list[int]:
        found = []
        for proc in psutil.process_iter(["pid"]):
            if proc.pid in (os.getpid(), keep):
                continue
            try:
                if (proc.status() != psutil.STATUS_ZOMBIE
                        and proc.environ().get("WATCHKEEPER_TEST_TOKEN") == token):
                    found.append(proc.pid)
            except (psutil.Error, OSError):
                continue
        return found

    wait_for(lambda: not carriers(), timeout)


def _outside(tmp_path: Path) -> dict[str, tuple[int, int]]:
    """Everything under ``tmp_path`` but the project and the fake harness's own folder."""
    return {k: v for k, v in _snapshot(tmp_path).items()
            if k.split("/")[0] not in ("repo", "harnesses")}


def _run_walk(project: Path, victim: Path, elsewhere: Path, tmp_path: Path) -> list[str]:
    from fake_harness import FakeHarness

    harness = FakeHarness(tmp_path / "harnesses", "claude")
    outside_before = _outside(tmp_path)
    stderr_lines = []
    try:
        for label, argv, stdin in _verbs(project):
            if argv[0] == "hook":  # below a live "claude" process: the lock is taken
                proc: Any = harness.run(argv, cwd=project, stdin=stdin)
            else:
                proc = subprocess.run(supervise_cmd(*argv), cwd=project, input=stdin,
                                      capture_output=True, timeout=60)
            _check_run(label, argv, proc)
            stderr_lines += proc.stderr.decode("utf-8", "replace").splitlines()
            _settle(keep=harness.proc.pid)
    finally:
        harness.close()
    assert victim.read_text() == "PRECIOUS"
    assert len(list(elsewhere.iterdir())) == 10
    assert _outside(tmp_path) == outside_before  # nothing written or deleted outside the project
    return stderr_lines


def _check_run(label: str, argv: list[str], proc: Any) -> None:
    allowed = DOCUMENTED_EXIT.get(argv[0], (0,))
    assert proc.returncode in allowed, (label, proc.returncode, proc.stderr)
    assert b"Traceback" not in proc.stderr and b"internal error" not in proc.stdout, (label, proc.stderr)
    both = proc.stderr + proc.stdout
    assert b"RecursionError" not in both or b"set aside" in both, (label, both)


@pytest.mark.parametrize("kind", KINDS)
def test_walk_every_state_file_planted(tmp_path: Path, kind: str) -> None:
    """Issue 11: each state file replaced by a link, FIFO, folder, 60,000-deep JSON or 3 GiB
    file; every verb and hook stays bounded (each run under 60 s, a FIFO never waited on),
    exits as documented, never writes through a link and never writes outside the project."""
    project, victim, elsewhere = _walk_project(tmp_path)
    state = project / ".supervise"
    for folder in STATE_FOLDERS:
        (state / folder).mkdir(parents=True, exist_ok=True)
    for rel in STATE_FILES:
        plant(state / rel, kind, victim)
    _run_walk(project, victim, elsewhere, tmp_path)
    # the paths of the examples were taken: a consolidation was triggered (its lock
    # and log replaced by regular files), a digest over the inline cap was saved
    for rel in ("memory/consolidate.lock", "logs/consolidation.log"):
        assert (state / rel).is_file() and not (state / rel).is_symlink(), rel
    assert list((state / "digests").glob("digest-*.txt"))
    for rel in ("lock.json", "last-digest.json", "exposure.jsonl"):
        path = state / rel  # written by the runs: ours now, the plant set aside beside it
        assert path.is_file() and not path.is_symlink(), rel
        # lock.json is read before it is written, so the plant was set aside; a log only when
        # it was no regular file (an oversized or garbled log is rotated or skipped line-wise)
        if rel == "lock.json" or (rel == "exposure.jsonl" and kind in ("symlink", "fifo", "directory")):
            assert os.path.lexists(state / (rel + ".corrupt")), rel


@pytest.mark.parametrize("kind", ["symlink", "fifo", "deep"])
def test_walk_every_state_folder_planted(tmp_path: Path, kind: str) -> None:
    """The same with each folder of the state dir replaced (by a link to another folder, a
    FIFO, or a file)."""
    project, victim, elsewhere = _walk_project(tmp_path)
    state = project / ".supervise"
    state.mkdir()
    for folder in STATE_FOLDERS:
        if folder == "deferred/net":
            continue  # inside a planted deferred/
        plant(state / folder, kind, elsewhere)
    _run_walk(project, victim, elsewhere, tmp_path)


def test_symlinked_state_dir_as_a_whole_is_never_written(tmp_path: Path) -> None:
    """`.supervise -> elsewhere`: no verb or hook writes there (stages included), and a digest
    names it once."""
    project, victim, elsewhere = _walk_project(tmp_path)
    (project / ".supervise").symlink_to(elsewhere)
    _run_walk(project, victim, elsewhere, tmp_path)
    start = subprocess.run(supervise_cmd("hook", "claude"), cwd=project, capture_output=True,
                           input=json.dumps({"session_id": SESSION, "cwd": str(project),
                                             "source": "startup"}).encode(), timeout=60)
    _settle()
    text = json.loads(start.stdout)["hookSpecificOutput"]["additionalContext"]
    assert text.count("is a symlink; refusing to follow it") == 1, text
    assert sorted(p.name for p in elsewhere.iterdir()) == [f"digest-{i:012x}.txt" for i in range(10)]


@pytest.mark.parametrize("kind", ["symlink", "fifo", "directory", "oversized", "linked-dir"])
def test_sh_fast_path_never_opens_a_planted_watch_list(tmp_path: Path, kind: str) -> None:
    """The installed prompt hook starts in POSIX sh (supervisor/hook-fast.sh), which reads
    `fastpath/watch` itself: a FIFO there blocked it forever, a link or 3 GiB file was read
    whole. Now it hands over to Python (which ignores the list) and exits 0 at once."""
    from supervisor.commands.install import FAST_PATH, SHELL

    project = tmp_path / "p"
    (project / ".git").mkdir(parents=True)
    victim = tmp_path / "victim.txt"
    victim.write_text(str(victim) + "\n")
    fastpath = project / ".supervise" / "fastpath"
    if kind == "linked-dir":
        elsewhere = tmp_path / "elsewhere"
        elsewhere.mkdir()
        (elsewhere / "watch").write_text(str(victim) + "\n")
        fastpath.parent.mkdir(parents=True)
        fastpath.symlink_to(elsewhere)
    else:
        plant(fastpath / "watch", kind, victim)
    payload = json.dumps({"session_id": "s", "cwd": str(project),  # compact, as harnesses send
                          "hook_event_name": "UserPromptSubmit", "prompt": "hi"},
                         separators=(",", ":")).encode()
    env = {k: v for k, v in os.environ.items() if k != "SUPERVISE_STATE_DIR"}
    proc = subprocess.run([SHELL, str(FAST_PATH), sys.executable, "-P", "-m", "supervisor",
                           "hook", "claude", "--event", "prompt"], input=payload, cwd=project,
                          env=env, capture_output=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert b"Traceback" not in proc.stderr
    assert victim.read_text() == str(victim) + "\n"
