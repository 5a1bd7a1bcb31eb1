"""Per-phase limits: ``Limits(plan=..., think=..., reflect=..., respond=PhaseLimits(...))``."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

import orjson
import pytest

from tests.support import add, assert_protocol_valid, explode
from tether import Agent, Event, Limits, ModelRequest
from tether.codec import compute_hash, decode_event, encode_event, verify_chain
from tether.errors import ConfigError, ModelError
from tether.events import BudgetWarning, LimitReached, ModelFailed, ModelResponded, RunStarted
from tether.limits import PhaseLimits
from tether.models.base import Model, ModelResponse
from tether.outcome import ErrorInfo
from tether.replay import replay
from tether.state import StateBuilder
from tether.stores import MemoryStore
from tether.testing import ScriptedModel, ScriptStep, call, finish
from tether.thinking import Plan, Planner, Thinking, ThinkingContext


def make_plan(*steps: str) -> Any:
    return call(
        "make_plan",
        steps=[{"step": s, "tools": []} for s in steps],
        success_criteria=["says 5"],
        complexity="low",
    )


def verdict(passed: bool, reasons: str = "ok") -> Any:
    return call("verdict", reasons=reasons, unmet=[] if passed else ["wrong"], passed=passed)


class Slow(Model):
    """A scripted model whose requests for some purposes take ``seconds`` first."""

    real = False

    def __init__(
        self, script: Sequence[ScriptStep], seconds: float, purposes: set[str | None]
    ) -> None:
        self.inner = ScriptedModel(script)
        self.seconds = seconds
        self.purposes = purposes
        self.requests: list[ModelRequest] = []

    @property
    def name(self) -> str:
        return "slow"

    async def request(self, request: ModelRequest) -> ModelResponse:
        self.requests.append(request)
        if request.purpose in self.purposes:
            await asyncio.sleep(self.seconds)
        return await self.inner.request(request)


def checked(model: Model, reflect: PhaseLimits) -> Agent[Any]:
    """An agent whose answers are checked up to five times, within ``reflect``."""
    return Agent(
        model=model,
        limits=Limits(reflect=reflect),
        thinking=Thinking(plan=False, reflect=True, max_reflections=5),
    )


def kinds(events: Sequence[Event]) -> list[str]:
    return [e.kind for e in events]


# -- the value and its encoding ------------------------------------------------------------------


def test_unset_phase_limits_are_not_encoded_so_old_logs_and_digests_stay() -> None:
    plain = Limits()
    assert b"plan" not in orjson.dumps(plain)
    assert b"think" not in orjson.dumps(plain)
    assert plain.think is None
    assert plain.phase("think") is None
    assert not plain.phased
    # a log line written before phases existed decodes to the same limits
    old = orjson.loads(orjson.dumps(plain))
    assert set(old) == {
        "max_steps",
        "max_tool_calls",
        "max_seconds",
        "tool_timeout",
        "max_tokens",
        "max_cost",
        "max_parallel_tools",
        "max_retries",
        "answer_max_tokens",
    }


def test_an_agents_digest_is_unchanged_without_phase_limits() -> None:
    model = ScriptedModel([finish("x")])
    digest = Agent(model=model, tools=[add]).spec.digest
    # the digest this agent had before phase limits existed (9d53a37)
    assert digest == "234cfa0434f6d009d3bee53983c22b1a674e8453cac1599538c34d22cc7631bc"
    other = Agent(model=model, tools=[add], limits=Limits(think=PhaseLimits(max_steps=3)))
    assert other.spec.digest != digest


def test_phase_limits_round_trip_through_the_log_and_keep_the_hash() -> None:
    limits = Limits(reflect=PhaseLimits(max_steps=2, timeout=5), respond=PhaseLimits(max_steps=0))
    outcome = Agent(model=ScriptedModel([finish("x")]), limits=limits).run_sync("hi")
    started = outcome.events[0]
    assert isinstance(started, RunStarted)
    decoded = decode_event(encode_event(started))
    assert decoded == started
    assert isinstance(decoded, RunStarted)
    assert decoded.limits == limits
    assert compute_hash(decoded) == started.hash
    verify_chain(outcome.events)


@pytest.mark.parametrize(
    ("fields", "says"),
    [
        ({"max_steps": -1}, "PhaseLimits.max_steps must be an int from 0 to 2\\*\\*63 - 1"),
        ({"max_steps": 2.5}, "PhaseLimits.max_steps must be an int from 0 to 2\\*\\*63 - 1"),
        ({"max_steps": True}, "PhaseLimits.max_steps must be an int from 0 to 2\\*\\*63 - 1"),
        ({"timeout": float("inf")}, "PhaseLimits.timeout must be a finite number >= 0"),
        ({"max_seconds": "10"}, "PhaseLimits.max_seconds must be a finite number >= 0"),
    ],
)
def test_bad_phase_limits_are_config_errors(fields: dict[str, Any], says: str) -> None:
    with pytest.raises(ConfigError, match=says):
        PhaseLimits(**fields)


@pytest.mark.parametrize(
    ("fields", "says"),
    [
        ({"max_steps": 2.5}, "Limits.max_steps must be an int >= 0"),
        ({"max_tool_calls": True}, "Limits.max_tool_calls must be an int >= 0"),
        ({"max_tokens": "1000"}, "Limits.max_tokens must be an int >= 0"),
        ({"max_cost": False}, "Limits.max_cost must be a number >= 0"),
        ({"max_seconds": "10"}, "Limits.max_seconds must be a number >= 0"),
    ],
)
def test_a_count_or_a_bound_of_the_wrong_type_is_a_config_error(
    fields: dict[str, Any], says: str
) -> None:
    """As the phase limits are: 2.5 steps or True tool calls are mistakes, never bounds."""
    with pytest.raises(ConfigError, match=says):
        Limits(**fields)


def test_a_phase_given_as_a_dict_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match=r"Limits\.reflect must be a PhaseLimits"):
        Limits(reflect={"max_steps": 1})  # type: ignore[arg-type]


# -- think -----------------------------------------------------------------------------------------


async def test_think_max_steps_ends_the_run_with_a_best_effort_answer() -> None:
    model = ScriptedModel([call("add", a=1, b=2)] * 2 + ["3, so far"])
    agent = Agent(model=model, tools=[add], limits=Limits(think=PhaseLimits(max_steps=2)))
    outcome = await agent.run("add forever")
    assert outcome.status == "budget_exhausted"
    assert outcome.limit == "think.max_steps"
    reached = next(e for e in outcome.events if isinstance(e, LimitReached))
    assert (reached.used, reached.maximum, reached.ask_for_answer) == (2.0, 2.0, True)
    assert outcome.answer == "3, so far"
    assert sum(isinstance(e, ModelResponded) and not e.final for e in outcome.events) == 2


async def test_think_timeout_bounds_each_acting_request() -> None:
    model = Slow([finish("late")] * 5, seconds=5.0, purposes={None})
    limits = Limits(max_retries=1, think=PhaseLimits(timeout=0.05))
    outcome = await Agent(model=model, limits=limits).run("hi")
    failed = [e for e in outcome.events if isinstance(e, ModelFailed)]
    assert failed
    assert failed[0].error.type == "TimeoutError"
    assert failed[0].latency_s is not None
    assert failed[0].latency_s < 2.0
    assert outcome.status == "budget_exhausted"
    assert outcome.limit == "max_retries"


async def test_think_max_seconds_counts_answered_and_failed_requests() -> None:
    model = Slow([call("add", a=1, b=2)] * 10, seconds=0.06, purposes={None})
    limits = Limits(think=PhaseLimits(max_seconds=0.15), respond=PhaseLimits(max_steps=0))
    outcome = await Agent(model=model, tools=[add], limits=limits).run("add forever")
    assert outcome.status == "budget_exhausted"
    assert outcome.limit == "think.max_seconds"
    turns = [e for e in outcome.events if isinstance(e, ModelResponded | ModelFailed)]
    spent = sum(e.latency_s or 0.0 for e in turns)
    assert 0.15 <= spent < 1.0
    assert len(turns) <= 4  # the last request was cut at the phase's time left


# -- respond -----------------------------------------------------------------------------------


async def test_respond_max_steps_zero_asks_for_no_best_effort_answer() -> None:
    model = ScriptedModel([call("add", a=1, b=2)] * 2 + ["never asked"])
    limits = Limits(max_steps=2, respond=PhaseLimits(max_steps=0))
    outcome = await Agent(model=model, tools=[add], limits=limits).run("add")
    assert outcome.limit == "max_steps"
    reached = next(e for e in outcome.events if isinstance(e, LimitReached))
    assert reached.ask_for_answer is False
    assert not any(isinstance(e, ModelResponded) and e.final for e in outcome.events)


async def test_respond_timeout_replaces_the_default_minute() -> None:
    script: list[ScriptStep] = [call("add", a=1, b=2), "too slow to be heard"]

    class SlowFinal(Slow):
        async def request(self, request: ModelRequest) -> ModelResponse:
            if request.tool_choice == "none":
                await asyncio.sleep(5.0)
            return await super().request(request)

    slow = SlowFinal(script, seconds=0.0, purposes=set())
    limits = Limits(max_steps=1, respond=PhaseLimits(timeout=0.05))
    outcome = await Agent(model=slow, tools=[add], limits=limits).run("add")
    assert outcome.limit == "max_steps"
    failed = [e for e in outcome.events if isinstance(e, ModelFailed)]
    assert len(failed) == 1
    assert failed[0].error.type == "TimeoutError"
    assert failed[0].latency_s is not None
    assert failed[0].latency_s < 2.0


# -- plan and reflect: skipped, never the end of the run -----------------------------------------


async def test_plan_max_steps_stops_revisions_with_one_warning() -> None:
    script: list[ScriptStep] = [
        make_plan("explode"),
        call("explode", reason="boom"),  # a failed step: the plan would be revised
        call("explode", reason="boom again"),
        call("add", a=2, b=3),
        finish("5"),
    ]
    limits = Limits(plan=PhaseLimits(max_steps=1))
    model = ScriptedModel(script)
    agent = Agent(
        model=model,
        tools=[add, explode],
        limits=limits,
        thinking=Thinking(plan=True, reflect=False, max_replans=3),
    )
    outcome = await agent.run("what is 2+3?")
    assert outcome.status == "finished"
    assert outcome.output == "5"
    assert [r.purpose for r in model.requests] == ["plan", None, None, None, None]
    warnings = [e for e in outcome.events if isinstance(e, BudgetWarning)]
    assert [(w.limit, w.used, w.maximum) for w in warnings] == [("plan.max_steps", 1.0, 1.0)]
    assert "plan_revised" not in kinds(outcome.events)


async def test_reflect_timeout_skips_a_slow_check_and_takes_the_answer() -> None:
    model = Slow([finish("5"), verdict(False)], seconds=5.0, purposes={"reflect"})
    limits = Limits(reflect=PhaseLimits(timeout=0.05))
    agent = Agent(model=model, limits=limits, thinking=Thinking(plan=False, reflect=True))
    outcome = await agent.run("what is 2+3?")
    assert outcome.status == "finished"
    assert outcome.output == "5"
    failed = [e for e in outcome.events if isinstance(e, ModelFailed)]
    assert [(e.purpose, e.error.type) for e in failed] == [("reflect", "TimeoutError")]
    assert "reflected" not in kinds(outcome.events)


async def test_reflect_max_seconds_is_counted_across_checks() -> None:
    script: list[ScriptStep] = [
        finish("4"),
        verdict(False, "2+3 is not 4"),
        finish("6"),
        verdict(False, "2+3 is not 6"),
        finish("5"),
        verdict(True),
    ]
    model = Slow(script, seconds=0.3, purposes={"reflect"})
    outcome = await checked(model, PhaseLimits(max_seconds=0.5)).run("what is 2+3?")
    # the first check spent 0.3 s; the second was cut at the 0.2 s left, and its answer
    # is taken unchecked (thinking never blocks a run)
    assert outcome.status == "finished"
    assert outcome.output == "6"
    checks = [
        e
        for e in outcome.events
        if isinstance(e, ModelResponded | ModelFailed) and e.purpose == "reflect"
    ]
    assert [e.kind for e in checks] == ["model_responded", "model_failed"]
    assert 0.5 <= sum(e.latency_s or 0.0 for e in checks) < 2.0


async def test_a_spent_reflect_phase_is_skipped_with_one_warning() -> None:
    script: list[ScriptStep] = [finish("4"), verdict(False, "2+3 is not 4"), finish("6")]
    outcome = await checked(ScriptedModel(script), PhaseLimits(max_steps=1)).run("what is 2+3?")
    assert outcome.status == "finished"
    assert outcome.output == "6"
    warnings = [
        (e.limit, e.used, e.maximum) for e in outcome.events if isinstance(e, BudgetWarning)
    ]
    assert warnings == [("reflect.max_steps", 1.0, 1.0)]


# -- resume and replay ------------------------------------------------------------------------


def test_the_fold_counts_each_phases_requests() -> None:
    """Counted whatever the limits: a run resumed under phase limits counts from its log."""
    outcome = Agent(
        model=ScriptedModel([make_plan("a"), call("add", a=1, b=2), finish("3")]),
        tools=[add],
        thinking=Thinking(plan=True, reflect=False),
    ).run_sync("1+2")
    state = StateBuilder()
    for event in outcome.events:
        state.apply(event)
    assert state.phase_steps == {"plan": 1, "think": 2}
    assert set(state.phase_seconds) == {"plan", "think"}


async def test_a_resumed_run_keeps_counting_from_its_log() -> None:
    limits = Limits(think=PhaseLimits(max_steps=3), respond=PhaseLimits(max_steps=0))
    script: list[ScriptStep] = [call("add", a=1, b=2)] * 10
    recorded = await Agent(model=ScriptedModel(script), tools=[add], limits=limits).run("add")
    # the process died after two turns: the log ends with the second turn's result
    finished = [i for i, e in enumerate(recorded.events) if e.kind == "tool_call_finished"]
    store = MemoryStore()
    await store.append(recorded.run_id, list(recorded.events[: finished[1] + 1]))
    fresh = ScriptedModel(script)
    outcome = await Agent(model=fresh, tools=[add], limits=limits, store=store).resume(
        recorded.run_id
    )
    assert outcome.limit == "think.max_steps"
    assert len(fresh.requests) == 1  # one turn left of three
    assert_protocol_valid(outcome.events)


async def test_replay_of_a_phase_limited_run_matches() -> None:
    limits = Limits(think=PhaseLimits(max_steps=2), respond=PhaseLimits(max_steps=0))
    outcome = await Agent(
        model=ScriptedModel([call("add", a=1, b=2)] * 3), tools=[add], limits=limits
    ).run("add")
    again = Agent(model=ScriptedModel([call("add", a=1, b=2)] * 3), tools=[add], limits=limits)
    report = await replay(outcome.events, agent=again)
    assert report.ok, report.divergence


async def test_a_resumed_run_takes_the_phase_limits_of_the_agent_that_resumes_it() -> None:
    script: list[ScriptStep] = [call("add", a=1, b=2)] * 10
    recorded = await Agent(
        model=ScriptedModel(script), tools=[add], limits=Limits(max_steps=10)
    ).run("add")
    finished = [i for i, e in enumerate(recorded.events) if e.kind == "tool_call_finished"]
    store = MemoryStore()
    await store.append(recorded.run_id, list(recorded.events[: finished[1] + 1]))
    limits = Limits(max_steps=10, think=PhaseLimits(max_steps=3))
    fresh = ScriptedModel(script)
    outcome = await Agent(model=fresh, tools=[add], limits=limits, store=store).resume(
        recorded.run_id
    )
    assert outcome.limit == "think.max_steps"
    assert len(fresh.requests) == 2  # one more turn, then the best-effort answer


async def test_a_failed_request_that_spends_the_think_phase_is_not_retried() -> None:
    model = ScriptedModel([ModelError("overloaded", transient=True)] * 5)
    limits = Limits(max_retries=5, think=PhaseLimits(max_steps=2))
    outcome = await Agent(model=model, limits=limits).run("hi")
    failed = [e for e in outcome.events if isinstance(e, ModelFailed)]
    assert [e.will_retry for e in failed] == [True, False]
    assert outcome.limit == "think.max_steps"


async def test_a_permanent_failure_stays_a_failure_under_phase_limits() -> None:
    model = ScriptedModel([ModelError("bad key", transient=False)])
    limits = Limits(think=PhaseLimits(max_steps=1))
    outcome = await Agent(model=model, limits=limits).run("hi")
    assert outcome.status == "failed"


def test_a_failed_best_effort_answer_counts_as_respond_not_think() -> None:
    state = StateBuilder()
    state.apply(
        ModelFailed(
            run_id="r",
            seq=0,
            at=datetime.now(UTC),
            prev_hash="",
            hash="",
            step=1,
            model="m",
            error=ErrorInfo(type="TimeoutError", message="late"),
            transient=False,
            attempt=1,
            will_retry=False,
            latency_s=2.0,
            final=True,
        )
    )
    assert state.phase_steps == {"respond": 1}
    assert state.phase_seconds == {"respond": 2.0}


async def test_a_stage_that_asks_again_is_held_to_its_phase_steps() -> None:
    asked: list[ModelResponse | None] = []

    class Twice(Planner):
        async def plan(self, context: ThinkingContext) -> Plan | None:
            for _ in range(2):
                asked.append(
                    await context.ask(
                        ModelRequest(instructions="plan", messages=context.messages, tools=())
                    )
                )
            return None

        async def revise(self, context: ThinkingContext, reason: str) -> Plan | None:
            return None

    model = ScriptedModel(["first", "second", finish("done")])
    agent = Agent(
        model=model,
        limits=Limits(plan=PhaseLimits(max_steps=1)),
        thinking=Thinking(plan=Twice(), reflect=False),
    )
    outcome = await agent.run("go")
    assert outcome.status == "finished"
    assert asked[0] is not None
    assert asked[1] is None  # the phase's one request was made: the second is not sent
    warnings = [e.limit for e in outcome.events if isinstance(e, BudgetWarning)]
    assert warnings == ["plan.max_steps"]
