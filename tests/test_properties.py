"""Invariants of the loop, for random scripted models and random limits (hypothesis)."""

from __future__ import annotations

import asyncio
from pathlib import Path
from tempfile import TemporaryDirectory

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tether import Agent, Limits
from tether.codec import decode_event, encode_event, read_jsonl, verify_chain, write_jsonl
from tether.errors import ModelError
from tether.events import ModelResponded, RunFinished
from tether.messages import ToolCall
from tether.outcome import RunOutcome
from tether.retry import Backoff
from tether.state import fold
from tether.testing import FakeClock, ScriptedModel, ScriptStep

from .support import add, assert_protocol_valid, executed_tool_calls, explode, lookup

STATUSES = {"finished", "budget_exhausted", "policy_denied", "failed", "cancelled"}


def add_call(a: int, b: int) -> ToolCall:
    return ToolCall(id="", name="add", arguments={"a": a, "b": b})


def model_error(transient: bool) -> ModelError:
    return ModelError("flaky", transient=transient)


def with_id(call: ToolCall, call_id: str) -> ToolCall:
    return ToolCall(id=call_id, name=call.name, arguments=call.arguments)


plain_calls = st.one_of(
    st.builds(add_call, st.integers(-9, 9), st.integers(-9, 9)),
    st.just(ToolCall(id="", name="add", arguments={"a": "x"})),  # invalid arguments
    st.sampled_from(["agent", "tether", "missing"]).map(
        lambda k: ToolCall(id="", name="lookup", arguments={"key": k})
    ),
    st.just(ToolCall(id="", name="explode", arguments={"reason": "boom"})),
    st.just(ToolCall(id="", name="nope", arguments={})),  # unknown tool
    st.just(ToolCall(id="", name="finish_task", arguments={"answer": "done"})),
    st.just(ToolCall(id="", name="finish_task", arguments={"wrong": 1})),  # invalid output
)
# Models may give ids of their own, repeat them within a turn, or reuse them in later turns.
calls = st.one_of(
    plain_calls, st.builds(with_id, plain_calls, st.sampled_from(["x", "call_0", "dup"]))
)
steps: st.SearchStrategy[ScriptStep] = st.one_of(
    st.text(max_size=20),
    calls,
    st.lists(calls, min_size=1, max_size=4),
    st.builds(model_error, st.booleans()),
)
limits = st.builds(
    Limits,
    max_steps=st.integers(1, 6),
    max_tool_calls=st.integers(0, 8),
    max_retries=st.integers(0, 3),
    max_parallel_tools=st.integers(1, 3),
)

SETTINGS = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def run_script(script: list[ScriptStep], lim: Limits, run_id: str = "run-1") -> RunOutcome:
    agent = Agent(
        tools=[add, lookup, explode], limits=lim, backoff=Backoff(initial=0.0, jitter=0.0)
    )
    return asyncio.run(
        agent.run("go", model=ScriptedModel(script), run_id=run_id, clock=FakeClock())
    )


@SETTINGS
@given(script=st.lists(steps, max_size=10), lim=limits)
def test_the_loop_always_ends_within_its_limits(script: list[ScriptStep], lim: Limits) -> None:
    outcome = run_script(script, lim)
    events = outcome.events
    assert outcome.status in STATUSES
    assert isinstance(events[-1], RunFinished)
    verify_chain(events)
    turns = [e for e in events if isinstance(e, ModelResponded)]
    assert len([t for t in turns if not t.final]) <= lim.max_steps
    assert len([t for t in turns if t.final]) <= 1
    assert outcome.steps <= lim.max_steps
    assert executed_tool_calls(events) <= lim.max_tool_calls
    assert outcome.tool_calls == executed_tool_calls(events)
    # the model is never asked more often than its limits allow
    assert len(turns) <= lim.max_steps + 1
    state = fold(events)
    assert (state.steps, state.tool_calls) == (outcome.steps, outcome.tool_calls)
    assert state.finished == events[-1]


@SETTINGS
@given(script=st.lists(steps, max_size=10), lim=limits)
def test_every_tool_call_gets_exactly_one_result(script: list[ScriptStep], lim: Limits) -> None:
    assert_protocol_valid(run_script(script, lim).events)


@SETTINGS
@given(script=st.lists(steps, max_size=8), lim=limits)
def test_run_and_stream_record_the_same_events(script: list[ScriptStep], lim: Limits) -> None:
    agent = Agent(
        tools=[add, lookup, explode], limits=lim, backoff=Backoff(initial=0.0, jitter=0.0)
    )

    async def both() -> tuple[list[object], RunOutcome]:
        streamed: list[object] = []
        async for event in agent.stream(
            "go", model=ScriptedModel(script), run_id="r", clock=FakeClock()
        ):
            streamed.append(event)
        ran = await agent.run("go", model=ScriptedModel(script), run_id="r", clock=FakeClock())
        return streamed, ran

    streamed, ran = asyncio.run(both())
    assert tuple(streamed) == ran.events


@SETTINGS
@given(script=st.lists(steps, max_size=8), lim=limits)
def test_logs_round_trip_through_jsonl(script: list[ScriptStep], lim: Limits) -> None:
    events = run_script(script, lim).events
    for event in events:
        encoded = encode_event(event)
        assert decode_event(encoded) == event
        assert encode_event(decode_event(encoded)) == encoded
    with TemporaryDirectory() as tmp:
        path = Path(tmp) / "run.jsonl"
        write_jsonl(path, events)
        assert read_jsonl(path) == list(events)


@SETTINGS
@given(script=st.lists(steps, max_size=8), lim=limits)
def test_the_fold_of_any_prefix_is_consistent(script: list[ScriptStep], lim: Limits) -> None:
    events = run_script(script, lim).events
    previous_steps = 0
    for end in range(1, len(events) + 1):
        state = fold(events[:end])
        assert state.last_seq == end - 1
        assert state.last_hash == events[end - 1].hash
        assert state.steps >= previous_steps  # steps never go back
        previous_steps = state.steps
