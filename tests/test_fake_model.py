"""The e2e fake model's ``FAKE_BASH`` request (tests/e2e/fake_model_server.py): OpenCode 1.18.33's
``run`` wraps every argument that holds a space in double quotes before sending it, so the
prompt ``turn 1: FAKE_BASH sleep 4`` arrives as ``"turn 1: FAKE_BASH sleep 4"``. The command
must be ``sleep 4``, not ``sleep 4"`` (a shell syntax error that ends the tool call at once, so
the e2e deferred-result test's second request came before the stage finished)."""

from __future__ import annotations

import importlib.util
from pathlib import Path


def _server():
    path = Path(__file__).parent / "e2e" / "fake_model_server.py"
    spec = importlib.util.spec_from_file_location("fake_model_server_for_test", path)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def body(text: str) -> dict:
    return {"messages": [{"role": "system", "content": "sys"}, {"role": "user", "content": text}]}


def test_opencode_quoted_prompt_gives_the_bare_command() -> None:
    assert _server().wanted_bash(body('"turn 1: FAKE_BASH sleep 4"')) == "sleep 4"


def test_escaped_inner_quotes_are_unescaped() -> None:
    assert _server().wanted_bash(body('"FAKE_BASH echo \\"a b\\""')) == 'echo "a b"'


def test_unquoted_prompt_and_a_ran_command() -> None:
    server = _server()
    assert server.wanted_bash(body("FAKE_BASH sleep 1")) == "sleep 1"
    ran = body("FAKE_BASH sleep 1")
    ran["messages"].append({"role": "tool", "content": ""})
    assert server.wanted_bash(ran) is None
