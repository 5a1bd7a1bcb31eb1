"""``ToolRegistry`` and the OpenAI / Anthropic wire formats."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, cast

import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st

from tether.content import JsonObject, JsonValue
from tether.errors import ConfigError, DuplicateToolError
from tether.tools import (
    Tool,
    ToolAnnotations,
    ToolContext,
    ToolDefinition,
    ToolRegistry,
    from_anthropic,
    from_openai,
    to_anthropic,
    to_openai,
)

SCHEMA: JsonObject = {
    "type": "object",
    "properties": {"q": {"type": "string", "description": "The query."}},
    "required": ["q"],
    "additionalProperties": False,
}


async def _noop(ctx: ToolContext, arguments: Mapping[str, Any]) -> object:
    return None


def make_tool(name: str, description: str = "Does a thing.") -> Tool:
    return Tool.from_schema(name=name, description=description, input_schema=SCHEMA, handler=_noop)


# -- the registry -------------------------------------------------------------------------------


def test_empty_registry() -> None:
    registry = ToolRegistry()
    assert len(registry) == 0
    assert list(registry) == []
    assert registry.names == ()
    assert registry.definitions() == ()
    assert registry.to_openai() == []
    assert registry.to_anthropic() == []
    assert registry.get("anything") is None
    assert "anything" not in registry


def test_lookup_and_registration_order() -> None:
    zeta, alpha, mid = make_tool("zeta"), make_tool("alpha"), make_tool("mid")
    registry = ToolRegistry([zeta, alpha])
    registry.add(mid)
    assert len(registry) == 3
    assert registry.names == ("zeta", "alpha", "mid")
    assert list(registry) == [zeta, alpha, mid]
    assert registry.definitions() == (zeta.definition, alpha.definition, mid.definition)
    assert registry.get("alpha") is alpha
    assert registry.get("missing") is None
    assert "mid" in registry
    assert "Mid" not in registry
    assert 3 not in registry


def test_registry_wire_formats_follow_registration_order() -> None:
    registry = ToolRegistry([make_tool("b", "B."), make_tool("a", "A.")])
    assert registry.to_openai() == [
        {"type": "function", "function": {"name": "b", "description": "B.", "parameters": SCHEMA}},
        {"type": "function", "function": {"name": "a", "description": "A.", "parameters": SCHEMA}},
    ]
    assert registry.to_anthropic() == [
        {"name": "b", "description": "B.", "input_schema": SCHEMA},
        {"name": "a", "description": "A.", "input_schema": SCHEMA},
    ]


def test_duplicate_name_is_refused_by_add() -> None:
    first = make_tool("search")
    registry = ToolRegistry([first])
    with pytest.raises(DuplicateToolError, match="two tools are named 'search'") as info:
        registry.add(make_tool("search", "Another search."))
    assert info.value.name == "search"
    assert isinstance(info.value, ConfigError)
    assert registry.names == ("search",)
    assert registry.get("search") is first


def test_duplicate_name_is_refused_by_the_constructor() -> None:
    with pytest.raises(DuplicateToolError, match="'dup'"):
        ToolRegistry([make_tool("dup"), make_tool("ok"), make_tool("dup")])


def test_same_tool_twice_is_refused() -> None:
    t = make_tool("once")
    registry = ToolRegistry([t])
    with pytest.raises(DuplicateToolError):
        registry.add(t)
    assert len(registry) == 1


def test_names_differing_in_case_are_distinct() -> None:
    registry = ToolRegistry([make_tool("Search"), make_tool("search")])
    assert registry.names == ("Search", "search")


# -- wire formats -------------------------------------------------------------------------------

DEFINITION = ToolDefinition(name="lookup", description="Look a word up.", input_schema=SCHEMA)


def test_to_openai_format() -> None:
    assert to_openai(DEFINITION) == {
        "type": "function",
        "function": {"name": "lookup", "description": "Look a word up.", "parameters": SCHEMA},
    }


def test_to_anthropic_format() -> None:
    assert to_anthropic(DEFINITION) == {
        "name": "lookup",
        "description": "Look a word up.",
        "input_schema": SCHEMA,
    }


def test_round_trips() -> None:
    assert from_openai(to_openai(DEFINITION)) == DEFINITION
    assert from_anthropic(to_anthropic(DEFINITION)) == DEFINITION


def test_title_and_hints_are_dropped() -> None:
    rich = ToolDefinition(
        name="lookup",
        description="Look a word up.",
        input_schema=SCHEMA,
        title="Lookup",
        output_schema={"type": "object"},
        annotations=ToolAnnotations(read_only=True, open_world=False),
    )
    openai = to_openai(rich)
    anthropic = to_anthropic(rich)
    assert "Lookup" not in orjson.dumps(openai).decode()
    assert set(anthropic) == {"name", "description", "input_schema"}
    assert from_openai(openai) == DEFINITION
    assert from_anthropic(anthropic) == DEFINITION


def test_missing_description_reads_as_empty() -> None:
    assert from_openai(
        {"type": "function", "function": {"name": "x", "parameters": SCHEMA}}
    ) == ToolDefinition(name="x", description="", input_schema=SCHEMA)
    assert from_anthropic({"name": "x", "input_schema": SCHEMA}) == ToolDefinition(
        name="x", description="", input_schema=SCHEMA
    )


def test_from_openai_ignores_extra_fields() -> None:
    data: JsonObject = {
        "type": "function",
        "function": {"name": "x", "description": "d", "parameters": SCHEMA, "strict": True},
    }
    assert from_openai(data) == ToolDefinition(name="x", description="d", input_schema=SCHEMA)


@pytest.mark.parametrize(
    "data",
    [
        {},
        {"function": {"name": "x", "description": "d", "parameters": SCHEMA}},
        {"type": "tool", "function": {"name": "x", "description": "d", "parameters": SCHEMA}},
        {"type": "function"},
        {"type": "function", "function": "x"},
        {"type": "function", "function": [{"name": "x"}]},
        {"type": "function", "function": {"description": "d", "parameters": SCHEMA}},
        {"type": "function", "function": {"name": 3, "description": "d", "parameters": SCHEMA}},
        {"type": "function", "function": {"name": "x", "description": None, "parameters": SCHEMA}},
        {"type": "function", "function": {"name": "x", "description": "d"}},
        {"type": "function", "function": {"name": "x", "description": "d", "parameters": []}},
        {"type": "function", "function": {"name": "x", "description": "d", "input_schema": SCHEMA}},
        {"name": "x", "description": "d", "input_schema": SCHEMA},
    ],
)
def test_malformed_openai_is_a_config_error(data: JsonObject) -> None:
    with pytest.raises(ConfigError):
        from_openai(data)


@pytest.mark.parametrize(
    "data",
    [
        {},
        {"description": "d", "input_schema": SCHEMA},
        {"name": None, "description": "d", "input_schema": SCHEMA},
        {"name": "x", "description": 5, "input_schema": SCHEMA},
        {"name": "x", "description": "d"},
        {"name": "x", "description": "d", "input_schema": "object"},
        {"name": "x", "description": "d", "parameters": SCHEMA},
        {"type": "function", "function": {"name": "x", "description": "d", "parameters": SCHEMA}},
    ],
)
def test_malformed_anthropic_is_a_config_error(data: JsonObject) -> None:
    with pytest.raises(ConfigError, match="input_schema"):
        from_anthropic(data)


def test_malformed_openai_error_names_the_expected_shape() -> None:
    with pytest.raises(ConfigError, match="not an OpenAI function tool"):
        from_openai({"type": "function"})
    with pytest.raises(ConfigError, match="'parameters'"):
        from_openai({"type": "function", "function": {"name": "x"}})


# -- properties ---------------------------------------------------------------------------------

tool_names = st.from_regex(r"[A-Za-z0-9_-]{1,64}", fullmatch=True)
descriptions = st.text(max_size=200)
property_names = st.text(max_size=12)
json_scalars: st.SearchStrategy[JsonValue] = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**63), max_value=2**63 - 1),
    st.floats(allow_nan=False, allow_infinity=False),
    st.text(max_size=20),
)


def _as_json(strategy: st.SearchStrategy[dict[str, Any]]) -> st.SearchStrategy[JsonObject]:
    return strategy.map(lambda d: cast(JsonObject, d))


leaf_schemas: st.SearchStrategy[JsonObject] = _as_json(
    st.fixed_dictionaries(
        {"type": st.sampled_from(["string", "integer", "number", "boolean", "null"])},
        optional={
            "description": descriptions,
            "default": json_scalars,
            "enum": st.lists(json_scalars, max_size=3),
            "minimum": st.integers(min_value=-1000, max_value=1000),
        },
    )
)


def _extend(children: st.SearchStrategy[JsonObject]) -> st.SearchStrategy[JsonObject]:
    arrays = st.fixed_dictionaries(
        {"type": st.just("array"), "items": children},
        optional={"maxItems": st.integers(min_value=0, max_value=10)},
    )
    objects = st.fixed_dictionaries(
        {
            "type": st.just("object"),
            "properties": st.dictionaries(property_names, children, max_size=3),
        },
        optional={
            "required": st.lists(property_names, max_size=3, unique=True),
            "additionalProperties": st.booleans(),
        },
    )
    return _as_json(st.one_of(arrays, objects))


sub_schemas: st.SearchStrategy[JsonObject] = st.recursive(leaf_schemas, _extend, max_leaves=8)

input_schemas: st.SearchStrategy[JsonObject] = _as_json(
    st.fixed_dictionaries(
        {
            "type": st.just("object"),
            "properties": st.dictionaries(property_names, sub_schemas, max_size=5),
        },
        optional={
            "required": st.lists(property_names, max_size=4, unique=True),
            "additionalProperties": st.booleans(),
            "description": descriptions,
        },
    )
)

definitions: st.SearchStrategy[ToolDefinition] = st.builds(
    ToolDefinition, name=tool_names, description=descriptions, input_schema=input_schemas
)


@given(definitions)
def test_openai_round_trip_preserves_the_definition(d: ToolDefinition) -> None:
    back = from_openai(to_openai(d))
    assert back.name == d.name
    assert back.description == d.description
    assert back.input_schema == d.input_schema
    assert back == d


@given(definitions)
def test_anthropic_round_trip_preserves_the_definition(d: ToolDefinition) -> None:
    back = from_anthropic(to_anthropic(d))
    assert back.name == d.name
    assert back.description == d.description
    assert back.input_schema == d.input_schema
    assert back == d


@given(definitions)
def test_definition_survives_json_text(d: ToolDefinition) -> None:
    openai_text = orjson.dumps(to_openai(d))
    anthropic_text = orjson.dumps(to_anthropic(d))
    from_openai_text = from_openai(cast(JsonObject, orjson.loads(openai_text)))
    from_anthropic_text = from_anthropic(cast(JsonObject, orjson.loads(anthropic_text)))
    for back in (from_openai_text, from_anthropic_text):
        assert back.name == d.name
        assert back.description == d.description
        assert back.input_schema == d.input_schema
        assert back == d
    assert orjson.dumps(to_openai(from_openai_text)) == openai_text
    assert orjson.dumps(to_anthropic(from_anthropic_text)) == anthropic_text


@given(tool_names)
def test_generated_names_are_accepted_by_tools(name: str) -> None:
    assert make_tool(name).name == name
