"""The engine's own overheads: parallelism limit, output copies, lazy imports, config cache."""

from __future__ import annotations

import subprocess
import sys
from functools import partial
from pathlib import Path
from typing import Any

import anyio
import pytest

from supervisor import DigestConfig, SessionContext, StageSpec, run_digest
from supervisor._errors import ConfigError
from supervisor.engine._output import BufferSink, ChunkSink, OrderedOutput
from supervisor.engine._results import DigestResult

# Each stage registers itself in slots/, records how many stages are registered, waits, leaves.
SLOT = ('mkdir -p slots && touch "slots/$SUPERVISE_STAGE_NAME" && ls slots | wc -l >> counts '
        '&& sleep 0.3 && rm "slots/$SUPERVISE_STAGE_NAME"')


def digest(tmp_path: Path, stages: list[dict[str, Any]], **kwargs: Any) -> DigestResult:
    config = DigestConfig(budget=60, grace=0.3, stages=tuple(StageSpec(**s) for s in stages),
                          **kwargs)
    ctx = SessionContext(project_dir=tmp_path, state_dir=tmp_path / ".supervise")
    return anyio.run(partial(run_digest, config, ctx))


@pytest.mark.parametrize("limit", [1, 2])
def test_max_parallel_bounds_running_stages(tmp_path: Path, limit: int) -> None:
    stages = [{"name": f"s{i}", "run": ["/bin/sh", "-c", SLOT]} for i in range(5)]
    result = digest(tmp_path, stages, max_parallel=limit)
    assert [s.status for s in result.stages] == ["ok"] * 5
    counts = [int(x) for x in (tmp_path / "counts").read_text().split()]
    assert len(counts) == 5 and max(counts) <= limit


def test_max_parallel_zero_means_no_limit(tmp_path: Path) -> None:
    stages = [{"name": f"s{i}", "run": ["/bin/sh", "-c", "echo $SUPERVISE_STAGE_NAME"]}
              for i in range(80)]
    result = digest(tmp_path, stages, max_parallel=0)
    assert [s.output for s in result.stages] == [f"s{i}\n" for i in range(80)]


def test_max_parallel_is_validated() -> None:
    from supervisor.config._schema import parse_config

    with pytest.raises(ConfigError, match="max_parallel"):
        parse_config({"max_parallel": -1}, "test.toml")
    with pytest.raises(ConfigError, match="max_parallel"):
        parse_config({"max_parallel": "many"}, "test.toml")
    assert parse_config({"max_parallel": 0}, "test.toml").max_parallel == 0
    assert parse_config({}, "test.toml").max_parallel == 64


def test_bytes_past_the_cap_are_counted_not_kept() -> None:
    sink = BufferSink()
    out = OrderedOutput(sink, [("big", 10, None)], 1 << 20)
    out.feed(0, b"0123456789")
    out.feed(0, b"\xff" * 1000)  # invalid UTF-8 past the cap: never decoded
    assert out.stage_bytes(0) == (1010, True)
    assert out._slots[0].decoder.getstate() == (b"", 0)
    out.finish(0)
    assert out.stage_text(0).startswith("0123456789\n[supervise] OUTPUT CUT: stage 'big' printed 1010")


def test_ascii_and_utf8_are_kept_as_sent() -> None:
    sink = BufferSink()
    out = OrderedOutput(sink, [("a", 1 << 20, None)], 1 << 20)
    chunks = [b"plain ascii ", "caf\u00e9 ".encode()[:4], "caf\u00e9 ".encode()[4:], b"\xff end\n"]
    for chunk in chunks:
        out.feed(0, chunk)
    out.finish(0)
    assert out.stage_text(0) == "plain ascii caf\u00e9 \ufffd end\n"
    assert sink.getvalue().decode() == out.stage_text(0)


def test_chunk_sink_keeps_references() -> None:
    sink = ChunkSink()
    data = b"x" * 1000
    sink.write(data)
    sink.write(b"y")
    assert sink._chunks[0] is data
    assert sink.text() == "x" * 1000 + "y"


def test_stage_text_is_decoded_once(tmp_path: Path) -> None:
    result = digest(tmp_path, [{"name": "a", "run": [sys.executable, "-c", "print('x' * 5000)"]}])
    assert result.stages[0].output == "x" * 5000 + "\n"
    assert result.text.endswith(result.stages[0].output)


def test_config_cache_keeps_an_entry_per_installation(tmp_path: Path, git_repo: Path) -> None:
    """Two installations used on one project (two venvs, two checkouts) must not evict each
    other: after each ran once, each finds its own entry (no pydantic import: a hit)."""
    import shutil

    import supervisor

    package = Path(supervisor.__file__).parent
    roots = []
    for name in ("install a", "install b"):
        root = tmp_path / name
        shutil.copytree(package, root / "supervisor", ignore=shutil.ignore_patterns("__pycache__"))
        shutil.copytree(package.parent / "stages", root / "stages",
                        ignore=shutil.ignore_patterns("__pycache__"))
        roots.append(root)
    (git_repo / "supervise.toml").write_text("budget = 33\n")
    code = ("import sys\nfrom pathlib import Path\nfrom supervisor.config._plancache import load_plan\n"
            f"plan = load_plan(Path({str(git_repo)!r}))\n"
            "print(plan.budget, 'pydantic' in sys.modules)")
    cache = tmp_path / "cache"

    def load(root: Path) -> str:
        proc = subprocess.run([sys.executable, "-P", "-c", code], capture_output=True, text=True,
                              env={**__import__("os").environ, "PYTHONPATH": str(root),
                                   "XDG_CACHE_HOME": str(cache)}, timeout=60)
        assert proc.returncode == 0, proc.stderr
        return proc.stdout.strip()

    assert [load(roots[0]), load(roots[1])] == ["33.0 True", "33.0 True"]  # misses: validated
    assert [load(roots[0]), load(roots[1])] == ["33.0 False", "33.0 False"]  # both hit
    assert len(list(cache.rglob("config-cache-*.json"))) == 2


def test_a_streaming_only_digest_keeps_nothing(tmp_path: Path) -> None:
    """keep_output=False (a terminal digest): every byte reaches the sink, nothing is held."""
    sink = BufferSink()
    out = OrderedOutput(sink, [("a", 1 << 20, "A"), ("b", 1 << 20, None)], 1 << 20, keep=False)
    out.feed(1, b"second\n")  # buffered until 'a' ends (declared order), then released
    out.feed(0, b"first")
    out.finish(0)
    out.finish(1)
    assert sink.getvalue() == b"## A\nfirst\nsecond\n"
    assert out.stage_text(0) == out.stage_text(1) == ""
    assert not any(slot.kept or slot.shown or slot.pending for slot in out._slots)
    config = DigestConfig(budget=60, stages=(StageSpec(name="a", run=("echo", "hi")),))
    ctx = SessionContext(project_dir=tmp_path, state_dir=tmp_path / ".supervise")
    streamed = BufferSink()
    result = anyio.run(partial(run_digest, config, ctx, sink=streamed, keep_output=False))
    assert streamed.getvalue() == b"hi\n" and result.text == "" and result.stages[0].bytes == 3


@pytest.mark.parametrize("stage", ["memory", "summary"])
def test_built_in_stage_with_nothing_to_do_skips_its_imports(tmp_path: Path, stage: str) -> None:
    """No store (memory) / no summary file: the stage decides before importing its modules;
    with the file present it takes the full path (and still exits 0)."""
    from supervisor.config._builtins import builtin_argv

    env = {**__import__("os").environ, "SUPERVISE_PROJECT_DIR": str(tmp_path),
           "SUPERVISE_STATE_DIR": str(tmp_path / ".supervise"), "SUPERVISE_STAGE_OPTIONS": "{}"}
    argv = builtin_argv(stage)
    quick = subprocess.run([argv[0], "-X", "importtime", *argv[1:]], capture_output=True,
                           text=True, env=env, timeout=60)
    assert (quick.returncode, quick.stdout) == (0, "")
    assert "memory.common" not in quick.stderr
    if stage == "memory":
        (tmp_path / ".remember").mkdir()
    else:
        (tmp_path / "memory").mkdir()
        (tmp_path / "memory" / "summary.md").write_text("---\nkind: summary\n---\nSUMMARY BODY\n")
    full = subprocess.run([argv[0], "-X", "importtime", *argv[1:]], capture_output=True,
                          text=True, env=env, timeout=60)
    assert full.returncode == 0 and "memory.common" in full.stderr
    if stage == "summary":
        assert "SUMMARY BODY" in full.stdout


def _loaded(argv: list[str], cwd: Path) -> set[str]:
    proc = subprocess.run([sys.executable, "-X", "importtime", "-m", "supervisor", *argv],
                          capture_output=True, cwd=cwd, timeout=60)
    assert proc.returncode == 0, proc.stderr
    return {line.split("|")[-1].strip() for line in proc.stderr.decode().splitlines()
            if line.startswith("import time:")}


def test_run_and_digest_import_no_psutil_or_pydantic_at_start(git_repo: Path) -> None:
    """`supervise run` and a digest whose stages end cleanly never import psutil (process
    facts come from /proc) nor pydantic (the config comes from the cache)."""
    (git_repo / "supervise.toml").write_text('[[stages]]\nname = "t"\nrun = "true"\n')
    assert not _loaded(["run", "--", "true"], git_repo) & {"psutil", "pydantic"}
    _loaded(["digest"], git_repo)  # the first run validates the config and fills the cache
    loaded = _loaded(["digest"], git_repo)
    if sys.platform.startswith("linux"):
        assert "psutil" not in loaded
    assert "pydantic" not in loaded


def test_stage_env_follows_changes_of_the_environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The inherited environment is decoded once, yet a change of os.environ shows up in
    the next stage's environment (and git's and our own variables never do)."""
    from supervisor.config._plan import DigestPlan, StagePlan
    from supervisor.engine._launch import stage_env

    plan = DigestPlan(stages=(StagePlan(name="a", builtin="memory"), StagePlan(name="b", run=("true",))))
    ctx = SessionContext(project_dir=tmp_path, state_dir=tmp_path / ".supervise")
    monkeypatch.setenv("WK13_PROBE", "one")
    monkeypatch.setenv("GIT_DIR", "/elsewhere")
    first = stage_env(plan.stages[1], ctx, "tok", plan)
    assert first["WK13_PROBE"] == "one" and "GIT_DIR" not in first
    assert first["SUPERVISE_DIGEST_BUILTINS"] == "memory"
    monkeypatch.setenv("WK13_PROBE", "two")
    monkeypatch.setenv("SUPERVISE_SOMETHING", "x")
    second = stage_env(plan.stages[1], ctx, "tok", plan)
    assert second["WK13_PROBE"] == "two" and "SUPERVISE_SOMETHING" not in second
    second["MUTATED"] = "1"
    assert "MUTATED" not in stage_env(plan.stages[1], ctx, "tok", plan)
