"""Time, injectable so that tests get deterministic logs."""

from __future__ import annotations

import time
from datetime import UTC, datetime

__all__ = ["Clock", "SystemClock"]


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
