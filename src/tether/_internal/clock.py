"""Time, injectable so that tests get deterministic logs."""

from __future__ import annotations

import time
from collections.abc import Callable
from datetime import UTC, datetime
from functools import partial

__all__ = ["Clock", "SystemClock", "monotonic_of", "now_of"]


class Clock:
    """Wall time for events, monotonic time for limits and latencies."""

    def now(self) -> datetime:
        """The current UTC time."""
        return datetime.now(UTC)

    def monotonic(self) -> float:
        """Seconds on a monotonic clock."""
        return time.monotonic()


SystemClock = Clock
"""The real clock."""


_utc_now: Callable[[], datetime] = partial(datetime.now, UTC)


def now_of(clock: Clock) -> Callable[[], datetime]:
    """``clock.now``, as a C-level callable for the real clock (the loop's hot path)."""
    return _utc_now if type(clock) is Clock else clock.now


def monotonic_of(clock: Clock) -> Callable[[], float]:
    """``clock.monotonic``, as ``time.monotonic`` itself for the real clock."""
    return time.monotonic if type(clock) is Clock else clock.monotonic
