"""One declaration of a stage's fields (``supervisor.config._plan.StagePlan``), of the
top-level config keys (``DigestPlan``) and of a stage outcome's
(``supervisor.engine._results.StageSummary``): the others are made from them.

``StageSpec``, the config model, took its 19 fields from its own declaration and ``StagePlan``
declared them again; ``StageResult`` and the status record ``StageSummary`` declared the
same six. A field added to the one declaration reaches every form without another edit.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

_NEW_FIELD = r"""
from supervisor._record import field, record
from supervisor.config import _plan

source = open(_plan.__file__).read()
start = source.index("@record\nclass StagePlan:")
end = source.index("\n\n\n", start)
namespace = dict(vars(_plan))
exec("from __future__ import annotations\n" + source[start:end].replace('    stderr: Literal', '    retries: int = 0\n    stderr: Literal'),
     namespace)
_plan.StagePlan = namespace["StagePlan"]

from supervisor.config._schema import StageSpec, parse_config
from supervisor.config._plan import as_plan

assert "retries" in StageSpec.model_fields, list(StageSpec.model_fields)
config = parse_config({"stages": [{"name": "a", "run": ["true"], "retries": 2}]}, "t.toml")
assert config.stages[0].retries == 2
assert as_plan(config).stages[0].retries == 2
try:
    parse_config({"stages": [{"name": "a", "run": ["true"], "retries": "x"}]}, "t.toml")
except Exception as err:
    assert "retries" in str(err), err
else:
    raise AssertionError("a bad value of the new key was accepted")
print("ok")
"""


def test_a_new_stage_field_reaches_the_config_model() -> None:
    """One field added to StagePlan is a config key StageSpec validates (its type and
    default from StagePlan) and the plan the engine runs carries; fails on the old code,
    whose StageSpec declared its fields itself (an unknown key)."""
    proc = subprocess.run([sys.executable, "-c", _NEW_FIELD], capture_output=True, text=True,
                          timeout=60, cwd=ROOT)
    assert proc.returncode == 0 and proc.stdout.strip() == "ok", proc.stderr[-3000:]


_NEW_TOP_KEY = r"""
from supervisor.config import _plan

source = open(_plan.__file__).read()
start = source.index("@record\nclass DigestPlan:")
end = source.index("\n    @classmethod", start)
namespace = dict(vars(_plan))
exec("from __future__ import annotations\n" + source[start:end].replace(
    '    source: str', '    quiet: bool = False\n    source: str'), namespace)
_plan.DigestPlan = namespace["DigestPlan"]

from supervisor.config._schema import DigestConfig, parse_config

assert "quiet" in DigestConfig.model_fields, list(DigestConfig.model_fields)
assert parse_config({"quiet": True}, "t.toml").quiet is True
print("ok")
"""


def test_a_new_top_level_key_reaches_the_config_model() -> None:
    """Likewise a field added to DigestPlan is a key DigestConfig validates (fails on the
    old code, whose DigestConfig declared the top-level keys and their defaults again)."""
    proc = subprocess.run([sys.executable, "-c", _NEW_TOP_KEY], capture_output=True, text=True,
                          timeout=60, cwd=ROOT)
    assert proc.returncode == 0 and proc.stdout.strip() == "ok", proc.stderr[-3000:]


def test_the_stage_model_is_made_from_the_plan() -> None:
    """Bounds and checks stay the model's: a name's pattern, a timeout's bound, one program."""
    import pytest
    from pydantic import ValidationError

    from supervisor.config._schema import StageSpec

    with pytest.raises(ValidationError):
        StageSpec(name="-bad", run=["true"])
    with pytest.raises(ValidationError):
        StageSpec(name="a", run=["true"], timeout=0)
    with pytest.raises(ValidationError):
        StageSpec(name="a")  # neither run nor builtin
    spec = StageSpec(name="a", run="echo hi")
    assert spec.run == ["echo", "hi"] and spec.env == {} and spec.max_tasks == 512


def test_a_stage_outcome_is_summarised_by_its_one_declaration(tmp_path: Path) -> None:
    """``last-digest.json`` and ``--format json`` hold a stage's StageSummary fields (the
    status record adds no field and drops only the output); StageResult is StageSummary
    plus its output. Fails on the old code (no StageSummary in the engine's results)."""
    from supervisor._record import fields
    from supervisor.config._context import SessionContext
    from supervisor.engine._results import DigestResult, StageResult, StageSummary
    from supervisor.session._routing import LAST_DIGEST_FILE, record_digest

    assert fields(StageResult) == (*fields(StageSummary), "output")
    result = DigestResult((StageResult("a", "ok", 0, 0.25, 3, False, "hi\n"),), False, 5.0, 0.3)
    state = tmp_path / "state"
    state.mkdir()
    record_digest(state, result, SessionContext(project_dir=str(tmp_path), state_dir=str(state)))
    kept = json.loads((state / LAST_DIGEST_FILE).read_text())["stages"][0]
    assert list(kept) == list(fields(StageSummary)) and "output" not in kept
    out: list[bytes] = []
    result.write_json(out.append)
    stage = json.loads(b"".join(out))["stages"][0]
    # The document streams: a stage's output is written as it comes, its summary after the
    # stage ends, so the keys are the same set in another order.
    assert sorted(stage) == sorted([*fields(StageSummary), "output"])
    assert stage["output"] == "hi\n"
