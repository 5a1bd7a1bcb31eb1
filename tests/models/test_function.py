"""``FunctionModel``: a function of the request, so of the run's history and nothing else."""

from __future__ import annotations

from collections.abc import Sequence

from tests.support import add
from tether import Agent, Event, ModelRequest
from tether.events import ModelResponded
from tether.messages import AssistantMessage, ToolCall, UserMessage
from tether.models.scripted import ScriptStep
from tether.testing import FunctionModel, call, finish


def add_then_finish(request: ModelRequest) -> ScriptStep:
    done = any(isinstance(m, AssistantMessage) for m in request.messages)
    return finish("3") if done else call("add", a=1, b=2)


def call_ids(events: Sequence[Event]) -> list[str]:
    return [c.id for e in events if isinstance(e, ModelResponded) for c in e.tool_calls]


async def test_calls_without_an_id_are_numbered_by_the_turns_in_the_history() -> None:
    model = FunctionModel(lambda _: [call("add", a=1, b=2), call("add", a=3, b=4)])
    history = (UserMessage(text="go"), AssistantMessage(text="one"), AssistantMessage(text="two"))
    response = await model.request(ModelRequest(instructions="", messages=history, tools=()))
    assert [c.id for c in response.tool_calls] == ["call_2_0", "call_2_1"]
    kept = FunctionModel(lambda _: ToolCall(id="mine", name="add", arguments={}))
    response = await kept.request(ModelRequest(instructions="", messages=history, tools=()))
    assert [c.id for c in response.tool_calls] == ["mine"]


async def test_every_run_of_one_model_gets_the_same_call_ids() -> None:
    agent = Agent(model=FunctionModel(add_then_finish), tools=[add])
    first = await agent.run("add 1 and 2")
    second = await agent.run("add 1 and 2")
    assert (first.output, second.output) == ("3", "3")
    assert call_ids(first.events) == call_ids(second.events) == ["call_0_0", "call_1_0"]
