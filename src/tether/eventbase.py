"""The fields every event has, and the hash a run's first event follows."""

from __future__ import annotations

from datetime import datetime

from tether._internal.frozen import frozen
from tether.phases import Phase, phase_of

__all__ = ["GENESIS_HASH", "EventBase"]

GENESIS_HASH = "0" * 64
"""The ``prev_hash`` of every run's first event."""


@frozen
class EventBase:
    """Fields every event has."""

    kind: str
    """Which event this is; each subclass fixes it to a literal."""
    run_id: str
    """The run the event belongs to."""
    seq: int
    """Position in the run's log: 0, 1, 2, ... without gaps."""
    at: datetime
    """When the event was recorded (UTC); events committed together share their batch's time."""
    prev_hash: str
    """The previous event's ``hash``; ``GENESIS_HASH`` for ``seq == 0``."""
    hash: str = ""
    """SHA-256 (hex) of the JSON array of every other field's value (see ``tether.codec``)."""

    @property
    def phase(self) -> Phase:
        """The phase of the run it belongs to, read from what it is (not stored: no field).

        ``start`` (the run begins or continues), ``plan``, ``think`` (the model's turn and
        what bounds it), ``act`` (tool calls, the policy, approvals), ``reflect``,
        ``respond`` (the final answer and the run's end), ``record`` (bookkeeping of the
        log itself: what was redacted).
        """
        return phase_of(self.kind, getattr(self, "final", False), getattr(self, "purpose", None))
