"""The event codec and the hash chain: exact round trips, clear errors, tamper evidence."""

from __future__ import annotations

import dataclasses
import io
import tracemalloc
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, cast

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tether import Agent, Event, Limits, Usage
from tether.codec import (
    MAX_LINE_BYTES,
    compute_hash,
    decode_event,
    encode_event,
    iter_jsonl,
    read_jsonl,
    seal,
    verify_chain,
    write_jsonl,
)
from tether.errors import BrokenChain, EmptyLog, LogError, UnknownEventKind
from tether.events import EVENT_TYPES, GENESIS_HASH, RunStarted, ToolCallFinished
from tether.testing import FakeClock, ScriptedModel, call, finish

from .support import add, long_line


async def recorded_run() -> tuple[Event, ...]:
    model = ScriptedModel([[call("add", a=1, b=2), call("add", a=3, b=4)], finish("3 and 7")])
    agent = Agent(tools=[add], limits=Limits(max_seconds=60, max_cost=2))
    return (await agent.run("add", model=model, clock=FakeClock())).events


async def test_every_event_round_trips_exactly() -> None:
    events = await recorded_run()
    for event in events:
        encoded = encode_event(event)
        decoded = decode_event(encoded)
        assert decoded == event
        assert encode_event(decoded) == encoded
        assert compute_hash(decoded) == event.hash
    verify_chain(events)


async def test_int_valued_floats_keep_a_stable_encoding() -> None:
    events = await recorded_run()
    started = events[0]
    assert isinstance(started, RunStarted)
    assert started.limits.max_seconds == 60.0
    assert isinstance(started.limits.max_seconds, float)
    assert Usage(cost=1).cost == 1.0
    verify_chain([decode_event(encode_event(e)) for e in events])


async def test_events_are_frozen() -> None:
    event = (await recorded_run())[0]
    with pytest.raises(dataclasses.FrozenInstanceError):
        event.seq = 5  # pyright: ignore[reportAttributeAccessIssue]


def test_unknown_kind_is_a_clear_error() -> None:
    with pytest.raises(UnknownEventKind, match=r"'telepathy'.*never skipped silently") as info:
        decode_event(b'{"kind":"telepathy","run_id":"r"}', line=7)
    assert info.value.line == 7


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        (b"{not json", "not valid JSON"),
        (b"[1,2]", "must be a JSON object"),
        (b'{"run_id":"r"}', "no string 'kind'"),
        (b'{"kind":"run_finished","run_id":"r"}', "does not fit its schema"),
    ],
)
def test_malformed_lines_are_clear_errors(raw: bytes, message: str) -> None:
    with pytest.raises(LogError, match=message):
        decode_event(raw, line=3)


async def test_unknown_fields_are_refused_not_dropped() -> None:
    encoded = encode_event((await recorded_run())[0])
    tampered = encoded.replace(b'"goal"', b'"injected":true,"goal"')
    with pytest.raises(LogError, match="injected"):
        decode_event(tampered)


async def test_an_edited_event_breaks_the_chain() -> None:
    events = list(await recorded_run())
    finished = events[6]
    assert isinstance(finished, ToolCallFinished)
    events[6] = dataclasses.replace(finished, is_error=True)
    with pytest.raises(BrokenChain, match="seq 6: the hash does not match"):
        verify_chain(events)


async def test_a_resealed_edit_still_breaks_at_the_next_event() -> None:
    events = list(await recorded_run())
    finished = events[6]
    assert isinstance(finished, ToolCallFinished)
    events[6] = seal(dataclasses.replace(finished, is_error=True, hash=""))
    with pytest.raises(BrokenChain, match="seq 7: prev_hash"):
        verify_chain(events)


async def test_reordered_and_truncated_logs_are_refused() -> None:
    events = list(await recorded_run())
    swapped = [*events[:3], events[4], events[3], *events[5:]]
    with pytest.raises(BrokenChain, match="seq 3: expected seq 3, found 4"):
        verify_chain(swapped)
    with pytest.raises(BrokenChain, match="seq 4"):
        verify_chain([*events[:4], *events[5:]])


async def test_a_foreign_event_is_refused() -> None:
    events = list(await recorded_run())
    other = list(await recorded_run())
    with pytest.raises(BrokenChain, match="belongs to run"):
        verify_chain([*events[:3], other[3]])


async def test_jsonl_files_round_trip_and_name_the_bad_line(tmp_path: Path) -> None:
    events = await recorded_run()
    path = tmp_path / "run.jsonl"
    write_jsonl(path, events)
    assert read_jsonl(path) == list(events)
    lines = path.read_bytes().splitlines()
    lines[4] = lines[4][:-5]
    path.write_bytes(b"\n".join(lines) + b"\n")
    with pytest.raises(LogError, match=r"line 5"):
        read_jsonl(path)


@pytest.mark.parametrize(
    "content", [b"", b"\n", b"  \n\r\n\t\n"], ids=["empty", "newline", "blank"]
)
def test_read_jsonl_of_a_log_without_events_is_an_error(tmp_path: Path, content: bytes) -> None:
    path = tmp_path / "run.jsonl"
    path.write_bytes(content)

    with pytest.raises(EmptyLog, match=f"the log {path} holds no events"):
        read_jsonl(path)
    assert read_jsonl(path, verify=False) == []


async def test_a_line_over_the_cap_is_an_error_naming_the_file_line_and_cap(
    tmp_path: Path,
) -> None:
    events = await recorded_run()
    path = tmp_path / "run.jsonl"
    write_jsonl(path, events[:2])
    with path.open("ab") as fh:
        fh.write(long_line(MAX_LINE_BYTES + 1) + b"\n")

    with pytest.raises(LogError) as info:
        read_jsonl(path)
    assert info.value.line == 3
    message = str(info.value)
    assert message.startswith(f"{path}: a line is longer than 16 MiB, the limit on one event")
    assert "pass max_line_bytes" in message
    assert message.endswith("(line 3)")


async def test_a_line_at_the_cap_is_read(tmp_path: Path) -> None:
    events = await recorded_run()
    [event] = events[:1]
    assert isinstance(event, RunStarted)
    encoded = encode_event(event)
    path = tmp_path / "run.jsonl"
    path.write_bytes(encoded + b"\r\n")

    assert read_jsonl(path, max_line_bytes=len(encoded) + 1) == [event]  # \r counts, \n not
    with pytest.raises(LogError, match="longer than"):
        read_jsonl(path, max_line_bytes=len(encoded))


def test_reading_a_long_line_holds_only_about_the_cap_in_memory(tmp_path: Path) -> None:
    cap = 1024 * 1024
    path = tmp_path / "huge.jsonl"
    path.write_bytes(long_line(16 * cap) + b"\n")
    in_memory = io.BytesIO(path.read_bytes())  # allocated before tracing starts: not counted

    for source in (path, in_memory):
        tracemalloc.start()
        try:
            with pytest.raises(LogError, match="longer than 1 MiB"):
                list(iter_jsonl(source, max_line_bytes=cap))
            _, peak = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
        assert peak < 4 * cap, f"reading {source} took {peak} bytes for a 16 MiB line"


def test_event_kinds_are_unique_and_complete() -> None:
    assert len(EVENT_TYPES) == 25
    for kind, cls in EVENT_TYPES.items():
        assert cls.__dataclass_fields__["kind"].default == kind
        names = [f.name for f in dataclasses.fields(cls)]
        assert names[:6] == ["kind", "run_id", "seq", "at", "prev_hash", "hash"]


json_values: st.SearchStrategy[Any] = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**53), 2**53)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=8),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3)
    ),
    max_leaves=8,
)


@settings(max_examples=200, deadline=None)
@given(
    arguments=st.dictionaries(st.text(max_size=6), json_values, max_size=4),
    structured=json_values,
    text=st.text(),
    seconds=st.floats(0, 1e6),
)
def test_arbitrary_payloads_round_trip(
    arguments: dict[str, Any], structured: object, text: str, seconds: float
) -> None:
    from tether.content import TextBlock
    from tether.events import ToolCallRequested

    at = datetime(2026, 1, 1, tzinfo=UTC)
    requested = seal(
        ToolCallRequested(
            run_id="r",
            seq=0,
            at=at,
            prev_hash=GENESIS_HASH,
            call_id="c",
            tool="t",
            arguments=arguments,
            reason=text,
        )
    )
    finished = seal(
        ToolCallFinished(
            run_id="r",
            seq=1,
            at=at,
            prev_hash=requested.hash,
            call_id="c",
            tool="t",
            content=(TextBlock(text=text),),
            structured=cast(Any, structured),
            duration_s=seconds,
        )
    )
    decoded = [decode_event(encode_event(e)) for e in (requested, finished)]
    assert decoded == [requested, finished]
    verify_chain(decoded)
    assert orjson.loads(encode_event(finished))["kind"] == "tool_call_finished"


def test_a_byte_order_mark_an_editor_added_is_not_part_of_the_first_event(
    tmp_path: Path,
) -> None:
    # before: show and import refused the file ("BOM is not supported"), audit called it
    # tampered, though every event was as written
    events = list(Agent(model=ScriptedModel([finish("ok")])).run_sync("x").events)
    path = tmp_path / "saved.jsonl"
    write_jsonl(path, events)
    path.write_bytes(b"\xef\xbb\xbf" + path.read_bytes())
    assert read_jsonl(path) == events
    mid = tmp_path / "mid.jsonl"  # elsewhere it is not the editor's mark: the line is bad
    lines = (tmp_path / "saved.jsonl").read_bytes()[3:].splitlines(keepends=True)
    mid.write_bytes(lines[0] + b"\xef\xbb\xbf" + b"".join(lines[1:]))
    with pytest.raises(LogError):
        read_jsonl(mid)
