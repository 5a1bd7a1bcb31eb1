"""The bounds of a run: steps, tool calls, time, tokens, cost, parallelism and retries."""

from __future__ import annotations

import math
from dataclasses import fields
from typing import Literal, TypeAlias

from tether._internal.frozen import frozen
from tether.errors import ConfigError

__all__ = ["LimitName", "Limits"]

LimitName: TypeAlias = Literal[
    "max_steps", "max_tool_calls", "max_seconds", "max_tokens", "max_cost", "max_retries"
]
"""The limits whose exhaustion ends a run with ``budget_exhausted``."""


@frozen(slots=False)
class Limits:
    """Every bound a run obeys. ``None`` means unbounded (only where that is safe)."""

    max_steps: int = 25
    """Model turns, not counting the one tool-free best-effort answer after a limit."""
    max_tool_calls: int = 50
    """Tool calls executed in the whole run (``finish_task`` and ``ask_user`` excluded)."""
    max_seconds: float | None = 600.0
    """Wall-clock seconds for the whole run; no model call starts after it."""
    tool_timeout: float | None = 120.0
    """Seconds one tool call may take, unless the tool sets its own timeout."""
    max_tokens: int | None = None
    """Input plus output tokens over the run."""
    max_cost: float | None = None
    """US dollars over the run; enforced only while the cost is known."""
    max_parallel_tools: int = 4
    """Tool calls from one model turn that run at once."""
    max_retries: int = 3
    """Consecutive correctable failures (invalid arguments or output, transient model errors)."""
    answer_max_tokens: int = 1024
    """Output tokens the final best-effort answer may use."""

    def __post_init__(self) -> None:
        # Float fields hold floats even when given ints, so a log's encoding is stable.
        for name in _FLOAT_FIELDS:
            value = getattr(self, name)
            if type(value) is int:
                object.__setattr__(self, name, float(value))
        for name in _FIELDS:
            value = getattr(self, name)
            if value is not None and not (0 <= value < math.inf):
                raise ConfigError(
                    f"Limits.{name} must be a finite number >= 0 (or None for no limit), got {value!r}"
                )
        if self.max_parallel_tools < 1:
            raise ConfigError("Limits.max_parallel_tools must be >= 1")


_FIELDS = tuple(f.name for f in fields(Limits))
_FLOAT_FIELDS = ("max_seconds", "tool_timeout", "max_cost")
