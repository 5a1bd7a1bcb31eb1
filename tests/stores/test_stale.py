"""``stale_runs`` and ``abandon_run``: finding runs nobody runs, and ending them through the log.

The crashed runs here are logs cut where a killed process would have left them; the CLI
tests (``tests/cli/test_stale_cli.py``) kill real processes.
"""

from __future__ import annotations

import socket
from collections.abc import AsyncIterator, Sequence
from dataclasses import replace
from pathlib import Path

import pytest
from inline_snapshot import snapshot

from tests.support import add, assert_protocol_valid
from tether import Agent, RulePolicy, require_approval, tool
from tether.codec import event_to_dict, verify_chain
from tether.content import JsonValue
from tether.errors import LeaseHeld, UserError
from tether.events import Event, RunFinished
from tether.messages import ToolCall
from tether.models.base import ModelRequest, ModelResponse
from tether.policy import deny
from tether.stores import SqliteStore, default_owner
from tether.stores.stale import abandon_run, stale_runs
from tether.testing import FakeClock, FunctionModel, ScriptedModel, call, finish

HIDDEN = {"run_id", "at", "hash", "prev_hash"}
OWNER = "tester:1:0:abcdef"
"""The lease owner the abandoning process takes the run as (fixed, for the snapshots)."""


def log(events: Sequence[Event]) -> list[dict[str, JsonValue]]:
    return [{k: v for k, v in event_to_dict(e).items() if k not in HIDDEN} for e in events]


@tool(open_world=False)
def send(to: str) -> str:
    """Sends a note.

    Args:
        to: The recipient.
    """
    return f"sent to {to}"


@tool(open_world=False)
def wipe(what: str) -> str:
    """Wipes something.

    Args:
        what: What.
    """
    return f"wiped {what}"


def _four_calls(request: ModelRequest) -> ModelResponse:
    return ModelResponse(
        tool_calls=(
            ToolCall(id="a", name="add", arguments={"a": 1, "b": 2}),
            ToolCall(id="s", name="send", arguments={"to": "ann"}),
            ToolCall(id="w", name="wipe", arguments={"what": "disk"}),
            ToolCall(id="f", name="finish_task", arguments={"answer": "3"}),
        )
    )


AGENT = Agent(
    name="four",
    model=FunctionModel(_four_calls),
    tools=[add, send, wipe],
    policy=RulePolicy(None, require_approval("send", reason="a human"), deny("wipe", reason="no")),
)


async def crashed(store: SqliteStore, *, before: str) -> str:
    """Store the four-call run as a crash left it: cut before its first ``before`` event."""
    outcome = await AGENT.run("go", clock=FakeClock())
    cut = next(i for i, e in enumerate(outcome.events) if e.kind == before)
    await store.append(outcome.run_id, outcome.events[:cut])
    return outcome.run_id


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[SqliteStore]:
    opened = SqliteStore(tmp_path / "t.db")
    try:
        yield opened
    finally:
        await opened.close()


async def abandon(
    store: SqliteStore, run_id: str, reason: str = "its worker was killed"
) -> list[Event]:
    before = await store.read(run_id)
    done = await abandon_run(store, run_id, reason=reason, by="ops", owner=OWNER, clock=FakeClock())
    after = await store.read(run_id)
    assert after[: len(before)] == before
    assert list(done.events) == after[len(before) :]
    verify_chain(after, run_id=run_id)
    assert_protocol_valid(after)
    return after[len(before) :]


async def test_calls_never_decided_are_recorded_as_not_executed(store: SqliteStore) -> None:
    run_id = await crashed(store, before="policy_decided")

    added = await abandon(store, run_id)

    assert log(added) == snapshot(
        [
            {
                "kind": "tool_call_finished",
                "seq": 6,
                "call_id": "a",
                "tool": "add",
                "content": [
                    {
                        "kind": "text",
                        "text": "not executed: the run stopped before this call started",
                    }
                ],
                "structured": None,
                "is_error": True,
                "error_type": "interrupted",
                "duration_s": 0.0,
                "synthetic": True,
                "untrusted": None,
            },
            {
                "kind": "tool_call_finished",
                "seq": 7,
                "call_id": "s",
                "tool": "send",
                "content": [
                    {
                        "kind": "text",
                        "text": "not executed: the run stopped before this call started",
                    }
                ],
                "structured": None,
                "is_error": True,
                "error_type": "interrupted",
                "duration_s": 0.0,
                "synthetic": True,
                "untrusted": None,
            },
            {
                "kind": "tool_call_finished",
                "seq": 8,
                "call_id": "w",
                "tool": "wipe",
                "content": [
                    {
                        "kind": "text",
                        "text": "not executed: the run stopped before this call started",
                    }
                ],
                "structured": None,
                "is_error": True,
                "error_type": "interrupted",
                "duration_s": 0.0,
                "synthetic": True,
                "untrusted": None,
            },
            {
                "kind": "tool_call_finished",
                "seq": 9,
                "call_id": "f",
                "tool": "finish_task",
                "content": [
                    {
                        "kind": "text",
                        "text": "not executed: the run stopped before this call started",
                    }
                ],
                "structured": None,
                "is_error": True,
                "error_type": "interrupted",
                "duration_s": 0.0,
                "synthetic": True,
                "untrusted": None,
            },
            {
                "kind": "run_finished",
                "seq": 10,
                "status": "failed",
                "output": None,
                "answer": None,
                "error": {
                    "type": "Abandoned",
                    "message": "abandoned by ops (tester:1:0:abcdef): its worker was killed. The run had stopped without an ending (its process crashed or was killed); it was ended for good, its calls left without a result recorded as not executed or with an unknown outcome",
                },
                "limit": None,
                "question": None,
                "usage": {"input_tokens": 0, "output_tokens": 0, "requests": 1, "cost": None},
                "steps": 1,
                "tool_calls": 0,
            },
        ]
    )


async def test_decided_calls_are_closed_as_a_crash_recovery_closes_them(
    store: SqliteStore,
) -> None:
    run_id = await crashed(store, before="tool_call_finished")

    added = await abandon(store, run_id)

    assert log(added) == snapshot(
        [
            {
                "kind": "tool_call_unknown",
                "seq": 11,
                "call_id": "a",
                "tool": "add",
                "reason": "the run stopped while add was running; it may or may not have taken effect. Do not assume either: check before calling it again",
            },
            {
                "kind": "tool_call_finished",
                "seq": 12,
                "call_id": "s",
                "tool": "send",
                "content": [
                    {
                        "kind": "text",
                        "text": "not executed: the run was abandoned while the call waited for approval",
                    }
                ],
                "structured": None,
                "is_error": True,
                "error_type": "run_ended",
                "duration_s": 0.0,
                "synthetic": True,
                "untrusted": None,
            },
            {
                "kind": "tool_call_finished",
                "seq": 13,
                "call_id": "w",
                "tool": "wipe",
                "content": [{"kind": "text", "text": "denied by policy (deny:wipe): no"}],
                "structured": None,
                "is_error": True,
                "error_type": "denied",
                "duration_s": 0.0,
                "synthetic": True,
                "untrusted": None,
            },
            {
                "kind": "tool_call_finished",
                "seq": 14,
                "call_id": "f",
                "tool": "finish_task",
                "content": [{"kind": "text", "text": "not executed: the run was abandoned"}],
                "structured": None,
                "is_error": True,
                "error_type": "run_ended",
                "duration_s": 0.0,
                "synthetic": True,
                "untrusted": None,
            },
            {
                "kind": "run_finished",
                "seq": 15,
                "status": "failed",
                "output": None,
                "answer": None,
                "error": {
                    "type": "Abandoned",
                    "message": "abandoned by ops (tester:1:0:abcdef): its worker was killed. The run had stopped without an ending (its process crashed or was killed); it was ended for good, its calls left without a result recorded as not executed or with an unknown outcome",
                },
                "limit": None,
                "question": None,
                "usage": {"input_tokens": 0, "output_tokens": 0, "requests": 1, "cost": None},
                "steps": 1,
                "tool_calls": 1,
            },
        ]
    )


async def test_a_secret_in_the_reason_is_redacted(store: SqliteStore) -> None:
    run_id = await crashed(store, before="tool_call_finished")
    key = "sk-proj-" + "A1b2C3d4" * 4

    added = await abandon(store, run_id, reason=f"it leaked {key}")

    assert [e.kind for e in added][-2:] == ["redacted", "run_finished"]
    finished = added[-1]
    assert isinstance(finished, RunFinished)
    assert finished.error is not None
    assert key not in finished.error.message


async def test_a_run_that_ended_or_waits_is_not_abandoned(store: SqliteStore) -> None:
    waiting = await AGENT.run("go", clock=FakeClock())
    assert waiting.status == "waiting_for_approval"
    done = await Agent(model=ScriptedModel([call("add", a=1, b=2), finish("3")]), tools=[add]).run(
        "add"
    )
    for outcome in (waiting, done):
        await store.append(outcome.run_id, outcome.events)

    with pytest.raises(UserError, match="waits for approvals"):
        await abandon_run(store, waiting.run_id, reason="", by="ops")
    with pytest.raises(UserError, match=r"has ended already \(finished\)"):
        await abandon_run(store, done.run_id, reason="", by="ops")
    assert await store.read(waiting.run_id) == list(waiting.events)
    assert await store.read(done.run_id) == list(done.events)
    assert await stale_runs(store) == []


async def test_a_run_whose_owner_holds_its_lease_is_not_stale_and_not_abandoned(
    store: SqliteStore,
) -> None:
    run_id = await crashed(store, before="tool_call_finished")
    lease = await store.acquire(run_id, default_owner())  # this process: alive

    assert await stale_runs(store) == []
    other = SqliteStore(store.path)
    with pytest.raises(LeaseHeld):
        await abandon_run(other, run_id, reason="", by="ops")
    await other.close()
    await store.release(lease)
    [stale] = await stale_runs(store)
    assert (stale.info.run_id, stale.owner, stale.reason) == (run_id, None, "no_owner")


async def test_why_a_run_is_stale(store: SqliteStore) -> None:
    never = await crashed(store, before="tool_call_finished")  # appended without a lease
    remote = await crashed(store, before="tool_call_finished")
    lapsed = await crashed(store, before="tool_call_finished")
    dead = await crashed(store, before="tool_call_finished")
    await store.acquire(remote, "elsewhere:7:0:abc")  # another host's: alive until...
    await store.acquire(lapsed, "elsewhere:8:0:abc", ttl=0)  # ... its lease lapses
    await store.acquire(dead, f"{socket.gethostname()}:999999999:1:dead")  # no such process

    found = {s.info.run_id: (s.owner, s.reason) for s in await stale_runs(store)}

    assert found == {
        never: (None, "no_owner"),
        lapsed: ("elsewhere:8:0:abc", "lease_expired"),
        dead: (f"{socket.gethostname()}:999999999:1:dead", "owner_gone"),
    }


async def test_an_abandoned_run_resumes_to_the_same_ending(store: SqliteStore) -> None:
    run_id = await crashed(store, before="tool_call_finished")
    await abandon(store, run_id)
    before = await store.read(run_id)

    outcome = await replace(AGENT, store=store).resume(run_id)

    assert outcome.status == "failed"
    assert outcome.error is not None
    assert outcome.error.type == "Abandoned"
    assert list(outcome.events) == before
    assert await store.read(run_id) == before
