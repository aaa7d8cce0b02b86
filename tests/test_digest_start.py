"""Issue 13, a faster session start: what the embedded default digest no longer starts, and
what it starts earlier, without changing a byte of what it prints.

- A built-in stage with nothing to do (``memory`` without a store, ``summary`` without a
  summary file, default options) is decided by the engine with the rule its program checks
  first (``stages/_idle.py``), on the environment the program would get: no interpreter. The
  same stage with something to do, a planted entry included, still runs.
- ``instructions`` and ``repo`` start their git calls before importing their bodies; the
  answers and the refusals are those of the calls made after the imports.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from functools import partial
from pathlib import Path

import anyio
import pytest

from supervisor import SessionContext
from supervisor.config._builtins import builtin_argv, idle, stages_dir
from supervisor.config._plan import DigestPlan, StagePlan
from supervisor.engine import _spawn
from supervisor.engine._output import BufferSink
from supervisor.engine._run import run_digest
from supervisor.engine._launch import stage_env

DEFAULT = DigestPlan(budget=60, stages=(
    StagePlan(name="memory", builtin="memory"), StagePlan(name="instructions", builtin="instructions"),
    StagePlan(name="summary", builtin="summary"), StagePlan(name="repo", builtin="repo")))


def _digest(project: Path, plan: DigestPlan, monkeypatch: pytest.MonkeyPatch) -> tuple[list[str], dict[str, object], str]:
    """Run ``plan`` on ``project`` with the real engine: (the built-ins it started, each
    stage's (status, exit code, output), the digest text)."""
    started: list[str] = []
    real = _spawn.spawn

    def counting(argv: list[str], **kwargs: object) -> object:
        program = next(a for a in argv[1:] if not a.startswith("-"))  # after -I -u
        started.append(Path(program).parent.name if program.endswith("__main__.py")
                       else Path(program).stem)
        return real(argv, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(_spawn, "spawn", counting)
    ctx = SessionContext(project_dir=project, state_dir=project / ".supervise")
    sink = BufferSink()
    result = anyio.run(partial(run_digest, plan, ctx, sink=sink))
    return (started, {s.name: (s.status, s.exit_code, s.output) for s in result.stages},
            sink.getvalue().decode())


def test_idle_memory_and_summary_start_no_interpreter(git_repo: Path,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    started, stages, _ = _digest(git_repo, DEFAULT, monkeypatch)
    assert sorted(started) == ["instructions", "repo"]
    assert stages["memory"] == stages["summary"] == ("ok", 0, "")


@pytest.mark.parametrize("plant", ["store", "fifo", "dangling link", "file"])
def test_a_memory_stage_with_something_to_do_still_runs(git_repo: Path, plant: str,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    """A store, or anything planted where it would be (the stage names what it refuses)."""
    where = git_repo / ".remember"
    if plant == "store":
        where.mkdir()
        (where / "remember.md").write_text("# Handoff\nHANDOFF-BODY half done\n")
    elif plant == "fifo":
        os.mkfifo(where)
    elif plant == "dangling link":
        where.symlink_to(git_repo / "nowhere")
    else:
        where.write_text("not a folder\n")
    started, stages, text = _digest(git_repo, DEFAULT, monkeypatch)
    assert "memory" in started
    assert stages["memory"][:2] == ("ok", 0)
    if plant == "store":
        assert "HANDOFF-BODY" in text


def test_a_summary_stage_with_a_summary_still_runs(git_repo: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    (git_repo / "memory").mkdir()
    (git_repo / "memory" / "summary.md").write_text("---\nupdated_at: today\n---\nSUMMARY-BODY\n")
    started, stages, text = _digest(git_repo, DEFAULT, monkeypatch)
    assert "summary" in started and "memory" not in started
    assert "SUMMARY-BODY" in text and stages["summary"][:2] == ("ok", 0)


def test_options_or_arguments_make_a_built_in_run(git_repo: Path,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """The rule covers the defaults only: any options table, arguments, or an ``ok_exit``
    without 0 leave the decision to the program."""
    plan = DigestPlan(budget=60, stages=(
        StagePlan(name="m1", builtin="memory", options={"dir": ".remember"}),
        StagePlan(name="m2", builtin="memory", args=("x",)),
        StagePlan(name="s1", builtin="summary", ok_exit=(1,)),
        StagePlan(name="s2", builtin="summary")))
    started, stages, _ = _digest(git_repo, plan, monkeypatch)
    assert sorted(started) == ["memory", "memory", "summary"]
    assert stages["s1"][:2] == ("failed", 0)  # what the program's exit 0 gives with ok_exit=[1]
    assert stages["s2"] == ("ok", 0, "")


CASES = ["nothing", "store", "fifo", "link", "summary", "summary-link", "options",
         "no-memory-stage", "no-memory-stage-with-summary", "relative-project"]


def _case(project: Path, case: str) -> tuple[DigestPlan, SessionContext]:
    stages = [StagePlan(name="memory", builtin="memory"), StagePlan(name="summary", builtin="summary")]
    if case == "store":
        (project / ".remember").mkdir()
        (project / ".remember" / "remember.md").write_text("# Handoff\nBODY\n")
    elif case == "fifo":
        os.mkfifo(project / ".remember")
    elif case == "link":
        (project / ".remember").symlink_to("/dev/zero")
    elif case in ("summary", "no-memory-stage-with-summary"):
        (project / "memory").mkdir()
        (project / "memory" / "summary.md").write_text("SUMMARY-BODY\n")
    elif case == "summary-link":
        (project / "memory").mkdir()
        (project / "memory" / "summary.md").symlink_to("/dev/zero")
    elif case == "options":
        stages = [StagePlan(name="memory", builtin="memory", options={"max_bytes": 9000}),
                  StagePlan(name="summary", builtin="summary", options={"max_bytes": 8000})]
    if case.startswith("no-memory-stage"):
        stages = [StagePlan(name="summary", builtin="summary")]
    ctx = SessionContext(project_dir=project, state_dir=project / ".supervise")
    if case == "relative-project":
        from supervisor._record import replace

        ctx = replace(ctx, project_dir=Path(os.path.relpath(project)))
    return DigestPlan(budget=60, stages=tuple(stages)), ctx


@pytest.mark.parametrize("case", CASES)
def test_every_idle_answer_is_what_the_program_does(git_repo: Path, case: str) -> None:
    """For each stage of each case: where the rule says idle, the program run with the very
    environment the engine builds prints nothing on stdout or stderr and exits 0; the rule
    and the program's own first check are one function."""
    plan, ctx = _case(git_repo, case)
    for spec in plan.stages:
        env = stage_env(spec, ctx, "tok", plan)
        proc = subprocess.run(builtin_argv(spec.builtin or ""), cwd=git_repo, env=env,
                              stdin=subprocess.DEVNULL, capture_output=True, timeout=60)
        assert proc.returncode == 0, proc.stderr
        if idle(spec.builtin or "", env):
            assert (proc.stdout, proc.stderr) == (b"", b""), (case, spec.name)
    expected_idle = {"nothing": {"memory", "summary"}, "store": {"summary"}, "fifo": {"summary"},
                     "link": {"summary"}, "summary": {"memory"}, "summary-link": {"memory"},
                     "options": set(), "no-memory-stage": {"summary"},
                     "no-memory-stage-with-summary": {"summary"}, "relative-project": set()}[case]
    assert {s.name for s in plan.stages
            if idle(s.builtin or "", stage_env(s, ctx, "tok", plan))} == expected_idle


def test_the_programs_check_the_shared_rule_first() -> None:
    """One rule: each program's first check is ``_idle.idle`` (no copy to drift), made before
    the program imports its own package (``from memory import``)."""
    for name in ("memory", "summary"):
        text = Path(builtin_argv(name)[-1]).read_text()
        assert "from memory import" in text, name
        head = text.split("from memory import")[0]
        assert f'idle("{name}", ' in head or f'_idle("{name}", ' in head, name
    assert (stages_dir() / "_idle.py").is_file()


def test_a_broken_rule_file_makes_the_stage_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Without ``_idle.py`` (a stage folder copied without it) nothing is called idle."""
    from supervisor.config import _builtins

    monkeypatch.setattr(_builtins, "stages_dir", lambda: tmp_path)
    _builtins._idle_rule.cache_clear()
    try:
        assert not idle("memory", {"SUPERVISE_PROJECT_DIR": str(tmp_path),
                                   "SUPERVISE_STAGE_OPTIONS": "{}"})
    finally:
        _builtins._idle_rule.cache_clear()


# --- git started before the body's imports -------------------------------------------------

def _stage_env(project: Path, harness: str = "", options: dict[str, object] | None = None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SUPERVISE_", "GIT_"))}
    env.update({"SUPERVISE_PROJECT_DIR": str(project), "SUPERVISE_CWD": str(project),
                "SUPERVISE_HARNESS": harness, "SUPERVISE_STAGE_NAME": "instructions",
                "SUPERVISE_STAGE_OPTIONS": json.dumps(options or {})})
    return env


@pytest.mark.parametrize("harness", ["", "claude", "codex", "cursor", "opencode", "gemini", "pi"])
@pytest.mark.parametrize("options", [{}, {"list_nested": True}, {"list_nested": False}])
def test_the_early_listing_is_started_only_when_the_stage_lists(git_repo: Path, harness: str,
                                                               options: dict[str, object]) -> None:
    """``start_early`` starts git only where the stage surely lists nested files; the stage
    lists them exactly where it did (an early start is never wasted, a late one never missed)."""
    (git_repo / "pkg").mkdir()
    (git_repo / "pkg" / "AGENTS.md").write_text("# pkg rules\n")
    (git_repo / "pkg" / "x.py").write_text("x = 1\n")
    env = _stage_env(git_repo, harness, options)
    code = ("import os, sys; sys.path.insert(0, sys.argv[1]); "
            "from instructions.listing import start_early; l = start_early(os.environ); "
            "print(l is not None); l is not None and l.close()")
    early = subprocess.run([sys.executable, "-c", code, str(stages_dir())], env=env,
                           cwd=git_repo, capture_output=True, text=True, timeout=60)
    assert early.returncode == 0, early.stderr
    proc = subprocess.run(builtin_argv("instructions"), env=env, cwd=git_repo,
                          capture_output=True, text=True, timeout=60)
    lists = "- pkg/AGENTS.md" in proc.stdout
    assert lists == options.get("list_nested", harness not in ("claude", "cursor", "opencode"))
    if early.stdout.strip() == "True":
        assert lists


def test_the_repo_stage_without_git_says_nothing(git_repo: Path, tmp_path: Path) -> None:
    """The early calls meet a missing git as the late ones did: silent, exit 0."""
    env = _stage_env(git_repo)
    env.update({"PATH": str(tmp_path / "empty"), "SUPERVISE_STAGE_NAME": "repo"})
    proc = subprocess.run(builtin_argv("repo"), env=env, cwd=git_repo, capture_output=True,
                          timeout=60)
    assert (proc.returncode, proc.stdout, proc.stderr) == (0, b"", b"")


# --- the digest's arguments without argparse ------------------------------------------------

def test_the_usual_digest_imports_no_argparse(git_repo: Path) -> None:
    """``supervise digest -C DIR --format json`` (the usual call) never imports argparse."""
    (git_repo / "supervise.toml").write_text('[[stages]]\nname = "t"\nrun = "true"\n')
    argv = [sys.executable, "-X", "importtime", "-m", "supervisor", "digest", "-C", str(git_repo),
            "--format", "json"]
    for _ in range(2):  # the first run fills the config cache
        proc = subprocess.run(argv, capture_output=True, text=True, cwd=git_repo, timeout=60)
        assert proc.returncode == 0, proc.stderr
    loaded = {line.split("|")[-1].strip() for line in proc.stderr.splitlines()
              if line.startswith("import time:")}
    assert "supervisor.engine._run" in loaded and "argparse" not in loaded
    assert json.loads(proc.stdout)["stages"][0]["status"] == "ok"


@pytest.mark.parametrize("stage,body", [("instructions", "stage.py"), ("repo", "status.py")])
def test_git_started_early_is_killed_when_the_body_fails(git_repo: Path, tmp_path: Path,
                                                         stage: str, body: str) -> None:
    """The program starts git before importing its body; a body that fails leaves no git
    behind (the program kills and reaps it), and the stage still exits 0 with one warning.
    A fake ``git`` writes its pid and sleeps; the failing body waits for that pid (the
    handshake), so the test proves git ran before the body, then that it is gone."""
    import shutil

    from helpers import alive_and_ours

    copy = tmp_path / "stages"
    shutil.copytree(stages_dir(), copy, ignore=shutil.ignore_patterns("__pycache__"))
    pids = tmp_path / "git.pids"
    (copy / stage / body).write_text(
        "import os, time\n"
        "def ready(path):\n"
        "    try:\n"
        "        with open(path) as f:\n"
        "            return f.read().endswith('\\n')\n"
        "    except OSError:\n"
        "        return False\n"
        "deadline = time.monotonic() + 30\n"
        f"while not ready({str(pids)!r}) and time.monotonic() < deadline:\n"
        "    time.sleep(0.01)\n"
        "raise RuntimeError('planted failure')\n")
    fake = tmp_path / "bin"
    fake.mkdir()
    (fake / "git").write_text(f'#!/bin/sh\necho $$ >> "{pids}"\nexec sleep 60\n')
    (fake / "git").chmod(0o755)
    env = _stage_env(git_repo)
    env.update({"PATH": f"{fake}:{env.get('PATH', '')}", "SUPERVISE_STAGE_NAME": stage})
    proc = subprocess.run([sys.executable, str(copy / stage / "__main__.py")], env=env,
                          cwd=git_repo, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0 and proc.stdout == ""
    assert "internal error: RuntimeError: planted failure" in proc.stderr
    started = [int(p) for p in pids.read_text().split()]
    assert started and not any(alive_and_ours(pid) for pid in started)
