"""Listing runs page after page (``RunQuery.after``), on every backend."""

from __future__ import annotations

import dataclasses
import uuid
from collections.abc import Sequence
from datetime import datetime, timedelta, timezone

from tether.events import GENESIS_HASH, RunStarted
from tether.stores import RunInfo, RunPosition, RunQuery, RunStore

from .helpers import T0, agent_log, resealed


async def started_runs(
    store: RunStore, moments: Sequence[datetime], *, tags: Sequence[str] = ()
) -> None:
    """One run started at each moment (its log: just its ``run_started``)."""
    [first, *_] = await agent_log()
    assert isinstance(first, RunStarted)
    for moment in moments:
        run_id = str(uuid.uuid4())
        event = resealed(
            dataclasses.replace(
                first, run_id=run_id, at=moment, prev_hash=GENESIS_HASH, tags=tuple(tags)
            )
        )
        await store.append(run_id, [event])


async def paged(store: RunStore, query: RunQuery) -> list[list[RunInfo]]:
    pages: list[list[RunInfo]] = []
    after: RunPosition | None = None
    while True:
        page = await store.runs(dataclasses.replace(query, after=after))
        if not page:
            return pages
        pages.append(page)
        after = RunPosition.of(page[-1])


async def test_pages_after_positions_are_the_whole_listing_once(store: RunStore) -> None:
    # several runs share a start: their ids order them
    moments = [T0 + timedelta(seconds=i // 3) for i in range(20)]
    await started_runs(store, moments)

    pages = await paged(store, RunQuery(limit=4))

    whole = await store.runs(RunQuery(limit=1000))
    assert [r.run_id for page in pages for r in page] == [r.run_id for r in whole]
    assert [len(page) for page in pages] == [4] * 5
    assert len({r.run_id for r in whole}) == 20


async def test_a_position_keeps_to_the_other_filters(store: RunStore) -> None:
    await started_runs(store, [T0 + timedelta(seconds=i) for i in range(6)], tags=["mine"])
    await started_runs(store, [T0 + timedelta(seconds=i) for i in range(6)], tags=["theirs"])

    pages = await paged(store, RunQuery(limit=4, tag="mine"))

    assert [len(page) for page in pages] == [4, 2]
    assert all("mine" in r.tags for page in pages for r in page)


async def test_runs_started_meanwhile_do_not_shift_the_next_page(store: RunStore) -> None:
    await started_runs(store, [T0 + timedelta(seconds=i) for i in range(10)])
    whole = await store.runs(RunQuery(limit=1000))
    first = await store.runs(RunQuery(limit=4))

    await started_runs(store, [T0 + timedelta(seconds=100 + i) for i in range(5)])
    rest = await store.runs(RunQuery(limit=1000, after=RunPosition.of(first[-1])))

    assert [r.run_id for r in first + rest] == [r.run_id for r in whole]


async def test_a_position_in_another_zone_is_the_same_instant(store: RunStore) -> None:
    await started_runs(store, [T0 + timedelta(hours=i) for i in range(4)])
    whole = await store.runs(RunQuery(limit=1000))
    pivot = whole[1]
    east = timezone(timedelta(hours=5))
    moved = RunPosition(created_at=pivot.created_at.astimezone(east), run_id=pivot.run_id)

    rest = await store.runs(RunQuery(after=moved))

    assert [r.run_id for r in rest] == [r.run_id for r in whole[2:]]
