"""The HTTP API at its edges: what a server-side failure tells a client, ambiguous keys, HEAD."""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest
from fastapi import FastAPI

from tether import Agent, tool
from tether.errors import ConfigError
from tether.server import ApiKeys, create_app
from tether.server import sse as server_sse
from tether.server.runs import ServerRuns
from tether.stores._sqliteopen import sqlite_error
from tether.stores.sqlite import SqliteStore
from tether.testing import ScriptedModel, call, finish

gate = asyncio.Event()


@tool(read_only=True, open_world=False)
async def wait_for_gate() -> str:
    """Waits until the test opens the gate."""
    await gate.wait()
    return "opened"


@tool(read_only=True, open_world=False)
async def tick() -> str:
    """Waits for the gate, then for nothing."""
    await gate.wait()
    return "tick"


class Client:
    def __init__(
        self, app: FastAPI, client: httpx.AsyncClient, store: SqliteStore, tokens: dict[str, str]
    ):
        self.app, self.client, self.store, self.tokens = app, client, store, tokens

    def auth(self, who: str = "a") -> dict[str, str]:
        return {"Authorization": f"Bearer {self.tokens[who]}"}


@pytest.fixture
async def api(tmp_path: Path) -> AsyncIterator[Client]:
    global gate
    gate = asyncio.Event()  # of this test's event loop
    store = SqliteStore(tmp_path / "runs.db")
    keys = ApiKeys(store)
    tokens = {
        "a": (await keys.create("acme", ["admin"]))[1],
        "b": (await keys.create("globex", ["admin"]))[1],
    }
    quick = Agent(name="quick", model=ScriptedModel([finish("done")]))
    script = [call("wait_for_gate"), finish("waited")]
    slow = Agent(name="slow", model=ScriptedModel(script), tools=[wait_for_gate])
    steady = [call("tick") for _ in range(10)] + [finish("ticked")]
    busy = Agent(name="busy", model=ScriptedModel(steady), tools=[tick])
    app = create_app({"quick": quick, "slow": slow, "busy": busy}, store)
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://test") as client:
        yield Client(app, client, store, tokens)
    gate.set()
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


async def test_head_answers_as_get_would_without_the_body(api: Client) -> None:
    body = {"goal": "hi", "agent": "quick"}
    run_id = (await api.client.post("/v1/runs", json=body, headers=api.auth())).json()["run_id"]
    for path, headers in [
        ("/v1/runs", api.auth()),
        (f"/v1/runs/{run_id}", api.auth()),
        (f"/v1/runs/{run_id}/log", api.auth()),
        ("/", {}),
        ("/openapi.json", {}),
    ]:
        got = await api.client.get(path, headers=headers)
        head = await api.client.head(path, headers=headers)
        assert head.status_code == got.status_code == 200, (path, head.text)
        assert head.content == b""
        assert head.headers["content-type"] == got.headers["content-type"]
        # a log is streamed a page at a time (chunked): neither has a Content-Length
        assert head.headers.get("content-length") == got.headers.get("content-length")
    events = await api.client.head(f"/v1/runs/{run_id}/events", headers=api.auth())
    assert events.status_code == 200
    assert events.headers["content-type"].startswith("text/event-stream")
    assert events.content == b""
    refused = await api.client.head("/v1/runs")
    assert (refused.status_code, refused.headers["www-authenticate"]) == (401, "Bearer")
    wrong = await api.client.put("/v1/runs", headers=api.auth())
    assert wrong.status_code == 405
    assert wrong.headers["allow"] == "GET, HEAD, POST"


async def test_head_of_a_live_stream_ends_after_the_head(api: Client) -> None:
    body = {"goal": "wait", "agent": "slow"}
    run_id = (await api.client.post("/v1/runs", json=body, headers=api.auth())).json()["run_id"]
    path = f"/v1/runs/{run_id}/events"
    head = await asyncio.wait_for(api.client.head(path, headers=api.auth()), 30)
    assert head.status_code == 200  # while the run still waits: the stream was not followed
    assert head.content == b""
    status = (await api.client.get(f"/v1/runs/{run_id}", headers=api.auth())).json()["status"]
    assert status == "running"


async def test_a_revoked_keys_stream_ends_while_events_keep_coming(
    api: Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(server_sse, "_KEY_CHECK_S", 0.0, raising=False)  # each time it may
    body = {"goal": "tick", "agent": "busy"}
    run_id = (await api.client.post("/v1/runs", json=body, headers=api.auth())).json()["run_id"]
    live = {"allowed": True}

    async def allowed() -> bool:
        return live["allowed"]

    runs: ServerRuns = api.app.state.api.runs
    received: list[bytes] = []
    async for chunk in server_sse.event_stream(api.store, runs, run_id, -1, allowed):
        received.append(chunk)
        live["allowed"] = False  # revoked; and from now on events come with no quiet 15 s
        gate.set()
    assert b"run_finished" not in b"".join(received)  # it was followed to the end


async def test_no_page_of_the_server_loads_script_from_elsewhere(api: Client) -> None:
    # the trace page keeps a key in the tab's sessionStorage: any script that runs on this
    # origin can read it (FastAPI's /docs and /redoc pulled theirs from a CDN, with no CSP)
    for path in ("/docs", "/redoc", "/docs/oauth2-redirect"):
        got = await api.client.get(path)
        assert got.status_code == 404, path
        assert "<script" not in got.text
    assert (await api.client.get("/openapi.json")).status_code == 200  # the schema stays


async def starting_run(
    tmp_path: Path, run_id: str | None
) -> tuple[SqliteStore, ServerRuns, asyncio.Future[str]]:
    """A server's runs over a fresh store, and a run it is starting (its task made, no event)."""
    store = SqliteStore(tmp_path / "runs.db")
    runs = ServerRuns(store, max_active=4)
    agent = Agent(name="quick", model=ScriptedModel([finish("done")]))
    starting = asyncio.ensure_future(
        runs.start(agent, "go", run_id=run_id, context=None, tags=("tenant:acme",))
    )
    await asyncio.sleep(0)
    return store, runs, starting


async def test_a_run_still_starting_when_the_server_stops_is_left_to_resume(
    tmp_path: Path,
) -> None:
    # before: close() stopped only the runs that had committed an event: one still starting
    # was cancelled with the event loop, and ended "cancelled" for good
    from tether.stores.stale import stale_runs

    store, runs, starting = await starting_run(tmp_path, None)  # no event committed yet
    await runs.close()
    run_id = await starting
    (stale,) = await stale_runs(store)  # no ending, its lease given back: resumed next start
    assert stale.info.run_id == run_id
    await store.close()


async def test_a_cancel_in_the_instant_a_run_starts_is_busy_not_the_clients_mistake(
    tmp_path: Path,
) -> None:
    # before: a plain UserError (HTTP 400, "nothing to cancel") for a run the server was
    # starting under that id at that moment
    from tether.server.runs import Busy

    store, runs, starting = await starting_run(tmp_path, "job-1")  # the id claimed, no more
    with pytest.raises(Busy, match="starting"):
        await runs.cancel("job-1")
    assert await starting == "job-1"
    await runs.close()
    await store.close()
