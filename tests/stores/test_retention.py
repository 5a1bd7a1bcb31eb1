"""Retention: prune runs by age and by count per agent; running and leased runs are kept."""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import cast

import pytest

from tests.support import add
from tether import Agent
from tether.errors import ConfigError
from tether.stores import (
    MemoryStore,
    RunNotFound,
    RunQuery,
    RunStore,
    SqliteStore,
    parse_age,
    prune,
)
from tether.testing import FakeClock, ScriptedModel, call, finish

T0 = datetime(2026, 1, 1, tzinfo=UTC)
DAY = timedelta(days=1)


@pytest.fixture(params=["memory", "sqlite"])
async def store(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[RunStore]:
    opened: RunStore = (
        MemoryStore() if cast(str, request.param) == "memory" else SqliteStore(tmp_path / "t.db")
    )
    try:
        yield opened
    finally:
        await opened.close()


async def stored_run(
    store: RunStore, *, start: datetime, agent: str = "adder", running: bool = False
) -> str:
    """A finished run of ``agent`` created at ``start`` (``running``: its end not yet logged)."""
    model = ScriptedModel([call("add", a=1, b=2), finish("3")])
    outcome = await Agent(name=agent, model=model, tools=[add]).run(
        "add 1 and 2", clock=FakeClock(start)
    )
    events = outcome.events[:-1] if running else outcome.events
    await store.append(outcome.run_id, events)
    info = await store.info(outcome.run_id)
    assert info.created_at == start
    assert info.status == ("running" if running else "finished")
    return outcome.run_id


async def remaining(store: RunStore) -> list[str]:
    return [r.run_id for r in await store.runs(RunQuery(limit=1000))]


# -- parse_age ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "age"),
    [
        ("30d", timedelta(days=30)),
        ("12h", timedelta(hours=12)),
        ("90m", timedelta(minutes=90)),
        ("45s", timedelta(seconds=45)),
        ("2w", timedelta(weeks=2)),
        (" 7D ", timedelta(days=7)),
        ("0s", timedelta(0)),
    ],
)
def test_parse_age_reads_a_number_and_a_unit(text: str, age: timedelta) -> None:
    assert parse_age(text) == age


@pytest.mark.parametrize("text", ["", "30", "d", "1.5h", "-1d", "30 days", "1y", "1d2h", "d30"])
def test_parse_age_rejects_anything_else_saying_what_to_write(text: str) -> None:
    with pytest.raises(
        ValueError, match="is not an age: write a whole number and a unit"
    ) as raised:
        parse_age(text)
    assert isinstance(raised.value, ConfigError)
    assert "e.g. '30d'" in str(raised.value)


@pytest.mark.parametrize("text", ["36501d", "1000000d", "99999999999999999999d"])
def test_parse_age_refuses_an_age_no_date_can_be_that_far_back(text: str) -> None:
    with pytest.raises(ConfigError, match="too long an age: give at most 36500d"):
        parse_age(text)


# -- by age --------------------------------------------------------------------------------------


async def test_prune_deletes_runs_created_before_the_cutoff(store: RunStore) -> None:
    old = await stored_run(store, start=T0)
    older_than_cutoff = await stored_run(store, start=T0 + 10 * DAY)
    at_cutoff = await stored_run(store, start=T0 + 15 * DAY)
    young = await stored_run(store, start=T0 + 20 * DAY)

    deleted = await prune(store, older_than=10 * DAY, now=T0 + 25 * DAY)

    assert deleted == [older_than_cutoff, old]  # newest first
    assert await remaining(store) == [young, at_cutoff]
    for run_id in deleted:
        with pytest.raises(RunNotFound):
            await store.read(run_id)


async def test_prune_uses_the_current_time_by_default(store: RunStore) -> None:
    now = datetime.now(UTC)
    old = await stored_run(store, start=now - 40 * DAY)
    young = await stored_run(store, start=now - DAY)

    assert await prune(store, older_than=parse_age("30d")) == [old]
    assert await remaining(store) == [young]


async def test_prune_of_one_agent_leaves_the_others_alone(store: RunStore) -> None:
    mine = await stored_run(store, start=T0, agent="mine")
    theirs = await stored_run(store, start=T0 + DAY, agent="theirs")

    deleted = await prune(store, older_than=DAY, agent="mine", now=T0 + 10 * DAY)

    assert deleted == [mine]
    assert await remaining(store) == [theirs]


# -- by count ------------------------------------------------------------------------------------


async def test_keep_last_counts_each_agent_separately(store: RunStore) -> None:
    a = [await stored_run(store, start=T0 + i * DAY, agent="a") for i in range(3)]
    b = [
        await stored_run(store, start=T0 + i * DAY + timedelta(hours=1), agent="b")
        for i in range(2)
    ]

    deleted = await prune(store, keep_last=1, now=T0 + 10 * DAY)

    assert sorted(deleted) == sorted([a[0], a[1], b[0]])
    assert sorted(await remaining(store)) == sorted([a[2], b[1]])


async def test_keep_last_with_an_agent_prunes_only_that_agent(store: RunStore) -> None:
    a = [await stored_run(store, start=T0 + i * DAY, agent="a") for i in range(3)]
    b = [await stored_run(store, start=T0 + i * DAY, agent="b") for i in range(3)]

    deleted = await prune(store, keep_last=2, agent="a")

    assert deleted == [a[0]]
    assert sorted(await remaining(store)) == sorted([a[1], a[2], *b])


async def test_keep_last_zero_deletes_every_finished_run(store: RunStore) -> None:
    ids = [await stored_run(store, start=T0 + i * DAY) for i in range(3)]

    assert await prune(store, keep_last=0) == ids[::-1]
    assert await remaining(store) == []


async def test_age_and_count_together_delete_what_either_condemns(store: RunStore) -> None:
    old_a = await stored_run(store, start=T0, agent="a")
    recent_b = await stored_run(store, start=T0 + 8 * DAY, agent="b")
    newest_b = await stored_run(store, start=T0 + 9 * DAY, agent="b")
    now = T0 + 10 * DAY

    assert await prune(store, older_than=7 * DAY, now=now, dry_run=True) == [old_a]
    assert await prune(store, keep_last=1, now=now, dry_run=True) == [recent_b]

    deleted = await prune(store, older_than=7 * DAY, keep_last=1, now=now)

    assert deleted == [recent_b, old_a]
    assert await remaining(store) == [newest_b]


# -- what is never deleted ---------------------------------------------------------------------


async def test_running_runs_are_never_deleted_but_count_among_the_newest(store: RunStore) -> None:
    old_running = await stored_run(store, start=T0, running=True)
    old_finished = await stored_run(store, start=T0 + DAY)
    finished = await stored_run(store, start=T0 + 2 * DAY)
    new_running = await stored_run(store, start=T0 + 3 * DAY, running=True)

    deleted = await prune(store, older_than=DAY, keep_last=1, now=T0 + 30 * DAY)

    assert deleted == [finished, old_finished]
    assert await remaining(store) == [new_running, old_running]


async def test_runs_waiting_for_an_answer_are_prunable(store: RunStore) -> None:
    outcome = await Agent(can_ask_user=True).run(
        "ask me",
        model=ScriptedModel([call("ask_user", question="which?")]),
        clock=FakeClock(T0),
    )
    assert outcome.status == "waiting_for_user"
    await store.append(outcome.run_id, outcome.events)

    assert await prune(store, older_than=DAY, now=T0 + 2 * DAY) == [outcome.run_id]


async def test_a_run_leased_by_a_live_owner_is_skipped(store: RunStore) -> None:
    owned = await stored_run(store, start=T0)
    free = await stored_run(store, start=T0 + DAY)
    await store.acquire(owned, "elsewhere:1:abc", ttl=600)

    deleted = await prune(store, older_than=DAY, now=T0 + 10 * DAY)

    assert deleted == [free]
    assert await remaining(store) == [owned]


async def test_dry_run_deletes_nothing_and_names_what_would_go(store: RunStore) -> None:
    ids = [await stored_run(store, start=T0 + i * DAY) for i in range(3)]

    planned = await prune(store, keep_last=1, dry_run=True)

    assert planned == [ids[1], ids[0]]
    assert await remaining(store) == ids[::-1]
    assert await prune(store, keep_last=1) == planned


async def test_prune_of_an_empty_store_deletes_nothing(store: RunStore) -> None:
    assert await prune(store, older_than=timedelta(0)) == []


# -- bad arguments -------------------------------------------------------------------------------


async def test_prune_needs_a_criterion() -> None:
    with pytest.raises(ConfigError, match="needs older_than and/or keep_last"):
        await prune(MemoryStore())


@pytest.mark.parametrize(
    ("older_than", "keep_last", "message"),
    [(-DAY, None, "older_than must not be negative"), (None, -1, "keep_last must be 0 or more")],
)
async def test_prune_refuses_negative_limits(
    older_than: timedelta | None, keep_last: int | None, message: str
) -> None:
    with pytest.raises(ConfigError, match=message):
        await prune(MemoryStore(), older_than=older_than, keep_last=keep_last)


async def test_prune_refuses_a_naive_now() -> None:
    with pytest.raises(ConfigError, match="timezone-aware"):
        await prune(MemoryStore(), older_than=DAY, now=datetime(2026, 1, 1))
