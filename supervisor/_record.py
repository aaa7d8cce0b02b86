"""Frozen records without the ``dataclasses`` module: the value classes of the hook's hot path.

``@record`` turns a class with annotated fields into a frozen value class: an ``__init__``
taking the fields positionally or by name (in declaration order, defaults and
:func:`field` ``default_factory`` honoured), field-wise ``__eq__`` and ``__hash__`` (only
between instances of the same class), a ``Name(field=value, ...)`` ``__repr__``, and
``__setattr__``/``__delattr__`` that raise :class:`FrozenRecordError`. :func:`replace`,
:func:`asdict` and :func:`fields` mirror their ``dataclasses`` namesakes.

Why not ``dataclasses``: importing it pulls ``inspect``, ``ast``, ``dis`` and ``tokenize``,
and each frozen dataclass compiles its generated methods with ``exec`` at import (22 of them
on the session-start path): together about a third of a Python hook's CPU
(docs/benchmarks.md, row "SessionStart hook on an empty digest"). The methods here are shared generic
functions, so a record class costs what a plain class costs. Type checkers see the class as a
frozen dataclass through PEP 681 ``dataclass_transform`` (under ``TYPE_CHECKING`` only: the
``typing`` import would cost the hook too), so construction stays checked by ``mypy --strict``.

Fields are the class's own annotations (``from __future__ import annotations``: strings), in
order; a name annotated ``ClassVar[...]`` is not a field. A record may extend one other
record: its own fields follow the parent's (as a dataclass's do), so a field list shared by
two records is declared once (``StageSummary`` and ``StageResult``); it may not declare a
parent's field again.
"""

from __future__ import annotations

TYPE_CHECKING = False  # not `typing.TYPE_CHECKING`: importing typing costs the hot path
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any, TypeVar, dataclass_transform

    T = TypeVar("T")
    R = TypeVar("R")
else:
    def dataclass_transform(**_options: object) -> object:
        return lambda decorated: decorated


class FrozenRecordError(AttributeError):
    """An assignment to (or deletion of) a field of a frozen record."""


class _Factory:
    __slots__ = ("make",)

    def __init__(self, make: Callable[[], object]) -> None:
        self.make = make


NO_DEFAULT = object()
"""The default of a field that has none (in ``__record_defaults__``, read by the JSON loader)."""
Factory = _Factory
"""The type of a :func:`field` default in ``__record_defaults__`` (its ``make`` builds one)."""


def field(*, default_factory: Callable[[], T]) -> T:
    """A field whose default is built per instance: ``extra: dict[str, Any] =
    field(default_factory=dict)``, as ``dataclasses.field``."""
    return _Factory(default_factory)  # type: ignore[return-value]


def _init(self: Any, *args: Any, **kwargs: Any) -> None:
    cls = type(self)
    names: tuple[str, ...] = cls.__record_fields__
    defaults: tuple[object, ...] = cls.__record_defaults__
    if len(args) > len(names):
        raise TypeError(f"{cls.__name__}() takes {len(names)} positional arguments but "
                        f"{len(args)} were given")
    values = self.__dict__
    for i, name in enumerate(names):
        if i < len(args):
            if name in kwargs:
                raise TypeError(f"{cls.__name__}() got multiple values for argument {name!r}")
            values[name] = args[i]
        elif name in kwargs:
            values[name] = kwargs.pop(name)
        else:
            default = defaults[i]
            if default is NO_DEFAULT:
                raise TypeError(f"{cls.__name__}() missing required argument: {name!r}")
            values[name] = default.make() if type(default) is _Factory else default
    if kwargs:
        raise TypeError(f"{cls.__name__}() got an unexpected keyword argument {next(iter(kwargs))!r}")


def _values(self: Any) -> tuple[object, ...]:
    values = self.__dict__
    return tuple(values[name] for name in type(self).__record_fields__)


def _eq(self: Any, other: object) -> bool:
    if other.__class__ is not self.__class__:
        return NotImplemented  # type: ignore[no-any-return]  # typeshed: NotImplementedType is Any
    return _values(self) == _values(other)


def _hash(self: Any) -> int:
    return hash(_values(self))


def _repr(self: Any) -> str:
    values = self.__dict__
    inner = ", ".join(f"{name}={values[name]!r}" for name in type(self).__record_fields__)
    return f"{type(self).__qualname__}({inner})"


def _frozen_set(self: Any, name: str, value: object) -> None:
    raise FrozenRecordError(f"cannot assign to field {name!r} of frozen {type(self).__name__}")


def _frozen_del(self: Any, name: str) -> None:
    raise FrozenRecordError(f"cannot delete field {name!r} of frozen {type(self).__name__}")


@dataclass_transform(frozen_default=True, field_specifiers=(field,))
def record(cls: type[R]) -> type[R]:
    """Make ``cls`` a frozen record (see the module docstring); returns ``cls`` itself.

    Raises:
        TypeError: a field without a default follows one with a default, ``cls`` declares a
            field of the record it extends again, or it extends more than one record.
    """
    return _make(cls, frozen=True)


@dataclass_transform(field_specifiers=(field,))
def mutable_record(cls: type[R]) -> type[R]:
    """:func:`record` whose fields may be assigned (``@dataclass`` without ``frozen``): no
    ``__hash__``, no frozen ``__setattr__``; for argument holders that a parser fills in.

    Raises:
        TypeError: as :func:`record`.
    """
    return _make(cls, frozen=False)


def _make(cls: type[R], *, frozen: bool) -> type[R]:
    parents = [base for base in cls.__bases__ if hasattr(base, "__record_fields__")]
    if len(parents) > 1:
        raise TypeError(f"{cls.__name__}: a record extends at most one other record")
    inherited: tuple[str, ...] = parents[0].__record_fields__ if parents else ()
    annotations: dict[str, str] = cls.__dict__.get("__annotations__", {})
    own = tuple(name for name, hint in annotations.items()
                if not str(hint).startswith(("ClassVar", "typing.ClassVar")))
    again = [name for name in own if name in inherited]
    if again:
        raise TypeError(f"{cls.__name__}: field {again[0]!r} is declared by the record it extends")
    names = inherited + own
    defaults: list[object] = list(getattr(parents[0], "__record_defaults__")) if parents else []
    for name in own:
        default = cls.__dict__.get(name, NO_DEFAULT)
        if type(default) is _Factory:
            delattr(cls, name)
        if default is NO_DEFAULT and defaults and defaults[-1] is not NO_DEFAULT:
            raise TypeError(f"{cls.__name__}: field {name!r} without a default follows one with a default")
        defaults.append(default)
    setattr(cls, "__record_fields__", names)
    setattr(cls, "__record_defaults__", tuple(defaults))
    setattr(cls, "__match_args__", names)
    methods: dict[str, object] = {"__init__": _init, "__repr__": _repr, "__eq__": _eq}
    if frozen:
        methods.update(__hash__=_hash, __setattr__=_frozen_set, __delattr__=_frozen_del)
    for attr, method in methods.items():
        if attr not in cls.__dict__ or (attr == "__hash__" and cls.__dict__[attr] is None):
            setattr(cls, attr, method)
    if not frozen and "__hash__" not in cls.__dict__:
        setattr(cls, "__hash__", None)  # mutable and compared by value: unhashable
    return cls


def is_record(obj: object) -> bool:
    """True for a record class or instance."""
    return hasattr(obj if isinstance(obj, type) else type(obj), "__record_fields__")


def fields(cls_or_record: object) -> tuple[str, ...]:
    """The field names of a record class or instance, in declaration order.

    Raises:
        TypeError: not a record.
    """
    cls = cls_or_record if isinstance(cls_or_record, type) else type(cls_or_record)
    names: tuple[str, ...] | None = getattr(cls, "__record_fields__", None)
    if names is None:
        raise TypeError(f"{cls.__name__} is not a record")
    return names


def replace(obj: R, /, **changes: Any) -> R:
    """A copy of record ``obj`` with ``changes`` applied (``dataclasses.replace``).

    Raises:
        TypeError: ``obj`` is not a record, or a change names no field.
    """
    values = {name: getattr(obj, name) for name in fields(obj)}
    values.update(changes)
    return type(obj)(**values)


def asdict(obj: object) -> dict[str, Any]:
    """Record ``obj`` as a dict, recursively (records, lists, tuples and dicts inside are
    converted and copied), as ``dataclasses.asdict``.

    Raises:
        TypeError: ``obj`` is not a record instance.
    """
    if isinstance(obj, type) or not is_record(obj):
        raise TypeError("asdict() should be called on record instances")
    out = _copy(obj)
    assert isinstance(out, dict)
    return out


def _copy(value: object) -> object:
    if value is None or type(value) in (str, int, float, bool, bytes):
        return value
    if is_record(value) and not isinstance(value, type):
        return {name: _copy(getattr(value, name)) for name in fields(value)}
    if isinstance(value, tuple) and hasattr(value, "_fields"):  # a named tuple
        named: Any = type(value)
        return named(*[_copy(v) for v in value])
    if isinstance(value, (list, tuple)):
        return type(value)(_copy(v) for v in value)
    if isinstance(value, dict):
        return type(value)((_copy(k), _copy(v)) for k, v in value.items())
    import copy

    return copy.deepcopy(value)
