"""The tools of an agent, by unique name, and their OpenAI and Anthropic wire formats."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import cast

from tether.content import JsonObject, JsonValue
from tether.errors import ConfigError, DuplicateToolError
from tether.tools.base import Tool, ToolDefinition, validate_tool_name

__all__ = [
    "ToolRegistry",
    "from_anthropic",
    "from_openai",
    "to_anthropic",
    "to_openai",
]


class ToolRegistry:
    """Tools by name; a second tool with a taken name is refused."""

    def __init__(self, tools: Iterable[Tool] = ()) -> None:
        self._tools: dict[str, Tool] = {}
        for t in tools:
            self.add(t)

    def add(self, tool: Tool) -> None:
        """Register a tool.

        Raises:
            DuplicateToolError: a tool of that name is already registered.
        """
        if tool.name in self._tools:
            raise DuplicateToolError(tool.name)
        self._tools[tool.name] = tool

    def get(self, name: str) -> Tool | None:
        """The tool called ``name``, if any."""
        return self._tools.get(name)

    def __contains__(self, name: object) -> bool:
        return name in self._tools

    def __iter__(self) -> Iterator[Tool]:
        return iter(self._tools.values())

    def __len__(self) -> int:
        return len(self._tools)

    @property
    def names(self) -> tuple[str, ...]:
        """Tool names in registration order."""
        return tuple(self._tools)

    def definitions(self) -> tuple[ToolDefinition, ...]:
        """Every tool's definition, in registration order."""
        return tuple(t.definition for t in self._tools.values())

    def to_openai(self) -> list[JsonObject]:
        """All definitions in OpenAI's ``tools`` format."""
        return [to_openai(d) for d in self.definitions()]

    def to_anthropic(self) -> list[JsonObject]:
        """All definitions in Anthropic's ``tools`` format."""
        return [to_anthropic(d) for d in self.definitions()]


def to_openai(definition: ToolDefinition) -> JsonObject:
    """A definition in OpenAI's Chat Completions ``tools`` format (title, hints are dropped)."""
    return {
        "type": "function",
        "function": {
            "name": definition.name,
            "description": definition.description,
            "parameters": definition.input_schema,
        },
    }


def from_openai(data: JsonObject) -> ToolDefinition:
    """A definition from OpenAI's ``tools`` format."""
    fn = data.get("function")
    if data.get("type") != "function" or not isinstance(fn, dict):
        raise ConfigError(
            "not an OpenAI function tool: expected {'type': 'function', 'function': {...}}"
        )
    return _definition(fn, "parameters")


def to_anthropic(definition: ToolDefinition) -> JsonObject:
    """A definition in Anthropic's Messages ``tools`` format (title, hints are dropped)."""
    return {
        "name": definition.name,
        "description": definition.description,
        "input_schema": definition.input_schema,
    }


def from_anthropic(data: JsonObject) -> ToolDefinition:
    """A definition from Anthropic's ``tools`` format."""
    return _definition(data, "input_schema")


def _definition(data: dict[str, JsonValue], schema_key: str) -> ToolDefinition:
    name, description, schema = data.get("name"), data.get("description", ""), data.get(schema_key)
    if (
        not isinstance(name, str)
        or not isinstance(description, str)
        or not isinstance(schema, dict)
    ):
        raise ConfigError(
            f"a tool definition needs a string 'name', a string 'description' and an object {schema_key!r}"
        )
    return ToolDefinition(
        name=validate_tool_name(name),
        description=description,
        input_schema=cast(JsonObject, schema),
    )
