"""Human approvals: a call that needs approval pauses the run; ``resume(approvals=...)`` decides.

An approval binds to one run, one call and the exact arguments; edited arguments are checked
by the policy again; decisions are events, so they survive ``kill -9``; an approved call runs
at most once (exactly once unless the process dies while it runs).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tests.durability.approval_worker import pay_then_finish
from tests.support import assert_protocol_valid
from tether import Agent, tool
from tether.errors import UserError
from tether.events import ApprovalGiven, Event, PolicyDecided, ToolCallFinished, ToolCallUnknown
from tether.messages import ToolCall, ToolResultMessage
from tether.models.base import ModelRequest, ModelResponse
from tether.policy import ArgCondition, RulePolicy, deny, require_approval
from tether.policy.approvals import Approval
from tether.stores import RunStore, SqliteStore
from tether.testing import FunctionModel

sent: list[str] = []


@tool(open_world=False, blocking=False)
def send(to: str, body: str) -> str:
    """Sends a message.

    Args:
        to: The recipient.
        body: The text.
    """
    sent.append(f"{to}:{body}")
    return f"sent to {to}"


POLICY = RulePolicy(
    None,
    deny("send", when=[ArgCondition(path="to", op="glob", value="*@evil.test")]),
    require_approval("send", reason="messages leave the building"),
)


def two_sends(request: ModelRequest) -> ModelResponse:
    """Sends two messages in one turn, then finishes with what the results said."""
    results = [m for m in request.messages if isinstance(m, ToolResultMessage)]
    if results:
        said = " | ".join(
            f"{m.call_id}={b.text}" for m in results for b in m.content if b.kind == "text"
        )
        return ModelResponse(
            tool_calls=(ToolCall(id="f", name="finish_task", arguments={"answer": said}),)
        )
    return ModelResponse(
        tool_calls=(
            ToolCall(id="a", name="send", arguments={"to": "ann@x.test", "body": "hi"}),
            ToolCall(id="b", name="send", arguments={"to": "bob@x.test", "body": "yo"}),
        )
    )


def agent(store: RunStore) -> Agent:
    return Agent(model=FunctionModel(two_sends), tools=[send], policy=POLICY, store=store)


def kinds(events: tuple[Event, ...] | list[Event]) -> list[str]:
    return [e.kind for e in events]


async def test_a_call_that_needs_approval_pauses_the_run_with_the_exact_request(
    store: RunStore,
) -> None:
    sent.clear()
    outcome = await agent(store).run("greet ann and bob")
    assert outcome.status == "waiting_for_approval"
    assert sent == []
    assert [(p.call_id, p.tool, p.arguments) for p in outcome.pending] == [
        ("a", "send", {"to": "ann@x.test", "body": "hi"}),
        ("b", "send", {"to": "bob@x.test", "body": "yo"}),
    ]
    first = outcome.pending[0]
    assert first.run_id == outcome.run_id
    assert len(first.arguments_hash) == 64
    assert first.rule == "needs_approval:send"
    assert first.reason == "messages leave the building"
    assert_protocol_valid(outcome.events)


async def test_both_decisions_in_one_resume_run_the_approved_call_once(store: RunStore) -> None:
    sent.clear()
    waiting = await agent(store).run("greet ann and bob")
    a, b = waiting.pending
    done = await agent(store).resume(
        waiting.run_id,
        approvals=[Approval.approve(a, by="ops"), Approval.deny(b, by="ops", reason="not bob")],
    )
    assert done.status == "finished"
    assert sent == ["ann@x.test:hi"]
    assert (
        done.answer
        == "a=sent to ann@x.test | b=denied by ops: not bob. Do not try this call again unless the user asks for it"
    )
    given = [e for e in done.events if isinstance(e, ApprovalGiven)]
    assert [(e.call_id, e.approved, e.by) for e in given] == [
        ("a", True, "ops"),
        ("b", False, "ops"),
    ]
    assert_protocol_valid(done.events)
    # The run is over: deciding again is refused, nothing runs twice.
    with pytest.raises(UserError):
        await agent(store).resume(waiting.run_id, approvals=[Approval.approve(a)])
    assert sent == ["ann@x.test:hi"]


async def test_decisions_can_come_one_at_a_time(store: RunStore) -> None:
    sent.clear()
    waiting = await agent(store).run("greet ann and bob")
    a, b = waiting.pending
    still = await agent(store).resume(waiting.run_id, approvals=[Approval.approve(a)])
    assert still.status == "waiting_for_approval"
    assert [p.call_id for p in still.pending] == ["b"]
    assert sent == []  # nothing runs until every call of the turn is decided
    with pytest.raises(UserError, match="already decided"):
        await agent(store).resume(waiting.run_id, approvals=[Approval.approve(a)])
    done = await agent(store).resume(waiting.run_id, approvals=[Approval.approve(b)])
    assert done.status == "finished"
    assert sent == ["ann@x.test:hi", "bob@x.test:yo"]
    assert_protocol_valid(done.events)


async def test_an_approval_binds_to_its_run_call_and_arguments(store: RunStore) -> None:
    sent.clear()
    first = await agent(store).run("greet ann and bob")
    second = await agent(store).run("greet them again")
    a_first = first.pending[0]
    before = await store.read(second.run_id)
    with pytest.raises(UserError, match="never applies to another run"):
        await agent(store).resume(second.run_id, approvals=[Approval.approve(a_first)])
    with pytest.raises(UserError, match="other arguments"):
        await agent(store).resume(
            first.run_id,
            approvals=[Approval(call_id="a", run_id=first.run_id, arguments_hash="0" * 64)],
        )
    with pytest.raises(UserError, match="does not wait for approval"):
        await agent(store).resume(
            first.run_id, approvals=[Approval(call_id="zzz", run_id=first.run_id)]
        )
    with pytest.raises(UserError, match="does not name its run"):
        await agent(store).resume(first.run_id, approvals=[Approval(call_id="a")])
    with pytest.raises(UserError, match="does not say which arguments"):
        await agent(store).resume(
            first.run_id, approvals=[Approval(call_id="a", run_id=first.run_id)]
        )
    with pytest.raises(UserError, match="waits for approval of a: send"):
        await agent(store).resume(first.run_id)
    assert await store.read(second.run_id) == before  # a refused resume writes nothing
    assert sent == []


async def test_edited_arguments_are_checked_by_the_policy_again(store: RunStore) -> None:
    sent.clear()
    waiting = await agent(store).run("greet ann and bob")
    a, b = waiting.pending
    done = await agent(store).resume(
        waiting.run_id,
        approvals=[
            Approval.approve(a, arguments={"to": "ann@x.test", "body": "hello"}),
            Approval.approve(b, arguments={"to": "mallory@evil.test", "body": "yo"}),
        ],
    )
    assert done.status == "finished"
    assert sent == ["ann@x.test:hello"]  # the edit ran; the edit to a denied address did not
    decided = [e for e in done.events if isinstance(e, PolicyDecided) and e.call_id in "ab"]
    assert [(e.call_id, e.decision, e.rule) for e in decided] == [
        ("a", "needs_approval", "needs_approval:send"),
        ("b", "needs_approval", "needs_approval:send"),
        ("a", "allow", "human_approval"),
        ("b", "deny", "deny:send"),
    ]
    result_b = next(e for e in done.events if isinstance(e, ToolCallFinished) and e.call_id == "b")
    assert result_b.is_error
    assert result_b.error_type == "denied"
    assert_protocol_valid(done.events)


async def test_edited_arguments_that_do_not_fit_the_tool_are_refused_before_anything(
    store: RunStore,
) -> None:
    # a partial edit ({"to": ...} without the body) was recorded as approved, then the call
    # failed validation, and the run went on as if the human had decided
    sent.clear()
    waiting = await agent(store).run("greet ann and bob")
    a, _ = waiting.pending
    before = await store.read(waiting.run_id)
    with pytest.raises(UserError, match=r"edited arguments of 'a' do not fit send.*body"):
        await agent(store).resume(
            waiting.run_id, approvals=[Approval.approve(a, arguments={"to": "ann@x.test"})]
        )
    assert await store.read(waiting.run_id) == before  # nothing recorded
    assert sent == []


def _worker(db: Path, *args: str) -> subprocess.Popen[str]:
    root = Path(__file__).resolve().parents[2]
    return subprocess.Popen(
        [sys.executable, "-m", "tests.durability.approval_worker", str(db), *args],
        cwd=root,
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": str(root)},
    )


async def test_pending_approvals_survive_kill_9_and_an_approved_call_runs_at_most_once(
    tmp_path: Path,
) -> None:
    db = tmp_path / "t.db"
    marker = db.with_suffix(".effects")
    worker = _worker(db, "run1", "start")
    assert worker.stdout is not None
    assert worker.stdout.readline().strip() == "waiting_for_approval"
    worker.send_signal(signal.SIGKILL)
    worker.wait(timeout=30)
    worker.stdout.close()

    store = SqliteStore(db)
    try:
        events = await store.read("run1")
        assert events[-1].kind == "run_finished"
        assert [e.call_id for e in events if e.kind == "approval_requested"] == ["c1"]
    finally:
        await store.close()

    # Approved in another process, which dies (kill -9) while the payment is in flight.
    approver = _worker(db, "run1", "resume", "c1")
    assert approver.wait(timeout=60) == -signal.SIGKILL
    assert approver.stdout is not None
    approver.stdout.close()
    assert marker.read_text() == "paid 500\n"

    store = SqliteStore(db)
    try:
        resumed = await Agent(model=FunctionModel(pay_then_finish), tools=[], store=store).resume(
            "run1"
        )
        assert resumed.status == "finished"
        unknown = [e for e in resumed.events if isinstance(e, ToolCallUnknown)]
        assert [e.call_id for e in unknown] == ["c1"]  # not run again: it may have paid
        with pytest.raises(UserError):
            await Agent(model=FunctionModel(pay_then_finish), store=store).resume(
                "run1", approvals=[Approval(call_id="c1", run_id="run1", arguments_hash="0" * 64)]
            )
        assert_protocol_valid(resumed.events)
    finally:
        await store.close()
    assert marker.read_text() == "paid 500\n"  # exactly one payment
