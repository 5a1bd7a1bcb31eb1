"""Holes an independent review found, each pinned by a test that failed before its fix."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import cast

import orjson

from tether import Agent, Approval, Limits, RulePolicy, allow, deny, require_approval, tool
from tether.codec import encode_event
from tether.events import Decision, Event, PolicyDecided
from tether.messages import ToolCall
from tether.policy import ArgCondition, Policy, PolicyContext, PolicyDecision, RateLimit, Rules
from tether.stores import MemoryStore
from tether.testing import ScriptedModel, call, finish
from tether.tools.base import ToolDefinition

KEY = "sk-proj-Abcdefghijklmnopqrstuvwxyz012345"
paid: list[int] = []


@tool(open_world=False)
def pay(amount: int) -> str:
    """Pays.

    Args:
        amount: Cents.
    """
    paid.append(amount)
    return f"paid {amount}"


def decisions(events: Sequence[Event]) -> list[tuple[str, str]]:
    return [(e.decision, e.rule) for e in events if isinstance(e, PolicyDecided)]


async def test_the_policy_judges_the_arguments_the_tool_will_get() -> None:
    """A string the validator coerces to a number cannot slip past a numeric rule."""
    paid.clear()
    policy = RulePolicy(
        None,
        deny("pay", when=[ArgCondition(path="amount", op="gt", value=100)]),
        allow("pay"),
    )
    model = ScriptedModel([call("pay", amount="100000"), finish("done")])
    outcome = await Agent(model=model, tools=[pay], policy=policy).run("pay")
    assert paid == []
    assert ("deny", "deny:pay") in decisions(outcome.events)


class Odd(Policy):
    def decide(self, call: ToolCall, tool: ToolDefinition, run: PolicyContext) -> PolicyDecision:
        return PolicyDecision(decision=cast(Decision, "approve"), rule="odd", reason="?")


async def test_an_answer_that_is_not_a_decision_denies_and_stops() -> None:
    paid.clear()
    model = ScriptedModel([call("pay", amount=1), finish("done")])
    outcome = await Agent(model=model, tools=[pay], policy=Odd()).run("pay")
    assert paid == []
    assert outcome.status == "policy_denied"
    assert decisions(outcome.events)[0] == ("deny", "policy_error")


async def test_a_call_whose_arguments_held_a_secret_cannot_wait_for_approval() -> None:
    @tool(open_world=False)
    def deploy(token: str) -> str:
        """Deploys.

        Args:
            token: A credential.
        """
        return "deployed"

    policy = RulePolicy(None, require_approval("deploy"))
    model = ScriptedModel([call("deploy", token=KEY), finish("could not")])
    outcome = await Agent(model=model, tools=[deploy], policy=policy).run("deploy")
    assert outcome.status == "finished"  # denied (not held), and the run went on
    assert ("deny", "redacted_arguments") in decisions(outcome.events)
    assert KEY.encode() not in b"".join(encode_event(e) for e in outcome.events)


async def test_calls_waiting_for_approval_count_against_the_budget_and_rate_limits() -> None:
    paid.clear()
    store = MemoryStore()
    turn = [ToolCall(id=f"p{i}", name="pay", arguments={"amount": i}) for i in range(3)]
    for limits, policy in [
        (Limits(max_tool_calls=1), RulePolicy(None, require_approval("pay"))),
        (
            Limits(),
            RulePolicy(
                Rules(
                    rules=(require_approval("pay"),),
                    rate_limits=(RateLimit(tools=("pay",), max_calls=1),),
                )
            ),
        ),
    ]:
        agent = Agent(
            model=ScriptedModel([turn, finish("done")]),
            tools=[pay],
            policy=policy,
            limits=limits,
            store=store,
        )
        waiting = await agent.run("pay three")
        assert [p.call_id for p in waiting.pending] == ["p0"]
        resumed = Agent(
            model=ScriptedModel([finish("done")]),
            tools=[pay],
            policy=policy,
            limits=limits,
            store=store,
        )
        await resumed.resume(waiting.run_id, approvals=[Approval.approve(waiting.pending[0])])
    assert paid == [0, 0]  # one payment per run, never three


async def test_the_outcome_output_is_what_the_log_holds(tmp_path: Path) -> None:
    outcome = await Agent(model=ScriptedModel([finish(f"the key is {KEY}")])).run("go")
    assert outcome.output == "the key is [REDACTED:openai_key]"
    assert KEY not in orjson.dumps(outcome.output).decode()


class HoldEverything(Policy):
    def decide(self, call: ToolCall, tool: ToolDefinition, run: PolicyContext) -> PolicyDecision:
        return PolicyDecision(decision="needs_approval", rule="hold", reason="hold it all")


async def test_control_tools_cannot_wait_for_approval() -> None:
    model = ScriptedModel([finish("done"), finish("done again")])
    outcome = await Agent(model=model, policy=HoldEverything(), limits=Limits(max_steps=2)).run(
        "go"
    )
    assert outcome.status != "waiting_for_approval"
    assert decisions(outcome.events)[0] == ("deny", "hold")
