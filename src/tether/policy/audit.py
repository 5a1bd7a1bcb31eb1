"""Audit a run's log: verify its hash chain and list every policy decision and approval.

The check works on the log as stored (raw JSON lines), so a line that no longer decodes is
reported as the first bad event too. A hash chain shows edits, reordering and events cut
out of the middle; a log cut at its end is only visible against an outside count (the run
store's index), which ``audit_encoded`` takes as ``expected_events``.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from tether._internal.frozen import frozen
from tether.codec import compute_hash, decode_event
from tether.errors import LogError
from tether.events import (
    GENESIS_HASH,
    ApprovalGiven,
    ApprovalRequested,
    Event,
    PolicyDecided,
    Redacted,
)

__all__ = ["AuditEntry", "AuditReport", "audit_encoded", "audit_events"]


@frozen
class AuditEntry:
    """One decision in the log: a policy decision, an approval request or a human's answer."""

    seq: int
    """Where in the log."""
    at: datetime
    """When."""
    kind: str
    """``policy_decided``, ``approval_requested``, ``approval_given`` or ``redacted``."""
    call_id: str
    """The call it is about (empty for redactions)."""
    tool: str
    """The tool (empty where the event does not name it)."""
    decision: str
    """allow / deny / needs_approval, approved / denied, or what was redacted."""
    detail: str
    """The rule and reason, who decided, or where the redaction was."""


@frozen
class AuditReport:
    """What an audit found."""

    run_id: str
    """The run (as its first event names it)."""
    events: int
    """Events read."""
    ok: bool
    """Whether the whole chain verified."""
    bad_seq: int | None = None
    """The position of the first bad event."""
    problem: str | None = None
    """What is wrong with it."""
    entries: tuple[AuditEntry, ...] = ()
    """Every decision before the first bad event (all of them when ``ok``)."""
    last_hash: str = GENESIS_HASH
    """The hash of the last good event (anchor it elsewhere to detect a cut tail)."""


def _entry(event: Event) -> AuditEntry | None:
    match event:
        case PolicyDecided():
            return AuditEntry(
                seq=event.seq,
                at=event.at,
                kind=event.kind,
                call_id=event.call_id,
                tool=event.tool,
                decision=event.decision,
                detail=f"{event.rule}: {event.reason}",
            )
        case ApprovalRequested():
            return AuditEntry(
                seq=event.seq,
                at=event.at,
                kind=event.kind,
                call_id=event.call_id,
                tool=event.tool,
                decision="requested",
                detail=f"arguments sha256 {event.arguments_hash[:16]}…",
            )
        case ApprovalGiven():
            edited = " with edited arguments" if event.arguments is not None else ""
            why = f": {event.reason}" if event.reason else ""
            return AuditEntry(
                seq=event.seq,
                at=event.at,
                kind=event.kind,
                call_id=event.call_id,
                tool="",
                decision="approved" if event.approved else "denied",
                detail=f"by {event.by or 'unnamed'}{edited}{why}",
            )
        case Redacted():
            return AuditEntry(
                seq=event.seq,
                at=event.at,
                kind=event.kind,
                call_id="",
                tool="",
                decision=", ".join(event.kinds),
                detail=f"event {event.of_seq}: {', '.join(event.fields)}",
            )
        case _:
            return None


def audit_encoded(lines: Sequence[bytes], *, expected_events: int | None = None) -> AuditReport:
    """Verify a log given as its stored JSON lines, one event each, in stored order.

    Args:
        lines: The encoded events.
        expected_events: How many events an outside record (the store's index) says the
            run has; fewer lines means the log was cut at its end.

    Returns:
        The report; an empty log is never ``ok``.
    """
    entries: list[AuditEntry] = []
    run_id = ""
    prev = GENESIS_HASH

    def bad(position: int, problem: str) -> AuditReport:
        return AuditReport(
            run_id=run_id,
            events=len(lines),
            ok=False,
            bad_seq=position,
            problem=problem,
            entries=tuple(entries),
            last_hash=prev,
        )

    if not lines:  # no run's log is empty: there is nothing to vouch for
        return bad(0, "the log holds no events, so there is no chain to verify")
    for position, raw in enumerate(lines):
        try:
            event = decode_event(raw)
        except LogError as exc:
            return bad(position, f"it does not decode: {exc}")
        run_id = run_id or event.run_id
        if event.run_id != run_id:
            return bad(position, f"it belongs to run {event.run_id!r}, not {run_id!r}")
        if event.seq != position:
            return bad(
                position,
                f"it says seq {event.seq}: events were removed, added or reordered before it",
            )
        if event.prev_hash != prev:
            return bad(position, "its prev_hash is not the previous event's hash")
        if compute_hash(event) != event.hash:
            return bad(position, "its hash does not match its content: it was edited")
        prev = event.hash
        entry = _entry(event)
        if entry is not None:
            entries.append(entry)
    if expected_events is not None and expected_events != len(lines):
        return bad(
            len(lines),
            f"the store's index records {expected_events} events but the log has "
            f"{len(lines)}: it was cut (or added to) at its end",
        )
    return AuditReport(
        run_id=run_id, events=len(lines), ok=True, entries=tuple(entries), last_hash=prev
    )


def audit_events(events: Sequence[Event]) -> AuditReport:
    """``audit_encoded`` for events already in memory."""
    from tether.codec import encode_event

    return audit_encoded([encode_event(e) for e in events])
