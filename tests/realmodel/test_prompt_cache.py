"""The embedded model's saved system prompts, across model servers as across processes."""

from __future__ import annotations

import asyncio
import json
import logging
import stat
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from tether import Agent
from tether.messages import UserMessage
from tether.models.base import ModelRequest, ModelResponse
from tether.models.local import LocalModel
from tether.testing import ScriptedModel
from tether.tools.builtin import calculate, current_time, days_until

pytestmark = [pytest.mark.real_model, pytest.mark.timeout(900)]

GOAL = "What is 17% of 2,340?"


async def _first_step(
    model_path: Path, directory: Path, goal: str = GOAL, *, shared: bool = True
) -> ModelResponse:
    """A new model server's first step of an agent (its server then goes away)."""
    model = LocalModel(model_path, context=4096, prompt_cache=directory)
    spec = Agent(model=ScriptedModel([]), tools=[calculate, days_until, current_time]).spec
    request = ModelRequest(
        instructions=spec.instructions,
        messages=(UserMessage(text=goal),),
        tools=spec.definitions,
        shared_instructions=shared,
    )
    try:
        return await model.request(request)
    finally:
        del model


def _saved(directory: Path) -> list[Path]:
    return sorted(directory.iterdir())


async def test_a_new_server_restores_the_system_prompt_an_earlier_one_saved(
    model_path: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, logger="tether")
    cold = await _first_step(model_path, tmp_path / "a")
    (saved,) = _saved(tmp_path / "a")  # one file, nothing left half-written
    assert saved.suffix == ".slot"
    assert stat.S_IMODE(saved.stat().st_mode) == 0o600
    assert stat.S_IMODE((tmp_path / "a").stat().st_mode) == 0o700
    other = await _first_step(model_path, tmp_path / "b", "How many days until 2027-01-01?")
    assert other.tool_calls[0].name == "days_until"
    # another goal saves the same bytes (the name ends in their SHA-256): no goal is in them
    assert [p.name for p in _saved(tmp_path / "b")] == [saved.name]
    assert "restored a saved system prompt" not in caplog.text

    warm = await _first_step(model_path, tmp_path / "a")
    assert "restored a saved system prompt" in caplog.text
    assert warm.tool_calls[0].name == cold.tool_calls[0].name == "calculate"
    assert warm.tool_calls[0].arguments == cold.tool_calls[0].arguments
    assert warm.usage.input_tokens == cold.usage.input_tokens  # the same prompt, read whole


async def test_run_specific_instructions_are_never_saved(model_path: Path, tmp_path: Path) -> None:
    """A plan or recalled memory in the instructions: the step runs, nothing is saved."""
    response = await _first_step(model_path, tmp_path, shared=False)
    assert response.tool_calls[0].name == "calculate"
    assert not tmp_path.exists() or not _saved(tmp_path)


@pytest.mark.parametrize("damage", ["one byte short", "zeroed"])
async def test_a_damaged_saved_state_is_replaced_not_read(
    model_path: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture, damage: str
) -> None:
    """A torn write (a power cut, a copy cut short): llama.cpp aborts the process on a
    truncated state, so it must never be handed one."""
    caplog.set_level(logging.DEBUG, logger="tether")
    cold = await _first_step(model_path, tmp_path)
    (saved,) = _saved(tmp_path)
    good = saved.read_bytes()
    saved.write_bytes(good[:-1] if damage == "one byte short" else b"\0" * len(good))

    again = await _first_step(model_path, tmp_path)
    assert "restored a saved system prompt" not in caplog.text
    assert again.tool_calls[0].arguments == cold.tool_calls[0].arguments
    assert [p.name for p in _saved(tmp_path)] == [saved.name]
    assert saved.read_bytes() == good  # computed again, and saved again


async def test_no_other_local_process_can_use_the_models_loopback_api(
    local_model: LocalModel,
) -> None:
    """Its HTTP API (token counts, slot files) asks for a key only this process holds."""
    spec = Agent(model=ScriptedModel([]), tools=[calculate]).spec
    request = ModelRequest(
        instructions=spec.instructions, messages=(UserMessage(text=GOAL),), tools=spec.definitions
    )
    await local_model.request(request)
    assert await local_model.count_tokens(request)  # this process: with the key
    address = str(getattr(local_model, "_server").listening_address).rstrip("/")  # noqa: B009
    base = address if address.startswith("http") else f"http://{address}"
    for path, body in (
        ("/tokenize", {"content": "hi"}),
        ("/slots/0?action=save", {"filename": "stolen.slot"}),
        ("/v1/chat/completions", {"messages": [{"role": "user", "content": "hi"}]}),
    ):
        assert await asyncio.to_thread(_status, base + path, body) == 401, path


def _status(url: str, body: dict[str, Any]) -> int:
    """The HTTP status of a POST without a key."""
    request = urllib.request.Request(url, data=json.dumps(body).encode(), method="POST")
    try:
        with urllib.request.urlopen(request, timeout=60) as reply:
            return int(reply.status)
    except urllib.error.HTTPError as exc:
        exc.close()
        return exc.code
