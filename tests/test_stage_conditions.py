"""Stage conditions (``when = { source = [...], harness = [...] }``): validated like every
other key, shown by ``supervise config``, honoured by the digest, the hook, the re-emit and
``--only``; a stage skipped by its condition is not "unfinished"."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from fake_harness import FakeHarness
from helpers import run_cli
from supervisor._errors import ConfigError
from supervisor.config._schema import parse_config
from supervisor.config._plan import StagePlan, unmet

CONFIG = """\
budget = 30
grace = 0.2
[[stages]]
name = "always"
run = ["sh", "-c", "echo ALWAYS-$SUPERVISE_SOURCE"]
reemit = true
[[stages]]
name = "fresh"
run = ["sh", "-c", "echo FRESH-ONLY"]
reemit = true
when = { source = ["startup", "clear"] }
[[stages]]
name = "after-compact"
run = ["sh", "-c", "echo AFTER-COMPACT"]
reemit = true
when = { source = ["compact"] }
[[stages]]
name = "codex-only"
run = ["sh", "-c", "echo CODEX-ONLY"]
when = { harness = ["codex"] }
[[stages]]
name = "terminal-only"
run = ["sh", "-c", "echo TERMINAL-ONLY"]
when = { harness = ["terminal"] }
[[stages]]
name = "waits"
needs = ["codex-only"]
run = ["sh", "-c", "echo WAITS-RAN"]
[[stages]]
name = "late"
deferred = true
run = ["sh", "-c", "touch late-ran; echo LATE"]
when = { harness = ["gemini"] }
"""


@pytest.fixture
def project(git_repo: Path) -> Path:
    (git_repo / "supervise.toml").write_text(CONFIG)
    return git_repo


@pytest.fixture
def harness(tmp_path: Path) -> Iterator[Callable[[str], FakeHarness]]:
    made: list[FakeHarness] = []

    def make(name: str) -> FakeHarness:
        made.append(FakeHarness(tmp_path / "harnesses", name))
        return made[-1]

    yield make
    for h in made:
        h.close()


@pytest.mark.parametrize("when, message", [
    ('{ source = ["startup", "boot"] }', "when.source: 'boot' is not one of startup, new"),
    ('{ harness = ["Claude"] }', "when.harness: 'Claude' is not one of claude"),
    ('{ source = [] }', "when.source is empty, so the stage would never run"),
    ('{ sources = ["startup"] }', "key 'when.sources': unknown key"),
    ('"startup"', "key 'when'"),
])
def test_a_bad_condition_is_one_line_naming_the_stage_and_key(when: str, message: str) -> None:
    import tomllib

    data = tomllib.loads(f'[[stages]]\nname = "x"\nrun = ["true"]\nwhen = {when}\n')
    with pytest.raises(ConfigError) as err:
        parse_config(data, "supervise.toml")
    text = str(err.value)
    assert "\n" not in text and "[[stages]] 'x'" in text and message in text, text


def test_unmet_reads_a_terminal_as_a_startup_without_harness() -> None:
    stage = StagePlan("s", run=("true",), when={"source": ("startup",), "harness": ("terminal",)})
    assert unmet(stage, "", "") == ""
    assert unmet(stage, "compact", "") == "when.source is startup; this run's is compact"
    assert unmet(stage, "startup", "claude") == "when.harness is terminal; this run's is claude"
    assert unmet(StagePlan("t", run=("true",)), "compact", "pi") == ""


def test_config_shows_the_condition(project: Path) -> None:
    run = run_cli("config", cwd=project)
    assert run.returncode == 0, run.stderr
    stages = {s["name"]: s for s in json.loads(run.stdout)["stages"]}
    assert stages["fresh"]["when"] == {"source": ["startup", "clear"], "harness": None,
                                       "paths": None}
    assert stages["always"]["when"] is None


def test_terminal_digest_honours_conditions(project: Path) -> None:
    run = run_cli("digest", "--format", "json", cwd=project)
    assert run.returncode == 0, run.stderr
    status = {s["name"]: s["status"] for s in json.loads(run.stdout)["stages"]}
    assert status == {"always": "ok", "fresh": "ok", "after-compact": "skipped",
                      "codex-only": "skipped", "terminal-only": "ok", "waits": "ok",
                      "late": "skipped"}
    assert not (project / "late-ran").exists()
    text = run_cli("digest", "--source", "compact", "--harness", "codex", cwd=project).stdout.decode()
    assert "AFTER-COMPACT" in text and "CODEX-ONLY" in text and "ALWAYS-compact" in text
    assert "FRESH-ONLY" not in text and "TERMINAL-ONLY" not in text


def test_only_honours_the_condition_and_says_why(project: Path) -> None:
    run = run_cli("digest", "--only", "after-compact", cwd=project)
    assert run.returncode == 0 and b"AFTER-COMPACT" not in run.stdout
    assert ("--only after-compact: skipped by its condition (when.source is compact; this "
            "run's is startup)") in run.stderr.decode()
    run = run_cli("digest", "--only", "after-compact", "--source", "compact", cwd=project)
    assert b"AFTER-COMPACT" in run.stdout and b"skipped by its condition" not in run.stderr


def test_hook_and_reemit_honour_conditions_and_completion_still_records(
        project: Path, harness: Callable[[str], FakeHarness]) -> None:
    claude = harness("claude")

    def hook(source: str) -> str:
        data = json.dumps({"session_id": "s1", "cwd": str(project), "source": source,
                           "hook_event_name": "SessionStart"}).encode()
        run = claude.run(["hook"], cwd=project, stdin=data)
        assert run.returncode == 0, run.stderr
        return run.text

    start = hook("startup")
    assert "ALWAYS-startup" in start and "FRESH-ONLY" in start
    assert "AFTER-COMPACT" not in start and "CODEX-ONLY" not in start
    assert "TERMINAL-ONLY" not in start and "WAITS-RAN" in start
    # skipped by a condition is not unfinished: the completion is recorded
    assert "not recorded" not in start
    assert (project / ".supervise" / "complete.json").is_file()
    last = json.loads((project / ".supervise" / "last-digest.json").read_text())
    assert last["complete"] is True
    again = hook("compact")
    assert again.startswith("SESSION START (CONTEXT RE-EMIT")  # the start was proven
    assert "ALWAYS-compact" in again and "AFTER-COMPACT" in again
    assert "FRESH-ONLY" not in again
    assert not (project / "late-ran").exists()


def test_harness_condition_under_a_real_ancestor(project: Path,
                                                harness: Callable[[str], FakeHarness]) -> None:
    codex = harness("codex")
    data = json.dumps({"session_id": "c1", "cwd": str(project), "source": "startup",
                       "hook_event_name": "SessionStart"}).encode()
    run = codex.run(["hook", "codex"], cwd=project, stdin=data)
    assert "CODEX-ONLY" in run.text and "TERMINAL-ONLY" not in run.text
