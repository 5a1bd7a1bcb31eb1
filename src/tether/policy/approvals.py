"""A human's decision on a call that waits for approval.

An approval binds to one run, one call and the exact arguments that were asked about
(their hash): ``Approval.approve(outcome.pending[0])`` carries all three, and ``resume``
refuses an approval that does not match what the log says is pending. Edited arguments
are a new request: the policy checks them again before the call runs, and a ``deny`` there
still stands.
"""

from __future__ import annotations

import orjson

from tether._internal.frozen import frozen
from tether.errors import UserError
from tether.jsontypes import JsonObject
from tether.outcome import PendingCall

__all__ = ["Approval"]


@frozen
class Approval:
    """Approve or deny one pending call (see ``agent.resume(run_id, approvals=...)``)."""

    call_id: str
    """The pending call."""
    approved: bool = True
    """Approve (run it) or deny (the model gets a denial and the run goes on)."""
    run_id: str | None = None
    """The run: required, and it must be the run being resumed (``approve``/``deny`` set it)."""
    arguments_hash: str | None = None
    """The hash of the arguments the human saw: required, and it must be what is pending."""
    arguments: JsonObject | None = None
    """Edited arguments to run with instead (checked by the policy again)."""
    by: str = ""
    """Who decided."""
    reason: str = ""
    """Why (shown to the model for a denial)."""

    def __post_init__(self) -> None:
        if self.arguments is None:
            return
        if not isinstance(self.arguments, dict):  # pyright: ignore[reportUnnecessaryIsInstance] - user input
            raise UserError(
                f"an approval's edited arguments must be a JSON object, not "
                f"{type(self.arguments).__name__}"
            )
        try:  # as deep as the log's events hold them
            orjson.dumps([[[self.arguments]]])
        except TypeError as exc:
            raise UserError(
                f"an approval's edited arguments cannot be stored as JSON ({exc}); give "
                "strings, numbers, booleans, None, lists and objects, nested less deeply"
            ) from None

    @classmethod
    def approve(
        cls,
        pending: PendingCall,
        *,
        by: str = "",
        reason: str = "",
        arguments: JsonObject | None = None,
    ) -> Approval:
        """Approve ``pending`` exactly as asked (or with edited ``arguments``)."""
        return cls(
            call_id=pending.call_id,
            approved=True,
            run_id=pending.run_id or None,
            arguments_hash=pending.arguments_hash or None,
            arguments=arguments,
            by=by,
            reason=reason,
        )

    @classmethod
    def deny(cls, pending: PendingCall, *, by: str = "", reason: str = "") -> Approval:
        """Deny ``pending``; ``reason`` is what the model is told."""
        return cls(
            call_id=pending.call_id,
            approved=False,
            run_id=pending.run_id or None,
            arguments_hash=pending.arguments_hash or None,
            by=by,
            reason=reason,
        )
