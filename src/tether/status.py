"""How a run ends: its status, and what went wrong when it did not finish cleanly.

Events (``run_finished``) and outcomes both speak of it; neither owns it.
"""

from __future__ import annotations

from typing import Literal, TypeAlias

from tether._internal.frozen import frozen

__all__ = ["TERMINAL_STATUSES", "ErrorInfo", "RunStatus"]

RunStatus: TypeAlias = Literal[
    "finished",
    "budget_exhausted",
    "policy_denied",
    "waiting_for_approval",
    "waiting_for_user",
    "cancelled",
    "failed",
]
"""How a run ended. Only ``finished`` means the task was completed through ``finish_task``."""

TERMINAL_STATUSES: frozenset[RunStatus] = frozenset(
    {"finished", "budget_exhausted", "policy_denied", "cancelled", "failed"}
)
"""Statuses a run cannot be resumed from (the others wait for a human)."""


@frozen(slots=False)
class ErrorInfo:
    """What went wrong, for a run that did not finish cleanly."""

    type: str
    """The error's class name, e.g. ``ModelError``."""
    message: str
    """The error's message: what happened and what to do."""
