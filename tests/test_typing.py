"""The package type-checks under ``mypy --strict`` (pyproject's [tool.mypy])."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.timeout(300)
def test_mypy_strict_passes() -> None:
    pytest.importorskip("mypy", reason="mypy is in the test extra: pip install -e '.[test]'")
    proc = subprocess.run([sys.executable, "-m", "mypy", "supervisor"], cwd=ROOT,
                          capture_output=True, text=True, timeout=280)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]


_USES_THE_MODELS = '''\
from supervisor import DigestConfig, StageSpec


def use(stage: StageSpec, config: DigestConfig) -> None:
    name: int = stage.name
    stage.nmae
    first: StageSpec = config.stages[0]
    run: tuple[str, ...] | None = first.run
    source: bytes = config.stages_from
'''


@pytest.mark.timeout(300)
def test_the_config_models_fields_are_typed_for_type_checkers(tmp_path: Path) -> None:
    """``StageSpec`` and ``DigestConfig`` are made at import from the plan's one declaration;
    to mypy their fields were ``Any`` (a ``__getattr__``), so a misspelt key or a wrong type
    passed. Now each is checked: StagePlan's types, ``run`` a list, ``stages`` of StageSpec."""
    pytest.importorskip("mypy", reason="mypy is in the test extra: pip install -e '.[test]'")
    user = tmp_path / "uses_the_models.py"
    user.write_text(_USES_THE_MODELS)
    proc = subprocess.run([sys.executable, "-m", "mypy", "--strict", str(user)], cwd=ROOT,
                          capture_output=True, text=True, timeout=280)
    errors = [line.split(": error: ")[1] for line in proc.stdout.splitlines() if ": error: " in line]
    assert len(errors) == 4, proc.stdout
    assert any('"str", variable has type "int"' in e for e in errors), errors
    assert any('has no attribute "nmae"' in e for e in errors), errors
    assert any('"list[str] | None", variable has type "tuple[str, ...] | None"' in e
               for e in errors), errors
    assert any('"str", variable has type "bytes"' in e for e in errors), errors
