"""The OpenAI adapter's mapping, against recorded wire responses served over a mock transport.

The real-server tests (``tests/realmodel``) run it against llama.cpp's HTTP server; the small
model there never returns native tool calls (it writes them in ```json fences), so native
tool calls, parallel calls, bad arguments and error statuses are checked here, on responses
in the exact shape OpenAI's API sends them, parsed by the real ``openai`` SDK over HTTP.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import httpx2
import pytest
from genai_prices import Usage, calc_price

from tether.content import TextBlock
from tether.errors import ModelError
from tether.messages import AssistantMessage, ToolCall, ToolResultMessage, UserMessage
from tether.models.base import ModelRequest, ModelSettings, ResponseDone, TextDelta, ToolCallDelta
from tether.models.openai import OpenAIModel
from tether.models.prices import Price
from tether.models.registry import resolve_model
from tether.tools.builtin import calculate, days_until

Handler = Callable[[httpx2.Request], httpx2.Response]


def completion(message: dict[str, Any], *, finish: str = "stop") -> dict[str, Any]:
    return {
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "created": 1763800000,
        "model": "gpt-4o-mini-2024-07-18",
        "choices": [
            {"index": 0, "message": {"role": "assistant", **message}, "finish_reason": finish}
        ],
        "usage": {"prompt_tokens": 120, "completion_tokens": 30, "total_tokens": 150},
    }


def tool_call(call_id: str, name: str, arguments: str) -> dict[str, Any]:
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}


def serve(
    handler: Handler, model: str = "gpt-4o-mini", **options: Any
) -> tuple[OpenAIModel, list[Any]]:
    seen: list[Any] = []

    def record(request: httpx2.Request) -> httpx2.Response:
        if request.content:
            seen.append(json.loads(request.content))
        return handler(request)

    client = httpx2.AsyncClient(transport=httpx2.MockTransport(record))
    return OpenAIModel(model, api_key="sk-test", http_client=client, **options), seen


def listed(
    model: str, input_tokens: int, output_tokens: int, *, cached: int = 0, provider: str = "openai"
) -> float:
    """What genai-prices (the adapter's source of prices) says one request costs."""
    usage = Usage(input_tokens=input_tokens, output_tokens=output_tokens, cache_read_tokens=cached)
    return float(calc_price(usage, model, provider_id=provider).total_price)


@pytest.fixture(autouse=True)
def _openai_itself(monkeypatch: pytest.MonkeyPatch) -> None:  # pyright: ignore[reportUnusedFunction]
    """Requests go to OpenAI's API unless a test says otherwise (priced by where they go)."""
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)


REQUEST = ModelRequest(
    instructions="Be precise.",
    messages=(
        UserMessage(text="17% of 2340, and days until 2027-01-01?"),
        AssistantMessage(
            text="",
            tool_calls=(ToolCall(id="c1", name="calculate", arguments={"expression": "1"}),),
        ),
        ToolResultMessage(call_id="c1", name="calculate", content=(TextBlock(text="1"),)),
    ),
    tools=(calculate.definition, days_until.definition),
    settings=ModelSettings(max_output_tokens=200, temperature=0.0, seed=7),
)


async def test_parallel_native_tool_calls_and_the_request_body() -> None:
    reply = completion(
        {
            "content": None,
            "tool_calls": [
                tool_call("call_a", "calculate", '{"expression": "17% * 2340"}'),
                tool_call("call_b", "days_until", '{"target": "2027-01-01"}'),
            ],
        },
        finish="tool_calls",
    )
    model, seen = serve(lambda _: httpx2.Response(200, json=reply))
    async with model:
        response = await model.request(REQUEST)
    assert response.tool_calls == (
        ToolCall(id="call_a", name="calculate", arguments={"expression": "17% * 2340"}),
        ToolCall(id="call_b", name="days_until", arguments={"target": "2027-01-01"}),
    )
    assert response.finish_reason == "tool_calls"
    assert response.usage.input_tokens == 120
    assert response.usage.output_tokens == 30
    assert response.usage.cost == pytest.approx(listed("gpt-4o-mini", 120, 30))
    body = seen[0]
    assert body["model"] == "gpt-4o-mini"
    assert body["messages"][0] == {"role": "system", "content": "Be precise."}
    assert body["messages"][2]["tool_calls"][0]["function"] == {
        "name": "calculate",
        "arguments": '{"expression":"1"}',
    }
    assert body["messages"][3] == {
        "role": "tool",
        "tool_call_id": "c1",
        "content": '<tool_output tool="calculate">\n1\n</tool_output>',
    }
    assert [t["function"]["name"] for t in body["tools"]] == ["calculate", "days_until"]
    assert body["tool_choice"] == "auto"
    assert body["max_completion_tokens"] == 200
    assert body["seed"] == 7


@pytest.mark.parametrize(
    ("arguments", "problem"),
    [('{"expression": ', "not valid JSON"), ('["1"]', "must be a JSON object")],
)
async def test_bad_arguments_become_a_parse_error_the_loop_reports(
    arguments: str, problem: str
) -> None:
    reply = completion({"content": None, "tool_calls": [tool_call("c", "calculate", arguments)]})
    model, _ = serve(lambda _: httpx2.Response(200, json=reply))
    async with model:
        response = await model.request(REQUEST)
    assert response.tool_calls[0].parse_error is not None
    assert problem in response.tool_calls[0].parse_error


async def test_an_unknown_model_costs_none_and_a_free_one_zero() -> None:
    reply = completion({"content": "hi"})
    unknown = OpenAIModel(
        "my-finetune",
        api_key="k",
        http_client=httpx2.AsyncClient(
            transport=httpx2.MockTransport(lambda _: httpx2.Response(200, json=reply))
        ),
    )
    async with unknown:
        assert (await unknown.request(REQUEST)).usage.cost is None
    assert resolve_model("ollama:qwen2.5-coder:1.5b").name == "ollama:qwen2.5-coder:1.5b"
    free, _ = serve(
        lambda _: httpx2.Response(200, json=reply),
        "qwen2.5-coder:1.5b",
        base_url="http://127.0.0.1:11434/v1",
        provider="ollama",
        free=True,
    )
    async with free:
        assert (await free.request(REQUEST)).usage.cost == 0.0


async def test_a_server_at_a_custom_base_url_is_unknown_unless_priced(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # vLLM or llama.cpp serving a model under OpenAI's name: not OpenAI's model, nor its price.
    reply = completion({"content": "hi"})
    local = "http://127.0.0.1:8000/v1"
    model, _ = serve(lambda _: httpx2.Response(200, json=reply), base_url=local)
    async with model:
        assert (await model.request(REQUEST)).usage.cost is None
    monkeypatch.setenv("OPENAI_BASE_URL", local)  # the same server, named by the environment
    model, _ = serve(lambda _: httpx2.Response(200, json=reply))
    async with model:
        assert (await model.request(REQUEST)).usage.cost is None
    price = Price(input_per_mtok=1.0, output_per_mtok=2.0)
    model, _ = serve(lambda _: httpx2.Response(200, json=reply), base_url=local, price=price)
    async with model:
        assert (await model.request(REQUEST)).usage.cost == pytest.approx((120 + 60) / 1e6)


async def test_a_hosted_service_is_priced_by_its_url() -> None:
    reply = completion({"content": "hi"})
    model, _ = serve(
        lambda _: httpx2.Response(200, json=reply),
        "llama-3.3-70b-versatile",
        base_url="https://api.groq.com/openai/v1",
        provider="groq",
    )
    async with model:
        cost = (await model.request(REQUEST)).usage.cost
    assert cost == pytest.approx(listed("llama-3.3-70b-versatile", 120, 30, provider="groq"))


async def test_cached_input_is_priced_at_the_cache_rate() -> None:
    reply = completion({"content": "hi"})
    reply["usage"]["prompt_tokens_details"] = {"cached_tokens": 100}
    model, _ = serve(lambda _: httpx2.Response(200, json=reply))
    async with model:
        usage = (await model.request(REQUEST)).usage
    assert usage.input_tokens == 120  # cached tokens are input tokens too
    assert usage.cost is not None
    assert usage.cost == pytest.approx(listed("gpt-4o-mini", 120, 30, cached=100))
    assert usage.cost < listed("gpt-4o-mini", 120, 30)


def sse(*chunks: dict[str, Any]) -> bytes:
    return b"".join(b"data: " + json.dumps(c).encode() + b"\n\n" for c in chunks) + (
        b"data: [DONE]\n\n"
    )


def chunk(delta: dict[str, Any], finish: str | None = None, usage: Any = None) -> dict[str, Any]:
    return {
        "id": "chatcmpl-2",
        "object": "chat.completion.chunk",
        "created": 1763800000,
        "model": "gpt-4o-mini",
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish}] if delta else [],
        "usage": usage,
    }


async def test_streaming_text_and_a_tool_call_assembled_from_fragments() -> None:
    body = sse(
        chunk({"role": "assistant", "content": "Let me "}),
        chunk({"content": "check."}),
        chunk(
            {
                "tool_calls": [
                    {
                        "index": 0,
                        "id": "call_z",
                        "type": "function",
                        "function": {"name": "days_until", "arguments": '{"tar'},
                    }
                ]
            }
        ),
        chunk({"tool_calls": [{"index": 0, "function": {"arguments": 'get": "2027-01-01"}'}}]}),
        chunk({}, None, None),
        chunk({"content": None}, "tool_calls"),
        chunk(
            {},
            usage={
                "prompt_tokens": 50,
                "completion_tokens": 12,
                "total_tokens": 62,
                "prompt_tokens_details": {"cached_tokens": 40},
            },
        ),
    )
    model, seen = serve(
        lambda _: httpx2.Response(200, content=body, headers={"content-type": "text/event-stream"})
    )
    async with model:
        items = [i async for i in model.stream(REQUEST)]
    assert [i.text for i in items if isinstance(i, TextDelta)] == ["Let me ", "check."]
    assert [i for i in items if isinstance(i, ToolCallDelta)] == [
        ToolCallDelta(index=0, arguments='{"tar', name="days_until", id="call_z"),
        ToolCallDelta(index=0, arguments='get": "2027-01-01"}'),
    ]
    done = items[-1]
    assert isinstance(done, ResponseDone)
    assert done.response.text == "Let me check."
    assert done.response.tool_calls == (
        ToolCall(id="call_z", name="days_until", arguments={"target": "2027-01-01"}),
    )
    assert done.response.usage.output_tokens == 12
    assert done.response.usage.cost == pytest.approx(listed("gpt-4o-mini", 50, 12, cached=40))
    assert done.response.finish_reason == "tool_calls"
    assert seen[0]["stream"] is True
    assert seen[0]["stream_options"] == {"include_usage": True}


@pytest.mark.parametrize(
    ("status", "transient"), [(429, True), (500, True), (503, True), (400, False), (401, False)]
)
async def test_errors_carry_the_servers_words_and_whether_to_retry(
    status: int, transient: bool
) -> None:
    error = {"error": {"message": f"problem {status} from the server", "type": "x"}}
    model, _ = serve(lambda _: httpx2.Response(status, json=error))
    async with model:
        with pytest.raises(ModelError, match=f"problem {status} from the server") as info:
            await model.request(REQUEST)
    assert info.value.transient is transient
    assert info.value.status_code == status


async def test_a_model_the_server_does_not_serve_names_the_ones_it_does() -> None:
    def handler(request: httpx2.Request) -> httpx2.Response:
        if request.url.path.endswith("/models"):
            data = [{"id": n, "object": "model", "created": 0, "owned_by": "me"} for n in "ab"]
            return httpx2.Response(200, json={"object": "list", "data": data})
        return httpx2.Response(404, json={"error": {"message": "model 'zz' not found"}})

    model, _ = serve(handler, model="zz")
    async with model:
        with pytest.raises(ModelError, match="The server serves: a, b; name one of them"):
            await model.request(REQUEST)


def test_no_api_key_for_openai_is_a_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    with pytest.raises(ModelError, match="set OPENAI_API_KEY"):
        OpenAIModel("gpt-4o")._connect()  # pyright: ignore[reportPrivateUsage]


def streamed(body: bytes) -> Handler:
    return lambda _: httpx2.Response(
        200, content=body, headers={"content-type": "text/event-stream"}
    )


async def test_a_stream_cut_before_its_end_is_a_transient_error() -> None:
    # no finish_reason, no [DONE]: the connection ended, not the answer ("definitely NOT"
    # was recorded as the whole answer and the run finished)
    cut = b"".join(
        b"data: " + json.dumps(c).encode() + b"\n\n"
        for c in (chunk({"content": "The answer is "}), chunk({"content": "definitely NOT"}))
    )
    model, _ = serve(streamed(cut))
    async with model:
        with pytest.raises(ModelError, match="stream ended before the answer") as info:
            _ = [i async for i in model.stream(REQUEST)]
    assert info.value.transient


async def test_an_error_event_in_the_stream_is_worth_another_try() -> None:
    body = b"".join(
        [
            b"data: " + json.dumps(chunk({"content": "Hel"})).encode() + b"\n\n",
            b'data: {"error": {"message": "overloaded mid-stream", "type": "server_error"}}\n\n',
        ]
    )
    model, _ = serve(streamed(body))
    async with model:
        with pytest.raises(ModelError, match="overloaded mid-stream") as info:
            _ = [i async for i in model.stream(REQUEST)]
    assert info.value.transient


@pytest.mark.parametrize(
    ("usage", "counts"),
    [
        ({"prompt_tokens": float("nan"), "completion_tokens": 2.0}, (0, 2)),
        ({"prompt_tokens": -1_000_000, "completion_tokens": "12"}, (0, 0)),
        ({"prompt_tokens": None, "completion_tokens": 1e30}, (0, 0)),
        ({"prompt_tokens": 7, "completion_tokens": True}, (7, 0)),
    ],
)
async def test_token_counts_that_are_not_counts_are_taken_as_none(
    usage: dict[str, Any], counts: tuple[int, int]
) -> None:
    # the SDK passes on what the server sends: NaN reached the log, which then could not be read
    body = completion({"content": "hi"})
    body["usage"] = usage
    model, _ = serve(lambda _: httpx2.Response(200, content=json.dumps(body).encode()))
    async with model:
        response = await model.request(REQUEST)
    assert (response.usage.input_tokens, response.usage.output_tokens) == counts


@pytest.mark.parametrize(
    "body",
    [
        json.dumps(completion({"content": 42})).encode(),
        b"[1, 2, 3]",
        json.dumps({"choices": "abc"}).encode(),
    ],
)
async def test_an_answer_that_is_not_a_chat_completion_says_so(body: bytes) -> None:
    model, _ = serve(lambda _: httpx2.Response(200, content=body))
    async with model:
        with pytest.raises(ModelError, match="not an OpenAI chat completion") as info:
            await model.request(REQUEST)
    assert not info.value.transient
    assert "gpt-4o-mini" in str(info.value)


async def test_a_huge_error_message_is_cut() -> None:
    error = {"error": {"message": "x" * 5_000_000, "type": "x"}}
    model, _ = serve(lambda _: httpx2.Response(400, json=error))
    async with model:
        with pytest.raises(ModelError) as info:
            await model.request(REQUEST)
    assert len(str(info.value)) < 3000
    assert "(5000000 characters)" in str(info.value)


def test_one_model_serves_runs_in_successive_event_loops() -> None:
    # run_sync twice: the client kept from the first run's (closed) loop failed the second
    # with "Event loop is closed"; a real server, so that real connections are pooled
    import threading
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    from tether import Agent
    from tether.testing import allow_model_requests

    answer = json.dumps(completion({"content": "done"})).encode()

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"  # keep-alive: the client pools the connection

        def do_POST(self) -> None:
            self.rfile.read(int(self.headers["content-length"]))
            self.send_response(200)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(answer)))
            self.end_headers()
            self.wfile.write(answer)

        def log_message(self, format: str, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        base_url = f"http://127.0.0.1:{server.server_address[1]}/v1"
        agent = Agent(name="twice", model=OpenAIModel("m", base_url=base_url, api_key="k"))
        for _ in range(3):
            with allow_model_requests():  # to this test's own server
                outcome = agent.run_sync("say done")
            assert outcome.status == "finished", outcome.error
            assert outcome.output == "done"
    finally:
        server.shutdown()
        server.server_close()


async def test_a_rate_limit_carries_the_servers_retry_after() -> None:
    error = {"error": {"message": "slow down", "type": "rate_limit_error"}}
    model, _ = serve(lambda _: httpx2.Response(429, json=error, headers={"retry-after": "5"}))
    async with model:
        with pytest.raises(ModelError, match="slow down") as info:
            await model.request(REQUEST)
    assert info.value.transient
    assert info.value.retry_after == 5.0


def test_run_sync_leaves_an_http_client_the_caller_gave_open() -> None:
    # run_sync closed the SDK client, which closed the caller's httpx client: the second run
    # failed ("Cannot send a request, as the client has been closed")
    from tether import Agent
    from tether.testing import allow_model_requests

    answer = json.dumps(completion({"content": "done"})).encode()
    model, _ = serve(lambda _: httpx2.Response(200, content=answer))
    agent = Agent(name="twice", model=model)
    for _ in range(2):
        with allow_model_requests():
            outcome = agent.run_sync("say done")
        assert outcome.status == "finished", outcome.error
