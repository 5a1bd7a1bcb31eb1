"""The OpenAI adapter against a REAL OpenAI-compatible server: llama.cpp's, on loopback.

The server (xllamacpp's build of llama.cpp's HTTP server) is started in this test session
with the embedded model's file; requests go through the official ``openai`` SDK over HTTP.
"""

from __future__ import annotations

import re

import pytest

from tests.realmodel.conftest import SERVED_NAME
from tests.realmodel.scenario import GOAL, agent, check
from tether import Agent
from tether.errors import ModelError
from tether.events import ModelResponded
from tether.messages import UserMessage
from tether.models.base import (
    ModelProfile,
    ModelRequest,
    ModelSettings,
    ResponseDone,
    TextDelta,
)
from tether.models.openai import OpenAIModel
from tether.models.prompted import PromptedToolsModel
from tether.models.registry import resolve_model
from tether.tools.builtin import calculate, days_until

pytestmark = [pytest.mark.real_model, pytest.mark.timeout(900)]


async def test_the_agent_runs_through_the_server_in_constrained_mode(llama_server: str) -> None:
    async with OpenAIModel(
        SERVED_NAME, base_url=llama_server, tool_calling="constrained", free=True
    ) as model:
        outcome = await agent(model).run(GOAL)
    check(outcome)
    assert outcome.usage.cost == 0.0


async def test_streaming_deltas_add_up_to_the_response(llama_server: str) -> None:
    request = ModelRequest(
        instructions="Answer in one short sentence.",
        messages=(UserMessage(text="What colour is the sky on a clear day?"),),
        tools=(),
        settings=ModelSettings(temperature=0.0, max_output_tokens=32),
    )
    async with OpenAIModel(SERVED_NAME, base_url=llama_server, free=True) as model:
        items = [item async for item in model.stream(request)]
    deltas = [i.text for i in items if isinstance(i, TextDelta)]
    done = items[-1]
    assert isinstance(done, ResponseDone)
    assert len(deltas) > 1
    assert "".join(deltas) == done.response.text
    assert done.response.text.strip()
    assert done.response.usage.output_tokens > 0
    assert done.response.usage.cost == 0.0


async def test_a_run_streams_the_servers_text_through_the_loop(llama_server: str) -> None:
    pieces: list[str] = []
    async with OpenAIModel(SERVED_NAME, base_url=llama_server, free=True) as model:
        run_agent = Agent(
            name="sky",
            instructions="Answer in one short sentence, without tools.",
            model=model,
            model_settings=ModelSettings(temperature=0.0, max_output_tokens=32),
            redactor=None,  # live pieces; with a redactor each answer comes whole, as logged
        )
        outcome = await run_agent.run(
            "What colour is the sky on a clear day?", on_text=pieces.append
        )
    assert outcome.status == "finished", outcome
    assert len(pieces) > 1  # it came in pieces, live
    assert "".join(pieces) == outcome.answer
    assert outcome.answer
    responded = [e for e in outcome.events if isinstance(e, ModelResponded)]
    assert [e.text for e in responded] == [outcome.answer]  # the log has it whole


async def test_the_server_lists_what_it_serves(llama_server: str) -> None:
    async with OpenAIModel(SERVED_NAME, base_url=llama_server) as model:
        assert SERVED_NAME in await model.available()


async def test_a_server_that_is_not_there_is_a_transient_error_that_says_so() -> None:
    model = OpenAIModel("any", base_url="http://127.0.0.1:9/v1")  # discard port: nothing there
    request = ModelRequest(instructions="", messages=(UserMessage(text="hi"),), tools=())
    with pytest.raises(
        ModelError, match=re.escape("could not connect to http://127.0.0.1:9/v1")
    ) as info:
        await model.request(request)
    await model.aclose()
    assert info.value.transient


async def test_prompted_tool_calling_reads_the_calls_a_text_only_model_writes(
    llama_server: str,
) -> None:
    """Without native tools, the model's written call is parsed leniently into a real call.

    (The whole two-tool task does not finish this way with the 1.5B model: prompted mode is the
    fallback for models that follow it; small ones should use constrained steps.)
    """
    text_only = OpenAIModel(
        SERVED_NAME,
        base_url=llama_server,
        free=True,
        profile=ModelProfile(native_tools=False, parallel_tool_calls=False),
    )
    async with text_only:
        model = resolve_model(text_only)
        assert isinstance(model, PromptedToolsModel)
        response = await model.request(
            ModelRequest(
                instructions="Use the tools.",
                messages=(UserMessage(text="How many days until 2027-01-01?"),),
                tools=(calculate.definition, days_until.definition),
                tool_choice="required",
                settings=ModelSettings(temperature=0.0, max_output_tokens=128),
            )
        )
    assert len(response.tool_calls) == 1
    call = response.tool_calls[0]
    assert call.parse_error is None
    assert call.name == "days_until"
    assert call.arguments["target"] == "2027-01-01"
