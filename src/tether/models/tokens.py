"""How many tokens a model request holds, estimated before it is sent.

A model that can count its own tokens says so (``Model.count_tokens``: the embedded model
renders the step with its chat template and counts with its tokenizer, exactly). For the
others the count is estimated from characters at ``CHARS_PER_TOKEN``. The run anchors the
estimate on what the model reported: the last request's input tokens, plus the estimate of
only what was added since (``tether.run.window``).
"""

from __future__ import annotations

import orjson

from tether.content import content_text
from tether.messages import AssistantMessage, Message, ToolResultMessage, UserMessage
from tether.models.base import ModelRequest
from tether.tools.base import ToolDefinition

__all__ = ["CHARS_PER_TOKEN", "estimate_tokens", "message_chars", "request_chars", "tool_chars"]

CHARS_PER_TOKEN = 3.0
"""Characters per token the estimate assumes. English prose runs about 4 with BPE tokenizers;
JSON-heavy agent requests fewer (measured with the embedded model's template and tokenizer:
2.4 to 2.6 of the request's own characters, the template's wrapping included)."""

_PER_MESSAGE = 8
"""Characters a chat template adds around each message (role markers, separators)."""


def message_chars(message: Message) -> int:
    """The characters ``message`` adds to a request (its text, calls and results)."""
    match message:
        case UserMessage(text=text):
            return len(text) + _PER_MESSAGE
        case AssistantMessage(text=text, tool_calls=calls, reasoning=reasoning):
            size = len(text) + len(reasoning or "") + _PER_MESSAGE
            for call in calls:
                size += len(call.name) + _json_chars(call.arguments) + 16
            return size
        case ToolResultMessage(name=name, content=content):
            return len(content_text(content)) + len(name) + 32 + _PER_MESSAGE
        case _:  # pragma: no cover - every message kind is matched above
            return len(repr(message))


def _json_chars(value: object) -> int:
    try:
        return len(orjson.dumps(value))
    except TypeError:  # not JSON as orjson writes it (an int beyond 64 bits): near enough
        return len(repr(value))


def tool_chars(tools: tuple[ToolDefinition, ...]) -> int:
    """The characters the tools' definitions add (names, descriptions, argument schemas)."""
    return sum(len(t.name) + len(t.description) + _json_chars(t.input_schema) + 16 for t in tools)


def request_chars(request: ModelRequest) -> int:
    """The characters of everything ``request`` shows the model."""
    return (
        len(request.instructions)
        + tool_chars(request.tools)
        + sum(message_chars(m) for m in request.messages)
    )


def estimate_tokens(chars: int) -> int:
    """Tokens for ``chars`` characters of a request (rounded up; never below 0)."""
    return 0 if chars <= 0 else int(chars / CHARS_PER_TOKEN) + 1
