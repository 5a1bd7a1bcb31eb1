"""Test doubles and helpers: scripted models, a fake clock, and the real-request switch.

Real model requests fail while blocked; tests block them (``TETHER_BLOCK_MODEL_REQUESTS=1``
or ``allow_model_requests(False)``) and opt in per test where a real model is the point.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from tether._internal.clock import Clock
from tether.content import JsonValue
from tether.memory.hashembedder import HashEmbedder
from tether.messages import FINISH_TASK, ToolCall
from tether.models.base import allow_model_requests, model_requests_allowed
from tether.models.function import FunctionModel
from tether.models.replay import ReplayModel
from tether.models.scripted import ScriptedModel, ScriptStep, load_script

__all__ = [
    "FakeClock",
    "FunctionModel",
    "HashEmbedder",
    "ReplayModel",
    "ScriptStep",
    "ScriptedModel",
    "allow_model_requests",
    "call",
    "finish",
    "load_script",
    "model_requests_allowed",
]


def call(name: str, /, *, id: str = "", **arguments: JsonValue) -> ToolCall:
    """A tool call for a script: ``call("add", a=1, b=2)``."""
    return ToolCall(id=id, name=name, arguments=dict(arguments))


def finish(answer: JsonValue = None, /, *, id: str = "", **fields: JsonValue) -> ToolCall:
    """A ``finish_task`` call: ``finish("42")`` for text output, ``finish(x=1)`` for models."""
    arguments: dict[str, JsonValue] = (
        dict(fields) if answer is None else {"answer": answer, **fields}
    )
    return ToolCall(id=id, name=FINISH_TASK, arguments=arguments)


class FakeClock(Clock):
    """A clock that moves only when told: wall time ticks ``step`` per reading."""

    def __init__(
        self,
        start: datetime = datetime(2026, 1, 1, tzinfo=UTC),
        *,
        step: timedelta = timedelta(milliseconds=1),
    ) -> None:
        self._now = start
        self._step = step
        self._mono = 0.0

    def now(self) -> datetime:
        """The fake time; each reading advances it by ``step``."""
        current = self._now
        self._now = current + self._step
        return current

    def monotonic(self) -> float:
        """Fake monotonic seconds (moved only by ``advance``)."""
        return self._mono

    def advance(self, seconds: float) -> None:
        """Move both clocks forward."""
        self._mono += seconds
        self._now += timedelta(seconds=seconds)
