"""The per-event hooks' POSIX sh fast path (``supervisor/hook-fast.sh``).

Every "nothing to do" answer of the fast path is checked against the Python path's answer on
the same inputs (the same payload, the same files): when the shim did not start Python, the
Python hook run on its own must print nothing too. Runs are real ``/bin/sh`` processes without
``PATH``, in folders whose names hold spaces.
"""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

from supervisor.commands.install import FAST_PATH, SHELL, hook_command
from supervisor.adapters import ADAPTERS
from supervisor._harnesses import BY_NAME

HARNESSES = ("claude", "codex", "gemini", "qwen")


@dataclass
class Answer:
    ran_python: bool
    stdout: bytes
    stderr: bytes


@pytest.fixture
def project(tmp_path: Path) -> Path:
    root = tmp_path / "my project"
    (root / "src dir" / "deep").mkdir(parents=True)
    subprocess.run(["git", "init", "-q", str(root)], check=True)
    (root / "src dir" / "deep" / "file.py").write_text("x = 1\n")
    return root


@pytest.fixture
def interpreter(tmp_path: Path) -> tuple[Path, Path]:
    """A wrapper 'python' (in a folder with a space) that records each start, then runs the
    test interpreter; and the record file."""
    folder = tmp_path / "py dir"
    folder.mkdir()
    record = folder / "starts"
    wrapper = folder / "python"
    wrapper.write_text(f'#!/bin/sh\necho started >> "{record}"\nexec "{sys.executable}" "$@"\n')
    wrapper.chmod(0o755)
    return wrapper, record


def env_without_path(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("PATH", "SUPERVISE_STATE_DIR")}
    env.update(extra)
    return env


def registered(wrapper: Path, harness: str, event: str) -> list[str]:
    """The per-event command ``supervise install`` registers for ``harness`` (its flags from the
    harness table), with ``wrapper`` as the interpreter; a bridge, which registers no hook
    command, gets the fast path's plain form."""
    if harness not in ADAPTERS:
        return [SHELL, str(FAST_PATH), str(wrapper), "-P", "-m", "supervisor", "hook", harness,
                "--event", event]
    return shlex.split(hook_command(ADAPTERS[harness], event, str(wrapper)))


def shim(interpreter: tuple[Path, Path], harness: str, event: str, payload: bytes,
         cwd: Path, **env: str) -> Answer:
    wrapper, record = interpreter
    record.unlink(missing_ok=True)
    argv = registered(wrapper, harness, event)
    proc = subprocess.run(argv, input=payload, capture_output=True, cwd=cwd,
                          env=env_without_path(**env), timeout=30)
    assert proc.returncode == 0, proc.stderr
    return Answer(record.exists(), proc.stdout, proc.stderr)


def python_path(harness: str, event: str, payload: bytes, cwd: Path, **env: str) -> bytes:
    proc = subprocess.run([sys.executable, "-P", "-m", "supervisor", "hook", harness, "--event",
                           event], input=payload, capture_output=True, cwd=cwd,
                          env=env_without_path(**env), timeout=30)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def compact(data: dict[str, object]) -> bytes:
    return json.dumps(data, separators=(",", ":"), ensure_ascii=False).encode()


def prompt_payload(cwd: Path, **extra: object) -> bytes:
    return compact({"session_id": "s-1", "transcript_path": "/nowhere/t.jsonl", "cwd": str(cwd),
                    "hook_event_name": "UserPromptSubmit", "prompt": "hello", **extra})


def read_payload(cwd: Path, file: str, tool: str = "Read", key: str = "file_path",
                 response: int = 200) -> bytes:
    return compact({"session_id": "s-1", "transcript_path": "/nowhere/t.jsonl", "cwd": str(cwd),
                    "hook_event_name": "PostToolUse", "tool_name": tool,
                    "tool_input": {key: file}, "tool_response": {"content": "y" * response}})


def put_result(state: Path, stage: str = "network", project: Path | None = None) -> None:
    from helpers import configure_deferred, write_result

    if not stage.startswith("."):  # a name no config can hold: never configured
        configure_deferred(project or state.parent, stage)
    write_result(state / "deferred" / stage, "1-abc",
                 {"title": stage, "status": "ok", "exit_code": 0, "seconds": 0.1,
                  "started": 1.0, "finished": 2.0, "output": "NETWORK-OK"})


def check(interpreter: tuple[Path, Path], harness: str, event: str, payload: bytes, cwd: Path,
          *, expect_python: bool, **env: str) -> Answer:
    """Run the fast path; when it answered "nothing to do", prove the Python path prints
    nothing on the same inputs; when it ran Python, its output is a valid envelope."""
    answer = shim(interpreter, harness, event, payload, cwd, **env)
    if answer.ran_python:
        if answer.stdout:
            json.loads(answer.stdout)
    else:
        assert answer.stdout == b""
        assert python_path(harness, event, payload, cwd, **env) == b"", "fast path missed a delivery"
    assert answer.ran_python == expect_python, answer.stderr
    return answer


@pytest.mark.parametrize("harness", HARNESSES)
def test_prompt_nothing_pending_skips_python(interpreter: tuple[Path, Path], project: Path,
                                             harness: str) -> None:
    check(interpreter, harness, "prompt", prompt_payload(project), project, expect_python=False)
    (project / ".supervise" / "deferred" / "network").mkdir(parents=True)
    (project / ".supervise" / "deferred" / "network" / "delivered-1.json").write_text("{}")
    check(interpreter, harness, "prompt", prompt_payload(project), project, expect_python=False)


@pytest.mark.parametrize("harness", HARNESSES)
def test_prompt_pending_result_is_delivered_once(interpreter: tuple[Path, Path], project: Path,
                                                 harness: str) -> None:
    put_result(project / ".supervise")
    first = check(interpreter, harness, "prompt", prompt_payload(project), project,
                  expect_python=True)
    assert b"NETWORK-OK" in first.stdout
    check(interpreter, harness, "prompt", prompt_payload(project), project, expect_python=False)


def test_prompt_finds_the_state_of_a_subdirectory_and_a_symlinked_cwd(
        interpreter: tuple[Path, Path], project: Path, tmp_path: Path) -> None:
    put_result(project / ".supervise", ".hidden stage")  # no configurable name: refused
    put_result(project / ".supervise")
    link = tmp_path / "link to deep"
    link.symlink_to(project / "src dir" / "deep")
    answer = check(interpreter, "claude", "prompt", prompt_payload(link), tmp_path,
                   expect_python=True)
    assert b"NETWORK-OK" in answer.stdout


def test_prompt_honours_supervise_state_dir(interpreter: tuple[Path, Path], project: Path,
                                            tmp_path: Path) -> None:
    state = tmp_path / "other state"
    check(interpreter, "claude", "prompt", prompt_payload(project), project, expect_python=False,
          SUPERVISE_STATE_DIR=str(state))
    put_result(state, project=project)
    answer = check(interpreter, "claude", "prompt", prompt_payload(project), project,
                   expect_python=True, SUPERVISE_STATE_DIR=str(state))
    assert b"NETWORK-OK" in answer.stdout
    check(interpreter, "claude", "prompt", prompt_payload(project), project, expect_python=True,
          SUPERVISE_STATE_DIR="relative/state")


def settle(path: Path) -> None:
    """Wait until ``path``'s ctime (which only the clock sets) is over the watch list's slack
    in the past, so a watch list written next counts it as unchanged."""
    from supervisor.session._fastpath import MTIME_SLACK

    import time

    time.sleep(max(0.0, os.stat(path).st_ctime + MTIME_SLACK + 0.05 - time.time()))


def test_prompt_wake_and_watch_files(interpreter: tuple[Path, Path], project: Path) -> None:
    from supervisor.session._fastpath import clear_wake, set_watch, wake

    state = project / ".supervise"
    rules = project / "AGENTS.md"
    rules.write_text("rules\n")
    os.utime(rules, (1.0, 1.0))
    settle(rules)
    set_watch(state, [rules])
    check(interpreter, "claude", "prompt", prompt_payload(project), project, expect_python=False)
    os.utime(rules)  # changed after the baseline
    check(interpreter, "claude", "prompt", prompt_payload(project), project, expect_python=True)
    set_watch(state, [rules])  # changed within the slack before the baseline: Python decides
    check(interpreter, "claude", "prompt", prompt_payload(project), project, expect_python=True)
    os.utime(rules, (1.0, 1.0))  # an old mtime put back: the ctime still says "changed"
    check(interpreter, "claude", "prompt", prompt_payload(project), project, expect_python=True)
    settle(rules)
    set_watch(state, [rules])
    check(interpreter, "claude", "prompt", prompt_payload(project), project, expect_python=False)
    rules.unlink()
    check(interpreter, "claude", "prompt", prompt_payload(project), project, expect_python=True)
    set_watch(state, [])
    wake(state, "refresh")
    check(interpreter, "claude", "prompt", prompt_payload(project), project, expect_python=True)
    clear_wake(state, "refresh")
    check(interpreter, "claude", "prompt", prompt_payload(project), project, expect_python=False)


def _elsewhere(project: Path) -> str:
    """An existing folder outside ``project`` (its state dir holds nothing)."""
    folder = project.parent / "elsewhere"
    folder.mkdir(exist_ok=True)
    return str(folder)


DOUBTS: dict[str, Callable[[Path], bytes]] = {
    "not json": lambda p: b"hello",
    "spaced json": lambda p: json.dumps({"cwd": str(p), "prompt": "x"}).encode(),
    "no cwd": lambda p: compact({"session_id": "s", "prompt": "x"}),
    "escaped cwd": lambda p: json.dumps({"cwd": str(p) + "/x\"y"}, separators=(",", ":")).encode(),
    "relative cwd": lambda p: compact({"cwd": "my project"}),
    "nested cwd first": lambda p: compact({"x": {"cwd": "/"}, "cwd": str(p)}),
    "duplicate cwd": lambda p: b'{"session_id":"dup","cwd":"/","cwd":"' + str(p).encode() + b'"}',
    # the same key to Python (whose first value is this project's, a result pending there);
    # the shim's pattern would find only the second, a folder with nothing pending
    "escaped cwd key first": lambda p: (b'{"session_id":"dup","\\u0063wd":"' + str(p).encode()
                                        + b'","cwd":"' + _elsewhere(p).encode() + b'"}'),
    "missing cwd dir": lambda p: compact({"cwd": str(p / "gone")}),
    # a nested cwd naming a folder with nothing pending: taken for the top-level one, the shim
    # would answer "nothing to do" (Python finds no cwd and uses the project's)
    "nested cwd only": lambda p: compact({"session_id": "s", "x": {"cwd": _elsewhere(p)},
                                          "prompt": "x"}),
    "nested cwd as first member": lambda p: compact({"x": {"cwd": _elsewhere(p)}, "prompt": "x"}),
    "empty": lambda p: b"",
}


@pytest.mark.parametrize("case", DOUBTS)
def test_prompt_in_doubt_runs_python(interpreter: tuple[Path, Path], project: Path,
                                     case: str) -> None:
    put_result(project / ".supervise")
    answer = shim(interpreter, "claude", "prompt", DOUBTS[case](project), project)
    assert answer.ran_python, case
    if answer.stdout:
        json.loads(answer.stdout)


def test_post_tool_no_nested_file_skips_python(interpreter: tuple[Path, Path],
                                               project: Path) -> None:
    (project / "AGENTS.md").write_text("root rules, loaded by the harness itself\n")
    target = str(project / "src dir" / "deep" / "file.py")
    for tool in ("Read", "Edit", "Write", "MultiEdit"):
        check(interpreter, "claude", "post-tool", read_payload(project, target, tool), project,
              expect_python=False)
    check(interpreter, "claude", "post-tool",
          read_payload(project, str(project / "n.ipynb"), "NotebookEdit", "notebook_path"),
          project, expect_python=False)


@pytest.mark.parametrize("name", ["AGENTS.md", "AGENTS.override.md", "dangling"])
def test_post_tool_nested_file_runs_python(interpreter: tuple[Path, Path], project: Path,
                                           name: str) -> None:
    where = project / "src dir"
    if name == "dangling":
        (where / "AGENTS.md").symlink_to(where / "nowhere.md")
    else:
        (where / name).write_text("SUB-RULES\n")
    payload = read_payload(project, str(where / "deep" / "file.py"))
    answer = check(interpreter, "claude", "post-tool", payload, project, expect_python=True)
    if name != "dangling":
        assert b"SUB-RULES" in answer.stdout
        # delivered once: the next read is answered from the injected index, without Python
        # (check() proves the Python path prints nothing on it too)
        check(interpreter, "claude", "post-tool", payload, project, expect_python=False)
    else:  # never injected (retried after a while): never in the index
        check(interpreter, "claude", "post-tool", payload, project, expect_python=True)


def compact_hook(project: Path, source: str = "compact", session: str = "s-1") -> None:
    """The real session-start hook on a compaction (or clear): it advances the epoch."""
    proc = subprocess.run([sys.executable, "-P", "-m", "supervisor", "hook", "claude"],
                          input=compact({"session_id": session, "cwd": str(project),
                                         "hook_event_name": "SessionStart", "source": source}),
                          capture_output=True, cwd=project, env=env_without_path(), timeout=60)
    assert proc.returncode == 0, proc.stderr


@pytest.mark.parametrize("harness", HARNESSES)
@pytest.mark.parametrize("source", ["compact", "clear"])
def test_post_tool_already_injected_skips_python_until_the_epoch_advances(
        interpreter: tuple[Path, Path], project: Path, harness: str, source: str) -> None:
    """Issue 13: a read under a folder whose instruction files were all injected in this epoch
    is answered without Python; after a compaction (seed 003) the next read injects again."""
    (project / "src dir" / "AGENTS.md").write_text("SUB-RULES\n")
    (project / "src dir" / "deep" / "AGENTS.override.md").write_text("DEEP-RULES\n")
    deep = read_payload(project, str(project / "src dir" / "deep" / "file.py"))
    other = read_payload(project, str(project / "src dir" / "deep" / "other.py"), "Edit")
    shallow = read_payload(project, str(project / "src dir" / "x.py"))
    first = check(interpreter, harness, "post-tool", shallow, project, expect_python=True)
    assert b"SUB-RULES" in first.stdout
    check(interpreter, harness, "post-tool", shallow, project, expect_python=False)
    # one folder on the way is injected, the deeper one not yet: Python, which injects it
    second = check(interpreter, harness, "post-tool", deep, project, expect_python=True)
    assert b"DEEP-RULES" in second.stdout and b"SUB-RULES" not in second.stdout
    check(interpreter, harness, "post-tool", deep, project, expect_python=False)
    check(interpreter, harness, "post-tool", other, project, expect_python=False)
    compact_hook(project, source)
    again = check(interpreter, harness, "post-tool", deep, project, expect_python=True)
    assert b"DEEP-RULES" in again.stdout and b"SUB-RULES" in again.stdout
    check(interpreter, harness, "post-tool", deep, project, expect_python=False)


def test_post_tool_index_is_per_session(interpreter: tuple[Path, Path], project: Path) -> None:
    (project / "src dir" / "AGENTS.md").write_text("SUB-RULES\n")
    target = str(project / "src dir" / "deep" / "file.py")
    payload = read_payload(project, target)
    assert b"SUB-RULES" in check(interpreter, "claude", "post-tool", payload, project,
                                 expect_python=True).stdout
    other = payload.replace(b'"session_id":"s-1"', b'"session_id":"s-2"')
    assert b"SUB-RULES" in check(interpreter, "claude", "post-tool", other, project,
                                 expect_python=True).stdout
    check(interpreter, "claude", "post-tool", other, project, expect_python=False)


def _inject_then(project: Path, interpreter: tuple[Path, Path]) -> bytes:
    (project / "src dir" / "AGENTS.md").write_text("SUB-RULES\n")
    payload = read_payload(project, str(project / "src dir" / "deep" / "file.py"))
    assert b"SUB-RULES" in check(interpreter, "claude", "post-tool", payload, project,
                                 expect_python=True).stdout
    check(interpreter, "claude", "post-tool", payload, project, expect_python=False)
    return payload


def _index(project: Path) -> Path:
    return project / ".supervise" / "fastpath" / "nested" / "s-1"


INDEX_DOUBTS: dict[str, Callable[[Path, Path], bytes | None]] = {
    # an override appears where AGENTS.md was injected: a new file, Python injects it
    "new override": lambda p, t: (p / "src dir" / "AGENTS.override.md").write_text("O\n") and None,
    # the injected file is now a link (its real path is elsewhere): Python decides
    "file became a link": lambda p, t: ((p / "src dir" / "AGENTS.md").unlink(),
                                        (p / "src dir" / "AGENTS.md").symlink_to(t / "o.md"),
                                        (t / "o.md").write_text("L\n")) and None,
    # a folder on the way is now a link to a copy
    "folder became a link": lambda p, t: ((p / "src dir").rename(t / "moved"),
                                          (p / "src dir").symlink_to(t / "moved")) and None,
    # the cwd itself reached through a link
    "cwd through a link": lambda p, t: ((t / "cwd link").symlink_to(p),) and read_payload(
        t / "cwd link", str(t / "cwd link" / "src dir" / "deep" / "file.py")),
    "index is a link": lambda p, t: ((_index(p)).rename(t / "idx"),
                                     _index(p).symlink_to(t / "idx")) and None,
    "entry is a link": lambda p, t: ((e := Path(str(_index(p)) + str(p / "src dir" / "AGENTS.md"))
                                      ).unlink(), e.symlink_to(t / "any"),
                                     (t / "any").write_text("")) and None,
    "index removed": lambda p, t: __import__("shutil").rmtree(_index(p)),
    "session id with a dot": lambda p, t: read_payload(p, str(p / "src dir" / "deep" / "file.py")
                                                       ).replace(b'"s-1"', b'".s-1"'),
    "session id with a slash": lambda p, t: read_payload(p, str(p / "src dir" / "deep" / "f.py")
                                                         ).replace(b'"s-1"', b'"s-1/x"'),
    "empty session id": lambda p, t: read_payload(p, str(p / "src dir" / "deep" / "file.py")
                                                  ).replace(b'"s-1"', b'""'),
    "escaped session id": lambda p, t: read_payload(p, str(p / "src dir" / "deep" / "file.py")
                                                    ).replace(b'"s-1"', b'"s\\u002d1"'),
    "nested session id only": lambda p, t: read_payload(p, str(p / "src dir" / "deep" / "f.py")
                                                        ).replace(b'{"session_id":"s-1",',
                                                                  b'{"x":{"session_id":"s-1"},'),
    "state dir elsewhere": lambda p, t: None,
}


@pytest.mark.parametrize("case", INDEX_DOUBTS)
def test_post_tool_index_in_doubt_runs_python(interpreter: tuple[Path, Path], project: Path,
                                              tmp_path: Path, case: str) -> None:
    """Each way the index could be stale or not ours makes the shim run Python, and what
    Python then answers is a valid envelope (or nothing)."""
    payload = _inject_then(project, interpreter)
    env = {"SUPERVISE_STATE_DIR": str(tmp_path / "other state")} if case == "state dir elsewhere" else {}
    changed = INDEX_DOUBTS[case](project, tmp_path)
    answer = shim(interpreter, "claude", "post-tool", changed or payload, project, **env)
    assert answer.ran_python, case
    if answer.stdout:
        json.loads(answer.stdout)


def test_post_tool_index_not_used_after_the_ledger_starts_over(
        interpreter: tuple[Path, Path], project: Path) -> None:
    """A corrupt ledger starts over in Python: the index goes with it, and the next read
    injects again (proved against the Python path each time)."""
    payload = _inject_then(project, interpreter)
    for ledger in (project / ".supervise" / "nested").glob("*.json"):
        ledger.write_text("[not a ledger")
    # the shim still answers from the index here (it never reads the ledger); the Python path
    # run by a read that must run it (a new file on the way) starts the ledger over
    (project / "src dir" / "deep" / "AGENTS.md").write_text("DEEP\n")
    answer = check(interpreter, "claude", "post-tool", payload, project, expect_python=True)
    assert b"SUB-RULES" in answer.stdout and b"DEEP" in answer.stdout
    check(interpreter, "claude", "post-tool", payload, project, expect_python=False)


def test_post_tool_other_tools_skip_python(interpreter: tuple[Path, Path], project: Path) -> None:
    (project / "src dir" / "AGENTS.md").write_text("SUB-RULES\n")
    payload = compact({"session_id": "s", "cwd": str(project), "tool_name": "Bash",
                       "tool_input": {"command": "cat 'src dir/deep/file.py'"}})
    check(interpreter, "claude", "post-tool", payload, project, expect_python=False)


POST_DOUBTS: dict[str, Callable[[Path], bytes]] = {
    "relative file": lambda p: read_payload(p, "src dir/deep/file.py"),
    "dot-dot": lambda p: read_payload(p, str(p / "src dir" / ".." / "src dir" / "deep" / "f.py")),
    "outside cwd": lambda p: read_payload(p / "src dir", str(p / "x.py")),
    "escaped path": lambda p: json.dumps({"cwd": str(p), "tool_name": "Read", "tool_input": {
        "file_path": str(p / "src dir" / "déep")}}, separators=(",", ":")).encode(),
    "tool_input after a long head": lambda p: compact({
        "cwd": str(p), "tool_name": "Read", "pad": "z" * 5000,
        "tool_input": {"file_path": str(p / "src dir" / "deep" / "file.py")}}),
    # a nested tool_input naming a file with no instruction file on the way
    "nested tool_input only": lambda p: compact({
        "session_id": "s", "cwd": str(p), "tool_name": "Read",
        "x": {"tool_input": {"file_path": str(p / "x.py")}}}),
    "offset before file_path": lambda p: compact({
        "cwd": str(p), "tool_name": "Read",
        "tool_input": {"offset": 1, "file_path": str(p / "src dir" / "deep" / "file.py")}}),
}


@pytest.mark.parametrize("case", POST_DOUBTS)
def test_post_tool_in_doubt_runs_python(interpreter: tuple[Path, Path], project: Path,
                                        case: str) -> None:
    (project / "src dir" / "AGENTS.md").write_text("SUB-RULES\n")
    answer = shim(interpreter, "claude", "post-tool", POST_DOUBTS[case](project), project)
    assert answer.ran_python, case
    if answer.stdout:
        json.loads(answer.stdout)


def write_all(proc: subprocess.Popen[bytes], payload: bytes) -> tuple[bytes, bytes]:
    """Write the whole payload as a harness does (a BrokenPipeError here means the hook left
    before reading it all), then collect the output."""
    assert proc.stdin is not None and proc.stdout is not None and proc.stderr is not None
    try:
        proc.stdin.write(payload)
        proc.stdin.close()
    except BrokenPipeError:
        proc.kill()
        proc.wait()
        pytest.fail("the hook exited before the harness finished writing the payload")
    out, err = proc.stdout.read(), proc.stderr.read()
    proc.stdout.close()
    proc.stderr.close()
    proc.wait(timeout=30)
    return out, err


@pytest.mark.parametrize("with_nested", [False, True])
def test_large_payload_is_drained_and_passed_whole(interpreter: tuple[Path, Path], project: Path,
                                                   with_nested: bool) -> None:
    """A PostToolUse payload larger than a pipe holds: the harness's write completes whether
    the fast path answers alone (for a harness not proved to tolerate an unread payload: the
    drain) or hands the payload to Python (which must get all of it, whatever the harness)."""
    if with_nested:
        (project / "src dir" / "AGENTS.md").write_text("SUB-RULES\n")
    payload = read_payload(project, str(project / "src dir" / "deep" / "file.py"),
                           response=600_000)
    wrapper, record = interpreter
    harness = "claude" if with_nested else "qwen"
    proc = subprocess.Popen([SHELL, str(FAST_PATH), str(wrapper), "-P", "-m", "supervisor",
                             "hook", harness, "--event", "post-tool"], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=project,
                            env=env_without_path())
    assert proc.stdin is not None
    out, err = write_all(proc, payload)
    assert proc.returncode == 0, err
    assert record.exists() == with_nested
    assert (b"SUB-RULES" in out) == with_nested


UNREAD_CASES = [("claude", "post-tool"), ("claude", "prompt"), ("codex", "prompt"),
                ("gemini", "prompt"), ("qwen", "prompt"), ("qwen", "post-tool"), ("cursor", "post-tool"),
                ("pi", "prompt")]


@pytest.mark.parametrize("installed", [True, False], ids=["as-installed", "old-registration"])
@pytest.mark.parametrize(("harness", "event"), UNREAD_CASES)
def test_long_payload_is_left_unread_only_for_proved_harnesses(
        interpreter: tuple[Path, Path], project: Path, harness: str, event: str,
        installed: bool) -> None:
    """"Nothing to do" on a payload 10 times what a pipe holds: registered as ``install``
    writes it for a harness whose row says ``early_exit`` (Claude, Codex and Gemini, proved
    with their real CLIs to ignore the EPIPE: tests/e2e/test_early_exit.py), the shim leaves
    without reading past its head, so the writer meets a closed pipe; for every other harness,
    and for a registration written before the flag existed, it reads the payload to its end.
    Either way it exits 0, prints nothing, starts no Python, and Python would print nothing on
    the same inputs."""
    if event == "post-tool":
        payload = read_payload(project, str(project / "src dir" / "deep" / "file.py"),
                               response=600_000)
    else:
        payload = prompt_payload(project, prompt="p" * 600_000)
    wrapper, record = interpreter
    record.unlink(missing_ok=True)
    proc = subprocess.Popen(registered(wrapper, harness, event) if installed else
                            [SHELL, str(FAST_PATH), str(wrapper), "-P", "-m", "supervisor",
                             "hook", harness, "--event", event], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=project,
                            env=env_without_path())
    assert proc.stdin is not None and proc.stdout is not None and proc.stderr is not None
    try:
        proc.stdin.write(payload)
        proc.stdin.close()
        written = True
    except BrokenPipeError:
        written = False
        try:
            proc.stdin.close()
        except BrokenPipeError:
            pass
    out, err = proc.stdout.read(), proc.stderr.read()
    proc.stdout.close()
    proc.stderr.close()
    assert proc.wait(timeout=30) == 0, err
    assert (out, record.exists()) == (b"", False), err
    assert written == (not installed or not BY_NAME[harness].early_exit), harness
    assert python_path(harness, event, payload, project) == b""


def test_missing_interpreter_exits_zero_and_drains(project: Path, tmp_path: Path) -> None:
    payload = read_payload(project, str(project / "x.py"), response=300_000)
    proc = subprocess.Popen([SHELL, str(FAST_PATH), str(tmp_path / "no such" / "python"), "-P",
                             "-m", "supervisor", "hook", "claude", "--event", "post-tool"],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            env=env_without_path())
    assert proc.stdin is not None
    out, err = write_all(proc, payload)
    assert (proc.returncode, out) == (0, b"")
    assert b"missing or not executable" in err


def test_session_start_passes_through_untouched(interpreter: tuple[Path, Path],
                                                project: Path) -> None:
    """Without --event prompt|post-tool the shim is only an exec: Python reads stdin itself."""
    wrapper, record = interpreter
    payload = compact({"session_id": "s", "cwd": str(project), "source": "startup",
                       "hook_event_name": "SessionStart"})
    proc = subprocess.run([SHELL, str(FAST_PATH), str(wrapper), "-c",
                           "import sys; sys.stdout.write(str(len(sys.stdin.read())))"],
                          input=payload, capture_output=True, env=env_without_path(), timeout=30)
    assert (proc.returncode, proc.stdout) == (0, str(len(payload)).encode())


@pytest.mark.parametrize("name", HARNESSES)
def test_install_registers_the_shim_for_per_event_hooks(name: str) -> None:
    adapter = ADAPTERS[name]
    command = hook_command(adapter, "prompt", "/opt/my env/bin/python")
    assert command.startswith(f"{SHELL} ") and str(FAST_PATH) in command
    assert command.endswith(f"-I -m supervisor hook {name} --event prompt")
    assert "'/opt/my env/bin/python'" in command
    session = hook_command(adapter, None, "/opt/py")
    assert FAST_PATH.name not in session


def test_fast_path_is_posix_sh() -> None:
    """The shim parses under dash's strict POSIX mode (no bashisms), when dash is present."""
    for shell in ("/bin/dash", "/usr/bin/dash", "/bin/sh"):
        if os.path.exists(shell):
            proc = subprocess.run([shell, "-n", str(FAST_PATH)], capture_output=True, timeout=30)
            assert proc.returncode == 0, proc.stderr


def test_watch_list_check_needs_no_path(interpreter: tuple[Path, Path], project: Path) -> None:
    """The watch check runs find by absolute path: a PATH without it (or none) changes nothing.
    The list itself is never read by the shell (only stat calls through watch.parents' links), so
    an oversized list costs nothing and decides nothing; a changed file is still seen."""
    from supervisor.session._fastpath import set_watch

    rules = project / "AGENTS.md"
    rules.write_text("rules\n")
    os.utime(rules, (1.0, 1.0))
    settle(rules)
    state = project / ".supervise"
    set_watch(state, [rules])
    check(interpreter, "claude", "prompt", prompt_payload(project), project, expect_python=False,
          PATH="/nonexistent")
    watch = state / "fastpath" / "watch"
    stamp = watch.stat().st_mtime
    watch.write_text((str(rules) + "\n") * (70_000 // len(str(rules)) + 1))  # > 64 KiB
    os.utime(watch, (stamp, stamp))
    check(interpreter, "claude", "prompt", prompt_payload(project), project, expect_python=False,
          PATH="/nonexistent")
    os.utime(rules)  # changed after the baseline
    check(interpreter, "claude", "prompt", prompt_payload(project), project, expect_python=True,
          PATH="/nonexistent")


def watched_entries(state: Path) -> dict[str, str]:
    """``watch.parents``' symlinks (name -> target) and its stamp (``.since-<ns>`` -> ""); the
    recorded ctimes (``.ctime-<n>-<ns>``) are checked: one per link whose file exists, the
    file's own."""
    folder = state / "fastpath" / "watch.parents"
    entries = {p.name: (os.readlink(p) if p.is_symlink() else "") for p in folder.iterdir()}
    for name in [n for n in entries if n.startswith(".ctime-")]:
        del entries[name]
        number, ns = name[len(".ctime-"):].split("-")
        link = next(n for n in entries if n.startswith(f"{number}-"))
        target = os.path.join(entries[link], link.split("-", 1)[1])
        assert os.lstat(target).st_ctime_ns == int(ns), name
    return entries


@pytest.mark.parametrize("damage", ["no links", "links is a symlink", "links is a file",
                                    "dangling link", "relinked to a newer file", "no stamp",
                                    "two stamps", "stamp not a number", "entry not a link",
                                    "an entry Python never writes", "no ctime record",
                                    "another ctime recorded", "two ctime records",
                                    "ctime record not a number"])
def test_watch_links_in_doubt_run_python(interpreter: tuple[Path, Path], project: Path,
                                         tmp_path: Path, damage: str) -> None:
    """A watch list whose watch.parents is missing (a list written before it existed), a link
    or a file, a watched file that is gone, an entry moved to a folder whose file changed, a
    stamp missing, doubled or not a number, an entry that is no link or has a name Python
    never writes: the prompt runs Python (and Python's answer stands)."""
    from supervisor.session._fastpath import set_watch

    rules = project / "AGENTS.md"
    rules.write_text("rules\n")
    os.utime(rules, (1.0, 1.0))
    settle(rules)
    state = project / ".supervise"
    set_watch(state, [rules])
    check(interpreter, "claude", "prompt", prompt_payload(project), project, expect_python=False)
    links = state / "fastpath" / "watch.parents"
    entries = watched_entries(state)
    stamp = next(name for name in entries if name.startswith(".since-"))
    assert entries == {"0-AGENTS.md": str(project), stamp: ""}
    if damage in ("no links", "links is a symlink", "links is a file"):
        for entry in links.iterdir():
            entry.unlink()
        links.rmdir()
    if damage == "links is a symlink":
        elsewhere = tmp_path / "elsewhere"
        elsewhere.mkdir()
        (elsewhere / "0-AGENTS.md").symlink_to(project)
        (elsewhere / stamp).write_text("")
        links.symlink_to(elsewhere)
    elif damage == "links is a file":
        links.write_text(str(rules) + "\n")
    elif damage == "dangling link":
        (links / "0-AGENTS.md").unlink()
        (links / "0-AGENTS.md").symlink_to(project / "gone")
    elif damage == "relinked to a newer file":
        newer = tmp_path / "newer"
        newer.mkdir()
        (newer / "AGENTS.md").write_text("new\n")
        (links / "0-AGENTS.md").unlink()
        (links / "0-AGENTS.md").symlink_to(newer)
    elif damage == "no stamp":
        (links / stamp).unlink()
    elif damage == "two stamps":
        (links / ".since-1000000000000000000").write_text("")
    elif damage == "stamp not a number":
        (links / stamp).rename(links / ".since-12ab")
    elif damage == "entry not a link":
        (links / "0-AGENTS.md").unlink()
        (links / "0-AGENTS.md").mkdir()
        (links / "0-AGENTS.md" / "AGENTS.md").write_text("rules\n")
    elif damage == "an entry Python never writes":
        (links / "x-AGENTS.md").symlink_to(project)
    elif damage.startswith(("no ctime", "another ctime", "two ctime", "ctime record not")):
        record = next(links.glob(".ctime-0-*"))
        ns = int(record.name[len(".ctime-0-"):])
        if damage != "two ctime records":
            record.unlink()
        if damage != "no ctime record":
            later = {"ctime record not a number": "12ab"}.get(damage, str(ns + 1))
            (links / f".ctime-0-{later}").write_text("")
    check(interpreter, "claude", "prompt", prompt_payload(project), project, expect_python=True)


def shim_tools(tmp_path: Path, tools: str) -> dict[str, str]:
    """The environment that gives the shim only some tools (``SUPERVISE_SHIM_BIN``): "gnu"
    (this host's own), "find only" (no du), "busybox du" (a du that rejects --time, as
    BusyBox, BSD and macOS do), "garbage du" (a du printing what is no time), "neither" (no
    du, no find)."""
    if tools == "gnu":
        return {}
    folder = tmp_path / f"bin {tools}"
    folder.mkdir()
    for name in ("head", "cat") + (("find",) if tools != "neither" else ()):
        real = next(p for p in (Path("/usr/bin") / name, Path("/bin") / name) if p.exists())
        (folder / name).symlink_to(real)
    fake = {"busybox du": "echo \"du: unrecognized option '--time=ctime'\" >&2; exit 1",
            "garbage du": "printf '4\\tlast tuesday\\t%s\\n' \"$@\"; exit 0"}.get(tools)
    if fake:
        (folder / "du").write_text(f"#!/bin/sh\n{fake}\n")
        (folder / "du").chmod(0o755)
    return {"SUPERVISE_SHIM_BIN": str(folder)}


TOOLSETS = ("gnu", "find only", "busybox du", "garbage du", "neither")


@pytest.mark.parametrize("change", ["edited, then touch -d to an old date", "cp -p in place",
                                    "replaced by mv", "a link planted in its place", "deleted",
                                    "chmod"])
def test_watch_sees_ctime_only_changes_with_every_toolset(
        interpreter: tuple[Path, Path], project: Path, tmp_path: Path, change: str) -> None:
    """Changes that leave the watched file's mtime old (or its path pointing at an old file)
    run Python, whatever tools the host has: GNU du, only find (BusyBox/BSD du fails, a du
    that prints no time is not believed), or neither (then every prompt with a watch list
    runs Python). Untouched files are answered in sh wherever a tool can tell."""
    from supervisor.session._fastpath import set_watch

    rules = project / "src dir" / "AGENTS.md"
    rules.write_text("rules\n")
    second = project / "CLAUDE.md"  # a second watched file, left alone
    second.write_text("claude rules\n")
    other = tmp_path / "old other.md"  # older than the baseline, and different
    other.write_text("other rules\n")
    for path in (rules, second, other):
        os.utime(path, (1.0, 1.0))
        settle(path)
    state = project / ".supervise"
    set_watch(state, [second, rules])
    envs = {tools: shim_tools(tmp_path, tools) for tools in TOOLSETS}
    payload = prompt_payload(project)
    for tools, env in envs.items():
        check(interpreter, "claude", "prompt", payload, project, expect_python=tools == "neither",
              **env)
    if change == "edited, then touch -d to an old date":
        rules.write_text("new rules\n")
        os.utime(rules, (1.0, 1.0))
    elif change == "cp -p in place":
        import shutil

        inode = rules.stat().st_ino
        shutil.copy2(other, rules)
        assert rules.stat().st_ino == inode and rules.stat().st_mtime == 1.0
    elif change == "replaced by mv":
        fresh = project / "src dir" / "AGENTS.md.new"
        fresh.write_text("moved rules\n")
        os.utime(fresh, (1.0, 1.0))
        settle(fresh)
        fresh.rename(rules)
    elif change == "a link planted in its place":
        rules.unlink()
        rules.symlink_to(other)  # stat() through it gives other's old times
    elif change == "deleted":
        rules.unlink()
    else:
        rules.chmod(0o600)
    for tools, env in envs.items():
        check(interpreter, "claude", "prompt", payload, project, expect_python=True, **env)


def test_watch_links_follow_the_list(project: Path) -> None:
    """set_watch writes watch.parents anew each time (no stale link, no temporary folder
    left), in step with the list, with one stamp and, for a file absent, an absent record; an
    empty list leaves a folder holding the stamp alone; the folder of older versions (watch.d)
    is removed."""
    from supervisor.session._fastpath import set_watch, watch_complete as has_links

    state = project / ".supervise"
    one, two = project / "AGENTS.md", project / "sub dir" / "CLAUDE.md"
    assert not has_links(state)
    (state / "fastpath" / "watch.d").mkdir(parents=True)
    (state / "fastpath" / "watch.d" / "0").symlink_to(one)
    set_watch(state, [one, two])
    folder = state / "fastpath"

    def links() -> dict[str, str]:
        entries = watched_entries(state)
        stamps = [name for name in entries if name.startswith(".since-")]
        assert len(stamps) == 1 and entries.pop(stamps[0]) == ""
        assert abs(int(stamps[0][7:]) / 1e9 - folder.joinpath("watch").stat().st_mtime) < 0.01
        return entries

    assert links() == {"0-AGENTS.md": str(project), "1-CLAUDE.md": str(project / "sub dir"),
                       ".absent-0": "", ".absent-1": ""}
    set_watch(state, [two])
    assert links() == {"0-CLAUDE.md": str(project / "sub dir"), ".absent-0": ""}
    set_watch(state, [])
    assert has_links(state) and links() == {}
    assert sorted(p.name for p in folder.iterdir()) == ["watch", "watch.parents"]


def test_exit_status_is_zero_when_stdin_cannot_be_read(interpreter: tuple[Path, Path],
                                                       project: Path, tmp_path: Path) -> None:
    """stdin that cannot be read (a directory: EISDIR): the hook still exits 0, prints
    nothing, and leaves the decision to Python."""
    wrapper, record = interpreter
    folder = os.open(tmp_path, os.O_RDONLY)
    try:
        proc = subprocess.run([SHELL, str(FAST_PATH), str(wrapper), "-P", "-m", "supervisor",
                               "hook", "claude", "--event", "post-tool"], stdin=folder,
                              capture_output=True, env=env_without_path(), timeout=30)
    finally:
        os.close(folder)
    assert (proc.returncode, proc.stdout) == (0, b"")
    assert record.exists()


def test_checkout_shim_uses_the_fast_path(interpreter: tuple[Path, Path], project: Path) -> None:
    """`bin/supervise-hook HARNESS --event prompt` (registrations pointing at a checkout)
    answers "nothing to do" without Python too, and still delivers what is pending."""
    wrapper, record = interpreter
    shim_path = FAST_PATH.parent.parent / "bin" / "supervise-hook"
    argv = ["/bin/sh", str(shim_path), "claude", "--event", "prompt"]
    env = env_without_path(SUPERVISE_PYTHON=str(wrapper))
    proc = subprocess.run(argv, input=prompt_payload(project), capture_output=True, cwd=project,
                          env=env, timeout=30)
    assert (proc.returncode, proc.stdout, record.exists()) == (0, b"", False)
    put_result(project / ".supervise")
    proc = subprocess.run(argv, input=prompt_payload(project), capture_output=True, cwd=project,
                          env=env, timeout=30)
    assert proc.returncode == 0 and record.exists() and b"NETWORK-OK" in proc.stdout


def _old_mtime_copy(rules: Path, tmp: Path) -> None:
    new = tmp / "new.md"
    new.write_text("rule TWO\n")
    os.utime(new, (1577836800.0, 1577836800.0))  # 2020-01-01
    subprocess.run(["cp", "-p", str(new), str(rules)], check=True)


def _rename_backup(rules: Path, tmp: Path) -> None:
    backup = rules.parent / "AGENTS.md.bak"
    backup.write_text("rule TWO\n")
    os.utime(backup, (1577836800.0, 1577836800.0))
    os.rename(backup, rules)


def _touch_reference(rules: Path, tmp: Path) -> None:
    before = os.stat(rules)
    rules.write_text("rule TWO\n")
    os.utime(rules, ns=(before.st_atime_ns, before.st_mtime_ns))  # touch -r: same mtime back


OLD_MTIME_EDITS: dict[str, Callable[[Path, Path], None]] = {
    "cp -p": _old_mtime_copy, "mv backup": _rename_backup, "touch -r": _touch_reference}


@pytest.mark.parametrize("how", OLD_MTIME_EDITS)
def test_prompt_sees_an_edit_that_keeps_an_old_mtime(interpreter: tuple[Path, Path],
                                                     project: Path, tmp_path: Path,
                                                     how: str) -> None:
    """An instruction file replaced with content whose mtime is old (cp -p, a renamed backup,
    touch -r) still reaches the refresh: the fast path compares ctime too, as Python the hash."""
    rules = project / "AGENTS.md"
    rules.write_text("rule one\n")
    os.utime(rules, (1577836800.0, 1577836800.0))  # an old file: only its ctime can tell
    start = compact({"session_id": "sessR", "cwd": str(project), "source": "startup"})
    python_path("claude", "session-start", start, project)
    assert (project / ".supervise" / "fastpath" / "watch").exists()
    prompt = compact({"session_id": "sessR", "cwd": str(project), "prompt": "hi"})
    quiet = shim(interpreter, "claude", "prompt", prompt, project)
    assert quiet.stdout == b""
    OLD_MTIME_EDITS[how](rules, tmp_path)
    answer = shim(interpreter, "claude", "prompt", prompt, project)
    assert answer.ran_python and b"INSTRUCTIONS CHANGED" in answer.stdout, answer.stderr
    assert b"rule TWO" in answer.stdout


def test_prompt_sees_an_edit_made_after_the_clock_was_set_back(interpreter: tuple[Path, Path],
                                                               project: Path) -> None:
    """A baseline taken while the clock ran ahead (a resumed VM, a clock NTP later steps back)
    has a stamp in the future: an edit made once the clock is back has a ctime before it.
    Python compares hashes and injects the change, so the shim must run it: it also compares
    each watched file's ctime with the one recorded with the baseline. The list is then
    written anew by the clock as it is, and prompts are answered in sh again."""
    rules = project / "AGENTS.md"
    rules.write_text("rule one\n")
    start = compact({"session_id": "sessC", "cwd": str(project), "source": "startup"})
    python_path("claude", "session-start", start, project)
    links = project / ".supervise" / "fastpath" / "watch.parents"
    stamp = next(p for p in links.iterdir() if p.name.startswith(".since-"))
    ahead = int(stamp.name[len(".since-"):]) + 3600 * 10**9  # as a clock 1 h ahead wrote it
    stamp.rename(links / f".since-{ahead}")
    os.utime(links.parent / "watch", ns=(ahead, ahead))
    prompt = compact({"session_id": "sessC", "cwd": str(project), "prompt": "hi"})
    assert not shim(interpreter, "claude", "prompt", prompt, project).ran_python
    rules.write_text("rule TWO\n")
    answer = shim(interpreter, "claude", "prompt", prompt, project)
    assert answer.ran_python and b"rule TWO" in answer.stdout, answer.stderr
    settle(rules)
    shim(interpreter, "claude", "prompt", prompt, project)  # re-stamps past the edit
    quiet = shim(interpreter, "claude", "prompt", prompt, project)
    assert not quiet.ran_python and quiet.stdout == b"", quiet.stderr


DUPLICATE_KEYS: dict[str, Callable[[Path], bytes]] = {
    "tool_input twice": lambda p: (
        b'{"session_id":"dup","cwd":"' + str(p).encode() + b'","tool_name":"Read","tool_input":{"file_path":"'
        + str(p / "x.py").encode() + b'"},"tool_input":{"file_path":"'
        + str(p / "src dir" / "deep" / "file.py").encode() + b'"}}'),
    "tool_name twice, spaced": lambda p: (
        b'{"session_id":"dup","cwd":"' + str(p).encode() + b'","tool_name":"Bash", "tool_name":"Read",'
        b'"tool_input":{"file_path":"' + str(p / "src dir" / "deep" / "file.py").encode()
        + b'"}}'),
    "cwd twice, spaced": lambda p: (
        b'{"session_id":"dup","cwd":"' + str(p / "src dir" / "deep").encode() + b'", "cwd":"'
        + str(p).encode() + b'","tool_name":"Read",'
        b'"tool_input":{"file_path":"' + str(p / "src dir" / "deep" / "file.py").encode()
        + b'"}}'),
    "file_path twice": lambda p: (
        b'{"session_id":"dup","cwd":"' + str(p).encode() + b'","tool_name":"Read","tool_input":{"file_path":"'
        + str(p / "x.py").encode() + b'","file_path":"'
        + str(p / "src dir" / "deep" / "file.py").encode() + b'"}}'),
}


@pytest.mark.parametrize("case", DUPLICATE_KEYS)
def test_post_tool_repeated_key_runs_python(interpreter: tuple[Path, Path], project: Path,
                                            case: str) -> None:
    """The fast path never decides on a key repeated in its head (in doubt: Python), and
    Python keeps the first value (:func:`supervisor.session._payload.first_wins`): each
    case's second value alone would inject SUB-RULES, its first never does."""
    (project / "src dir" / "AGENTS.md").write_text("SUB-RULES\n")
    payload = DUPLICATE_KEYS[case](project)
    answer = shim(interpreter, "claude", "post-tool", payload, project)
    assert answer.ran_python and b"SUB-RULES" not in answer.stdout, case


ESCAPED_KEYS: dict[str, Callable[[Path], bytes]] = {
    "tool_name": lambda p: (
        b'{"session_id":"esc","cwd":"' + str(p).encode() + b'","tool\\u005fname":"Read",'
        b'"tool_name":"Bash","tool_input":{"file_path":"'
        + str(p / "src dir" / "deep" / "file.py").encode() + b'"}}'),
    "tool_input": lambda p: (
        b'{"session_id":"esc","cwd":"' + str(p).encode() + b'","tool_name":"Read",'
        b'"tool\\u005finput":{"file_path":"' + str(p / "src dir" / "deep" / "file.py").encode()
        + b'"},"tool_input":{"file_path":"' + str(p / "x.py").encode() + b'"}}'),
}


@pytest.mark.parametrize("case", ESCAPED_KEYS)
def test_post_tool_key_spelled_with_escapes_first_runs_python(
        interpreter: tuple[Path, Path], project: Path, case: str) -> None:
    """A key the shim reads, written first with a \\u escape (the same key to Python, which
    keeps its first value: here one that injects SUB-RULES) and then plainly (a value the shim
    alone would answer "nothing to do" for): the shim leaves it to Python, which delivers."""
    (project / "src dir" / "AGENTS.md").write_text("SUB-RULES\n")
    payload = ESCAPED_KEYS[case](project)
    assert b"SUB-RULES" in python_path("claude", "post-tool", payload, project)
    # another session (the first one has the file injected already)
    payload = payload.replace(b'"session_id":"esc"', b'"session_id":"esc2"')
    answer = shim(interpreter, "claude", "post-tool", payload, project)
    assert answer.ran_python and b"SUB-RULES" in answer.stdout, (case, answer.stderr)


def test_oversized_post_tool_payload_is_drained_and_still_served(interpreter: tuple[Path, Path],
                                                                 project: Path) -> None:
    """A Write of 10 MB: the harness's write completes, and the nested AGENTS.md of the
    file (named before the content) is still injected, through the shim and Python alone."""
    (project / "src dir" / "AGENTS.md").write_text("SUB-RULES\n")
    payload = compact({"session_id": "big", "cwd": str(project), "tool_name": "Write",
                       "tool_input": {"file_path": str(project / "src dir" / "deep" / "file.py"),
                                      "content": "z" * 10_000_000}})
    wrapper, record = interpreter
    for argv in ([SHELL, str(FAST_PATH), str(wrapper)], [str(wrapper)]):
        record.unlink(missing_ok=True)
        proc = subprocess.Popen([*argv, "-P", "-m", "supervisor", "hook", "claude", "--event",
                                 "post-tool"], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, cwd=project, env=env_without_path())
        out, err = write_all(proc, payload)
        assert proc.returncode == 0, err
        assert record.exists() and b"SUB-RULES" in out, err
        payload = payload.replace(b'"session_id":"big"', b'"session_id":"big2"')


def test_checkout_shim_resolves_a_bare_interpreter_name(interpreter: tuple[Path, Path],
                                                       project: Path) -> None:
    """SUPERVISE_PYTHON=python (a bare name) is looked up on PATH; an unknown name is named."""
    wrapper, record = interpreter
    shim_path = FAST_PATH.parent.parent / "bin" / "supervise-hook"
    argv = ["/bin/sh", str(shim_path), "claude", "--event", "prompt"]
    put_result(project / ".supervise")
    env = env_without_path(SUPERVISE_PYTHON="python", PATH=f"{wrapper.parent}:/usr/bin:/bin")
    proc = subprocess.run(argv, input=prompt_payload(project), capture_output=True, cwd=project,
                          env=env, timeout=30)
    assert proc.returncode == 0 and record.exists() and b"NETWORK-OK" in proc.stdout, proc.stderr
    env["SUPERVISE_PYTHON"] = "no-such-python-here"
    proc = subprocess.run(argv, input=prompt_payload(project), capture_output=True, cwd=project,
                          env=env, timeout=30)
    assert proc.returncode == 0 and proc.stdout == b""
    assert b"SUPERVISE_PYTHON=no-such-python-here is not a command on PATH" in proc.stderr


def test_a_list_without_links_is_rewritten_by_the_next_prompt(interpreter: tuple[Path, Path],
                                                             project: Path) -> None:
    """A state dir from before watch.parents (a list alone): the first prompt runs Python, which
    writes the links; the prompts after it stay in sh again."""
    rules = project / "AGENTS.md"
    rules.write_text("rule one\n")
    os.utime(rules, (1.0, 1.0))
    settle(rules)
    start = compact({"session_id": "sessU", "cwd": str(project), "source": "startup"})
    python_path("claude", "session-start", start, project)
    links = project / ".supervise" / "fastpath" / "watch.parents"
    assert [os.readlink(p) for p in links.iterdir() if p.is_symlink()] == [str(project)]
    for link in links.iterdir():
        link.unlink()
    links.rmdir()
    prompt = compact({"session_id": "sessU", "cwd": str(project), "prompt": "hi"})
    check(interpreter, "claude", "prompt", prompt, project, expect_python=True)
    assert [os.readlink(p) for p in links.iterdir() if p.is_symlink()] == [str(project)]
    check(interpreter, "claude", "prompt", prompt, project, expect_python=False)


@pytest.mark.parametrize("locale", [None, "C.UTF-8", ""])
def test_python_gets_the_callers_locale(project: Path, tmp_path: Path, locale: str | None) -> None:
    """The shim exports LC_ALL=C for its own tools (no locale files loaded); the Python
    command it starts sees LC_ALL exactly as the harness set it (or unset)."""
    seen = tmp_path / "seen"
    wrapper = tmp_path / "py dir" / "python"
    wrapper.parent.mkdir()
    wrapper.write_text(f'#!/bin/sh\nprintf %s "${{LC_ALL-unset}}" > "{seen}"\nexec /bin/cat >/dev/null\n')
    wrapper.chmod(0o755)
    (project / "src dir" / "AGENTS.md").write_text("SUB-RULES\n")
    env = env_without_path()
    env.pop("LC_ALL", None)
    if locale is not None:
        env["LC_ALL"] = locale
    payload = read_payload(project, str(project / "src dir" / "deep" / "file.py"), response=50_000)
    proc = subprocess.run([SHELL, str(FAST_PATH), str(wrapper), "-P", "-m", "supervisor", "hook",
                           "claude", "--event", "post-tool"], input=payload, capture_output=True,
                          cwd=project, env=env, timeout=30)
    assert proc.returncode == 0, proc.stderr
    assert seen.read_text() == ("unset" if locale is None else locale)


def test_post_tool_notebook_path_first_with_a_file_path_runs_python(
        interpreter: tuple[Path, Path], project: Path) -> None:
    """Python reads ``file_path`` before ``notebook_path`` whatever their order: a tool_input
    naming an injected file as ``notebook_path`` first and another file as ``file_path`` is
    never answered from the first one's index entry."""
    (project / "other").mkdir()
    (project / "other" / "AGENTS.md").write_text("OTHER-RULES\n")
    _inject_then(project, interpreter)
    payload = compact({"session_id": "s-1", "cwd": str(project), "tool_name": "NotebookEdit",
                       "tool_input": {"notebook_path": str(project / "src dir" / "deep" / "n.ipynb"),
                                      "file_path": str(project / "other" / "x.py")}})
    answer = check(interpreter, "claude", "post-tool", payload, project, expect_python=True)
    assert b"OTHER-RULES" in answer.stdout
    # the same with the file_path past the 4 KiB head the shim reads
    (project / "third").mkdir()
    (project / "third" / "AGENTS.md").write_text("THIRD-RULES\n")
    payload = compact({"session_id": "s-1", "cwd": str(project), "tool_name": "NotebookEdit",
                       "tool_input": {"notebook_path": str(project / "src dir" / "deep" / "n.ipynb"),
                                      "new_source": "z" * 5000,
                                      "file_path": str(project / "third" / "x.py")}})
    answer = check(interpreter, "claude", "post-tool", payload, project, expect_python=True)
    assert b"THIRD-RULES" in answer.stdout
    # a notebook_path alone, within the head, is still answered by the index
    payload = compact({"session_id": "s-1", "cwd": str(project), "tool_name": "NotebookEdit",
                       "tool_input": {"notebook_path": str(project / "src dir" / "deep" / "n.ipynb")}})
    check(interpreter, "claude", "post-tool", payload, project, expect_python=False)


@pytest.mark.parametrize("epoch", ["true", "false", "1.0", '"1"'])
def test_post_tool_ledger_epoch_of_the_wrong_type_drops_the_index(
        interpreter: tuple[Path, Path], project: Path, epoch: str) -> None:
    """A ledger whose epoch is not an integer (a JSON true is a Python int) starts over in
    Python, and the injected index goes with it: no entry of the old ledger is left for the
    shim to answer from (each answer proved against the Python path)."""
    (project / "other").mkdir()
    (project / "other" / "AGENTS.md").write_text("OTHER-RULES\n")
    other = read_payload(project, str(project / "other" / "x.py"))
    payload = _inject_then(project, interpreter)
    assert b"OTHER-RULES" in check(interpreter, "claude", "post-tool", other, project,
                                   expect_python=True).stdout
    check(interpreter, "claude", "post-tool", other, project, expect_python=False)
    ledgers = list((project / ".supervise" / "nested").glob("*.json"))
    assert len(ledgers) == 1
    injected = json.loads(ledgers[0].read_text())["injected"]
    assert set(injected.values()) == {0} and len(injected) == 2
    ledgers[0].write_text(json.dumps({"version": 1, "epoch": json.loads(epoch),
                                      "injected": dict.fromkeys(injected, json.loads(epoch))}))
    # a read that must run Python (a new file on the way) meets the damaged ledger
    (project / "src dir" / "deep" / "AGENTS.md").write_text("DEEP\n")
    answer = check(interpreter, "claude", "post-tool", payload, project, expect_python=True)
    assert b"DEEP" in answer.stdout and b"SUB-RULES" in answer.stdout
    # the other folder's entry went with the old ledger: Python decides, and injects again
    answer = check(interpreter, "claude", "post-tool", other, project, expect_python=True)
    assert b"OTHER-RULES" in answer.stdout
    check(interpreter, "claude", "post-tool", other, project, expect_python=False)


LATE_REPEATS: dict[str, Callable[[Path], bytes]] = {
    # past the 4 KiB head the shim cannot see these; Python keeps a repeated key's first value
    "session_id": lambda p: b',"session_id":"s-2"}',
    "tool_name": lambda p: b',"tool_name":"Read"}',
    "tool_input": lambda p: (b',"tool_input":{"file_path":"'
                             + str(p / "other" / "x.py").encode() + b'"}}'),
    "cwd": lambda p: b',"cwd":"' + str(p).encode() + b'"}',
}


@pytest.mark.parametrize("case", LATE_REPEATS)
def test_post_tool_key_repeated_past_the_head_changes_nothing(
        interpreter: tuple[Path, Path], project: Path, case: str) -> None:
    """A key the shim reads, repeated after a long tool_response (past the head it decides
    from): the shim and Python both keep the first value, so the shim's "nothing to do" is
    Python's answer too (``check`` runs Python on the same payload). Python used to keep the
    last value (a missed injection); a shim that scanned the rest for repeats cost 3 ms per
    100 KB of every Read."""
    (project / "other").mkdir()
    (project / "other" / "AGENTS.md").write_text("OTHER-RULES\n")
    payload = _inject_then(project, interpreter)
    if case == "tool_name":  # a non-file tool first: the shim answers "nothing"
        payload = read_payload(project, str(project / "other" / "x.py")).replace(
            b'"tool_name":"Read"', b'"tool_name":"Bash"')
    elif case == "cwd":  # a first cwd below src dir/AGENTS.md (nothing on the way), a last above it
        payload = read_payload(project, str(project / "src dir" / "deep" / "file.py"))
        payload = payload.replace(b'"session_id":"s-1"', b'"session_id":"s-3"').replace(
            b'"cwd":"' + str(project).encode(), b'"cwd":"' + str(project / "src dir").encode())
    base = payload[:-1]
    late = base + b',"pad":"' + b"z" * 5000 + b'"' + LATE_REPEATS[case](project)
    json.loads(late)
    check(interpreter, "claude", "post-tool", late, project, expect_python=False)


def test_prompt_cwd_repeated_past_the_head_changes_nothing(interpreter: tuple[Path, Path],
                                                           project: Path, tmp_path: Path) -> None:
    """A prompt payload whose cwd repeats after a long prompt: the first cwd (a project with
    nothing pending) decides in the shim and in Python alike; the pending result of the
    project named last stays pending."""
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    subprocess.run(["git", "init", "-q", str(elsewhere)], check=True)
    put_result(project / ".supervise", project=project)
    payload = prompt_payload(elsewhere, prompt="p" * 5000)[:-1] + b',"cwd":"' + str(project).encode() + b'"}'
    json.loads(payload)
    check(interpreter, "claude", "prompt", payload, elsewhere, expect_python=False)
    assert list((project / ".supervise" / "deferred").rglob("result-*.json"))


def test_a_repeated_key_keeps_its_first_value_at_every_level() -> None:
    """What the shim can see decides: the first value, whole payload or cut-off prefix."""
    from supervisor.session._payload import decode_payload, decode_prefix

    raw = b'{"cwd":"/a","tool_input":{"file_path":"/x","file_path":"/y"},"cwd":"/b"}'
    assert decode_payload(raw) == {"cwd": "/a", "tool_input": {"file_path": "/x"}}
    assert decode_prefix(raw + b"  ") == {"cwd": "/a", "tool_input": {"file_path": "/x"}}
    assert decode_prefix(b'{"cwd":"/a","cwd":"/b","tool_input":{"file_path":"/x","file_path":"/y"')[
        "cwd"] == "/a"


def _plant_entry(project: Path, instructions: Path, session: str = "s-1") -> None:
    entry = Path(str(project / ".supervise" / "fastpath" / "nested" / session) + str(instructions))
    entry.parent.mkdir(parents=True, exist_ok=True)
    entry.write_bytes(b"")


def _plant_ledger(project: Path, instructions: Path, session: str = "s-1") -> None:
    from supervisor._hashing import sha256

    key = sha256(session.encode()).hexdigest()[:32]
    folder = project / ".supervise" / "nested"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / f"{key}.json").write_text(json.dumps(
        {"version": 1, "epoch": 0, "injected": {str(instructions): 0}, "retry_at": {}}))


@pytest.mark.parametrize("source", ["startup", "clear"])
@pytest.mark.parametrize("planted", ["index", "index and ledger"])
def test_post_tool_planted_index_is_dropped_at_session_start(
        interpreter: tuple[Path, Path], project: Path, source: str, planted: str) -> None:
    """Issue 11's kind (planted files): an injected-index entry (and a ledger) planted in a
    clone's ``.supervise/`` for a never-injected file made the shim skip that injection. A new
    session (startup) or a cleared one has been given nothing: its SessionStart drops both,
    and the first read injects (proved against the Python path)."""
    rules = project / "src dir" / "AGENTS.md"
    rules.write_text("SUB-RULES\n")
    _plant_entry(project, rules)
    if planted == "index and ledger":
        _plant_ledger(project, rules)
    compact_hook(project, source)
    payload = read_payload(project, str(project / "src dir" / "deep" / "file.py"))
    answer = check(interpreter, "claude", "post-tool", payload, project, expect_python=True)
    assert b"SUB-RULES" in answer.stdout
    check(interpreter, "claude", "post-tool", payload, project, expect_python=False)


def test_post_tool_index_is_rebuilt_from_the_ledger_on_resume(
        interpreter: tuple[Path, Path], project: Path) -> None:
    """A resumed session keeps what it was given (its ledger), but an index entry the ledger
    does not record (planted for a never-injected file) is dropped at its SessionStart."""
    payload = _inject_then(project, interpreter)  # src dir/AGENTS.md injected and indexed
    deep = project / "src dir" / "deep" / "AGENTS.md"
    deep.write_text("DEEP-RULES\n")
    _plant_entry(project, deep)
    compact_hook(project, "resume")
    answer = check(interpreter, "claude", "post-tool", payload, project, expect_python=True)
    assert b"DEEP-RULES" in answer.stdout and b"SUB-RULES" not in answer.stdout
    check(interpreter, "claude", "post-tool", payload, project, expect_python=False)
    shallow = read_payload(project, str(project / "src dir" / "x.py"))
    check(interpreter, "claude", "post-tool", shallow, project, expect_python=False)


@pytest.mark.parametrize("source", ["startup", "resume"])
def test_session_start_without_a_ledger_writes_and_imports_nothing(project: Path,
                                                                  source: str) -> None:
    """The check costs two lstat calls: no ledger or index is created for a session that
    reads no nested file, and the nested-instructions module stays off that SessionStart."""
    code = ("import atexit, sys; sys.argv = ['supervise', 'hook', 'claude']\n"
            "atexit.register(lambda: print(sorted(m for m in sys.modules if m in ("
            "'supervisor.session._nested', 'supervisor.session._fastpath')), file=sys.stderr))\n"
            "from supervisor._main import entry; entry()")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, cwd=project,
                          input=compact({"session_id": "s-1", "cwd": str(project),
                                         "hook_event_name": "SessionStart", "source": source}),
                          env=env_without_path(), timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr.splitlines()[-1] == b"[]", proc.stderr
    assert not (project / ".supervise" / "nested").exists()
    assert not (project / ".supervise" / "fastpath" / "nested").exists()


def test_workspace_roots_follow_the_harness(interpreter: tuple[Path, Path], project: Path,
                                            tmp_path: Path) -> None:
    from supervisor.session._payload import CursorPayload, HookPayload, parse_payload, session_place

    other = tmp_path / "other project"
    other.mkdir()
    subprocess.run(["git", "init", "-q", str(other)], check=True)
    put_result(other / ".supervise", project=other)  # pending in B only
    data: dict[str, object] = {"session_id": "s", "cwd": str(project),
                               "workspace_roots": [str(other)], "prompt": "x"}
    parsed = parse_payload(dict(data), "claude")
    assert isinstance(parsed, HookPayload)
    assert session_place(parsed, {})[0] == os.path.realpath(project)
    assert isinstance(parse_payload(dict(data), "cursor"), CursorPayload)
    # claude: Python looks at cwd's project (nothing pending there); the shim, which knows no
    # harness by name, leaves any payload naming workspace_roots to Python
    answer = check(interpreter, "claude", "prompt", compact(data), project, expect_python=True)
    assert answer.stdout == b""
    # cursor: its project is workspace_roots[0]; the shim leaves that to Python, which delivers
    answer = check(interpreter, "cursor", "prompt", compact(data), project, expect_python=True)
    assert b"NETWORK-OK" in answer.stdout


def test_prompt_runs_python_only_when_the_transcript_traces_a_compaction(
        interpreter: tuple[Path, Path], project: Path, tmp_path: Path) -> None:
    """Gemini's trace record (``fastpath/trace/<sid>/<count>:<mark>``): the shim counts the
    mark's lines in the payload's transcript itself: an equal count is "nothing to do", a
    grown one runs Python, which delivers the start once (the old shim never looked: the compression
    went unseen); an unknown count ("-"), two entries or a linked record run Python too."""
    from supervisor.session._fastpath import set_trace

    mark = BY_NAME["gemini"].compact_trace
    (project / "supervise.toml").write_text(
        '[[stages]]\nname = "alpha"\nrun = ["echo", "ALPHA-NOTES"]\nreemit = true\n')
    transcript = tmp_path / "chat dir" / "session.jsonl"
    transcript.parent.mkdir()
    transcript.write_text('{"sessionId":"s-1"}\n')
    start = compact({"session_id": "s-1", "transcript_path": str(transcript), "cwd": str(project),
                     "hook_event_name": "SessionStart", "source": "startup"})
    assert b"ALPHA-NOTES" in python_path("gemini", "session-start", start, project)
    payload = prompt_payload(project, transcript_path=str(transcript))
    payload = compact({**json.loads(payload), "hook_event_name": "BeforeAgent"})
    check(interpreter, "gemini", "prompt", payload, project, expect_python=False)
    with transcript.open("a") as f:
        f.write('{"id":"2","type":"user","content":[{"text":"quoting {\\"$set\\":{\\"sessionId\\":"}]}\n')
    check(interpreter, "gemini", "prompt", payload, project, expect_python=False)
    with transcript.open("a") as f:
        f.write('{"$set":{"sessionId":"s-1"}}\n')
    answer = check(interpreter, "gemini", "prompt", payload, project, expect_python=True)
    assert b"ALPHA-NOTES" in answer.stdout  # (no harness process here: the full start)
    check(interpreter, "gemini", "prompt", payload, project, expect_python=False)
    record = project / ".supervise" / "fastpath" / "trace" / "s-1"
    assert [p.name for p in record.iterdir()] == [f"1:{mark}"]
    set_trace(project / ".supervise", "s-1", None, mark)
    check(interpreter, "gemini", "prompt", payload, project, expect_python=True)  # takes the count
    check(interpreter, "gemini", "prompt", payload, project, expect_python=False)
    (record / f"5:{mark}").write_bytes(b"")
    check(interpreter, "gemini", "prompt", payload, project, expect_python=True)
    for entry in record.iterdir():
        entry.unlink()
    record.rmdir()
    (tmp_path / "planted").mkdir()
    (tmp_path / "planted" / f"1:{mark}").write_bytes(b"")
    record.symlink_to(tmp_path / "planted")
    shimmed = shim(interpreter, "gemini", "prompt", payload, project)
    assert shimmed.ran_python, "a linked record: Python's state door decides"
