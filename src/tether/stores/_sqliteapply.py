"""Applying pending records to the SQLite database: fencing and the chain checked again.

A record's append may have returned already (its pending file was the commit point), so a
record that can no longer be applied is never dropped: it is kept in ``refused.jsonl`` next to
the pending files, and logged.
"""

from __future__ import annotations

import logging
import sqlite3
from pathlib import Path

from tether.events import Event
from tether.stores._appendcheck import new_events
from tether.stores._pendinglog import OtherLog, Record, record_line
from tether.stores._sqlitetables import (
    insert_macs,
    lease_token,
    stored_hash,
    stored_tail,
    update_index,
)
from tether.stores.base import StoreConflict

__all__ = ["Applier"]

_log = logging.getLogger("tether.stores")


class Applier:
    """Applies records to one connection, inside the caller's transaction."""

    def __init__(self, db: sqlite3.Connection, pending_dir: Path | None) -> None:
        self._db = db
        self.pending_dir = pending_dir

    def apply(
        self,
        records: list[Record],
        *,
        mine: bool,
        source: OtherLog | None = None,
    ) -> None:
        """Insert what the database lacks of the records' events; fold them into the index.

        One ``executemany`` for all rows and one index update per run. A record is refused
        whole if its lease was replaced (fencing) or it does not continue the stored log; its
        append may have returned already, so a refused record of this store or of a dead one
        is kept in ``refused.jsonl`` and reported, never dropped.
        """
        db = self._db
        tokens: dict[str, int] = {}
        tails: dict[str, tuple[int, str] | None] = {}
        added: dict[str, list[Event]] = {}
        hashes: dict[tuple[str, int], str] = {}
        rows: list[tuple[str, int, str, str, bytes]] = []
        mac_rows: list[tuple[str, int, str]] = []

        def hash_at(run_id: str, seq: int) -> str | None:
            return hashes.get((run_id, seq)) or stored_hash(db, run_id, seq)

        for record in records:
            run_id = record.run_id
            if record.token is not None and not self._lease_holds(record, tokens, source):
                continue
            last = tails[run_id] if run_id in tails else stored_tail(db, run_id)
            tails[run_id] = last
            events = record.events
            first = events[0]
            if mine and (
                (last is None and first.seq == 0)
                or (last is not None and first.seq == last[0] + 1 and first.prev_hash == last[1])
            ):
                new = events  # checked when it was appended, and it continues the log
            else:
                try:
                    new = new_events(run_id, events, last, lambda s, r=run_id: hash_at(r, s))
                except StoreConflict as exc:
                    self._refuse(record, source, str(exc))
                    continue
            if not new:
                continue
            bodies = record.bodies[len(events) - len(new) :]
            rows.extend(
                (run_id, e.seq, e.kind, e.hash, b) for e, b in zip(new, bodies, strict=True)
            )
            if record.macs is not None:  # made by the writer: the applier makes none
                macs = record.macs[len(events) - len(new) :]
                mac_rows.extend((run_id, e.seq, m) for e, m in zip(new, macs, strict=True))
            added.setdefault(run_id, []).extend(new)
            if not mine:
                hashes.update({(run_id, e.seq): e.hash for e in new})
            tails[run_id] = (new[-1].seq, new[-1].hash)
        if rows:
            db.executemany(
                "INSERT INTO events (run_id, seq, kind, hash, body) VALUES (?, ?, ?, ?, ?)", rows
            )
            for run_id, new in added.items():
                update_index(db, run_id, new)
        if mac_rows:
            insert_macs(db, mac_rows)

    def _lease_holds(
        self,
        record: Record,
        tokens: dict[str, int],
        source: OtherLog | None,
    ) -> bool:
        """Whether a leased record's events may be applied (a release is applied here)."""
        db = self._db
        run_id = record.run_id
        if record.grant is not None:  # a new run's first lease: granted unless a lease exists
            owner, expires = record.grant
            db.execute(
                "INSERT INTO leases (run_id, owner, token, expires_at) VALUES (?, ?, ?, ?) "
                "ON CONFLICT (run_id) DO NOTHING",
                (run_id, owner, record.token, expires),
            )
            tokens[run_id] = lease_token(db, run_id)
            return False
        if run_id not in tokens:
            tokens[run_id] = lease_token(db, run_id)
        if record.release:
            db.execute(
                "UPDATE leases SET owner = NULL, expires_at = 0 WHERE run_id = ? AND token = ?",
                (run_id, record.token),
            )
            return False
        if tokens[run_id] != record.token:
            last = record.events[-1] if record.events else None
            if last is not None and stored_hash(db, run_id, last.seq) == last.hash:
                return False  # applied before the lease moved on (a file kept after a crash)
            self._refuse(record, source, f"its lease {record.token} was replaced")
            return False
        return True

    def _refuse(self, record: Record, source: OtherLog | None, reason: str) -> None:
        if source is not None and not source.dead:
            return  # a live writer applies its own records, and keeps what is refused
        where = "this store" if source is None else str(source.path)
        assert self.pending_dir is not None  # records come from pending files
        kept = self.pending_dir / "refused.jsonl"
        with kept.open("ab") as file:
            file.write(record_line(record.run_id, record.token, record.bodies, macs=record.macs))
        _log.error(
            "tether: an append to run %r (seq %d-%d, from %s) could not be applied: %s. "
            "Its events are kept in %s",
            record.run_id,
            record.events[0].seq,
            record.events[-1].seq,
            where,
            reason,
            kept,
        )
