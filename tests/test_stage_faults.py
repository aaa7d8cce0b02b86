"""Every built-in stage exits 0 with no traceback whatever its environment (memory.md
requirement 20: a stage must never fail the digest by crashing)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from supervisor.config._builtins import builtin_argv, list_builtins

FAULTS = {
    "missing project dir": {"SUPERVISE_PROJECT_DIR": "/nonexistent/project"},
    "project dir is a file": {"SUPERVISE_PROJECT_DIR": "__FILE__"},
    "garbage options": {"SUPERVISE_STAGE_OPTIONS": "{not json"},
    "options not an object": {"SUPERVISE_STAGE_OPTIONS": "[1, 2]"},
    "wrongly typed options": {"SUPERVISE_STAGE_OPTIONS": '{"max_bytes": "big", "timeout": -1, "dir": 5}'},
    "state dir is a file": {"SUPERVISE_STATE_DIR": "__FILE__"},
    "unknown source": {"SUPERVISE_SOURCE": "\u2603" * 50},
}


@pytest.mark.parametrize("stage", list_builtins())
@pytest.mark.parametrize("fault", sorted(FAULTS))
def test_builtin_stage_survives(stage: str, fault: str, git_repo: Path, tmp_path: Path) -> None:
    a_file = tmp_path / "a-file"
    a_file.write_text("x\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith("SUPERVISE_")}
    env.update({"SUPERVISE_PROJECT_DIR": str(git_repo), "SUPERVISE_STATE_DIR": str(tmp_path / "st"),
                "SUPERVISE_SOURCE": "startup", "SUPERVISE_MODE": "full", "SUPERVISE_HARNESS": "claude",
                "SUPERVISE_STAGE_NAME": stage, "SUPERVISE_STAGE_OPTIONS": "{}"})
    env.update({k: (str(a_file) if v == "__FILE__" else v) for k, v in FAULTS[fault].items()})
    if stage == "network":
        env["SUPERVISE_STAGE_OPTIONS"] = env["SUPERVISE_STAGE_OPTIONS"].replace("{}", '{"timeout": 2}')
    proc = subprocess.run(builtin_argv(stage), cwd=git_repo, env=env, stdin=subprocess.DEVNULL,
                          capture_output=True, timeout=60)
    assert proc.returncode == 0, proc.stdout[-500:] + proc.stderr[-1500:]
    assert b"Traceback" not in proc.stdout + proc.stderr
