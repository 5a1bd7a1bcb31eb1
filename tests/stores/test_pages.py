"""Reading a run's log in pages (``read_page``, ``read_encoded_pages``, ``read_macs_page``).

On every backend."""

from __future__ import annotations

import contextlib
import dataclasses
import sqlite3
import uuid
from collections.abc import AsyncIterator
from datetime import timedelta
from pathlib import Path

import pytest

from tether.auditkey import AuditKey
from tether.codec import encode_event, seal
from tether.errors import BrokenChain, UserError
from tether.events import Event, UserReplied
from tether.stores import MemoryStore, RunNotFound, RunStore, SqliteStore

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


KEY = AuditKey(b"pages-test-audit-key:5f1c9e2b7a64", source="the test's key")


@pytest.fixture(params=["memory", "sqlite"])
async def keyed(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[RunStore]:
    """An empty store of each backend that keeps MACs (none made: the tests copy theirs)."""
    opened: RunStore = (
        MemoryStore()
        if request.param == "memory"
        else SqliteStore(tmp_path / "k.db", audit_key=None)
    )
    try:
        yield opened
    finally:
        await opened.close()


async def copied_with_gaps(store: RunStore) -> tuple[str, dict[int, str]]:
    """A run stored with a MAC on every event but each third (copied: none made here)."""
    log = await agent_log(run_id=str(uuid.uuid4()))
    log += replies(log, 20)
    macs = [None if e.seq % 3 == 1 else KEY.mac(e.hash) for e in log]
    await store.append_copied(log[0].run_id, log, macs)
    return log[0].run_id, {e.seq: m for e, m in zip(log, macs, strict=True) if m is not None}


@pytest.mark.parametrize("limit", [1, 3, 7, 1000])
async def test_mac_pages_are_the_macs_of_the_event_pages(keyed: RunStore, limit: int) -> None:
    run_id, macs = await copied_with_gaps(keyed)
    assert await keyed.read_macs(run_id) == macs
    together: dict[int, str] = {}
    for after in range(-1, max(macs) + 1, limit):
        page = await keyed.read_macs_page(run_id, after_seq=after, limit=limit)
        assert page == {s: m for s, m in macs.items() if after < s <= after + limit}
        # the default, for a store that cannot read a page, finds the same
        assert page == await RunStore.read_macs_page(keyed, run_id, after_seq=after, limit=limit)
        together |= page
    assert together == macs


@pytest.mark.parametrize("after", [-7, -1, 5, 100])
async def test_a_mac_page_starts_after_the_seq_given(keyed: RunStore, after: int) -> None:
    run_id, macs = await copied_with_gaps(keyed)
    page = await keyed.read_macs_page(run_id, after_seq=after, limit=4)
    first = max(after, -1) + 1
    assert page == {s: m for s, m in macs.items() if first <= s < first + 4}


async def test_a_mac_page_of_an_unknown_run_raises_run_not_found(keyed: RunStore) -> None:
    for after in (-1, 3):
        with pytest.raises(RunNotFound):
            await keyed.read_macs_page("nope", after_seq=after, limit=5)


async def test_a_mac_page_holds_at_least_one_seq(keyed: RunStore) -> None:
    run_id, _ = await copied_with_gaps(keyed)
    for limit in (0, -1):
        with pytest.raises(UserError, match="limit must be 1 or more"):
            await keyed.read_macs_page(run_id, limit=limit)


async def test_a_run_stored_without_macs_has_empty_mac_pages(store: RunStore) -> None:
    log = await stored(store)
    assert await store.read_macs_page(log[0].run_id, limit=5) == {}
