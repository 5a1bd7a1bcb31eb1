"""Editing a run in a SQLite store's file, as someone with the file but not the audit key can.

Each way leaves a different trace for an audit (or a reader of the log) to find;
``audited_whole`` is the audit as it was made of a run read whole, to compare with.
"""

from __future__ import annotations

import contextlib
import dataclasses
import sqlite3
from datetime import timedelta
from pathlib import Path
from typing import Literal, TypeAlias

from tests.stores.helpers import resealed
from tether.auditkey import AuditKey
from tether.codec import decode_event, encode_event
from tether.policy.audit import AuditReport, audit_encoded
from tether.stores import RunStore

__all__ = ["CHAIN_TAMPERINGS", "MAC_TAMPERINGS", "Tampering", "audited_whole", "tamper"]

Tampering: TypeAlias = Literal[
    "edited",
    "resealed",
    "undecodable",
    "spaced",
    "removed",
    "cut",
    "below_zero",
    "mac_forged",
    "mac_removed",
]
"""How a run is edited (``tamper``)."""

CHAIN_TAMPERINGS: tuple[Tampering, ...] = (
    "edited",
    "resealed",
    "undecodable",
    "spaced",
    "removed",
    "cut",
    "below_zero",
)
"""The edits of events (an audit without a key sees all but a re-sealed one's own event)."""
MAC_TAMPERINGS: tuple[Tampering, ...] = ("mac_forged", "mac_removed")
"""The edits of MACs (only an audit with the key sees them)."""


def tamper(db: Path, run_id: str, how: Tampering, seq: int) -> None:
    """Edit the event (or the MAC) at ``seq`` of a stored run.

    ``edited``: its time changed, its hash not; ``resealed``: its time changed and its hash
    made valid again (the next event's link breaks); ``undecodable``: not JSON any more;
    ``spaced``: the same values written with a space tether never writes; ``removed``:
    gone (a gap); ``cut``: the run's last event gone (``seq`` unused: the index still counts
    it); ``below_zero``: a copy of it inserted at seq -1 (below where a page read from the
    start would begin, if it began at 0); ``mac_forged``: its MAC changed (still naming the key); ``mac_removed``: its MAC gone.
    """
    with contextlib.closing(sqlite3.connect(db)) as conn, conn:
        where = "WHERE run_id = ? AND seq = ?"
        (body,) = conn.execute(f"SELECT body FROM events {where}", (run_id, seq)).fetchone()
        event = decode_event(body)
        new: bytes | None = None
        match how:
            case "edited" | "resealed":
                edited = dataclasses.replace(event, at=event.at + timedelta(seconds=1))
                new = encode_event(resealed(edited) if how == "resealed" else edited)
            case "undecodable":
                new = body[: len(body) // 2]
            case "spaced":
                new = body.replace(b",", b", ", 1)
            case "removed":
                conn.execute(f"DELETE FROM events {where}", (run_id, seq))
            case "cut":
                conn.execute(
                    "DELETE FROM events WHERE run_id = ? AND seq = "
                    "(SELECT MAX(seq) FROM events WHERE run_id = ?)",
                    (run_id, run_id),
                )
            case "below_zero":
                conn.execute(
                    "INSERT INTO events (run_id, seq, kind, hash, body) VALUES (?, -1, ?, ?, ?)",
                    (run_id, event.kind, event.hash, body),
                )
            case "mac_forged":
                (mac,) = conn.execute(f"SELECT mac FROM macs {where}", (run_id, seq)).fetchone()
                forged = mac[:-1] + ("0" if mac[-1] != "0" else "1")  # the key's id, a wrong MAC
                conn.execute(f"UPDATE macs SET mac = ? {where}", (forged, run_id, seq))
            case "mac_removed":
                conn.execute(f"DELETE FROM macs {where}", (run_id, seq))
        if new is not None:
            conn.execute(f"UPDATE events SET body = ? {where}", (new, run_id, seq))


async def audited_whole(store: RunStore, run_id: str, key: AuditKey | None) -> AuditReport:
    """The audit of a stored run as it was made before audits read a page at a time."""
    lines = await store.read_encoded(run_id)
    macs = await store.read_macs(run_id)
    expected = (await store.info(run_id)).events
    return audit_encoded(lines, expected_events=expected, key=key, macs=macs)
