"""The HTTP API: runs started, read and streamed per tenant, keys that let in only what they may."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any, cast

import httpx
import orjson
import pytest
from fastapi import FastAPI

from tether import Agent, tool
from tether.messages import ToolCall
from tether.policy import RulePolicy, Rules, require_approval
from tether.server import ApiKeys, create_app
from tether.server import sse as server_sse
from tether.server.app import MAX_BODY_BYTES
from tether.server.runs import ServerRuns
from tether.stores.sqlite import SqliteStore
from tether.testing import ScriptedModel, call, finish

gate = asyncio.Event()


@tool(read_only=True, open_world=False)
async def wait_for_gate() -> str:
    """Waits until the test opens the gate."""
    await gate.wait()
    return "opened"


def quick() -> Agent[str]:
    return Agent(name="quick", model=ScriptedModel([finish("done")]))


def slow() -> Agent[str]:
    script = [call("wait_for_gate"), finish("waited")]
    return Agent(name="slow", model=ScriptedModel(script), tools=[wait_for_gate])


@tool(destructive=True, open_world=False)
def wire(amount: float) -> str:
    """Wires money.

    Args:
        amount: How much.
    """
    wired.append(amount)
    return "wired"


wired: list[float] = []


def wiring() -> Agent[str]:
    script = [call("wire", amount=12.5), finish("wired")]
    policy = RulePolicy(Rules(rules=(require_approval("wire"),)))
    return Agent(name="wiring", model=ScriptedModel(script), tools=[wire], policy=policy)


def asking() -> Agent[str]:
    script = [ToolCall(id="", name="ask_user", arguments={"question": "Which city?"}), finish("ok")]
    return Agent(name="asking", model=ScriptedModel(script), can_ask_user=True)


class Api:
    def __init__(self, client: httpx.AsyncClient, store: SqliteStore, tokens: dict[str, str]):
        self.client, self.store, self.tokens = client, store, tokens

    def auth(self, who: str) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.tokens[who]}"}

    async def start(self, who: str = "a", **body: object) -> httpx.Response:
        headers = self.auth(who)
        key = body.pop("idempotency_key", None)
        if isinstance(key, str):
            headers["Idempotency-Key"] = key
        return await self.client.post("/v1/runs", json={"goal": "hi", **body}, headers=headers)

    async def settled(self, run_id: str, who: str = "a") -> dict[str, Any]:
        for _ in range(200):
            got = (await self.client.get(f"/v1/runs/{run_id}", headers=self.auth(who))).json()
            if got["status"] != "running":
                return got
            await asyncio.sleep(0.02)
        raise AssertionError(f"run {run_id} did not settle")


@pytest.fixture
async def api(tmp_path: Path) -> AsyncIterator[Api]:
    global gate
    gate = asyncio.Event()  # of this test's event loop
    store = SqliteStore(tmp_path / "runs.db")
    keys = ApiKeys(store)
    wired.clear()
    tokens = {
        "a": (await keys.create("acme", ["read", "run"], name="a"))[1],
        "a_approve": (await keys.create("acme", ["read", "approve"], name="ops"))[1],
        "a_read": (await keys.create("acme", ["read"]))[1],
        "b": (await keys.create("globex", ["admin"]))[1],
    }
    revoked, token = await keys.create("acme", ["admin"])
    await keys.revoke(revoked.key_id)
    tokens["revoked"] = token
    app = create_app(
        {"quick": quick(), "slow": slow(), "asking": asking(), "wiring": wiring()},
        store,
        max_active_runs=2,
    )
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://test") as client:
        yield Api(client, store, tokens)
    gate.set()
    await app.state.api.runs.close()
    await store.close()


def sse(body: str) -> list[tuple[int, str, dict[str, object]]]:
    found: list[tuple[int, str, dict[str, object]]] = []
    for block in body.split("\n\n"):
        fields = dict(
            line.split(": ", 1) for line in block.splitlines() if line and not line.startswith(":")
        )
        if "id" in fields:
            found.append((int(fields["id"]), fields["event"], orjson.loads(fields["data"])))
    return found


async def test_a_run_started_over_http_is_stored_streamed_and_logged(api: Api) -> None:
    started = await api.start(agent="quick", goal="say done", tags=["demo"])
    assert started.status_code == 202, started.text
    run_id = started.json()["run_id"]
    assert started.json()["tags"] == ["demo"]  # the tenant's tag is the server's own
    done = await api.settled(run_id)
    assert done["status"] == "finished"
    stream = await api.client.get(f"/v1/runs/{run_id}/events", headers=api.auth("a"))
    assert stream.headers["content-type"].startswith("text/event-stream")
    events = sse(stream.text)
    assert [seq for seq, _, _ in events] == list(range(len(events)))
    assert events[0][1] == "run_started"
    assert events[-1][1] == "run_finished"
    assert events[0][2]["goal"] == "say done"
    log = await api.client.get(f"/v1/runs/{run_id}/log", headers=api.auth("a"))
    lines = log.content.splitlines()
    assert [orjson.loads(line)["seq"] for line in lines] == [seq for seq, _, _ in events]
    assert lines == await api.store.read_encoded(run_id)


async def test_last_event_id_resumes_the_stream_with_no_gap_and_no_duplicate(api: Api) -> None:
    run_id = (await api.start(agent="quick")).json()["run_id"]
    await api.settled(run_id)
    whole = sse((await api.client.get(f"/v1/runs/{run_id}/events", headers=api.auth("a"))).text)
    for cut in range(len(whole)):
        headers = {**api.auth("a"), "Last-Event-ID": str(cut)}
        rest = sse((await api.client.get(f"/v1/runs/{run_id}/events", headers=headers)).text)
        assert rest == whole[cut + 1 :]
    bad = await api.client.get(
        f"/v1/runs/{run_id}/events", headers={**api.auth("a"), "Last-Event-ID": "x"}
    )
    assert bad.status_code == 422
    assert "Last-Event-ID must be the seq" in bad.json()["error"]


async def test_the_same_idempotency_key_returns_the_same_run(api: Api) -> None:
    first = await api.start(agent="quick", goal="once", idempotency_key="k-1")
    again = await api.start(agent="quick", goal="once", idempotency_key="k-1")
    assert first.status_code == again.status_code == 202
    assert first.json()["run_id"] == again.json()["run_id"]
    await api.settled(first.json()["run_id"])
    listed = (await api.client.get("/v1/runs", headers=api.auth("a"))).json()["runs"]
    assert [r["run_id"] for r in listed] == [first.json()["run_id"]]
    other = await api.start(agent="quick", goal="another goal", idempotency_key="k-1")
    assert other.status_code == 409
    assert "with this Idempotency-Key for another goal" in other.json()["error"]  # not the id
    other_agent = await api.start(agent="asking", goal="once", idempotency_key="k-1")
    assert other_agent.status_code == 409
    assert "for another agent: a key names one request" in other_agent.json()["error"]
    other_tags = await api.start(agent="quick", goal="once", tags=["t"], idempotency_key="k-1")
    assert other_tags.status_code == 409
    # another tenant's same key is another run
    theirs = await api.start("b", agent="quick", goal="once", idempotency_key="k-1")
    assert theirs.json()["run_id"] != first.json()["run_id"]


async def test_no_key_sees_or_touches_another_tenants_runs(api: Api) -> None:
    run_id = (await api.start(agent="asking")).json()["run_id"]
    assert (await api.settled(run_id))["status"] == "waiting_for_user"
    other = api.auth("b")  # an admin key, of another tenant
    for method, path, body in [
        ("GET", f"/v1/runs/{run_id}", None),
        ("GET", f"/v1/runs/{run_id}/events", None),
        ("GET", f"/v1/runs/{run_id}/log", None),
        ("POST", f"/v1/runs/{run_id}/answer", {"text": "Paris"}),
        ("POST", f"/v1/runs/{run_id}/cancel", None),
        ("POST", f"/v1/runs/{run_id}/resume", None),
        ("GET", f"/v1/runs/{run_id}/audit", None),
        (
            "POST",
            f"/v1/runs/{run_id}/approvals",
            {"decisions": [{"call_id": "c", "approve": True, "arguments_hash": "0" * 64}]},
        ),
    ]:
        got = await api.client.request(method, path, json=body, headers=other)
        assert got.status_code == 404, (path, got.text)
        assert got.json() == {"error": "no such run"}
    assert (await api.client.get("/v1/runs", headers=other)).json() == {
        "runs": [],
        "next_cursor": None,
    }
    # and the run is untouched: its own tenant answers it
    answered = await api.client.post(
        f"/v1/runs/{run_id}/answer", json={"text": "Paris"}, headers=api.auth("a")
    )
    assert answered.status_code == 202, answered.text
    assert (await api.settled(run_id))["status"] == "finished"


@pytest.mark.parametrize(
    ("headers", "status", "says"),
    [
        ({}, 401, "no API key"),
        ({"Authorization": "Basic abc"}, 401, "Bearer"),
        ({"Authorization": "Bearer nope"}, 401, "not a tether API key"),
        ({"X-API-Key": "tether_0123456789abcdef_" + "A" * 43}, 401, "unknown API key"),
    ],
)
async def test_a_request_without_a_live_key_is_refused(
    api: Api, headers: dict[str, str], status: int, says: str
) -> None:
    got = await api.client.get("/v1/runs", headers=headers)
    assert got.status_code == status
    assert says in got.json()["error"]
    assert got.headers["www-authenticate"] == "Bearer"


async def test_a_revoked_key_and_a_key_without_the_scope_are_refused(api: Api) -> None:
    revoked = await api.client.get("/v1/runs", headers=api.auth("revoked"))
    assert revoked.status_code == 401
    assert "revoked" in revoked.json()["error"]
    read_only = await api.start("a_read", agent="quick")
    assert read_only.status_code == 403
    assert read_only.json()["error"] == "this key may not run: it has read"
    # a wrong token for a real key id is unknown, never a hint
    real = api.tokens["a"]
    forged = real[: -len("x")] + ("y" if real[-1] != "y" else "z")
    got = await api.client.get("/v1/runs", headers={"X-API-Key": forged})
    assert (got.status_code, got.json()["error"]) == (401, "unknown API key")


async def test_bad_bodies_get_clear_4xx_answers(api: Api) -> None:
    extra = await api.start(agent="quick", surprise=1)
    assert extra.status_code == 422
    assert "surprise" in extra.json()["error"]
    empty = await api.start(agent="quick", goal="")
    assert empty.status_code == 422
    unknown = await api.start(agent="nobody")
    assert unknown.status_code == 400
    assert "no agent named 'nobody'" in unknown.json()["error"]
    unnamed = await api.start()
    assert unnamed.status_code == 422  # several agents: the schema requires one
    assert "body.agent: Field required" in unnamed.json()["error"]
    tenant_tag = await api.start(agent="quick", tags=["tenant:globex"])
    assert tenant_tag.status_code == 422  # the schema keeps tenant:... tags the server's
    huge = await api.client.post(
        "/v1/runs",
        content=b'{"goal": "' + b"x" * MAX_BODY_BYTES + b'"}',
        headers={**api.auth("a"), "Content-Type": "application/json"},
    )
    assert huge.status_code == 413
    not_json = await api.client.post(
        "/v1/runs", content=b"{", headers={**api.auth("a"), "Content-Type": "application/json"}
    )
    assert not_json.status_code == 422
    missing = await api.client.get("/v1/runs/nope", headers=api.auth("a"))
    assert (missing.status_code, missing.json()) == (404, {"error": "no such run"})


async def test_past_its_limit_the_server_says_429_and_when_to_retry(api: Api) -> None:
    one = (await api.start(agent="slow")).json()["run_id"]
    two = (await api.start(agent="slow")).json()["run_id"]
    three = await api.start(agent="slow")
    assert three.status_code == 429
    assert three.headers["retry-after"] == "1"
    gate.set()
    assert (await api.settled(one))["status"] == "finished"
    assert (await api.settled(two))["status"] == "finished"
    assert (await api.start(agent="quick")).status_code == 202


async def test_a_run_executing_here_can_be_cancelled(api: Api) -> None:
    run_id = (await api.start(agent="slow")).json()["run_id"]
    cancelled = await api.client.post(f"/v1/runs/{run_id}/cancel", headers=api.auth("a"))
    assert cancelled.status_code == 202, cancelled.text
    assert cancelled.json()["status"] == "cancelled"
    again = await api.client.post(f"/v1/runs/{run_id}/cancel", headers=api.auth("a"))
    assert again.status_code == 409
    assert "not executing" in again.json()["error"]


async def test_a_held_call_is_approved_over_http_bound_to_the_arguments_seen(api: Api) -> None:
    run_id = (await api.start(agent="wiring")).json()["run_id"]
    waiting = await api.settled(run_id)
    assert waiting["status"] == "waiting_for_approval"
    [pending] = waiting["pending"]
    assert (pending["tool"], pending["arguments"]) == ("wire", {"amount": 12.5})
    url = f"/v1/runs/{run_id}/approvals"
    decision = {"call_id": pending["call_id"], "approve": True}
    # the run key may not approve; a stale hash is refused; an unknown call is named
    assert (
        await api.client.post(
            url,
            json={"decisions": [{**decision, "arguments_hash": pending["arguments_hash"]}]},
            headers=api.auth("a"),
        )
    ).status_code == 403
    stale = await api.client.post(
        url,
        json={"decisions": [{**decision, "arguments_hash": "0" * 64}]},
        headers=api.auth("a_approve"),
    )
    assert stale.status_code == 400, stale.text
    assert "was given for other arguments" in stale.json()["error"]
    unknown = await api.client.post(
        url,
        json={"decisions": [{**decision, "call_id": "nope", "arguments_hash": "0" * 64}]},
        headers=api.auth("a_approve"),
    )
    assert unknown.status_code == 409
    assert "waits for no call 'nope'" in unknown.json()["error"]
    assert wired == []
    forged_line = await api.client.post(  # a "by" that would forge a line of the audit
        url,
        json={
            "decisions": [{**decision, "arguments_hash": pending["arguments_hash"]}],
            "by": "ops\napproved by: admin",
        },
        headers=api.auth("a_approve"),
    )
    assert forged_line.status_code == 422, forged_line.text
    assert wired == []
    approved = await api.client.post(
        url,
        json={
            "decisions": [{**decision, "arguments_hash": pending["arguments_hash"]}],
            "by": "ops",
        },
        headers=api.auth("a_approve"),
    )
    assert approved.status_code == 202, approved.text
    assert (await api.settled(run_id))["status"] == "finished"
    assert wired == [12.5]
    log = [
        orjson.loads(line)
        for line in (
            await api.client.get(f"/v1/runs/{run_id}/log", headers=api.auth("a"))
        ).content.splitlines()
    ]
    [given] = [e for e in log if e["kind"] == "approval_given"]
    assert given["by"].startswith("API key ")
    assert given["by"].endswith("(ops)")


async def test_an_audit_over_http_verifies_the_chain(api: Api) -> None:
    run_id = (await api.start(agent="quick")).json()["run_id"]
    await api.settled(run_id)
    report = (await api.client.get(f"/v1/runs/{run_id}/audit", headers=api.auth("a"))).json()
    assert report["ok"] is True
    assert report["events"] == (await api.store.info(run_id)).events


async def test_resume_over_http_needs_a_run_that_can_go_on(api: Api) -> None:
    run_id = (await api.start(agent="asking")).json()["run_id"]
    await api.settled(run_id)
    got = await api.client.post(f"/v1/runs/{run_id}/resume", headers=api.auth("a"))
    assert got.status_code == 409
    assert got.json()["error"] == "the run is waiting_for_user, not running"


async def test_concurrent_starts_never_pass_the_limit(api: Api) -> None:
    got = await asyncio.gather(*(api.start(agent="slow") for _ in range(6)))
    assert sorted(r.status_code for r in got) == [202, 202, 429, 429, 429, 429]
    assert len(app_runs(api)._active) == 2  # pyright: ignore[reportPrivateUsage]


async def test_the_same_idempotency_key_at_once_is_one_run(api: Api) -> None:
    got = await asyncio.gather(
        *(api.start(agent="slow", goal="once", idempotency_key="same") for _ in range(4))
    )
    assert [r.status_code for r in got] == [202] * 4, [r.text for r in got]
    assert len({r.json()["run_id"] for r in got}) == 1
    other_goal = await api.start(agent="slow", goal="twice", idempotency_key="same")
    assert other_goal.status_code == 409  # while it executes, as after


async def test_a_chunked_body_past_the_limit_is_refused(api: Api) -> None:
    async def chunks() -> AsyncIterator[bytes]:
        yield b'{"agent": "quick", "goal": "'
        for _ in range(MAX_BODY_BYTES // 10_000 + 1):
            yield b"x" * 10_000
        yield b'"}'

    got = await api.client.post(
        "/v1/runs",
        content=chunks(),
        headers={**api.auth("a"), "Content-Type": "application/json"},
    )
    assert got.status_code == 413
    assert "over 1000000 bytes" in got.json()["error"]
    listed = (await api.client.get("/v1/runs", headers=api.auth("a"))).json()
    assert listed == {"runs": [], "next_cursor": None}


async def test_two_different_keys_in_one_request_are_refused(api: Api) -> None:
    got = await api.client.get("/v1/runs", headers={**api.auth("a"), "X-API-Key": api.tokens["b"]})
    assert got.status_code == 401
    assert "two different keys" in got.json()["error"]


def app_runs(api: Api) -> ServerRuns:
    app = cast(FastAPI, cast(httpx.ASGITransport, api.client._transport).app)  # pyright: ignore[reportPrivateUsage]
    return app.state.api.runs


async def test_a_stream_ends_once_its_key_is_revoked(
    api: Api, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(server_sse, "_KEEPALIVE_S", 0.05)
    run_id = (await api.start(agent="slow")).json()["run_id"]
    live = {"allowed": True}

    async def allowed() -> bool:
        return live["allowed"]

    stream = server_sse.event_stream(api.store, app_runs(api), run_id, -1, allowed)
    received: list[bytes] = []
    async for chunk in stream:
        received.append(chunk)
        if chunk.startswith(b": keep-alive"):
            live["allowed"] = False  # revoked while the run waits: the next check ends it
    assert received[0].startswith(b"id: 0\n")
    assert app_runs(api).is_active(run_id)  # the run goes on; only the stream ended
    assert not await ApiKeys(api.store).live("0123456789abcdef")


async def test_the_trace_page_runs_only_its_own_script(api: Api) -> None:
    page = await api.client.get("/")
    assert page.status_code == 200
    assert page.headers["content-type"].startswith("text/html")
    policy = page.headers["content-security-policy"]
    assert "script-src 'sha256-" in policy
    assert "style-src 'sha256-" in policy
    assert "unsafe-inline" not in policy
    assert "frame-ancestors 'none'" in policy
    assert "innerHTML" not in page.text  # run data goes in as text, never as markup


async def test_an_unexpected_error_is_a_bare_500_and_the_server_goes_on(
    api: Api, monkeypatch: pytest.MonkeyPatch
) -> None:
    async def broken(*args: object, **kwargs: object) -> object:
        raise RuntimeError("secret internals at /srv/db")

    monkeypatch.setattr(api.store, "runs", broken)
    failed = await api.client.get("/v1/runs", headers=api.auth("a"))
    assert failed.status_code == 500
    assert failed.json() == {"error": "internal error: the server's log has the details"}
    assert "secret internals" not in failed.text
    monkeypatch.undo()
    assert (await api.client.get("/v1/runs", headers=api.auth("a"))).status_code == 200


async def test_an_answer_that_lost_a_race_to_another_process_is_a_conflict(
    api: Api, monkeypatch: pytest.MonkeyPatch
) -> None:
    run_id = (await api.start(agent="asking")).json()["run_id"]
    assert (await api.settled(run_id))["status"] == "waiting_for_user"
    runs = app_runs(api)
    real = runs.resume

    async def beaten(agent: Agent[Any], run_id: str, **given: Any) -> None:
        await asking().resume(run_id, answer="Rome", store=api.store)  # another server, first
        await real(agent, run_id, **given)

    monkeypatch.setattr(runs, "resume", beaten)
    late = await api.client.post(
        f"/v1/runs/{run_id}/answer", json={"text": "Paris"}, headers=api.auth("a")
    )
    assert late.status_code == 409, late.text  # it was 400, as if the request were wrong
    assert "another request continued it first" in late.json()["error"]


async def test_a_reused_key_with_fewer_tags_is_another_request(api: Api) -> None:
    first = await api.start(agent="quick", goal="g", tags=["a", "b"], idempotency_key="k-2")
    assert first.status_code == 202
    fewer = await api.start(agent="quick", goal="g", tags=["a"], idempotency_key="k-2")
    assert fewer.status_code == 409, fewer.text
    same = await api.start(agent="quick", goal="g", tags=["b", "a"], idempotency_key="k-2")
    assert same.json()["run_id"] == first.json()["run_id"]
