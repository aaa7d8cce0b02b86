"""``when = { paths = [...] }``: a stage that runs only when the session's working directory,
relative to the project root, is a matching folder or below it (lefthook's ``glob``/``root``,
pre-commit's ``files``). Validated, shown by ``supervise config``, honoured by the digest,
the hook and the re-emit."""

from __future__ import annotations

import json
import tomllib
from collections.abc import Iterator
from pathlib import Path

import pytest

from fake_harness import FakeHarness
from helpers import run_cli
from supervisor._errors import ConfigError
from supervisor.config._plan import StagePlan, path_matches, unmet
from supervisor.config._schema import parse_config

CONFIG = """\
budget = 30
[[stages]]
name = "widget"
run = ["sh", "-c", "echo WIDGET-STAGE"]
reemit = true
when = { paths = ["packages/widget/**"] }
[[stages]]
name = "always"
run = ["sh", "-c", "echo ALWAYS"]
reemit = true
"""


@pytest.fixture
def project(git_repo: Path) -> Path:
    (git_repo / "supervise.toml").write_text(CONFIG)
    for folder in ("packages/widget/src", "packages/gadget", "docs"):
        (git_repo / folder).mkdir(parents=True)
    return git_repo


@pytest.mark.parametrize("where, expected", [
    ("packages/widget", True), ("packages/widget/src", True), ("packages/widget2", False),
    ("packages", False), ("", False), ("docs", False)])
def test_the_folder_or_below_matches(where: str, expected: bool) -> None:
    assert path_matches(("packages/widget/**",), where) is expected


def test_globs_within_and_across_folders() -> None:
    assert path_matches(("packages/*",), "packages/a/b")  # an ancestor matches
    assert not path_matches(("packages/*",), "packages")
    assert path_matches(("**/api",), "services/billing/api/v1")
    assert path_matches(("**",), "") and path_matches(("apps/[!x]*",), "apps/web")
    assert not path_matches(("apps/[!x]*",), "apps/xray")


def test_unmet_says_where_the_session_is() -> None:
    stage = StagePlan("s", run=("true",), when={"paths": ("packages/widget/**",)})
    assert unmet(stage, "", "", "packages/widget/src") == ""
    assert unmet(stage, "", "", "") == ("when.paths is packages/widget/**; this session's "
                                        "directory is the project root")
    assert "outside the project" in unmet(stage, "", "", None)


@pytest.mark.parametrize("paths, message", [
    ("[]", "when.paths is empty, so the stage would never run"),
    ('["/abs/x"]', "when.paths: '/abs/x' is absolute"),
    ('["../up"]', "when.paths: '../up' holds '..'"),
    ('["a\\\\b"]', "holds a backslash"),
    ('[""]', "when.paths: '' is empty"),
    ('"packages"', "key 'when.paths'"),
])
def test_a_bad_paths_condition_is_one_line_naming_the_stage(paths: str, message: str) -> None:
    data = tomllib.loads(f'[[stages]]\nname = "x"\nrun = ["true"]\nwhen = {{ paths = {paths} }}\n')
    with pytest.raises(ConfigError) as err:
        parse_config(data, "supervise.toml")
    text = str(err.value)
    assert "\n" not in text and "[[stages]] 'x'" in text and message in text, text


def test_config_shows_the_paths(project: Path) -> None:
    stages = {s["name"]: s for s in json.loads(run_cli("config", cwd=project).stdout)["stages"]}
    assert stages["widget"]["when"] == {"source": None, "harness": None,
                                        "paths": ["packages/widget/**"]}


def test_terminal_digest_runs_it_only_in_the_package(project: Path) -> None:
    root = run_cli("digest", cwd=project).stdout.decode()
    assert "ALWAYS" in root and "WIDGET-STAGE" not in root
    inside = run_cli("digest", cwd=project / "packages" / "widget" / "src").stdout.decode()
    assert "ALWAYS" in inside and "WIDGET-STAGE" in inside
    beside = run_cli("digest", "-C", str(project / "packages" / "gadget")).stdout.decode()
    assert "WIDGET-STAGE" not in beside
    run = run_cli("digest", "--only", "widget", cwd=project)
    assert ("--only widget: skipped by its condition (when.paths is packages/widget/**; this "
            "session's directory is the project root)") in run.stderr.decode()


@pytest.fixture
def claude(tmp_path: Path) -> Iterator[FakeHarness]:
    fake = FakeHarness(tmp_path / "harnesses", "claude")
    yield fake
    fake.close()


def test_hook_and_reemit_take_the_payload_cwd(project: Path, claude: FakeHarness) -> None:
    def hook(source: str, cwd: Path, sid: str) -> str:
        data = json.dumps({"session_id": sid, "cwd": str(cwd), "source": source,
                           "hook_event_name": "SessionStart"}).encode()
        run = claude.run(["hook"], cwd=project, stdin=data)
        assert run.returncode == 0, run.stderr
        return run.text

    widget = project / "packages" / "widget"
    start = hook("startup", widget, "s1")
    assert "WIDGET-STAGE" in start and "ALWAYS" in start
    again = hook("compact", widget, "s1")
    assert again.startswith("SESSION START (CONTEXT RE-EMIT") and "WIDGET-STAGE" in again
    docs = project / "docs"
    assert "WIDGET-STAGE" not in hook("startup", docs, "s2")
    elsewhere = hook("compact", docs, "s2")
    assert elsewhere.startswith("SESSION START (CONTEXT RE-EMIT")
    assert "ALWAYS" in elsewhere and "WIDGET-STAGE" not in elsewhere
