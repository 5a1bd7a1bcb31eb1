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
from tether.models._constrained import STEP_OPENING, step_body, step_response, step_schema
from tether.models.base import ModelRequest
from tether.models.local import LocalModel, local_body
from tether.models.promptcache import prompt_cache_dir
from tether.models.registry import resolve_model
from tether.models.weights import KNOWN_MODELS, installed
from tether.tools import tool
from tether.tools.builtin import calculate, days_until


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


def test_a_local_step_is_decoded_as_compact_json_under_the_same_schema() -> None:
    """The grammar continues the prefilled opening with exactly ``step_schema``'s calls,
    written as the next step renders them (compact), so the prompt cache holds."""
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
    assert {k: v for k, v in body.items() if k not in ("grammar", "messages")} == {
        k: v for k, v in shaped.items() if k not in ("response_format", "messages")
    }
    head, start, *rules = body["grammar"].split("\n")
    assert head == "%llguidance {}"
    variants = shaped["response_format"]["json_schema"]["schema"]["oneOf"]
    alternatives = start.removeprefix("start: ").split(" | ")
    assert len(alternatives) == len(rules) == len(variants) == 2
    for n, (alternative, rule, variant) in enumerate(
        zip(alternatives, rules, variants, strict=True)
    ):
        name = variant["properties"]["tool"]["const"]
        literal, argument, closing = alternative.split(" ")
        assert argument == f"args{n}"
        assert closing == '"}"'
        label, _, schema = rule.partition(": %json ")
        assert label == f"args{n}"
        parsed = json.loads(schema)
        assert parsed.pop("x-guidance") == {"whitespace_flexible": False}
        assert parsed == variant["properties"]["arguments"]
        call = {"expression": "2 + 2"} if name == "calculate" else {"target": "2027-01-01"}
        written = STEP_OPENING + json.loads(literal) + orjson.dumps(call).decode() + "}"
        assert written == orjson.dumps({"tool": name, "arguments": call}).decode()
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
    body = local_body(
        ModelRequest(instructions="", messages=(UserMessage(text="x"),), tools=(ship.definition,))
    )
    assert '"$ref":"#/$defs/Address"' in body["grammar"]
    assert '"$defs":{"Address"' in body["grammar"]


def _valid(validator: jsonschema.Draft202012Validator, instance: Any) -> bool:
    return not list(validator.iter_errors(instance))  # pyright: ignore[reportUnknownMemberType]


class _Replies:
    """A stand-in for llama.cpp's server: the reply content it is given, whatever it is asked."""

    def __init__(self, content: str) -> None:
        self.content = content
        self.bodies: list[dict[str, Any]] = []

    def handle_chat_completions(self, body: dict[str, Any]) -> dict[str, Any]:
        self.bodies.append(body)
        message = {"role": "assistant", "content": self.content}
        return {"choices": [{"message": message, "finish_reason": "stop"}], "usage": {}}


@pytest.mark.parametrize(
    "content",
    [
        '{"tool":"calculate","arguments":{"expression":"2+2"}}',  # the prefill and the rest
        'calculate","arguments":{"expression":"2+2"}}',  # only what was decoded after it
    ],
)
async def test_a_step_reads_its_call_whether_or_not_the_reply_repeats_the_prefill(
    tmp_path: Path, content: str
) -> None:
    gguf = tmp_path / "x.gguf"
    gguf.write_bytes(b"GGUF")
    model = LocalModel(gguf, prompt_cache=False)
    server = _Replies(content)
    model._server = server  # pyright: ignore[reportPrivateUsage]
    request = ModelRequest(
        instructions="", messages=(UserMessage(text="2+2?"),), tools=(calculate.definition,)
    )
    response = await model.request(request)
    assert server.bodies[0]["messages"][-1] == {"role": "assistant", "content": STEP_OPENING}
    (call,) = response.tool_calls
    assert (call.name, call.arguments, call.parse_error) == (
        "calculate",
        {"expression": "2+2"},
        None,
    )
