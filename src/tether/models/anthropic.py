"""Anthropic's Claude models (``tether[anthropic]``), through the official ``anthropic`` SDK.

``AnthropicModel("claude-haiku-4-5")`` talks to the Messages API with the key in
``$ANTHROPIC_API_KEY`` (or ``api_key=...``). Native tools, parallel tool calls,
``tool_choice``, streaming deltas, thinking and usage map onto tether's model port.

The SDK's own retries are off: tether's loop retries transient errors (429, 529 overloaded,
5xx, timeouts, dropped connections) with back-off, and records each failure as an event.
No redirect is followed, to another host or on the same one: a request goes to ``base_url``
or nowhere, and a redirect is an error naming the address the server gave.

The API wants strictly alternating user and assistant turns, and the results of one turn's
tool calls together in the next user turn; tether's history (one message per tool result)
is regrouped to fit. A reply cut off by ``max_tokens`` in the middle of a tool call never
runs that call with half its arguments: the call carries a ``parse_error`` instead.
"""

from __future__ import annotations

import importlib.util
from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Literal, TypeAlias, cast

import orjson

from tether._internal.redirects import refused_redirect
from tether.errors import MissingExtraError, ModelError
from tether.jsontypes import JsonObject
from tether.messages import AssistantMessage, Message, ToolCall, ToolResultMessage, UserMessage
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
    from anthropic import APIStatusError, AsyncAnthropic, NotGiven, Omit
    from anthropic.types import (
        ContentBlock,
        MessageDeltaUsage,
        MessageParam,
        RawContentBlockDelta,
        RawMessageStreamEvent,
        TextBlockParam,
        ToolChoiceParam,
        ToolParam,
        ToolResultBlockParam,
        ToolUseBlockParam,
    )
    from anthropic.types import Message as WireMessage
    from anthropic.types.raw_content_block_start_event import (
        ContentBlock as StartedBlock,
    )

__all__ = ["DEFAULT_MAX_TOKENS", "AnthropicModel"]

DEFAULT_MAX_TOKENS = 4096
"""Generated tokens per request when the request's settings name no cap (the API needs one)."""

_PROFILE = ModelProfile(
    native_tools=True,
    parallel_tool_calls=True,
    json_schema_output=False,
    streaming=True,
    context_window=200_000,  # every Claude model since Claude 3 takes at least this much
)
_CHOICES: dict[str, ToolChoiceParam] = {
    "auto": {"type": "auto"},
    "required": {"type": "any"},
    "none": {"type": "none"},
}
_TRANSIENT_TYPES = frozenset({"rate_limit_error", "overloaded_error", "api_error", "timeout_error"})
"""Error types worth a retry, also when they arrive mid-stream under an HTTP 200."""

_Block: TypeAlias = "TextBlockParam | ToolUseBlockParam | ToolResultBlockParam"


class AnthropicModel(Model):
    """A Claude model behind Anthropic's Messages API.

    Args:
        model: The model's name, as the API knows it (``claude-haiku-4-5``).
        api_key: Default: ``$ANTHROPIC_API_KEY`` (or the SDK's other credential sources).
        base_url: The API's base URL (default: Anthropic, or ``$ANTHROPIC_BASE_URL``).
        max_tokens: The cap on generated tokens when a request's settings name none.
        price: The price per million tokens. Default: ``tether.models.prices`` (your
            ``PRICES``, then genai-prices' price at the server the requests go to: Anthropic's
            API is priced, a proxy at another ``base_url`` is not). A model with no known
            price costs ``None`` (unknown), never 0. Prompt-cache reads and writes are priced
            at their own rates.
        client: A ready ``anthropic.AsyncAnthropic`` (overrides ``api_key`` and ``base_url``).
        http_client: An ``httpx2.AsyncClient`` (the SDK's HTTP library) for the client to use
            (proxies, tests).
        context_window: The tokens one request may hold; requests that cannot fit are not
            sent (``tether.run.window``). Default: 200,000, every Claude model's since Claude
            3; raise it for a larger-context beta, ``None`` for no check.
    """

    def __init__(
        self,
        model: str,
        *,
        api_key: str | None = None,
        base_url: str | None = None,
        max_tokens: int = DEFAULT_MAX_TOKENS,
        price: Price | None = None,
        client: AsyncAnthropic | None = None,
        http_client: httpx2.AsyncClient | None = None,
        context_window: int | None = 200_000,
    ) -> None:
        self._model = model
        self._profile = (
            _PROFILE
            if context_window == _PROFILE.context_window
            else replace(_PROFILE, context_window=context_window)
        )
        self._api_key = api_key
        self._base_url = base_url
        self._max_tokens = max_tokens
        self._price = price
        self._client = client
        self._http_client = http_client
        self._client_given = client is not None
        self._client_loop = current_loop()
        if client is None and importlib.util.find_spec("anthropic") is None:
            raise MissingExtraError("anthropic", "anthropic")  # now, before a run is stored

    @property
    def name(self) -> str:
        """``anthropic:<model>``."""
        return f"anthropic:{self._model}"

    @property
    def model(self) -> str:
        """The model's name at the API."""
        return self._model

    @property
    def profile(self) -> ModelProfile:
        """Native and parallel tool calls, streaming; no JSON Schema constrained output."""
        return self._profile

    def _connect(self) -> AsyncAnthropic:
        """The client, made on first use: a model without a key can be built, not used."""
        if self._client is not None and (self._client_given or self._client_loop is current_loop()):
            return self._client
        try:
            import anthropic
        except ImportError:
            raise MissingExtraError("anthropic", "anthropic") from None
        try:
            client = anthropic.AsyncAnthropic(
                api_key=self._api_key,
                base_url=self._base_url,
                max_retries=0,
                # The SDK's own HTTP client follows redirects, to any host (_internal.redirects).
                http_client=self._http_client
                or anthropic.DefaultAsyncHttpxClient(follow_redirects=False),
            )
        except anthropic.AnthropicError as exc:  # a broken credentials profile, say
            raise ModelError(
                f"{self.name}: could not load Anthropic credentials: {exc}", model=self.name
            ) from exc
        if client.api_key is None and client.auth_token is None and client.credentials is None:
            raise ModelError(
                f"{self.name}: no Anthropic API key. Set ANTHROPIC_API_KEY, or pass "
                "AnthropicModel(..., api_key=...)",
                model=self.name,
            )
        self._client = client
        self._client_loop = current_loop()  # a run in another loop makes its own (_loopbound)
        return client

    async def aclose(self) -> None:
        """Close the HTTP connections (a client or an HTTP client passed in is the caller's)."""
        client, self._client = self._client, None
        if client is not None and not self._client_given and self._http_client is None:
            await client.close()

    # -- requests ---------------------------------------------------------------------

    def _call(self, request: ModelRequest) -> _Call:
        from anthropic import NOT_GIVEN, omit

        tools = [_tool(t.name, t.description, t.input_schema) for t in request.tools]
        choice = _CHOICES[request.tool_choice]
        if not tools:
            # The API refuses a history with tool calls in it unless tools are defined, so a
            # request without tools (a final answer) names the ones used, and forbids them.
            tools = [
                _tool(name, "Not available now.", {"type": "object"})
                for name in _called_tools(request.messages)
            ]
            choice = _CHOICES["none"]
        settings = request.settings
        extra: dict[str, object] = {}
        if settings.temperature is not None:
            # This SDK version has no typed ``temperature``; the API's answer decides.
            extra["temperature"] = settings.temperature
        return _Call(
            messages=_messages(request.messages),
            system=request.instructions or omit,
            tools=tools or omit,
            tool_choice=choice if tools else omit,
            max_tokens=settings.max_output_tokens or self._max_tokens,
            timeout=settings.timeout if settings.timeout is not None else NOT_GIVEN,
            extra_body=extra or None,
        )

    async def request(self, request: ModelRequest) -> ModelResponse:
        """One Messages API call."""
        client = self._connect()
        call = self._call(request)
        try:
            message = await client.messages.create(
                model=self._model,
                max_tokens=call.max_tokens,
                messages=call.messages,
                system=call.system,
                tools=call.tools,
                tool_choice=call.tool_choice,
                timeout=call.timeout,
                extra_body=call.extra_body,
            )
        except Exception as exc:
            raise self._error(exc) from exc
        return self._response(_Reply.of(message))

    async def stream(self, request: ModelRequest) -> AsyncIterator[StreamEvent]:
        """Text and tool-call pieces as they arrive, then the whole response."""
        client = self._connect()
        call = self._call(request)
        reply = _Reply()
        try:
            events = await client.messages.create(
                model=self._model,
                max_tokens=call.max_tokens,
                messages=call.messages,
                system=call.system,
                tools=call.tools,
                tool_choice=call.tool_choice,
                timeout=call.timeout,
                extra_body=call.extra_body,
                stream=True,
            )
            async with events:
                async for event in events:
                    piece = reply.add(event)
                    if piece is not None:
                        yield piece
        except Exception as exc:
            raise self._error(exc) from exc
        if not reply.complete:
            raise ModelError(
                f"{self.name}: the stream ended before message_stop; the reply is incomplete",
                transient=True,
                model=self.name,
            )
        yield ResponseDone(response=self._response(reply))

    def _response(self, reply: _Reply) -> ModelResponse:
        parts = [reply.blocks[i] for i in sorted(reply.blocks)]
        cut_off = reply.stop_reason == "max_tokens"
        calls = tuple(
            _tool_call(part, cut_off=cut_off and i == len(parts) - 1)
            for i, part in enumerate(parts)
            if part.kind == "tool_use"
        )
        thoughts = [p.text for p in parts if p.kind == "thinking"]
        input_tokens = reply.input_tokens + reply.cache_read + reply.cache_creation
        return ModelResponse(
            text="".join(p.text for p in parts if p.kind == "text"),
            tool_calls=calls,
            reasoning="\n\n".join(thoughts) if thoughts else None,
            usage=Usage(
                input_tokens=input_tokens,
                output_tokens=reply.output_tokens,
                requests=1,
                cost=cost_of(
                    self._model,
                    input_tokens,
                    reply.output_tokens,
                    price=self._price,
                    api_url=str(self._connect().base_url),  # where the requests went
                    cache_read_tokens=reply.cache_read,
                    cache_write_tokens=reply.cache_creation,
                ),
            ),
            finish_reason=reply.stop_reason,
        )

    # -- errors -----------------------------------------------------------------------

    def _error(self, exc: Exception) -> ModelError:
        """The SDK's exception as a ``ModelError``: transient or not, with the API's words."""
        import anthropic
        import httpx2

        name = self.name
        if isinstance(exc, ModelError):
            return exc
        if isinstance(exc, anthropic.APITimeoutError):
            return ModelError(f"{name}: the request timed out", transient=True, model=name)
        if isinstance(exc, anthropic.APIConnectionError):
            return ModelError(
                f"{name}: could not reach the Anthropic API ({exc.__cause__ or exc.message}); "
                "check the network, or base_url",
                transient=True,
                model=name,
            )
        if isinstance(exc, httpx2.TransportError):  # the connection dropped mid-stream
            return ModelError(
                f"{name}: the connection dropped during the reply ({type(exc).__name__}: {exc})",
                transient=True,
                model=name,
            )
        if isinstance(exc, anthropic.APIStatusError):
            if 300 <= exc.status_code < 400:
                return refused_redirect(
                    name,
                    status=exc.status_code,
                    url=str(exc.response.request.url),
                    location=exc.response.headers.get("location"),
                    base_url=str(self._connect().base_url),
                )
            return _status_error(name, exc)
        return ModelError(f"{name}: {type(exc).__name__}: {exc}", model=name)


def _status_error(name: str, exc: APIStatusError) -> ModelError:
    status = exc.status_code
    kind = exc.type or "error"
    detail = exc.api_message or exc.message
    transient = status in (408, 409, 429) or status >= 500 or kind in _TRANSIENT_TYPES
    should_retry = exc.response.headers.get("x-should-retry")
    if should_retry in ("true", "false"):  # the API's own word wins, as in the SDK
        transient = should_retry == "true"
    if status >= 400:
        message = f"{name}: the Anthropic API answered HTTP {status} ({kind}): {detail}"
    else:  # an error event inside a stream that had begun with 200
        message = f"{name}: the Anthropic API failed during the reply ({kind}): {detail}"
    if status == 401:
        message += "; check ANTHROPIC_API_KEY"
    if exc.request_id:
        message += f" (request id {exc.request_id})"
    return ModelError(
        message,
        transient=transient,
        model=name,
        status_code=status if status >= 400 else None,
        retry_after=retry_after(exc.response.headers),
    )


# -- request shaping ------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _Call:
    """The arguments of one ``messages.create`` call, shared by ``request`` and ``stream``."""

    messages: list[MessageParam]
    system: str | Omit
    tools: list[ToolParam] | Omit
    tool_choice: ToolChoiceParam | Omit
    max_tokens: int
    timeout: float | NotGiven
    extra_body: dict[str, object] | None


def _tool(name: str, description: str, schema: Mapping[str, object]) -> ToolParam:
    return {"name": name, "description": description, "input_schema": {**schema}}


def _called_tools(history: Sequence[Message]) -> list[str]:
    """The names of the tools called in a history, first use first."""
    names: dict[str, None] = {}
    for message in history:
        if isinstance(message, AssistantMessage):
            names.update((call.name, None) for call in message.tool_calls)
    return list(names)


def _messages(history: Sequence[Message]) -> list[MessageParam]:
    """The history as alternating turns: adjacent messages of one role share a turn."""
    turns: list[tuple[Literal["user", "assistant"], list[_Block]]] = []
    for message in history:
        role, blocks = _turn(message)
        if not blocks:
            continue  # the API refuses empty turns and empty text blocks
        if turns and turns[-1][0] == role:
            turns[-1][1].extend(blocks)
        else:
            turns.append((role, blocks))
    return [
        {"role": "user", "content": blocks}
        if role == "user"
        else {"role": "assistant", "content": blocks}
        for role, blocks in turns
    ]


def _turn(message: Message) -> tuple[Literal["user", "assistant"], list[_Block]]:
    if isinstance(message, UserMessage):
        text: list[_Block] = []
        if message.text.strip():
            text.append({"type": "text", "text": message.text})
        return "user", text
    if isinstance(message, AssistantMessage):
        # Reasoning is not sent back: the API checks thinking blocks against a signature
        # that tether's history does not keep.
        blocks: list[_Block] = []
        if message.text.strip():
            blocks.append({"type": "text", "text": message.text})
        blocks.extend(
            {"type": "tool_use", "id": call.id, "name": call.name, "input": {**call.arguments}}
            for call in message.tool_calls
        )
        return "assistant", blocks
    assert isinstance(message, ToolResultMessage)
    result: ToolResultBlockParam = {
        "type": "tool_result",
        "tool_use_id": message.call_id,
        "is_error": message.is_error,
    }
    text_of = fence(message) if message.content else ""
    if text_of:
        result["content"] = text_of
    return "user", [result]


# -- response assembly ----------------------------------------------------------------


@dataclass(slots=True)
class _Part:
    """One content block of a reply: whole, or put together from stream deltas."""

    kind: str
    """The block's type; only ``text``, ``thinking`` and ``tool_use`` are kept."""
    pieces: list[str] = field(default_factory=lambda: [])
    """Text or thinking."""
    call_id: str = ""
    """A tool call's id."""
    name: str = ""
    """A tool call's tool."""
    arguments: object = None
    """A tool call's input as the block gave it (a stream starts it empty)."""
    json: list[str] = field(default_factory=lambda: [])
    """A streamed tool call's input, in fragments of JSON text."""
    call: int = 0
    """A tool call's place among the reply's calls (0-based)."""

    @property
    def text(self) -> str:
        return "".join(self.pieces)

    def add(self, delta: RawContentBlockDelta) -> TextDelta | ToolCallDelta | None:
        """Take one delta; returns its new visible text or piece of a call, if any."""
        if delta.type == "text_delta":
            self.pieces.append(delta.text)
            return TextDelta(text=delta.text) if delta.text else None
        if delta.type == "thinking_delta":
            self.pieces.append(delta.thinking)
        elif delta.type == "input_json_delta":
            self.json.append(delta.partial_json)
            if delta.partial_json:
                return ToolCallDelta(index=self.call, arguments=delta.partial_json)
        return None

    @classmethod
    def of(cls, block: ContentBlock | StartedBlock) -> _Part:
        if block.type == "text":
            return cls(kind="text", pieces=[block.text])
        if block.type == "thinking":
            return cls(kind="thinking", pieces=[block.thinking])
        if block.type == "tool_use":
            return cls(kind="tool_use", call_id=block.id, name=block.name, arguments=block.input)
        return cls(kind=block.type)  # server tools, redacted thinking: not tether's to show


@dataclass(slots=True)
class _Reply:
    """A reply under assembly."""

    blocks: dict[int, _Part] = field(default_factory=lambda: {})
    input_tokens: int = 0
    cache_read: int = 0
    cache_creation: int = 0
    output_tokens: int = 0
    stop_reason: str | None = None
    complete: bool = False
    calls: int = 0
    """Tool calls started so far."""

    @classmethod
    def of(cls, message: WireMessage) -> _Reply:
        reply = cls(complete=True)
        reply.started(message)
        reply.blocks = {i: _Part.of(block) for i, block in enumerate(message.content)}
        return reply

    def add(self, event: RawMessageStreamEvent) -> TextDelta | ToolCallDelta | None:
        """Take one stream event; returns its new visible text or piece of a call, if any."""
        if event.type == "message_start":
            self.started(event.message)
        elif event.type == "content_block_start":
            part = _Part.of(event.content_block)
            self.blocks[event.index] = part
            if part.kind == "tool_use":
                part.call = self.calls
                self.calls += 1
                return ToolCallDelta(index=part.call, name=part.name, id=part.call_id)
            if part.kind == "text" and part.text:
                return TextDelta(text=part.text)
        elif event.type == "content_block_delta":
            part = self.blocks.get(event.index)
            return None if part is None else part.add(event.delta)
        elif event.type == "message_delta":
            self.stop_reason = event.delta.stop_reason
            self.counted(event.usage)
        elif event.type == "message_stop":
            self.complete = True
        return None

    def counted(self, usage: MessageDeltaUsage) -> None:
        """Counts on a ``message_delta`` are running totals; absent ones leave theirs."""
        self.output_tokens = usage.output_tokens
        if usage.input_tokens is not None:
            self.input_tokens = usage.input_tokens
        if usage.cache_read_input_tokens is not None:
            self.cache_read = usage.cache_read_input_tokens
        if usage.cache_creation_input_tokens is not None:
            self.cache_creation = usage.cache_creation_input_tokens

    def started(self, message: WireMessage) -> None:
        usage = message.usage
        self.input_tokens = usage.input_tokens
        self.cache_read = usage.cache_read_input_tokens or 0
        self.cache_creation = usage.cache_creation_input_tokens or 0
        self.output_tokens = usage.output_tokens
        self.stop_reason = message.stop_reason


def _tool_call(part: _Part, *, cut_off: bool) -> ToolCall:
    """A tool call; arguments that are not a whole JSON object become a ``parse_error``."""
    raw = "".join(part.json)
    problem: str | None = None
    if raw.strip():  # streamed: the start block's input is empty, the deltas hold it all
        try:
            arguments: object = orjson.loads(raw)
        except orjson.JSONDecodeError as exc:
            arguments, problem = None, f"not valid JSON ({exc})"
    else:
        arguments = part.arguments
        raw = orjson.dumps(arguments).decode()
    if cut_off:  # whatever parsed is a prefix of what the model meant to send
        problem = "the reply was cut off at max_tokens inside this call"
        end = max(raw.rfind(" "), raw.rfind("\n"))  # its last word may be a cut secret
        raw = raw[:end] if end > 0 else raw  # (no pattern knows a password without "@host")
    elif problem is None and not isinstance(arguments, dict):
        problem = "not a JSON object"
    if problem is not None:
        return ToolCall(id=part.call_id, name=part.name, parse_error=f"{problem}: {raw}")
    return ToolCall(id=part.call_id, name=part.name, arguments=cast(JsonObject, arguments))
