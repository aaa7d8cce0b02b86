"""The public door and the hook's hot path."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

import supervisor


def test_every_public_name_resolves() -> None:
    """`supervisor.__all__` is the public API; each name imports lazily and is documented."""
    assert list(supervisor.__all__) == sorted(supervisor.__all__)
    for name in supervisor.__all__:
        obj = getattr(supervisor, name)
        assert obj.__doc__, f"{name} has no docstring"
    assert set(dir(supervisor)) >= set(supervisor.__all__)


PATHLIB = frozenset({"pathlib", "urllib", "urllib.parse", "ipaddress", "fnmatch", "ntpath"})
"""``pathlib`` and what it brings (a large share of a hook's CPU, with ``re``): the hook paths
pass paths as ``str`` (docs/benchmarks.md, row "SessionStart hook on an empty digest")."""

HEAVY = frozenset({"pydantic", "anyio", "asyncio", "dataclasses", "typing", "inspect",
                   "hashlib", "argparse", "signal", "shutil", "json", "json.decoder", "re",
                   "enum"} | PATHLIB | ({"psutil"} if sys.platform.startswith("linux") else set()))
"""Modules a Python hook path must not import (beyond what the interpreter itself loads at
start): pydantic, anyio and asyncio belong to config validation and the engine; psutil is for
kill time (ancestry reads /proc on Linux); dataclasses (with inspect, ast, dis), typing and
hashlib cost about a third of a hook's CPU (docs/benchmarks.md, the Python hook rows): the hot
path's value classes are `supervisor._record` records, typing names live under TYPE_CHECKING,
hashes come from `supervisor._hashing`; signal builds three IntEnums at import (the hook's
handlers use `_signal`); shutil (with bz2 and lzma) is imported only when a folder is removed;
:data:`PATHLIB`, and ``json`` with ``re`` and ``enum`` (JSON goes through
``supervisor._jsontext``, CPython's ``_json`` without ``json``'s regular expressions)."""


_RUN_AND_LIST = """
import os, sys
out, real_exit, me = os.environ.pop("WK_MODULES_OUT"), os._exit, os.getpid()
def listed():
    if os.getpid() != me:  # a child forked from it (a stage, the guardian) lists nothing
        return
    with open(out, "w") as f:
        f.write("\\n".join(sys.modules))
def leave(status):
    listed()
    real_exit(status)
os._exit = leave
try:
    if sys.argv[1:2] == ["-m"]:  # as `python -m MODULE ARGS`: sys.argv = [file, *ARGS]
        import runpy

        module = sys.argv[2]
        del sys.argv[1:3]
        runpy.run_module(module, run_name="__main__", alter_sys=True)
    elif sys.argv[1:2] == ["--script"]:  # as the file's own interpreter runs it: `FILE ARGS`
        del sys.argv[:2]
        with open(sys.argv[0], "rb") as f:
            exec(compile(f.read(), sys.argv[0], "exec"), {"__name__": "__main__"})
finally:
    listed()
"""
"""Runs ``-m MODULE ARGS``, ``--script FILE ARGS`` (or nothing) and writes the names in ``sys.modules`` when it ends,
by any way out: a return, ``sys.exit``, or the hook's ``os._exit`` (in this process only: a
forked stage or the guardian inherits the patched ``os._exit``, and the guardian ends after
the hook). ``-X importtime`` missed
what a hook imported late: its lines go through ``sys.stderr``, which the hook wraps in a
buffer that ``os._exit`` never flushes."""


def _imported(argv: list[str], tmp: Path, **run: object) -> tuple[subprocess.CompletedProcess[bytes], set[str]]:
    """Run ``python -P ARGV`` (``argv`` after ``-P``: ``-m module ...``, ``--script FILE ...``
    or empty); the process
    and every module it had imported when it ended."""
    out = tmp / "modules.txt"
    out.unlink(missing_ok=True)
    base = run.pop("env", None) or __import__("os").environ
    env = {**base, "WK_MODULES_OUT": str(out)}  # type: ignore[dict-item]
    proc = subprocess.run([sys.executable, "-P", "-c", _RUN_AND_LIST, *argv], capture_output=True,
                          timeout=60, env=env, **run)  # type: ignore[call-overload]
    return proc, set(out.read_text().split("\n"))


def _interpreter_start(tmp: Path) -> set[str]:
    """What the interpreter imports by itself (site, encodings, a .pth hook's imports)."""
    return _imported([], tmp)[1]


def _payload(cwd: Path, event: str, session: str = "s", **extra: object) -> bytes:
    return json.dumps({"session_id": session, "cwd": str(cwd), "hook_event_name": event,
                       **extra}).encode()


@pytest.mark.parametrize("path", ["session-start", "reemit", "resume", "prompt-delivery",
                                  "post-tool-nested"])
def test_python_hook_paths_import_nothing_heavy(git_repo: Path, tmp_path: Path, path: str) -> None:
    """The Python hook paths the benchmark times (a SessionStart on an empty digest, a prompt
    delivering a deferred result, a post-tool injecting a nested AGENTS.md; and the resume
    nudge, which reads the transcript) import none of :data:`HEAVY`. Each run does its work:
    the test would pass vacuously on a hook that failed early."""
    from helpers import configure_deferred, write_result

    (git_repo / "nested").mkdir()
    # non-ASCII text (a dash, an accent, an arrow): nothing to remove, so no regex either
    (git_repo / "nested" / "AGENTS.md").write_text("nested rules \u2014 \u00e9t\u00e9 \u2192 ok\n")
    if path == "prompt-delivery":  # a result is delivered only for a stage configured deferred
        (git_repo / "supervise.toml").write_text("budget = 10\n")
        configure_deferred(git_repo, "net")
    else:
        (git_repo / "supervise.toml").write_text("budget = 10\nstages = []\n")  # an empty digest
    base = ["-m", "supervisor", "hook", "claude"]
    for attempt in range(2):  # the first run validates the config and fills the cache
        if path == "session-start":
            argv, stdin = base, _payload(git_repo, "SessionStart", source="startup")
        elif path == "reemit":  # a start, then a compaction of the same session re-emits
            source = "compact" if attempt else "startup"
            argv, stdin = base, _payload(git_repo, "SessionStart", source=source)
        elif path == "resume":
            argv, stdin = base, _payload(git_repo, "SessionStart", source="resume")
        elif path == "prompt-delivery":
            write_result(git_repo / ".supervise" / "deferred" / "net", f"{attempt}-run",
                         {"title": "net", "status": "ok", "seconds": 0.1, "output": "NET RESULT"})
            argv = [*base, "--event", "prompt"]
            stdin = _payload(git_repo, "UserPromptSubmit", prompt="go")
        else:
            argv = [*base, "--event", "post-tool"]
            stdin = _payload(git_repo, "PostToolUse", session=f"s{attempt}", tool_name="Read",
                             tool_input={"file_path": str(git_repo / "nested" / "a.py")})
        proc, loaded = _imported(argv, tmp_path, input=stdin, cwd=git_repo)
        assert proc.returncode == 0, proc.stderr[-2000:]
    out = proc.stdout.decode()
    if path in ("session-start", "reemit"):
        assert "supervisor.session._routing" in loaded  # routed and ran the (empty) digest
    elif path == "resume":
        assert "supervise digest" in out, out  # the nudge
    elif path == "prompt-delivery":
        assert "NET RESULT" in out, (out, proc.stderr[-2000:])
    else:
        assert "nested rules" in out, out
    heavy = (loaded - _interpreter_start(tmp_path)) & HEAVY
    assert not heavy, sorted(heavy)


@pytest.mark.parametrize("source", ["startup", "compact"])
def test_bridge_entry_imports_nothing_heavy(git_repo: Path, tmp_path: Path, source: str) -> None:
    """The Pi/OpenCode bridge entry (``supervise bridge``) runs a whole start (or a re-emit
    after a compaction) without :data:`HEAVY`: ``pathlib`` and the modules it brings, and,
    for the arguments the extensions send, ``argparse`` (with ``re``, ``gettext``, ``shutil``)."""
    (git_repo / "supervise.toml").write_text("budget = 10\nstages = []\n")
    argv = ["-m", "supervisor", "bridge", "--harness", "pi", "--source", source,
            "--session-id", "s1", "--cwd", str(git_repo)]
    for _attempt in range(2):  # the first run validates the config and fills the cache
        proc, loaded = _imported(argv, tmp_path, cwd=git_repo)
        assert proc.returncode == 0, proc.stderr[-2000:]
    result = json.loads(proc.stdout)
    assert result["kind"] in ("ready", "empty") and result["project"] == str(git_repo.resolve()), result
    heavy = (loaded - _interpreter_start(tmp_path)) & HEAVY
    assert not heavy, sorted(heavy)


LAUNCHER = Path(__file__).resolve().parent.parent / "bin" / "supervise"


@pytest.mark.parametrize("verb", [["--version"], ["run", "--", "true"]], ids=["version", "run"])
def test_the_supervise_launcher_imports_no_re(tmp_path: Path, verb: list[str]) -> None:
    """The installed ``supervise`` is our own launcher (``bin/supervise``), not an installer's
    generated console-script wrapper, which imports ``re`` before any of our code; neither the
    launcher nor the lean verbs behind it import ``re``, ``runpy`` (no ``-m``), ``enum`` (the
    lean ``run`` uses ``_signal``: ``signal`` builds three IntEnums at import) or ``warnings``
    (the verb dispatch and the public door's lazy names use ``__import__``, not importlib)."""
    import tomllib

    project = tomllib.loads((LAUNCHER.parent.parent / "pyproject.toml").read_text())
    assert "supervise" not in project["project"].get("scripts", {})  # else pip writes its own
    wheel = project["tool"]["hatch"]["build"]["targets"]["wheel"]
    assert wheel["shared-scripts"]["bin/supervise"] == "supervise"
    assert LAUNCHER.read_bytes().startswith(b"#!/bin/sh\n")  # left as it is at install
    proc, loaded = _imported(["--script", str(LAUNCHER), *verb], tmp_path)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert b"supervise" in proc.stdout or verb[0] == "run", proc.stdout
    assert "supervisor._main" in loaded
    extra = (loaded - _interpreter_start(tmp_path)) & {"re", "runpy", "importlib.util", "enum",
                                                       "warnings"}
    assert not extra, sorted(extra)


EVENT_LOOP = frozenset({"anyio", "asyncio", "ssl", "socket", "logging", "selectors",
                        "concurrent.futures", "threading", "typing", "dataclasses", "inspect",
                        "ctypes", "json"})
"""What a session start that runs stages must not import: anyio's asyncio backend (which
brings ``ssl``, ``socket``, ``logging``, ``concurrent.futures`` and ``threading``) was about
half of its CPU; the engine runs on its own loop (``supervisor.engine._loop``). ``typing``
and ``dataclasses`` (the engine's value classes are records), ``ctypes`` (the subreaper's
``prctl`` goes through ``_ctypes``) and ``json`` (``supervisor._jsontext``) stay out too."""


def test_a_session_start_with_stages_runs_without_an_event_loop_library(
        git_repo: Path, tmp_path: Path) -> None:
    """A SessionStart of the embedded default digest (no supervise.toml: the ``instructions``
    and ``repo`` stages run, forked, and print) imports none of :data:`EVENT_LOOP`; it did
    import anyio, asyncio, ssl, socket and logging for one event loop. The digest's output
    proves the stages ran through the engine."""
    (git_repo / "AGENTS.md").write_text("# Rules\nRun the tests.\n")
    (git_repo / "README.md").write_text("changed\n")
    env = {k: v for k, v in __import__("os").environ.items() if not k.startswith("GIT_")}
    env["SUPERVISE_STATE_DIR"] = str(tmp_path / "state")
    for session in ("s1", "s2"):  # the first run fills the plan cache
        stdin = _payload(git_repo, "SessionStart", session=session, source="startup")
        proc, loaded = _imported(["-m", "supervisor", "hook", "claude"], tmp_path, input=stdin,
                                 cwd=git_repo, env=env)
        assert proc.returncode == 0, proc.stderr[-2000:]
    out = proc.stdout.decode()
    assert "## Repository" in out and "README.md" in out and "Run the tests." in out, out
    assert "supervisor.engine._run" in loaded  # the stages ran through the engine
    heavy = (loaded - _interpreter_start(tmp_path)) & EVENT_LOOP
    assert not heavy, sorted(heavy)
