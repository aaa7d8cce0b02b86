"""Typed JSON records on the hook's hot path: frozen records checked field by field.

The payload, the lock and completion records and the last-digest summary are read on every
hook call. They need type checks and nothing else, so they are frozen records
(:mod:`supervisor._record`) validated here rather than pydantic models: pydantic's import
would be the hook's largest fixed cost, and ``typing.get_type_hints`` (with the ``typing``
import) is not needed either: the field types are read from the
annotation strings (``from __future__ import annotations``) by a small parser, once per class.
The configuration, read rarely and cached, keeps pydantic (:mod:`supervisor.config._schema`).

Supported field types: ``str``, ``int`` (a bool is not an int), ``float`` (an int is
accepted), ``bool``, ``X | None``, ``tuple[X, ...]`` (from a JSON list), a nested record
class (named in the record's module), ``dict[str, Any]``, and a name the module binds to
one of those scalars at run time (``StageStatus``: a ``Literal`` for type checkers, ``str``
when run). Any other annotation (a ``Literal``, a ``Path``, a fixed-length tuple) is a
programming error: the first load of the
class (:func:`load_record`, :meth:`StateDir.read_record
<supervisor.state._statedir.StateDir.read_record>`) raises ``TypeError`` naming the class
and the field, before any file is read, so it is never mistaken for a corrupt file. A record
class that is never loaded from JSON may use any annotation.
"""

from __future__ import annotations

import sys

from .._record import NO_DEFAULT, asdict, fields, is_record

TYPE_CHECKING = False  # not `typing.TYPE_CHECKING`: importing typing costs the hot path
if TYPE_CHECKING:
    from typing import Any, TypeVar

    T = TypeVar("T")

_MISSING = object()
_NONE = type(None)
_SCALARS: dict[str, type] = {"str": str, "int": int, "float": float, "bool": bool, "bytes": bytes,
                             "None": _NONE}


class RecordError(ValueError):
    """A mapping does not fit a record type; the message names the field."""


class FutureStamp(RecordError):
    """A record stamped more than :data:`FUTURE_SLACK` seconds after now: impossible for a
    record we wrote (a planted ``acquired_at: 9999999999`` locked every session out), so the
    record is corrupt. The message names the field and how far ahead it is."""


FUTURE_SLACK = 60.0
"""Seconds a record's time may lie after now (clock steps between two processes, NTP
slewing; docs/session-protocol.md). Later is impossible: the record is set aside."""


def _split(text: str, sep: str) -> list[str]:
    """``text`` split on ``sep`` outside brackets."""
    parts, depth, start = [], 0, 0
    for i, ch in enumerate(text):
        if ch == "[":
            depth += 1
        elif ch == "]":
            depth -= 1
        elif ch == sep and depth == 0:
            parts.append(text[start:i].strip())
            start = i + 1
    parts.append(text[start:].strip())
    return parts


def _parse(text: str, cls: type) -> Any:
    """A field's annotation string as a checker spec: a class, ``("union", specs)``,
    ``("tuple", spec)``, ``"dict"`` or ``"any"``."""
    text = text.strip()
    options = _split(text, "|")
    if len(options) > 1:
        return ("union", tuple(_parse(option, cls) for option in options))
    if text in _SCALARS:
        return _SCALARS[text]
    if text == "Any":
        return "any"
    if text.startswith("tuple[") and text.endswith("]"):
        inner = _split(text[6:-1], ",")
        if len(inner) == 2 and inner[1] == "...":
            return ("tuple", _parse(inner[0], cls))
    if text.startswith("dict[") and text.endswith("]"):
        return "dict"
    named = getattr(sys.modules.get(cls.__module__), text, None)
    if isinstance(named, type) and is_record(named):
        return named
    if named in _SCALARS.values():  # an alias the module binds to a scalar at run time (a
        return named                # ``Literal`` for type checkers: ``StageStatus`` is str)
    raise TypeError(f"unsupported record field type {text!r} (the records loader reads str, "
                    "int, float, bool, X | None, tuple[X, ...], dict[str, Any] and records "
                    "named in the same module)")


_SPECS: dict[type, dict[str, Any]] = {}


def check_loadable(cls: type) -> dict[str, Any]:
    """The field specs of record class ``cls`` (parsed once and kept), with those of every
    record class nested in it: a class the loader cannot read fails here, loudly.

    Returns:
        ``{field name: spec}`` in field order.

    Raises:
        TypeError: ``cls`` is not a record, or a field's annotation (here or in a nested
            record) cannot be parsed: ``"Name.field: unsupported record field type ..."``.
    """
    if not (isinstance(cls, type) and is_record(cls)):
        raise TypeError(f"{getattr(cls, '__name__', cls)!r} is not a record class")
    specs = _SPECS.get(cls)
    if specs is not None:
        return specs
    specs = {}
    for name in fields(cls):
        # the class that declares the field (a record may extend another): its module
        # resolves the names in its annotation
        owner = next(c for c in cls.__mro__ if name in c.__dict__.get("__annotations__", {}))
        try:
            specs[name] = _parse(str(owner.__dict__["__annotations__"][name]), owner)
        except TypeError as err:
            raise TypeError(f"{cls.__name__}.{name}: {err}") from None
    _SPECS[cls] = specs  # before the nested ones: a record may hold itself
    try:
        for spec in specs.values():
            for nested in _nested_records(spec):
                check_loadable(nested)
    except TypeError:
        del _SPECS[cls]
        raise
    return specs


def _nested_records(spec: Any) -> list[type]:
    if type(spec) is tuple:
        inner = spec[1] if spec[0] == "union" else (spec[1],)
        return [cls for item in inner for cls in _nested_records(item)]
    return [spec] if isinstance(spec, type) and is_record(spec) else []


def _convert(value: Any, spec: Any, where: str) -> Any:
    if type(spec) is tuple and spec[0] == "union":
        options = spec[1]
        if value is None and _NONE in options:
            return None
        for option in options:
            if option is _NONE:
                continue
            try:
                return _convert(value, option, where)
            except RecordError:
                continue
        raise RecordError(f"{where}: unexpected {type(value).__name__}")
    if type(spec) is tuple:  # ("tuple", item)
        if not isinstance(value, (list, tuple)):
            raise RecordError(f"{where}: expected a list")
        return tuple(_convert(v, spec[1], f"{where}[]") for v in value)
    if spec == "dict":
        if not isinstance(value, dict):
            raise RecordError(f"{where}: expected an object")
        return dict(value)
    if spec == "any":
        return value
    if is_record(spec):
        return load_record(spec, value)
    if spec is float:
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return float(value)
        raise RecordError(f"{where}: expected a number")
    if spec is int:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
        raise RecordError(f"{where}: expected an integer")
    if isinstance(value, spec):
        return value
    raise RecordError(f"{where}: expected {getattr(spec, '__name__', spec)}")


def load_record(cls: type[T], data: Any, *, tolerant: bool = False,
                extra: str | None = None) -> T:
    """Build record ``cls`` (a :func:`supervisor._record.record` class) from a JSON mapping.

    Args:
        cls: the record class.
        data: the decoded JSON value.
        tolerant: a field of the wrong type is treated as absent (its default) instead of
            an error; a harness sending ``"source": 5`` gets an unrecognized source. A field
            without a default stays an error.
        extra: name of a ``dict`` field that receives the keys ``cls`` does not declare
            (unknown keys are otherwise ignored).

    Raises:
        RecordError: ``data`` is not an object, or (strict mode) a field is missing or has
            the wrong type. The message names the field.
        TypeError: ``cls`` cannot be loaded from JSON (:func:`check_loadable`): a programming
            error, whatever ``data`` is.
    """
    specs = check_loadable(cls)
    if not isinstance(data, dict):
        raise RecordError(f"{cls.__name__}: expected an object")
    defaults: tuple[object, ...] = getattr(cls, "__record_defaults__")
    kwargs: dict[str, Any] = {}
    for (name, spec), default in zip(specs.items(), defaults):
        if name == extra:
            continue
        value = data.get(name, _MISSING)
        if value is _MISSING:
            if default is NO_DEFAULT:
                raise RecordError(f"{cls.__name__}.{name}: missing")
            continue
        try:
            kwargs[name] = _convert(value, spec, f"{cls.__name__}.{name}")
        except RecordError:
            if not tolerant or default is NO_DEFAULT:  # a required field has no default to fall back to
                raise
    if extra is not None:
        kwargs[extra] = {k: v for k, v in data.items() if k not in specs}
    times: tuple[str, ...] = getattr(cls, "__record_times__", ())
    if times:
        judge_times(cls.__name__, {name: kwargs.get(name) for name in times})
    return cls(**kwargs)


def judge_times(what: str, stamps: dict[str, Any], now: float | None = None) -> None:
    """Times are judged, not believed: each number in ``stamps`` (seconds since the epoch)
    must be at most :data:`FUTURE_SLACK` after ``now`` (default: the clock). A record class
    names its time fields in ``__record_times__`` and :func:`load_record` calls this.

    Raises:
        FutureStamp: a stamp lies further in the future (the record is corrupt).
    """
    import time

    now = time.time() if now is None else now
    for name, value in stamps.items():
        if isinstance(value, (int, float)) and not isinstance(value, bool) \
                and value > now + FUTURE_SLACK:
            raise FutureStamp(f"{what}.{name} is {value - now:.0f} s after now, a time in the "
                              "future")


def dump_record(record: Any, *, exclude: frozenset[str] = frozenset()) -> dict[str, Any]:
    """The record as a JSON-ready mapping (tuples become lists), without ``exclude``."""
    data = asdict(record)
    return {k: v for k, v in data.items() if k not in exclude}
