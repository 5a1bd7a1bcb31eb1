"""Export a run to JSONL and import it back: exact, verified before writing, never clobbering."""

from __future__ import annotations

import asyncio
import dataclasses
import sqlite3
from collections.abc import AsyncIterator, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import cast

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.support import add, long_line, open_store, reseal
from tether import Agent, Event
from tether.codec import MAX_LINE_BYTES, encode_event, read_jsonl, write_jsonl
from tether.content import TextBlock
from tether.errors import BrokenChain, EmptyLog, LogError, StoreCorrupt, UnknownEventKind
from tether.events import ToolCallFinished
from tether.messages import ToolCall
from tether.stores import (
    MemoryStore,
    RunNotFound,
    RunQuery,
    RunStore,
    SqliteStore,
    StoreConflict,
    export_run,
    import_events,
    import_run,
)
from tether.testing import FakeClock, ScriptedModel, call, finish

T0 = datetime(2026, 1, 1, tzinfo=UTC)


@pytest.fixture(params=["memory", "sqlite"])
async def source(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[RunStore]:
    opened = open_store(cast(str, request.param), tmp_path / "source.db")
    try:
        yield opened
    finally:
        await opened.close()


@pytest.fixture(params=["memory", "sqlite"])
async def target(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[RunStore]:
    opened = open_store(cast(str, request.param), tmp_path / "target.db")
    try:
        yield opened
    finally:
        await opened.close()


async def agent_run(
    *, goal: str = "add 1 and 2", calls: int = 1, run_id: str | None = None
) -> list[Event]:
    script: list[ToolCall] = [call("add", a=i, b=2) for i in range(calls)]
    script.append(finish("3"))
    outcome = await Agent(name="adder", model=ScriptedModel(script), tools=[add]).run(
        goal, run_id=run_id, clock=FakeClock(T0)
    )
    assert outcome.status == "finished"
    return list(outcome.events)


async def stored_run(store: RunStore, *, goal: str = "add 1 and 2", calls: int = 1) -> list[Event]:
    events = await agent_run(goal=goal, calls=calls)
    await store.append(events[0].run_id, events)
    return events


def jsonl(events: Sequence[Event]) -> bytes:
    return b"".join(encode_event(e) + b"\n" for e in events)


def tamper(events: Sequence[Event]) -> tuple[list[Event], int]:
    """The log with one tool result's text changed (hash left as it was); its index."""
    index = next(i for i, e in enumerate(events) if isinstance(e, ToolCallFinished))
    edited = list(events)
    edited[index] = dataclasses.replace(
        cast(ToolCallFinished, events[index]), content=(TextBlock(text="4"),)
    )
    return edited, index


# -- export ------------------------------------------------------------------------------------


async def test_export_writes_what_write_jsonl_writes(source: RunStore, tmp_path: Path) -> None:
    events = await stored_run(source, calls=2)
    log = tmp_path / "run.jsonl"
    write_jsonl(log, events)

    data = await export_run(source, events[0].run_id)

    assert data == log.read_bytes()
    assert data.count(b"\n") == len(events)
    assert read_jsonl(log) == events


async def test_export_of_an_unknown_run_raises_run_not_found(source: RunStore) -> None:
    with pytest.raises(RunNotFound, match="no run 'nope'"):
        await export_run(source, "nope")


class UncheckedStore(MemoryStore):
    """A backend that reads back whatever it holds, unchecked (as a careless one might)."""

    def __init__(self, log: list[Event]) -> None:
        super().__init__()
        self.log = log

    async def read(self, run_id: str, *, after_seq: int = -1) -> list[Event]:
        return self.log[after_seq + 1 :]

    async def read_page(self, run_id: str, *, after_seq: int = -1, limit: int) -> list[Event]:
        return await RunStore.read_page(self, run_id, after_seq=after_seq, limit=limit)


async def test_export_verifies_the_chain_whatever_the_backend() -> None:
    edited, index = tamper(await agent_run())

    with pytest.raises(BrokenChain, match=f"at seq {index}: the hash does not match"):
        await export_run(UncheckedStore(edited), edited[0].run_id)


async def test_export_refuses_a_log_edited_inside_the_sqlite_file(tmp_path: Path) -> None:
    store = SqliteStore(tmp_path / "t.db")
    try:
        events = await stored_run(store)
        edited, index = tamper(events)
        with sqlite3.connect(store.path) as editor:  # as a DB browser would
            editor.execute(
                "UPDATE events SET body = ? WHERE run_id = ? AND seq = ?",
                (encode_event(edited[index]), events[0].run_id, index),
            )
        with pytest.raises(BrokenChain, match=f"at seq {index}"):
            await export_run(store, events[0].run_id)
    finally:
        await store.close()


# -- import ------------------------------------------------------------------------------------


async def test_round_trip_between_stores_is_exact(source: RunStore, target: RunStore) -> None:
    events = await stored_run(source, calls=3)
    run_id = events[0].run_id
    data = await export_run(source, run_id)

    assert await import_run(target, data) == run_id

    assert await target.read(run_id) == events
    assert await export_run(target, run_id) == data
    assert await target.info(run_id) == await source.info(run_id)


async def test_import_reads_a_file_given_as_path_or_str(target: RunStore, tmp_path: Path) -> None:
    events = await agent_run()
    log = tmp_path / "run.jsonl"
    write_jsonl(log, events)

    assert await import_run(target, log) == events[0].run_id
    assert await import_run(target, str(log)) == events[0].run_id  # again: a no-op
    assert await target.read(events[0].run_id) == events


async def test_reimporting_the_identical_run_is_a_no_op(target: RunStore) -> None:
    events = await agent_run()
    data = jsonl(events)
    await import_run(target, data)
    before = await target.info(events[0].run_id)

    assert await import_run(target, data) == events[0].run_id

    assert await target.read(events[0].run_id) == events
    assert await target.info(events[0].run_id) == before
    assert len(await target.runs()) == 1


@pytest.mark.parametrize("run_id", ["../../evil", "a/b", "x y", "", "[bold]x", "a" * 201])
async def test_import_refuses_a_run_id_no_command_could_name(target: RunStore, run_id: str) -> None:
    # a resealed log: its chain holds, but tether never makes (or takes) such an id
    events = reseal([dataclasses.replace(e, run_id=run_id) for e in await agent_run()])
    with pytest.raises(LogError, match="is not one tether makes or takes"):
        await import_run(target, jsonl(events))
    assert await target.runs() == []


async def test_import_refuses_a_stored_run_with_other_events(target: RunStore) -> None:
    mine = await stored_run(target, goal="add 1 and 2")
    theirs = await agent_run(goal="something else", run_id=mine[0].run_id)

    with pytest.raises(StoreConflict, match="already stored with different events") as raised:
        await import_run(target, jsonl(theirs))

    assert "they differ from seq 0" in str(raised.value)
    assert "import the log into another store" in str(raised.value)
    assert await target.read(mine[0].run_id) == mine


async def test_import_of_an_earlier_copy_of_a_stored_run_changes_nothing(
    target: RunStore,
) -> None:
    # before: refused, saying the logs "differ from seq 3", where the copy simply ended
    events = await agent_run(calls=2)
    run_id = events[0].run_id
    await target.append(run_id, events)

    assert await import_run(target, jsonl(events[:3])) == run_id

    assert await target.read(run_id) == events


async def test_import_over_a_cut_copy_of_the_same_run_adds_the_rest(target: RunStore) -> None:
    # the store holds the first events of the log (a process died mid-run): they were
    # refused as "different events", with advice no command could follow
    events = await agent_run(calls=2)
    run_id = events[0].run_id
    await target.append(run_id, events[:3])

    assert await import_run(target, jsonl(events)) == run_id

    assert await target.read(run_id) == events
    assert (await target.info(run_id)).status == "finished"


async def test_import_of_a_line_that_is_not_json_names_the_line(target: RunStore) -> None:
    events = await agent_run()
    lines = jsonl(events).splitlines(keepends=True)
    lines.insert(2, b"{not json\n")

    with pytest.raises(LogError, match=r"an event is not valid JSON .*\(line 3\)$"):
        await import_run(target, b"".join(lines))

    assert await target.runs() == []


async def test_import_of_an_unknown_event_kind_names_the_line(target: RunStore) -> None:
    data = jsonl(await agent_run()) + b'{"kind": "from_the_future"}\n'

    with pytest.raises(UnknownEventKind) as raised:
        await import_run(target, data)

    assert raised.value.line == data.count(b"\n")
    assert await target.runs() == []


async def test_import_of_an_event_that_breaks_its_schema_names_the_line(target: RunStore) -> None:
    events = await agent_run()
    lines = jsonl(events).splitlines(keepends=True)
    lines[1] = lines[1].replace(b'"seq":1', b'"seq":"one"')

    with pytest.raises(LogError, match=r"seq: .*\(line 2\)$"):
        await import_run(target, b"".join(lines))

    assert await target.runs() == []


async def test_import_of_a_tampered_log_writes_nothing(target: RunStore) -> None:
    edited, index = tamper(await agent_run())
    data = b"\n" + jsonl(edited)  # a leading blank line: line numbers still count it

    with pytest.raises(BrokenChain) as raised:
        await import_run(target, data)

    assert raised.value.seq == index
    assert raised.value.line == index + 2
    assert str(raised.value).startswith(
        f"event log chain broken at seq {index}: the hash does not match the event's content."
    )
    assert str(raised.value).endswith(f"(line {index + 2})")
    assert await target.runs(RunQuery()) == []
    with pytest.raises(RunNotFound):
        await target.read(edited[0].run_id)


async def test_import_of_a_log_with_a_missing_event_writes_nothing(target: RunStore) -> None:
    events = await agent_run()
    gapped = events[:2] + events[3:]

    with pytest.raises(BrokenChain, match="expected seq 2, found 3"):
        await import_run(target, jsonl(gapped))

    assert await target.runs() == []


async def test_import_of_an_empty_log_says_what_to_do(target: RunStore) -> None:
    with pytest.raises(EmptyLog, match=r"holds no events .* `tether export RUN > FILE`"):
        await import_run(target, b"\n  \n")


async def test_import_of_a_log_that_is_not_a_whole_run_is_refused(target: RunStore) -> None:
    events = await agent_run()
    tail = reseal([dataclasses.replace(e, seq=i) for i, e in enumerate(events[1:])])

    with pytest.raises(LogError, match="begins with a 'model_responded' event, not 'run_started'"):
        await import_run(target, jsonl(tail))

    assert await target.runs() == []


async def test_import_of_a_line_over_the_cap_names_it_and_writes_nothing(
    target: RunStore, tmp_path: Path
) -> None:
    events = await agent_run()
    data = jsonl(events[:2]) + long_line(MAX_LINE_BYTES + 1) + b"\n" + jsonl(events[2:])
    log = tmp_path / "run.jsonl"
    log.write_bytes(data)

    for source, name in ((data, "the log"), (log, str(log))):
        with pytest.raises(LogError) as raised:
            await import_run(target, source)
        assert str(raised.value).startswith(f"{name}: a line is longer than 16 MiB")
        assert raised.value.line == 3
    assert await target.runs() == []


async def test_import_events_checks_the_events_before_writing(target: RunStore) -> None:
    events = await agent_run()
    edited, index = tamper(events)

    with pytest.raises(BrokenChain) as raised:
        await import_events(target, edited)
    assert raised.value.seq == index
    with pytest.raises(EmptyLog, match=r"^the log holds no events"):
        await import_events(target, [])
    with pytest.raises(LogError, match="not 'run_started'"):
        await import_events(
            target, reseal([dataclasses.replace(e, seq=i) for i, e in enumerate(events[1:])])
        )
    assert await target.runs() == []

    assert await import_events(target, events) == events[0].run_id
    assert await import_events(target, events) == events[0].run_id  # again: a no-op
    assert await target.read(events[0].run_id) == events


async def test_import_tolerates_crlf_and_blank_lines(target: RunStore) -> None:
    events = await agent_run()
    data = b"\r\n".join(encode_event(e) for e in events) + b"\r\n\r\n"

    await import_run(target, data)

    assert await target.read(events[0].run_id) == events


# -- property: any run survives export → import → export byte for byte ---------------------------

goals = st.text(min_size=1, max_size=40).filter(lambda g: g.strip() != "")


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(goal=goals, calls=st.integers(0, 4))
def test_any_run_round_trips_exactly(goal: str, calls: int) -> None:
    async def round_trip() -> tuple[list[Event], bytes, bytes, list[Event]]:
        source, target = MemoryStore(), MemoryStore()
        events = await stored_run(source, goal=goal, calls=calls)
        first = await export_run(source, events[0].run_id)
        await import_run(target, first)
        second = await export_run(target, events[0].run_id)
        return events, first, second, await target.read(events[0].run_id)

    events, first, second, imported = asyncio.run(round_trip())
    assert first == second
    assert imported == events


async def test_a_time_at_the_edge_of_the_calendar_imports(tmp_path: Path) -> None:
    # UTC puts 0001-01-01T00:30+01:00 in year 0: indexing it raised OverflowError
    edge = datetime.fromisoformat("0001-01-01T00:30:00+01:00")
    events = reseal([dataclasses.replace(e, at=edge) for e in await agent_run()])
    store = SqliteStore(tmp_path / "t.db")
    try:
        run_id = await import_run(store, jsonl(events))
        assert await store.read(run_id) == events
    finally:
        await store.close()


async def test_a_damaged_index_row_is_a_store_corrupt_error(tmp_path: Path) -> None:
    store = SqliteStore(tmp_path / "t.db")
    try:
        run_id = await import_run(store, jsonl(await agent_run()))
    finally:
        await store.close()
    with sqlite3.connect(tmp_path / "t.db") as db:
        db.execute("UPDATE runs SET created_at = '2026-11-29 garbage'")
    store = SqliteStore(tmp_path / "t.db")
    try:
        with pytest.raises(StoreCorrupt, match=f"index row of run '{run_id}' is damaged"):
            await store.runs()
    finally:
        await store.close()
