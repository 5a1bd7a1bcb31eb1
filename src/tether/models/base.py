"""The model port: one request in, one response out (``request``), or a stream of deltas."""

from __future__ import annotations

import os
from abc import ABC, abstractmethod
from collections.abc import AsyncIterator, Generator
from contextlib import contextmanager
from typing import ClassVar, Literal, Self, TypeAlias, cast

from tether._internal.frozen import frozen
from tether.errors import ModelRequestsBlocked
from tether.events import Purpose
from tether.messages import Message, ToolCall
from tether.tools.base import ToolDefinition
from tether.usage import Usage

__all__ = [
    "Model",
    "ModelProfile",
    "ModelRequest",
    "ModelResponse",
    "ModelSettings",
    "ResponseDone",
    "StreamEvent",
    "TextDelta",
    "ToolCallDelta",
    "ToolChoice",
    "allow_model_requests",
    "check_model_requests_allowed",
    "model_requests_allowed",
]

ToolChoice: TypeAlias = Literal["auto", "required", "none"]
"""Whether the model may (``auto``), must (``required``) or must not (``none``) call tools."""


@frozen
class ModelSettings:
    """Per-request generation settings; ``None`` leaves the provider's default."""

    max_output_tokens: int | None = None
    """Cap on generated tokens."""
    temperature: float | None = None
    """Sampling temperature."""
    timeout: float | None = None
    """Seconds one request may take (the run's remaining time also bounds it)."""
    seed: int | None = None
    """Sampling seed, where the provider supports one."""


@frozen
class ModelRequest:
    """Everything a model is asked in one turn."""

    instructions: str
    """System instructions."""
    messages: tuple[Message, ...]
    """The conversation so far; protocol-valid (every tool call has one result)."""
    tools: tuple[ToolDefinition, ...]
    """Tools the model may call."""
    tool_choice: ToolChoice = "auto"
    """Whether it may, must or must not call tools."""
    settings: ModelSettings = ModelSettings()
    """Generation settings."""
    run_id: str = ""
    """The run asking (``""`` outside a run). Not part of what the model is asked: adapters
    may use it as a cache or affinity key, test doubles to keep one position per run."""
    purpose: Purpose | None = None
    """What a thinking stage asks for (``plan``, ``reflect``, ``route``: ``tether.thinking``);
    ``None`` for the agent's own turns. Not part of what the model is asked either."""
    earlier: int = 0
    """How many of ``messages``, from the first, are a session's earlier turns (the run's
    own conversation follows them). Test doubles count the run's turns after them."""
    compacted: int = 0
    """How many of the run's model turns were condensed out of ``messages`` into one
    message (``tether.compaction``); test doubles count them with the turns they see."""
    shared_instructions: bool = False
    """Whether ``instructions`` are the agent's own alone, the same in every run (no plan,
    recalled memory or other run-specific text): a prompt cache may keep them across runs."""


@frozen
class ModelResponse:
    """What a model answered."""

    text: str = ""
    """Visible text."""
    tool_calls: tuple[ToolCall, ...] = ()
    """Tool calls, in order."""
    reasoning: str | None = None
    """Reasoning text, when the provider exposes it."""
    usage: Usage = Usage()
    """Tokens and cost of this request."""
    finish_reason: str | None = None
    """The provider's stop reason, if any."""

    def __post_init__(self) -> None:
        calls = cast(object, self.tool_calls)
        if type(calls) is list:  # an adapter's list: the tuple a response holds
            object.__setattr__(self, "tool_calls", tuple(cast(list[ToolCall], calls)))


@frozen
class TextDelta:
    """A piece of streamed text."""

    kind: Literal["text_delta"] = "text_delta"
    """Discriminator."""
    text: str
    """The new text."""


@frozen
class ResponseDone:
    """The end of a stream: the whole response."""

    kind: Literal["response_done"] = "response_done"
    """Discriminator."""
    response: ModelResponse
    """The complete response."""


@frozen
class ToolCallDelta:
    """A piece of a streamed tool call: the next fragment of its arguments' JSON text."""

    kind: Literal["tool_call_delta"] = "tool_call_delta"
    """Discriminator."""
    index: int
    """Which call of the response (0-based, in the model's order)."""
    arguments: str = ""
    """The next fragment of the arguments as JSON text (the fragments join into it)."""
    name: str = ""
    """The tool's name, on the call's first piece ("" on the others)."""
    id: str = ""
    """The call's id, on its first piece when the model gives one then."""


StreamEvent: TypeAlias = TextDelta | ToolCallDelta | ResponseDone
"""What ``Model.stream`` yields; the last item is always ``ResponseDone``."""


@frozen
class ModelProfile:
    """What a model can do."""

    native_tools: bool = True
    """It takes tool definitions and returns structured tool calls."""
    parallel_tool_calls: bool = True
    """It may return several tool calls in one turn."""
    json_schema_output: bool = False
    """It can be constrained to a JSON Schema."""
    streaming: bool = False
    """It streams deltas."""
    context_window: int | None = None
    """The most tokens one request may hold, input and output (``None``: not known). A run
    checks each request against it before sending (``tether.models.tokens``)."""


class Model(ABC):
    """A language model. Implement ``request``; ``stream`` defaults to one final item."""

    real: ClassVar[bool] = True
    """False for test doubles; real models are refused where requests are blocked (tests)."""
    reusable: ClassVar[bool] = True
    """False for models with state that belongs to one run (a replay's position in its
    recording): a model string naming one is resolved again for every run instead of once
    per agent."""

    @property
    @abstractmethod
    def name(self) -> str:
        """The model's name, as recorded in events."""

    @property
    def profile(self) -> ModelProfile:
        """What the model can do."""
        return ModelProfile()

    @abstractmethod
    async def request(self, request: ModelRequest) -> ModelResponse:
        """Answer one request.

        Raises:
            ModelError: the request failed; ``transient=True`` when a retry may succeed.
        """

    async def count_tokens(self, request: ModelRequest) -> int | None:
        """The input tokens of ``request`` by the model's own tokenizer, if it has one here.

        The default: ``None``, and the run estimates (``tether.models.tokens``).
        """
        return None

    async def stream(self, request: ModelRequest) -> AsyncIterator[StreamEvent]:
        """Answer one request as a stream; the default yields only the final response."""
        yield ResponseDone(response=await self.request(request))

    async def aclose(self) -> None:
        """Release what the model holds (HTTP connections); the default holds nothing."""
        return  # optional to override: most models hold nothing

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()


_allowed = os.environ.get("TETHER_BLOCK_MODEL_REQUESTS", "") not in {"1", "true", "yes"}


def model_requests_allowed() -> bool:
    """Whether real model requests may be made in this process right now."""
    return _allowed


@contextmanager
def allow_model_requests(allowed: bool = True) -> Generator[None]:
    """Allow (or block) real model requests inside a ``with`` block."""
    global _allowed
    before = _allowed
    _allowed = allowed
    try:
        yield
    finally:
        _allowed = before


def check_model_requests_allowed(model: Model) -> None:
    """Raise ``ModelRequestsBlocked`` if ``model`` is real and real requests are blocked."""
    if model.real and not _allowed:
        raise ModelRequestsBlocked(model.name)
