"""Numeric config keys: booleans are never numbers, ``inline_cap`` is checked, byte bounds read
well (adversarial-tester report)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from supervisor.config._schema import parse_config
from supervisor._errors import ConfigError


def _error(data: dict[str, Any]) -> str:
    with pytest.raises(ConfigError) as info:
        parse_config(data, "supervise.toml")
    message = str(info.value)
    assert "\n" not in message
    return message


@pytest.mark.parametrize("key", ["budget", "grace", "max_parallel", "max_output", "reemit_budget"])
@pytest.mark.parametrize("value", [True, False])
def test_boolean_is_not_a_number_at_top_level(key: str, value: bool) -> None:
    message = _error({key: value, "stages": []})
    assert f"key '{key}'" in message and "not true or false" in message


@pytest.mark.parametrize(("key", "value"), [
    ("timeout", True), ("max_tasks", True), ("max_memory", True), ("max_output", False),
    ("ok_exit", [True]), ("ok_exit", [0, False]),
])
def test_boolean_is_not_a_number_in_a_stage(key: str, value: object) -> None:
    message = _error({"stages": [{"name": "echo", "run": ["echo", "hi"], key: value}]})
    assert f"key '{key}'" in message and "not true or false" in message and "'echo'" in message


def test_whole_numbers_still_read_as_numbers() -> None:
    config = parse_config({"budget": 5, "grace": 0, "max_parallel": 2, "stages": [
        {"name": "echo", "run": ["echo"], "timeout": 3, "ok_exit": [0, 1]}]}, "supervise.toml")
    assert config.budget == 5.0 and config.grace == 0.0 and config.stages[0].ok_exit == (0, 1)


@pytest.mark.parametrize("value", [0, 1, 100, 999, -1])
def test_inline_cap_below_the_pointer_room_is_an_error(value: int) -> None:
    message = _error({"inline_cap": {"claude": value}, "stages": []})
    assert "key 'inline_cap'" in message and "at least 1000" in message


@pytest.mark.parametrize("value", [True, False, "9000", 9000.5])
def test_inline_cap_takes_only_whole_numbers(value: object) -> None:
    message = _error({"inline_cap": {"claude": value}, "stages": []})
    assert "inline_cap" in message and "number" in message


def test_inline_cap_unknown_harness_is_an_error() -> None:
    message = _error({"inline_cap": {"nosuch": 5000}, "stages": []})
    assert "'nosuch' is not a harness" in message and "claude" in message


def test_inline_cap_smallest_accepted_value_keeps_the_pointer(tmp_path: Path) -> None:
    """At the smallest cap allowed the hook still names the saved digest, whole."""
    (tmp_path / "supervise.toml").write_text(
        "[inline_cap]\nclaude = 1000\n[[stages]]\nname = \"big\"\n"
        "run = [\"python3\", \"-c\", \"print('z' * 6000)\"]\n")
    payload = json.dumps({"session_id": "s", "cwd": str(tmp_path), "source": "startup",
                          "hook_event_name": "SessionStart"}).encode()
    proc = subprocess.run([sys.executable, "-m", "supervisor", "hook", "claude"], input=payload,
                          capture_output=True, cwd=tmp_path, timeout=60)
    assert proc.returncode == 0
    text = json.loads(proc.stdout)["hookSpecificOutput"]["additionalContext"]
    saved = next((tmp_path / ".supervise" / "digests").glob("digest-*.txt"))
    assert str(saved) in text and len(text) <= 1000


def test_max_memory_bound_is_printed_in_readable_bytes() -> None:
    message = _error({"stages": [{"name": "m", "run": ["true"], "max_memory": 5}]})
    assert "at least 1 MiB (1048576 bytes)" in message and "e+" not in message


@pytest.mark.parametrize("where", ["top", "stage", "inline_cap", "ok_exit"])
@pytest.mark.parametrize("value", [1e30, -1e30, 1e19])
def test_number_too_large_for_a_whole_number_reads_plainly(where: str, value: float) -> None:
    """A float beyond 64 bits where a whole number belongs gave pydantic's "Unable to parse
    input string as an integer, exceeded maximum size"."""
    data: dict[str, Any] = {
        "top": {"max_output": value, "stages": []},
        "stage": {"stages": [{"name": "a", "run": ["true"], "max_tasks": value}]},
        "inline_cap": {"inline_cap": {"claude": value}, "stages": []},
        "ok_exit": {"stages": [{"name": "a", "run": ["true"], "ok_exit": [value]}]},
    }[where]
    message = _error(data)
    assert "is too large for a whole number" in message and "Unable" not in message
