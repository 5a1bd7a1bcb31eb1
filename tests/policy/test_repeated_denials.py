"""A model that asks for the same denied call again and again: the third time ends the run.

Before, such a model looped to ``max_steps`` (25 paid turns by default), denied each time.
"""

from __future__ import annotations

from tests.support import add, assert_protocol_valid
from tether import Agent
from tether.events import PolicyDecided
from tether.policy.gate import RulePolicy
from tether.policy.rules import RateLimit, Rules, deny
from tether.run.policypoint import REPEATED_DENIALS
from tether.stores import MemoryStore
from tether.testing import ScriptedModel, call, finish

NO_ADD = RulePolicy(Rules(rules=(deny("add", reason="no sums today"),)))


async def test_the_same_denied_call_a_third_time_ends_the_run() -> None:
    script = [call("add", a=1, b=2)] * 6 + [finish("done")]
    outcome = await Agent(model=ScriptedModel(script), tools=[add], policy=NO_ADD).run("x")
    assert REPEATED_DENIALS == 3
    assert outcome.status == "policy_denied"
    assert outcome.steps == 3  # not 6, nor max_steps
    reasons = [e.reason for e in outcome.events if isinstance(e, PolicyDecided)]
    assert reasons[:2] == ["no sums today", "no sums today"]
    assert reasons[2] == (
        "no sums today (asked for 3 times with the same arguments, denied each time: the run "
        "ends here)"
    )
    assert outcome.error is not None
    assert "asked for 3 times" in outcome.error.message
    assert_protocol_valid(outcome.events)


async def test_denied_calls_with_other_arguments_do_not_count_together() -> None:
    script = [call("add", a=1, b=n) for n in range(5)] + [finish("done")]
    outcome = await Agent(model=ScriptedModel(script), tools=[add], policy=NO_ADD).run("x")
    assert outcome.status == "finished"


async def test_a_rate_limit_denial_may_be_asked_again() -> None:
    limited = RulePolicy(Rules(rate_limits=(RateLimit(tools=("add",), max_calls=1),)))
    script = [call("add", a=1, b=2)] * 5 + [finish("done")]
    outcome = await Agent(model=ScriptedModel(script), tools=[add], policy=limited).run("x")
    assert outcome.status == "finished"


async def test_the_count_holds_across_a_resume() -> None:
    store = MemoryStore()
    script = [call("add", a=1, b=2), call("add", a=1, b=2), call("ask_user", question="?")]
    script += [call("add", a=1, b=2), finish("done")]
    agent = Agent(
        model=ScriptedModel(script), tools=[add], policy=NO_ADD, store=store, can_ask_user=True
    )
    waiting = await agent.run("x")
    assert waiting.status == "waiting_for_user"
    again = Agent(
        model=ScriptedModel(script), tools=[add], policy=NO_ADD, store=store, can_ask_user=True
    )
    outcome = await again.resume(waiting.run_id, answer="go on")
    assert outcome.status == "policy_denied"
