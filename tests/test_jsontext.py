"""`supervisor._jsontext` gives `json`'s own results without importing `json` (or `re`)."""

from __future__ import annotations

import json
import subprocess
import sys
from typing import Any

import pytest

from supervisor import _jsontext
from supervisor.session._payload import first_wins

TEXTS = [
    '{"a": 1}', ' \t\n{"a": [1, 2.5, -0.0, 1e400, null, true, false, "x\\u00e9\\ud800"]}\r\n ',
    '"just a string"', "12345678901234567890123", "[]", "{}", "NaN", "[-Infinity, Infinity]",
    '{"a": 1, "a": 2, "b": {"c": 3, "c": 4}}', '"\\ud83d\\ude00 \u00e9 \u2028"',
    "[" * 50 + "]" * 50, '{"k": "v"}  ',
]
BAD = ["", "   ", '{"a" 1}', '{"a": 1} x', "[1,]", '{"a": 1}{"b": 2}', "\ufeff{}", "nul",
       '"unterminated', '{"a": "\x01"}', "01", "[1 2]", "{'a': 1}", "-", "1.", '"\\x"']


def _outcome(fn: Any, *args: Any, **kw: Any) -> tuple[str, Any]:
    try:
        return "ok", fn(*args, **kw)
    except Exception as err:  # the same type and message (and position) as json's
        return type(err).__name__, str(err)


@pytest.mark.parametrize("text", TEXTS + BAD)
@pytest.mark.parametrize("hook", [None, first_wins])
def test_loads_matches_json(text: str, hook: Any) -> None:
    for arg in (text, text.encode("utf-8", "surrogatepass")):
        mine, theirs = (_outcome(f, arg, object_pairs_hook=hook) for f in (_jsontext.loads, json.loads))
        assert repr(mine) == repr(theirs), (arg, mine, theirs)  # repr: nan == nan


@pytest.mark.parametrize("data", [b"\xef\xbb\xbf{}", "{}".encode("utf-16"), '{"a": 1}'.encode("utf-16-le"),
                                  '[1]'.encode("utf-32-be"), b"\xff\xfe", b"\xc3", b'"\xed\xa0\x80"',
                                  bytearray(b'{"a": 2}')])
def test_loads_reads_bytes_as_json_does(data: bytes) -> None:
    assert repr(_outcome(_jsontext.loads, data)) == repr(_outcome(json.loads, data))


def test_loads_deep_nesting_is_a_recursion_error() -> None:
    with pytest.raises(RecursionError):
        _jsontext.loads("[" * 100_000)


class _Odd:
    pass


VALUES: list[Any] = [
    {"b": 1, "a": [1.5, None, True, False, "\u00e9\n\x00\u2028", float("nan"), float("inf"), 10**30]},
    "\u00e9 \ud800 \"quoted\"", 3, 2.5, None, [], {}, {1: "int key", 2.5: "f", None: "n", True: "b"},
    {"z": {"y": [{"x": 1}]}}, ({"t": 1},),
]


@pytest.mark.parametrize("value", VALUES + [{"s": {1, 2}}, {"o": _Odd()}, {(1, 2): 3}, {1: 1, "a": 2}])
@pytest.mark.parametrize("ensure_ascii", [True, False])
@pytest.mark.parametrize("sort_keys", [True, False])
def test_dumps_matches_json(value: Any, ensure_ascii: bool, sort_keys: bool) -> None:
    mine = _outcome(_jsontext.dumps, value, ensure_ascii=ensure_ascii, sort_keys=sort_keys)
    theirs = _outcome(json.dumps, value, ensure_ascii=ensure_ascii, sort_keys=sort_keys)
    assert mine == theirs


def test_dumps_detects_cycles_and_recovers_after_a_failed_encoding() -> None:
    shared: list[Any] = [1]
    with pytest.raises(TypeError):
        _jsontext.dumps([shared, {1, 2}])  # fails half-way, with `shared` in the markers
    assert _jsontext.dumps([shared, shared]) == "[[1], [1]]"  # not a false "circular reference"
    loop: list[Any] = []
    loop.append(loop)
    assert _outcome(_jsontext.dumps, loop) == _outcome(json.dumps, loop)


def test_importing_it_imports_neither_json_nor_re() -> None:
    code = ("import sys; from supervisor import _jsontext as j; "
            "assert j.loads(j.dumps({'a': [1, 'x']})) == {'a': [1, 'x']}; "
            "print(sorted(m for m in ('json', 're', 'enum', 'json.decoder') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"
    assert _jsontext._SCANNER is not None  # the C scanner is used here, not the fallback
