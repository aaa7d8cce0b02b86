"""A config with several errors lists every one (up to a cap), each with the file, the key and
the fix; "(and 1 more problem)" without saying what it is left the user guessing."""

from __future__ import annotations

from pathlib import Path

import pytest

from helpers import run_cli
from supervisor._errors import ConfigError
from supervisor.config._schema import MAX_LISTED_PROBLEMS, load_config_raw


def test_two_errors_are_both_named_with_file_key_and_fix(tmp_path: Path) -> None:
    (tmp_path / "supervise.toml").write_text(
        'budget = "soon"\n[[stages]]\nname = "todo"\nrun = "true"\ntimeuot = 5\n')
    with pytest.raises(ConfigError) as info:
        load_config_raw(tmp_path)
    text = str(info.value)
    assert "\n" not in text
    assert text.startswith(f"{tmp_path / 'supervise.toml'}: 2 problems: ")
    assert "(1) key 'budget': must be a number (it is 'soon')" in text
    assert "(2) [[stages]] 'todo' (number 1): key 'timeuot': unknown key: did you mean 'timeout'?" in text
    assert "more problem" not in text
    out = run_cli("config", "-C", str(tmp_path))
    assert out.returncode == 1 and b"did you mean 'timeout'?" in out.stderr


def test_past_the_cap_the_rest_are_counted(tmp_path: Path) -> None:
    extra = MAX_LISTED_PROBLEMS + 2
    stages = "".join(f'[[stages]]\nname = "s{i}"\nrun = "true"\nbogus{i} = 1\n' for i in range(extra))
    (tmp_path / "supervise.toml").write_text(stages)
    with pytest.raises(ConfigError) as info:
        load_config_raw(tmp_path)
    text = str(info.value)
    assert f"{extra} problems" in text
    assert f"({MAX_LISTED_PROBLEMS}) [[stages]] 's{MAX_LISTED_PROBLEMS - 1}'" in text
    assert f"({MAX_LISTED_PROBLEMS + 1})" not in text
    assert text.endswith("; and 2 more (fix these first)")


def test_a_nested_unknown_key_gets_its_table_s_suggestion(tmp_path: Path) -> None:
    (tmp_path / "supervise.toml").write_text(
        '[[stages]]\nname = "x"\nrun = "true"\nwhen = { sourse = ["startup"] }\n')
    with pytest.raises(ConfigError, match=r"key 'when.sourse': unknown key: did you mean 'source'\?"):
        load_config_raw(tmp_path)
