"""The signals the parts of a run pass to each other, and what a tool call's plan holds.

``Stop`` and ``Retry`` are what a step decides; ``Cancelled`` unwinds to the loop, which
ends the run; ``Planned`` is what happens to one tool call of a turn.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from typing_extensions import TypeVar

from tether.content import ToolResult
from tether.messages import ToolCall
from tether.outcome import ErrorInfo, RunStatus
from tether.tools.base import Tool, ToolContext

__all__ = [
    "Cancelled",
    "OutputT",
    "Planned",
    "Retry",
    "Stop",
    "ToolRunner",
    "error_info",
]

OutputT = TypeVar("OutputT", default=str)
ToolRunner = Callable[
    [Tool, ToolCall, ToolContext, Mapping[str, Any], "float | None"],
    Awaitable[tuple[ToolResult, "str | None"]],
]
"""Runs one validated call and returns its result and error type (replay swaps it)."""


class Planned:
    """What happens to one tool call of a turn (class-level defaults: cheap to create)."""

    tool: Tool | None = None
    arguments: Mapping[str, Any] | None = None
    synthetic: ToolResult | None = None
    error_type: str | None = None
    output: object = None
    finish: bool = False
    question: str | None = None
    awaiting_approval: bool = False
    stop_reason: str | None = None
    stop: Stop | None = None  # the run ends after this turn (a last rejected answer)
    notes: list[tuple[type[Any], dict[str, Any]]] | None = None  # a memory tool's events
    search: str | None = None  # a ``search_knowledge`` call's question
    answered: ToolResult | None = None  # a control tool's result the run worked out
    seconds: float = 0.0  # how long working it out took

    def __init__(self, call: ToolCall) -> None:
        self.call = call


class Stop:
    """The run stops here: with which status, and why (a limit, an error)."""

    __slots__ = ("ask_for_answer", "error", "limit", "maximum", "status", "used")

    def __init__(
        self,
        status: RunStatus,
        limit: str | None = None,
        used: float = 0.0,
        maximum: float = 0.0,
        ask_for_answer: bool = False,
        error: ErrorInfo | None = None,
    ) -> None:
        self.status = status
        self.limit = limit
        self.used = used
        self.maximum = maximum
        self.ask_for_answer = ask_for_answer
        self.error = error

    def __repr__(self) -> str:
        return (
            f"Stop({self.status!r}, limit={self.limit!r}, used={self.used!r}, "
            f"maximum={self.maximum!r}, ask_for_answer={self.ask_for_answer!r}, "
            f"error={self.error!r})"
        )


class Retry:
    """Ask the model again after ``delay`` seconds."""

    __slots__ = ("delay",)

    def __init__(self, delay: float) -> None:
        self.delay = delay


class Cancelled(Exception):
    """The run is cancelled (``cancel()``, Ctrl-C): unwind to ``_drive``, which ends it."""


def error_info(exc: BaseException, timeout_message: str) -> ErrorInfo:
    """What the log says of a failure (a bare ``TimeoutError`` gets ``timeout_message``)."""
    if isinstance(exc, TimeoutError) and not str(exc):
        return ErrorInfo(type="TimeoutError", message=timeout_message)
    return ErrorInfo(type=type(exc).__name__, message=str(exc) or type(exc).__name__)
