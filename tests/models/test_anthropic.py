"""The Anthropic adapter against recorded wire responses.

No Anthropic server exists here, and these tests never reach one. The bodies they answer
with are recorded wire responses in the Messages API's format (JSON replies, and SSE text
for streams) under ``tests/models/wire/anthropic/``. They are served over HTTP through an
``httpx2.MockTransport``, so the real ``anthropic`` SDK builds every request and parses
every reply exactly as it would against the real API.
"""

from __future__ import annotations

import json
import sys
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx2
import pytest
from genai_prices import Usage, calc_price

from tests.support import lookup
from tether import Agent
from tether.content import TextBlock
from tether.errors import MissingExtraError, ModelError
from tether.messages import AssistantMessage, Message, ToolCall, ToolResultMessage, UserMessage
from tether.models.anthropic import DEFAULT_MAX_TOKENS, AnthropicModel
from tether.models.base import (
    ModelProfile,
    ModelRequest,
    ModelSettings,
    ResponseDone,
    StreamEvent,
    TextDelta,
    ToolCallDelta,
)
from tether.models.prices import PRICES, Price
from tether.testing import allow_model_requests

WIRE = Path(__file__).parent / "wire" / "anthropic"
MODEL = "claude-haiku-4-5"
LOOKUP = lookup.definition


def listed(input_tokens: int, output_tokens: int, *, cache_read: int = 0) -> float:
    """What genai-prices (the adapter's source of prices) says a request to MODEL costs."""
    usage = Usage(
        input_tokens=input_tokens, output_tokens=output_tokens, cache_read_tokens=cache_read
    )
    return float(calc_price(usage, MODEL, provider_id="anthropic").total_price)


def recorded(name: str, status: int = 200, **headers: str) -> httpx2.Response:
    """A recorded reply: a JSON body, or an SSE stream for ``.txt`` files."""
    body = (WIRE / name).read_bytes()
    kind = "text/event-stream; charset=utf-8" if name.endswith(".txt") else "application/json"
    if status >= 400:
        headers.setdefault("request-id", json.loads(body)["request_id"])
    return httpx2.Response(status, content=body, headers={"content-type": kind, **headers})


Reply = httpx2.Response | Callable[[httpx2.Request], httpx2.Response]


@dataclass
class Wire:
    """The HTTP side: answers each request with the next queued reply, and keeps it."""

    replies: list[Reply] = field(default_factory=lambda: [])
    requests: list[httpx2.Request] = field(default_factory=lambda: [])
    http: httpx2.AsyncClient = field(init=False)

    def __post_init__(self) -> None:
        self.http = httpx2.AsyncClient(transport=httpx2.MockTransport(self._handle))

    def _handle(self, request: httpx2.Request) -> httpx2.Response:
        self.requests.append(request)
        assert self.replies, f"unexpected request: {request.method} {request.url}"
        reply = self.replies.pop(0)
        return reply if isinstance(reply, httpx2.Response) else reply(request)

    def reply(self, *replies: Reply | str) -> None:
        self.replies.extend(recorded(r) if isinstance(r, str) else r for r in replies)

    @property
    def bodies(self) -> list[dict[str, Any]]:
        return [json.loads(r.content) for r in self.requests]

    def model(self, name: str = MODEL, **options: Any) -> AnthropicModel:
        return AnthropicModel(name, api_key="sk-ant-test", http_client=self.http, **options)


@pytest.fixture
async def wire() -> AsyncIterator[Wire]:
    wire = Wire()
    async with wire.http:
        yield wire
    assert not wire.replies, "a queued reply was never asked for"


def ask(*messages: Message, **fields: Any) -> ModelRequest:
    return ModelRequest(
        instructions=fields.pop("instructions", "Be exact."),
        messages=messages or (UserMessage(text="What does tether mean?"),),
        tools=fields.pop("tools", (LOOKUP,)),
        **fields,
    )


async def streamed(
    model: AnthropicModel, request: ModelRequest, *, into: list[StreamEvent] | None = None
) -> list[StreamEvent]:
    """Every event of a stream (kept in ``into`` as they come, for a stream that fails)."""
    events = [] if into is None else into
    async for event in model.stream(request):
        events.append(event)
    return events


# -- the model ------------------------------------------------------------------------


def test_name_and_profile() -> None:
    model = AnthropicModel(MODEL)  # no key needed until the first request
    assert model.name == "anthropic:claude-haiku-4-5"
    assert model.model == MODEL
    assert model.profile == ModelProfile(
        native_tools=True,
        parallel_tool_calls=True,
        json_schema_output=False,
        streaming=True,
        context_window=200_000,  # requests are sized before they are sent
    )
    assert AnthropicModel(MODEL, context_window=1_000_000).profile.context_window == 1_000_000
    assert AnthropicModel(MODEL, context_window=None).profile.context_window is None


# -- responses ------------------------------------------------------------------------


async def test_a_tool_use_reply_is_a_tool_call_with_its_exact_arguments(wire: Wire) -> None:
    wire.reply("tool_use.json")
    response = await wire.model().request(ask())
    assert response.tool_calls == (
        ToolCall(id="toolu_01T1x1fJ34qAmk2tNTrN7Up6", name="lookup", arguments={"key": "tether"}),
    )
    assert response.text == "I'll look the word up in the dictionary."
    assert response.finish_reason == "tool_use"
    assert response.reasoning is None


async def test_a_text_answer_with_its_thinking(wire: Wire) -> None:
    wire.reply("end_turn.json")
    response = await wire.model().request(ask(UserMessage(text="17 * 23?"), tools=()))
    assert response.text == "17 * 23 = 391."
    assert response.tool_calls == ()
    assert response.reasoning == "The user asks for 17 * 23. 17 * 20 = 340, 17 * 3 = 51, so 391."
    assert response.finish_reason == "end_turn"


async def test_usage_counts_cached_input_and_prices_cache_reads_at_their_rate(
    wire: Wire,
) -> None:
    wire.reply("tool_use.json")
    usage = (await wire.model().request(ask())).usage
    # 412 fresh + 1024 read from the cache + 0 written to it
    assert (usage.input_tokens, usage.output_tokens, usage.requests) == (1436, 58, 1)
    assert usage.cost is not None
    assert usage.cost == pytest.approx(listed(1436, 58, cache_read=1024))
    assert usage.cost < listed(1436, 58)  # a cache read costs less than fresh input


async def test_a_server_at_another_base_url_is_unknown_unless_priced(
    wire: Wire, monkeypatch: pytest.MonkeyPatch
) -> None:
    wire.reply("end_turn.json", "end_turn.json")
    proxy = "https://llm-gateway.example.com/anthropic"
    assert (await wire.model(base_url=proxy).request(ask())).usage.cost is None
    monkeypatch.setitem(PRICES, MODEL, Price(input_per_mtok=2.0, output_per_mtok=10.0))
    usage = (await wire.model(base_url=proxy).request(ask())).usage
    assert usage.cost == pytest.approx(
        (usage.input_tokens * 2.0 + usage.output_tokens * 10.0) / 1e6
    )


async def test_an_unknown_model_costs_none_never_zero(wire: Wire) -> None:
    wire.reply("tool_use.json")
    usage = (await wire.model("claude-private-finetune").request(ask())).usage
    assert usage.input_tokens == 1436
    assert usage.cost is None


async def test_a_given_price_sets_the_cost(wire: Wire) -> None:
    wire.reply("tool_use.json", "tool_use.json")
    price = Price(input_per_mtok=2.0, output_per_mtok=10.0)
    for name in ("claude-private-finetune", MODEL):  # set, and overriding genai-prices
        usage = (await wire.model(name, price=price).request(ask())).usage
        assert usage.cost == pytest.approx((1436 * 2.0 + 58 * 10.0) / 1e6)


async def test_arguments_that_are_not_an_object_are_a_parse_error(wire: Wire) -> None:
    # Not a recording: the recorded reply with its input made a list, as a broken proxy might.
    body = json.loads((WIRE / "tool_use.json").read_text())
    body["content"][1]["input"] = ["tether"]
    wire.reply(httpx2.Response(200, json=body))
    (call,) = (await wire.model().request(ask())).tool_calls
    assert (call.id, call.name, call.arguments) == ("toolu_01T1x1fJ34qAmk2tNTrN7Up6", "lookup", {})
    assert call.parse_error == 'not a JSON object: ["tether"]'


async def test_a_tool_call_cut_off_by_max_tokens_never_runs_half_its_arguments(
    wire: Wire,
) -> None:
    wire.reply("max_tokens_tool_use.json")
    response = await wire.model().request(ask())
    (call,) = response.tool_calls
    assert response.finish_reason == "max_tokens"
    assert call.name == "write_file"
    assert call.arguments == {}
    assert call.parse_error == (
        'the reply was cut off at max_tokens inside this call: {"path":"notes.txt"}'
    )


# -- requests -------------------------------------------------------------------------


async def test_the_request_body_alternates_roles_and_groups_tool_results(wire: Wire) -> None:
    wire.reply("end_turn.json")
    request = ask(
        UserMessage(text="Look up tether and agent."),
        AssistantMessage(
            text="Looking both up.",
            tool_calls=(
                ToolCall(id="toolu_a", name="lookup", arguments={"key": "tether"}),
                ToolCall(id="toolu_b", name="lookup", arguments={"key": "agnet"}),
            ),
        ),
        ToolResultMessage(call_id="toolu_a", name="lookup", content=(TextBlock(text="a rope"),)),
        ToolResultMessage(
            call_id="toolu_b",
            name="lookup",
            content=(TextBlock(text="unknown key 'agnet'"),),
            is_error=True,
        ),
        UserMessage(text="One step left: answer now."),
        tool_choice="required",
        settings=ModelSettings(max_output_tokens=512, temperature=0.2, timeout=30.0),
    )
    await wire.model().request(request)
    (sent,) = wire.requests
    assert (sent.method, sent.url.path) == ("POST", "/v1/messages")
    assert sent.headers["x-stainless-timeout"] == "30.0"
    assert wire.bodies == [
        {
            "model": "claude-haiku-4-5",
            "max_tokens": 512,
            "temperature": 0.2,
            "system": "Be exact.",
            "tools": [
                {
                    "name": "lookup",
                    "description": LOOKUP.description,
                    "input_schema": LOOKUP.input_schema,
                }
            ],
            "tool_choice": {"type": "any"},
            "messages": [
                {
                    "role": "user",
                    "content": [{"type": "text", "text": "Look up tether and agent."}],
                },
                {
                    "role": "assistant",
                    "content": [
                        {"type": "text", "text": "Looking both up."},
                        {
                            "type": "tool_use",
                            "id": "toolu_a",
                            "name": "lookup",
                            "input": {"key": "tether"},
                        },
                        {
                            "type": "tool_use",
                            "id": "toolu_b",
                            "name": "lookup",
                            "input": {"key": "agnet"},
                        },
                    ],
                },
                {
                    "role": "user",
                    "content": [
                        {
                            "type": "tool_result",
                            "tool_use_id": "toolu_a",
                            "is_error": False,
                            "content": '<tool_output tool="lookup">\na rope\n</tool_output>',
                        },
                        {
                            "type": "tool_result",
                            "tool_use_id": "toolu_b",
                            "is_error": True,
                            "content": (
                                '<tool_output tool="lookup" status="error">\n'
                                "unknown key 'agnet'\n</tool_output>"
                            ),
                        },
                        {"type": "text", "text": "One step left: answer now."},
                    ],
                },
            ],
        }
    ]


async def test_tool_choice_maps_onto_the_api(wire: Wire) -> None:
    wire.reply("end_turn.json", "end_turn.json", "end_turn.json")
    model = wire.model()
    for choice in ("auto", "required", "none"):
        await model.request(ask(tool_choice=choice))
    assert [b["tool_choice"] for b in wire.bodies] == [
        {"type": "auto"},
        {"type": "any"},
        {"type": "none"},
    ]
    assert all(b["tools"][0]["name"] == "lookup" for b in wire.bodies)


async def test_no_tools_means_no_tools_and_no_tool_choice(wire: Wire) -> None:
    wire.reply("end_turn.json")
    await wire.model().request(ask(UserMessage(text="17 * 23?"), tools=(), instructions=""))
    (body,) = wire.bodies
    assert body == {
        "model": "claude-haiku-4-5",
        "max_tokens": DEFAULT_MAX_TOKENS,
        "messages": [{"role": "user", "content": [{"type": "text", "text": "17 * 23?"}]}],
    }


async def test_an_answer_without_tools_after_tool_calls_forbids_the_tools_used(
    wire: Wire,
) -> None:
    # The API refuses tool_use blocks in a request that defines no tools; a final,
    # tool-free answer (the loop's best effort at a limit) must still be accepted.
    wire.reply("end_turn.json")
    request = ask(
        UserMessage(text="What does tether mean?"),
        AssistantMessage(tool_calls=(ToolCall(id="toolu_a", name="lookup", arguments={}),)),
        ToolResultMessage(call_id="toolu_a", name="lookup", content=(TextBlock(text="a rope"),)),
        tools=(),
        tool_choice="none",
    )
    await wire.model().request(request)
    (body,) = wire.bodies
    assert body["tools"] == [
        {"name": "lookup", "description": "Not available now.", "input_schema": {"type": "object"}}
    ]
    assert body["tool_choice"] == {"type": "none"}
    assert [m["role"] for m in body["messages"]] == ["user", "assistant", "user"]
    assert body["messages"][1]["content"] == [
        {"type": "tool_use", "id": "toolu_a", "name": "lookup", "input": {}}
    ]


async def test_max_tokens_comes_from_the_settings_or_the_model(wire: Wire) -> None:
    wire.reply("end_turn.json", "end_turn.json")
    await wire.model(max_tokens=1000).request(ask())
    await wire.model(max_tokens=1000).request(ask(settings=ModelSettings(max_output_tokens=64)))
    assert [b["max_tokens"] for b in wire.bodies] == [1000, 64]
    assert all("temperature" not in b for b in wire.bodies)


# -- streaming ------------------------------------------------------------------------


async def test_streaming_yields_deltas_then_the_whole_response(wire: Wire) -> None:
    wire.reply("stream_tool_use.txt")
    events = await streamed(wire.model(), ask())
    *deltas, done = events
    assert deltas == [
        TextDelta(text="I'll look"),
        TextDelta(text=" the word up"),
        TextDelta(text=" in the dictionary."),
        # the call: its name and id first, then its arguments' JSON as it came
        ToolCallDelta(index=0, name="lookup", id="toolu_01Jr6mQx3VdT8kLw2NcZb7Fh"),
        ToolCallDelta(index=0, arguments='{"ke'),
        ToolCallDelta(index=0, arguments='y": "te'),
        ToolCallDelta(index=0, arguments='ther"}'),
    ]
    assert isinstance(done, ResponseDone)
    response = done.response
    assert response.text == "I'll look the word up in the dictionary."
    assert response.tool_calls == (
        ToolCall(id="toolu_01Jr6mQx3VdT8kLw2NcZb7Fh", name="lookup", arguments={"key": "tether"}),
    )
    assert response.finish_reason == "tool_use"
    assert (response.usage.input_tokens, response.usage.output_tokens) == (472, 61)
    assert response.usage.cost == pytest.approx(listed(472, 61))
    (body,) = wire.bodies
    assert body["stream"] is True


async def test_a_streamed_tool_call_cut_off_by_max_tokens_is_a_parse_error(wire: Wire) -> None:
    wire.reply("stream_max_tokens.txt")
    *pieces, done = await streamed(wire.model(), ask())
    assert all(isinstance(p, ToolCallDelta) for p in pieces)  # the call, as far as it came
    assert isinstance(done, ResponseDone)
    (call,) = done.response.tool_calls
    assert call.arguments == {}
    assert call.parse_error == (  # less its last word, which may be a cut secret
        "the reply was cut off at max_tokens inside this call: "
        '{"path": "notes.txt", "content": "Dear team,\\nThe'
    )


async def test_an_error_event_mid_stream_is_transient(wire: Wire) -> None:
    wire.reply("stream_overloaded.txt")
    seen: list[StreamEvent] = []
    with pytest.raises(ModelError) as caught:
        await streamed(wire.model(), ask(), into=seen)
    assert seen == [TextDelta(text="Let me")]
    error = caught.value
    assert error.transient
    assert error.status_code is None  # the HTTP status was 200; the failure came later
    assert error.model == "anthropic:claude-haiku-4-5"
    assert "(overloaded_error): Overloaded" in str(error)


async def test_a_stream_that_ends_early_is_a_transient_error(wire: Wire) -> None:
    wire.reply("stream_cut.txt")
    with pytest.raises(ModelError, match="ended before message_stop") as caught:
        await streamed(wire.model(), ask())
    assert caught.value.transient


# -- errors ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("status", "fixture", "transient", "words"),
    [
        (429, "error_429.json", True, "would exceed the rate limit for your organization"),
        (529, "error_529.json", True, "(overloaded_error): Overloaded"),
        (500, "error_500.json", True, "(api_error): Internal server error"),
        (400, "error_400.json", False, "prompt is too long: 214318 tokens > 200000 maximum"),
        (401, "error_401.json", False, "invalid x-api-key; check ANTHROPIC_API_KEY"),
    ],
)
async def test_http_errors_are_model_errors(
    wire: Wire, status: int, fixture: str, transient: bool, words: str
) -> None:
    wire.reply(recorded(fixture, status))
    with pytest.raises(ModelError) as caught:
        await wire.model().request(ask())
    error = caught.value
    assert (error.transient, error.status_code) == (transient, status)
    assert error.model == "anthropic:claude-haiku-4-5"
    assert f"HTTP {status}" in str(error)
    assert words in str(error)
    request_id = json.loads((WIRE / fixture).read_bytes())["request_id"]
    assert f"(request id {request_id})" in str(error)
    assert len(wire.requests) == 1  # the SDK did not retry on its own: the loop does


async def test_the_apis_x_should_retry_header_wins(wire: Wire) -> None:
    wire.reply(recorded("error_429.json", 429, **{"x-should-retry": "false"}))
    with pytest.raises(ModelError) as caught:
        await wire.model().request(ask())
    assert not caught.value.transient


async def test_a_refused_stream_is_a_model_error(wire: Wire) -> None:
    wire.reply(recorded("error_529.json", 529))
    with pytest.raises(ModelError) as caught:
        await streamed(wire.model(), ask())
    assert (caught.value.transient, caught.value.status_code) == (True, 529)


def _refuse(exc: type[httpx2.TransportError]) -> Callable[[httpx2.Request], httpx2.Response]:
    def handle(request: httpx2.Request) -> httpx2.Response:
        raise exc("simulated", request=request)

    return handle


@pytest.mark.parametrize(
    ("failure", "words"),
    [
        (httpx2.ConnectError, "could not reach the Anthropic API"),
        (httpx2.ReadTimeout, "the request timed out"),
    ],
)
async def test_connection_failures_and_timeouts_are_transient(
    wire: Wire, failure: type[httpx2.TransportError], words: str
) -> None:
    wire.reply(_refuse(failure))
    with pytest.raises(ModelError, match=words) as caught:
        await wire.model().request(ask())
    assert caught.value.transient
    assert caught.value.status_code is None


# -- credentials and the extra ---------------------------------------------------------


@pytest.fixture
def no_credentials(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """No key in the environment and no credentials profile on disk."""
    for name in (
        "ANTHROPIC_API_KEY",
        "ANTHROPIC_AUTH_TOKEN",
        "ANTHROPIC_PROFILE",
        "ANTHROPIC_CONFIG_DIR",
        "ANTHROPIC_IDENTITY_TOKEN",
        "ANTHROPIC_IDENTITY_TOKEN_FILE",
        "ANTHROPIC_FEDERATION_RULE_ID",
        "ANTHROPIC_ORGANIZATION_ID",
    ):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))


@pytest.mark.usefixtures("no_credentials")
async def test_a_missing_api_key_is_a_clear_error_at_request_time(wire: Wire) -> None:
    model = AnthropicModel(MODEL, http_client=wire.http)  # building it is fine
    with pytest.raises(ModelError, match=r"no Anthropic API key\. Set ANTHROPIC_API_KEY") as caught:
        await model.request(ask())
    assert not caught.value.transient
    assert wire.requests == []


@pytest.mark.usefixtures("no_credentials")
async def test_the_key_may_come_from_the_environment(
    wire: Wire, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-from-env")
    wire.reply("end_turn.json")
    await AnthropicModel(MODEL, http_client=wire.http).request(ask())
    assert any("sk-ant-from-env" in value for value in wire.requests[0].headers.values())


async def test_without_the_sdk_the_error_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "anthropic", None)  # import anthropic -> ImportError
    with pytest.raises(MissingExtraError, match=r'pip install "tether\[anthropic\]"'):
        await AnthropicModel(MODEL, api_key="sk-ant-test").request(ask())


# -- end to end -----------------------------------------------------------------------


async def test_an_agent_runs_a_two_turn_task_on_recorded_responses(wire: Wire) -> None:
    wire.reply("tool_use.json", "finish_task.json")
    agent = Agent(instructions="Answer from the dictionary.", model=wire.model(), tools=[lookup])
    with allow_model_requests():  # a "real" model, but it only reaches the MockTransport
        outcome = await agent.run("What does tether mean?")
    assert outcome.status == "finished"
    assert outcome.output == "A tether is a rope that limits movement."
    assert (outcome.steps, outcome.tool_calls) == (2, 1)
    assert outcome.usage.input_tokens == 1436 + 1530
    assert outcome.usage.output_tokens == 58 + 71
    assert outcome.usage.cost == pytest.approx(listed(1436, 58, cache_read=1024) + listed(1530, 71))

    first, second = wire.bodies
    assert [t["name"] for t in first["tools"]] == ["lookup", "finish_task"]
    assert first["system"].startswith("Answer from the dictionary.")
    goal = {"role": "user", "content": [{"type": "text", "text": "What does tether mean?"}]}
    assert first["messages"] == [goal]
    assert second["messages"] == [
        goal,
        {
            "role": "assistant",
            "content": [
                {"type": "text", "text": "I'll look the word up in the dictionary."},
                {
                    "type": "tool_use",
                    "id": "toolu_01T1x1fJ34qAmk2tNTrN7Up6",
                    "name": "lookup",
                    "input": {"key": "tether"},
                },
            ],
        },
        {
            "role": "user",
            "content": [
                {
                    "type": "tool_result",
                    "tool_use_id": "toolu_01T1x1fJ34qAmk2tNTrN7Up6",
                    "is_error": False,
                    "content": (
                        '<tool_output tool="lookup">\na rope that limits movement\n</tool_output>'
                    ),
                }
            ],
        },
    ]


def test_a_call_cut_off_inside_a_secret_leaves_out_its_last_word() -> None:
    # '"dsn": "postgres://app:Pg2Passw0rd' (no "@host" yet): no pattern knows it for a secret
    from tether.models.anthropic import _Part, _tool_call  # pyright: ignore[reportPrivateUsage]

    part = _Part(kind="tool_use", call_id="c1", name="connect")
    part.json.append('{"db": "main", "dsn": "postgres://app:Pg2Passw0rd')
    call = _tool_call(part, cut_off=True)
    assert call.parse_error is not None
    assert "Pg2Passw0rd" not in call.parse_error
    assert call.parse_error.endswith('{"db": "main", "dsn":')
