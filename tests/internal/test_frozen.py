"""``@frozen`` classes behave like ``dataclass(frozen=True, kw_only=True)``."""

from __future__ import annotations

import copy
import dataclasses
import pickle
from datetime import UTC, datetime

import pytest

from tether.codec import decode_event, encode_event, seal
from tether.events import GENESIS_HASH, ToolCallFinished
from tether.limits import Limits
from tether.messages import ToolCall
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
