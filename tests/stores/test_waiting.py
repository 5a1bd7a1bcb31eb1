"""``cancel_waiting_run``: a run waiting for a human is ended ``cancelled`` through its log."""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from dataclasses import replace
from pathlib import Path

import pytest
from inline_snapshot import snapshot

from tests.support import assert_protocol_valid
from tether import Agent
from tether.codec import event_to_dict, verify_chain
from tether.content import JsonValue
from tether.errors import LeaseHeld, UserError
from tether.events import Event
from tether.stores import SqliteStore, default_owner
from tether.stores.waiting import cancel_waiting_run
from tether.testing import FakeClock, ScriptedModel, call, finish

from .test_stale import AGENT, OWNER

HIDDEN = {"run_id", "at", "hash", "prev_hash"}


def log(events: Sequence[Event]) -> list[dict[str, JsonValue]]:
    return [{k: v for k, v in event_to_dict(e).items() if k not in HIDDEN} for e in events]


ASKING = Agent(
    name="asking",
    model=ScriptedModel([call("ask_user", question="Which city?")]),
    can_ask_user=True,
)


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[SqliteStore]:
    opened = SqliteStore(tmp_path / "t.db")
    try:
        yield opened
    finally:
        await opened.close()


async def stored_run(store: SqliteStore, agent: Agent[str]) -> str:
    outcome = await agent.run("go", clock=FakeClock())
    assert outcome.status in ("waiting_for_user", "waiting_for_approval")
    await store.append(outcome.run_id, outcome.events)
    return outcome.run_id


async def cancel(store: SqliteStore, run_id: str) -> list[Event]:
    before = await store.read(run_id)
    done = await cancel_waiting_run(
        store, run_id, reason="the ticket was closed", by="ops", owner=OWNER, clock=FakeClock()
    )
    after = await store.read(run_id)
    assert after[: len(before)] == before
    assert list(done.events) == after[len(before) :]
    verify_chain(after, run_id=run_id)
    assert_protocol_valid(after)
    assert (await store.info(run_id)).status == "cancelled"
    return after[len(before) :]


async def test_a_run_waiting_for_an_answer_ends_cancelled(store: SqliteStore) -> None:
    run_id = await stored_run(store, ASKING)

    added = await cancel(store, run_id)

    assert log(added) == snapshot(
        [
            {
                "kind": "tool_call_finished",
                "seq": 5,
                "call_id": "call_0_0",
                "tool": "ask_user",
                "content": [
                    {
                        "kind": "text",
                        "text": "not executed: the run was cancelled while it waited for the user's answer",
                    }
                ],
                "structured": None,
                "is_error": True,
                "error_type": "cancelled",
                "duration_s": 0.0,
                "synthetic": True,
                "untrusted": None,
            },
            {
                "kind": "run_finished",
                "seq": 6,
                "status": "cancelled",
                "output": None,
                "answer": None,
                "error": {
                    "type": "Cancelled",
                    "message": "cancelled by ops (tester:1:0:abcdef) while it waited for the user's answer: the ticket was closed",
                },
                "limit": None,
                "question": None,
                "usage": {"input_tokens": 0, "output_tokens": 0, "requests": 1, "cost": None},
                "steps": 1,
                "tool_calls": 0,
            },
        ]
    )


async def test_a_run_waiting_for_approval_ends_cancelled_its_call_unrun(
    store: SqliteStore,
) -> None:
    run_id = await stored_run(store, AGENT)

    added = await cancel(store, run_id)

    assert log(added) == snapshot(
        [
            {
                "kind": "tool_call_finished",
                "seq": 15,
                "call_id": "s",
                "tool": "send",
                "content": [
                    {
                        "kind": "text",
                        "text": "not executed: the run was cancelled while it waited for approvals",
                    }
                ],
                "structured": None,
                "is_error": True,
                "error_type": "cancelled",
                "duration_s": 0.0,
                "synthetic": True,
                "untrusted": None,
            },
            {
                "kind": "run_finished",
                "seq": 16,
                "status": "cancelled",
                "output": None,
                "answer": None,
                "error": {
                    "type": "Cancelled",
                    "message": "cancelled by ops (tester:1:0:abcdef) while it waited for approvals: the ticket was closed",
                },
                "limit": None,
                "question": None,
                "usage": {"input_tokens": 0, "output_tokens": 0, "requests": 1, "cost": None},
                "steps": 1,
                "tool_calls": 1,
            },
        ]
    )
    before = await store.read(run_id)
    resumed = await replace(AGENT, store=store).resume(run_id)
    assert resumed.status == "cancelled"
    assert await store.read(run_id) == before


async def test_a_run_that_does_not_wait_is_not_cancelled(store: SqliteStore) -> None:
    done = await Agent(model=ScriptedModel([finish("ok")])).run("go")
    await store.append(done.run_id, done.events)
    running = await AGENT.run("go", clock=FakeClock())
    await store.append(running.run_id, running.events[:-1])  # no ending: it is running

    with pytest.raises(UserError, match=r"it has ended \(finished\)"):
        await cancel_waiting_run(store, done.run_id, reason="", by="ops")
    with pytest.raises(UserError, match="it is running"):
        await cancel_waiting_run(store, running.run_id, reason="", by="ops")
    assert await store.read(done.run_id) == list(done.events)
    assert await store.read(running.run_id) == list(running.events[:-1])


async def test_a_run_whose_lease_a_live_process_holds_is_not_cancelled(
    store: SqliteStore,
) -> None:
    run_id = await stored_run(store, ASKING)
    before = await store.read(run_id)
    lease = await store.acquire(run_id, default_owner())  # this process: continuing it

    other = SqliteStore(store.path)
    try:
        with pytest.raises(LeaseHeld):
            await cancel_waiting_run(other, run_id, reason="", by="ops")
    finally:
        await other.close()
    assert await store.read(run_id) == before
    await store.release(lease)
    await cancel(store, run_id)
