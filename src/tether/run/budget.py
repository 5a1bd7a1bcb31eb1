"""Budget warnings: a ``budget_warning`` when a run has used a set fraction of a limit.

Every limit with a maximum is watched: steps (counting the step about to be taken), tool
calls, tokens, cost (when it is known) and time. The fractions come from
``Agent(budget_warnings=...)`` (default 80%). Each fraction of each limit is warned about
once in a run, resumes included: the log says what was warned already. Checked before each
model request, at one comparison per limit (the next threshold, in the limit's own units).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

from tether.events import BudgetWarning, Event
from tether.limits import Limits
from tether.run.base import Stop
from tether.run.context import RunContext
from tether.state import StateBuilder

__all__ = ["Budget", "limit_stop", "warned_from"]

_INF = math.inf
_LIMITS = ("max_steps", "max_tool_calls", "max_tokens", "max_cost", "max_seconds")


def warned_from(events: Sequence[Event], fractions: Sequence[float]) -> dict[str, float]:
    """The highest fraction of each limit that ``events`` warned about already."""
    warned: dict[str, float] = {}
    for event in events:
        if isinstance(event, BudgetWarning) and event.maximum > 0:
            ahead = 1 if event.limit == "max_steps" else 0  # counted with the next step
            share = (event.used + ahead) / event.maximum
            crossed = [f for f in fractions if f <= share + 1e-9]
            if crossed:
                warned[event.limit] = max(crossed[-1], warned.get(event.limit, 0.0))
    return warned


class Budget:
    """Watches a run's limits and records a ``budget_warning`` as each fraction is reached."""

    __slots__ = ("_add", "_elapsed", "_fractions", "_limits", "_next", "_state", "_warned")

    def __init__(
        self,
        limits: Limits,
        fractions: tuple[float, ...],
        *,
        state: StateBuilder,
        warned: dict[str, float],
        add: Callable[..., Event],
        elapsed: Callable[[], float],
    ) -> None:
        self._limits = limits
        self._fractions = fractions
        self._state = state
        self._warned = warned
        self._add = add
        self._elapsed = elapsed
        self._next: list[float] | None = None  # computed on first use: after a resume's repair

    def check(self) -> None:
        """Before a model request: record a warning for each limit past its next fraction."""
        at = self._next
        if at is None:
            at = self._next = self._thresholds()
        st = self._state
        cost = st.cost
        if (
            st.steps + 1 >= at[0]
            or st.tool_calls >= at[1]
            or st.input_tokens + st.output_tokens >= at[2]
            or (cost is not None and cost >= at[3])
            or (at[4] != _INF and self._elapsed() >= at[4])
        ):
            self._warn()

    def _used(self) -> tuple[float, ...]:
        st = self._state
        cost = st.cost
        return (
            st.steps + 1,
            st.tool_calls,
            st.input_tokens + st.output_tokens,
            -1.0 if cost is None else cost,
            self._elapsed(),
        )

    def _maxima(self) -> tuple[float | None, ...]:
        limits = self._limits
        return (
            limits.max_steps,
            limits.max_tool_calls,
            limits.max_tokens,
            limits.max_cost,
            limits.max_seconds,
        )

    def _warn(self) -> None:
        used = self._used()
        for index, maximum in enumerate(self._maxima()):
            if maximum is None or maximum <= 0:
                continue
            limit = _LIMITS[index]
            done = self._warned.get(limit, 0.0)
            crossed = [f for f in self._fractions if f > done and used[index] >= f * maximum]
            if not crossed:
                continue
            self._warned[limit] = crossed[-1]  # one warning for the highest fraction reached
            shown = used[index] - 1 if limit == "max_steps" else used[index]  # steps so far
            self._add(BudgetWarning, limit=limit, used=float(shown), maximum=float(maximum))
        self._next = self._thresholds()

    def _thresholds(self) -> list[float]:
        """The next fraction of each limit, in the limit's units (``inf``: none left)."""
        next_at: list[float] = []
        for index, maximum in enumerate(self._maxima()):
            done = self._warned.get(_LIMITS[index], 0.0)
            left = [f for f in self._fractions if f > done]
            if maximum is None or maximum <= 0 or not left:
                next_at.append(_INF)
            else:
                next_at.append(left[0] * maximum)
        return next_at


def limit_stop(ctx: RunContext[Any], budget: Budget) -> Stop | None:
    """Before a model call: the stop of a limit reached, if one is; else ``budget``'s warnings."""
    ctx.check_cancel()
    limits, st = ctx.spec.limits, ctx.state
    if st.retries > limits.max_retries:
        return Stop("budget_exhausted", "max_retries", st.retries, limits.max_retries, True)
    if st.tool_retries:  # one tool failing in a row while others succeed between
        registry = ctx.spec.registry
        for name, failed in st.tool_retries.items():
            tool = registry.get(name)
            own = None if tool is None else tool.retries
            maximum = limits.max_retries if own is None else own
            if failed > maximum:
                return Stop("budget_exhausted", "max_retries", failed, maximum, True)
    remaining = ctx.remaining()
    if remaining is not None and remaining <= 0:
        assert limits.max_seconds is not None
        return Stop("budget_exhausted", "max_seconds", ctx.elapsed(), limits.max_seconds)
    if limits.max_tokens is not None:
        tokens = st.input_tokens + st.output_tokens
        if tokens >= limits.max_tokens:
            return Stop("budget_exhausted", "max_tokens", tokens, limits.max_tokens)
    if limits.max_cost is not None and st.cost is not None and st.cost >= limits.max_cost:
        return Stop("budget_exhausted", "max_cost", st.cost, limits.max_cost)
    if st.steps >= limits.max_steps:
        return Stop("budget_exhausted", "max_steps", st.steps, limits.max_steps, True)
    if ctx.phased and (spent := ctx.phase_spent("think")) is not None:
        return spent
    budget.check()
    return None
