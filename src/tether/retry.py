"""Back-off between retries of transient failures: exponential, capped, with jitter."""

from __future__ import annotations

import math
import random
from collections.abc import Mapping
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime

from tether._internal.frozen import frozen

__all__ = ["MAX_SERVER_WAIT", "Backoff", "retry_after"]

MAX_SERVER_WAIT = 300.0
"""Longest wait a server may ask for (``Retry-After``) that a run retries after; past it,
the run stops and says how long the server asked for."""


@frozen
class Backoff:
    """Delay before retry *n*: ``min(maximum, initial * multiplier**(n-1))``, jittered."""

    initial: float = 0.5
    """Seconds before the first retry."""
    multiplier: float = 2.0
    """Growth per retry."""
    maximum: float = 8.0
    """Cap on one delay."""
    jitter: float = 0.5
    """Fraction of the delay drawn at random (0 = none), to spread retrying clients."""

    def delay(self, attempt: int, rng: random.Random | None = None) -> float:
        """Seconds to wait before retry number ``attempt`` (1-based)."""
        base = min(self.maximum, self.initial * self.multiplier ** max(0, attempt - 1))
        if self.jitter <= 0 or base <= 0:
            return base
        r = (rng or random).random()
        return base * (1 - self.jitter) + base * self.jitter * r


def retry_after(headers: Mapping[str, str], *, now: datetime | None = None) -> float | None:
    """Seconds a server asks a client to wait (``retry-after-ms``, ``Retry-After``), if any.

    ``Retry-After`` is seconds or an HTTP date; what is neither (or not a finite number, or
    in the past) says nothing.
    """
    millis = headers.get("retry-after-ms")
    if millis is not None:
        try:
            wait = float(millis) / 1000
        except ValueError:
            wait = math.nan
        if math.isfinite(wait) and wait >= 0:
            return wait
    value = headers.get("retry-after")
    if value is None:
        return None
    try:
        wait = float(value)
    except ValueError:
        try:
            when = parsedate_to_datetime(value)
        except (TypeError, ValueError, IndexError):
            return None
        if when.tzinfo is None:
            when = when.replace(tzinfo=UTC)
        wait = (when - (now or datetime.now(UTC))).total_seconds()
    return wait if math.isfinite(wait) and wait >= 0 else None
