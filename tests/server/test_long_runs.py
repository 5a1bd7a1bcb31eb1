"""A long run is read a page at a time, never held whole: its log, events, audit, waiting calls."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi import FastAPI
from fastapi.responses import Response, StreamingResponse

from tests.stores.helpers import stored_long_run
from tests.stores.tampering import (
    CHAIN_TAMPERINGS,
    MAC_TAMPERINGS,
    Tampering,
    audited_whole,
    tamper,
)
from tether import Agent
from tether.auditkey import ENV_KEY, AuditKey
from tether.codec import encode_event
from tether.events import Event
from tether.server import ApiKeys, create_app
from tether.server.endpoints import Endpoints
from tether.server.sse import PAGE
from tether.stores.sqlite import SqliteStore
from tether.testing import ScriptedModel, finish

LENGTH = 3000
"""Events past the run's start: many pages."""
SECRET = "long-runs-audit-key:8d41f0c2a97e"
"""The server's audit key (``$TETHER_AUDIT_KEY``) where a test gives it one."""
KEY = AuditKey(SECRET.encode())


@dataclass
class Reads:
    """What the endpoints asked the store for."""

    pages: list[int] = field(default_factory=list[int])
    """The size of each page read, in order."""
    mac_pages: list[int] = field(default_factory=list[int])
    """The ``limit`` of each page of MACs read, in order."""


class Served:
    def __init__(self, app: FastAPI, client: httpx.AsyncClient, store: SqliteStore, token: str):
        self.app, self.client, self.store, self.token = app, client, store, token

    @property
    def auth(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.token}"}

    @property
    def api(self) -> Endpoints:
        return self.app.state.api


@pytest.fixture
async def served(tmp_path: Path) -> AsyncIterator[Served]:
    store = SqliteStore(tmp_path / "runs.db")
    token = (await ApiKeys(store).create("acme", ["read"]))[1]
    app = create_app(Agent(name="agent", model=ScriptedModel([finish("done")])), store)
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://test") as client:
        yield Served(app, client, store, token)
    await store.close()


async def long_run(store: SqliteStore, key: AuditKey | None = None) -> list[Event]:
    """A run of the tenant's with ``LENGTH`` user replies, written straight to the store."""
    return await stored_long_run(store, LENGTH, key=key, tags=("tenant:acme",))


def counted(store: SqliteStore, monkeypatch: pytest.MonkeyPatch) -> Reads:
    """Count the store's page reads; a read of the whole run fails the test."""
    reads = Reads()
    read_page, read_encoded_pages = store.read_page, store.read_encoded_pages
    read_macs_page = store.read_macs_page

    async def page(run_id: str, *, after_seq: int = -1, limit: int) -> list[Event]:
        got = await read_page(run_id, after_seq=after_seq, limit=limit)
        reads.pages.append(len(got))
        return got

    async def encoded_pages(run_id: str, *, limit: int) -> AsyncIterator[list[bytes]]:
        async for got in read_encoded_pages(run_id, limit=limit):
            reads.pages.append(len(got))
            yield got

    async def macs_page(run_id: str, *, after_seq: int = -1, limit: int) -> dict[int, str]:
        reads.mac_pages.append(limit)
        return await read_macs_page(run_id, after_seq=after_seq, limit=limit)

    async def whole(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("the whole run was read at once")

    monkeypatch.setattr(store, "read_page", page)
    monkeypatch.setattr(store, "read_encoded_pages", encoded_pages)
    monkeypatch.setattr(store, "read_macs_page", macs_page)
    for name in ("read", "read_encoded", "read_macs"):
        monkeypatch.setattr(store, name, whole)
    return reads


async def chunks_of(response: Response) -> AsyncIterator[bytes]:
    """The body of a streamed response, chunk by chunk as the endpoint makes them."""
    assert isinstance(response, StreamingResponse)
    async for chunk in response.body_iterator:
        assert isinstance(chunk, bytes)
        yield chunk


def old_sse(events: list[Event]) -> bytes:
    """The stream as the server sent it when it read the run whole."""
    return b"".join(
        b"id: %d\nevent: %s\ndata: %s\n\n" % (e.seq, e.kind.encode(), encode_event(e))
        for e in events
    )


async def test_a_long_runs_log_is_the_same_bytes_sent_a_page_at_a_time(
    served: Served, monkeypatch: pytest.MonkeyPatch
) -> None:
    log = await long_run(served.store)
    run_id = log[0].run_id
    before = b"".join(line + b"\n" for line in await served.store.read_encoded(run_id))
    reads = counted(served.store, monkeypatch)

    got = await served.client.get(f"/v1/runs/{run_id}/log", headers=served.auth)

    assert got.status_code == 200
    assert got.content == before  # what the log endpoint sent when it read the run whole
    assert got.headers["content-type"] == "application/jsonl"
    assert max(reads.pages) == PAGE
    assert sum(reads.pages) == len(log)
    # each page goes out before the next is read
    key = await served.api.keys.verify(served.token)
    reads.pages.clear()
    chunks = chunks_of(await served.api.run_log(run_id, key))
    first = await anext(chunks)
    assert reads.pages == [PAGE]
    assert len(first.splitlines()) == PAGE
    assert first + b"".join([c async for c in chunks]) == before


async def test_a_long_runs_events_are_streamed_a_page_at_a_time_with_no_gap_or_duplicate(
    served: Served, monkeypatch: pytest.MonkeyPatch
) -> None:
    log = await long_run(served.store)
    run_id = log[0].run_id
    reads = counted(served.store, monkeypatch)
    url = f"/v1/runs/{run_id}/events"

    whole = await served.client.get(url, headers=served.auth)

    assert whole.content == old_sse(log)
    assert max(reads.pages) == PAGE
    for cut in (0, PAGE - 1, PAGE, PAGE + 1, 17 * PAGE + 5, len(log) - 2, len(log) - 1):
        headers = {**served.auth, "Last-Event-ID": str(cut)}
        rest = await served.client.get(url, headers=headers)
        assert rest.content == old_sse(log[cut + 1 :]), cut
    # each page goes out before the next is read
    key = await served.api.keys.verify(served.token)
    reads.pages.clear()
    chunks = chunks_of(await served.api.run_events(run_id, key, -1))
    first = await anext(chunks)
    assert reads.pages == [PAGE]
    assert first == old_sse(log[:PAGE])
    assert first + b"".join([c async for c in chunks]) == old_sse(log)


@pytest.mark.parametrize(
    ("keyed", "how"),
    [
        (False, None),
        (False, "resealed"),
        (True, None),
        *((True, how) for how in (*CHAIN_TAMPERINGS, *MAC_TAMPERINGS)),
    ],
)
async def test_a_long_runs_audit_is_the_same_answer_read_a_page_at_a_time(
    served: Served, monkeypatch: pytest.MonkeyPatch, keyed: bool, how: Tampering | None
) -> None:
    if keyed:
        monkeypatch.setenv(ENV_KEY, SECRET)
    log = await long_run(served.store, KEY)
    run_id = log[0].run_id
    at = 17 * PAGE  # a user reply's: past many pages, and the first of one
    if how is not None:
        tamper(served.store.path, run_id, how, at)
    whole = await audited_whole(served.store, run_id, KEY if keyed else None)
    assert whole.ok == (how is None)
    found = {None: None, "cut": len(log) - 1, "resealed": at if keyed else at + 1}
    assert whole.bad_seq == found.get(how, at)  # the test tampered where it meant to
    reads = counted(served.store, monkeypatch)

    got = await served.client.get(f"/v1/runs/{run_id}/audit", headers=served.auth)

    assert got.status_code == 200
    assert got.json() == {  # what the audit answered when it read the run whole
        "run_id": run_id,
        "ok": whole.ok,
        "events": whole.events,
        "bad_seq": whole.bad_seq,
        "problem": whole.problem,
        "last_hash": whole.last_hash,
        "keyed": whole.keyed,
        "verified_through": whole.verified_through,
    }
    assert max(reads.pages) == PAGE
    assert sum(reads.pages) == whole.events  # those after a bad one are counted
    assert max(reads.mac_pages) <= PAGE
