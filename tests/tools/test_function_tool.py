"""``@tool`` / ``function_tool``, ``Tool.from_schema``, ``ToolAnnotations`` and ``to_tool_result``."""

from __future__ import annotations

import asyncio
import dataclasses
import itertools
import threading
from collections.abc import Callable, Mapping
from typing import Annotated, Any, Literal

import pytest
from pydantic import BaseModel, Field

from tether.content import (
    ImageBlock,
    JsonObject,
    ResourceBlock,
    TextBlock,
    ToolResult,
    content_text,
)
from tether.errors import ConfigError, ModelRetry
from tether.tools import Tool, ToolAnnotations, ToolContext, function_tool, to_tool_result, tool

CTX = ToolContext(run_id="run-1", call_id="call-7", tool="t")


async def call(t: Tool, arguments: JsonObject, ctx: ToolContext = CTX) -> ToolResult:
    """Validate and run, the way the loop does."""
    return await t.handler(ctx, t.validator(arguments))


# -- tools under test (module level: their annotations must resolve) ------------------------


class Point(BaseModel):
    x: int
    y: int


@tool
def kinds(
    count: int,
    ratio: float,
    label: str,
    flag: bool,
    items: list[int],
    mode: Literal["fast", "slow"],
    limit: Annotated[int, Field(ge=1, le=10)],
    mapping: dict[str, int],
    note: str | None = None,
    retries: int = 3,
) -> str:
    """Exercise every kind of parameter.

    Args:
        count: How many to take.
        ratio: A fraction.
    """
    return f"{count} {ratio} {label} {flag} {items} {mode} {limit} {mapping} {note} {retries}"


@tool
def google_style(city: str, days: int = 1) -> str:
    """Forecast the weather.

    Looks the city up first, then asks the forecast service.

    Args:
        city: The city's name,
            in English.
        days: How many days ahead.

    Returns:
        The forecast.
    """
    return f"{city}:{days}"


@tool
def numpy_style(city: str, days: int = 1) -> str:
    """Forecast the weather.

    Parameters
    ----------
    city : str
        The city's name.
    days : int
        How many days ahead.
    """
    return f"{city}:{days}"


@tool
def sphinx_style(city: str, days: int = 1) -> str:
    """Forecast the weather.

    :param city: The city's name.
    :param days: How many days ahead.
    :returns: The forecast.
    """
    return f"{city}:{days}"


@tool
def move(where: Point, steps: int) -> Point:
    """Move a point right.

    Args:
        where: The start.
        steps: How far.
    """
    return Point(x=where.x + steps, y=where.y)


@tool
def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


@tool
async def async_add(a: int, b: int) -> int:
    """Add two integers, asynchronously."""
    await asyncio.sleep(0)
    return a + b


@tool
def thread_in_worker() -> int:
    """Report the thread it runs on."""
    return threading.get_ident()


@tool(blocking=False)
def thread_inline() -> int:
    """Report the thread it runs on."""
    return threading.get_ident()


@tool
async def whoami(greeting: str, ctx: ToolContext) -> dict[str, str]:
    """Say who is calling.

    Args:
        greeting: A word to start with.
        ctx: The call's context.
    """
    return {
        "greeting": greeting,
        "run_id": ctx.run_id,
        "call_id": ctx.call_id,
        "tool": ctx.tool,
        "key": ctx.idempotency_key,
    }


@tool
def sync_context(context: ToolContext) -> str:
    """Return the idempotency key."""
    return context.idempotency_key


@tool(
    name="custom-name_1",
    description="An explicit description.",
    title="Custom Name",
    read_only=True,
    destructive=False,
    idempotent=True,
    open_world=False,
    timeout=2.5,
)
def configured() -> str:
    """The docstring, overridden."""
    return "ok"


# -- schema -------------------------------------------------------------------------------------


def test_schema_for_every_kind_of_parameter() -> None:
    assert kinds.definition.input_schema == {
        "type": "object",
        "additionalProperties": False,
        "properties": {
            "count": {"type": "integer", "description": "How many to take."},
            "ratio": {"type": "number", "description": "A fraction."},
            "label": {"type": "string"},
            "flag": {"type": "boolean"},
            "items": {"type": "array", "items": {"type": "integer"}},
            "mode": {"type": "string", "enum": ["fast", "slow"]},
            "limit": {"type": "integer", "minimum": 1, "maximum": 10},
            "mapping": {"type": "object", "additionalProperties": {"type": "integer"}},
            "note": {"anyOf": [{"type": "string"}, {"type": "null"}], "default": None},
            "retries": {"type": "integer", "default": 3},
        },
        "required": ["count", "ratio", "label", "flag", "items", "mode", "limit", "mapping"],
    }


def test_schema_has_no_generated_titles() -> None:
    schema = kinds.definition.input_schema
    assert "title" not in schema
    properties = schema["properties"]
    assert isinstance(properties, dict)
    for name, prop in properties.items():
        assert isinstance(prop, dict)
        assert "title" not in prop, name


def test_defaults_are_not_required() -> None:
    schema = google_style.definition.input_schema
    assert schema["required"] == ["city"]
    properties = schema["properties"]
    assert isinstance(properties, dict)
    assert properties["days"] == {
        "type": "integer",
        "default": 1,
        "description": "How many days ahead.",
    }


@pytest.mark.parametrize(
    ("t", "city_description"),
    [
        (google_style, "The city's name,\nin English."),
        (numpy_style, "The city's name."),
        (sphinx_style, "The city's name."),
    ],
    ids=["google", "numpy", "sphinx"],
)
def test_argument_descriptions_from_docstring(t: Tool, city_description: str) -> None:
    assert t.definition.input_schema == {
        "type": "object",
        "additionalProperties": False,
        "properties": {
            "city": {"type": "string", "description": city_description},
            "days": {"type": "integer", "default": 1, "description": "How many days ahead."},
        },
        "required": ["city"],
    }


def test_description_is_the_docstring_without_sections() -> None:
    assert google_style.definition.description == (
        "Forecast the weather.\n\nLooks the city up first, then asks the forecast service."
    )
    assert numpy_style.definition.description == "Forecast the weather."
    assert sphinx_style.definition.description == "Forecast the weather."


def test_defaults_of_a_bare_tool() -> None:
    d = add.definition
    assert d.name == "add"
    assert d.title is None
    assert d.output_schema is None
    assert d.annotations == ToolAnnotations()
    assert add.timeout is None
    assert add.name == "add"
    assert add.annotations is d.annotations


def test_options_pass_through_to_the_definition() -> None:
    d = configured.definition
    assert configured.name == "custom-name_1"
    assert d.description == "An explicit description."
    assert d.title == "Custom Name"
    assert d.annotations == ToolAnnotations(
        read_only=True, destructive=False, idempotent=True, open_world=False
    )
    assert configured.timeout == 2.5
    assert d.input_schema == {"type": "object", "additionalProperties": False, "properties": {}}


def test_function_tool_builds_the_same_tool_as_the_decorator() -> None:
    def greet(name: str) -> str:
        """Greet someone.

        Args:
            name: Who.
        """
        return f"hello {name}"

    built = function_tool(greet, annotations=ToolAnnotations(read_only=True), timeout=1.0)
    assert built.definition.name == "greet"
    assert built.definition.description == "Greet someone."
    assert built.definition.annotations.is_read_only
    assert built.timeout == 1.0
    assert built.definition.input_schema == {
        "type": "object",
        "additionalProperties": False,
        "properties": {"name": {"type": "string", "description": "Who."}},
        "required": ["name"],
    }


# -- validation ---------------------------------------------------------------------------------


def test_validator_returns_coerced_values_with_defaults() -> None:
    assert dict(google_style.validator({"city": "Oslo"})) == {"city": "Oslo", "days": 1}
    assert dict(google_style.validator({"city": "Oslo", "days": "4"})) == {
        "city": "Oslo",
        "days": 4,
    }


def test_validator_builds_nested_models() -> None:
    values = move.validator({"where": {"x": 1, "y": 2}, "steps": 3})
    assert values["where"] == Point(x=1, y=2)
    assert values["steps"] == 3


def test_wrong_type_is_a_model_retry_naming_the_field() -> None:
    with pytest.raises(ModelRetry) as info:
        google_style.validator({"city": "Oslo", "days": "soon"})
    message = info.value.message
    assert message.startswith("invalid arguments: days: ")
    assert "valid integer" in message
    assert str(info.value) == message


def test_missing_argument_is_a_model_retry_naming_the_field() -> None:
    with pytest.raises(ModelRetry, match=r"^invalid arguments: city: Field required$"):
        google_style.validator({"days": 2})


def test_nested_error_names_the_path() -> None:
    with pytest.raises(ModelRetry, match=r"^invalid arguments: where\.y: "):
        move.validator({"where": {"x": 1, "y": "up"}, "steps": 1})


def test_extra_arguments_are_rejected() -> None:
    with pytest.raises(
        ModelRetry, match=r"^invalid arguments: colour: Extra inputs are not permitted$"
    ):
        google_style.validator({"city": "Oslo", "colour": "red"})


def test_every_error_is_reported() -> None:
    with pytest.raises(ModelRetry) as info:
        google_style.validator({"days": "x", "zz": 1})
    message = info.value.message
    assert "city: Field required" in message
    assert "days: " in message
    assert "zz: Extra inputs are not permitted" in message
    assert message.count("; ") == 2


def test_constraints_are_validated() -> None:
    arguments: JsonObject = {
        "count": 1,
        "ratio": 0.5,
        "label": "l",
        "flag": True,
        "items": [1],
        "mode": "fast",
        "limit": 11,
        "mapping": {},
    }
    with pytest.raises(ModelRetry, match=r"^invalid arguments: limit: .*less than or equal to 10"):
        kinds.validator(arguments)
    with pytest.raises(ModelRetry, match=r"^invalid arguments: mode: "):
        kinds.validator({**arguments, "limit": 10, "mode": "medium"})
    assert kinds.validator({**arguments, "limit": 10})["limit"] == 10


# -- running ------------------------------------------------------------------------------------


async def test_sync_tool_runs() -> None:
    result = await call(add, {"a": 2, "b": 40})
    assert result == ToolResult(content=(TextBlock(text="42"),), structured=42)


async def test_async_tool_runs() -> None:
    result = await call(async_add, {"a": -2, "b": 5})
    assert result == ToolResult(content=(TextBlock(text="3"),), structured=3)


async def test_model_result_becomes_structured_content() -> None:
    result = await call(move, {"where": {"x": 1, "y": 2}, "steps": 3})
    assert result == ToolResult(
        content=(TextBlock(text='{"x":4,"y":2}'),), structured={"x": 4, "y": 2}
    )


async def test_blocking_sync_tool_runs_in_a_worker_thread() -> None:
    result = await call(thread_in_worker, {})
    assert isinstance(result.structured, int)
    assert result.structured != threading.get_ident()


async def test_non_blocking_sync_tool_runs_inline() -> None:
    result = await call(thread_inline, {})
    assert result.structured == threading.get_ident()


async def test_tool_exception_propagates() -> None:
    @tool
    async def refuse(reason: str) -> str:
        """Always refuse."""
        raise ModelRetry(reason)

    with pytest.raises(ModelRetry, match=r"^try later$"):
        await call(refuse, {"reason": "try later"})


# -- ToolContext --------------------------------------------------------------------------------


@pytest.mark.parametrize("blocking", [True, False])
async def test_a_sync_tool_raising_stop_iteration_fails_at_once(blocking: bool) -> None:
    # next() on an empty iterator: in a worker thread a future cannot carry StopIteration,
    # and the call used to hang until its timeout, then be logged as timed out
    @tool(blocking=blocking)
    def first(word: str) -> str:
        """The first line with the word."""
        return next(line for line in ["alpha", "beta"] if word in line)

    with pytest.raises(RuntimeError, match="StopIteration"):
        await asyncio.wait_for(call(first, {"word": "zeta"}), timeout=5)


def test_context_parameter_is_hidden_from_the_schema() -> None:
    assert whoami.definition.input_schema == {
        "type": "object",
        "additionalProperties": False,
        "properties": {"greeting": {"type": "string", "description": "A word to start with."}},
        "required": ["greeting"],
    }
    assert sync_context.definition.input_schema == {
        "type": "object",
        "additionalProperties": False,
        "properties": {},
    }


def test_context_cannot_be_passed_by_the_model() -> None:
    with pytest.raises(ModelRetry, match=r"ctx: Extra inputs are not permitted"):
        whoami.validator({"greeting": "hi", "ctx": {"run_id": "x", "call_id": "y", "tool": "z"}})


async def test_context_is_injected() -> None:
    ctx = ToolContext(run_id="r-42", call_id="c-9", tool="whoami")
    result = await call(whoami, {"greeting": "hello"}, ctx)
    assert result.structured == {
        "greeting": "hello",
        "run_id": "r-42",
        "call_id": "c-9",
        "tool": "whoami",
        "key": "r-42:c-9",
    }


async def test_context_is_injected_into_sync_tools() -> None:
    result = await call(sync_context, {}, ToolContext(run_id="a", call_id="b", tool="s"))
    assert result == ToolResult(content=(TextBlock(text="a:b"),))


def test_idempotency_key() -> None:
    ctx = ToolContext(run_id="run_x", call_id="call_y", tool="t")
    assert ctx.idempotency_key == "run_x:call_y"
    assert ctx.idempotency_key == f"{ctx.run_id}:{ctx.call_id}"


def test_tool_context_is_frozen() -> None:
    with pytest.raises(dataclasses.FrozenInstanceError):
        CTX.run_id = "other"  # pyright: ignore[reportAttributeAccessIssue]


# -- configuration errors -----------------------------------------------------------------------


def _star_args(*values: int) -> int:
    """Sum."""
    return sum(values)


def _star_kwargs(**values: int) -> int:
    """Sum."""
    return sum(values.values())


def _positional_only(value: int, /) -> int:
    """Echo."""
    return value


def _undocumented(value: int) -> int:
    return value


def _unannotated(value: int) -> int:
    """Echo."""
    return value


del _unannotated.__annotations__["value"]


def _unresolvable(value: int) -> int:
    """Echo."""
    return value


_unresolvable.__annotations__["value"] = "NoSuchTypeAnywhere"


@pytest.mark.parametrize(
    ("func", "pattern"),
    [
        (_star_args, r"\*args and \*\*kwargs"),
        (_star_kwargs, r"\*args and \*\*kwargs"),
        (_positional_only, "positional-only"),
        (_undocumented, "docstring or a description"),
        (_unannotated, "parameter 'value' needs a type annotation"),
        (_unresolvable, "cannot resolve a type annotation"),
        (lambda: 1, "invalid tool name '<lambda>'"),
    ],
    ids=[
        "args",
        "kwargs",
        "positional-only",
        "no-docstring",
        "no-annotation",
        "unresolvable",
        "lambda",
    ],
)
def test_config_errors(func: Callable[..., object], pattern: str) -> None:
    with pytest.raises(ConfigError, match=pattern):
        function_tool(func)


@pytest.mark.parametrize("timeout", [0, -1, float("nan"), float("inf"), True, "5"])
def test_a_timeout_that_bounds_nothing_is_a_config_error(timeout: object) -> None:
    # 0 or less used to abandon every call; NaN left the call unbounded
    with pytest.raises(ConfigError, match="timeout takes a positive, finite number"):
        function_tool(add_two, timeout=timeout)  # pyright: ignore[reportArgumentType]


def add_two(value: int) -> int:
    """Add two."""
    return value + 2


@pytest.mark.parametrize(
    "name", ["has space", "a" * 65, "dot.ted", "slash/name", "ünicode", "colon:name"]
)
def test_invalid_names_are_config_errors(name: str) -> None:
    with pytest.raises(ConfigError, match="invalid tool name"):
        function_tool(add_two, name=name)


@pytest.mark.parametrize("name", ["a", "A-b_9", "x" * 64])
def test_valid_names(name: str) -> None:
    assert function_tool(add_two, name=name).name == name


def test_description_argument_replaces_a_missing_docstring() -> None:
    t = function_tool(_undocumented, name="echo", description="Echo the value.")
    assert t.definition.description == "Echo the value."


# -- Tool.from_schema ---------------------------------------------------------------------------

SEARCH_SCHEMA: JsonObject = {
    "type": "object",
    "properties": {
        "query": {"type": "string", "minLength": 1},
        "limit": {"type": "integer", "minimum": 1},
        "filters": {"type": "array", "items": {"type": "string"}},
    },
    "required": ["query"],
    "additionalProperties": False,
}


async def _echo(ctx: ToolContext, arguments: Mapping[str, Any]) -> object:
    return {"tool": ctx.tool, **arguments}


def search_tool(**overrides: Any) -> Tool:
    options: dict[str, Any] = {
        "name": "search",
        "description": "Search the index.",
        "input_schema": SEARCH_SCHEMA,
        "handler": _echo,
        **overrides,
    }
    return Tool.from_schema(**options)


def test_from_schema_definition() -> None:
    t = search_tool(
        title="Search",
        output_schema={"type": "object"},
        annotations=ToolAnnotations(read_only=True),
        timeout=3.0,
    )
    d = t.definition
    assert d.name == "search"
    assert d.description == "Search the index."
    assert d.input_schema == SEARCH_SCHEMA
    assert d.title == "Search"
    assert d.output_schema == {"type": "object"}
    assert d.annotations == ToolAnnotations(read_only=True)
    assert t.timeout == 3.0


def test_from_schema_accepts_valid_arguments_unchanged() -> None:
    arguments: JsonObject = {"query": "cats", "limit": 3, "filters": ["a", "b"]}
    assert search_tool().validator(arguments) == arguments


def test_from_schema_missing_required() -> None:
    with pytest.raises(
        ModelRetry, match=r"^invalid arguments: <arguments>: 'query' is a required property$"
    ):
        search_tool().validator({"limit": 2})


def test_from_schema_wrong_type() -> None:
    with pytest.raises(
        ModelRetry, match=r"^invalid arguments: limit: 'two' is not of type 'integer'$"
    ):
        search_tool().validator({"query": "cats", "limit": "two"})


def test_from_schema_nested_path() -> None:
    with pytest.raises(
        ModelRetry, match=r"^invalid arguments: filters\.1: 5 is not of type 'string'$"
    ):
        search_tool().validator({"query": "cats", "filters": ["ok", 5]})


def test_from_schema_additional_properties() -> None:
    with pytest.raises(ModelRetry, match=r"^invalid arguments: <arguments>: Additional properties"):
        search_tool().validator({"query": "cats", "colour": "red"})


def test_from_schema_keyword_constraints() -> None:
    with pytest.raises(
        ModelRetry, match=r"^invalid arguments: limit: 0 is less than the minimum of 1$"
    ):
        search_tool().validator({"query": "cats", "limit": 0})


def test_from_schema_reports_every_error() -> None:
    with pytest.raises(ModelRetry) as info:
        search_tool().validator({"limit": "x", "extra": 1})
    message = info.value.message
    assert "'query' is a required property" in message
    assert "Additional properties" in message
    assert "limit: 'x' is not of type 'integer'" in message


async def test_from_schema_handler_result_is_converted() -> None:
    t = search_tool()
    result = await call(t, {"query": "cats"}, ToolContext(run_id="r", call_id="c", tool="search"))
    assert result == ToolResult(
        content=(TextBlock(text='{"tool":"search","query":"cats"}'),),
        structured={"tool": "search", "query": "cats"},
    )


def test_from_schema_without_type_is_an_object_schema() -> None:
    t = search_tool(input_schema={"properties": {"q": {"type": "string"}}})
    assert t.validator({"q": "x"}) == {"q": "x"}
    with pytest.raises(ModelRetry, match="q: 1 is not of type 'string'"):
        t.validator({"q": 1})


@pytest.mark.parametrize(
    "schema",
    [{"type": "array"}, {"type": "string"}, {"type": ["object", "null"]}],
    ids=["array", "string", "type-list"],
)
def test_from_schema_refuses_non_object_schemas(schema: JsonObject) -> None:
    with pytest.raises(ConfigError, match="input_schema must describe an object"):
        search_tool(input_schema=schema)


@pytest.mark.parametrize(
    "schema",
    [
        {"type": "object", "properties": {"a": {"type": "nonsense"}}},
        {"type": "object", "required": "a"},
        {"type": "object", "properties": []},
        {"type": "object", "minProperties": -1},
    ],
    ids=["bad-type", "required-not-list", "properties-not-object", "negative-min"],
)
def test_from_schema_refuses_invalid_schemas(schema: JsonObject) -> None:
    with pytest.raises(ConfigError, match=r"^tool 'search': invalid input_schema: "):
        search_tool(input_schema=schema)


def test_from_schema_refuses_invalid_names() -> None:
    with pytest.raises(ConfigError, match="invalid tool name 'no spaces please'"):
        search_tool(name="no spaces please")


# -- ToolAnnotations ----------------------------------------------------------------------------


def test_unannotated_is_the_worst_case() -> None:
    hints = ToolAnnotations()
    assert not hints.is_read_only
    assert hints.is_destructive
    assert not hints.is_idempotent
    assert hints.is_open_world


def test_read_only_implies_safe() -> None:
    hints = ToolAnnotations(read_only=True)
    assert hints.is_read_only
    assert not hints.is_destructive
    assert hints.is_idempotent
    assert hints.is_open_world


def test_declared_hints() -> None:
    hints = ToolAnnotations(read_only=False, destructive=False, idempotent=True, open_world=False)
    assert not hints.is_read_only
    assert not hints.is_destructive
    assert hints.is_idempotent
    assert not hints.is_open_world


_HINT_VALUES: tuple[bool | None, ...] = (None, True, False)
_ALL_HINTS = [
    ToolAnnotations(read_only=r, destructive=d, idempotent=i, open_world=o)
    for r, d, i, o in itertools.product(_HINT_VALUES, repeat=4)
]


def test_tightened_never_loosens() -> None:
    for a, b in itertools.product(_ALL_HINTS, repeat=2):
        t = a.tightened(b)
        assert t.is_read_only <= (a.is_read_only and b.is_read_only), (a, b)
        assert t.is_destructive >= (a.is_destructive or b.is_destructive), (a, b)
        assert t.is_idempotent <= (a.is_idempotent and b.is_idempotent), (a, b)
        assert t.is_open_world >= (a.is_open_world or b.is_open_world), (a, b)
        assert t == b.tightened(a), (a, b)


def test_tightened_with_itself_is_identity() -> None:
    for a in _ALL_HINTS:
        assert a.tightened(a) == a


def test_tightened_examples() -> None:
    declared = ToolAnnotations(read_only=True, destructive=False, idempotent=True, open_world=False)
    assert declared.tightened(ToolAnnotations()) == ToolAnnotations()
    assert declared.tightened(
        ToolAnnotations(read_only=False, destructive=True, idempotent=False, open_world=True)
    ) == ToolAnnotations(read_only=False, destructive=True, idempotent=False, open_world=True)
    assert declared.tightened(
        ToolAnnotations(read_only=True, destructive=False, idempotent=True, open_world=True)
    ) == ToolAnnotations(read_only=True, destructive=False, idempotent=True, open_world=True)


# -- to_tool_result -----------------------------------------------------------------------------


@dataclasses.dataclass
class Row:
    id: int
    name: str
    tags: list[str]


class Summary(BaseModel):
    total: float
    rows: list[int]
    label: str | None = None


def test_str_becomes_text() -> None:
    assert to_tool_result("héllo") == ToolResult(content=(TextBlock(text="héllo"),))


def test_empty_str_becomes_empty_text() -> None:
    assert to_tool_result("") == ToolResult(content=(TextBlock(text=""),))


@pytest.mark.parametrize(
    ("value", "text"),
    [
        (0, "0"),
        (-17, "-17"),
        (10**18, "1000000000000000000"),
        (2.5, "2.5"),
        (-0.125, "-0.125"),
        (True, "true"),
        (False, "false"),
    ],
)
def test_scalars_become_text_and_structured(value: float, text: str) -> None:
    result = to_tool_result(value)
    assert result == ToolResult(content=(TextBlock(text=text),), structured=value)
    assert type(result.structured) is type(value)


def test_dict_becomes_json() -> None:
    result = to_tool_result({"a": 1, "b": [True, None], "c": "x"})
    assert result == ToolResult(
        content=(TextBlock(text='{"a":1,"b":[true,null],"c":"x"}'),),
        structured={"a": 1, "b": [True, None], "c": "x"},
    )


def test_list_becomes_json() -> None:
    assert to_tool_result([1, "two", 3.0]) == ToolResult(
        content=(TextBlock(text='[1,"two",3.0]'),), structured=[1, "two", 3.0]
    )


def test_empty_list_becomes_json() -> None:
    assert to_tool_result([]) == ToolResult(content=(TextBlock(text="[]"),), structured=[])


def test_none_becomes_null() -> None:
    assert to_tool_result(None) == ToolResult(content=(TextBlock(text="null"),), structured=None)


def test_pydantic_model_becomes_json() -> None:
    result = to_tool_result(Summary(total=1.5, rows=[1, 2]))
    assert result == ToolResult(
        content=(TextBlock(text='{"total":1.5,"rows":[1,2],"label":null}'),),
        structured={"total": 1.5, "rows": [1, 2], "label": None},
    )


def test_dataclass_becomes_json() -> None:
    result = to_tool_result(Row(id=3, name="n", tags=["a"]))
    assert result == ToolResult(
        content=(TextBlock(text='{"id":3,"name":"n","tags":["a"]}'),),
        structured={"id": 3, "name": "n", "tags": ["a"]},
    )


def test_list_of_models_becomes_json() -> None:
    result = to_tool_result([Point(x=1, y=2), Point(x=3, y=4)])
    assert result.structured == [{"x": 1, "y": 2}, {"x": 3, "y": 4}]
    assert result.content == (TextBlock(text='[{"x":1,"y":2},{"x":3,"y":4}]'),)


@pytest.mark.parametrize(
    "block",
    [
        TextBlock(text="t"),
        ImageBlock(data="iVBORw0KGgo=", mime_type="image/png"),
        ResourceBlock(uri="file:///a.txt", mime_type="text/plain", text="a"),
    ],
    ids=["text", "image", "resource"],
)
def test_content_block_stays_a_block(block: TextBlock | ImageBlock | ResourceBlock) -> None:
    assert to_tool_result(block) == ToolResult(content=(block,))


def test_sequence_of_blocks_stays_blocks() -> None:
    blocks = [TextBlock(text="a"), ImageBlock(data="AA==", mime_type="image/gif")]
    assert to_tool_result(blocks) == ToolResult(content=tuple(blocks))
    assert to_tool_result(tuple(blocks)) == ToolResult(content=tuple(blocks))


def test_tool_result_passes_through() -> None:
    original = ToolResult.error("boom")
    assert to_tool_result(original) is original
    structured = ToolResult.text("x", structured={"k": 1})
    assert to_tool_result(structured) is structured


NAN, INF = float("nan"), float("inf")


@pytest.mark.parametrize(
    ("value", "found"),
    [
        (NAN, "nan"),
        (-INF, "-inf"),
        ({"rows": [{"mean": 1.0}, {"mean": INF}]}, "inf (at rows[1].mean)"),
        ([1.0, [2.0, NAN]], "nan (at [1][1])"),
        ((0.5, NAN), "nan (at [1])"),
        (Summary(total=NAN, rows=[1]), "nan (at total)"),
        ([Summary(total=1.0, rows=[]), Summary(total=-INF, rows=[])], "-inf (at [1].total)"),
        (ToolResult.text("x", structured={"scores": [INF]}), "inf (at scores[0])"),
    ],
    ids=["nan", "-inf", "dict", "list", "tuple", "model", "models", "tool_result"],
)
def test_a_non_finite_float_in_a_result_is_an_error_naming_where(value: object, found: str) -> None:
    assert to_tool_result(value) == ToolResult.error(
        f"the tool's result holds {found}, a number JSON cannot carry (it would reach you as "
        "null), so the result was withheld. The tool must return a string or None for such a "
        "value"
    )


def test_null_and_finite_floats_in_a_result_stay_as_they_are() -> None:
    result = to_tool_result({"mean": None, "max": 1e308, "min": -0.0})
    assert result == ToolResult(
        content=(TextBlock(text='{"mean":null,"max":1e+308,"min":-0.0}'),),
        structured={"mean": None, "max": 1e308, "min": -0.0},
    )


@tool
def average(values: list[float]) -> float:
    """The mean of some numbers (NaN for none, as numpy gives).

    Args:
        values: The numbers.
    """
    return sum(values) / len(values) if values else NAN


async def test_a_tool_returning_nan_gives_the_model_an_error() -> None:
    assert await call(average, {"values": [1, 2]}) == ToolResult(
        content=(TextBlock(text="1.5"),), structured=1.5
    )
    result = await call(average, {"values": []})
    assert result.is_error
    assert result.structured is None
    assert "holds nan, a number JSON cannot carry" in content_text(result.content)
