"""Choosing a model by capability: the first that has what was asked, and the log says why."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from tether import Agent, ModelNeeds
from tether.agentfile import load_agent_file
from tether.errors import ConfigError
from tether.events import RunStarted
from tether.models.registry import local_model_available
from tether.models.select import NoModelFits, choose_model
from tether.stores import MemoryStore

SCRIPT = '[{"tool_calls": [{"name": "finish_task", "arguments": {"answer": "done"}}]}]'


@pytest.fixture
def scripted(tmp_path: Path) -> str:
    path = tmp_path / "script.json"
    path.write_text(SCRIPT)
    return f"scripted:{path}"


def test_the_first_model_with_everything_asked_is_chosen_and_the_others_say_why_not(
    scripted: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    needs = ModelNeeds(
        native_tools=True,
        prefer=(
            "anthropic:claude-sonnet-4-5",
            "nope:x",
            scripted,
        ),
    )
    model, choice = choose_model(needs)
    assert model.name == scripted
    assert choice.model == scripted
    assert "own tool calls" in choice.reason
    assert "local" in choice.reason
    anthropic, unknown = choice.passed_over
    assert anthropic == "anthropic:claude-sonnet-4-5: not available (ANTHROPIC_API_KEY is not set)"
    assert unknown.startswith("nope:x: not available")


def test_a_need_no_model_meets_is_an_error_that_says_why_for_each(
    scripted: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    with pytest.raises(NoModelFits) as raised:
        choose_model(ModelNeeds(json_schema_output=True, min_context=1000, prefer=(scripted,)))
    message = str(raised.value)
    assert "json_schema_output, min_context 1000" in message
    assert f"{scripted}: no JSON Schema output, context window unknown < 1000" in message
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    monkeypatch.setenv("OPENAI_BASE_URL", "https://api.example.com/v1")
    with pytest.raises(NoModelFits, match="openai:gpt-x: not local"):
        choose_model(ModelNeeds(local_only=True, prefer=("openai:gpt-x",)))
    monkeypatch.setenv("OPENAI_BASE_URL", "http://127.0.0.1:8080/v1")  # a llama.cpp server here
    _, choice = choose_model(ModelNeeds(local_only=True, prefer=("openai:gpt-x",)))
    assert choice.model == "openai:gpt-x"


async def test_the_choice_is_recorded_in_run_started(scripted: str) -> None:
    agent = Agent(
        name="picky",
        model=ModelNeeds(
            native_tools=True,
            prefer=(
                "nope:x",
                scripted,
            ),
        ),
    )
    outcome = await agent.run("go", store=MemoryStore())
    assert outcome.status == "finished"
    started = outcome.events[0]
    assert isinstance(started, RunStarted)
    assert started.model == scripted
    assert started.model_choice is not None
    assert started.model_choice["model"] == scripted
    assert started.model_choice["needs"] == {
        "native_tools": True, "json_schema_output": False, "min_context": None, "local_only": False
    }  # fmt: skip
    passed = started.model_choice["passed_over"]
    assert isinstance(passed, list)
    assert len(passed) == 1
    assert str(passed[0]).startswith("nope:x: not available (no model provider for 'nope:x'")
    plain = await Agent(model=scripted).run("go")
    assert isinstance(plain.events[0], RunStarted)
    assert plain.events[0].model_choice is None


async def test_an_agent_that_no_model_fits_fails_before_any_run_is_stored(scripted: str) -> None:
    store = MemoryStore()
    agent = Agent(model=ModelNeeds(min_context=10**9, prefer=(scripted,)))
    with pytest.raises(NoModelFits):
        await agent.run("go", store=store)
    assert await store.runs() == []


@pytest.mark.skipif(not local_model_available(), reason="the embedded model is not installed")
def test_the_embedded_model_is_found_without_being_named() -> None:
    _, choice = choose_model(ModelNeeds(json_schema_output=True, local_only=True, min_context=4096))
    assert choice.model.startswith("local")
    assert "JSON Schema output" in choice.reason


def test_an_agent_file_asks_for_capabilities(tmp_path: Path, scripted: str) -> None:
    path = tmp_path / "agent.toml"
    path.write_text(
        textwrap.dedent(f'''
        name = "a"
        [model]
        native_tools = true
        min_context = 2048
        prefer = ["{scripted}"]
    ''')
    )
    agent = load_agent_file(path)
    assert agent.model == ModelNeeds(native_tools=True, min_context=2048, prefer=(scripted,))
    for table, says in [
        ("[model]\nlocal = true\n", "[model]: unknown keys ['local']"),
        ("[model]\nmin_context = 0\n", "min_context must be a positive int"),
        ("[model]\nprefer = 'local'\n", "prefer must be an array of strings"),
    ]:
        path.write_text(f'name = "a"\n{table}')
        with pytest.raises(ConfigError) as raised:
            load_agent_file(path)
        assert str(path) in str(raised.value)
        assert says in str(raised.value)
