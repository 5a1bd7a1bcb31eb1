"""An output declared as a JSON Schema (an agent file's ``[output]``) instead of a type."""

from __future__ import annotations

import re
import textwrap
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

from tether import Agent
from tether.agentfile import load_agent_file
from tether.content import content_text
from tether.errors import ConfigError
from tether.events import RunStarted, ToolCallFinished
from tether.jsontypes import JsonObject, JsonValue
from tether.messages import ToolCall
from tether.testing import ScriptedModel, call
from tether.tools.base import ToolContext

TICKET: JsonObject = {
    "type": "object",
    "properties": {"priority": {"enum": ["low", "high"]}, "summary": {"type": "string"}},
    "required": ["priority", "summary"],
    "additionalProperties": False,
}


def finish(**arguments: JsonValue) -> ToolCall:
    return ToolCall(id="", name="finish_task", arguments=dict(arguments))


async def test_an_output_that_breaks_the_schema_is_sent_back_and_a_fitting_one_is_the_output() -> (
    None
):
    script = [finish(priority="urgent", summary="x"), finish(priority="high", summary="disk full")]
    agent = Agent(model=ScriptedModel(script), output_schema=TICKET)
    outcome = await agent.run("triage")
    assert outcome.status == "finished"
    assert outcome.output == {"priority": "high", "summary": "disk full"}
    retried = [e for e in outcome.events if e.kind == "tool_call_finished" and e.is_error]
    assert "priority: 'urgent' is not one of ['low', 'high']" in str(retried[0].content)
    started = outcome.events[0]
    assert isinstance(started, RunStarted)
    assert started.output_schema == TICKET


@pytest.mark.parametrize("number", [float("nan"), float("inf")])
async def test_an_output_json_cannot_carry_is_sent_back(number: float) -> None:
    # it used to be accepted: the outcome held nan, the log null
    model = ScriptedModel([call("finish_task", result=number), call("finish_task", result=2.5)])
    outcome = await Agent(model=model, output_type=float).run("compute")
    assert outcome.status == "finished"
    assert outcome.output == 2.5
    sent_back = next(e for e in outcome.events if isinstance(e, ToolCallFinished))
    assert "a number JSON cannot carry" in content_text(sent_back.content)


async def test_a_schema_that_is_not_an_object_is_wrapped_in_result() -> None:
    agent = Agent(model=ScriptedModel([finish(result=7)]), output_schema={"type": "integer"})
    outcome = await agent.run("count")
    assert outcome.output == 7


def test_a_bad_schema_or_both_kinds_of_output_are_refused() -> None:
    with pytest.raises(ConfigError, match="not a valid JSON Schema"):
        Agent(model=ScriptedModel([]), output_schema={"type": "nonsense"})
    with pytest.raises(ConfigError, match="not both"):
        Agent(model=ScriptedModel([]), output_type=int, output_schema={"type": "integer"})


def test_an_agent_file_declares_the_output(tmp_path: Path) -> None:
    path = tmp_path / "agent.toml"
    path.write_text(
        textwrap.dedent("""
        name = "triage"
        [output]
        type = "object"
        properties = { priority = { enum = ["low", "high"] }, summary = { type = "string" } }
        required = ["priority", "summary"]
        additionalProperties = false
    """)
    )
    assert load_agent_file(path).output_schema == TICKET
    (tmp_path / "ticket.json").write_text('{"type": "integer"}')
    path.write_text('name = "triage"\noutput_file = "ticket.json"\n')
    assert load_agent_file(path).output_schema == {"type": "integer"}
    for text, says in [
        ('name = "t"\noutput_file = "missing.json"\n', "output_file: cannot read"),
        ('name = "t"\noutput_file = "x.json"\n[output]\ntype = "string"\n', "not both"),
        ('name = "t"\n[output]\ntype = "nonsense"\n', "not a valid JSON Schema"),
    ]:
        (tmp_path / "x.json").write_text("{}")
        path.write_text(text)
        with pytest.raises(ConfigError) as raised:
            load_agent_file(path)
        assert str(path) in str(raised.value)
        assert says in str(raised.value)


def test_a_schema_that_refers_outside_itself_is_refused_for_outputs_and_tools() -> None:
    """Validation would fetch the URL or read the file (an MCP server writes tool schemas)."""
    from tether.tools.base import Tool

    for ref in ("http://127.0.0.1:9/schema.json", "file:///etc/passwd", "other.json#/a"):
        with pytest.raises(ConfigError, match="refers outside itself"):
            Agent(model=ScriptedModel([]), output_schema={"$ref": ref})

        async def handler(ctx: object, arguments: object) -> str:
            return "x"

        with pytest.raises(ConfigError, match="refers outside itself"):
            Tool.from_schema(
                name="t",
                description="d",
                input_schema={"type": "object", "properties": {"a": {"$ref": ref}}},
                handler=handler,  # type: ignore[arg-type]
            )


async def _ignore(ctx: ToolContext, arguments: Mapping[str, Any]) -> str:
    return "x"


def test_a_reference_to_nothing_in_the_schema_is_refused_for_outputs_and_tools() -> None:
    """Found when the agent or the tool is made, not when a value first meets it."""
    from tether.tools.base import Tool

    for ref in ("#/$defs/Missing", "#nowhere", "#/properties/b"):
        schema: JsonObject = {"type": "object", "properties": {"a": {"$ref": ref}}}
        with pytest.raises(ConfigError, match=re.escape(f"does not hold ({ref})")):
            Agent(model=ScriptedModel([]), output_schema=schema)
        with pytest.raises(ConfigError, match="refers to what it does not hold"):
            Tool.from_schema(name="t", description="d", input_schema=schema, handler=_ignore)


def test_references_are_resolved_as_validation_resolves_them() -> None:
    """From a nested ``$id``'s base, to anchors; a ``$ref`` inside data is not a reference."""
    from tether.tools.base import Tool

    schema: JsonObject = {
        "$id": "https://example.com/root",
        "type": "object",
        "$defs": {"Name": {"$anchor": "name", "type": "string"}},
        "properties": {
            "a": {"$ref": "#/$defs/Name"},
            "b": {"$ref": "#name"},
            "c": {"$id": "inner", "$defs": {"N": {"type": "integer"}}, "$ref": "#/$defs/N"},
            "d": {"const": {"$ref": "#/not/a/reference"}},
        },
    }
    made = Tool.from_schema(name="t", description="d", input_schema=schema, handler=_ignore)
    value: JsonObject = {"a": "x", "b": "y", "c": 1, "d": {"$ref": "#/not/a/reference"}}
    assert made.validator(value) == value


async def test_a_non_object_schema_with_definitions_can_be_met() -> None:
    schema: JsonObject = {
        "type": "array",
        "items": {"$ref": "#/$defs/Item"},
        "$defs": {"Item": {"type": "integer"}},
    }
    agent = Agent(model=ScriptedModel([finish(result=[1, 2])]), output_schema=schema)
    assert (await agent.run("list")).output == [1, 2]
