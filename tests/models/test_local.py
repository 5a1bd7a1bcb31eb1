"""The local model adapter's request shaping (no model loaded; real runs are separate)."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Any, Literal

import jsonschema
import orjson
import pytest
from pydantic import BaseModel

from tether.errors import ModelError, ModelWeightsError
from tether.messages import UserMessage
from tether.models._constrained import (
    NAME_STOP,
    STEP_OPENING,
    call_grammar,
    name_grammar,
    step_body,
    step_response,
    step_schema,
)
from tether.models.base import ModelRequest
from tether.models.local import LocalModel, local_body
from tether.models.promptcache import prompt_cache_dir
from tether.models.registry import resolve_model
from tether.models.weights import KNOWN_MODELS, installed
from tether.tools import tool
from tether.tools.base import ToolDefinition
from tether.tools.builtin import calculate, current_time, days_until


def test_the_step_schema_admits_exactly_one_call_of_a_known_tool() -> None:
    schema = step_schema((calculate.definition, days_until.definition))
    validator = jsonschema.Draft202012Validator(schema)

    def valid(instance: dict[str, Any]) -> bool:
        return not list(validator.iter_errors(instance))  # pyright: ignore[reportUnknownMemberType]

    assert valid({"tool": "calculate", "arguments": {"expression": "1+1"}})
    assert not valid({"tool": "calculate", "arguments": {"expr": "1+1"}})
    assert not valid({"tool": "rm", "arguments": {}})
    assert not valid({"tool": "calculate", "arguments": {"expression": "1"}, "x": 1})
    assert not valid({"tool": "calculate", "arguments": {"expression": "1", "extra": True}})


@tool
def set_thermostat(room: str, mode: Literal["heat", "eco"], target: float | None = None) -> str:
    """Set a room's thermostat.

    Args:
        room: The room.
        mode: "heat" to reach the target, "eco" to save energy while nobody is home.
        target: The target temperature; leave it out to keep the current one.
    """
    raise NotImplementedError


def test_the_model_reads_each_tools_whole_contract() -> None:
    """Descriptions, enums and defaults of parameters reach the model's eyes, not only the
    grammar: a small model otherwise leaves out an optional parameter the user asked for,
    paraphrases an enum value, or writes "None" as a string."""
    request = ModelRequest(
        instructions="Be brief.",
        messages=(UserMessage(text="Nobody is home: save energy in the kitchen."),),
        tools=(set_thermostat.definition, days_until.definition),
    )
    system = step_body(request)["messages"][0]["content"]
    assert system.startswith("Be brief.")
    block = system[system.index("<tools>\n") + len("<tools>\n") : system.index("\n</tools>")]
    listed = [json.loads(line)["function"] for line in block.splitlines()]
    assert [f["name"] for f in listed] == ["set_thermostat", "days_until"]
    shown = listed[0]["parameters"]
    assert shown["properties"]["mode"]["enum"] == ["heat", "eco"]
    assert "save energy while nobody is home" in shown["properties"]["mode"]["description"]
    assert shown["properties"]["target"]["default"] is None
    assert shown["required"] == ["room", "mode"]
    assert "additionalProperties" not in shown  # only the grammar needs it
    assert listed[1]["parameters"]["properties"]["timezone"]["default"] == "UTC"


def test_local_model_strings(tmp_path: Path) -> None:
    assert resolve_model("local").name == "local:qwen2.5-coder-1.5b"
    gguf = tmp_path / "x.gguf"
    gguf.write_bytes(b"GGUF")
    assert resolve_model(f"local:{gguf}").name == "local:x.gguf"
    assert resolve_model("local") is resolve_model("local")  # loaded once per process


def test_a_local_model_that_is_not_installed_is_refused_when_named(tmp_path: Path) -> None:
    if installed(KNOWN_MODELS["qwen2.5-coder-0.5b"]):
        pytest.skip("the small model is installed here")
    with pytest.raises(ModelWeightsError, match=r"tether\[local-small\]"):
        resolve_model("local:qwen2.5-coder-0.5b")
    with pytest.raises(ModelWeightsError, match="does not exist"):
        resolve_model(f"local:{tmp_path / 'missing.gguf'}")
    with pytest.raises(ModelError, match="unknown local model"):
        LocalModel(model="gpt-9")


def test_with_no_model_configured_the_installed_embedded_model_is_used(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("TETHER_MODEL", raising=False)
    monkeypatch.setattr("tether.models.registry.local_model_available", lambda: True)
    assert resolve_model(None).name == "local:qwen2.5-coder-1.5b"  # named, not loaded yet
    monkeypatch.setenv("TETHER_MODEL", "ollama:llama3.2")
    assert resolve_model(None).name == "ollama:llama3.2"  # the environment wins


def test_an_earlier_call_is_shown_compact_as_the_model_is_asked_to_write_it() -> None:
    """The guide asks for compact JSON (fewer tokens to generate); earlier calls are shown
    the same way, so the model keeps to it and the server's cache of its reply holds."""
    from tether.messages import AssistantMessage, ToolCall, UserMessage
    from tether.models._constrained import step_body
    from tether.models.base import ModelRequest
    from tether.tools.builtin import calculate

    call = ToolCall(id="c1", name="calculate", arguments={"expression": "1+1", "note": "é"})
    request = ModelRequest(
        instructions="Compute.",
        messages=(UserMessage(text="1+1?"), AssistantMessage(tool_calls=(call,))),
        tools=(calculate.definition,),
    )
    messages = step_body(request)["messages"]
    assert messages[2] == {
        "role": "assistant",
        "content": '{"tool":"calculate","arguments":{"expression":"1+1","note":"é"}}',
    }
    assert 'no spaces between its keys and values: {"tool":NAME' in messages[0]["content"]


def test_a_request_without_tools_is_answered_in_plain_text() -> None:
    """The best-effort answer after a limit has no tools: no grammar, no tool block."""
    request = ModelRequest(
        instructions="Be brief.",
        messages=(UserMessage(text="the task"),),
        tools=(),
        tool_choice="none",
    )
    body = step_body(request)
    assert "response_format" not in body
    assert body["messages"][0] == {"role": "system", "content": "Be brief."}
    reply = {
        "choices": [{"message": {"content": " It is 42. "}, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 12, "completion_tokens": 4},
    }
    response = step_response(reply, call_id="c", cost=0.0, plain=True)
    assert response.text == "It is 42."
    assert response.tool_calls == ()
    assert response.usage.output_tokens == 4


def test_a_local_step_first_asks_for_the_tool_only() -> None:
    """The first request prefills the opening and decodes a tool's name, stopping at its
    closing quote; everything else is the step's own body."""
    request = ModelRequest(
        instructions="Be brief.",
        messages=(UserMessage(text="What is 2 + 2?"),),
        tools=(calculate.definition, days_until.definition),
    )
    shaped = step_body(request)
    body = local_body(request)
    assert "response_format" not in body
    assert body["messages"] == [
        *shaped["messages"],
        {"role": "assistant", "content": STEP_OPENING},
    ]
    assert body["grammar"] == name_grammar(request.tools)
    assert body["stop"] == [NAME_STOP]
    assert {k: v for k, v in body.items() if k not in ("grammar", "messages", "stop")} == {
        k: v for k, v in shaped.items() if k not in ("response_format", "messages")
    }
    grammar = body["grammar"]
    assert _accepts(grammar, 'calculate"')
    assert _accepts(grammar, 'days_until"')
    assert not _accepts(grammar, 'calc"')
    assert not _accepts(grammar, 'calculate","')  # the stop ends it: nothing after the quote
    prefixed = name_grammar((calculate.definition, replace(calculate.definition, name="calc")))
    assert _accepts(prefixed, 'calc"')  # a name that begins another is still told apart
    assert _accepts(prefixed, 'calculate"')
    plain = ModelRequest(instructions="Be brief.", messages=(UserMessage(text="Hi"),), tools=())
    assert local_body(plain) == step_body(plain)  # a plain answer: no grammar at all


def test_the_prompt_cache_goes_where_the_environment_says(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.delenv("TETHER_PROMPT_CACHE", raising=False)
    assert prompt_cache_dir(tmp_path) == tmp_path / "prompts"
    monkeypatch.setenv("TETHER_PROMPT_CACHE", str(tmp_path / "mine"))
    assert prompt_cache_dir(tmp_path) == tmp_path / "mine"
    for off in ("off", "OFF", "0", "false", "no"):
        monkeypatch.setenv("TETHER_PROMPT_CACHE", off)
        assert prompt_cache_dir(tmp_path) is None


class Address(BaseModel):
    street: str
    city: str


class Parcel(BaseModel):
    city: str
    kilos: float


@tool
def ship(item: str, to: Address) -> str:
    """Ship an item.

    Args:
        item: What to ship.
        to: Where to.
    """
    raise NotImplementedError


@tool
def weigh(parcel: Parcel) -> str:
    """Weigh a parcel.

    Args:
        parcel: The parcel.
    """
    raise NotImplementedError


def test_nested_definitions_resolve_from_the_step_schemas_root() -> None:
    """A tool's ``$defs`` (a nested model) and two tools' different models of one name."""
    clash: dict[str, Any] = dict(weigh.definition.input_schema)  # Parcel, named as ship's
    clash["$defs"] = {"Address": clash.pop("$defs")["Parcel"]}
    clash["properties"] = {"parcel": {"$ref": "#/$defs/Address"}}
    schema = step_schema((ship.definition, replace(weigh.definition, input_schema=clash)))
    validator = jsonschema.Draft202012Validator(schema)
    assert _valid(
        validator, {"tool": "ship", "arguments": {"item": "a", "to": {"street": "x", "city": "y"}}}
    )
    assert not _valid(validator, {"tool": "ship", "arguments": {"item": "a", "to": {"x": 1}}})
    assert _valid(validator, {"tool": "weigh", "arguments": {"parcel": {"city": "c", "kilos": 2}}})
    assert not _valid(
        validator, {"tool": "weigh", "arguments": {"parcel": {"street": "x", "city": "y"}}}
    )
    grammar = call_grammar(ship.definition).grammar
    assert '"$ref":"#/$defs/Address"' in grammar
    assert '"$defs":{"Address"' in grammar


def _valid(validator: jsonschema.Draft202012Validator, instance: Any) -> bool:
    return not list(validator.iter_errors(instance))  # pyright: ignore[reportUnknownMemberType]


class _Replies:
    """A stand-in for llama.cpp's server: the given replies' contents, one per request."""

    def __init__(self, *contents: str, prompt: int = 100) -> None:
        self.contents = list(contents)
        self.bodies: list[dict[str, Any]] = []
        self.prompt = prompt

    def handle_chat_completions(self, body: dict[str, Any]) -> dict[str, Any]:
        self.bodies.append(body)
        content = self.contents[min(len(self.bodies), len(self.contents)) - 1]  # the last again
        message = {"role": "assistant", "content": content}
        prefilled = len(body["messages"][-1]["content"])  # a token a character, here
        usage = {"prompt_tokens": self.prompt + prefilled, "completion_tokens": 5}
        return {"choices": [{"message": message, "finish_reason": "stop"}], "usage": usage}


_OPENING = '{"tool":"calculate","arguments":{"expression'


@pytest.mark.parametrize(
    ("replies", "expression"),
    [
        (['{"tool":"calculate', f'{_OPENING}":"2+2"}}}}'], "2+2"),  # each repeats the prefill
        (["calculate", '":"2+2"}}'], "2+2"),  # only what was decoded after it
        (["calculate", '":"2+2'], "2+2"),  # ended at the stop string, which is left out
        (["calculate", '":"say \\', '":"say \\"}}"}}'], 'say "}}'),  # a stop in a string
        (["calculate", '":"{1: 2}'], "{1: 2}"),  # at the stop, after a brace of the value
    ],
    ids=[
        "repeats-prefill",
        "decoded-only",
        "at-the-stop",
        "stop-inside-a-string",
        "at-the-stop-after-a-brace",
    ],
)
async def test_a_step_is_its_tools_name_then_the_rest_of_its_call(
    tmp_path: Path, replies: list[str], expression: str
) -> None:
    """Two requests: the name, then the call with what that tool forces prefilled. The
    reply is read whether or not the server repeats a prefill (llama.cpp versions differ)
    and whether it ended at the call's stop string; one that stopped inside a string is
    asked for again without it. The step's usage is its prompt once and every token of its
    reply."""
    gguf = tmp_path / "x.gguf"
    gguf.write_bytes(b"GGUF")
    model = LocalModel(gguf, prompt_cache=False)
    server = _Replies(*replies)
    model._server = server  # pyright: ignore[reportPrivateUsage]
    request = ModelRequest(
        instructions="",
        messages=(UserMessage(text="2+2?"),),
        tools=(calculate.definition, days_until.definition),
    )
    response = await model.request(request)
    assert len(server.bodies) == len(replies)
    first, second, *again = server.bodies
    assert first["messages"][-1] == {"role": "assistant", "content": STEP_OPENING}
    assert second["messages"][:-1] == first["messages"][:-1]
    assert second["messages"][-1] == {"role": "assistant", "content": _OPENING}
    assert second["grammar"] == call_grammar(calculate.definition).grammar
    assert second["stop"] == ['"}}']
    assert second["max_tokens"] == first["max_tokens"] - 5
    if again:
        assert again[0] == {k: v for k, v in second.items() if k != "stop"}
    (call,) = response.tool_calls
    assert (call.name, call.arguments, call.parse_error) == (
        "calculate",
        {"expression": expression},
        None,
    )
    prefilled_more = len(_OPENING) - len(STEP_OPENING)
    assert response.usage.input_tokens == 100 + len(STEP_OPENING)
    assert response.usage.output_tokens == prefilled_more + 5


async def test_a_reply_that_ignored_the_grammar_is_an_error(tmp_path: Path) -> None:
    """llama.cpp decodes without a grammar it could not compile, and says nothing."""
    gguf = tmp_path / "x.gguf"
    gguf.write_bytes(b"GGUF")
    tools = (calculate.definition, days_until.definition)
    request = ModelRequest(instructions="", messages=(UserMessage(text="2+2?"),), tools=tools)
    for replies in (["Sure! The answer"], ['{"tool":"calculate', "four, I think"]):
        model = LocalModel(gguf, prompt_cache=False)
        model._server = _Replies(*replies)  # pyright: ignore[reportPrivateUsage]
        with pytest.raises(ModelError, match="does not follow the step's grammar") as caught:
            await model.request(request)
        assert caught.value.model == model.name


async def test_a_failed_request_is_a_model_error_naming_the_model(tmp_path: Path) -> None:
    gguf = tmp_path / "x.gguf"
    gguf.write_bytes(b"GGUF")
    model = LocalModel(gguf, prompt_cache=False)

    class Failing:
        def handle_chat_completions(self, body: dict[str, Any]) -> dict[str, Any]:
            return {"error": {"message": "the context is full"}}

    model._server = Failing()  # pyright: ignore[reportPrivateUsage]
    request = ModelRequest(
        instructions="", messages=(UserMessage(text="2+2?"),), tools=(calculate.definition,)
    )
    with pytest.raises(ModelError, match="the context is full") as caught:
        await model.request(request)
    assert caught.value.model == "local:x.gguf"


@tool
def convert(amount: float, source: str, target: str = "EUR") -> str:
    """Convert money.

    Args:
        amount: How much.
        source: From this currency.
        target: To this one.
    """
    raise NotImplementedError


_CALLS: list[tuple[Any, list[dict[str, Any]]]] = [
    (
        days_until,
        [
            {"target": "2027-01-01"},
            {"target": "2027-01-01", "timezone": "UTC"},
            {"target": 'say "hi"\\ \n é \u0001'},  # escapes of every kind
            {"timezone": "UTC", "target": "2027-01-01"},  # out of the schema's order
            {},
            {"target": 3},
            {"target": "x", "extra": 1},
        ],
    ),
    (calculate, [{"expression": "1+1"}, {"expression": None}, {"expr": "1"}]),
    (  # the first argument is a number: its key is forced, its value is not a string
        convert,
        [
            {"amount": 3.5, "source": "USD"},
            {"amount": 3, "source": "USD", "target": "CHF"},
            {"amount": "3", "source": "USD"},
            {"amount": 3},
            {"source": "USD", "amount": 3},
        ],
    ),
    (current_time, [{}, {"timezone": "UTC"}, {"timezone": 1}]),  # nothing required
    (
        set_thermostat,
        [
            {"room": "hall", "mode": "eco"},
            {"room": "hall", "mode": "eco", "target": 20.5},
            {"room": "hall", "mode": "eco", "target": None},
            {"room": "hall", "mode": "cold"},
        ],
    ),
    (  # nested definitions resolve inside every argument's rule
        ship,
        [
            {"item": "a", "to": {"street": "x", "city": "y"}},
            {"item": "a", "to": {"street": "x"}},
            {"item": "a", "to": "y"},
        ],
    ),
    (weigh, [{"parcel": {"city": "c", "kilos": 2}}, {"parcel": {"city": "c"}}]),
]


@pytest.mark.parametrize(("fn", "calls"), _CALLS, ids=[fn.name for fn, _ in _CALLS])
def test_the_rest_of_a_call_admits_what_the_step_schema_admits(
    fn: Any, calls: list[dict[str, Any]]
) -> None:
    """After the name, the second request's prefill plus its grammar write exactly the
    compact calls that llguidance's own JSON Schema grammar of the tool's arguments (the
    step schema's) writes: same calls, same bytes, what the tool forces read with the prompt."""
    definition: ToolDefinition = fn.definition
    opening, grammar, stop = call_grammar(definition)
    whole_schema: Any = step_schema((definition,))
    arguments_schema: dict[str, Any] = whole_schema["oneOf"][0]["properties"]["arguments"]
    if "$defs" in whole_schema:
        arguments_schema = {**arguments_schema, "$defs": whole_schema["$defs"]}
    schema = {"x-guidance": {"whitespace_flexible": False}, **arguments_schema}
    whole = f'%llguidance {{}}\nstart: args "}}"\nargs: %json {orjson.dumps(schema).decode()}'
    head = f'{STEP_OPENING}{definition.name}","arguments":'
    assert opening.startswith(head[:-2])  # it stops before the key's closing quote
    validator = jsonschema.Draft202012Validator(arguments_schema)
    seen = {True: 0, False: 0}
    for arguments in calls:
        written = orjson.dumps({"tool": definition.name, "arguments": arguments}).decode()
        expected = _accepts(whole, written[len(head) :])
        mine = written.startswith(opening) and _accepts(grammar, written[len(opening) :])
        assert mine == expected, arguments
        if expected:
            assert _valid(validator, arguments), arguments
        seen[expected] += 1
    assert seen[True], "each tool's samples hold calls it admits"
    # a call may stop at ``"}}`` only where no argument holds an object or a list
    assert (stop is None) == (fn in (ship, weigh)), stop
    assert seen[False], "and calls it refuses"


def _accepts(grammar: str, text: str) -> bool:
    """Whether llguidance (the engine llama.cpp runs) lets ``grammar`` write exactly ``text``."""
    llguidance = pytest.importorskip("llguidance")
    tokenizer = llguidance.LLTokenizer("byte")
    matcher = llguidance.LLMatcher(tokenizer, llguidance.LLMatcher.grammar_from_lark(grammar))
    assert not matcher.is_error(), matcher.get_error()
    tokens = tokenizer.tokenize_str(text)
    return matcher.try_consume_tokens(tokens) == len(tokens) and matcher.is_accepting()
