"""A long run is read a page at a time, never held whole: its log, events, audit, waiting calls."""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi import FastAPI
from fastapi.responses import Response, StreamingResponse

from tests.stores.helpers import T0, rechain, stored_long_run
from tests.stores.tampering import (
    CHAIN_TAMPERINGS,
    MAC_TAMPERINGS,
    Tampering,
    audited_whole,
    tamper,
)
from tether import Agent, tool
from tether.auditkey import ENV_KEY, AuditKey
from tether.codec import encode_event
from tether.errors import TetherError
from tether.events import GENESIS_HASH, ApprovalGiven, ApprovalRequested, Event
from tether.jsontypes import JsonValue
from tether.policy import RulePolicy, Rules, require_approval
from tether.server import ApiKeys, create_app
from tether.server.endpoints import Endpoints
from tether.server.sse import PAGE
from tether.stores.sqlite import SqliteStore
from tether.testing import FakeClock, ScriptedModel, call, finish

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
    token = (await ApiKeys(store).create("acme", ["read", "approve"]))[1]
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
    found["below_zero"] = 0  # the copy below seq 0 comes first: the log's first line is wrong
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


@tool(destructive=True, open_world=False)
def wire(amount: float) -> str:
    """Wires money.

    Args:
        amount: How much.
    """
    return "wired"


async def long_waiting_run(store: SqliteStore) -> list[Event]:
    """A run of the tenant's that waits for approvals, written straight to the store.

    After a real run's first call held for approval it asks ``LENGTH // 2`` more, each
    answered at once but calls 7, 507 and 1007; call 7 is answered many pages on, then asked
    again: it waits, last in line.
    """
    policy = RulePolicy(Rules(rules=(require_approval("wire"),)))
    outcome = await Agent(name="agent", tools=[wire], policy=policy).run(
        "wire it",
        model=ScriptedModel([call("wire", amount=12.5)]),
        clock=FakeClock(T0),
        tags=("tenant:acme",),
    )
    assert outcome.status == "waiting_for_approval"
    *start, asked, end = outcome.events
    assert isinstance(asked, ApprovalRequested)

    def ask(i: int) -> Event:
        return dataclasses.replace(asked, call_id=f"call_{i}", arguments={"amount": i})

    def give(i: int) -> Event:
        return ApprovalGiven(
            run_id=asked.run_id,
            seq=0,
            at=asked.at,
            prev_hash="",
            call_id=f"call_{i}",
            approved=i % 2 == 0,
            by="ops",
        )

    events: list[Event] = [*start, asked]
    for i in range(LENGTH // 2):
        events += [ask(i)] if i % 500 == 7 else [ask(i), give(i)]
    events += [give(7), ask(7), end]
    log = rechain(
        [dataclasses.replace(e, seq=n) for n, e in enumerate(events)], prev_hash=GENESIS_HASH
    )
    await store.append(log[0].run_id, log)
    return log


def old_pending(events: list[Event]) -> list[JsonValue]:
    """The calls ``GET /runs/{id}`` said a run waits for when it read the run whole."""
    requested: dict[str, ApprovalRequested] = {}
    for event in events:
        if isinstance(event, ApprovalRequested):
            requested[event.call_id] = event
        elif isinstance(event, ApprovalGiven):
            requested.pop(event.call_id, None)
    return [
        {
            "call_id": r.call_id,
            "tool": r.tool,
            "arguments": r.arguments,
            "arguments_hash": r.arguments_hash,
        }
        for r in requested.values()
    ]


async def test_a_long_runs_waiting_calls_are_found_a_page_at_a_time(
    served: Served, monkeypatch: pytest.MonkeyPatch
) -> None:
    log = await long_waiting_run(served.store)
    run_id = log[0].run_id
    pending = old_pending(log)
    ids = [p["call_id"] for p in pending if isinstance(p, dict)]
    assert ids[1:] == ["call_507", "call_1007", "call_7"]
    reads = counted(served.store, monkeypatch)

    shown = await served.client.get(f"/v1/runs/{run_id}", headers=served.auth)

    assert shown.status_code == 200
    assert shown.json()["status"] == "waiting_for_approval"
    assert shown.json()["pending"] == pending
    assert max(reads.pages) == PAGE
    assert sum(reads.pages) == len(log)

    decisions = {"decisions": [{"call_id": "nope", "approve": True, "arguments_hash": "0" * 64}]}
    refused = await served.client.post(
        f"/v1/runs/{run_id}/approvals", json=decisions, headers=served.auth
    )

    assert refused.status_code == 409
    waits = ", ".join(map(str, ids))
    assert refused.json()["error"] == f"the run waits for no call 'nope': it waits for {waits}"


@pytest.mark.parametrize("how", CHAIN_TAMPERINGS)
async def test_a_tampered_long_runs_waiting_calls_fail_as_when_it_was_read_whole(
    served: Served,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
    how: Tampering,
) -> None:
    log = await long_waiting_run(served.store)
    run_id = log[0].run_id
    tamper(served.store.path, run_id, how, 17 * PAGE)
    try:  # what the run's page said when it read the run whole
        before: JsonValue | TetherError = old_pending(await served.store.read(run_id))
    except TetherError as exc:
        before = exc
    counted(served.store, monkeypatch)

    with caplog.at_level(logging.ERROR, logger="tether.server"):
        shown = await served.client.get(f"/v1/runs/{run_id}", headers=served.auth)

    if isinstance(before, TetherError):  # the same error, naming the same seq and reason
        assert shown.status_code == 503
        assert f"failed: {type(before).__name__}: {before}" in caplog.text
    else:
        assert shown.status_code == 200
        assert shown.json()["pending"] == before
