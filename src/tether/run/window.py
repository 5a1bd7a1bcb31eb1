"""Before each model request: does it fit the model's context window and the run's tokens?

A request that cannot fit is refused before it is sent, not failed by the provider after it
was sent (and, for a paid model, billed): the acting turn ends the run ``budget_exhausted``
with the limit ``context_window`` (or ``max_tokens``) and an error that says what to do; a
thinking stage's request is skipped with a ``budget_warning``. Only made when the model
declares its window (``ModelProfile.context_window``) or the run has ``max_tokens``.

The size is the model's own count where it has one (``Model.count_tokens``: the embedded
model's tokenizer). Otherwise it is the last acting request's input tokens as the model
reported them, plus an estimate of the characters added since (``tether.models.tokens``);
before any report, the estimate of the whole request.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from tether.messages import Message
from tether.models.base import ModelRequest
from tether.models.tokens import estimate_tokens, message_chars, tool_chars
from tether.run.context import RunContext
from tether.tools.base import ToolDefinition
from tether.usage import Usage

__all__ = ["ANSWER_RESERVE", "Oversize", "RequestSize"]

_log = logging.getLogger("tether.run.window")

_COUNT_S = 5.0
"""Seconds a model's own token count may take before the run estimates instead."""

ANSWER_RESERVE = 256
"""Output tokens a request must leave room for (fewer if ``max_output_tokens`` is lower)."""


class Oversize:
    """Why a request cannot be sent: which limit, what it would use, the maximum, and why."""

    __slots__ = ("limit", "maximum", "message", "used")

    def __init__(self, limit: str, used: int, maximum: int, message: str) -> None:
        self.limit = limit
        self.used = used
        """``context_window``: the request's tokens and its output reserve; ``max_tokens``:
        the run's tokens so far and the request's."""
        self.maximum = maximum
        self.message = message
        """What happened and what to do, in one sentence."""


class RequestSize:
    """Sizes a run's model requests before they are sent; refuses those that cannot fit."""

    __slots__ = (
        "_anchor",
        "_chars",
        "_counted",
        "_ctx",
        "_seen",
        "_tail",
        "_tool_chars",
        "_tools",
        "_window",
    )

    def __init__(self, ctx: RunContext[Any], window: int | None) -> None:
        self._ctx = ctx
        self._window = window
        self._anchor: tuple[int, int] | None = None
        """The last acting request's reported input tokens, and its characters."""
        self._seen = 0
        """How many of the messages ``_chars`` counts (a prefix of the conversation)."""
        self._tail: Message | None = None
        self._chars = 0
        self._tools: tuple[ToolDefinition, ...] | None = None
        self._tool_chars = 0
        self._counted: tuple[ModelRequest, tuple[int, int, bool]] | None = None
        """The last request sized, and its size (it is sized once, however often asked)."""

    @staticmethod
    def of(ctx: RunContext[Any]) -> RequestSize | None:
        """The sizer of ``ctx``'s requests, or ``None`` when nothing bounds them."""
        window = ctx.model.profile.context_window
        compaction = ctx.spec.compaction
        if (
            window is None
            and ctx.spec.limits.max_tokens is None
            and (compaction is None or compaction.max_context_tokens is None)
        ):
            return None
        return RequestSize(ctx, window)

    def chars(self, request: ModelRequest) -> int:
        """The characters ``request`` shows the model (earlier messages counted once)."""
        messages = request.messages
        seen = self._seen
        if seen and (len(messages) < seen or messages[seen - 1] is not self._tail):
            seen = self._chars = 0  # not the conversation counted so far: count it afresh
        chars = self._chars
        for message in messages[seen:]:
            chars += message_chars(message)
        self._chars, self._seen = chars, len(messages)
        self._tail = messages[-1] if messages else None
        tools = request.tools
        if tools is not self._tools:
            self._tools, self._tool_chars = tools, tool_chars(tools)
        return len(request.instructions) + self._tool_chars + chars

    async def tokens(self, request: ModelRequest) -> tuple[int, int, bool]:
        """The request's input tokens, its characters, and whether the count is known.

        Known: it rests on the model's own numbers (its tokenizer, or its last report), not
        on characters alone.
        """
        counted = self._counted
        if counted is not None and counted[0] is request:
            return counted[1]
        size = await self._tokens(request)
        self._counted = (request, size)
        return size

    async def _tokens(self, request: ModelRequest) -> tuple[int, int, bool]:
        chars = self.chars(request)
        try:  # bounded: a counter that hangs must not hold the run (nor its cancel)
            counted = await asyncio.wait_for(self._ctx.model.count_tokens(request), _COUNT_S)
        except Exception:  # a model's counter that fails is not used: the run estimates
            _log.warning(
                "%s could not count a request's tokens", self._ctx.model.name, exc_info=True
            )
            counted = None
        if counted is not None and (type(counted) is not int or counted < 0):
            counted = None  # not a count: adapters are user code
        if counted is not None:
            return counted, chars, True
        anchor = self._anchor
        if anchor is not None and request.purpose is None:
            if chars < anchor[1]:  # fewer than then (compacted): the count scaled down
                return anchor[0] * chars // max(1, anchor[1]), chars, True
            return anchor[0] + estimate_tokens(chars - anchor[1]), chars, True
        return estimate_tokens(chars), chars, False

    async def check(self, request: ModelRequest) -> tuple[Oversize | None, int]:
        """Whether ``request`` cannot be sent (and why), and its characters.

        The window is checked on any count; ``max_tokens`` only on one that rests on the
        model's numbers (an estimate from characters alone could stop a run that fits; the
        request's output is capped to what is left in any case).
        """
        tokens, chars, known = await self.tokens(request)
        window = self._window
        if window is not None:
            cap = request.settings.max_output_tokens
            needed = tokens + (ANSWER_RESERVE if cap is None else min(cap, ANSWER_RESERVE))
            if needed > window:
                return Oversize(
                    "context_window",
                    needed,
                    window,
                    f"the next model request needs about {needed} tokens (with room for its "
                    f"answer) and the model's context window holds {window}: use a model with "
                    "a larger window (for the embedded model, LocalModel(context=...)), have "
                    "tools return less, or split the task",
                ), chars
        maximum = self._ctx.spec.limits.max_tokens
        if maximum is not None and known:
            st = self._ctx.state
            used = st.input_tokens + st.output_tokens
            if used + tokens >= maximum:
                return Oversize(
                    "max_tokens",
                    used + tokens,
                    maximum,
                    f"the next model request needs about {tokens} input tokens and the run "
                    f"has {max(0, maximum - used)} left of Limits.max_tokens={maximum}: raise "
                    "max_tokens or split the task",
                ), chars
        return None, chars

    def answered(self, usage: Usage, chars: int) -> None:
        """An acting request of ``chars`` characters was answered: anchor on its count."""
        if usage.input_tokens > 0:
            self._anchor = (usage.input_tokens, chars)
