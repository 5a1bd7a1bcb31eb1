"""The HTTP API at its edges: what a server-side failure tells a client, ambiguous keys, HEAD."""

from __future__ import annotations

import sqlite3
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest

from tether import Agent
from tether.errors import ConfigError
from tether.server import ApiKeys, create_app
from tether.stores._sqliteopen import sqlite_error
from tether.stores.sqlite import SqliteStore
from tether.testing import ScriptedModel, finish


class Client:
    def __init__(self, client: httpx.AsyncClient, store: SqliteStore, tokens: dict[str, str]):
        self.client, self.store, self.tokens = client, store, tokens

    def auth(self, who: str = "a") -> dict[str, str]:
        return {"Authorization": f"Bearer {self.tokens[who]}"}


@pytest.fixture
async def api(tmp_path: Path) -> AsyncIterator[Client]:
    store = SqliteStore(tmp_path / "runs.db")
    keys = ApiKeys(store)
    tokens = {
        "a": (await keys.create("acme", ["admin"]))[1],
        "b": (await keys.create("globex", ["admin"]))[1],
    }
    app = create_app(Agent(name="quick", model=ScriptedModel([finish("done")])), store)
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://test") as client:
        yield Client(client, store, tokens)
    await app.state.api.runs.close()
    await store.close()


async def test_a_failing_store_is_a_503_that_names_no_file_of_the_server(
    api: Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    where = Path("/srv/secret-place/tether.db")
    locked = sqlite_error(sqlite3.OperationalError("database is locked"), where, "reading")

    async def busy(*args: object, **kwargs: object) -> object:
        raise locked

    monkeypatch.setattr(api.store, "runs", busy)
    got = await api.client.get("/v1/runs", headers=api.auth())
    assert got.status_code == 503
    assert "secret-place" not in got.text
    assert got.json() == {
        "error": "the server cannot do this now (its run store or a model failed): try "
        "again later; the server's log has the details"
    }
    # the key is read from the store too: a client with no key learns no more
    monkeypatch.setattr(api.store, "kv_get", busy)
    anonymous = await api.client.get(
        "/v1/runs", headers={"X-API-Key": "tether_" + "0" * 16 + "_" + "A" * 43}
    )
    assert anonymous.status_code == 503
    assert "secret-place" not in anonymous.text


async def test_a_server_misconfiguration_is_not_blamed_on_the_request(
    api: Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    async def misconfigured(*args: object, **kwargs: object) -> object:
        raise ConfigError("the agent's model file /srv/models/secret.gguf is missing")

    monkeypatch.setattr(api.store, "runs", misconfigured)
    got = await api.client.get("/v1/runs", headers=api.auth())
    assert got.status_code == 503  # not 400: nothing the client sent is wrong
    assert "secret.gguf" not in got.text


@pytest.mark.parametrize("header", ["Authorization", "X-API-Key"])
async def test_the_same_key_header_twice_with_two_keys_is_refused(api: Client, header: str) -> None:
    def value(who: str) -> str:
        return f"Bearer {api.tokens[who]}" if header == "Authorization" else api.tokens[who]

    for first, second in (("a", "b"), ("b", "a")):
        headers = [(header, value(first)), (header, value(second))]
        got = await api.client.get("/v1/runs", headers=headers)
        assert got.status_code == 401, got.text  # was 200, as whichever key came first
        assert "two different keys" in got.json()["error"]
    same = [(header, value("a")), (header, value("a"))]
    assert (await api.client.get("/v1/runs", headers=same)).status_code == 200
