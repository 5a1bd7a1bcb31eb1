"""Reading a run's log in pages (``read_page``, ``read_encoded_pages``), on every backend."""

from __future__ import annotations

import contextlib
import dataclasses
import sqlite3
import uuid
from datetime import timedelta

import pytest

from tether.codec import encode_event, seal
from tether.errors import BrokenChain, UserError
from tether.events import Event, UserReplied
from tether.stores import RunNotFound, RunStore, SqliteStore

from .helpers import agent_log, resealed


def replies(log: list[Event], count: int) -> list[Event]:
    """``count`` user replies chained after ``log``."""
    events: list[Event] = []
    last = log[-1]
    for i in range(count):
        last = seal(
            UserReplied(
                run_id=last.run_id,
                seq=last.seq + 1,
                at=last.at + timedelta(milliseconds=1),
                prev_hash=last.hash,
                text=f"reply {i}",
            )
        )
        events.append(last)
    return events


async def stored(store: RunStore, extra: int = 20) -> list[Event]:
    log = await agent_log(run_id=str(uuid.uuid4()))
    log += replies(log, extra)
    await store.append(log[0].run_id, log)
    return log


@pytest.mark.parametrize("limit", [1, 3, 7, 1000])
async def test_pages_read_one_after_another_are_the_whole_log(store: RunStore, limit: int) -> None:
    log = await stored(store)
    run_id = log[0].run_id
    pages: list[list[Event]] = []
    after = -1
    while True:
        page = await store.read_page(run_id, after_seq=after, limit=limit)
        assert len(page) <= limit
        if not page:
            break
        pages.append(page)
        after = page[-1].seq
    assert [e for page in pages for e in page] == log == await store.read(run_id)
    assert all(len(page) == limit for page in pages[:-1])

    encoded = [page async for page in store.read_encoded_pages(run_id, limit=limit)]
    assert all(0 < len(page) <= limit for page in encoded)
    assert [line for page in encoded for line in page] == await store.read_encoded(run_id)


@pytest.mark.parametrize("after", [-7, -1, 0, 5, 20])
async def test_a_page_starts_after_the_seq_given(store: RunStore, after: int) -> None:
    log = await stored(store)
    run_id = log[0].run_id

    page = await store.read_page(run_id, after_seq=after, limit=4)

    assert page == log[max(after, -1) + 1 :][:4]
    assert page == (await store.read(run_id, after_seq=after))[:4]


async def test_a_page_past_the_end_is_empty(store: RunStore) -> None:
    log = await stored(store)
    run_id = log[0].run_id
    assert await store.read_page(run_id, after_seq=log[-1].seq, limit=5) == []
    assert await store.read_page(run_id, after_seq=log[-1].seq + 100, limit=5) == []


async def test_a_page_of_an_unknown_run_raises_run_not_found(store: RunStore) -> None:
    for after in (-1, 3):
        with pytest.raises(RunNotFound):
            await store.read_page("nope", after_seq=after, limit=5)
    with pytest.raises(RunNotFound):
        await anext(store.read_encoded_pages("nope", limit=5))


async def test_a_page_holds_at_least_one_event(store: RunStore) -> None:
    log = await stored(store)
    for limit in (0, -1):
        with pytest.raises(UserError, match="limit must be 1 or more"):
            await store.read_page(log[0].run_id, limit=limit)
        with pytest.raises(UserError, match="limit must be 1 or more"):
            await anext(store.read_encoded_pages(log[0].run_id, limit=limit))


async def test_sqlite_pages_check_the_chain_across_their_edges(store: RunStore) -> None:
    if not isinstance(store, SqliteStore):
        pytest.skip("SQLite only: it checks the chain it reads")
    log = await stored(store)
    run_id, cut = log[0].run_id, len(log) - 5
    reply = log[cut]
    assert isinstance(reply, UserReplied)
    # edited in the file and sealed again: its own hash holds, the next event's link not
    edited = resealed(dataclasses.replace(reply, text="forged"))
    with contextlib.closing(sqlite3.connect(store.path)) as db, db:
        db.execute(
            "UPDATE events SET body = ? WHERE run_id = ? AND seq = ?",
            (encode_event(edited), run_id, cut),
        )

    assert await store.read_page(run_id, after_seq=cut - 1, limit=1) == [edited]  # alone: sound
    with pytest.raises(BrokenChain):  # the page after it does not link to it
        await store.read_page(run_id, after_seq=cut, limit=3)
