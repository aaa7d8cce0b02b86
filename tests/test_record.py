"""Frozen records (supervisor._record), the typed JSON loader over them (supervisor.state._records)
and the hashes without hashlib (supervisor._hashing): the hot path's replacements for
dataclasses, typing.get_type_hints and hashlib behave as the originals did."""

from __future__ import annotations

import dataclasses
import hashlib
import hmac
from pathlib import Path
from typing import Any, Literal

import pytest

from supervisor import _hashing
from supervisor._record import (FrozenRecordError, asdict, field, fields, is_record,
                                mutable_record, record, replace)
from supervisor.state._records import RecordError, dump_record, load_record


@record
class Inner:
    name: str
    size: int = 0


@record
class Outer:
    title: str
    count: int | None = None
    ratio: float = 1.0
    flag: bool = False
    tags: tuple[str, ...] = ()
    inner: tuple[Inner, ...] = ()
    extra: dict[str, Any] = field(default_factory=dict)


@dataclasses.dataclass(frozen=True)
class InnerDC:
    name: str
    size: int = 0


@dataclasses.dataclass(frozen=True)
class OuterDC:
    title: str
    count: int | None = None
    ratio: float = 1.0
    flag: bool = False
    tags: tuple[str, ...] = ()
    inner: tuple[InnerDC, ...] = ()
    extra: dict[str, Any] = dataclasses.field(default_factory=dict)


def test_a_record_behaves_as_the_frozen_dataclass_it_replaces() -> None:
    """Construction, defaults, equality, hashing, repr and asdict as ``@dataclass(frozen=True)``."""
    ours = Outer("t", 3, tags=("a",), inner=(Inner("x", 2),))
    theirs = OuterDC("t", 3, tags=("a",), inner=(InnerDC("x", 2),))
    assert repr(ours).replace("Inner(", "InnerDC(") == repr(theirs).replace("OuterDC(", "Outer(")
    assert asdict(ours) == dataclasses.asdict(theirs)
    assert fields(Outer) == tuple(f.name for f in dataclasses.fields(OuterDC))
    assert Outer.__match_args__ == OuterDC.__match_args__
    assert ours == Outer("t", 3, tags=("a",), inner=(Inner("x", 2),))
    assert ours != Outer("t", 4, tags=("a",), inner=(Inner("x", 2),))
    assert Inner("x", 2) != InnerDC("x", 2)  # type: ignore[comparison-overlap]  # another class is never equal, as dataclasses
    assert hash(Inner("x", 2)) == hash(Inner(name="x", size=2)) == hash(("x", 2))
    assert Outer("t").extra is not Outer("t").extra  # default_factory: one per instance
    with pytest.raises(TypeError):
        hash(ours)  # a dict field is unhashable, as in a frozen dataclass
    asdict(ours)["extra"]["k"] = 1
    assert ours.extra == {}  # asdict copies


def test_a_record_is_frozen_and_checks_its_arguments() -> None:
    item = Inner("x")
    with pytest.raises(FrozenRecordError):
        item.name = "y"  # type: ignore[misc]
    with pytest.raises(AttributeError):
        del item.name
    with pytest.raises(TypeError, match="missing required argument: 'name'"):
        Inner()  # type: ignore[call-arg]
    with pytest.raises(TypeError, match="multiple values"):
        Inner("x", name="y")  # type: ignore[misc]
    with pytest.raises(TypeError, match="unexpected keyword"):
        Inner("x", colour=1)  # type: ignore[call-arg]
    with pytest.raises(TypeError, match="positional"):
        Inner("x", 1, 2)  # type: ignore[call-arg]
    assert replace(item, size=5) == Inner("x", 5) and item.size == 0
    with pytest.raises(TypeError):
        replace(item, colour=1)
    with pytest.raises(TypeError):
        @record
        class Bad:
            a: int = 0
            b: int  # type: ignore[misc]
    assert is_record(Inner) and is_record(item) and not is_record(InnerDC("x"))
    with pytest.raises(TypeError):
        asdict(Inner)


def test_a_mutable_record_takes_assignments_and_is_unhashable() -> None:
    @mutable_record
    class Args:
        harness: str = ""
        problems: tuple[str, ...] = ()

    args = Args()
    args.harness = "claude"
    assert args == Args("claude") and repr(args) == "test_a_mutable_record_takes_assignments_and_is_unhashable.<locals>.Args(harness='claude', problems=())"
    with pytest.raises(TypeError):
        hash(args)


def test_the_loader_checks_every_field_as_it_did_with_get_type_hints() -> None:
    data = {"title": "t", "count": None, "ratio": 2, "flag": True, "tags": ["a", "b"],
            "inner": [{"name": "x", "size": 3}], "other": 1}
    got = load_record(Outer, data, extra="extra")
    assert got == Outer("t", None, 2.0, True, ("a", "b"), (Inner("x", 3),), {"other": 1})
    assert isinstance(got.ratio, float)
    assert dump_record(got, exclude=frozenset({"extra"})) == {
        "title": "t", "count": None, "ratio": 2.0, "flag": True, "tags": ("a", "b"),
        "inner": ({"name": "x", "size": 3},)}  # tuples stay tuples; json.dumps writes lists
    wrong = [
        ([], "Outer: expected an object"),
        ({}, "Outer.title: missing"),
        ({"title": 1}, "Outer.title: expected str"),
        ({"title": "t", "count": True}, "Outer.count: unexpected bool"),  # a bool is not an int
        ({"title": "t", "count": 1.5}, "Outer.count: unexpected float"),
        ({"title": "t", "ratio": "1"}, "Outer.ratio: expected a number"),
        ({"title": "t", "ratio": False}, "Outer.ratio: expected a number"),
        ({"title": "t", "flag": 1}, "Outer.flag: expected bool"),
        ({"title": "t", "tags": "ab"}, "Outer.tags: expected a list"),
        ({"title": "t", "tags": [1]}, r"Outer.tags\[\]: expected str"),
        ({"title": "t", "inner": [{"size": 1}]}, "Inner.name: missing"),
        ({"title": "t", "inner": [[]]}, "Inner: expected an object"),
        ({"title": "t", "extra": []}, "Outer.extra: expected an object"),
    ]
    for value, message in wrong:
        with pytest.raises(RecordError, match=message):
            load_record(Outer, value)
    tolerant = load_record(Outer, {"title": "t", "count": "x", "tags": [1], "flag": "y"},
                           tolerant=True)
    assert tolerant == Outer("t")  # wrong-typed fields fall back to their defaults
    with pytest.raises(RecordError, match="Outer.title: expected str"):
        load_record(Outer, {"title": 5}, tolerant=True)  # a required field stays required


def test_an_unsupported_field_type_is_a_programming_error() -> None:
    @record
    class Odd:
        when: set[int]

    with pytest.raises(TypeError, match="unsupported record field type 'set\\[int\\]'"):
        load_record(Odd, {"when": [1]})


@record
class Shaped:
    """Annotations the records loader cannot parse: fine for a record never read from JSON."""

    kind: Literal["a", "b"]
    where: Path
    pair: tuple[str, int] = ("x", 1)


@record
class HoldsShaped:
    name: str
    inner: Shaped | None = None


def test_an_annotation_the_loader_cannot_parse_fails_loudly_naming_class_and_field(
        tmp_path: Path) -> None:
    """It used to surface inside the state door's parse, where every TypeError means
    "corrupt": the file was set aside and None returned, hiding a programming error (and
    losing a good record). Now the first load raises TypeError naming the class and field,
    before any file is read, also for a record nested in the one loaded (even when the data
    does not hold it); the file stays where it is."""
    from supervisor.state._statedir import StateDir

    with pytest.raises(TypeError, match=r"^Shaped\.kind: unsupported record field type "
                                        r".Literal\["):
        load_record(Shaped, {"kind": "a", "where": "/x"})
    with pytest.raises(TypeError, match=r"^Shaped\.kind: "):
        load_record(HoldsShaped, {"name": "n"})
    state = tmp_path / "state"
    with StateDir.open(state, create=True) as sd:
        sd.write_json("shaped.json", {"kind": "a", "where": "/x"})
        with pytest.raises(TypeError, match=r"^Shaped\.kind: "):
            sd.read_record("shaped.json", Shaped)
        with pytest.raises(TypeError, match=r"^Shaped\.kind: "):
            sd.read_record("shaped.json", HoldsShaped)
    assert sorted(p.name for p in state.iterdir()) == ["shaped.json"]  # nothing set aside
    # a class not read from JSON stays a usable record
    one = Shaped("a", Path("/x"))
    assert one == Shaped(kind="a", where=Path("/x"), pair=("x", 1)) and hash(one) == hash(
        Shaped("a", Path("/x")))
    assert replace(one, kind="b").kind == "b" and asdict(one)["where"] == Path("/x")


def test_every_json_record_of_the_hot_path_has_a_supported_shape() -> None:
    """The records read from state files and payloads all parse (a typo in an annotation would
    otherwise surface only when a hook first reads that file)."""
    from supervisor.session._lock import CompletionRecord, LockRecord
    from supervisor.session._payload import CursorPayload, HookPayload
    from supervisor.session._routing import DigestHistory, LastDigest

    for cls in (LockRecord, CompletionRecord, LastDigest, DigestHistory, HookPayload, CursorPayload):
        with pytest.raises(RecordError):
            load_record(cls, {name: object() for name in fields(cls)})
    assert load_record(DigestHistory, {"entries": [{
        "finished_at": 1, "source": "startup", "harness": "claude", "mode": "full",
        "seconds": 1.5, "budget": 10, "truncated": False}]}).entries[0].budget == 10.0


def test_the_hashes_match_hashlib_and_hmac() -> None:
    data = b"session \xff id"
    assert _hashing.sha256(data).hexdigest() == hashlib.sha256(data).hexdigest()
    grown = _hashing.sha256()
    grown.update(data)
    assert grown.hexdigest() == hashlib.sha256(data).hexdigest()
    key = bytes(range(32))
    assert (_hashing.blake2b(data, key=key, digest_size=32).hexdigest()
            == hashlib.blake2b(data, key=key, digest_size=32).hexdigest())
    with pytest.raises(ValueError):
        _hashing.blake2b(data, key=bytes(65))
    assert _hashing.compare_digest("ab12", "ab12") and not _hashing.compare_digest("ab12", "ab13")
    assert _hashing.compare_digest("a", "b") == hmac.compare_digest("a", "b")
    with pytest.raises(TypeError):
        _hashing.compare_digest("é", "é")


def test_check_loadable_refuses_a_non_record_with_type_error() -> None:
    """The docstring promised TypeError for anything not a record class; a plain value raised
    AttributeError and a record *instance* was not refused."""
    from supervisor.session._lock import LockRecord
    from supervisor.state._records import check_loadable

    for thing in (3, "x", int, object()):
        with pytest.raises(TypeError, match="not a record"):
            check_loadable(thing)  # type: ignore[arg-type]
    assert check_loadable(LockRecord)


def test_a_record_extends_another_with_its_fields_first() -> None:
    """A record may extend one record: the parent's fields (and defaults, factories
    included) come first, as a dataclass's do, so a shared field list is declared once; a
    field declared again, or a second record parent, is refused. The JSON loader reads the
    inherited fields too. Before, extending a record raised TypeError."""

    @record
    class Wider(Inner):
        extra: dict[str, Any] = field(default_factory=dict)
        note: str = ""

    assert fields(Wider) == ("name", "size", "extra", "note")
    made = Wider("n")
    assert (made.size, made.extra, made.note) == (0, {}, "") and made.extra is not Wider("m").extra
    assert made != Inner("n") and made == Wider("n", 0)
    assert load_record(Wider, {"name": "x", "size": 3, "note": "y"}) == Wider("x", 3, {}, "y")
    with pytest.raises(RecordError, match="size"):
        load_record(Wider, {"name": "x", "size": "3"})
    with pytest.raises(TypeError, match="declared by the record it extends"):
        @record
        class Again(Inner):
            size: int = 1
    with pytest.raises(TypeError, match="at most one"):
        @record
        class Both(Inner, Outer):
            pass
