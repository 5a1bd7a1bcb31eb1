"""Edge cases an independent review found: cancellation races, odd models and tools."""

from __future__ import annotations

import asyncio
import contextlib
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

import pytest

from tether import (
    Agent,
    Limits,
    ModelRequest,
    ModelResponse,
    ModelSettings,
    RulePolicy,
    Usage,
    allow,
    tool,
)
from tether.codec import encode_event, read_jsonl
from tether.content import content_text
from tether.errors import ApprovalRequired, ConfigError
from tether.events import Event, ModelFailed, RunFinished, ToolCallFinished
from tether.loop import AgentRun
from tether.messages import ToolCall, ToolResultMessage
from tether.models.base import Model
from tether.testing import FunctionModel, ScriptedModel, call, finish

from .support import add, assert_protocol_valid


def results(events: tuple[Event, ...]) -> list[ToolCallFinished]:
    return [e for e in events if isinstance(e, ToolCallFinished)]


async def test_an_outer_timeout_racing_the_model_timeout_still_reaches_the_caller() -> None:
    outer = asyncio.timeout(None)

    async def slow(request: ModelRequest) -> ModelResponse:
        # Set from inside the model call, however long the run took to get here: both
        # deadlines lie within the block below, so they fall due together.
        outer.reschedule(asyncio.get_running_loop().time() + 0.05)
        time.sleep(0.15)  # noqa: ASYNC251 - block the loop: both deadlines fall due together
        await asyncio.sleep(10)
        return ModelResponse(text="late")

    agent = Agent(model=FunctionModel(slow), model_settings=ModelSettings(timeout=0.1))
    with pytest.raises(TimeoutError):
        async with outer:
            await agent.run("go")


async def test_cancel_from_inside_the_run_does_not_leak_into_the_caller() -> None:
    box: list[AgentRun[str]] = []

    @tool(read_only=True, open_world=False)
    async def stop_myself() -> str:
        """Asks the run it belongs to to stop."""
        box[0].cancel("the tool asked to stop")
        return "side effect committed"

    run = Agent(
        model=ScriptedModel([call("stop_myself"), finish("x")]), tools=[stop_myself]
    ).stream("x")
    box.append(run)
    async for _ in run:
        pass
    assert run.outcome.status == "cancelled"
    assert content_text(results(run.outcome.events)[0].content) == "side effect committed"
    task = asyncio.current_task()
    assert task is not None
    assert task.cancelling() == 0
    await asyncio.sleep(0)  # would raise if a cancellation had leaked


@pytest.mark.parametrize("parallel", [False, True])
async def test_a_tool_raising_cancelled_error_is_a_tool_error(parallel: bool) -> None:
    @tool(read_only=True, open_world=False)
    async def flaky() -> str:
        """Raises CancelledError although nobody cancelled anything."""
        raise asyncio.CancelledError

    @tool(read_only=True, open_world=False)
    async def fine() -> str:
        """Works."""
        return "fine"

    first = [call("flaky"), call("fine")] if parallel else call("flaky")
    outcome = await Agent(model=ScriptedModel([first, finish("done")]), tools=[flaky, fine]).run(
        "x"
    )
    assert outcome.status == "finished"
    failed = results(outcome.events)[0]
    assert failed.error_type == "exception"
    assert "CancelledError" in content_text(failed.content)
    assert_protocol_valid(outcome.events)


async def test_calls_after_finish_task_do_not_run() -> None:
    ran: list[str] = []

    @tool(destructive=True)
    async def delete_all() -> str:
        """Deletes everything."""
        ran.append("delete_all")
        return "deleted"

    model = ScriptedModel([[finish("done"), call("delete_all")]])
    outcome = await Agent(model=model, tools=[delete_all]).run("x")
    assert outcome.status == "finished"
    assert ran == []
    assert results(outcome.events)[1].error_type == "after_finish"


async def test_a_cancelled_parallel_turn_keeps_the_results_that_arrived() -> None:
    started, returned = asyncio.Event(), asyncio.Event()

    @tool(read_only=True, open_world=False)
    async def hang() -> str:
        """Never returns."""
        started.set()
        await asyncio.Event().wait()
        return "never"

    @tool(read_only=True, open_world=False)
    async def quick() -> str:
        """Returns at once."""
        returned.set()
        return "quick done"

    run = Agent(model=ScriptedModel([[call("hang"), call("quick")]]), tools=[hang, quick]).stream(
        "x"
    )

    async def consume() -> None:
        async for _ in run:
            pass

    consumer = asyncio.ensure_future(consume())
    await asyncio.wait_for(asyncio.gather(started.wait(), returned.wait()), 30)
    for _ in range(10):  # its result reaches the turn in a few loop turns (no thread, no timer)
        await asyncio.sleep(0)
    run.cancel("user hit stop")
    await consumer
    by_call = {r.call_id: r for r in results(run.outcome.events)}
    assert content_text(by_call["call_0_1"].content) == "quick done"
    assert not by_call["call_0_1"].synthetic
    assert "interrupted" in content_text(by_call["call_0_0"].content)
    assert_protocol_valid(run.outcome.events)


async def test_an_output_validator_that_raises_is_a_correctable_error() -> None:
    @dataclass
    class Picky:
        value: int

        def __post_init__(self) -> None:
            if self.value == 13:
                raise KeyError("unlucky")

    model = ScriptedModel([call("finish_task", value=13), call("finish_task", value=7)])
    outcome = await Agent(model=model, output_type=Picky).run("x")
    assert outcome.status == "finished"
    assert outcome.output == Picky(7)
    assert results(outcome.events)[0].error_type == "invalid_output"


async def test_a_model_returning_garbage_fails_the_run_cleanly() -> None:
    class Broken(Model):
        real = False

        @property
        def name(self) -> str:
            return "broken"

        async def request(self, request: ModelRequest) -> ModelResponse:
            return cast(ModelResponse, "not a response")

    outcome = await Agent(model=Broken()).run("x")
    assert outcome.status == "failed"
    assert outcome.error is not None
    assert "not a ModelResponse" in outcome.error.message
    assert isinstance(outcome.events[-1], RunFinished)


async def test_running_out_of_time_in_a_model_call_is_recorded() -> None:
    async def slow(request: ModelRequest) -> ModelResponse:
        await asyncio.sleep(10)
        return ModelResponse(text="late")

    outcome = await Agent(model=FunctionModel(slow), limits=Limits(max_seconds=0.1)).run("x")
    assert outcome.limit == "max_seconds"
    assert [e.kind for e in outcome.events] == [
        "run_started",
        "model_failed",
        "limit_reached",
        "run_finished",
    ]
    failed = outcome.events[1]
    assert isinstance(failed, ModelFailed)
    assert failed.error.type == "TimeoutError"


async def test_duplicate_and_empty_call_ids_are_made_unique() -> None:
    calls = (
        ToolCall(id="x", name="add", arguments={"a": 1, "b": 2}),
        ToolCall(id="x", name="add", arguments={"a": 3, "b": 4}),
    )
    model = ScriptedModel([ModelResponse(tool_calls=calls), finish("3 and 7")])
    outcome = await Agent(model=model, tools=[add]).run("x")
    ids = [r.call_id for r in results(outcome.events)[:2]]
    assert len(set(ids)) == 2
    assert_protocol_valid(outcome.events)
    history = model.requests[1].messages
    assert [m.call_id for m in history if m.kind == "tool_result"] == ids


async def test_a_scripted_model_string_is_fresh_for_every_run(tmp_path: Path) -> None:
    script = tmp_path / "script.json"
    script.write_text('[{"tool_calls": [{"name": "finish_task", "arguments": {"answer": "ok"}}]}]')
    agent = Agent(model=f"scripted:{script}")
    first = await agent.run("x")
    second = await agent.run("y")
    assert (first.status, second.status) == ("finished", "finished")


async def test_leaving_the_stream_early_ends_the_run_cancelled(tmp_path: Path) -> None:
    agent = Agent(
        model=ScriptedModel([call("add", a=1, b=2), finish("3")]), tools=[add], log_dir=tmp_path
    )
    async with agent.stream("x") as run:
        async for event in run:
            if event.kind == "policy_decided":
                break
    assert run.outcome.status == "cancelled"
    (log,) = tmp_path.glob("*.jsonl")
    last = read_jsonl(log)[-1]
    assert isinstance(last, RunFinished)
    assert last.status == "cancelled"


@pytest.mark.parametrize("value", [float("inf"), float("nan"), -1.0])
def test_limits_must_be_finite_and_non_negative(value: float) -> None:
    with pytest.raises(ConfigError, match="finite number"):
        Limits(max_seconds=value)


@pytest.mark.parametrize("name", ["max_steps", "max_tokens", "max_tool_calls"])
def test_a_count_beyond_64_bits_is_a_config_error(name: str) -> None:
    # the log holds counts as 64-bit integers: one beyond that used to fail in Agent()
    with pytest.raises(ConfigError, match=r"from 0 to 2\*\*63 - 1"):
        Limits(**cast(dict[str, Any], {name: 2**64}))
    assert getattr(Limits(**cast(dict[str, Any], {name: 2**63 - 1})), name) == 2**63 - 1


async def test_max_steps_zero_makes_no_model_call() -> None:
    model = ScriptedModel(["never"])
    outcome = await Agent(model=model, limits=Limits(max_steps=0)).run("x")
    assert outcome.status == "budget_exhausted"
    assert model.requests == []


@tool(read_only=True, open_world=False)
def stats() -> dict[str, float]:
    """Summary statistics of an empty sample."""
    return {"count": 0.0, "mean": float("nan")}


async def test_a_tool_result_holding_nan_is_logged_and_shown_as_an_error() -> None:
    seen: list[ToolResultMessage] = []

    def model(request: ModelRequest) -> ModelResponse:
        last = request.messages[-1]
        if not isinstance(last, ToolResultMessage):
            return ModelResponse(tool_calls=(ToolCall(id="s", name="stats", arguments={}),))
        seen.append(last)
        return ModelResponse(tool_calls=(finish("no stats"),))

    outcome = await Agent(model=FunctionModel(model), tools=[stats]).run("go")

    [finished] = [r for r in results(outcome.events) if r.tool == "stats"]
    assert (finished.is_error, finished.error_type, finished.structured) == (
        True,
        "tool_error",
        None,
    )
    message = "the tool's result holds nan (at mean), a number JSON cannot carry"
    assert content_text(finished.content).startswith(message)
    assert [(m.is_error, content_text(m.content)[: len(message)]) for m in seen] == [
        (True, message)
    ]
    assert_protocol_valid(outcome.events)


async def test_a_tool_raising_approval_required_fails_the_call_with_its_reason() -> None:
    # what ApprovalRequired does, as its docstring says: the run does not stop to ask anyone
    paid: list[int] = []

    @tool(open_world=False)
    def pay(amount: int) -> str:
        """Pay an invoice.

        Args:
            amount: Euros.
        """
        if amount > 100:
            raise ApprovalRequired("payments over 100 need a human")
        paid.append(amount)
        return "paid"

    model = ScriptedModel([call("pay", amount=250), finish("not paid")])
    outcome = await Agent(model=model, tools=[pay], policy=RulePolicy(None, allow("pay"))).run(
        "pay"
    )
    assert outcome.status == "finished"
    assert paid == []
    (result,) = [e for e in outcome.events if isinstance(e, ToolCallFinished) and e.tool == "pay"]
    assert result.is_error
    assert result.error_type == "approval_required"
    assert content_text(result.content) == "pay needs approval: payments over 100 need a human"


async def test_a_stream_consumer_that_changes_an_event_changes_nothing_of_the_run() -> None:
    # the events handed out were the run's own: editing a call's arguments broke its chain,
    # in memory and in the MemoryStore that held the same objects
    from tether.codec import verify_chain
    from tether.events import ToolCallRequested
    from tether.stores import MemoryStore

    store = MemoryStore()
    script = ScriptedModel([call("add", a=1, b=2), call("add", a=3, b=4), finish("7")])
    agent = Agent(name="streamed", model=script, tools=[add], store=store)
    run = agent.stream("add twice")
    async for event in run:
        if isinstance(event, ToolCallRequested):
            event.arguments["a"] = 1000
    assert run.outcome.status == "finished"
    verify_chain(run.outcome.events)
    verify_chain(await store.read(run.outcome.run_id))
    assert all(
        e.arguments.get("a") != 1000 for e in run.outcome.events if isinstance(e, ToolCallRequested)
    )


@pytest.mark.parametrize(
    ("response", "wrong"),
    [
        (ModelResponse(text="hi", usage=Usage(input_tokens=float("nan"))), "usage"),  # pyright: ignore[reportArgumentType]
        (ModelResponse(text="hi", usage=Usage(input_tokens=None)), "usage"),  # pyright: ignore[reportArgumentType]
        (ModelResponse(text="hi", usage=Usage(output_tokens=-5)), "usage"),
        (ModelResponse(text=42), "text is int"),  # pyright: ignore[reportArgumentType]
        (ModelResponse(text="hi", reasoning=5), "reasoning is int"),  # pyright: ignore[reportArgumentType]
    ],
)
async def test_a_response_the_log_cannot_hold_is_a_failed_request(
    response: ModelResponse, wrong: str
) -> None:
    # NaN tokens were recorded, and the stored log could not be read back; None tokens made
    # the fold fail after the event was added, and it was recorded twice
    from tether.codec import decode_event, encode_event
    from tether.events import ModelFailed, ModelResponded

    agent = Agent(name="bad", model=FunctionModel(lambda _: response), limits=Limits(max_retries=0))
    outcome = await agent.run("hi")
    assert outcome.status == "failed"
    assert not [e for e in outcome.events if isinstance(e, ModelResponded)]
    (failed,) = [e for e in outcome.events if isinstance(e, ModelFailed)]
    assert wrong in failed.error.message
    assert [decode_event(encode_event(e)) for e in outcome.events] == list(outcome.events)


async def test_text_of_a_str_subclass_is_text() -> None:
    class Markup(str):
        """Like markupsafe's: a str subclass an adapter may hand back."""

    agent = Agent(name="ok", model=FunctionModel(lambda _: ModelResponse(text=Markup("fine"))))
    outcome = await agent.run("hi")
    assert outcome.status == "finished"
    assert outcome.output == "fine"


async def test_an_agent_run_inside_a_tool_is_cancelled_with_its_caller(tmp_path: Path) -> None:
    # both runs shared the caller's task, so each took the other's cancellation for its own:
    # wait_for's timeout was swallowed (the caller "finished" after the sub-run's 2 s), and
    # cancel() left the sub-run stored "running", its lease held
    from tether.stores import SqliteStore

    store = SqliteStore(tmp_path / "t.db")

    @tool(read_only=True, open_world=False)
    async def research(topic: str) -> str:
        """Slow research.

        Args:
            topic: What.
        """
        await asyncio.sleep(2)
        return "notes"

    def sub() -> Agent:
        script = ScriptedModel([call("research", topic="x"), finish("notes")])
        return Agent(name="researcher", model=script, tools=[research], store=store)

    @tool(read_only=False, open_world=False)
    async def delegate(question: str) -> str:
        """Ask the researcher.

        Args:
            question: What to research.
        """
        return (await sub().run(question)).status

    def top() -> Agent:
        script = ScriptedModel([call("delegate", question="x"), finish("done")])
        return Agent(name="lead", model=script, tools=[delegate], store=store)

    started = time.monotonic()
    with pytest.raises(TimeoutError):
        await asyncio.wait_for(top().run("go"), 0.3)
    run = top().stream("go")
    asyncio.get_running_loop().call_later(0.3, run.cancel, "stop")
    await run.consume()
    assert run.outcome.status == "cancelled"
    assert time.monotonic() - started < 1.8
    stored = await store.runs()
    assert len(stored) == 4
    assert {r.status for r in stored} == {"cancelled"}
    await store.close()


async def test_a_callers_timeout_holds_when_a_tool_or_the_model_swallows_it() -> None:
    # wait_for(agent.run(...), 0.3) returned "finished" 6 s later: the inline tool caught the
    # cancellation, and the run went on to its next call (the model: the same)
    @tool(read_only=True, open_world=False)
    async def stubborn() -> str:
        """Close gracefully, whatever it takes."""
        try:
            await asyncio.sleep(3)
        except asyncio.CancelledError:
            await asyncio.sleep(1)  # its own graceful close: then the cancellation goes on
        return "closed"

    agent = Agent(
        model=ScriptedModel([call("stubborn"), call("stubborn"), finish("done")]), tools=[stubborn]
    )
    started = time.monotonic()
    with pytest.raises(TimeoutError):
        await asyncio.wait_for(agent.run("close it"), 0.3)
    assert time.monotonic() - started < 2.5  # not the next call's 3 s too

    async def swallowing(request: ModelRequest) -> ModelResponse:
        try:
            await asyncio.sleep(3)
        except asyncio.CancelledError:
            await asyncio.sleep(0.5)
        return ModelResponse(text="done")

    started = time.monotonic()
    with pytest.raises(TimeoutError):
        await asyncio.wait_for(Agent(model=FunctionModel(swallowing)).run("hi"), 0.2)
    assert time.monotonic() - started < 2.5


async def test_a_model_that_swallows_the_runs_own_timeout_does_not_cancel_the_run() -> None:
    # its timeout's cancellation stayed on the task; after the next call it was taken for the
    # owner's, and the run raised CancelledError
    @tool(read_only=True, open_world=False)
    async def ping() -> str:
        """Ping."""
        await asyncio.sleep(0.01)
        return "pong"

    asked: list[int] = []

    async def slow_first(request: ModelRequest) -> ModelResponse:
        asked.append(1)
        if len(asked) == 1:
            with contextlib.suppress(asyncio.CancelledError):  # swallowed: it answers anyway
                await asyncio.sleep(1)  # past the request's timeout
        if len(asked) <= 2:
            return ModelResponse(tool_calls=(call("ping"),))
        return ModelResponse(tool_calls=(finish("done"),))

    agent = Agent(
        model=FunctionModel(slow_first), tools=[ping], model_settings=ModelSettings(timeout=0.2)
    )
    outcome = await agent.run("go")
    assert outcome.status == "finished", outcome.error


def test_a_list_of_tool_calls_is_taken_as_a_tuple() -> None:
    response = ModelResponse(tool_calls=[ToolCall(id="c", name="add", arguments={})])  # pyright: ignore[reportArgumentType]
    assert response.tool_calls == (ToolCall(id="c", name="add", arguments={}),)


async def test_a_model_answer_too_large_to_take_fails_the_request_and_is_not_recorded() -> None:
    # before: 50 MB of arguments were recorded in the log and held in memory (440 MB RSS)
    from tether.run.modelstep import MAX_ANSWER_BYTES

    huge = "x" * (MAX_ANSWER_BYTES + 1)
    model = ScriptedModel([call("add", a=1, b=2, note=huge), finish("done")])
    outcome = await Agent(model=model, tools=[add]).run("x")
    assert outcome.status == "failed"
    assert outcome.error is not None
    assert "MiB of JSON; tether takes at most 8 MiB in one answer" in outcome.error.message
    assert [e.kind for e in outcome.events] == ["run_started", "model_failed", "run_finished"]
    assert sum(len(encode_event(e)) for e in outcome.events) < 10_000


async def test_a_model_answer_under_the_cap_is_taken() -> None:
    from tether.run.modelstep import MAX_ANSWER_BYTES

    text = "y" * (MAX_ANSWER_BYTES // 2)
    model = ScriptedModel([ModelResponse(text=text, tool_calls=(finish("done"),))])
    outcome = await Agent(model=model).run("x")
    assert outcome.status == "finished"


@tool(read_only=True, open_world=False, timeout=0.2)
async def sleepy() -> str:
    """Sleeps past its own timeout."""
    await asyncio.sleep(5)
    return "woke"


def sleepy_sub(store: object = None) -> Agent:
    script = ScriptedModel([call("sleepy"), finish("sub done")])
    return Agent(name="sub", model=script, tools=[sleepy], store=store)  # pyright: ignore[reportArgumentType]


async def test_a_sub_agent_streamed_inside_a_tool_keeps_its_timeouts_to_itself() -> None:
    # before: the sub-run's tool timeout cancelled the caller's task (they shared it), the
    # caller's call took it for its owner's, and agent.run raised a bare CancelledError
    @tool(read_only=True, open_world=False)
    async def delegate() -> str:
        """Ask the sub-agent, following its events."""
        run = sleepy_sub().stream("x")
        kinds = [event.kind async for event in run]
        await asyncio.sleep(0.05)  # the caller's tool goes on after the sub-run
        return f"{run.outcome.status}: {kinds.count('tool_call_finished')} results"

    agent = Agent(model=ScriptedModel([call("delegate"), finish("done")]), tools=[delegate])
    outcome = await asyncio.wait_for(agent.run("go"), 30)
    assert outcome.status == "finished"
    assert content_text(results(outcome.events)[0].content) == "finished: 2 results"


async def test_a_streamed_sub_agent_is_cancelled_with_its_caller_and_closed_when_left() -> None:
    from tether.stores import MemoryStore

    store = MemoryStore()

    @tool(read_only=True, open_world=False)
    async def follow() -> str:
        """Follow the sub-agent to its end."""
        async for _ in sleepy_sub(store).stream("x"):
            pass
        return "followed"

    @tool(read_only=True, open_world=False)
    async def peek() -> str:
        """Read the sub-agent's first event, then leave."""
        run = sleepy_sub(store).stream("x")
        async with run:
            async for event in run:
                return event.kind
        return "nothing"

    caller = Agent(model=ScriptedModel([call("follow"), finish("done")]), tools=[follow])
    with pytest.raises(TimeoutError):
        await asyncio.wait_for(caller.run("go"), 0.1)
    peeker = Agent(model=ScriptedModel([call("peek"), finish("done")]), tools=[peek])
    outcome = await asyncio.wait_for(peeker.run("go"), 30)
    assert content_text(results(outcome.events)[0].content) == "run_started"
    runs = await store.runs()
    assert len(runs) == 2
    assert {r.status for r in runs} == {"cancelled"}  # neither left "running"


async def test_a_best_effort_answer_too_large_to_take_is_a_failed_request_too() -> None:
    # before: the cap held for every step but the best-effort answer after a limit, which was
    # recorded whole (20 MiB in one model_responded)
    from tether.run.modelstep import MAX_ANSWER_BYTES

    def answer(request: ModelRequest) -> ModelResponse:
        if request.tool_choice == "none":  # the tool-free answer after the limit
            return ModelResponse(text="z" * (MAX_ANSWER_BYTES + 1))
        return ModelResponse(tool_calls=(call("add", a=1, b=2),))

    outcome = await Agent(model=FunctionModel(answer), tools=[add], limits=Limits(max_steps=1)).run(
        "x"
    )
    assert outcome.status == "budget_exhausted"
    failed = [e for e in outcome.events if isinstance(e, ModelFailed)]
    assert len(failed) == 1
    assert "tether takes at most 8 MiB in one answer" in failed[0].error.message
    assert sum(len(encode_event(e)) for e in outcome.events) < 20_000
