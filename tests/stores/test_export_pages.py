"""``export_pages``: a run's export a page at a time, the bytes and errors of exporting it whole."""

from __future__ import annotations

from collections.abc import AsyncGenerator
from pathlib import Path
from typing import Any

import pytest

from tests.stores.helpers import reply, stored_long_run
from tests.stores.tampering import CHAIN_TAMPERINGS, Tampering, tamper
from tether.auditkey import AuditKey
from tether.codec import encode_line, verify_chain
from tether.errors import BrokenChain, LogError, TetherError
from tether.stores import MemoryStore, RunStore, SqliteStore
from tether.stores.transfer import export_pages, export_run

KEY = AuditKey(b"export-pages-test-key:19c7e5a03b", source="the tests' key")
REPLIES = 30
"""User replies in a run: several pages of a few events."""


async def exported_whole(store: RunStore, run_id: str) -> bytes:
    """The export as it was made of a run read whole."""
    events = await store.read(run_id)
    verify_chain(events, run_id=run_id)
    macs = await store.read_macs(run_id)
    return b"".join(encode_line(event, macs.get(event.seq)) + b"\n" for event in events)


async def pages_of(store: RunStore, run_id: str, limit: int) -> list[bytes]:
    return [page async for page in export_pages(store, run_id, limit=limit)]


@pytest.fixture
async def sqlite(tmp_path: Path) -> AsyncGenerator[SqliteStore]:
    store = SqliteStore(tmp_path / "t.db", audit_key=None)
    try:
        yield store
    finally:
        await store.close()


@pytest.mark.parametrize("limit", [1, 3, 7, 100])
async def test_the_pages_of_an_export_are_the_whole_export(store: RunStore, limit: int) -> None:
    log = await stored_long_run(store, REPLIES, key=KEY)
    run_id = log[0].run_id
    whole = await exported_whole(store, run_id)
    assert whole.count(b'"mac":') == len(log)  # the MACs are exported too

    pages = await pages_of(store, run_id, limit)

    assert b"".join(pages) == whole == await export_run(store, run_id)
    assert [len(page.splitlines()) for page in pages[:-1]] == [limit] * (len(pages) - 1)
    assert 0 < len(pages[-1].splitlines()) <= limit


@pytest.mark.parametrize("limit", [3, 100])
@pytest.mark.parametrize("how", CHAIN_TAMPERINGS)
async def test_a_tampered_log_exports_nothing_and_fails_as_when_it_was_read_whole(
    sqlite: SqliteStore, limit: int, how: Tampering
) -> None:
    log = await stored_long_run(sqlite, REPLIES, key=KEY)
    run_id = log[0].run_id
    tamper(sqlite.path, run_id, how, len(log) - 12)
    try:
        whole: bytes | TetherError = await exported_whole(sqlite, run_id)
    except TetherError as exc:
        whole = exc

    pages = export_pages(sqlite, run_id, limit=limit)

    if isinstance(whole, TetherError):  # the same error, before any page
        with pytest.raises(type(whole)) as raised:
            await anext(pages)
        assert str(raised.value) == str(whole)
    else:
        assert b"".join([page async for page in pages]) == whole


async def test_a_log_broken_twice_fails_as_it_did_read_whole(sqlite: SqliteStore) -> None:
    log = await stored_long_run(sqlite, REPLIES)
    run_id = log[0].run_id
    tamper(sqlite.path, run_id, "resealed", len(log) - 25)  # the chain breaks here, but
    tamper(sqlite.path, run_id, "undecodable", len(log) - 2)  # reading it whole failed here
    with pytest.raises(LogError) as whole:
        await exported_whole(sqlite, run_id)
    assert not isinstance(whole.value, BrokenChain)

    with pytest.raises(LogError) as paged:
        await anext(export_pages(sqlite, run_id, limit=3))

    assert str(paged.value) == str(whole.value)


async def test_a_run_that_goes_on_is_exported_as_it_was_when_it_was_checked(
    sqlite: SqliteStore,
) -> None:
    log = await stored_long_run(sqlite, REPLIES)
    run_id = log[0].run_id
    whole = await exported_whole(sqlite, run_id)
    pages = export_pages(sqlite, run_id, limit=4)
    first = await anext(pages)

    await sqlite.append(run_id, [reply(log)])  # it goes on meanwhile

    assert first + b"".join([page async for page in pages]) == whole


@pytest.mark.parametrize("at", ["middle", "end"])
async def test_a_log_edited_between_the_readings_fails(
    sqlite: SqliteStore, monkeypatch: pytest.MonkeyPatch, at: str
) -> None:
    log = await stored_long_run(sqlite, REPLIES)
    run_id = log[0].run_id
    seq = len(log) - 10 if at == "middle" else len(log) - 1
    readings = 0
    read_encoded_pages = sqlite.read_encoded_pages

    def edited_second(run_id: str, *, limit: int) -> AsyncGenerator[list[bytes]]:
        nonlocal readings
        readings += 1
        if readings == 2:  # re-sealed: its own hash holds, not what the first reading saw
            tamper(sqlite.path, run_id, "resealed", seq)
        return read_encoded_pages(run_id, limit=limit)

    monkeypatch.setattr(sqlite, "read_encoded_pages", edited_second)

    with pytest.raises(BrokenChain, match="prev_hash" if at == "middle" else "changed while"):
        await pages_of(sqlite, run_id, 4)


async def test_an_export_never_reads_the_whole_run(monkeypatch: pytest.MonkeyPatch) -> None:
    store = MemoryStore()
    log = await stored_long_run(store, REPLIES, key=KEY)
    run_id = log[0].run_id
    whole = await exported_whole(store, run_id)

    async def refused(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("the whole run was read at once")

    for name in ("read", "read_encoded", "read_macs"):
        monkeypatch.setattr(store, name, refused)

    assert b"".join(await pages_of(store, run_id, 5)) == whole
