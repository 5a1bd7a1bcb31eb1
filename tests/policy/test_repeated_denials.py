"""A model that asks for the same denied call again and again: the third time ends the run.

Before, such a model looped to ``max_steps`` (25 paid turns by default), denied each time.
"""

from __future__ import annotations

from tests.support import add, assert_protocol_valid
from tether import Agent, tool
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


async def test_rate_limit_denials_do_not_count_towards_the_end() -> None:
    # before: two rate-limit denials and then one by another rule ended the run, "asked for 3
    # times ... denied each time"
    from tether.messages import ToolCall
    from tether.policy.base import Policy, PolicyContext, PolicyDecision
    from tether.tools.base import ToolDefinition

    class LimitedThenClosed(Policy):
        asked = 0

        def decide(
            self, call: ToolCall, tool: ToolDefinition, run: PolicyContext
        ) -> PolicyDecision:
            if call.name != "add":
                return PolicyDecision(decision="allow", rule="ok", reason="ok")
            self.asked += 1
            rule = "rate_limit" if self.asked <= 2 else "closed"
            return PolicyDecision(decision="deny", rule=rule, reason="not now")

    script = [call("add", a=1, b=2)] * 4 + [finish("done")]
    agent = Agent(model=ScriptedModel(script), tools=[add], policy=LimitedThenClosed())
    outcome = await agent.run("x")
    assert outcome.status == "finished"  # the 2nd "closed" denial is its second, not its 4th


@tool(open_world=False)
def login(password: str) -> str:
    """Log in.

    Args:
        password: The password.
    """
    return "in"


async def test_denied_calls_whose_arguments_were_redacted_are_not_counted_alike() -> None:
    # before: three different passwords, each logged as [REDACTED:password], were "the same
    # arguments" and the third ended the run
    script = [call("login", password=f"password=Sup3rS3cret{n}x") for n in range(4)]
    no_login = RulePolicy(Rules(rules=(deny("login", reason="not here"),)))
    outcome = await Agent(
        model=ScriptedModel([*script, finish("done")]), tools=[login], policy=no_login
    ).run("x")
    assert outcome.status == "finished"
    assert sum(isinstance(e, PolicyDecided) and e.tool == "login" for e in outcome.events) == 4
