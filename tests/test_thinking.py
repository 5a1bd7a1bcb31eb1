"""Thinking stages in the loop: the planner, the reflector and the router (``tether.thinking``)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel

from tests.support import add, assert_protocol_valid, explode
from tether import Agent, Event, ModelRequest, ToolCall
from tether.content import content_text
from tether.errors import ConfigError, ModelError, StoreWriteError
from tether.events import (
    ModelFailed,
    ModelResponded,
    PlanMade,
    PlanRevised,
    Reflected,
    Routed,
    RunStarted,
    ToolCallFinished,
)
from tether.jsontypes import JsonValue
from tether.messages import AssistantMessage, ToolResultMessage, UserMessage
from tether.models.base import ModelResponse
from tether.replay import replay
from tether.sinks import EventSink
from tether.stores import MemoryStore, SqliteStore
from tether.stores.kv import KvEntry
from tether.testing import ScriptedModel, ScriptStep, call, finish
from tether.thinking import (
    Plan,
    PlanCache,
    Planner,
    Thinking,
    ThinkingContext,
    answered_only,
)


def make_plan(
    *steps: str, criteria: Sequence[str] = ("says 5",), tools: Sequence[str] = ()
) -> ToolCall:
    return call(
        "make_plan",
        steps=[{"step": s, "tools": list(tools)} for s in steps],
        success_criteria=list(criteria),
        complexity="low",
    )


def verdict(passed: bool, reasons: str = "ok", unmet: Sequence[str] = ()) -> ToolCall:
    return call("verdict", reasons=reasons, unmet=list(unmet), passed=passed)


def kinds(events: Sequence[Event]) -> list[str]:
    return [e.kind for e in events]


def agent_with(
    script: Sequence[ScriptStep], thinking: Thinking | bool = True, **kw: Any
) -> tuple[Agent[Any], ScriptedModel]:
    model = ScriptedModel(script)
    return Agent(model=model, tools=[add, explode], thinking=thinking, **kw), model


async def test_the_plan_is_made_first_and_the_acting_model_reads_it() -> None:
    agent, model = agent_with(
        [
            make_plan("add 2 and 3", "answer with the sum", tools=["add"]),
            call("add", a=2, b=3),
            finish("5"),
            verdict(True, "add returned 5"),
        ]
    )
    outcome = await agent.run("what is 2+3?")
    assert outcome.status == "finished"
    assert outcome.output == "5"
    events = outcome.events
    assert_protocol_valid(events)
    plan = next(e for e in events if isinstance(e, PlanMade))
    assert plan.steps == ("add 2 and 3", "answer with the sum")
    assert plan.success_criteria == ("says 5",)
    assert plan.step_tools == (("add",), ("add",))
    assert plan.complexity == "low"
    assert kinds(events)[:3] == ["run_started", "model_responded", "plan_made"]
    assert events[1].phase == "plan"
    assert isinstance(events[1], ModelResponded)
    assert events[1].purpose == "plan"
    # the planning request offered only make_plan, and required it
    planning = model.requests[0]
    assert planning.purpose == "plan"
    assert planning.tool_choice == "required"
    assert [t.name for t in planning.tools] == ["make_plan"]
    assert "add" in planning.instructions  # the agent's tools are described to the planner
    # every acting request shows the plan after the agent's instructions
    acting = model.requests[1]
    assert acting.purpose is None
    assert "1. add 2 and 3 (tools: add)" in acting.instructions
    assert "- says 5" in acting.instructions
    # a thinking request counts in the usage, never as a step of the conversation
    assert outcome.steps == 2
    assert outcome.usage.requests == 4
    started = events[0]
    assert isinstance(started, RunStarted)
    assert started.thinking == {
        "router": None,
        "planner": "ModelPlanner",
        "reflector": "ModelReflector",
        "max_replans": 2,
        "max_reflections": 2,
    }


async def test_a_rejected_answer_goes_back_with_the_reasons_and_the_plan_is_revised() -> None:
    agent, model = agent_with(
        [
            make_plan("add 2 and 3", tools=["add"]),
            call("add", a=2, b=3),
            finish("6"),
            verdict(False, "add returned 5, not 6.", ["says 5"]),
            make_plan("answer 5"),
            finish("5"),
            verdict(True, "matches the tool result"),
        ]
    )
    outcome = await agent.run("what is 2+3?")
    assert outcome.status == "finished"
    assert outcome.output == "5"
    events = outcome.events
    assert_protocol_valid(events)
    checks = [e for e in events if isinstance(e, Reflected)]
    assert [(c.answer, c.passed, c.attempt) for c in checks] == [("6", False, 1), ("5", True, 2)]
    assert checks[0].unmet == ("says 5",)
    # the reflection comes between the finish call's intent and its result
    first = kinds(events).index("reflected")
    assert kinds(events)[first - 2 : first + 2] == [
        "policy_decided",
        "model_responded",
        "reflected",
        "tool_call_finished",
    ]
    rejected = events[first + 1]
    assert isinstance(rejected, ToolCallFinished)
    assert rejected.is_error
    assert rejected.error_type == "not_accepted"
    assert "add returned 5, not 6." in content_text(rejected.content)
    revised = next(e for e in events if isinstance(e, PlanRevised))
    assert revised.steps == ("answer 5",)
    assert revised.revision == 1
    assert revised.reason == "the answer was rejected by its check"
    # the acting model reads the rejection as finish_task's result, and the new plan
    after = next(r for r in model.requests if r.purpose is None and len(r.messages) == 5)
    last = after.messages[-1]
    assert isinstance(last, ToolResultMessage)
    assert last.is_error
    assert "1. answer 5" in after.instructions
    # the reflector never saw the unanswered finish call: only its answer, as text
    reflecting = next(r for r in model.requests if r.purpose == "reflect")
    assert not any(
        isinstance(m, AssistantMessage) and any(c.name == "finish_task" for c in m.tool_calls)
        for m in reflecting.messages
    )
    question = reflecting.messages[-1]
    assert isinstance(question, UserMessage)
    assert "<answer>\n6\n</answer>" in question.text


async def test_repeated_rejection_ends_honestly_with_the_last_answer_never_loops() -> None:
    agent, model = agent_with(
        [
            make_plan("answer"),
            finish("4"),
            verdict(False, "wrong", ["says 5"]),
            make_plan("answer again"),
            finish("6"),
            verdict(False, "still wrong", ["says 5"]),
            finish("7"),  # never asked for: the run has ended
        ],
        thinking=Thinking(max_reflections=2, max_replans=1),
    )
    outcome = await agent.run("what is 2+3?")
    assert outcome.status == "budget_exhausted"
    assert outcome.limit == "max_reflections"
    assert outcome.answer == "6"
    assert outcome.error is not None
    assert "says 5" in outcome.error.message
    assert outcome.output is None
    assert_protocol_valid(outcome.events)
    assert len(model.requests) == 6
    assert sum(isinstance(e, PlanRevised) for e in outcome.events) == 1  # max_replans


async def test_the_router_answers_a_trivial_goal_in_one_model_call() -> None:
    model = ScriptedModel([call("answer_directly", answer="Paris")])
    agent = Agent(model=model, tools=[add], thinking=Thinking(route=True))
    outcome = await agent.run("What is the capital of France?")
    assert outcome.status == "finished"
    assert outcome.output == "Paris"
    assert len(model.requests) == 1
    assert model.requests[0].purpose == "route"
    assert kinds(outcome.events) == ["run_started", "model_responded", "routed", "run_finished"]
    routed = outcome.events[2]
    assert isinstance(routed, Routed)
    assert routed.route == "direct"
    assert routed.phase == "plan"
    assert outcome.steps == 0
    assert outcome.tool_calls == 0


async def test_the_router_sends_a_real_task_to_the_loop_with_its_plan() -> None:
    agent, model = agent_with(
        [
            call("add", a=2, b=3),  # the router reaches for a tool: the loop runs
            make_plan("add", tools=["add"]),
            call("add", a=2, b=3),
            finish("5"),
            verdict(True),
        ],
        thinking=Thinking(route=True),
    )
    outcome = await agent.run("2+3 with the tool")
    assert outcome.status == "finished"
    assert [r.purpose for r in model.requests] == ["route", "plan", None, None, "reflect"]
    routed = next(e for e in outcome.events if isinstance(e, Routed))
    assert routed.route == "agentic"
    assert routed.reason == "it needs add"
    assert outcome.tool_calls == 1  # the router's call was a decision, never run
    assert [t.name for t in model.requests[0].tools] == ["add", "explode", "answer_directly"]


async def test_a_failed_step_revises_the_plan_within_max_replans() -> None:
    agent, model = agent_with(
        [
            make_plan("explode"),
            call("explode", reason="boom"),
            make_plan("explode differently"),
            call("explode", reason="boom again"),
            call("explode", reason="a third time"),  # no more revisions: max_replans=1
            finish("gave up"),
        ],
        thinking=Thinking(reflect=False, max_replans=1),
    )
    outcome = await agent.run("goal")
    assert outcome.status == "finished"
    revised = [e for e in outcome.events if isinstance(e, PlanRevised)]
    assert len(revised) == 1
    assert revised[0].reason.startswith("the step calling explode failed: ")
    assert "boom" in revised[0].reason
    assert [r.purpose for r in model.requests] == ["plan", None, "plan", None, None, None]


async def test_a_failed_thinking_request_is_skipped_and_does_not_count_as_a_failure() -> None:
    agent, model = agent_with(
        [
            ModelError("planner down", transient=True),
            call("add", a=1, b=1),
            finish("2"),
            ModelError("reflector down", transient=True),
        ]
    )
    outcome = await agent.run("1+1")
    assert outcome.status == "finished"
    assert outcome.output == "2"
    failed = [e for e in outcome.events if isinstance(e, ModelFailed)]
    assert [(f.purpose, f.will_retry) for f in failed] == [("plan", False), ("reflect", False)]
    assert [f.phase for f in failed] == ["plan", "reflect"]
    assert not any(isinstance(e, PlanMade | Reflected) for e in outcome.events)
    assert len(model.requests) == 4


async def test_a_plan_the_model_garbles_is_no_plan() -> None:
    agent, _ = agent_with(
        [
            call("make_plan", steps="not a list", success_criteria=3),
            finish("5"),
            verdict(True),
        ]
    )
    outcome = await agent.run("goal")
    assert outcome.status == "finished"
    assert not any(isinstance(e, PlanMade) for e in outcome.events)


async def test_thinking_off_records_nothing_and_keeps_the_digest() -> None:
    plain = Agent(model=ScriptedModel([finish("x")]), tools=[add])
    off = Agent(
        model=ScriptedModel([finish("x")]),
        tools=[add],
        thinking=Thinking(plan=False, reflect=False),
    )
    assert plain.spec.digest == off.spec.digest
    assert off.spec.thinking is None
    on = Agent(model=ScriptedModel([finish("x")]), tools=[add], thinking=True)
    assert on.spec.digest != plain.spec.digest
    outcome = await off.run("goal")
    assert kinds(outcome.events) == [
        "run_started",
        "model_responded",
        "tool_call_requested",
        "policy_decided",
        "tool_call_finished",
        "run_finished",
    ]
    started = outcome.events[0]
    assert isinstance(started, RunStarted)
    assert started.thinking is None


async def test_a_thinking_run_replays_and_a_missing_stage_is_a_divergence() -> None:
    script: list[ScriptStep] = [
        make_plan("add", tools=["add"]),
        call("add", a=2, b=3),
        finish("6"),
        verdict(False, "not 5", ["says 5"]),
        make_plan("answer 5"),
        finish("5"),
        verdict(True),
    ]
    agent, _ = agent_with(script)
    outcome = await agent.run("2+3")
    report = await replay(outcome.events, agent=agent)
    assert report.ok, report.divergence
    plain = Agent(model=ScriptedModel([]), tools=[add, explode])
    report = await replay(outcome.events, agent=plain)
    assert not report.ok


async def test_a_run_resumed_after_a_crash_keeps_its_plan_and_does_not_plan_again() -> None:
    script: list[ScriptStep] = [
        make_plan("add", tools=["add"]),
        call("add", a=2, b=3),
        finish("5"),
        verdict(True),
    ]
    agent, _ = agent_with(script)
    recorded = await agent.run("2+3")
    cut = kinds(recorded.events).index("plan_made") + 1
    store = MemoryStore()
    await store.append(recorded.run_id, list(recorded.events[:cut]))  # the process died here
    fresh = ScriptedModel(script[1:])
    resumer = Agent(model=fresh, tools=[add, explode], thinking=True, store=store)
    outcome = await resumer.resume(recorded.run_id)
    assert outcome.status == "finished"
    assert outcome.output == "5"
    assert [r.purpose for r in fresh.requests] == [None, None, "reflect"]
    assert "1. add (tools: add)" in fresh.requests[0].instructions
    assert sum(isinstance(e, PlanMade) for e in outcome.events) == 1
    assert_protocol_valid(outcome.events)


class FixedPlanner(Planner):
    """A planner that asks no model: the same plan for every task."""

    def __init__(self) -> None:
        self.seen: list[ThinkingContext] = []

    async def plan(self, context: ThinkingContext) -> Plan | None:
        self.seen.append(context)
        return Plan(steps=("add the numbers", "answer"), success_criteria=("a number",))


async def test_your_own_planner_needs_no_model_request() -> None:
    planner = FixedPlanner()
    model = ScriptedModel([call("add", a=2, b=3), finish("5")])
    agent = Agent(model=model, tools=[add], thinking=Thinking(plan=planner, reflect=False))
    outcome = await agent.run("2+3", context={"hint": "use add"})
    assert outcome.status == "finished"
    assert [r.purpose for r in model.requests] == [None, None]
    assert "1. add the numbers" in model.requests[0].instructions
    [seen] = planner.seen
    assert seen.goal.startswith("2+3")
    assert "use add" in seen.goal
    assert [t.name for t in seen.tools] == ["add"]  # control tools left out
    started = outcome.events[0]
    assert isinstance(started, RunStarted)
    assert started.thinking is not None
    assert started.thinking["planner"] == "FixedPlanner"


class Answer(BaseModel):
    value: int


def test_bad_thinking_settings_are_config_errors() -> None:
    with pytest.raises(ConfigError, match="max_replans"):
        Thinking(max_replans=-1)
    with pytest.raises(ConfigError, match="max_reflections"):
        Thinking(max_reflections=True)
    with pytest.raises(ConfigError, match="Planner"):
        Thinking(plan="yes")  # pyright: ignore[reportArgumentType]
    with pytest.raises(ConfigError, match="Thinking"):
        Agent(model=ScriptedModel([]), thinking="on")  # pyright: ignore[reportArgumentType]
    with pytest.raises(ConfigError, match="output type"):
        Agent(model=ScriptedModel([]), output_type=Answer, thinking=Thinking(route=True))
    assert (
        Agent(model=ScriptedModel([]), thinking=Thinking(plan=False, reflect=False)).spec.thinking
        is None
    )


async def test_a_structured_answer_is_checked_as_json() -> None:
    model = ScriptedModel([finish(value=5), verdict(True)])
    agent = Agent(model=model, output_type=Answer, thinking=Thinking(plan=False))
    outcome = await agent.run("five")
    assert outcome.output == Answer(value=5)
    check = next(e for e in outcome.events if isinstance(e, Reflected))
    assert check.answer == '{"value":5}'
    # without a plan the answer is checked against the default criterion
    question = model.requests[1].messages[-1]
    assert isinstance(question, UserMessage)
    assert "does everything the task asks" in question.text


def test_answered_only_leaves_out_calls_without_results() -> None:
    a = ToolCall(id="a", name="add", arguments={})
    f = ToolCall(id="f", name="finish_task", arguments={"answer": "x"})
    result = ToolResultMessage(call_id="a", name="add", content=())
    messages = (UserMessage(text="goal"), AssistantMessage(text="", tool_calls=(a, f)), result)
    assert answered_only(messages) == (
        UserMessage(text="goal"),
        AssistantMessage(text="", tool_calls=(a,)),
        result,
    )
    alone = (UserMessage(text="goal"), AssistantMessage(text="", tool_calls=(f,)))
    assert answered_only(alone) == (UserMessage(text="goal"),)
    said = (UserMessage(text="goal"), AssistantMessage(text="done", tool_calls=(f,)))
    assert answered_only(said) == (UserMessage(text="goal"), AssistantMessage(text="done"))


async def test_the_cli_renders_the_thinking_events() -> None:
    from tether.cli.render import describe

    agent, _ = agent_with(
        [
            make_plan("add", tools=["add"]),
            finish("6"),
            verdict(False, "not 5", ["says 5"]),
            make_plan("answer 5"),
            finish("5"),
            verdict(True, "right"),
        ]
    )
    outcome = await agent.run("2+3")
    lines = [describe(e) for e in outcome.events]
    text = "\n".join(lines)
    assert "plan (step 0)" in text
    assert "[blue]plan[/] [dim](low)[/] 1. add" in text
    assert "answer rejected[/] (1): not 5 unmet: says 5" in text
    assert "plan revised[/] 1" in text
    assert "answer checked[/] (2): right" in text


async def test_a_model_request_outside_thinking_has_no_purpose() -> None:
    seen: list[ModelRequest] = []

    class Recording(ScriptedModel):
        async def request(self, request: ModelRequest) -> ModelResponse:
            seen.append(request)
            return await super().request(request)

    agent = Agent(model=Recording([finish("x")]))
    await agent.run("goal")
    assert [r.purpose for r in seen] == [None]


def solved(plan: bool = True) -> list[ScriptStep]:
    head: list[ScriptStep] = [make_plan("add 2 and 3", tools=["add"])] if plan else []
    return [*head, call("add", a=2, b=3), finish("5"), verdict(True)]


def plans(events: Sequence[Event]) -> list[PlanMade]:
    return [e for e in events if isinstance(e, PlanMade)]


async def test_a_plan_that_worked_is_reused_without_a_model_request(tmp_path: Path) -> None:
    store = SqliteStore(tmp_path / "plans.db")  # real SQLite: the cache outlives the process
    try:
        thinking = Thinking(plan_cache=PlanCache(store))
        first, _ = agent_with(solved(), thinking=thinking)
        made = await first.run("What is 2 + 3?")
        assert made.status == "finished"
        [miss] = plans(made.events)
        assert (miss.cache, miss.cached_from) == ("miss", None)

        again, model = agent_with(solved(plan=False), thinking=thinking)
        reused = await again.run("  what is 2 + 3 ")  # the same goal, spaced and cased apart
        assert reused.status == "finished"
        [hit] = plans(reused.events)
        assert (hit.cache, hit.cached_from) == ("hit", made.run_id)
        assert (hit.steps, hit.step_tools) == (miss.steps, miss.step_tools)
        assert [r.purpose for r in model.requests] == [None, None, "reflect"]  # no plan request
        assert reused.usage.requests == made.usage.requests - 1
        assert_protocol_valid(reused.events)
        report = await replay(reused.events, agent=again)  # served from the recording
        assert report.ok, report.divergence
    finally:
        await store.close()


async def test_other_tools_goal_or_model_miss_and_a_stale_plan_is_dropped() -> None:
    store = MemoryStore()
    cache = PlanCache(store)
    thinking = Thinking(plan_cache=cache)
    agent, _ = agent_with(solved(), thinking=thinking)
    await agent.run("What is 2 + 3?")
    assert len(await store.kv_list(cache.namespace)) == 1

    other_goal, _ = agent_with(solved(), thinking=thinking)
    [plan] = plans((await other_goal.run("What is 3 + 2?")).events)
    assert plan.cache == "miss"
    assert len(await store.kv_list(cache.namespace)) == 2

    fewer_tools = Agent(model=ScriptedModel(solved()), tools=[add], thinking=thinking)
    [plan] = plans((await fewer_tools.run("What is 2 + 3?")).events)
    assert plan.cache == "miss"  # made for add and explode: not for add alone
    assert len(await store.kv_list(cache.namespace)) == 2  # dropped, then replaced

    other_model = Agent(
        model=ScriptedModel(solved(), name="other-model"), tools=[add], thinking=thinking
    )
    [plan] = plans((await other_model.run("What is 2 + 3?")).events)
    assert plan.cache == "miss"


async def test_a_plan_that_failed_or_was_revised_is_never_served() -> None:
    store = MemoryStore()
    thinking = Thinking(plan_cache=PlanCache(store), max_reflections=1)
    revised, _ = agent_with(
        [make_plan("explode"), call("explode", reason="boom"), make_plan("add"), *solved(False)],
        thinking=thinking,
    )
    assert (await revised.run("2+3")).status == "finished"
    assert await store.kv_list("tether.plans") == []  # its first plan did not work

    rejected, _ = agent_with(
        [make_plan("add"), call("add", a=2, b=3), finish("6"), verdict(False, "not 5")],
        thinking=thinking,
    )
    assert (await rejected.run("2+3")).status == "budget_exhausted"
    assert await store.kv_list("tether.plans") == []

    ok, _ = agent_with(solved(), thinking=thinking)
    await ok.run("2+3")
    assert len(await store.kv_list("tether.plans")) == 1
    failing, _ = agent_with(
        [call("add", a=2, b=3), finish("6"), verdict(False, "not 5")], thinking=thinking
    )
    outcome = await failing.run("2+3")
    assert [p.cache for p in plans(outcome.events)] == ["hit"]
    assert outcome.status == "budget_exhausted"
    assert await store.kv_list("tether.plans") == []  # a cached plan that failed: forgotten


class _BrokenKv(MemoryStore):
    async def kv_get(self, namespace: str, key: str) -> KvEntry | None:
        raise StoreWriteError("the disk is full")

    async def kv_set(self, namespace: str, key: str, value: JsonValue) -> None:
        raise StoreWriteError("the disk is full")


async def test_a_broken_cache_is_a_miss_never_a_failed_run(
    caplog: pytest.LogCaptureFixture,
) -> None:
    agent, _ = agent_with(solved(), thinking=Thinking(plan_cache=PlanCache(_BrokenKv())))
    outcome = await agent.run("2+3")
    assert outcome.status == "finished"
    assert [p.cache for p in plans(outcome.events)] == ["miss"]
    assert "plan cache could not be" in caplog.text


async def test_an_entry_that_is_not_a_plan_is_a_miss() -> None:
    store = MemoryStore()
    cache = PlanCache(store)
    agent, _ = agent_with(solved(), thinking=Thinking(plan_cache=cache))
    await agent.run("2+3")
    [key] = await store.kv_list(cache.namespace)
    await store.kv_set(cache.namespace, key, {"steps": "not a list"})
    again, _ = agent_with(solved(), thinking=Thinking(plan_cache=cache))
    assert [p.cache for p in plans((await again.run("2+3")).events)] == ["miss"]


def test_a_plan_cache_needs_the_planner_and_is_a_plan_cache() -> None:
    with pytest.raises(ConfigError, match="needs the planner"):
        Thinking(plan=False, plan_cache=PlanCache(MemoryStore()))
    with pytest.raises(ConfigError, match="takes a PlanCache"):
        Thinking(plan_cache=MemoryStore())  # type: ignore[arg-type]


async def test_a_cached_plan_whose_run_fails_on_an_exception_is_forgotten() -> None:
    store = MemoryStore()
    thinking = Thinking(plan_cache=PlanCache(store))
    ok, _ = agent_with(solved(), thinking=thinking)
    await ok.run("2+3")
    assert len(await store.kv_list("tether.plans")) == 1

    class Buggy(EventSink):
        """A sink with a bug: it raises (not a StoreError) once, when the tool has run."""

        raised = False

        async def write(self, events: Sequence[Event]) -> None:
            if not self.raised and any(isinstance(e, ToolCallFinished) for e in events):
                self.raised = True
                raise RuntimeError("the sink has a bug")

    failing, _ = agent_with(solved(plan=False), thinking=thinking)
    outcome = await failing.run("2+3", sinks=[Buggy()])
    assert [p.cache for p in plans(outcome.events)] == ["hit"]
    assert outcome.status == "failed"
    assert outcome.error is not None
    assert "the sink has a bug" in outcome.error.message
    assert await store.kv_list("tether.plans") == []  # not served again


async def test_a_planner_of_ones_own_that_never_answers_is_bounded_by_the_run() -> None:
    # it held the run past max_seconds for as long as it hung (tether's own stages ask the
    # model, whose requests are bounded)
    import asyncio

    from tether import Limits
    from tether.thinking import Planner

    class Stuck(Planner):
        async def plan(self, context: Any) -> None:  # pyright: ignore[reportIncompatibleMethodOverride]
            await asyncio.sleep(3600)

        async def revise(self, context: Any, reason: str) -> None:  # pyright: ignore[reportIncompatibleMethodOverride]
            return None

    agent = Agent(
        model=ScriptedModel([finish("5")]),
        limits=Limits(max_seconds=0.5),
        thinking=Thinking(plan=Stuck(), reflect=False),
    )
    outcome = await asyncio.wait_for(agent.run("g"), 30)
    assert outcome.status == "budget_exhausted"
    assert any("the plan stage gave no answer within the run's time" in w for w in outcome.warnings)
