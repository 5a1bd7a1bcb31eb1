"""The conversation a model sees: messages and the tool calls inside them."""

from __future__ import annotations

from dataclasses import field
from typing import Literal, TypeAlias

from tether._internal.frozen import frozen
from tether.content import ContentBlock, JsonObject

__all__ = [
    "ASK_USER",
    "CONTROL_TOOLS",
    "FINISH_TASK",
    "SEARCH_KNOWLEDGE",
    "AssistantMessage",
    "Message",
    "ToolCall",
    "ToolResultMessage",
    "UserMessage",
]

FINISH_TASK = "finish_task"
"""The tool that ends a run successfully; its arguments are the output."""
ASK_USER = "ask_user"
"""The tool that pauses a run with ``waiting_for_user`` (when the agent may ask)."""
SEARCH_KNOWLEDGE = "search_knowledge"
"""The tool that searches the agent's knowledge base (when it has one): the run retrieves,
grades and rewrites, and answers with the passages that may be cited."""
CONTROL_TOOLS = frozenset({FINISH_TASK, ASK_USER, SEARCH_KNOWLEDGE})
"""Tools the loop handles itself; they do not count against ``max_tool_calls``."""


@frozen(slots=False)
class ToolCall:
    """One tool call the model asked for."""

    id: str
    """The call id (the model's own, or one tether assigned)."""
    name: str
    """The tool's name."""
    arguments: JsonObject = field(default_factory=lambda: {})
    """The arguments, parsed from the model's JSON."""
    parse_error: str | None = None
    """Set when the model's arguments were not a JSON object; the raw text follows it."""


@frozen
class UserMessage:
    """Text from the user, or from tether on the user's behalf (a correction, a nudge)."""

    kind: Literal["user"] = "user"
    """Discriminator."""
    text: str
    """The text."""


@frozen
class AssistantMessage:
    """What the model said: text and tool calls."""

    kind: Literal["assistant"] = "assistant"
    """Discriminator."""
    text: str = ""
    """Visible text."""
    tool_calls: tuple[ToolCall, ...] = ()
    """Tool calls, in the model's order."""
    reasoning: str | None = None
    """The model's reasoning, when it exposes it."""


@frozen
class ToolResultMessage:
    """The result of one tool call, as the model sees it."""

    kind: Literal["tool_result"] = "tool_result"
    """Discriminator."""
    call_id: str
    """The call this answers."""
    name: str
    """The tool's name."""
    content: tuple[ContentBlock, ...]
    """The result's content blocks."""
    is_error: bool = False
    """Whether the call failed."""
    synthetic: bool = False
    """True when tether wrote this result itself (denied, skipped, unknown outcome)."""


Message: TypeAlias = UserMessage | AssistantMessage | ToolResultMessage
"""One message of a conversation. Instructions travel separately in the request."""
