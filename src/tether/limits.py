"""The bounds of a run: steps, tool calls, time, tokens, cost, parallelism and retries.

Each phase whose work is a model request (``plan``, ``think``, ``reflect``, ``respond``) can
have bounds of its own (``PhaseLimits``): how many requests, how long one may take, and how
many seconds of requests the phase may spend over the run.
"""

from __future__ import annotations

import math
from dataclasses import fields
from typing import Literal, TypeAlias, cast

from tether._internal.frozen import frozen
from tether.errors import ConfigError

__all__ = ["LimitName", "Limits", "PhaseLimits", "PhaseName"]

_MAX_COUNT = 2**63
"""Counts stay below this: a run's log holds them as JSON's 64-bit integers."""

LimitName: TypeAlias = Literal[
    "max_steps", "max_tool_calls", "max_seconds", "max_tokens", "max_cost", "max_retries"
]
"""The limits whose exhaustion ends a run with ``budget_exhausted``.

A phase's own limit is named ``"<phase>.<field>"`` (``"think.max_seconds"``).
"""

PhaseName: TypeAlias = Literal["plan", "think", "reflect", "respond"]
"""The phases whose work is a model request, and so can be bounded on their own.

``plan`` is the router's and the planner's requests, ``think`` the acting turns, ``reflect``
the checks of answers, ``respond`` the one tool-free best-effort answer after a limit. Tool
calls (``act``) are bounded by ``max_tool_calls``, ``tool_timeout`` and each tool's own
timeout.
"""


@frozen(slots=False)
class PhaseLimits:
    """The bounds of one phase of a run (``None``: only the run's own limits apply).

    What happens when one is reached depends on the phase. ``think`` ends the run
    ``budget_exhausted`` (with a best-effort answer, as ``max_steps`` does). ``plan`` and
    ``reflect`` are optional stages: they are skipped from then on, with a
    ``budget_warning`` (the run goes on without a plan revision, an answer is taken
    unchecked). ``respond`` with ``max_steps=0`` asks for no best-effort answer.
    """

    max_steps: int | None = None
    """Model requests made in this phase over the run, answered or failed."""
    timeout: float | None = None
    """Seconds one model request of this phase may take (within the run's ``max_seconds``)."""
    max_seconds: float | None = None
    """Seconds this phase's model requests may take, added up over the run."""

    def __post_init__(self) -> None:
        for name in ("timeout", "max_seconds"):
            value = getattr(self, name)
            if type(value) is int:
                object.__setattr__(self, name, float(value))
        for name, kinds in (("max_steps", int), ("timeout", float), ("max_seconds", float)):
            value: object = getattr(self, name)
            if value is None:
                continue
            if type(value) is not kinds or not (
                0 <= cast(float, value) < (_MAX_COUNT if kinds is int else math.inf)
            ):
                kind = "an int from 0 to 2**63 - 1" if kinds is int else "a finite number >= 0"
                raise ConfigError(f"PhaseLimits.{name} must be {kind} (or None), got {value!r}")


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
    # The phases' own limits come last and are left out of the encoding while unset, so a
    # log or an agent digest made before they existed is read and hashed as it was.
    plan: PhaseLimits | None = None
    """The router's and the planner's requests (``Thinking``)."""
    think: PhaseLimits | None = None
    """The acting turns: the model choosing tool calls or finishing."""
    reflect: PhaseLimits | None = None
    """The reflector's checks of answers (``Thinking``)."""
    respond: PhaseLimits | None = None
    """The one tool-free best-effort answer after a limit (its timeout is 60 s unless set)."""

    def __post_init__(self) -> None:
        # Float fields hold floats even when given ints, so a log's encoding is stable.
        for name in _FLOAT_FIELDS:
            value = getattr(self, name)
            if type(value) is int:
                object.__setattr__(self, name, float(value))
        for name in _FIELDS:
            value = getattr(self, name)
            counted = name not in _FLOAT_FIELDS  # a count: 7.5 steps or True steps mean nothing
            if value is not None and (
                isinstance(value, bool) or not isinstance(value, int if counted else float)
            ):
                kind = "an int" if counted else "a number"
                raise ConfigError(
                    f"Limits.{name} must be {kind} >= 0 (or None for no limit), got {value!r}"
                )
            if value is not None and not (0 <= value < (_MAX_COUNT if counted else math.inf)):
                what = "a whole number from 0 to 2**63 - 1" if counted else "a finite number >= 0"
                raise ConfigError(
                    f"Limits.{name} must be {what} (or None for no limit), got {value!r}"
                )
        if self.max_parallel_tools < 1:
            raise ConfigError("Limits.max_parallel_tools must be >= 1")
        state = self.__dict__
        for name in PHASES:
            value = state[name]
            if value is None:
                del state[name]  # read through the class's default: not encoded, not hashed
            elif not isinstance(value, PhaseLimits):
                raise ConfigError(
                    f"Limits.{name} must be a PhaseLimits (or None), got {type(value).__name__}"
                )

    def phase(self, name: PhaseName) -> PhaseLimits | None:
        """The limits of phase ``name``, if it has any."""
        return self.__dict__.get(name)

    @property
    def phased(self) -> bool:
        """Whether any phase has limits of its own."""
        state = self.__dict__
        return any(name in state for name in PHASES)


PHASES: tuple[PhaseName, ...] = ("plan", "think", "reflect", "respond")
"""The phases that may have limits of their own, in the order of ``Limits``' fields."""
_FIELDS = tuple(f.name for f in fields(Limits) if f.name not in PHASES)
_FLOAT_FIELDS = ("max_seconds", "tool_timeout", "max_cost")
