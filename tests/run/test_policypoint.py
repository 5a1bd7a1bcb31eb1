"""Where a run consults its policy (``PolicyPoint``): what the policy sees, and failing closed."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import Any, cast

from tether import tool
from tether.content import TextBlock, ToolResult
from tether.messages import ToolCall
from tether.policy.base import Policy, PolicyContext, PolicyDecision
from tether.run.journal import Journal
from tether.run.policypoint import PolicyPoint
from tether.testing import FakeClock
from tether.tools.base import ToolDefinition


@tool(read_only=True, open_world=False)
async def pay(amount: int, to: str = "me") -> str:
    """Pay someone.

    Args:
        amount: How much.
        to: Who.
    """
    return f"paid {amount} to {to}"


class Recording(Policy):
    """Answers what it is told to, and remembers what it was asked."""

    def __init__(self, answer: object = None, *, fail: bool = False, cap: int | None = None):
        self.answer = answer
        self.fail = fail
        self.cap = cap
        self.seen: list[ToolCall] = []
        self.observed: list[PolicyContext] = []

    def decide(self, call: ToolCall, tool: ToolDefinition, run: PolicyContext) -> PolicyDecision:
        self.seen.append(call)
        if self.fail:
            raise ValueError("broken rule")
        if self.answer is not None:
            return cast(PolicyDecision, self.answer)
        return PolicyDecision(decision="allow", rule="test", reason="fine")

    def check_result(
        self, call: ToolCall, tool: ToolDefinition, result: ToolResult, run: PolicyContext
    ) -> ToolResult | None:
        if self.fail:
            raise ValueError("broken check")
        return ToolResult.text("trimmed")

    def concurrency(self, tool: str) -> int | None:
        return self.cap

    def observe(self, run: PolicyContext) -> None:
        self.observed.append(run)
        raise RuntimeError("bookkeeping failed")


def _point(policy: Policy) -> tuple[PolicyPoint, Journal]:
    journal = Journal("run-1", clock=FakeClock())
    tools: Mapping[str, ToolDefinition] = {"pay": pay.definition}
    return PolicyPoint(policy, run_id="run-1", journal=journal, tools=tools), journal


def _text(result: ToolResult) -> str:
    block = result.content[0]
    assert isinstance(block, TextBlock)
    return block.text


def _call(**arguments: Any) -> ToolCall:
    return ToolCall(id="c1", name="pay", arguments=arguments)


def test_the_policy_judges_the_arguments_the_tool_would_get() -> None:
    policy = Recording()
    point, _ = _point(policy)
    call = _call(amount="100")  # the validator coerces it, and fills the default
    validated = pay.validator(call.arguments)
    assert point.decide(call, validated, pay.definition).decision == "allow"
    assert policy.seen[-1].arguments == {"amount": 100, "to": "me"}
    same = _call(amount=5, to="you")
    point.decide(same, pay.validator(same.arguments), pay.definition)
    assert policy.seen[-1] is same  # nothing coerced: the model's own call


def test_a_policy_that_fails_or_answers_nonsense_denies_and_stops_the_run() -> None:
    failing, _ = _point(Recording(fail=True))
    decision = failing.decide(_call(amount=1), None, pay.definition)
    assert (decision.decision, decision.rule, decision.stop_run) == ("deny", "policy_error", True)
    assert "ValueError: broken rule" in decision.reason
    nonsense = PolicyDecision(decision=cast(Any, "maybe"), rule="r", reason="?")
    confused, _ = _point(Recording(nonsense))
    decision = confused.decide(_call(amount=1), None, pay.definition)
    assert (decision.decision, decision.stop_run) == ("deny", True)
    assert "'maybe'" in decision.reason


def test_the_context_follows_the_log() -> None:
    point, journal = _point(Recording())
    first = point.context()
    assert first is point.context()  # built once while the log is the same list
    assert (first.run_id, first.events, set(first.tools)) == ("run-1", journal.events, {"pay"})
    journal.load([])  # a rollback or a load replaces the list
    assert point.context().events is journal.events


def test_a_failing_result_check_withholds_the_result() -> None:
    point, _ = _point(Recording(fail=True))
    assert point.checks_results
    result, error_type = point.check(_call(amount=1), pay, ToolResult.text("secret"), None)
    assert result.is_error
    assert error_type == "filtered"
    assert "ValueError: broken check" in _text(result)


def test_a_rewritten_result_keeps_the_taint_the_tool_declared() -> None:
    point, _ = _point(Recording())
    tainted = ToolResult.text("from the web", untrusted=True)
    result, error_type = point.check(_call(amount=1), pay, tainted, None)
    assert (_text(result), result.untrusted, error_type) == ("trimmed", True, None)


def test_the_default_check_is_skipped_and_observe_never_raises() -> None:
    class Plain(Policy):
        def decide(
            self, call: ToolCall, tool: ToolDefinition, run: PolicyContext
        ) -> PolicyDecision:
            return PolicyDecision(decision="allow", rule="plain", reason="ok")

    assert not _point(Plain())[0].checks_results
    policy = Recording()
    point, _ = _point(policy)
    point.observe()  # the policy's bookkeeping failed: a human's decision is not blocked
    assert len(policy.observed) == 1


async def test_a_capped_tool_shares_one_slot_per_policy_and_loop() -> None:
    policy = Recording(cap=2)
    first, _ = _point(policy)
    second, _ = _point(policy)
    slot = first.slot("pay")
    assert isinstance(slot, asyncio.Semaphore)
    assert second.slot("pay") is slot  # two runs of one policy: one cap
    assert first.slot("pay") is slot
    assert _point(Recording())[0].slot("pay") is None  # uncapped
