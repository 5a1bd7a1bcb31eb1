"""Back-off between retries of transient failures: exponential, capped, with jitter."""

from __future__ import annotations

import random

from tether._internal.frozen import frozen

__all__ = ["Backoff"]


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
