"""Typed JSON records on the hook's hot path: frozen dataclasses checked field by field.

The payload, the lock and completion records and the last-digest summary are read on every
hook call. They need type checks and nothing else, so they are frozen stdlib dataclasses
validated here rather than pydantic models: pydantic's import (about 80 ms) would be the
hook's largest fixed cost. The configuration, read rarely and cached, keeps pydantic
(:mod:`supervisor.config._schema`).

Supported field types: ``str``, ``int`` (a bool is not an int), ``float`` (an int is
accepted), ``bool``, ``X | None``, ``tuple[X, ...]`` (from a JSON list), a nested record
dataclass, and ``dict[str, Any]``.
"""

from __future__ import annotations

import dataclasses
import types
import typing
from functools import cache
from typing import Any, TypeVar

T = TypeVar("T")

_MISSING = object()


class RecordError(ValueError):
    """A mapping does not fit a record type; the message names the field."""


@cache
def _hints(cls: Any) -> dict[str, Any]:
    return typing.get_type_hints(cls)


def _convert(value: Any, hint: Any, where: str) -> Any:
    origin = typing.get_origin(hint)
    if origin in (typing.Union, types.UnionType):
        options = typing.get_args(hint)
        if value is None and type(None) in options:
            return None
        for option in options:
            if option is type(None):
                continue
            try:
                return _convert(value, option, where)
            except RecordError:
                continue
        raise RecordError(f"{where}: unexpected {type(value).__name__}")
    if origin is tuple:
        if not isinstance(value, (list, tuple)):
            raise RecordError(f"{where}: expected a list")
        (item, _ellipsis) = typing.get_args(hint)
        return tuple(_convert(v, item, f"{where}[]") for v in value)
    if origin is dict:
        if not isinstance(value, dict):
            raise RecordError(f"{where}: expected an object")
        return dict(value)
    if hint is Any:
        return value
    if dataclasses.is_dataclass(hint):
        return load_record(hint, value)  # type: ignore[arg-type]
    if hint is float:
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return float(value)
        raise RecordError(f"{where}: expected a number")
    if hint is int:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
        raise RecordError(f"{where}: expected an integer")
    if isinstance(value, hint):
        return value
    raise RecordError(f"{where}: expected {getattr(hint, '__name__', hint)}")


def load_record(cls: type[T], data: Any, *, tolerant: bool = False,
                extra: str | None = None) -> T:
    """Build record ``cls`` (a dataclass) from a JSON mapping.

    Args:
        cls: the dataclass.
        data: the decoded JSON value.
        tolerant: a field of the wrong type is treated as absent (its default) instead of
            an error; a harness sending ``"source": 5`` gets an unrecognized source.
        extra: name of a ``dict`` field that receives the keys ``cls`` does not declare
            (unknown keys are otherwise ignored).

    Raises:
        RecordError: ``data`` is not an object, or (strict mode) a field is missing or has
            the wrong type. The message names the field.
    """
    if not isinstance(data, dict):
        raise RecordError(f"{cls.__name__}: expected an object")
    hints = _hints(cls)  # type: ignore[arg-type]
    kwargs: dict[str, Any] = {}
    for f in dataclasses.fields(cls):  # type: ignore[arg-type]
        if f.name == extra:
            continue
        value = data.get(f.name, _MISSING)
        if value is _MISSING:
            if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
                raise RecordError(f"{cls.__name__}.{f.name}: missing")
            continue
        try:
            kwargs[f.name] = _convert(value, hints[f.name], f"{cls.__name__}.{f.name}")
        except RecordError:
            if not tolerant:
                raise
    if extra is not None:
        known = {f.name for f in dataclasses.fields(cls)}  # type: ignore[arg-type]
        kwargs[extra] = {k: v for k, v in data.items() if k not in known}
    return cls(**kwargs)


def dump_record(record: Any, *, exclude: frozenset[str] = frozenset()) -> dict[str, Any]:
    """The record as a JSON-ready mapping (tuples become lists), without ``exclude``."""
    data = dataclasses.asdict(record)
    return {k: v for k, v in data.items() if k not in exclude}
