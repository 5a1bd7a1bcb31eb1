"""A long run's log and events are sent a page at a time as they are read, never held whole."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi import FastAPI
from fastapi.responses import Response, StreamingResponse

from tests.stores.helpers import agent_log, finished
from tether import Agent
from tether.codec import encode_event, seal
from tether.events import Event, UserReplied
from tether.server import ApiKeys, create_app
from tether.server.endpoints import Endpoints
from tether.server.sse import PAGE
from tether.stores.sqlite import SqliteStore
from tether.testing import ScriptedModel, finish

LENGTH = 3000
"""Events past the run's start: many pages."""


@dataclass
class Reads:
    """What the endpoints asked the store for."""

    pages: list[int] = field(default_factory=list[int])
    """The size of each page read, in order."""


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


async def long_run(store: SqliteStore) -> list[Event]:
    """A run of the tenant's with ``LENGTH`` user replies, written straight to the store."""
    start = await agent_log(tags=("tenant:acme",))
    log = start[:-1]
    for i in range(LENGTH):
        last = log[-1]
        log.append(
            seal(
                UserReplied(
                    run_id=last.run_id,
                    seq=last.seq + 1,
                    at=last.at + timedelta(milliseconds=1),
                    prev_hash=last.hash,
                    text=f"reply {i} " + "x" * (i % 50),
                )
            )
        )
    log.append(finished(log))
    await store.append(log[0].run_id, log)
    return log


def counted(store: SqliteStore, monkeypatch: pytest.MonkeyPatch) -> Reads:
    """Count the store's page reads; a read of the whole run fails the test."""
    reads = Reads()
    read_page, read_encoded_pages = store.read_page, store.read_encoded_pages

    async def page(run_id: str, *, after_seq: int = -1, limit: int) -> list[Event]:
        got = await read_page(run_id, after_seq=after_seq, limit=limit)
        reads.pages.append(len(got))
        return got

    async def encoded_pages(run_id: str, *, limit: int) -> AsyncIterator[list[bytes]]:
        async for got in read_encoded_pages(run_id, limit=limit):
            reads.pages.append(len(got))
            yield got

    async def whole(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("the whole run was read at once")

    monkeypatch.setattr(store, "read_page", page)
    monkeypatch.setattr(store, "read_encoded_pages", encoded_pages)
    monkeypatch.setattr(store, "read", whole)
    monkeypatch.setattr(store, "read_encoded", whole)
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
