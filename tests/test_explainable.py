"""Seed 000's ADR-004 test: a run can be explained from its event log alone."""

from __future__ import annotations

from tether import Agent, ModelResponse
from tether.codec import verify_chain
from tether.content import content_text
from tether.events import (
    ModelResponded,
    PolicyDecided,
    RunFinished,
    RunStarted,
    ToolCallFinished,
    ToolCallRequested,
)
from tether.state import fold
from tether.testing import ScriptedModel, call, finish

from .support import add, explode, lookup


async def test_agent_loop_is_explainable_from_the_log() -> None:
    model = ScriptedModel(
        [
            ModelResponse(
                text="I will add first, and try the network.",
                tool_calls=(call("add", a=2, b=2), call("explode", reason="no network")),
            ),
            call("lookup", key="agent"),
            finish("4; one who acts"),
        ]
    )
    outcome = await Agent(model=model, tools=[add, lookup, explode]).run("add, fail once, look up")
    events = outcome.events
    kinds = [e.kind for e in events]

    # Every decision is an event: the start, each model turn, each call's intent, the policy's
    # decision and the result, and the end.
    assert kinds[0] == "run_started"
    assert kinds[-1] == "run_finished"
    assert kinds.count("model_responded") == outcome.steps == 3
    calls = [c for e in events if isinstance(e, ModelResponded) for c in e.tool_calls]
    for c in calls:
        intent = [e for e in events if isinstance(e, ToolCallRequested) and e.call_id == c.id]
        decision = [e for e in events if isinstance(e, PolicyDecided) and e.call_id == c.id]
        result = [e for e in events if isinstance(e, ToolCallFinished) and e.call_id == c.id]
        assert len(intent) == len(decision) == len(result) == 1, c
        # reasoning (the model's turn) precedes the action, the intent precedes the decision,
        # the decision precedes the result
        turn = next(e for e in events if isinstance(e, ModelResponded) and c in e.tool_calls)
        assert turn.seq < intent[0].seq < decision[0].seq < result[0].seq
        assert intent[0].arguments == c.arguments
        assert intent[0].reason == (turn.text or None)  # the model's stated reason travels along

    # Each event describes itself: run, position, time, and its link in the chain.
    for position, event in enumerate(events):
        assert event.run_id == outcome.run_id
        assert event.seq == position
        assert event.at.tzinfo is not None
    verify_chain(events)

    # The failure and its cause are in the log, not only in a return value.
    failed = [e for e in events if isinstance(e, ToolCallFinished) and e.is_error]
    assert [(e.tool, content_text(e.content)) for e in failed] == [
        ("explode", "explode failed: RuntimeError: no network")
    ]

    # The outcome can be rebuilt from the events alone.
    state = fold(events)
    end = events[-1]
    assert isinstance(end, RunFinished)
    assert isinstance(events[0], RunStarted)
    assert (end.status, end.answer, end.steps, end.tool_calls) == (
        outcome.status,
        outcome.answer,
        outcome.steps,
        outcome.tool_calls,
    )
    assert (state.steps, state.tool_calls, state.usage) == (
        outcome.steps,
        outcome.tool_calls,
        outcome.usage,
    )
    assert state.goal == events[0].goal == "add, fail once, look up"
