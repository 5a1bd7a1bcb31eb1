"""The loop's behaviour, one concern per test, on scripted models."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import pytest
from pydantic import BaseModel

from tether import Agent, Event, Limits, ModelRequest, ModelResponse, PolicyDecision, Usage, tool
from tether.codec import read_jsonl
from tether.content import content_text
from tether.errors import ConfigError, ModelError, ModelRequestsBlocked, UserError
from tether.events import (
    LimitReached,
    ModelFailed,
    ModelResponded,
    PolicyDecided,
    RetryPrompted,
    RunFinished,
    ToolCallFinished,
)
from tether.messages import ToolCall, UserMessage
from tether.models.base import Model
from tether.policy.base import Policy, PolicyContext
from tether.retry import Backoff
from tether.testing import FakeClock, FunctionModel, ScriptedModel, call, finish
from tether.tools.base import Tool, ToolDefinition

from .support import add, assert_protocol_valid, explode, lookup

NO_WAIT = Backoff(initial=0.0, jitter=0.0)


def results(events: Sequence[Event]) -> list[ToolCallFinished]:
    return [e for e in events if isinstance(e, ToolCallFinished)]


async def test_two_tools_then_finish() -> None:
    model = ScriptedModel(
        [
            call("add", a=2, b=3),
            call("lookup", key="tether"),
            finish("5; a rope that limits movement"),
        ]
    )
    outcome = await Agent(model=model, tools=[add, lookup]).run("add and look up")
    assert outcome.status == "finished"
    assert outcome.output == "5; a rope that limits movement"
    assert outcome.steps == 3
    assert outcome.tool_calls == 2
    assert [content_text(r.content) for r in results(outcome.events)] == [
        "5",
        "a rope that limits movement",
        "done",
    ]
    assert_protocol_valid(outcome.events)


async def test_requests_carry_every_tool_and_the_history() -> None:
    model = ScriptedModel([call("add", a=1, b=1), finish("2")])
    await Agent(instructions="Be exact.", model=model, tools=[add]).run("1+1")
    first, second = model.requests
    assert [t.name for t in first.tools] == ["add", "finish_task"]
    assert first.instructions.startswith("Be exact.")
    assert [m.kind for m in first.messages] == ["user"]
    assert [m.kind for m in second.messages] == ["user", "assistant", "tool_result"]


async def test_invalid_arguments_are_a_correctable_error() -> None:
    model = ScriptedModel([call("add", a=1, b="two"), call("add", a=1, b=2), finish("3")])
    outcome = await Agent(model=model, tools=[add]).run("add")
    assert outcome.status == "finished"
    first = results(outcome.events)[0]
    assert first.is_error
    assert first.synthetic
    assert first.error_type == "invalid_arguments"
    assert "b" in content_text(first.content)
    assert outcome.tool_calls == 1  # the invalid call never ran


async def test_a_tool_that_raises_becomes_an_error_result() -> None:
    model = ScriptedModel([call("explode", reason="kaboom"), finish("it failed")])
    outcome = await Agent(model=model, tools=[explode]).run("try")
    assert outcome.status == "finished"
    failed = results(outcome.events)[0]
    assert failed.is_error
    assert failed.error_type == "exception"
    assert "RuntimeError: kaboom" in content_text(failed.content)
    assert not failed.synthetic


async def test_model_retry_from_a_tool_counts_as_a_retry() -> None:
    model = ScriptedModel([call("lookup", key="nope"), call("lookup", key="agent"), finish("ok")])
    outcome = await Agent(model=model, tools=[lookup]).run("look up")
    first = results(outcome.events)[0]
    assert first.error_type == "model_retry"
    assert "unknown key 'nope'" in content_text(first.content)
    assert outcome.status == "finished"


async def test_unknown_tool_lists_the_real_ones() -> None:
    model = ScriptedModel([call("subtract", a=1, b=1), finish("gave up")])
    outcome = await Agent(model=model, tools=[add]).run("x")
    error = results(outcome.events)[0]
    assert error.error_type == "unknown_tool"
    assert "add, finish_task" in content_text(error.content)


async def test_unparseable_arguments_are_correctable() -> None:
    bad = ToolCall(
        id="c1", name="add", arguments={}, parse_error='Expecting \',\' at 1:7: {"a": 1 "b"'
    )
    outcome = await Agent(model=ScriptedModel([bad, finish("x")]), tools=[add]).run("x")
    error = results(outcome.events)[0]
    assert error.error_type == "invalid_arguments"
    assert "not a JSON object" in content_text(error.content)


class Answer(BaseModel):
    value: int
    unit: str


async def test_structured_output_is_validated_and_typed() -> None:
    model = ScriptedModel(
        [
            call("finish_task", value="many", unit="m"),
            call("finish_task", value=3, unit="m"),
        ]
    )
    outcome = await Agent(model=model, output_type=Answer).run("measure")
    assert outcome.status == "finished"
    assert outcome.output == Answer(value=3, unit="m")
    invalid = results(outcome.events)[0]
    assert invalid.error_type == "invalid_output"
    finished = outcome.events[-1]
    assert isinstance(finished, RunFinished)
    assert finished.output == {"value": 3, "unit": "m"}


async def test_plain_text_finishes_a_text_agent() -> None:
    outcome = await Agent(model=ScriptedModel(["The answer is 4."])).run("2+2")
    assert outcome.status == "finished"
    assert outcome.output == "The answer is 4."
    assert outcome.tool_calls == 0


async def test_plain_text_cut_off_by_the_output_limit_is_not_the_answer() -> None:
    # finish_reason "length": the run finished with the first half of a sentence
    replies = iter(
        [
            ModelResponse(text="The total is 1", finish_reason="length"),
            ModelResponse(text="The total is 1,234.", finish_reason="stop"),
        ]
    )
    agent = Agent(model=FunctionModel(lambda _: next(replies)))
    outcome = await agent.run("add them up")
    assert outcome.status == "finished"
    assert outcome.output == "The total is 1,234."
    responded = [e for e in outcome.events if isinstance(e, ModelResponded)]
    assert [e.cut_off for e in responded] == [True, None]
    (prompt,) = [e for e in outcome.events if isinstance(e, RetryPrompted)]
    assert "output limit" in prompt.text
    from tether.replay import replay

    assert (await replay(outcome.events, agent=agent)).ok


async def test_plain_text_does_not_finish_a_structured_agent() -> None:
    model = ScriptedModel(["3 metres", call("finish_task", value=3, unit="m")])
    outcome = await Agent(model=model, output_type=Answer).run("measure")
    assert outcome.status == "finished"
    prompts = [e for e in outcome.events if isinstance(e, RetryPrompted)]
    assert len(prompts) == 1
    assert "finish_task" in prompts[0].text


async def test_parallel_calls_are_capped_ordered_and_isolated() -> None:
    active = 0
    peak = 0
    gates = [asyncio.Event() for _ in range(5)]
    started: list[int] = []

    @tool(read_only=True, open_world=False)
    async def work(n: int) -> int:
        """Wait for gate n, then return n.

        Args:
            n: Which gate.
        """
        nonlocal active, peak
        active += 1
        peak = max(peak, active)
        started.append(n)
        try:
            if n == 2:
                raise ValueError("two is broken")
            await gates[n].wait()
            return n * 10
        finally:
            active -= 1

    async def release_in_reverse() -> None:
        # Always let the most recently started call finish first, so completion order
        # (1, 2, 3, 4, 0) differs from call order.
        released = 0
        while released < 4:
            await asyncio.sleep(0)
            waiting = [n for n in started if n != 2 and not gates[n].is_set()]
            if len(waiting) == 2 or (waiting and len(started) == 5):
                gates[max(waiting)].set()
                released += 1

    model = ScriptedModel([[call("work", n=n) for n in range(5)], finish("done")])
    agent = Agent(model=model, tools=[work], limits=Limits(max_parallel_tools=2))
    releaser = asyncio.ensure_future(release_in_reverse())
    outcome = await agent.run("work")
    await releaser
    assert outcome.status == "finished"
    assert peak == 2
    got = results(outcome.events)[:5]
    assert [r.call_id for r in got] == [f"call_0_{n}" for n in range(5)]
    assert [content_text(r.content) for r in got if not r.is_error] == ["0", "10", "30", "40"]
    assert got[2].is_error
    assert "two is broken" in content_text(got[2].content)
    assert_protocol_valid(outcome.events)


async def test_intents_are_committed_before_any_tool_runs() -> None:
    seen: list[list[str]] = []
    run_box: list[object] = []

    @tool(read_only=True, open_world=False)
    async def probe() -> str:
        """Record which events were committed when the tool started."""
        seen.append([e.kind for e in stream.events])
        return "ok"

    stream = Agent(model=ScriptedModel([call("probe"), finish("x")]), tools=[probe]).stream("x")
    run_box.append(stream)
    committed: list[str] = []
    async for event in stream:
        committed.append(event.kind)
    assert seen == [["run_started", "model_responded", "tool_call_requested", "policy_decided"]]
    assert committed[:4] == seen[0]


async def test_max_steps_gives_a_best_effort_answer_without_tools() -> None:
    model = ScriptedModel([call("add", a=1, b=1), call("add", a=2, b=2), "Partial: 2 and 4."])
    outcome = await Agent(model=model, tools=[add], limits=Limits(max_steps=2)).run("x")
    assert outcome.status == "budget_exhausted"
    assert outcome.limit == "max_steps"
    assert outcome.answer == "Partial: 2 and 4."
    assert outcome.output is None
    assert outcome.steps == 2
    final = model.requests[-1]
    assert final.tools == ()
    assert final.tool_choice == "none"
    nudge = final.messages[-1]
    assert isinstance(nudge, UserMessage)
    assert "limit (max_steps)" in nudge.text
    responded = [e for e in outcome.events if isinstance(e, ModelResponded)]
    assert responded[-1].final
    assert_protocol_valid(outcome.events)


async def test_best_effort_answer_that_calls_tools_gets_them_refused() -> None:
    model = ScriptedModel([call("add", a=1, b=1), call("add", a=5, b=5)])
    outcome = await Agent(model=model, tools=[add], limits=Limits(max_steps=1)).run("x")
    assert outcome.status == "budget_exhausted"
    last_result = results(outcome.events)[-1]
    assert last_result.synthetic
    assert last_result.error_type == "run_ended"
    assert_protocol_valid(outcome.events)


async def test_max_tool_calls_skips_the_excess_calls() -> None:
    model = ScriptedModel(
        [[call("add", a=1, b=1), call("add", a=2, b=2), call("add", a=3, b=3)], "best"]
    )
    outcome = await Agent(model=model, tools=[add], limits=Limits(max_tool_calls=2)).run("x")
    assert outcome.status == "budget_exhausted"
    assert outcome.limit == "max_tool_calls"
    assert outcome.tool_calls == 2
    skipped = results(outcome.events)[2]
    assert skipped.synthetic
    assert skipped.error_type == "limit"
    assert outcome.answer == "best"


async def test_max_tokens_refuses_a_request_that_cannot_fit_before_sending_it() -> None:
    model = ScriptedModel(
        [call("add", a=1, b=1), call("add", a=1, b=1), call("add", a=1, b=1)],
        usage=Usage(input_tokens=60, output_tokens=10),
    )
    outcome = await Agent(model=model, tools=[add], limits=Limits(max_tokens=100)).run("x")
    assert outcome.status == "budget_exhausted"
    assert outcome.limit == "max_tokens"
    # the second request holds the first's 60 tokens and more: 30 are left, so it is not sent
    assert len(model.requests) == 1
    assert model.requests[0].settings.max_output_tokens == 100
    assert outcome.usage.total_tokens == 70
    assert outcome.error is not None
    assert outcome.error.type == "NotEnoughTokensLeft"  # not too large: the budget is low
    assert "30 left of Limits.max_tokens=100" in outcome.error.message
    limit = next(e for e in outcome.events if isinstance(e, LimitReached))
    assert not limit.ask_for_answer
    assert limit.used > 130


async def test_max_tokens_caps_the_output_of_a_request_that_fits() -> None:
    model = ScriptedModel(
        [call("add", a=1, b=1)] * 5,
        usage=Usage(input_tokens=60, output_tokens=10),
    )
    outcome = await Agent(model=model, tools=[add], limits=Limits(max_tokens=250)).run("x")
    assert outcome.limit == "max_tokens"
    assert len(model.requests) == 3
    caps = [r.settings.max_output_tokens for r in model.requests]
    assert caps == [250, 180, 110]  # what is left, each time


async def test_max_cost_is_enforced_when_known() -> None:
    model = ScriptedModel([call("add", a=1, b=1)] * 5, usage=Usage(cost=0.6))
    outcome = await Agent(model=model, tools=[add], limits=Limits(max_cost=1.0)).run("x")
    assert outcome.limit == "max_cost"
    assert outcome.usage.cost == pytest.approx(1.2)


async def test_a_model_that_reports_no_cost_makes_the_cost_unknown_never_zero() -> None:
    model = ScriptedModel([call("add", a=1, b=1), finish("2")])  # no usage given: no cost
    outcome = await Agent(model=model, tools=[add], limits=Limits(max_cost=1.0)).run("x")
    assert outcome.status == "finished"
    assert outcome.usage.cost is None
    assert not outcome.usage.cost_known
    assert outcome.warnings == (
        "max_cost (1 USD) was not enforced: this run's cost is unknown, because model "
        "'scripted' reported no cost (pass price=... to its adapter, or set Usage.cost in "
        "your own model's responses)",
    )


async def test_one_unpriced_request_makes_the_whole_cost_unknown() -> None:
    priced = ModelResponse(tool_calls=(call("add", a=1, b=1),), usage=Usage(cost=0.25))
    model = FunctionModel(lambda r: priced if len(r.messages) == 1 else finish("2"))
    outcome = await Agent(model=model, tools=[add], limits=Limits(max_cost=1.0)).run("x")
    assert outcome.status == "finished"
    assert [e.usage.cost for e in outcome.events if isinstance(e, ModelResponded)] == [0.25, None]
    assert outcome.usage.cost is None
    assert "because model 'function' reported no cost" in outcome.warnings[0]


async def test_a_run_that_made_no_model_request_cost_nothing() -> None:
    model = ScriptedModel([ModelError("refused", transient=False)])
    outcome = await Agent(model=model, tools=[add], limits=Limits(max_cost=1.0)).run("x")
    assert outcome.status == "failed"
    assert outcome.usage == Usage(cost=0.0)
    assert outcome.warnings == ()


async def test_a_known_cost_within_max_cost_gives_no_warning() -> None:
    model = ScriptedModel([call("add", a=1, b=1), finish("2")], usage=Usage(cost=0.1))
    outcome = await Agent(model=model, tools=[add], limits=Limits(max_cost=1.0)).run("x")
    assert outcome.status == "finished"
    assert outcome.warnings == ()


async def test_max_seconds_stops_the_run() -> None:
    clock = FakeClock()

    @tool(read_only=True, open_world=False)
    async def slow() -> str:
        """Takes eleven (fake) seconds."""
        clock.advance(11)
        return "late"

    model = ScriptedModel([call("slow"), call("slow"), "never asked"])
    agent = Agent(model=model, tools=[slow], limits=Limits(max_seconds=10))
    outcome = await agent.run("x", clock=clock)
    assert outcome.status == "budget_exhausted"
    assert outcome.limit == "max_seconds"
    assert len(model.requests) == 1  # no best-effort call once the time is gone


async def test_tool_timeout_is_an_error_result() -> None:
    @tool(read_only=True, open_world=False, timeout=0.05)
    async def hang() -> str:
        """Never returns."""
        await asyncio.Event().wait()
        return "unreachable"

    outcome = await Agent(model=ScriptedModel([call("hang"), finish("x")]), tools=[hang]).run("x")
    timed_out = results(outcome.events)[0]
    assert timed_out.error_type == "timeout"
    assert "did not finish within 0.05s" in content_text(timed_out.content)
    assert outcome.status == "finished"


async def test_parallel_tool_timeout_spares_its_siblings() -> None:
    @tool(read_only=True, open_world=False, timeout=0.05)
    async def hang() -> str:
        """Never returns."""
        await asyncio.Event().wait()
        return "unreachable"

    model = ScriptedModel([[call("hang"), call("add", a=1, b=2)], finish("x")])
    outcome = await Agent(model=model, tools=[hang, add]).run("x")
    first, second = results(outcome.events)[:2]
    assert first.error_type == "timeout"
    assert content_text(second.content) == "3"


async def test_retries_are_bounded() -> None:
    model = ScriptedModel([call("add", a="x", b=1)] * 10)
    outcome = await Agent(model=model, tools=[add], limits=Limits(max_retries=2)).run("x")
    assert outcome.status == "budget_exhausted"
    assert outcome.limit == "max_retries"
    invalid = [r for r in results(outcome.events) if r.error_type == "invalid_arguments"]
    assert len(invalid) == 3  # the first try and two retries


async def test_transient_model_errors_are_retried() -> None:
    model = ScriptedModel(
        [
            ModelError("rate limited", transient=True),
            ModelError("503", transient=True),
            finish("ok"),
        ]
    )
    outcome = await Agent(model=model, backoff=NO_WAIT).run("x")
    assert outcome.status == "finished"
    failures = [e for e in outcome.events if isinstance(e, ModelFailed)]
    assert [(f.attempt, f.will_retry) for f in failures] == [(1, True), (2, True)]


async def test_transient_model_errors_give_up_after_max_retries() -> None:
    model = ScriptedModel([ModelError("503", transient=True)] * 5)
    outcome = await Agent(model=model, backoff=NO_WAIT, limits=Limits(max_retries=1)).run("x")
    assert outcome.status == "budget_exhausted"
    assert outcome.limit == "max_retries"
    assert outcome.error is not None
    assert outcome.error.message == "503"


async def test_a_permanent_model_error_fails_the_run() -> None:
    model = ScriptedModel([ModelError("invalid api key", transient=False)])
    outcome = await Agent(model=model).run("x")
    assert outcome.status == "failed"
    assert outcome.error is not None
    assert outcome.error.type == "ModelError"
    assert outcome.error.message == "invalid api key"


async def test_a_crashing_model_fails_the_run_without_raising() -> None:
    def broken(request: ModelRequest) -> ModelResponse:
        raise KeyError("bug in the adapter")

    outcome = await Agent(model=FunctionModel(broken)).run("x")
    assert outcome.status == "failed"
    assert outcome.error is not None
    assert outcome.error.type == "KeyError"


class DenyLookups(Policy):
    def __init__(self, *, stop: bool = False, approval: bool = False) -> None:
        self.stop = stop
        self.approval = approval

    def decide(self, call: ToolCall, tool: ToolDefinition, run: PolicyContext) -> PolicyDecision:
        if tool.name != "lookup":
            return PolicyDecision(decision="allow", rule="default", reason="fine")
        if self.approval:
            return PolicyDecision(decision="needs_approval", rule="ask", reason="a human decides")
        return PolicyDecision(
            decision="deny", rule="no_lookups", reason="lookups are off", stop_run=self.stop
        )


async def test_a_denied_call_gets_an_error_and_the_run_goes_on() -> None:
    model = ScriptedModel([[call("lookup", key="agent"), call("add", a=1, b=1)], finish("2")])
    outcome = await Agent(model=model, tools=[add, lookup], policy=DenyLookups()).run("x")
    assert outcome.status == "finished"
    denied, added = results(outcome.events)[:2]
    assert denied.error_type == "denied"
    assert "no_lookups" in content_text(denied.content)
    assert content_text(added.content) == "2"
    decisions = [(e.tool, e.decision) for e in outcome.events if isinstance(e, PolicyDecided)]
    assert decisions[:2] == [("lookup", "deny"), ("add", "allow")]


async def test_a_stopping_denial_ends_the_run_policy_denied() -> None:
    model = ScriptedModel([call("lookup", key="agent"), finish("never")])
    outcome = await Agent(model=model, tools=[lookup], policy=DenyLookups(stop=True)).run("x")
    assert outcome.status == "policy_denied"
    assert outcome.error is not None
    assert "no_lookups" in outcome.error.message
    assert_protocol_valid(outcome.events)


async def test_needs_approval_waits_with_the_exact_arguments() -> None:
    model = ScriptedModel([[call("lookup", key="agent"), call("add", a=1, b=1)], finish("x")])
    outcome = await Agent(model=model, tools=[add, lookup], policy=DenyLookups(approval=True)).run(
        "x"
    )
    assert outcome.status == "waiting_for_approval"
    assert [(p.tool, p.arguments) for p in outcome.pending] == [("lookup", {"key": "agent"})]
    assert len(results(outcome.events)) == 1  # add ran; lookup waits
    assert_protocol_valid(outcome.events)


async def test_ask_user_pauses_the_run() -> None:
    model = ScriptedModel([call("ask_user", question="Which city?")])
    outcome = await Agent(model=model, can_ask_user=True).run("weather")
    assert outcome.status == "waiting_for_user"
    assert outcome.question == "Which city?"


async def test_ask_user_is_unknown_unless_enabled() -> None:
    model = ScriptedModel([call("ask_user", question="?"), finish("x")])
    outcome = await Agent(model=model).run("x")
    assert results(outcome.events)[0].error_type == "unknown_tool"


async def test_cancel_interrupts_a_running_tool() -> None:
    started = asyncio.Event()
    interrupted: list[bool] = []

    @tool(read_only=True, open_world=False)
    async def wait_forever() -> str:
        """Blocks until cancelled."""
        started.set()
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            interrupted.append(True)
            raise
        return "unreachable"

    run = Agent(model=ScriptedModel([call("wait_forever")]), tools=[wait_forever]).stream("x")

    async def consume() -> None:
        async for _ in run:
            pass

    task = asyncio.ensure_future(consume())
    await started.wait()
    run.cancel("user pressed stop")
    await task
    outcome = run.outcome
    assert outcome.status == "cancelled"
    assert interrupted == [True]
    assert outcome.error is not None
    assert outcome.error.message == "user pressed stop"
    assert_protocol_valid(outcome.events)


async def test_cancel_between_events_stops_before_tools_run() -> None:
    ran: list[int] = []

    @tool(read_only=True, open_world=False, blocking=False)
    def side_effect(n: int) -> int:
        """Records that it ran.

        Args:
            n: A number.
        """
        ran.append(n)
        return n

    run = Agent(
        model=ScriptedModel([call("side_effect", n=1), finish("x")]), tools=[side_effect]
    ).stream("x")
    async for event in run:
        if isinstance(event, ModelResponded):
            run.cancel()
    assert run.outcome.status == "cancelled"
    assert ran == []
    assert_protocol_valid(run.outcome.events)


async def test_cancelling_the_task_records_cancelled_and_propagates(tmp_path: Path) -> None:
    started = asyncio.Event()

    @tool(read_only=True, open_world=False)
    async def wait_forever() -> str:
        """Blocks."""
        started.set()
        await asyncio.Event().wait()
        return "unreachable"

    agent = Agent(
        model=ScriptedModel([call("wait_forever")]), tools=[wait_forever], log_dir=tmp_path
    )
    task = asyncio.ensure_future(agent.run("x"))
    await started.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    (log,) = tmp_path.glob("*.jsonl")
    events = read_jsonl(log)
    last = events[-1]
    assert isinstance(last, RunFinished)
    assert last.status == "cancelled"
    assert_protocol_valid(events)


async def test_run_is_stream_consumed_to_the_end() -> None:
    def script() -> ScriptedModel:
        return ScriptedModel([[call("add", a=1, b=2), call("lookup", key="agent")], finish("done")])

    agent = Agent(tools=[add, lookup])
    streamed: list[Event] = []
    stream = agent.stream("x", model=script(), run_id="r-1", clock=FakeClock())
    async for event in stream:
        streamed.append(event)
    outcome = await agent.run("x", model=script(), run_id="r-1", clock=FakeClock())
    assert tuple(streamed) == outcome.events
    assert stream.outcome.events == outcome.events


async def test_log_dir_holds_exactly_the_run(tmp_path: Path) -> None:
    model = ScriptedModel([call("add", a=1, b=2), finish("3")])
    outcome = await Agent(model=model, tools=[add], log_dir=tmp_path / "logs").run("x")
    path = tmp_path / "logs" / f"{outcome.run_id}.jsonl"
    assert read_jsonl(path) == list(outcome.events)
    assert len(path.read_bytes().splitlines()) == len(outcome.events)


def test_run_sync_works_without_a_loop() -> None:
    outcome = Agent(model=ScriptedModel([finish("x")])).run_sync("x")
    assert outcome.status == "finished"


async def test_run_sync_inside_a_loop_is_a_user_error() -> None:
    with pytest.raises(UserError, match=r"await agent\.run"):
        Agent(model=ScriptedModel([finish("x")])).run_sync("x")


async def test_real_models_are_blocked_in_tests() -> None:
    class Real(Model):
        @property
        def name(self) -> str:
            return "real"

        async def request(self, request: ModelRequest) -> ModelResponse:
            return ModelResponse(text="should not be reached")

    with pytest.raises(ModelRequestsBlocked, match="real_model"):
        await Agent(model=Real()).run("x")


@pytest.mark.real_model
async def test_the_real_model_marker_opts_in() -> None:
    class Real(Model):
        @property
        def name(self) -> str:
            return "real"

        async def request(self, request: ModelRequest) -> ModelResponse:
            return ModelResponse(text="hello")

    outcome = await Agent(model=Real()).run("x")
    assert outcome.answer == "hello"


def test_reserved_and_duplicate_tool_names_are_refused() -> None:
    @tool(name="finish_task")
    def sneaky() -> str:
        """Pretends to finish."""
        return ""

    with pytest.raises(ConfigError, match="reserved"):
        Agent(tools=[sneaky])
    with pytest.raises(ConfigError, match="two tools are named 'add'"):
        Agent(tools=[add, add])


def test_plain_functions_become_tools() -> None:
    def multiply(a: int, b: int) -> int:
        """Multiply two integers."""
        return a * b

    agent = Agent(tools=[multiply])
    assert agent.spec.tool_names == ("multiply", "finish_task")


def test_empty_goal_is_refused() -> None:
    with pytest.raises(UserError, match="goal"):
        Agent(model=ScriptedModel([])).stream("  ")


@dataclass
class Point:
    x: int
    y: int


async def test_dataclass_and_list_outputs() -> None:
    point = await Agent(
        model=ScriptedModel([call("finish_task", x=1, y=2)]), output_type=Point
    ).run("p")
    assert point.output == Point(1, 2)
    numbers = await Agent(
        model=ScriptedModel([call("finish_task", result=[1, 2])]), output_type=list[int]
    ).run("n")
    assert numbers.output == [1, 2]


async def test_huge_integer_results_do_not_break_the_log() -> None:
    @tool(read_only=True, open_world=False, blocking=False)
    def power(exponent: int) -> int:
        """Two to a power.

        Args:
            exponent: The exponent.
        """
        return 2**exponent

    outcome = await Agent(
        model=ScriptedModel([call("power", exponent=100), finish("big")]), tools=[power]
    ).run("x")
    result = results(outcome.events)[0]
    assert content_text(result.content) == str(2**100)
    assert result.structured is None  # beyond 64 bits only the text keeps it exactly
    assert outcome.status == "finished"


async def test_a_policy_that_raises_denies_the_call() -> None:
    class Broken(Policy):
        def decide(
            self, call: ToolCall, tool: ToolDefinition, run: PolicyContext
        ) -> PolicyDecision:
            raise RuntimeError("rules file missing")

    outcome = await Agent(
        model=ScriptedModel([call("add", a=1, b=1), "gave up"]), tools=[add], policy=Broken()
    ).run("x")
    denied = results(outcome.events)[0]
    assert denied.error_type == "denied"
    assert "rules file missing" in content_text(denied.content)
    decision = next(e for e in outcome.events if isinstance(e, PolicyDecided))
    assert (decision.decision, decision.rule) == ("deny", "policy_error")


async def test_a_broken_validator_is_an_error_result_not_a_crash() -> None:
    async def handler(ctx: object, arguments: object) -> str:
        return "never"

    broken = Tool(
        definition=ToolDefinition(name="broken", description="x", input_schema={"type": "object"}),
        handler=handler,  # pyright: ignore[reportArgumentType]
        validator=lambda arguments: 1 / 0,  # pyright: ignore[reportArgumentType, reportUnknownLambdaType]
    )
    outcome = await Agent(model=ScriptedModel([call("broken"), finish("x")]), tools=[broken]).run(
        "x"
    )
    failed = results(outcome.events)[0]
    assert failed.error_type == "exception"
    assert "ZeroDivisionError" in content_text(failed.content)
    assert outcome.status == "finished"
