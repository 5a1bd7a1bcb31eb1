"""``GET /v1/runs`` a page at a time: ``next_cursor`` opens the next page, past any number."""

from __future__ import annotations

import base64
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.stores.test_run_positions import started_runs
from tether import Agent
from tether.server import ApiKeys, create_app
from tether.stores.sqlite import SqliteStore
from tether.testing import ScriptedModel, finish

T0 = datetime(2020, 1, 1, tzinfo=UTC)
"""When the runs written straight to the store start: before any run a test starts now."""


class Api:
    def __init__(self, client: httpx.AsyncClient, store: SqliteStore, tokens: dict[str, str]):
        self.client, self.store, self.tokens = client, store, tokens

    async def page(self, who: str = "a", **params: Any) -> httpx.Response:
        headers = {"Authorization": f"Bearer {self.tokens[who]}"}
        return await self.client.get("/v1/runs", params=params, headers=headers)

    async def listed(self, who: str = "a", **params: Any) -> list[list[str]]:
        """Every page of the listing, by run id, following ``next_cursor`` to the end."""
        pages: list[list[str]] = []
        cursor: str | None = None
        while True:
            got = await self.page(who, **params, **({} if cursor is None else {"cursor": cursor}))
            assert got.status_code == 200, got.text
            body = got.json()
            pages.append([r["run_id"] for r in body["runs"]])
            cursor = body["next_cursor"]
            if cursor is None:
                return pages


@pytest.fixture
async def api(tmp_path: Path) -> AsyncIterator[Api]:
    store = SqliteStore(tmp_path / "runs.db")
    keys = ApiKeys(store)
    tokens = {
        "a": (await keys.create("acme", ["read", "run"]))[1],
        "b": (await keys.create("globex", ["read"]))[1],
    }
    app = create_app(Agent(name="quick", model=ScriptedModel([finish("done")])), store)
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://test") as client:
        yield Api(client, store, tokens)
    await app.state.api.runs.close()
    await store.close()


async def test_a_tenant_with_more_than_a_thousand_runs_pages_through_all_of_them(
    api: Api,
) -> None:
    # 1,005 runs, several started at the same instant (their ids order them)
    await started_runs(
        api.store, [T0 + timedelta(seconds=i // 4) for i in range(1005)], tags=["tenant:acme"]
    )
    await started_runs(
        api.store, [T0 + timedelta(seconds=i) for i in range(7)], tags=["tenant:globex"]
    )

    pages = await api.listed(limit=1000)

    assert [len(page) for page in pages] == [1000, 5]
    ids = [run_id for page in pages for run_id in page]
    assert len(set(ids)) == 1005
    rows = [await api.store.info(run_id) for run_id in ids]
    assert all("tenant:acme" in r.tags for r in rows)
    order = [(r.created_at, r.run_id) for r in rows]
    assert order == sorted(order, reverse=True)  # newest first, as a single listing
    assert [p for page in await api.listed(limit=300) for p in page] == ids
    theirs = await api.listed("b", limit=5)
    assert [len(page) for page in theirs] == [5, 2]


async def test_runs_started_between_pages_neither_repeat_nor_hide_a_run(api: Api) -> None:
    await started_runs(
        api.store, [T0 + timedelta(seconds=i) for i in range(9)], tags=["tenant:acme"]
    )
    before = [r for page in await api.listed(limit=100) for r in page]
    first = (await api.page(limit=4)).json()

    for _ in range(3):  # started now: newer than every run listed
        started = await api.client.post(
            "/v1/runs",
            json={"goal": "hi"},
            headers={"Authorization": f"Bearer {api.tokens['a']}"},
        )
        assert started.status_code == 202
    second = (await api.page(limit=4, cursor=first["next_cursor"])).json()
    third = (await api.page(limit=4, cursor=second["next_cursor"])).json()

    seen = [r["run_id"] for body in (first, second, third) for r in body["runs"]]
    assert seen == before
    assert third["next_cursor"] is None


async def test_a_cursor_keeps_to_the_query_it_is_given_with(api: Api) -> None:
    await started_runs(
        api.store, [T0 + timedelta(seconds=i) for i in range(5)], tags=["tenant:acme"]
    )
    started = await api.client.post(
        "/v1/runs", json={"goal": "hi"}, headers={"Authorization": f"Bearer {api.tokens['a']}"}
    )
    run_id = started.json()["run_id"]

    finished = await api.listed(limit=1, status="finished")
    theirs = await api.listed("b", limit=1)

    assert finished == [[run_id]]
    assert theirs == [[]]


@pytest.mark.parametrize(
    "cursor",
    [
        "not-a-cursor",
        base64.urlsafe_b64encode(b'["2026-01-01T00:00:00", "x"]').decode().rstrip("="),
        base64.urlsafe_b64encode(b'["2026-01-01T00:00:00+00:00", ""]').decode().rstrip("="),
        base64.urlsafe_b64encode(b'{"at": 1}').decode().rstrip("="),
    ],
)
async def test_a_cursor_the_server_did_not_give_is_refused(api: Api, cursor: str) -> None:
    got = await api.page(cursor=cursor)

    assert got.status_code == 422
    assert got.json() == {
        "error": "cursor is not one this server gave: pass a next_cursor as it came, or "
        "leave cursor out for the first page"
    }


async def test_a_cursor_that_is_not_base64url_is_refused_by_the_schema(api: Api) -> None:
    got = await api.page(cursor="a+b/c=")

    assert got.status_code == 422
    assert "cursor" in got.json()["error"]
