"""``json.loads`` and ``json.dumps`` without ``json``'s import cost on the hook paths.

``import json`` imports ``json.decoder``, ``json.scanner`` and ``json.encoder``, which compile
regular expressions at import: ``re`` with ``enum`` and the ``sre`` compiler, a large share of
a Python hook's CPU (docs/benchmarks.md, rows "post-tool hook injecting a nested AGENTS.md"
and "SessionStart hook on an empty digest"). The work itself is done by CPython's C
accelerator ``_json`` (its scanner and encoder, which ``json`` uses too), and ``_json`` needs
none of that: this module drives it directly, so the result is ``json``'s own, byte for byte.

Anything unusual goes to ``json`` itself, imported then: invalid JSON (``json`` raises the
:class:`json.JSONDecodeError` with its usual message and position), bytes in UTF-16/32 or with
a byte-order mark, a text starting with U+FEFF, an argument of the wrong type, an interpreter
without ``_json``, or an ``_json`` whose interface changed (checked once, on a sample, at
import).
"""

from __future__ import annotations

TYPE_CHECKING = False  # not `typing.TYPE_CHECKING`: importing typing costs the hot path
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any

    PairsHook = Callable[[list[tuple[str, Any]]], Any]

_WHITESPACE = " \t\n\r"  # JSON's insignificant whitespace (RFC 8259 section 2)
_CONSTANTS = {"-Infinity": float("-inf"), "Infinity": float("inf"), "NaN": float("nan")}


class _Context:
    """What ``_json.make_scanner`` reads from a ``json.JSONDecoder``: the defaults of
    ``json.loads``, with ``object_pairs_hook`` as given."""

    __slots__ = ("object_hook", "object_pairs_hook", "parse_constant", "parse_float", "parse_int",
                 "strict")

    def __init__(self, object_pairs_hook: PairsHook | None) -> None:
        self.strict = True
        self.object_hook = None
        self.object_pairs_hook = object_pairs_hook
        self.parse_float = float
        self.parse_int = int
        self.parse_constant = _CONSTANTS.__getitem__


def _not_serializable(o: object) -> Any:
    """``json.JSONEncoder.default``: the same TypeError and message."""
    raise TypeError(f"Object of type {o.__class__.__name__} is not JSON serializable")


try:
    import _json as _c

    _MAKE_SCANNER: Any = _c.make_scanner  # typeshed types its argument as a JSONDecoder
    _SCANNER: Any = _MAKE_SCANNER(_Context(None))
    _MAKE_ENCODER: Any = _c.make_encoder

    def _encoder(ensure_ascii: bool, sort_keys: bool) -> Any:
        """A C encoder as ``json.JSONEncoder`` makes one for a one-shot ``encode``: a fresh
        ``markers`` dict each time (an encoding that failed half-way leaves entries in it)."""
        return _MAKE_ENCODER({}, _not_serializable,
                             _c.encode_basestring_ascii if ensure_ascii else _c.encode_basestring,
                             None, ": ", ", ", sort_keys, False, True)

    if ("".join(_encoder(True, True)({"b": [1, 2.5, None, True], "a": "\u00e9"}, 0)) !=
            '{"a": "\\u00e9", "b": [1, 2.5, null, true]}'
            or _SCANNER('{"a": [1, 2.5, null]}', 0) != ({"a": [1, 2.5, None]}, 21)):
        raise ImportError("_json's interface changed")  # pragma: no cover
except (ImportError, AttributeError, TypeError, ValueError, StopIteration):  # pragma: no cover
    _SCANNER = None
    _MAKE_ENCODER = None


_SCANNERS: dict[object, Any] = {}


def _scanner(object_pairs_hook: PairsHook) -> Any:
    """The C scanner for ``object_pairs_hook`` (made once per hook)."""
    scan = _SCANNERS.get(object_pairs_hook)
    if scan is None:
        scan = _SCANNERS[object_pairs_hook] = _MAKE_SCANNER(_Context(object_pairs_hook))
    return scan


def _json_loads(s: str | bytes | bytearray, object_pairs_hook: PairsHook | None) -> Any:
    import json

    return json.loads(s, object_pairs_hook=object_pairs_hook)


def loads(s: str | bytes | bytearray, *, object_pairs_hook: PairsHook | None = None) -> Any:
    """``json.loads(s, object_pairs_hook=object_pairs_hook)``, with the same result.

    Bytes are read as ``json.loads`` reads them (UTF-8 unless a BOM or NUL bytes say UTF-16/32,
    with ``surrogatepass``).

    Raises:
        json.JSONDecodeError: ``s`` is not valid JSON (a ``ValueError``; from ``json``).
        UnicodeDecodeError: bytes that are not valid in their encoding (a ``ValueError``).
        RecursionError: nesting deeper than the interpreter's recursion limit.
        TypeError: ``s`` is neither text nor bytes.
    """
    if _SCANNER is None:  # pragma: no cover - an interpreter without _json
        return _json_loads(s, object_pairs_hook)
    if isinstance(s, (bytes, bytearray)):
        head = bytes(s[:4])
        if 0 in head or head.startswith((b"\xef\xbb\xbf", b"\xff\xfe", b"\xfe\xff")):
            return _json_loads(s, object_pairs_hook)  # UTF-16/32 or a BOM: json decides
        text = s.decode("utf-8", "surrogatepass")
    elif isinstance(s, str):
        text = s
    else:
        return _json_loads(s, object_pairs_hook)  # json raises its TypeError
    start = len(text) - len(text.lstrip(_WHITESPACE))
    scan = _SCANNER if object_pairs_hook is None else _scanner(object_pairs_hook)
    try:
        value, end = scan(text, start)
    except RecursionError:
        raise
    except Exception:  # StopIteration at an error, or SystemError: json.decoder not imported
        return _json_loads(text, object_pairs_hook)  # json raises the JSONDecodeError
    if end != len(text) and text[end:].strip(_WHITESPACE):
        return _json_loads(text, object_pairs_hook)  # "Extra data"
    return value


def dumps(obj: object, *, ensure_ascii: bool = True, sort_keys: bool = False) -> str:
    """``json.dumps(obj, ensure_ascii=ensure_ascii, sort_keys=sort_keys)``, with the same text
    (default separators, no indent, NaN and infinities allowed, cycles detected).

    Raises:
        TypeError: a value JSON cannot hold (a set, bytes, an object), or a key that is not a
            str, int, float, bool or None; with ``sort_keys``, keys that do not compare.
        ValueError: a circular reference.
    """
    if _MAKE_ENCODER is None:  # pragma: no cover - an interpreter without _json
        import json

        return json.dumps(obj, ensure_ascii=ensure_ascii, sort_keys=sort_keys)
    if isinstance(obj, str):
        return str(_c.encode_basestring_ascii(obj) if ensure_ascii else _c.encode_basestring(obj))
    return "".join(_encoder(ensure_ascii, sort_keys)(obj, 0))


def raw_decode(s: str, idx: int = 0, *, object_pairs_hook: PairsHook | None = None) -> tuple[Any, int]:
    """``json.JSONDecoder(object_pairs_hook=object_pairs_hook).raw_decode(s, idx)``: the value
    that starts at ``s[idx]`` (no whitespace skipped) and the index just past it.

    Raises:
        json.JSONDecodeError: no valid JSON value starts there (from ``json``).
        RecursionError: nesting deeper than the interpreter's recursion limit.
    """
    if _SCANNER is not None:
        scan = _SCANNER if object_pairs_hook is None else _scanner(object_pairs_hook)
        try:
            found: tuple[Any, int] = scan(s, idx)
            return found
        except RecursionError:
            raise
        except Exception:  # json raises the JSONDecodeError
            pass
    import json

    decoded: tuple[Any, int] = json.JSONDecoder(object_pairs_hook=object_pairs_hook).raw_decode(s, idx)
    return decoded
