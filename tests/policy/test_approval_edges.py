"""Approvals, budgets and secrets at their edges: each case pinned by a test that failed before its fix."""

from __future__ import annotations

import contextlib
import re
from collections.abc import Sequence
from pathlib import Path
from typing import cast

import orjson

from tether import Agent, Approval, Limits, RulePolicy, allow, deny, require_approval, tool
from tether.codec import encode_event
from tether.content import content_text
from tether.events import Decision, Event, PolicyDecided, ToolCallFinished, ToolCallUnknown
from tether.jsontypes import JsonValue
from tether.messages import ToolCall
from tether.outcome import RunOutcome
from tether.policy import (
    ArgCondition,
    Policy,
    PolicyContext,
    PolicyDecision,
    RateLimit,
    Redactor,
    Rules,
)
from tether.run import vault
from tether.run.approvalargs import arguments_hash
from tether.stores import MemoryStore
from tether.testing import ScriptedModel, ScriptStep, call, finish
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


@tool(open_world=False)
def deploy(token: str) -> str:
    """Deploys.

    Args:
        token: A credential.
    """
    deployed.append(token)
    return "deployed"


deployed: list[str] = []


async def waiting_deploy(store: MemoryStore) -> tuple[Agent, RunOutcome]:
    deployed.clear()
    policy = RulePolicy(None, require_approval("deploy"))
    model = ScriptedModel([call("deploy", token=KEY), finish("deployed")])
    agent = Agent(model=model, tools=[deploy], policy=policy, store=store)
    return agent, await agent.run("deploy")


async def test_a_call_whose_arguments_hold_a_secret_waits_for_approval_and_runs_with_it() -> None:
    store = MemoryStore()
    agent, waiting = await waiting_deploy(store)
    assert waiting.status == "waiting_for_approval"
    (pending,) = waiting.pending
    assert pending.arguments == {"token": "[REDACTED:openai_key]"}  # what the approver sees
    assert "keeps it in memory" in pending.note
    done = await agent.resume(waiting.run_id, approvals=[Approval.approve(pending)])
    assert done.status == "finished"
    assert deployed == [KEY]  # the real secret, from this process's memory
    stored = b"".join(encode_event(e) for e in await store.read(waiting.run_id))
    assert KEY.encode() not in stored  # and never in the log, nor a hash of it
    assert arguments_hash({"token": KEY}).encode() not in stored  # what an approval binds


async def test_a_secret_that_died_with_its_process_must_be_given_again() -> None:
    store = MemoryStore()
    agent, waiting = await waiting_deploy(store)
    (pending,) = waiting.pending
    vault.clear()  # what the process ending does to it
    gone = await agent.resume(waiting.run_id, approvals=[Approval.approve(pending)])
    assert deployed == []  # it did not run with the markers
    (result,) = [e for e in gone.events if isinstance(e, ToolCallFinished) and e.tool == "deploy"]
    assert result.error_type == "redacted_arguments"
    assert "Approve it again with the arguments given in full" in content_text(result.content)

    _, waiting = await waiting_deploy(store)
    (pending,) = waiting.pending
    vault.clear()
    again = await agent.resume(
        waiting.run_id, approvals=[Approval.approve(pending, arguments={"token": KEY})]
    )
    assert again.status == "finished"
    assert deployed == [KEY]  # given in full at the approval: it runs
    stored = b"".join(encode_event(e) for e in await store.read(waiting.run_id))
    assert KEY.encode() not in stored


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
            model=ScriptedModel([turn, finish("done")]),
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


# -- from the second review ----------------------------------------------------------------


class Crash(BaseException):
    """The process dying while a tool runs."""


async def test_a_recheck_deny_of_edited_arguments_stands_after_a_crash() -> None:
    fetched: list[str] = []
    crash = [True]

    @tool(open_world=False)
    def slow(n: int) -> str:
        """Takes a while.

        Args:
            n: A number.
        """
        if crash[0]:
            crash[0] = False
            raise Crash
        return "ok"

    @tool(open_world=False, idempotent=True)
    def fetch(path: str) -> str:
        """Reads something.

        Args:
            path: Where.
        """
        fetched.append(path)
        return f"content of {path}"

    policy = RulePolicy(
        None,
        deny("fetch", when=[ArgCondition(path="path", op="eq", value="/etc/shadow")]),
        require_approval(["slow", "fetch"]),
    )
    store = MemoryStore()
    turn = [
        ToolCall(id="a", name="slow", arguments={"n": 1}),
        ToolCall(id="b", name="fetch", arguments={"path": "/tmp/x"}),
    ]

    def agent(script: Sequence[ScriptStep]) -> Agent:
        return Agent(model=ScriptedModel(script), tools=[slow, fetch], policy=policy, store=store)

    waiting = await agent([turn, finish("done")]).run("go")
    a, b = waiting.pending
    edited = Approval.approve(b, arguments={"path": "/etc/shadow"})
    with contextlib.suppress(Crash):
        await agent([turn, finish("done")]).resume(
            waiting.run_id, approvals=[Approval.approve(a), edited]
        )
    recovered = await agent([turn, finish("done")]).resume(waiting.run_id)
    assert recovered.status == "finished"
    assert fetched == []


async def test_an_edited_approval_is_not_refused_by_its_own_rate_limit_place() -> None:
    paid.clear()
    store = MemoryStore()
    for scope in ("run", "process"):
        policy = RulePolicy(
            Rules(
                rules=(require_approval("pay"),),
                rate_limits=(RateLimit(tools=("pay",), max_calls=1, scope=scope),),
            )
        )
        script = [call("pay", amount=500), finish("done")]
        model = ScriptedModel(script)
        waiting = await Agent(model=model, tools=[pay], policy=policy, store=store).run("pay")
        resumed = Agent(model=ScriptedModel(script), tools=[pay], policy=policy, store=store)
        edited = Approval.approve(waiting.pending[0], arguments={"amount": 50})
        await resumed.resume(waiting.run_id, approvals=[edited])
    assert paid == [50, 50]


async def test_a_human_denial_gives_back_a_process_wide_place() -> None:
    paid.clear()
    store = MemoryStore()
    policy = RulePolicy(
        Rules(
            rules=(require_approval("pay"),),
            rate_limits=(RateLimit(tools=("pay",), max_calls=1, scope="process"),),
        )
    )

    def agent(script: Sequence[ScriptStep]) -> Agent:
        return Agent(model=ScriptedModel(script), tools=[pay], policy=policy, store=store)

    script = [call("pay", amount=1), finish("done")]
    first = await agent(script).run("pay")
    await agent(script).resume(first.run_id, approvals=[Approval.deny(first.pending[0])])
    second = await agent([call("pay", amount=2), finish("done")]).run("pay")
    assert second.status == "waiting_for_approval"  # not refused by the rate limit


async def test_a_call_masked_by_a_custom_redaction_is_not_rerun_after_a_crash() -> None:
    stored: list[tuple[str, str]] = []
    first = [True]

    def mask(text: str) -> str:
        return re.sub(r"EMP-\d+", "EMP-***", text)

    @tool(open_world=False, idempotent=True)
    def put(key: str, value: str) -> str:
        """Stores a value.

        Args:
            key: The key.
            value: The value.
        """
        if first[0]:
            first[0] = False
            raise Crash
        stored.append((key, value))
        return "ok"

    store = MemoryStore()

    def agent(script: Sequence[ScriptStep]) -> Agent:
        return Agent(
            model=ScriptedModel(script),
            tools=[put],
            policy=RulePolicy(None, allow("put")),
            store=store,
            redactor=Redactor(callables=[mask]),
        )

    script = [call("put", key="owner", value="EMP-4711"), finish("done")]
    with contextlib.suppress(Crash):
        await agent(script).run("store it", run_id="r1")
    recovered = await agent(script).resume("r1")
    assert recovered.status == "finished"
    assert stored == []  # never written with the masked value
    assert any(isinstance(e, ToolCallUnknown) for e in recovered.events)


async def test_secrets_in_call_ids_and_in_object_values_stay_out_of_the_log() -> None:
    seen: list[dict[str, str]] = []

    @tool(read_only=True, open_world=False)
    def connect(settings: dict[str, str]) -> str:
        """Connects.

        Args:
            settings: Connection settings.
        """
        seen.append(settings)
        return "connected"

    token = "ghp_abcdefghijklmnopqrstuvwxyz0123456789"
    settings: dict[str, JsonValue] = {
        "password": "hunter2-zzqq",
        "X-Api-Key": "abcd1234efgh",
        "host": "db",
    }
    script: list[ScriptStep] = [
        [ToolCall(id=token, name="connect", arguments={"settings": settings})],
        finish("done"),
    ]
    outcome = await Agent(model=ScriptedModel(script), tools=[connect]).run("go")  # pyright: ignore[reportArgumentType]
    assert outcome.status == "finished"
    assert seen == [settings]  # the tool got the real values
    log = b"".join(encode_event(e) for e in outcome.events)
    for secret in (token, "hunter2-zzqq", "abcd1234efgh"):
        assert secret.encode() not in log
    assert b'"host":"db"' in log


async def test_an_integer_json_cannot_hold_is_a_call_error_not_a_failed_run() -> None:
    @tool(read_only=True, open_world=False)
    def count(n: int) -> str:
        """Counts.

        Args:
            n: A number.
        """
        return "ok"

    outcome = await Agent(
        model=ScriptedModel([call("count", n=10**20), finish("done")]), tools=[count]
    ).run("go")
    assert outcome.status == "finished"
    assert outcome.error is None
