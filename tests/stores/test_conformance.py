"""The ``RunStore`` contract, checked against every backend (the ``store`` fixture).

Logs come from real agent runs (``helpers.agent_log``) or are built by hand and sealed.
"""

from __future__ import annotations

import asyncio
import dataclasses
import itertools
import os
import socket
import sys
import time
import uuid
from collections.abc import Sequence
from datetime import timedelta, timezone
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tether import Event, Usage
from tether.codec import write_jsonl
from tether.events import GENESIS_HASH, ModelResponded, RunFinished, ToolCallFinished
from tether.stores import (
    Lease,
    LeaseHeld,
    RunInfo,
    RunNotFound,
    RunQuery,
    RunStore,
    SqliteStore,
    StaleLease,
    StoreConflict,
)

from .helpers import (
    T0,
    agent_log,
    finished,
    rechain,
    relabel,
    reply,
    resealed,
    tool_results,
    waiting_log,
)

DAY = timedelta(days=1)


def new_id() -> str:
    return str(uuid.uuid4())


def turns(log: Sequence[Event]) -> int:
    return sum(1 for e in log if isinstance(e, ModelResponded))


def first_finish(log: Sequence[Event]) -> int:
    """The index of the log's ``run_finished``."""
    return next(i for i, e in enumerate(log) if isinstance(e, RunFinished))


def altered(event: Event) -> Event:
    """A different, validly sealed event at the same seq (same prev_hash)."""
    return resealed(dataclasses.replace(event, at=event.at + timedelta(seconds=7)))


async def stored_ids(store: RunStore, query: RunQuery | None = None) -> list[str]:
    return [row.run_id for row in await store.runs(query or RunQuery())]


def require_sqlite(store: RunStore) -> SqliteStore:
    if not isinstance(store, SqliteStore):
        pytest.skip("SQLite only")
    return store


# -- append and read --------------------------------------------------------------------


async def test_append_then_read_returns_the_exact_events_in_order(store: RunStore) -> None:
    log = await agent_log()
    await store.append(log[0].run_id, log)
    got = await store.read(log[0].run_id)
    assert got == log
    assert [e.seq for e in got] == list(range(len(log)))
    assert [e.hash for e in got] == [e.hash for e in log]
    assert [type(e) for e in got] == [type(e) for e in log]


async def test_appending_in_several_batches(store: RunStore) -> None:
    log = await agent_log(calls=3)
    run_id = log[0].run_id
    cuts = [0, 1, 4, 5, 9, len(log)]
    for lo, hi in itertools.pairwise(cuts):
        await store.append(run_id, log[lo:hi])
        assert await store.read(run_id) == log[:hi]
    assert await store.read(run_id) == log


async def test_one_event_at_a_time(store: RunStore) -> None:
    log = await agent_log()
    for event in log:
        await store.append(event.run_id, [event])
    assert await store.read(log[0].run_id) == log


async def test_an_empty_append_stores_nothing(store: RunStore) -> None:
    run_id = new_id()
    await store.append(run_id, [])
    with pytest.raises(RunNotFound):
        await store.read(run_id)
    assert await store.runs() == []


async def test_re_appending_the_whole_log_is_a_no_op(store: RunStore) -> None:
    log = await agent_log()
    run_id = log[0].run_id
    await store.append(run_id, log)
    before = await store.info(run_id)
    await store.append(run_id, log)
    await store.append(run_id, log[2:5])
    await store.append(run_id, log[-1:])
    assert await store.read(run_id) == log
    assert await store.info(run_id) == before


async def test_an_overlapping_batch_appends_only_its_new_events(store: RunStore) -> None:
    log = await agent_log()
    run_id = log[0].run_id
    await store.append(run_id, log[:5])
    await store.append(run_id, log[3:8])
    assert await store.read(run_id) == log[:8]
    await store.append(run_id, log)
    assert await store.read(run_id) == log
    info = await store.info(run_id)
    assert info.events == len(log)
    assert info.usage.requests == turns(log)


# -- what append refuses ----------------------------------------------------------------


async def test_a_different_event_at_a_stored_seq_is_a_conflict(store: RunStore) -> None:
    log = await agent_log()
    run_id = log[0].run_id
    await store.append(run_id, log[:6])
    with pytest.raises(StoreConflict):
        await store.append(run_id, [altered(log[4])])
    forged = rechain([altered(log[3]), *log[4:8]])
    with pytest.raises(StoreConflict):
        await store.append(run_id, forged)  # overlaps, but the overlap differs
    with pytest.raises(StoreConflict):
        await store.append(run_id, [altered(log[0])])
    assert await store.read(run_id) == log[:6]


async def test_a_gap_is_a_conflict_and_stores_nothing(store: RunStore) -> None:
    log = await agent_log()
    run_id = log[0].run_id
    await store.append(run_id, log[:4])
    with pytest.raises(StoreConflict):
        await store.append(run_id, log[5:7])
    with pytest.raises(StoreConflict):
        await store.append(run_id, [log[4], log[6]])
    assert await store.read(run_id) == log[:4]
    assert (await store.info(run_id)).events == 4


async def test_a_first_append_that_does_not_start_at_seq_0_is_refused(store: RunStore) -> None:
    log = await agent_log()
    run_id = log[0].run_id
    with pytest.raises(StoreConflict):
        await store.append(run_id, log[1:])
    with pytest.raises(RunNotFound):
        await store.read(run_id)
    assert await store.runs() == []


async def test_a_bad_event_in_the_middle_leaves_the_log_unchanged(store: RunStore) -> None:
    log = await agent_log(calls=3)
    run_id = log[0].run_id
    await store.append(run_id, log[:3])
    before = await store.info(run_id)
    bad = dataclasses.replace(log[5], seq=6)  # seq 5 is missing: a gap mid-batch
    with pytest.raises(StoreConflict):
        await store.append(run_id, [*log[3:5], bad, *log[7:9]])
    with pytest.raises(StoreConflict):
        await store.append(run_id, [*log[3:6], altered(log[6]), *log[7:9]])  # breaks the chain
    assert await store.read(run_id) == log[:3]
    assert await store.info(run_id) == before
    await store.append(run_id, log[3:])  # the store is still usable
    assert await store.read(run_id) == log


async def test_an_event_that_does_not_chain_is_refused(store: RunStore) -> None:
    log = await agent_log()
    run_id = log[0].run_id
    await store.append(run_id, log[:4])
    unchained = resealed(dataclasses.replace(log[4], prev_hash="f" * 64))
    with pytest.raises(StoreConflict):
        await store.append(run_id, [unchained])
    with pytest.raises(StoreConflict):
        await store.append(
            run_id, [log[4], resealed(dataclasses.replace(log[5], prev_hash=GENESIS_HASH))]
        )
    assert await store.read(run_id) == log[:4]


async def test_a_first_event_that_does_not_chain_to_genesis_is_refused(store: RunStore) -> None:
    log = rechain(await agent_log(), prev_hash="f" * 64)
    run_id = log[0].run_id
    with pytest.raises(StoreConflict):
        await store.append(run_id, log)
    with pytest.raises(RunNotFound):
        await store.read(run_id)


async def test_whatever_append_accepts_reads_back(store: RunStore) -> None:
    """An event whose hash is not its seal is refused, or at least stored readably."""
    log = await agent_log()
    run_id = log[0].run_id
    tampered = dataclasses.replace(log[3], at=log[3].at + timedelta(seconds=1))  # hash kept
    events = [*log[:3], tampered, *log[4:]]
    try:
        await store.append(run_id, events)
    except StoreConflict:
        with pytest.raises(RunNotFound):
            await store.read(run_id)
    else:
        assert await store.read(run_id) == events


async def test_an_event_of_another_run_is_refused(store: RunStore) -> None:
    a = await agent_log()
    b = await agent_log()
    with pytest.raises(StoreConflict):
        await store.append(a[0].run_id, b)
    with pytest.raises(StoreConflict):
        await store.append(a[0].run_id, [*a[:3], b[3]])
    for run_id in (a[0].run_id, b[0].run_id):
        with pytest.raises(RunNotFound):
            await store.read(run_id)
    await store.append(a[0].run_id, a[:3])
    with pytest.raises(StoreConflict):
        await store.append(a[0].run_id, relabel(a, b[0].run_id)[3:5])
    assert await store.read(a[0].run_id) == a[:3]
    with pytest.raises(RunNotFound):
        await store.read(b[0].run_id)


# -- read -------------------------------------------------------------------------------


async def test_read_after_seq(store: RunStore) -> None:
    log = await agent_log()
    run_id = log[0].run_id
    await store.append(run_id, log)
    assert await store.read(run_id, after_seq=-1) == log
    assert await store.read(run_id, after_seq=0) == log[1:]
    assert await store.read(run_id, after_seq=4) == log[5:]
    assert await store.read(run_id, after_seq=len(log) - 2) == log[-1:]
    assert await store.read(run_id, after_seq=len(log) - 1) == []
    assert await store.read(run_id, after_seq=len(log) + 10) == []


async def test_read_after_a_seq_below_minus_one_returns_everything(store: RunStore) -> None:
    log = await agent_log()
    run_id = log[0].run_id
    await store.append(run_id, log)
    assert await store.read(run_id, after_seq=-2) == log
    assert await store.read(run_id, after_seq=-100) == log


async def test_read_of_an_unknown_run_raises_run_not_found(store: RunStore) -> None:
    await store.append((log := await agent_log())[0].run_id, log)
    with pytest.raises(RunNotFound):
        await store.read("no-such-run")
    with pytest.raises(RunNotFound):
        await store.info("no-such-run")


async def test_read_after_seq_of_an_unknown_run_raises_run_not_found(store: RunStore) -> None:
    with pytest.raises(RunNotFound):
        await store.read("no-such-run", after_seq=0)
    with pytest.raises(RunNotFound):
        await store.read("no-such-run", after_seq=5)


async def test_reading_returns_a_copy(store: RunStore) -> None:
    log = await agent_log()
    run_id = log[0].run_id
    await store.append(run_id, log)
    got = await store.read(run_id)
    got.clear()
    assert await store.read(run_id) == log


# -- isolation --------------------------------------------------------------------------


async def test_two_runs_are_isolated(store: RunStore) -> None:
    a = await agent_log(calls=1)
    b = await agent_log(calls=3)
    await store.append(a[0].run_id, a[:2])
    await store.append(b[0].run_id, b[:5])
    await store.append(a[0].run_id, a[2:])
    await store.append(b[0].run_id, b[5:])
    assert await store.read(a[0].run_id) == a
    assert await store.read(b[0].run_id) == b
    assert (await store.info(a[0].run_id)).events == len(a)
    assert (await store.info(b[0].run_id)).events == len(b)
    assert (await store.info(a[0].run_id)).usage.requests == 2
    assert (await store.info(b[0].run_id)).usage.requests == 4


async def test_the_same_log_under_two_ids_is_two_runs(store: RunStore) -> None:
    a = await agent_log()
    b = relabel(a, new_id())
    await store.append(a[0].run_id, a)
    await store.append(b[0].run_id, b[:3])
    assert await store.read(a[0].run_id) == a
    assert await store.read(b[0].run_id) == b[:3]
    assert sorted(await stored_ids(store)) == sorted([a[0].run_id, b[0].run_id])


# -- the runs index ---------------------------------------------------------------------


async def test_the_index_row_of_a_finished_run(store: RunStore) -> None:
    log = await agent_log(
        agent="alpha", goal="sum it", calls=2, tags=("x", "y"), parent_run_id="parent-1"
    )
    run_id = log[0].run_id
    await store.append(run_id, log)
    info = await store.info(run_id)
    assert info == RunInfo(
        run_id=run_id,
        agent="alpha",
        goal="sum it",
        status="finished",
        created_at=log[0].at,
        updated_at=log[-1].at,
        usage=Usage(input_tokens=30, output_tokens=15, requests=3, cost=0.75),
        steps=3,
        events=len(log),
        parent_run_id="parent-1",
        tags=("x", "y"),
    )
    assert await store.runs() == [info]


async def test_the_index_keeps_text_and_unknown_cost_exactly(store: RunStore) -> None:
    log = await agent_log(
        agent='ağent "q"',
        goal="héllo 🚀\nsecond line; DROP TABLE runs; --",
        tags=("ünï", "a,b", "[]", ""),
        usage=Usage(input_tokens=7, output_tokens=3, cost=None),
    )
    run_id = log[0].run_id
    await store.append(run_id, log)
    info = await store.info(run_id)
    assert info.agent == 'ağent "q"'
    assert info.goal == "héllo 🚀\nsecond line; DROP TABLE runs; --"
    assert info.tags == ("ünï", "a,b", "[]", "")
    assert info.usage == Usage(input_tokens=21, output_tokens=9, requests=3, cost=None)
    assert await stored_ids(store, RunQuery(agent='ağent "q"')) == [run_id]


async def test_status_is_running_until_run_finished(store: RunStore) -> None:
    log = await agent_log(calls=2)
    run_id = log[0].run_id
    end = first_finish(log)
    await store.append(run_id, log[:1])
    info = await store.info(run_id)
    assert (info.status, info.events, info.steps, info.usage) == ("running", 1, 0, Usage(cost=0.0))
    await store.append(run_id, log[1:end])
    info = await store.info(run_id)
    assert info.status == "running"
    assert info.events == end
    assert info.updated_at == log[end - 1].at
    assert info.usage == Usage(input_tokens=30, output_tokens=15, requests=3, cost=0.75)
    await store.append(run_id, log[end:])
    info = await store.info(run_id)
    assert info.status == "finished"
    assert info.events == len(log)
    assert info.updated_at == log[-1].at


async def test_a_waiting_run_is_running_again_when_more_events_follow(store: RunStore) -> None:
    log = await waiting_log()
    run_id = log[0].run_id
    await store.append(run_id, log)
    info = await store.info(run_id)
    assert info.status == "waiting_for_user"
    assert info.events == len(log)
    assert info.usage.requests == 1
    answer = reply(log)
    await store.append(run_id, [answer])
    info = await store.info(run_id)
    assert info.status == "running"
    assert info.events == len(log) + 1
    assert info.updated_at == answer.at
    done = finished([*log, answer])
    await store.append(run_id, [done])
    info = await store.info(run_id)
    assert info.status == "finished"
    assert info.events == len(log) + 2
    assert info.created_at == log[0].at
    assert await store.read(run_id) == [*log, answer, done]


async def test_a_log_without_run_started_has_no_index_row(store: RunStore) -> None:
    events = tool_results(new_id(), 3)
    await store.append(events[0].run_id, events)
    assert await store.read(events[0].run_id) == events
    assert await store.runs() == []


async def test_runs_are_listed_newest_first(store: RunStore) -> None:
    logs = [await agent_log(start=T0 + i * DAY) for i in range(5)]
    for i in (3, 0, 4, 1, 2):  # appended out of order
        await store.append(logs[i][0].run_id, logs[i])
    expected = [log[0].run_id for log in reversed(logs)]
    assert await stored_ids(store) == expected
    rows = await store.runs()
    assert [r.created_at for r in rows] == sorted((r.created_at for r in rows), reverse=True)


async def test_newest_first_within_a_second(store: RunStore) -> None:
    start = T0.replace(microsecond=0)
    offsets = [0, 1, 500, 999_999, 250_000]  # microseconds
    logs = [await agent_log(start=start + timedelta(microseconds=us)) for us in offsets]
    for log in logs:
        await store.append(log[0].run_id, log)
    by_time = sorted(logs, key=lambda log: log[0].at, reverse=True)
    assert await stored_ids(store) == [log[0].run_id for log in by_time]


async def _four_runs(store: RunStore) -> list[list[Event]]:
    """Runs created on days 0..3: alpha finished, beta waiting, alpha running, beta finished."""
    a0 = await agent_log(agent="alpha", start=T0)
    b1 = await waiting_log(start=T0 + DAY)
    a2 = await agent_log(agent="alpha", start=T0 + 2 * DAY)
    b3 = await agent_log(agent="beta", start=T0 + 3 * DAY)
    await store.append(a0[0].run_id, a0)
    await store.append(b1[0].run_id, b1)
    await store.append(a2[0].run_id, a2[: first_finish(a2)])
    await store.append(b3[0].run_id, b3)
    return [a0, b1, a2, b3]


async def test_runs_filtered_by_status_and_agent(store: RunStore) -> None:
    a0, b1, a2, b3 = [log[0].run_id for log in await _four_runs(store)]
    assert (await store.info(b1)).agent == "agent"
    assert await stored_ids(store, RunQuery(status="finished")) == [b3, a0]
    assert await stored_ids(store, RunQuery(status="waiting_for_user")) == [b1]
    assert await stored_ids(store, RunQuery(status="running")) == [a2]
    assert await stored_ids(store, RunQuery(status="failed")) == []
    assert await stored_ids(store, RunQuery(agent="alpha")) == [a2, a0]
    assert await stored_ids(store, RunQuery(agent="beta")) == [b3]
    assert await stored_ids(store, RunQuery(agent="alpha", status="finished")) == [a0]
    assert await stored_ids(store, RunQuery(agent="nobody")) == []


async def test_runs_filtered_by_tag(store: RunStore) -> None:
    tagged = await agent_log(tags=("tenant:acme", "demo"), start=T0)
    other = await agent_log(tags=("tenant:acme-2",), start=T0 + DAY)
    quoted = await agent_log(tags=('ta"g', "%"), start=T0 + 2 * DAY)
    for log in (tagged, other, quoted):
        await store.append(log[0].run_id, log)
    assert await stored_ids(store, RunQuery(tag="tenant:acme")) == [tagged[0].run_id]
    assert await stored_ids(store, RunQuery(tag="tenant:acme-2")) == [other[0].run_id]
    assert await stored_ids(store, RunQuery(tag='ta"g')) == [quoted[0].run_id]
    assert await stored_ids(store, RunQuery(tag="tenant:")) == []  # whole tags, never a prefix
    assert await stored_ids(store, RunQuery(tag="%")) == [quoted[0].run_id]
    assert await stored_ids(store, RunQuery(tag="_")) == []


async def test_runs_filtered_by_time_and_limited(store: RunStore) -> None:
    a0, b1, a2, b3 = [log[0].run_id for log in await _four_runs(store)]
    assert await stored_ids(store, RunQuery(since=T0 + DAY)) == [b3, a2, b1]  # inclusive
    assert await stored_ids(store, RunQuery(until=T0 + 2 * DAY)) == [b1, a0]  # exclusive
    assert await stored_ids(store, RunQuery(since=T0 + DAY, until=T0 + 3 * DAY)) == [a2, b1]
    assert await stored_ids(store, RunQuery(since=T0 + DAY / 2, until=T0 + DAY / 2)) == []
    assert await stored_ids(store, RunQuery(since=T0 + 4 * DAY)) == []
    assert await stored_ids(store, RunQuery(agent="alpha", since=T0 + DAY)) == [a2]
    assert await stored_ids(store, RunQuery(limit=2)) == [b3, a2]
    assert await stored_ids(store, RunQuery(limit=1, status="finished")) == [b3]
    assert await stored_ids(store, RunQuery(limit=0)) == []
    assert await stored_ids(store, RunQuery(limit=10)) == [b3, a2, b1, a0]


async def test_time_filters_compare_instants_not_text(store: RunStore) -> None:
    """``since``/``until`` in another time zone mean the same instants."""
    a0, b1, a2, b3 = [log[0].run_id for log in await _four_runs(store)]
    plus_five = timezone(timedelta(hours=5))
    since = (T0 + DAY).astimezone(plus_five)  # the instant b1 was created
    until = (T0 + 3 * DAY).astimezone(plus_five)
    assert await stored_ids(store, RunQuery(since=since)) == [b3, a2, b1]
    assert await stored_ids(store, RunQuery(until=until)) == [a2, b1, a0]


async def test_info(store: RunStore) -> None:
    a = await agent_log(agent="alpha")
    b = await waiting_log(start=T0 + DAY)
    await store.append(a[0].run_id, a)
    await store.append(b[0].run_id, b)
    rows = {r.run_id: r for r in await store.runs()}
    assert await store.info(a[0].run_id) == rows[a[0].run_id]
    assert await store.info(b[0].run_id) == rows[b[0].run_id]
    assert (await store.info(a[0].run_id)).agent == "alpha"
    assert (await store.info(b[0].run_id)).status == "waiting_for_user"
    with pytest.raises(RunNotFound):
        await store.info(new_id())


# -- delete -----------------------------------------------------------------------------


async def test_delete_removes_the_runs_and_counts_them(store: RunStore) -> None:
    a = await agent_log()
    b = await agent_log(start=T0 + DAY)
    c = await waiting_log(start=T0 + 2 * DAY)
    for log in (a, b, c):
        await store.append(log[0].run_id, log)
    assert await store.delete([a[0].run_id, c[0].run_id]) == 2
    for log in (a, c):
        with pytest.raises(RunNotFound):
            await store.read(log[0].run_id)
        with pytest.raises(RunNotFound):
            await store.info(log[0].run_id)
    assert await stored_ids(store) == [b[0].run_id]
    assert await store.read(b[0].run_id) == b
    assert await store.delete([a[0].run_id]) == 0


async def test_deleting_unknown_ids_counts_zero(store: RunStore) -> None:
    log = await agent_log()
    await store.append(log[0].run_id, log)
    assert await store.delete([]) == 0
    assert await store.delete(["no-such-run", new_id()]) == 0
    assert await store.delete(["no-such-run", log[0].run_id, new_id()]) == 1
    assert await store.runs() == []


async def test_delete_counts_a_run_without_an_index_row(store: RunStore) -> None:
    events = tool_results(new_id(), 4)
    await store.append(events[0].run_id, events)
    assert await store.delete([events[0].run_id]) == 1
    with pytest.raises(RunNotFound):
        await store.read(events[0].run_id)


async def test_a_deleted_run_id_can_be_written_again(store: RunStore) -> None:
    log = await agent_log()
    run_id = log[0].run_id
    await store.append(run_id, log)
    assert await store.delete([run_id]) == 1
    other = relabel(await waiting_log(), run_id)
    await store.append(run_id, other)
    assert await store.read(run_id) == other
    info = await store.info(run_id)
    assert (info.status, info.events) == ("waiting_for_user", len(other))


# -- leases -----------------------------------------------------------------------------


async def test_the_first_lease_has_token_1(store: RunStore) -> None:
    run_id = new_id()
    before = time.time()
    lease = await store.acquire(run_id, "owner-a", ttl=30.0)
    assert (lease.run_id, lease.owner, lease.token) == (run_id, "owner-a", 1)
    assert before + 29.0 <= lease.expires_at <= time.time() + 31.0
    other = await store.acquire(new_id(), "owner-a")
    assert other.token == 1  # tokens are per run


async def test_a_live_lease_blocks_other_owners(store: RunStore) -> None:
    run_id = new_id()
    lease = await store.acquire(run_id, "owner-a", ttl=60.0)
    with pytest.raises(LeaseHeld) as caught:
        await store.acquire(run_id, "owner-b")
    assert caught.value.owner == "owner-a"
    assert caught.value.expires_at == pytest.approx(lease.expires_at, abs=1.0)
    assert caught.value.run_id == run_id
    with pytest.raises(LeaseHeld):
        await store.acquire(run_id, "owner-b", ttl=0.0)


async def test_the_same_owner_re_acquires_with_a_bigger_token(store: RunStore) -> None:
    run_id = new_id()
    first = await store.acquire(run_id, "owner-a")
    second = await store.acquire(run_id, "owner-a")
    third = await store.acquire(run_id, "owner-a")
    assert first.token < second.token < third.token
    log = relabel(await agent_log(), run_id)
    with pytest.raises(StaleLease):
        await store.append(run_id, log[:2], lease=first)
    await store.append(run_id, log[:2], lease=third)
    assert await store.read(run_id) == log[:2]


async def test_after_release_another_owner_acquires_a_bigger_token(store: RunStore) -> None:
    run_id = new_id()
    first = await store.acquire(run_id, "owner-a")
    await store.release(first)
    second = await store.acquire(run_id, "owner-b")
    assert second.owner == "owner-b"
    assert second.token > first.token
    with pytest.raises(LeaseHeld):
        await store.acquire(run_id, "owner-a")


async def test_appending_with_a_stale_lease_raises_and_stores_nothing(store: RunStore) -> None:
    log = await agent_log()
    run_id = log[0].run_id
    await store.append(run_id, log[:3])
    old = await store.acquire(run_id, "owner-a", ttl=-1.0)  # then it lapsed
    new = await store.acquire(run_id, "owner-b")
    with pytest.raises(StaleLease) as caught:
        await store.append(run_id, log[3:6], lease=old)
    assert (caught.value.token, caught.value.current) == (old.token, new.token)
    with pytest.raises(StaleLease):
        await store.append(run_id, log[:6], lease=old)
    assert await store.read(run_id) == log[:3]
    assert (await store.info(run_id)).events == 3
    await store.append(run_id, log[3:], lease=new)
    assert await store.read(run_id) == log


async def test_a_lease_never_granted_is_stale(store: RunStore) -> None:
    log = await agent_log()
    run_id = log[0].run_id
    forged = Lease(run_id=run_id, owner="owner-x", token=7, expires_at=time.time() + 60)
    with pytest.raises(StaleLease):
        await store.append(run_id, log, lease=forged)
    with pytest.raises(RunNotFound):
        await store.read(run_id)


async def test_appending_with_the_current_lease_works(store: RunStore) -> None:
    log = await agent_log()
    run_id = log[0].run_id
    lease = await store.acquire(run_id, "owner-a")
    for lo in range(0, len(log), 3):
        await store.append(run_id, log[lo : lo + 3], lease=lease)
    await store.append(run_id, log, lease=lease)  # an idempotent retry under the lease
    assert await store.read(run_id) == log


@pytest.mark.parametrize("ttl", [0.0, -1.0])
async def test_an_expired_lease_can_be_taken_by_another_owner(store: RunStore, ttl: float) -> None:
    log = await agent_log()
    run_id = log[0].run_id
    old = await store.acquire(run_id, "owner-a", ttl=ttl)
    new = await store.acquire(run_id, "owner-b")
    assert (new.owner, new.token) == ("owner-b", old.token + 1)
    with pytest.raises(StaleLease):
        await store.append(run_id, log, lease=old)
    await store.append(run_id, log, lease=new)
    assert await store.read(run_id) == log


async def test_releasing_a_replaced_lease_does_not_free_the_new_one(store: RunStore) -> None:
    run_id = new_id()
    old = await store.acquire(run_id, "owner-a", ttl=-1.0)
    await store.acquire(run_id, "owner-b", ttl=60.0)
    await store.release(old)
    with pytest.raises(LeaseHeld) as caught:
        await store.acquire(run_id, "owner-c")
    assert caught.value.owner == "owner-b"


async def test_an_append_renews_the_lease(store: RunStore) -> None:
    log = await agent_log()
    run_id = log[0].run_id
    lease = await store.acquire(run_id, "owner-a", ttl=-1.0)  # lapsed already
    await store.append(run_id, log[:3], lease=lease)
    with pytest.raises(LeaseHeld):
        await store.acquire(run_id, "owner-b")


async def test_tokens_keep_growing_after_a_delete(store: RunStore) -> None:
    """A lease from before a delete must not fence a re-created run (e.g. export, delete, import)."""
    log = await agent_log()
    run_id = log[0].run_id
    old = await store.acquire(run_id, "owner-a", ttl=-1.0)
    await store.append(run_id, log[:3], lease=old)
    assert await store.delete([run_id]) == 1
    await store.append(run_id, log[:3])  # imported again
    new = await store.acquire(run_id, "owner-b")
    assert new.token > old.token
    with pytest.raises(StaleLease):
        await store.append(run_id, log[3:], lease=old)
    assert await store.read(run_id) == log[:3]


# -- concurrent appenders (one process) -------------------------------------------------


async def test_concurrent_appenders_to_different_runs(store: RunStore) -> None:
    base = await agent_log(calls=3)
    logs = [relabel(base, new_id()) for _ in range(30)]
    shared = relabel(base, new_id())

    async def writer(log: list[Event], batch: int) -> None:
        for lo in range(0, len(log), batch):
            await store.append(log[0].run_id, log[lo : lo + batch])
            await asyncio.sleep(0)

    await asyncio.gather(
        *(writer(log, 1 + i % 4) for i, log in enumerate(logs)),
        *(writer(shared, 1 + i) for i in range(4)),  # the same log, from four tasks at once
    )
    for log in [*logs, shared]:
        assert await store.read(log[0].run_id) == log
        assert (await store.info(log[0].run_id)).events == len(log)
    assert len(await store.runs()) == len(logs) + 1


async def test_concurrent_leased_appenders_exactly_one_owner_commits(store: RunStore) -> None:
    log = await agent_log()
    run_id = log[0].run_id
    committed: list[str] = []

    async def worker(owner: str) -> None:
        try:
            lease = await store.acquire(run_id, owner)
        except LeaseHeld:
            return
        await asyncio.sleep(0)
        for event in log:
            await store.append(run_id, [event], lease=lease)
            await asyncio.sleep(0)
        committed.append(owner)

    await asyncio.gather(*(worker(f"owner-{i}") for i in range(5)))
    assert len(committed) == 1
    assert await store.read(run_id) == log


# -- the property -----------------------------------------------------------------------


@settings(
    max_examples=100,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(data=st.data())
async def test_any_split_with_overlaps_appends_exactly_the_log(
    store: RunStore, data: st.DataObject
) -> None:
    log = await agent_log(run_id=new_id(), calls=3)
    run_id = log[0].run_id
    total = len(log)
    stored = 0
    while stored < total:
        lo = data.draw(st.integers(0, stored), label="lo")
        hi = data.draw(st.integers(stored + 1, total), label="hi")
        await store.append(run_id, log[lo:hi])
        stored = hi
        if data.draw(st.booleans(), label="replay"):
            rlo = data.draw(st.integers(0, stored - 1), label="rlo")
            rhi = data.draw(st.integers(rlo + 1, stored), label="rhi")
            await store.append(run_id, log[rlo:rhi])
        assert await store.read(run_id) == log[:stored]
    assert await store.read(run_id) == log
    info = await store.info(run_id)
    assert (info.status, info.events, info.usage.requests) == ("finished", total, turns(log))


# -- SQLite: files, processes -----------------------------------------------------------


async def test_data_persists_after_closing_and_reopening(store: RunStore) -> None:
    sqlite = require_sqlite(store)
    a = await agent_log(agent="alpha")
    b = await waiting_log(start=T0 + DAY)
    lease = await sqlite.acquire(a[0].run_id, "worker-a", ttl=60.0)
    await sqlite.append(a[0].run_id, a, lease=lease)
    await sqlite.append(b[0].run_id, b)
    rows = await sqlite.runs()
    await sqlite.close()
    reopened = SqliteStore(sqlite.path)
    try:
        assert await reopened.read(a[0].run_id) == a
        assert await reopened.read(b[0].run_id) == b
        assert await reopened.runs() == rows
        with pytest.raises(LeaseHeld):
            await reopened.acquire(a[0].run_id, "worker-b")
        await reopened.release(lease)
        assert (await reopened.acquire(a[0].run_id, "worker-b")).token == lease.token + 1
        with pytest.raises(StoreConflict):
            await reopened.append(a[0].run_id, [altered(a[2])])
    finally:
        await reopened.close()


async def test_two_stores_on_one_file_share_runs_and_leases(store: RunStore) -> None:
    sqlite = require_sqlite(store)
    other = SqliteStore(sqlite.path)
    try:
        log = await agent_log()
        run_id = log[0].run_id
        lease = await sqlite.acquire(run_id, "worker-a")
        await sqlite.append(run_id, log[:4], lease=lease)
        assert await other.read(run_id) == log[:4]
        with pytest.raises(LeaseHeld):
            await other.acquire(run_id, "worker-b", ttl=5.0)
        await other.append(run_id, log[2:], lease=lease)
        assert await sqlite.read(run_id) == log
        assert (await sqlite.info(run_id)).status == "finished"
    finally:
        await other.close()


async def test_a_lease_of_a_dead_local_process_is_free(store: RunStore) -> None:
    sqlite = require_sqlite(store)
    child = await asyncio.create_subprocess_exec(sys.executable, "-c", "pass")
    await child.wait()
    host = socket.gethostname()
    dead = await sqlite.acquire("r1", f"{host}:{child.pid}:abc123", ttl=600.0)
    taken = await sqlite.acquire("r1", "worker-b")
    assert taken.token == dead.token + 1
    dead_too = await sqlite.acquire("r2", f"{host}:999999:x", ttl=600.0)
    assert (await sqlite.acquire("r2", "worker-b")).token == dead_too.token + 1


async def test_a_lease_of_a_live_or_remote_process_is_held(store: RunStore) -> None:
    sqlite = require_sqlite(store)
    host = socket.gethostname()
    await sqlite.acquire("r1", f"{host}:{os.getpid()}:abc123", ttl=600.0)
    with pytest.raises(LeaseHeld):
        await sqlite.acquire("r1", "worker-b")
    await sqlite.acquire("r2", f"not-{host}:999999:abc123", ttl=600.0)
    with pytest.raises(LeaseHeld):
        await sqlite.acquire("r2", "worker-b")


_APPENDER = """
import asyncio, sys
from tether.codec import read_jsonl
from tether.stores import SqliteStore

async def main(db, paths):
    logs = [read_jsonl(p) for p in paths]
    store = SqliteStore(db)
    try:
        print("ready", flush=True)
        sys.stdin.readline()
        for i in range(max(len(log) for log in logs)):
            for log in logs:
                if i < len(log):
                    await store.append(log[i].run_id, [log[i]])
        print("done", flush=True)
    finally:
        await store.close()

asyncio.run(main(sys.argv[1], sys.argv[2:]))
"""

_ACQUIRER = """
import asyncio, sys
from tether.stores import LeaseHeld, SqliteStore, default_owner

async def main(db, run_id):
    store = SqliteStore(db)
    try:
        print("ready", flush=True)
        sys.stdin.readline()
        try:
            lease = await store.acquire(run_id, default_owner())
        except LeaseHeld:
            print("held", flush=True)
        else:
            print(f"won {lease.token}", flush=True)
        sys.stdin.read()  # stay alive (holding the lease) until told to exit
    finally:
        await store.close()

asyncio.run(main(sys.argv[1], sys.argv[2]))
"""


async def run_together(script: str, argvs: Sequence[Sequence[str]]) -> list[str]:
    """Start one process per argv, let them all go at once, return each one's answer line."""
    procs = [
        await asyncio.create_subprocess_exec(
            sys.executable,
            "-c",
            script,
            *argv,
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )
        for argv in argvs
    ]
    try:
        for proc in procs:
            assert proc.stdout is not None
            ready = await asyncio.wait_for(proc.stdout.readline(), 60)
            assert ready == b"ready\n", (ready, await proc.communicate(b""))
        for proc in procs:
            assert proc.stdin is not None
            proc.stdin.write(b"go\n")
            await proc.stdin.drain()
        answers: list[str] = []
        for proc in procs:
            assert proc.stdout is not None
            answers.append((await asyncio.wait_for(proc.stdout.readline(), 60)).decode().strip())
        for proc in procs:
            _, err = await asyncio.wait_for(proc.communicate(b""), 60)
            assert proc.returncode == 0, err.decode()
        return answers
    finally:
        for proc in procs:
            if proc.returncode is None:
                proc.kill()
                await proc.wait()


async def test_processes_append_to_one_file_concurrently(store: RunStore, tmp_path: Path) -> None:
    sqlite = require_sqlite(store)
    base = await agent_log(calls=4)
    logs = [relabel(base, new_id()) for _ in range(5)]
    paths: list[str] = []
    for i, log in enumerate(logs):
        path = tmp_path / f"log{i}.jsonl"
        write_jsonl(path, log)
        paths.append(str(path))
    db = str(sqlite.path)
    answers = await run_together(
        _APPENDER,
        [
            [db, paths[0], paths[1]],
            [db, paths[2], paths[3]],
            [db, paths[4], paths[0]],  # run 0 from two processes at once (idempotent)
        ],
    )
    assert answers == ["done", "done", "done"]
    for log in logs:
        assert await sqlite.read(log[0].run_id) == log
        info = await sqlite.info(log[0].run_id)
        assert (info.status, info.events) == ("finished", len(log))
    assert len(await sqlite.runs()) == len(logs)


async def test_processes_racing_to_acquire_exactly_one_wins(store: RunStore) -> None:
    sqlite = require_sqlite(store)
    run_id = new_id()
    answers = await run_together(_ACQUIRER, [[str(sqlite.path), run_id] for _ in range(4)])
    assert sorted(answers) == ["held", "held", "held", "won 1"]


async def test_a_stale_process_cannot_commit_after_another_took_over(store: RunStore) -> None:
    """The fencing token is checked in the same transaction as the append, across connections."""
    sqlite = require_sqlite(store)
    other = SqliteStore(sqlite.path)
    try:
        log = await agent_log()
        run_id = log[0].run_id
        await sqlite.append(run_id, log[:3])
        old = await sqlite.acquire(run_id, "worker-a", ttl=-1.0)  # then it lapsed
        new = await other.acquire(run_id, "worker-b")
        with pytest.raises(StaleLease):
            await sqlite.append(run_id, log[3:], lease=old)
        await other.append(run_id, log[3:], lease=new)
        assert await sqlite.read(run_id) == log
    finally:
        await other.close()


async def test_tool_results_survive_a_round_trip(store: RunStore) -> None:
    events = tool_results(new_id(), 5)
    await store.append(events[0].run_id, events)
    got = await store.read(events[0].run_id)
    assert got == events
    assert all(isinstance(e, ToolCallFinished) for e in got)
