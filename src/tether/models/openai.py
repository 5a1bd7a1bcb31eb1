"""OpenAI and OpenAI-compatible servers (``tether[openai]``), through the official ``openai`` SDK.

``openai:MODEL`` talks to OpenAI (or to ``$OPENAI_BASE_URL``); ``ollama:MODEL`` to a local
Ollama (``$OLLAMA_HOST``, default ``http://127.0.0.1:11434``); ``OpenAIModel(model,
base_url=...)`` to any other server that speaks the API: vLLM, LM Studio, llama.cpp's server.

Native tools, parallel tool calls, ``tool_choice``, streaming deltas and usage map onto
tether's model port. The SDK's own retries are off: tether's loop retries transient errors
(429, 5xx, timeouts, dropped connections) with back-off, and records each failure as an event.
A model the server does not serve is a clear error that lists the models it does serve.
No redirect is followed, to another host or on the same one: a request goes to ``base_url``
or nowhere, and a redirect is an error naming the address the server gave.
"""

from __future__ import annotations

import importlib.util
import os
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Any, Literal, cast

import orjson

from tether._internal.redirects import refused_redirect
from tether.errors import MissingExtraError, ModelError
from tether.messages import AssistantMessage, Message, ToolCall, ToolResultMessage, UserMessage
from tether.models._constrained import step_body, step_response
from tether.models._loopbound import current_loop
from tether.models.base import (
    Model,
    ModelProfile,
    ModelRequest,
    ModelResponse,
    ResponseDone,
    StreamEvent,
    TextDelta,
    ToolCallDelta,
)
from tether.models.fence import fence
from tether.models.prices import Price, cost_of
from tether.retry import retry_after
from tether.usage import Usage

if TYPE_CHECKING:
    import httpx2
    from openai import AsyncOpenAI, AsyncStream
    from openai.types import CompletionUsage
    from openai.types.chat import ChatCompletion, ChatCompletionChunk

__all__ = ["OLLAMA_URL", "OpenAIModel", "ollama_base_url"]

OLLAMA_URL = "http://127.0.0.1:11434"
"""Where Ollama listens unless ``$OLLAMA_HOST`` says otherwise."""


def ollama_base_url() -> str:
    """The OpenAI-compatible endpoint of the local Ollama (``$OLLAMA_HOST`` or the default)."""
    host = os.environ.get("OLLAMA_HOST") or OLLAMA_URL
    if "://" not in host:
        host = f"http://{host}"
    return host.rstrip("/") + "/v1"


class OpenAIModel(Model):
    """A chat model behind the OpenAI API, or any server compatible with it.

    Args:
        model: The model's name on the server.
        base_url: The API's base URL (default: OpenAI, or ``$OPENAI_BASE_URL``).
        api_key: Default: ``$OPENAI_API_KEY``; servers that need none get a placeholder.
        provider: The prefix of the model's name in events (``openai``, ``ollama``).
        price: The price per million tokens. Default: ``tether.models.prices`` (your
            ``PRICES``, then genai-prices' price at the server the requests go to: OpenAI's
            own API and the hosted services genai-prices knows by URL are priced, your own
            server is not). A model with no known price costs ``None`` (unknown), never 0,
            unless ``free``. Cached input tokens are priced at the cache rate.
        free: The model runs on your own machine (Ollama, llama.cpp): every request costs 0.
        tool_calling: ``native``: the API's own tool calls. ``constrained``: every step is one
            call decoded under a JSON Schema of the tools (``response_format``), for small
            models whose native tool calls are unreliable; the server must support JSON
            Schema output (llama.cpp, vLLM, Ollama and OpenAI do).
        profile: What the model can do, if not the defaults (native tools, parallel calls,
            streaming, JSON Schema output).
        client: A ready ``openai.AsyncOpenAI`` (overrides ``base_url`` and ``api_key``).
        http_client: An ``httpx2.AsyncClient`` (the SDK's HTTP library) for it to use (proxies, tests).
    """

    def __init__(
        self,
        model: str,
        *,
        base_url: str | None = None,
        api_key: str | None = None,
        provider: str = "openai",
        price: Price | None = None,
        free: bool = False,
        tool_calling: Literal["native", "constrained"] = "native",
        profile: ModelProfile | None = None,
        client: AsyncOpenAI | None = None,
        http_client: httpx2.AsyncClient | None = None,
    ) -> None:
        self.model = model
        self._base_url = base_url
        self._api_key = api_key
        self._provider = provider
        self._price = price
        self._free = free
        self._constrained = tool_calling == "constrained"
        self._profile = profile or ModelProfile(
            native_tools=True,
            parallel_tool_calls=not self._constrained,
            json_schema_output=True,
            streaming=not self._constrained,
        )
        self._calls = 0
        self._client = client
        self._http_client = http_client
        self._client_given = client is not None
        self._client_loop = current_loop()
        if client is None and importlib.util.find_spec("openai") is None:
            raise MissingExtraError("openai", "openai")  # now, before a run is stored

    @property
    def name(self) -> str:
        """``provider:model``."""
        return f"{self._provider}:{self.model}"

    @property
    def profile(self) -> ModelProfile:
        """What the model can do."""
        return self._profile

    def _connect(self) -> AsyncOpenAI:
        if self._client is not None and (self._client_given or self._client_loop is current_loop()):
            return self._client
        try:
            import openai
        except ImportError:
            raise MissingExtraError("openai", "openai") from None
        api_key = self._api_key or os.environ.get("OPENAI_API_KEY")
        if api_key is None:
            if self._base_url is None and not os.environ.get("OPENAI_BASE_URL"):
                raise ModelError(
                    "no OpenAI API key: set OPENAI_API_KEY, or pass api_key=... "
                    "(for a local server, pass its base_url)",
                    model=self.name,
                )
            api_key = "not-needed"  # local servers ignore it; the SDK insists on one
        # The SDK's own HTTP client follows redirects, to any host (_internal.redirects).
        http_client = self._http_client or openai.DefaultAsyncHttpxClient(follow_redirects=False)
        self._client = openai.AsyncOpenAI(
            api_key=api_key, base_url=self._base_url, max_retries=0, http_client=http_client
        )
        self._client_loop = current_loop()  # a run in another loop makes its own (_loopbound)
        return self._client

    async def aclose(self) -> None:
        """Close the HTTP connections (a client or an HTTP client passed in is the caller's)."""
        client, self._client = self._client, None
        if client is not None and not self._client_given and self._http_client is None:
            await client.close()

    # -- requests ---------------------------------------------------------------------

    def _body(self, request: ModelRequest) -> dict[str, Any]:
        body: dict[str, Any] = {"model": self.model, "messages": _messages(request)}
        if request.tools and request.tool_choice != "none":
            body["tools"] = [
                {
                    "type": "function",
                    "function": {
                        "name": t.name,
                        "description": t.description,
                        "parameters": t.input_schema,
                    },
                }
                for t in request.tools
            ]
            body["tool_choice"] = request.tool_choice
            if not self._profile.parallel_tool_calls:
                body["parallel_tool_calls"] = False
        settings = request.settings
        if settings.max_output_tokens is not None:
            # OpenAI's reasoning models take only the new name; other servers the old one.
            key = "max_completion_tokens" if self._provider == "openai" else "max_tokens"
            body[key] = settings.max_output_tokens
        if settings.temperature is not None:
            body["temperature"] = settings.temperature
        if settings.seed is not None:
            body["seed"] = settings.seed
        if settings.timeout is not None:
            body["timeout"] = settings.timeout
        return body

    async def request(self, request: ModelRequest) -> ModelResponse:
        """One chat completion."""
        client = self._connect()
        if self._constrained and request.tools and request.tool_choice != "none":
            return await self._constrained_step(client, request)
        try:
            completion = cast(
                "ChatCompletion", await client.chat.completions.create(**self._body(request))
            )
        except Exception as exc:
            raise await self._error(exc) from exc
        try:
            if not completion.choices:
                raise ModelError("the server answered with no choices", model=self.name)
            choice = completion.choices[0]
            message = choice.message
            calls = tuple(
                _tool_call(c.id, c.function.name, c.function.arguments)
                for c in message.tool_calls or ()
                if c.type == "function"
            )
            return ModelResponse(
                text=_text(message.content),
                tool_calls=calls,
                reasoning=_reasoning(message),
                usage=self._usage(*_counts(completion.usage)),
                finish_reason=choice.finish_reason,
            )
        except (AttributeError, TypeError, ValueError) as exc:  # not a chat completion
            raise self._unreadable(exc) from exc

    def _unreadable(self, exc: Exception) -> ModelError:
        return ModelError(
            f"{self.name}: the server's answer is not an OpenAI chat completion "
            f"({type(exc).__name__}: {str(exc)[:200]}): check that base_url is an "
            "OpenAI-compatible API (it usually ends in /v1)",
            model=self.name,
        )

    async def _constrained_step(self, client: AsyncOpenAI, request: ModelRequest) -> ModelResponse:
        body = step_body(request)
        body["model"] = self.model
        if request.settings.timeout is not None:
            body["timeout"] = request.settings.timeout
        try:
            completion = cast("ChatCompletion", await client.chat.completions.create(**body))
        except Exception as exc:
            raise await self._error(exc) from exc
        if not completion.choices:
            raise ModelError("the server answered with no choices", model=self.name)
        self._calls += 1
        cost = self._usage(*_counts(completion.usage)).cost
        reply = completion.model_dump()
        return step_response(reply, call_id=f"call_{self._calls}", cost=cost)

    async def stream(self, request: ModelRequest) -> AsyncIterator[StreamEvent]:
        """Text and tool-call pieces as they arrive, then the whole response."""
        if self._constrained:  # a step is one small JSON call: nothing worth streaming
            yield ResponseDone(response=await self.request(request))
            return
        client = self._connect()
        body = self._body(request)
        body["stream"] = True
        body["stream_options"] = {"include_usage": True}
        parts = _Assembler()
        try:
            chunks = cast(
                "AsyncStream[ChatCompletionChunk]", await client.chat.completions.create(**body)
            )
        except Exception as exc:
            raise await self._error(exc) from exc
        try:
            async for chunk in chunks:
                for piece in parts.add(chunk):
                    yield piece
        except (AttributeError, TypeError, ValueError) as exc:  # a chunk of something else
            raise self._unreadable(exc) from exc
        except Exception as exc:  # the stream broke after the server took the request
            raise await self._error(exc, streaming=True) from exc
        if parts.finish_reason is None:  # the connection ended, not the answer
            raise ModelError(
                f"{self.name}: the stream ended before the answer did (no finish_reason): "
                "the connection was cut",
                transient=True,
                model=self.name,
            )
        yield ResponseDone(
            response=ModelResponse(
                text="".join(parts.text),
                tool_calls=parts.tool_calls(),
                usage=self._usage(parts.input_tokens, parts.output_tokens, parts.cached_tokens),
                finish_reason=parts.finish_reason,
            )
        )

    def _usage(self, input_tokens: int, output_tokens: int, cached_tokens: int = 0) -> Usage:
        """The usage of one request, priced for the server it went to (``base_url``)."""
        if self._free:
            cost = 0.0
        else:
            cost = cost_of(
                self.model,
                input_tokens,
                output_tokens,
                price=self._price,
                # Where the requests went, as the SDK resolved it (base_url, $OPENAI_BASE_URL,
                # a given client's): your own server must not be priced as OpenAI.
                api_url=str(self._connect().base_url),
                cache_read_tokens=cached_tokens,
            )
        return Usage(input_tokens=input_tokens, output_tokens=output_tokens, requests=1, cost=cost)

    # -- discovery and errors ---------------------------------------------------------

    async def available(self) -> list[str]:
        """The models the server serves (its ``/models`` list)."""
        client = self._connect()
        try:
            page = await client.models.list()
        except Exception as exc:
            raise await self._error(exc, discover=False) from exc
        return sorted(m.id for m in page.data)

    async def _error(
        self, exc: Exception, *, discover: bool = True, streaming: bool = False
    ) -> ModelError:
        """The SDK's exception as a ``ModelError``: transient or not, with the server's words.

        ``streaming``: raised while the answer streamed in (an ``error`` event in the stream,
        the connection cut): the server had taken the request, so it is worth another try.
        """
        import openai

        name = self.name
        if streaming:  # an error event, or the connection cut: the SDK's or its HTTP library's
            return ModelError(
                f"{name}: the answer's stream broke: {_server_message(exc)}",
                transient=True,
                model=name,
            )
        if isinstance(exc, openai.APITimeoutError):
            return ModelError(f"{name}: the request timed out", transient=True, model=name)
        if isinstance(exc, openai.APIConnectionError):
            where = self._base_url or os.environ.get("OPENAI_BASE_URL") or "api.openai.com"
            return ModelError(
                f"{name}: could not connect to {where} ({exc.__cause__ or exc}); is the server "
                "running?",
                transient=True,
                model=name,
            )
        if isinstance(exc, openai.APIStatusError):
            status = exc.status_code
            if 300 <= status < 400:
                return refused_redirect(
                    name,
                    status=status,
                    url=str(exc.response.request.url),
                    location=exc.response.headers.get("location"),
                    base_url=str(self._connect().base_url),
                )
            detail = _server_message(exc)
            transient = status in (408, 409, 429) or status >= 500
            message = f"{name}: the server refused the request (HTTP {status}): {detail}"
            if status == 404 and discover:
                message += await self._served_models_hint()
            if status == 401:
                message += "; check the API key (OPENAI_API_KEY)"
            return ModelError(
                message,
                transient=transient,
                model=name,
                status_code=status,
                retry_after=retry_after(exc.response.headers),
            )
        return ModelError(f"{name}: {type(exc).__name__}: {str(exc)[:_MAX_MESSAGE]}", model=name)

    async def _served_models_hint(self) -> str:
        try:
            served = await self.available()
        except ModelError:
            return ""
        if self.model in served or not served:
            return ""
        return f". The server serves: {', '.join(served)}; name one of them"


class _Assembler:
    """A streamed completion, put together from its chunks."""

    def __init__(self) -> None:
        self.text: list[str] = []
        self.calls: dict[int, list[str]] = {}  # index -> [id, name, *argument fragments]
        self.finish_reason: str | None = None
        self.input_tokens = 0
        self.output_tokens = 0
        self.cached_tokens = 0

    def add(self, chunk: ChatCompletionChunk) -> list[TextDelta | ToolCallDelta]:
        """Take one chunk; returns what it brought: new text, pieces of tool calls."""
        if chunk.usage is not None:
            self.input_tokens, self.output_tokens, self.cached_tokens = _counts(chunk.usage)
        new: list[TextDelta | ToolCallDelta] = []
        for choice in chunk.choices:
            delta = choice.delta
            content = _text(delta.content)
            if content:
                self.text.append(content)
                new.append(TextDelta(text=content))
            for part in delta.tool_calls or ():
                entry = self.calls.setdefault(part.index, ["", ""])
                if part.id:
                    entry[0] = part.id
                name = arguments = ""
                if part.function is not None:
                    name = part.function.name or ""
                    arguments = part.function.arguments or ""
                    entry[1] += name
                    entry.append(arguments)
                if name or arguments or part.id:
                    new.append(
                        ToolCallDelta(
                            index=part.index, arguments=arguments, name=name, id=part.id or ""
                        )
                    )
            if choice.finish_reason is not None:
                self.finish_reason = choice.finish_reason
        return new

    def tool_calls(self) -> tuple[ToolCall, ...]:
        return tuple(
            _tool_call(entry[0] or f"call_{index}", entry[1], "".join(entry[2:]))
            for index, entry in sorted(self.calls.items())
        )


def _counts(usage: CompletionUsage | None) -> tuple[int, int, int]:
    """Input, output and cached input tokens (servers that report none: 0)."""
    if usage is None:
        return 0, 0, 0
    details = getattr(usage, "prompt_tokens_details", None)
    cached = getattr(details, "cached_tokens", 0)
    return (
        _count(getattr(usage, "prompt_tokens", 0)),
        _count(getattr(usage, "completion_tokens", 0)),
        _count(cached),
    )


def _count(value: object) -> int:
    """A token count as a server reported it; one that is not a count (NaN, -5, "12"): 0.

    The SDK does not check what a server sends; a count the log cannot hold would have
    made the run's log unreadable.
    """
    if type(value) is int:
        return value if 0 <= value < 2**53 else 0
    if type(value) is float and 0.0 <= value < 2.0**53:  # 12.0, as some servers write it
        return int(value)
    return 0


def _text(content: object) -> str:
    """A message's text (``None``: none); anything else is not a chat completion's."""
    if content is None:
        return ""
    if not isinstance(content, str):
        raise TypeError(f"the message's content is {type(content).__name__}, not text")
    return content


def _server_message(exc: Any) -> str:
    """What the server said of an error, at most ``_MAX_MESSAGE`` characters of it."""
    said = _said(exc)
    if len(said) > _MAX_MESSAGE:
        return f"{said[:_MAX_MESSAGE]}... ({len(said)} characters)"
    return said


_MAX_MESSAGE = 2000
"""How much of a server's error message is kept (one sent 5 MB of it)."""


def _said(exc: Any) -> str:
    body = getattr(exc, "body", None)
    if isinstance(body, dict):
        error = cast(dict[str, Any], body).get("error", body)
        if isinstance(error, dict):
            message = cast(dict[str, Any], error).get("message")
            if message:
                return str(message)
        elif isinstance(error, str):
            return error
    return str(getattr(exc, "message", exc))


def _reasoning(message: Any) -> str | None:
    """Reasoning text where a compatible server returns it (``reasoning_content``)."""
    extra: Any = getattr(message, "model_extra", None) or {}
    value = cast(dict[str, Any], extra).get("reasoning_content")
    return str(value) if value else None


def _tool_call(call_id: str, name: str, arguments: str) -> ToolCall:
    """A tool call; arguments that are not a JSON object become a ``parse_error``."""
    try:
        parsed = orjson.loads(arguments or "{}")
    except orjson.JSONDecodeError as exc:
        return ToolCall(id=call_id, name=name, parse_error=f"arguments are not valid JSON: {exc}")
    if not isinstance(parsed, dict):
        return ToolCall(id=call_id, name=name, parse_error="arguments must be a JSON object")
    return ToolCall(id=call_id, name=name, arguments=cast(dict[str, Any], parsed))


def _messages(request: ModelRequest) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    if request.instructions:
        out.append({"role": "system", "content": request.instructions})
    out.extend(_message(m) for m in request.messages)
    return out


def _message(message: Message) -> dict[str, Any]:
    if isinstance(message, UserMessage):
        return {"role": "user", "content": message.text}
    if isinstance(message, AssistantMessage):
        out: dict[str, Any] = {"role": "assistant", "content": message.text or None}
        if message.tool_calls:
            out["tool_calls"] = [
                {
                    "id": c.id,
                    "type": "function",
                    "function": {"name": c.name, "arguments": orjson.dumps(c.arguments).decode()},
                }
                for c in message.tool_calls
            ]
        return out
    assert isinstance(message, ToolResultMessage)
    text = fence(message)
    return {
        "role": "tool",
        "tool_call_id": message.call_id,
        "content": f"ERROR: {text}" if message.is_error else text,
    }
