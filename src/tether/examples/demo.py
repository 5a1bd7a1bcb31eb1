"""The bundled example: an assistant with calculator and clock tools.

``tether demo`` runs it on a *scripted* model (a fixed, deterministic function, no AI): it
calls ``calculate`` and ``days_until`` in one turn, then answers from their results. It shows
the runtime (events, parallel tools, validation, the log) without a real model; ``tether
run`` with a real model configured runs the same agent for real.
"""

from __future__ import annotations

from typing import cast

from tether.agent import Agent
from tether.content import content_text
from tether.messages import FINISH_TASK, ToolCall, ToolResultMessage
from tether.models.base import ModelRequest, ModelResponse
from tether.models.function import FunctionModel
from tether.tools.builtin import calculate, current_time, days_until

__all__ = ["DEMO_GOAL", "assistant", "demo_agent", "scripted_demo_model"]

DEMO_GOAL = "What is 17% of 2,340, and how many days until 2027-01-01?"

INSTRUCTIONS = (
    "You are a precise assistant. Use `calculate` for every arithmetic step and "
    "`days_until` / `current_time` for anything about dates; never compute in your head. "
    "Answer briefly."
)


def _scripted(request: ModelRequest) -> ModelResponse:
    """Turn 1: call both tools at once. Turn 2: answer from their results."""
    results = {
        m.name: content_text(m.content)
        for m in request.messages
        if isinstance(m, ToolResultMessage)
    }
    if not results:
        return ModelResponse(
            text="I will compute the percentage and count the days.",
            tool_calls=(
                ToolCall(id="call_1", name="calculate", arguments={"expression": "17% * 2340"}),
                ToolCall(id="call_2", name="days_until", arguments={"target": "2027-01-01"}),
            ),
        )
    import orjson

    days = cast(dict[str, object], orjson.loads(results["days_until"]))
    answer = f"17% of 2,340 is {results['calculate']}, and there are {days['days']} days until 2027-01-01."
    return ModelResponse(
        tool_calls=(ToolCall(id="call_3", name=FINISH_TASK, arguments={"answer": answer}),)
    )


def scripted_demo_model() -> FunctionModel:
    """The demo's scripted model (deterministic; not a language model)."""
    return FunctionModel(_scripted, name="scripted-demo")


def assistant(model: str | None = None) -> Agent:
    """The example assistant: calculator and clock tools, on ``model`` (``None``: configured)."""
    return Agent(
        name="assistant",
        instructions=INSTRUCTIONS,
        model=model,
        tools=[calculate, days_until, current_time],
    )


demo_agent: Agent = Agent(
    name="assistant",
    instructions=INSTRUCTIONS,
    model=scripted_demo_model(),
    tools=[calculate, days_until, current_time],
)
"""The example assistant on the scripted demo model (``tether demo``; importable for replay)."""
