"""``POST /v1/runs/{id}/cancel``: a run executing here, or waiting for a human, ends cancelled."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest

from tests.support import assert_protocol_valid
from tether import Agent, tool
from tether.codec import verify_chain
from tether.messages import ToolCall
from tether.policy import RulePolicy, Rules, require_approval
from tether.server import ApiKeys, create_app
from tether.stores import default_owner
from tether.stores.sqlite import SqliteStore
from tether.testing import ScriptedModel, call, finish

wired: list[float] = []


@tool(destructive=True, open_world=False)
def wire(amount: float) -> str:
    """Wires money.

    Args:
        amount: How much.
    """
    wired.append(amount)
    return "wired"


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

    def auth(self, who: str = "a") -> dict[str, str]:
        return {"Authorization": f"Bearer {self.tokens[who]}"}

    async def waiting(self, agent: str) -> str:
        """A run of ``agent`` that has stopped to wait for a human."""
        started = await self.client.post(
            "/v1/runs", json={"goal": "hi", "agent": agent}, headers=self.auth()
        )
        run_id: str = started.json()["run_id"]
        for _ in range(200):
            got = (await self.client.get(f"/v1/runs/{run_id}", headers=self.auth())).json()
            if got["status"] != "running":
                assert got["status"].startswith("waiting_for_")
                return run_id
            await asyncio.sleep(0.02)
        raise AssertionError(f"run {run_id} did not stop")

    async def cancel(self, run_id: str, who: str = "a") -> httpx.Response:
        return await self.client.post(f"/v1/runs/{run_id}/cancel", headers=self.auth(who))


@pytest.fixture
async def api(tmp_path: Path) -> AsyncIterator[Api]:
    store = SqliteStore(tmp_path / "runs.db")
    keys = ApiKeys(store)
    wired.clear()
    tokens = {
        "a": (await keys.create("acme", ["read", "run"], name="a"))[1],
        "a_approve": (await keys.create("acme", ["read", "approve"]))[1],
        "b": (await keys.create("globex", ["admin"]))[1],
    }
    app = create_app({"asking": asking(), "wiring": wiring()}, store)
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://test") as client:
        yield Api(client, store, tokens)
    await app.state.api.runs.close()
    await store.close()


@pytest.mark.parametrize(
    ("agent", "waited_for"), [("asking", "the user's answer"), ("wiring", "approvals")]
)
async def test_a_run_waiting_for_a_human_is_cancelled_through_its_log(
    api: Api, agent: str, waited_for: str
) -> None:
    run_id = await api.waiting(agent)
    before = await api.store.read(run_id)

    cancelled = await api.cancel(run_id)

    assert cancelled.status_code == 202, cancelled.text
    assert cancelled.json()["status"] == "cancelled"
    after = await api.store.read(run_id)
    assert after[: len(before)] == before
    verify_chain(after, run_id=run_id)
    assert_protocol_valid(after)
    added: list[dict[str, Any]] = [
        orjson.loads(line)
        for line in (
            await api.client.get(f"/v1/runs/{run_id}/log", headers=api.auth())
        ).content.splitlines()[len(before) :]
    ]
    assert [(e["kind"], e.get("error_type")) for e in added] == [
        ("tool_call_finished", "cancelled"),
        ("run_finished", None),
    ]
    assert added[-1]["status"] == "cancelled"
    key_id = api.tokens["a"].split("_")[1]
    assert added[-1]["error"]["message"].startswith(f"cancelled by API key {key_id} (")
    assert (
        f"while it waited for {waited_for}: cancelled through the API"
        in (added[-1]["error"]["message"])
    )
    assert (await api.client.get(f"/v1/runs/{run_id}/audit", headers=api.auth())).json()["ok"]
    again = await api.cancel(run_id)
    assert again.status_code == 409
    assert wired == []


async def test_a_cancelled_run_takes_no_answer_and_no_decision(api: Api) -> None:
    asked, held = await api.waiting("asking"), await api.waiting("wiring")
    pending = (await api.client.get(f"/v1/runs/{held}", headers=api.auth())).json()["pending"]
    assert (await api.cancel(asked)).status_code == (await api.cancel(held)).status_code == 202

    answered = await api.client.post(
        f"/v1/runs/{asked}/answer", json={"text": "Paris"}, headers=api.auth()
    )
    decision = {
        "call_id": pending[0]["call_id"],
        "approve": True,
        "arguments_hash": pending[0]["arguments_hash"],
    }
    approved = await api.client.post(
        f"/v1/runs/{held}/approvals", json={"decisions": [decision]}, headers=api.auth("a_approve")
    )
    assert (answered.status_code, approved.status_code) == (409, 409)
    assert wired == []


async def test_cancel_keeps_to_the_tenant_and_the_run_scope(api: Api) -> None:
    run_id = await api.waiting("asking")
    before = await api.store.read(run_id)

    other_tenant = await api.cancel(run_id, "b")
    no_run_scope = await api.cancel(run_id, "a_approve")

    assert (other_tenant.status_code, other_tenant.json()) == (404, {"error": "no such run"})
    assert no_run_scope.status_code == 403
    assert await api.store.read(run_id) == before


async def test_a_waiting_run_another_process_is_continuing_is_not_cancelled(api: Api) -> None:
    run_id = await api.waiting("asking")
    before = await api.store.read(run_id)
    lease = await api.store.acquire(run_id, default_owner())  # alive: it is continuing the run

    got = await api.cancel(run_id)

    assert got.status_code == 409, got.text
    assert got.json() == {"error": "the run is executing in another process"}
    assert await api.store.read(run_id) == before
    await api.store.release(lease)


async def test_a_run_executing_in_another_process_is_not_cancelled_here(api: Api) -> None:
    run_id = await api.waiting("asking")
    outcome = await asking().resume(run_id, answer="Paris", store=api.store)
    assert outcome.status == "finished"
    log = await api.store.read(run_id)
    await api.store.delete([run_id])
    await api.store.append(run_id, log[:-1])  # as another process, mid-run, leaves it
    lease = await api.store.acquire(run_id, default_owner())  # and holds it: alive

    got = await api.cancel(run_id)

    assert got.status_code == 409
    assert got.json() == {"error": "the run is not executing in this server: nothing to cancel"}
    assert await api.store.read(run_id) == log[:-1]
    await api.store.release(lease)
