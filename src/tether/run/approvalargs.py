"""The arguments of a call under approval: what an approval binds to, what redaction left.

An approval binds to the SHA-256 of the canonical JSON of the arguments it approves. A
call whose arguments held a secret is logged with markers where the secret was; the
arguments themselves wait in this process's memory (``vault``) for the approval.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence

from tether.codec import canonical_json
from tether.events import ApprovalGiven, ApprovalRequested, Event, Redacted, ToolCallRequested

__all__ = ["arguments_hash", "has_redaction", "redacted_calls", "secret_gone", "was_redacted"]


def has_redaction(arguments: object) -> bool:
    """Whether recorded arguments hold a redaction marker where a secret was."""
    return b"[REDACTED:" in canonical_json(arguments)


def redacted_calls(events: Sequence[Event]) -> set[str]:
    """Calls whose stored arguments were redacted (their intent, or an edited approval).

    Read from the ``redacted`` events, so a custom redaction that leaves no marker counts.
    """
    calls: set[str] = set()
    for event in events:
        if isinstance(event, Redacted) and 0 <= event.of_seq < len(events):
            target = events[event.of_seq]
            if isinstance(target, ToolCallRequested | ApprovalGiven | ApprovalRequested) and any(
                f.startswith("arguments") for f in event.fields
            ):
                calls.add(target.call_id)
    return calls


def was_redacted(events: Sequence[Event], seq: int, field: str) -> bool:
    """Whether a ``redacted`` event names ``field`` of the event at ``seq``."""
    return any(
        isinstance(e, Redacted)
        and e.of_seq == seq
        and any(f == field or f.startswith((f"{field}.", f"{field}[")) for f in e.fields)
        for e in events
    )


def secret_gone(call_id: str) -> str:
    """Why an approved call whose secret arguments this process does not hold did not run."""
    return (
        f"not executed: the arguments of {call_id} held a secret, which is never stored; it "
        "was kept in the memory of the process that asked for the approval, and that process "
        "has ended. Approve it again with the arguments given in full "
        "(Approval.approve(pending, arguments={...}), `tether approve RUN CALL --args JSON`)"
    )


def arguments_hash(arguments: object) -> str:
    """What an approval binds to: SHA-256 of the canonical JSON of the arguments."""
    return hashlib.sha256(canonical_json(arguments)).hexdigest()
