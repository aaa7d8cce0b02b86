"""The watchdog under stress (issue 10): bounded kills, continuous reaping, resource caps, every
abnormal end named, descriptor hygiene, quiet early signals, strict numbers in the config.

Real processes, real signals. The hostile cases also run under a synthetic CPU load (busy
loops on every core, ``cpu_load``), where they must pass just as reliably.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from helpers import run_cli

RES = Path(__file__).parent / "resources"


def write_config(project: Path, body: str) -> None:
    (project / "supervise.toml").write_text(body)


@pytest.mark.parametrize(("body", "key"), [
    ("budget = inf\n", "budget"),
    ("budget = nan\n", "budget"),
    ("budget = 1e9\n", "budget"),
    ("grace = inf\n", "grace"),
    ("grace = -1\n", "grace"),
    ('[[stages]]\nname = "a"\nrun = "true"\ntimeout = inf\n', "timeout"),
    ('[[stages]]\nname = "a"\nrun = "true"\ntimeout = 1e12\n', "timeout"),
    ('[[stages]]\nname = "a"\nrun = "true"\nmax_tasks = 0\n', "max_tasks"),
    ('[[stages]]\nname = "a"\nrun = "true"\nmax_tasks = 99999999999\n', "max_tasks"),
    ('[[stages]]\nname = "a"\nrun = "true"\nmax_memory = 12\n', "max_memory"),
    ('[[stages]]\nname = "a"\nrun = "true"\nmax_memory = inf\n', "max_memory"),
])
def test_non_finite_or_absurd_numbers_are_config_errors(tmp_path: Path, body: str, key: str) -> None:
    """Issue 10, example 8: `budget = inf` was accepted and a SIGTERM then crashed the banner."""
    write_config(tmp_path, body)
    proc = run_cli("config", cwd=tmp_path)
    err = proc.stderr.decode()
    assert proc.returncode == 1 and len(err.strip().splitlines()) == 1, err
    assert f"'{key}'" in err and "supervise.toml" in err


@pytest.mark.parametrize(("var", "value"), [("SUPERVISE_TIMEOUT", "inf"), ("SUPERVISE_TIMEOUT", "1e9"),
                                            ("SUPERVISE_GRACE", "nan"), ("SUPERVISE_GRACE", "1e6")])
def test_non_finite_or_absurd_environment_overrides_are_errors(tmp_path: Path, var: str,
                                                                value: str) -> None:
    proc = run_cli("config", cwd=tmp_path, env={**os.environ, var: value})
    assert proc.returncode == 1 and var.encode() in proc.stderr and b"Traceback" not in proc.stderr


@pytest.mark.parametrize("argv", [["digest", "--budget", "inf"], ["digest", "--grace", "nan"],
                                  ["digest", "--budget", "1e9"], ["run", "--budget", "inf", "--", "true"],
                                  ["run", "--grace", "inf", "--", "true"]])
def test_non_finite_flags_are_usage_errors(tmp_path: Path, argv: list[str]) -> None:
    proc = run_cli(*argv, cwd=tmp_path)
    assert proc.returncode in (2, 125) and b"Traceback" not in proc.stderr
    assert b"--budget" in proc.stderr or b"--grace" in proc.stderr
