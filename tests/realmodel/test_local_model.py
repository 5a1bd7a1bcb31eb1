"""The embedded default model (Qwen2.5-Coder-1.5B, in-process) runs a real agent end to end."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.realmodel.scenario import GOAL, agent, check
from tests.support import add
from tether import Agent, ModelRequest
from tether.events import ModelResponded
from tether.messages import UserMessage
from tether.models.local import LocalModel
from tether.stores import SqliteStore

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
