"""Audit a run's log: verify its hash chain and list every policy decision and approval.

The check works on the log as stored (raw JSON lines), so a line that no longer decodes is
reported as the first bad event too. A hash chain shows edits, reordering and events cut
out of the middle; a log cut at its end is only visible against an outside count (the run
store's index), which ``audit_encoded`` takes as ``expected_events``.

Without a key the check is of the chain's internal consistency only: the hashes are
unkeyed, so anyone who edits a log can compute them again (``codec.seal``) and the edited
log passes. With the audit key (``tether.auditkey``) every event must also carry its MAC
under that key; one who edits the log without the key cannot make them, so the edit fails
the audit. The MAC of an event vouches for every event before it (its hash covers the
previous hash), so a report says how far the log is authenticated.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from contextlib import aclosing
from datetime import datetime
from typing import TYPE_CHECKING

import orjson

from tether._internal.frozen import frozen
from tether.auditkey import AuditKey
from tether.codec import compute_hash, decode_line
from tether.errors import LogError
from tether.events import (
    GENESIS_HASH,
    ApprovalGiven,
    ApprovalRequested,
    Event,
    PolicyDecided,
    Redacted,
    RunFinished,
)

if TYPE_CHECKING:
    from tether.stores.base import RunStore

__all__ = ["AuditEntry", "AuditReport", "audit_encoded", "audit_events", "audit_stored"]


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
    """Whether the whole chain verified (and, with a key, every event's MAC)."""
    bad_seq: int | None = None
    """The position of the first bad event."""
    problem: str | None = None
    """What is wrong with it."""
    entries: tuple[AuditEntry, ...] = ()
    """Every decision before the first bad event (all of them when ``ok``)."""
    last_hash: str = GENESIS_HASH
    """The hash of the last good event (anchor it elsewhere to detect a cut tail)."""
    keyed: bool = False
    """Whether MACs were checked with an audit key (else: the chain's consistency only)."""
    key_id: str | None = None
    """The id of the key the MACs were checked with."""
    verified_through: int | None = None
    """With a key: the last seq whose MAC verified, vouching for every event up to it."""
    bad_mac: bool = False
    """The first bad event's chain holds, but its MAC is missing, another key's or wrong."""
    macs: int = 0
    """Events read that carry a MAC (checked only with a key)."""
    ended: bool = False
    """Whether the last good event is ``run_finished``; if not, the run is still going or
    its end was cut off (which leaves a valid chain, and valid MACs, behind)."""


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


class _Audit:
    """An audit under way: a log's lines, given one at a time in stored order.

    Once a line is bad nothing more is checked: the report is of the log up to it. The
    lines are not kept, so a log read a page at a time (``audit_stored``) is never held
    whole; nor are its decisions, unless ``entries``.
    """

    def __init__(self, key: AuditKey | None, *, entries: bool = True) -> None:
        self.key = key
        self.keep = entries
        self.entries: list[AuditEntry] = []
        self.run_id = ""
        self.prev = GENESIS_HASH
        self.through: int | None = None
        self.found = 0
        self.ended = False
        self.checked = 0
        self.failure: tuple[int, str, bool] | None = None
        """The first bad line: its position, what is wrong, whether it is its MAC."""

    def check(self, raw: bytes, kept: str | None) -> bool:
        """Check the next line (``kept``: its MAC kept apart); whether the log still holds."""
        if self.failure is not None:
            return False
        position = self.checked
        try:
            event, mac = decode_line(raw)
        except LogError as exc:
            return self.fail(position, f"it does not decode: {exc}")
        body = raw.strip()
        if orjson.dumps(orjson.loads(body)) != body:
            return self.fail(
                position,
                "it is not written as tether writes it (a key twice, or the line edited by "
                "hand): readers may disagree on its values, which its hash does not cover",
            )
        self.run_id = self.run_id or event.run_id
        problem = _chain_problem(event, self.run_id, position, self.prev)
        if problem is not None:
            return self.fail(position, problem)
        mac = mac if mac is not None else kept
        self.found += mac is not None
        if self.key is not None:
            problem = _mac_problem(self.key, event.hash, mac)
            if problem is not None:
                return self.fail(position, problem, mac=True)
            self.through = position
        self.prev = event.hash
        self.ended = isinstance(event, RunFinished)
        entry = _entry(event) if self.keep else None
        if entry is not None:
            self.entries.append(entry)
        self.checked += 1
        return True

    def fail(self, position: int, problem: str, *, mac: bool = False) -> bool:
        self.failure = (position, problem, mac)
        return False

    def report(self, events: int, expected_events: int | None) -> AuditReport:
        """The report on a log of ``events`` lines, all of them given up to the first bad one."""
        failure = self.failure
        if failure is None and not events:  # no run's log is empty: nothing to vouch for
            failure = (0, "the log holds no events, so there is no chain to verify", False)
        if failure is None and expected_events is not None and expected_events != events:
            failure = (
                events,
                f"the store's index records {expected_events} events but the log has "
                f"{events}: it was cut (or added to) at its end",
                False,
            )
        position, problem, mac = failure if failure is not None else (None, None, False)
        return AuditReport(
            run_id=self.run_id,
            events=events,
            ok=failure is None,
            bad_seq=position,
            problem=problem,
            entries=tuple(self.entries),
            last_hash=self.prev,
            keyed=self.key is not None,
            key_id=None if self.key is None else self.key.key_id,
            verified_through=self.through,
            bad_mac=mac,
            macs=self.found,
            ended=self.ended,
        )


def audit_encoded(
    lines: Iterable[bytes],
    *,
    expected_events: int | None = None,
    key: AuditKey | None = None,
    macs: Mapping[int, str] | None = None,
) -> AuditReport:
    """Verify a log given as its stored JSON lines, one event each, in stored order.

    The lines are taken one at a time (a file's, say, as they are read): those after a bad
    one are counted, not checked.

    Args:
        lines: The encoded events (a line may end with its MAC, as JSONL logs do).
        expected_events: How many events an outside record (the store's index) says the
            run has; fewer lines means the log was cut at its end.
        key: The audit key: every event must carry its MAC under it.
        macs: MACs kept apart from the lines (a store's), by seq.

    Returns:
        The report; an empty log is never ``ok``.
    """
    audit = _Audit(key)
    kept = macs or {}
    count = 0
    for raw in lines:
        audit.check(raw, kept.get(count))
        count += 1
    return audit.report(count, expected_events)


async def audit_stored(
    store: RunStore,
    run_id: str,
    *,
    expected_events: int | None = None,
    key: AuditKey | None = None,
    entries: bool = True,
    page: int = 100,
) -> AuditReport:
    """``audit_encoded`` of a stored run, read ``page`` events (and their MACs) at a time.

    The report is the one ``audit_encoded`` makes of ``store.read_encoded(run_id)`` with
    ``store.read_macs(run_id)``, but however long the run, no more than a page of it is
    held: the pages after a bad event are counted, not checked.

    Args:
        store: The run's store.
        run_id: The run.
        expected_events: What the store's index says the run has (see ``audit_encoded``),
            read before the audit: a log found longer is compared with the index once more
            (a run that went on while it was audited is not called added to).
        key: The audit key: every event must carry its MAC under it.
        entries: List the run's decisions; ``False``: the report has none (a caller that
            shows only the verdict holds nothing that grows with the run).
        page: Events read at a time.

    Raises:
        RunNotFound: no such run.
        UserError: ``page`` is not positive.
    """
    audit = _Audit(key, entries=entries)
    count = 0
    async with aclosing(store.read_encoded_pages(run_id, limit=page)) as pages:
        async for lines in pages:
            if audit.failure is None:
                macs = await store.read_macs_page(run_id, after_seq=count - 1, limit=len(lines))
                for position, raw in enumerate(lines, start=count):
                    if not audit.check(raw, macs.get(position)):
                        break
            count += len(lines)
    if expected_events is not None and count > expected_events:
        # more than the index said when the audit began: a run that went on meanwhile has
        # its index grown with its log (one commit); a log added to behind it has not
        expected_events = max(expected_events, (await store.info(run_id)).events)
        if expected_events > count:  # it went on after the last page was read
            expected_events = count
    return audit.report(count, expected_events)


def _chain_problem(event: Event, run_id: str, position: int, prev: str) -> str | None:
    """What is wrong with an event's place in the chain; ``None`` if nothing."""
    if event.run_id != run_id:
        return f"it belongs to run {event.run_id!r}, not {run_id!r}"
    if event.seq != position:
        return f"it says seq {event.seq}: events were removed, added or reordered before it"
    if event.prev_hash != prev:
        return "its prev_hash is not the previous event's hash"
    if compute_hash(event) != event.hash:
        return "its hash does not match its content: it was edited"
    return None


def _mac_problem(key: AuditKey, event_hash: str, mac: str | None) -> str | None:
    """What is wrong with an event's MAC under ``key``; ``None`` if it verifies."""
    match key.check(event_hash, mac):
        case "ok":
            return None
        case "missing":
            return (
                "it has no MAC: it was written without the audit key (a writer not given "
                "it), or its MAC was removed; nothing vouches for it or what follows"
            )
        case "other_key":
            made_by = (mac or "").partition(":")[0]
            return (
                f"its MAC was made with another key (key id {made_by!r}; this key's is "
                f"{key.key_id!r}): audit with the key the log was written with"
            )
        case "mismatch":
            return (
                "its MAC does not match under the audit key: the event was edited (and the "
                "chain re-sealed) by someone without the key, or its MAC was altered"
            )


def audit_events(
    events: Sequence[Event],
    *,
    key: AuditKey | None = None,
    macs: Mapping[int, str] | None = None,
) -> AuditReport:
    """``audit_encoded`` for events already in memory (MACs, if any, given apart)."""
    from tether.codec import encode_event

    return audit_encoded([encode_event(e) for e in events], key=key, macs=macs)
