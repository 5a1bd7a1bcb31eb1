"""The embedded default model (Qwen2.5-Coder-1.5B, in-process) runs a real agent end to end."""

from __future__ import annotations

import asyncio
import urllib.request
from functools import partial
from pathlib import Path
from typing import Any

import orjson
import pytest
from pydantic import BaseModel

from tests.realmodel.conftest import SERVED_NAME
from tests.realmodel.scenario import GOAL, agent, check
from tests.support import add
from tether import Agent, ModelRequest
from tether.events import ModelResponded
from tether.messages import UserMessage
from tether.models.local import LocalModel, local_body, local_step
from tether.stores import SqliteStore
from tether.testing import ScriptedModel
from tether.tools import tool
from tether.tools.builtin import calculate, current_time, days_until

pytestmark = [pytest.mark.real_model, pytest.mark.timeout(900)]


async def test_two_tools_then_a_validated_typed_answer(
    local_model: LocalModel, tmp_path: Path
) -> None:
    store = SqliteStore(tmp_path / "runs.db")
    try:
        runner = agent(local_model)
        outcome = await runner.run(GOAL, store=store)
        check(outcome)
        steps = [e for e in outcome.events if isinstance(e, ModelResponded)]
        assert all(len(e.tool_calls) == 1 for e in steps)  # one constrained call per step
        assert outcome.usage.input_tokens > 0
        assert outcome.usage.output_tokens > 0
        assert outcome.usage.cost == 0.0  # it ran on this machine: known, and free
        assert await store.read(outcome.run_id) == list(outcome.events)  # durable, as run
    finally:
        await store.close()


async def test_its_own_token_count_is_what_it_reports(local_model: LocalModel) -> None:
    spec = Agent(model=local_model, tools=[add]).spec
    request = ModelRequest(
        instructions=spec.instructions,
        messages=(UserMessage(text="What is 2 + 3? Use the add tool."),),
        tools=spec.definitions,
    )
    await local_model.request(request)  # the weights are loaded by a request, not a count
    counted = await local_model.count_tokens(request)
    response = await local_model.request(request)
    assert counted is not None
    assert counted == response.usage.input_tokens
    assert local_model.profile.context_window == 4096


async def test_a_step_is_written_compact_as_the_next_step_replays_it(llama_server: str) -> None:
    """No whitespace tokens between keys and values: each would be a decoded token, and a
    reply the next step renders differently misses the prompt cache from there on."""
    spec = Agent(model=ScriptedModel([]), tools=[calculate, days_until, current_time]).spec
    for question in (  # an agent's own instructions: the model spaces out each of these
        "What is 17% of 2,340?",
        "What's the square root of 1764?",
        "What time is it in Tokyo?",
    ):
        request = ModelRequest(
            instructions=spec.instructions,
            messages=(UserMessage(text=question),),
            tools=spec.definitions,
        )
        body = {**local_body(request), "model": SERVED_NAME}
        url = f"{llama_server}/chat/completions"
        reply = await asyncio.to_thread(local_step, partial(_post, url), request, body)
        text = reply["choices"][0]["message"]["content"]
        assert text == orjson.dumps(orjson.loads(text)).decode(), text


def _post(url: str, body: dict[str, Any]) -> Any:
    request = urllib.request.Request(
        url, data=orjson.dumps(body), headers={"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(request, timeout=600) as response:
        return orjson.loads(response.read())


class Address(BaseModel):
    street: str
    city: str


@tool
def ship(item: str, to: Address) -> str:
    """Ship an item to an address.

    Args:
        item: What to ship.
        to: Where to ship it.
    """
    return f"{item} shipped to {to.city}"


async def test_a_tool_with_a_nested_model_gets_a_valid_call(local_model: LocalModel) -> None:
    """Its schema's ``$defs`` resolve from the step schema's root: the grammar applies."""
    spec = Agent(model=ScriptedModel([]), tools=[ship]).spec
    request = ModelRequest(
        instructions=spec.instructions,
        messages=(UserMessage(text="Ship a lamp to 1 Main St, Springfield."),),
        tools=spec.definitions,
    )
    response = await local_model.request(request)
    (call,) = response.tool_calls
    assert call.name == "ship", call
    to = call.arguments["to"]
    assert isinstance(to, dict), call
    assert set(to) == {"street", "city"}, call
