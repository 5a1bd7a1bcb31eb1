"""Auditing a stored run a page at a time (``audit_stored``): what auditing it whole finds."""

from __future__ import annotations

import dataclasses
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from tests.stores.helpers import agent_log, reply, waiting_log
from tests.stores.tampering import (
    CHAIN_TAMPERINGS,
    MAC_TAMPERINGS,
    Tampering,
    audited_whole,
    tamper,
)
from tether.auditkey import AuditKey
from tether.errors import RunNotFound
from tether.events import Event
from tether.policy.audit import audit_stored
from tether.stores import MemoryStore, RunStore, SqliteStore

KEY = AuditKey(b"stored-audit-test-key:3e9a61c0b7d2", source="the tests' key")


async def stored_run(store: RunStore, *, replies: int = 20, key: AuditKey | None = None) -> str:
    """A run of an agent's events then ``replies`` user replies; with ``key``: MACs too."""
    log = await agent_log(run_id=str(uuid.uuid4()))
    for i in range(replies):
        log.append(reply(log, f"reply {i}"))
    macs = [None if key is None else key.mac(e.hash) for e in log]
    await store.append_copied(log[0].run_id, log, macs)
    return log[0].run_id


@pytest.fixture
async def sqlite(tmp_path: Path) -> AsyncIterator[SqliteStore]:
    store = SqliteStore(tmp_path / "t.db", audit_key=None)
    try:
        yield store
    finally:
        await store.close()


def first_reply(events: int, replies: int = 20) -> int:
    return events - replies


@pytest.mark.parametrize("page", [1, 3, 7, 100])
@pytest.mark.parametrize("key", [None, KEY], ids=["unkeyed", "keyed"])
@pytest.mark.parametrize("how", [None, *CHAIN_TAMPERINGS, *MAC_TAMPERINGS])
async def test_a_stored_run_audited_a_page_at_a_time_gets_the_whole_runs_report(
    sqlite: SqliteStore, page: int, key: AuditKey | None, how: Tampering | None
) -> None:
    run_id = await stored_run(sqlite, key=KEY)
    events = (await sqlite.info(run_id)).events
    for offset in (0, 2, 6, 13) if how is not None else (0,):
        if how is not None:  # a fresh copy of the run for each place it is tampered with
            run_id = await stored_run(sqlite, key=KEY)
            tamper(sqlite.path, run_id, how, first_reply(events) + offset)
        whole = await audited_whole(sqlite, run_id, key)

        paged = await audit_stored(
            sqlite, run_id, expected_events=(await sqlite.info(run_id)).events, key=key, page=page
        )

        assert paged == whole, (how, offset)
        assert paged.ok == (how is None or (key is None and how in MAC_TAMPERINGS))


async def test_an_audit_without_entries_holds_no_decision(sqlite: SqliteStore) -> None:
    run_id = await stored_run(sqlite)
    whole = await audited_whole(sqlite, run_id, None)
    assert whole.entries  # the agent's run has policy decisions

    paged = await audit_stored(
        sqlite, run_id, expected_events=(await sqlite.info(run_id)).events, entries=False, page=3
    )

    assert paged.entries == ()
    assert paged == dataclasses.replace(whole, entries=())


async def test_a_stored_audit_reads_pages_and_never_the_whole_run(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    store = MemoryStore(audit_key=KEY)
    run_id = await stored_run(store, replies=50, key=KEY)
    whole = await audited_whole(store, run_id, KEY)
    sizes: list[int] = []
    read_page = store.read_page

    async def page(run_id: str, *, after_seq: int = -1, limit: int) -> list[Event]:
        got = await read_page(run_id, after_seq=after_seq, limit=limit)
        sizes.append(len(got))
        return got

    async def refused(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("the whole run was read at once")

    monkeypatch.setattr(store, "read_page", page)
    for name in ("read", "read_encoded", "read_macs"):
        monkeypatch.setattr(store, name, refused)

    assert await audit_stored(store, run_id, key=KEY, page=8) == whole
    assert max(sizes) == 8
    assert sum(sizes) == whole.events


async def test_a_stored_audit_of_an_unknown_run_raises_run_not_found(sqlite: SqliteStore) -> None:
    with pytest.raises(RunNotFound):
        await audit_stored(sqlite, "nope")


class _Live(SqliteStore):
    """A run that commits one event while the audit reads its pages (it goes on)."""

    tail: Event | None = None

    async def read_macs_page(
        self, run_id: str, *, after_seq: int = -1, limit: int
    ) -> dict[int, str]:
        out = await super().read_macs_page(run_id, after_seq=after_seq, limit=limit)
        if self.tail is not None:
            event, self.tail = self.tail, None
            await self.append(run_id, [event])
        return out


async def test_a_run_that_goes_on_while_it_is_audited_is_not_called_added_to(
    tmp_path: Path,
) -> None:
    # before: the index's count read before the pages was the one compared: "the store's
    # index records 5 events but the log has 6: it was cut (or added to)"
    store = _Live(tmp_path / "live.db")
    try:
        log = await waiting_log()
        run_id = log[0].run_id
        await store.append(run_id, log)
        expected = (await store.info(run_id)).events
        store.tail = reply(log)
        report = await audit_stored(store, run_id, expected_events=expected, page=2)
        assert report.ok, report.problem
        assert report.events == len(log) + 1
    finally:
        await store.close()


async def test_a_log_added_to_behind_its_index_is_still_found(tmp_path: Path) -> None:
    import contextlib
    import sqlite3

    from tests.stores.helpers import reply, waiting_log
    from tether.codec import encode_event

    store = SqliteStore(tmp_path / "added.db")
    try:
        log = await waiting_log()
        run_id = log[0].run_id
        await store.append(run_id, log)
        expected = (await store.info(run_id)).events
        extra = reply(log)
        with contextlib.closing(sqlite3.connect(store.path)) as conn, conn:  # not the index
            conn.execute(
                "INSERT INTO events (run_id, seq, kind, hash, body) VALUES (?, ?, ?, ?, ?)",
                (run_id, extra.seq, extra.kind, extra.hash, encode_event(extra)),
            )
        report = await audit_stored(store, run_id, expected_events=expected, page=2)
        assert not report.ok
        assert "index records" in (report.problem or "")
    finally:
        await store.close()
