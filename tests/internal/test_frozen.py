"""``@frozen`` classes behave like ``dataclass(frozen=True, kw_only=True)``."""

from __future__ import annotations

import copy
import dataclasses
import inspect
import math
import pickle
from datetime import UTC, datetime

import pytest

from tether._internal.frozen import frozen
from tether.codec import decode_event, encode_event, seal
from tether.events import GENESIS_HASH, ToolCallFinished
from tether.limits import Limits
from tether.messages import ToolCall
from tether.policy.rules import Rule
from tether.usage import Usage


def event() -> ToolCallFinished:
    return seal(
        ToolCallFinished(
            run_id="r",
            seq=0,
            at=datetime(2026, 1, 1, tzinfo=UTC),
            prev_hash=GENESIS_HASH,
            call_id="c",
            tool="t",
            content=(),
        )
    )


@pytest.mark.parametrize(
    "value",
    [event(), ToolCall(id="c", name="n", arguments={"a": 1}), Usage(input_tokens=3), Limits()],
)
def test_writes_and_deletes_are_refused(value: object) -> None:
    name = dataclasses.fields(value)[0].name  # pyright: ignore[reportArgumentType]
    with pytest.raises(dataclasses.FrozenInstanceError):
        setattr(value, name, "x")
    with pytest.raises(dataclasses.FrozenInstanceError):
        delattr(value, name)


@pytest.mark.parametrize(
    "value",
    [event(), ToolCall(id="c", name="n", arguments={"a": 1}), Usage(cost=1.5), Limits(max_steps=3)],
)
def test_pickle_copy_and_replace_round_trip(value: object) -> None:
    assert pickle.loads(pickle.dumps(value)) == value
    assert copy.copy(value) == value
    assert copy.deepcopy(value) == value
    assert dataclasses.replace(value) == value  # pyright: ignore[reportArgumentType]


def test_keyword_only_defaults_factories_and_post_init() -> None:
    call = ToolCall(id="c", name="n")
    assert call.arguments == {}
    assert ToolCall(id="d", name="n").arguments is not call.arguments  # a fresh default each time
    assert Limits(max_seconds=5).max_seconds == 5.0  # __post_init__ ran
    with pytest.raises(TypeError):
        ToolCall("c", "n")  # type: ignore[misc]  # pyright: ignore[reportCallIssue]


def test_equality_and_hash_follow_the_fields() -> None:
    assert Usage(input_tokens=1) == Usage(input_tokens=1)
    assert hash(Usage(input_tokens=1)) == hash(Usage(input_tokens=1))
    assert Usage(input_tokens=1) != Usage(input_tokens=2)
    assert {Limits(), Limits()} == {Limits()}


def test_events_survive_the_codec_unchanged() -> None:
    original = event()
    assert decode_event(encode_event(original)) == original


@frozen(slots=False)
class _Plain:
    a: int
    b: str = "x"
    hidden: int = dataclasses.field(default=0, repr=False, compare=False)


@dataclasses.dataclass(frozen=True, kw_only=True)
class _Stdlib:
    a: int
    b: str = "x"
    hidden: int = dataclasses.field(default=0, repr=False, compare=False)


@frozen
class _Nested:
    inner: object = None


def test_repr_and_equality_read_as_the_stdlib_dataclass_would() -> None:
    ours, theirs = _Plain(a=1, b="y", hidden=5), _Stdlib(a=1, b="y", hidden=5)
    assert repr(ours) == repr(theirs).replace("_Stdlib", "_Plain") == "_Plain(a=1, b='y')"
    assert ours == _Plain(a=1, b="y", hidden=6)  # a field left out of comparison
    assert ours != _Plain(a=2, b="y")
    assert ours != theirs  # another class is never equal, as with dataclasses
    assert ours.__eq__(theirs) is NotImplemented
    assert repr(Usage(input_tokens=3)).startswith("Usage(input_tokens=3, ")


def test_a_value_that_holds_itself_still_has_a_repr() -> None:
    box: list[object] = []
    nested = _Nested(inner=box)
    box.append(nested)
    assert repr(nested) == "_Nested(inner=[...])"


def test_the_constructor_is_compiled_on_first_use_and_reports_like_a_dataclass() -> None:
    @frozen
    class Fresh:
        a: int
        b: int = 2
        c: list[int] = dataclasses.field(default_factory=lambda: [])

    @dataclasses.dataclass(frozen=True, kw_only=True)
    class Theirs:
        a: int
        b: int = 2
        c: list[int] = dataclasses.field(default_factory=lambda: [])

    first = Fresh.__init__
    shown = str(inspect.signature(Theirs))
    assert str(inspect.signature(Fresh)) == shown  # before the first instance (help, Jupyter)
    with pytest.raises(TypeError, match="missing 1 required keyword-only argument: 'a'"):
        Fresh()  # type: ignore[call-arg]  # pyright: ignore[reportCallIssue]
    assert Fresh.__init__ is not first  # the real constructor took over
    assert str(inspect.signature(Fresh)) == shown
    assert Fresh(a=1) == Fresh(a=1, b=2)
    with pytest.raises(TypeError, match="positional"):
        Fresh(1)  # type: ignore[misc]  # pyright: ignore[reportCallIssue]


@frozen(slots=False)
class _Derived:
    a: int
    derived: int = dataclasses.field(init=False, repr=False, compare=False)
    cache: list[int] = dataclasses.field(
        init=False, repr=False, compare=False, default_factory=lambda: []
    )

    def __post_init__(self) -> None:
        object.__setattr__(self, "derived", self.a * 2)


def test_fields_outside_the_constructor_are_set_by_default_or_post_init() -> None:
    value = _Derived(a=2)
    assert (value.derived, value.cache) == (4, [])
    assert _Derived(a=2).cache is not value.cache
    assert value == _Derived(a=2)
    assert hash(value) == hash(_Derived(a=2))
    assert repr(value) == "_Derived(a=2)"
    with pytest.raises(TypeError):
        _Derived(a=1, derived=3)  # type: ignore[call-arg]  # pyright: ignore[reportCallIssue]


def test_methods_the_class_body_defines_are_kept() -> None:
    @frozen
    class Own:
        a: int

        def __eq__(self, other: object) -> bool:
            return True

        def __hash__(self) -> int:
            return 7

        def __repr__(self) -> str:
            return "own"

    assert Own(a=1) == Own(a=2)
    assert hash(Own(a=1)) == 7
    assert repr(Own(a=1)) == "own"


def test_one_field_compares_as_a_tuple_and_hash_follows_the_hash_flag() -> None:
    @frozen
    class One:
        x: float

    @frozen
    class Unhashed:
        a: int
        notes: list[str] = dataclasses.field(default_factory=lambda: [], hash=False)

    nan = math.nan
    assert One(x=nan) == One(x=nan)  # the same object in both: equal, as a tuple compares
    assert hash(Unhashed(a=1, notes=["x"])) == hash(Unhashed(a=1))


def test_submodules_loaded_late_are_still_attributes_of_their_package() -> None:
    import tether.policy
    import tether.stores

    assert tether.stores.sqlite.SqliteStore is tether.stores.SqliteStore
    assert "SqliteStore" in dir(tether.stores)
    assert tether.policy.dataflow.Sources.__name__ == "Sources"


def test_the_rule_classes_extend_as_stdlib_frozen_dataclasses_do() -> None:
    from tether.policy.rules import Rule, Rules

    @dataclasses.dataclass(frozen=True, kw_only=True)
    class Tagged(Rule):
        tag: str = "t"

    rule = Tagged(decision="allow", tools=("read_*",), tag="x")
    assert rule.tag == "x"
    assert copy.copy(rule) == rule
    with pytest.raises(TypeError, match="non-frozen"):

        @dataclasses.dataclass  # pyright: ignore[reportGeneralTypeIssues]
        class Mutable(Rules):  # pyright: ignore[reportUnusedClass, reportGeneralTypeIssues]
            extra: int = 0

    @frozen(slots=False)
    class _Base:
        a: int = 0

    @frozen(slots=False)
    class _Sub(_Base):
        b: int = 1

    assert _Sub(a=2) == _Sub(a=2, b=1)
    with pytest.raises(dataclasses.FrozenInstanceError):
        _Sub().b = 3  # type: ignore[misc]  # pyright: ignore[reportAttributeAccessIssue]


class _ExtraRule(Rule):
    """A rule whose ``__post_init__`` sets an attribute that is not a field."""

    def __post_init__(self) -> None:
        super().__post_init__()
        object.__setattr__(self, "extra", 42)


def test_a_subclass_keeps_what_its_post_init_adds_through_copy_and_pickle() -> None:
    rule = _ExtraRule(decision="allow")
    for again in (copy.copy(rule), copy.deepcopy(rule), pickle.loads(pickle.dumps(rule))):
        assert again == rule
        assert getattr(again, "extra") == 42  # noqa: B009 - set outside the fields
