"""The SQLite store's tables, and the queries on them that more than one module makes."""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any, cast

import orjson

from tether.errors import StoreCorrupt
from tether.events import Event, ModelResponded, RunFinished, RunStarted
from tether.stores._runindex import index_row
from tether.stores.base import RunIndexStatus, RunInfo
from tether.usage import Usage

__all__ = [
    "SCHEMA",
    "insert_macs",
    "lease_token",
    "run_info",
    "stored_hash",
    "stored_macs",
    "stored_tail",
    "update_index",
    "utc_text",
]

SCHEMA = """
CREATE TABLE IF NOT EXISTS events (
    run_id TEXT NOT NULL,
    seq INTEGER NOT NULL,
    kind TEXT NOT NULL,
    hash TEXT NOT NULL,
    body BLOB NOT NULL
);
CREATE UNIQUE INDEX IF NOT EXISTS events_by_run ON events (run_id, seq);
CREATE TABLE IF NOT EXISTS runs (
    run_id TEXT PRIMARY KEY,
    agent TEXT NOT NULL,
    goal TEXT NOT NULL,
    status TEXT NOT NULL,
    created_at TEXT NOT NULL,
    updated_at TEXT NOT NULL,
    input_tokens INTEGER NOT NULL,
    output_tokens INTEGER NOT NULL,
    requests INTEGER NOT NULL,
    cost REAL,
    steps INTEGER NOT NULL,
    events INTEGER NOT NULL,
    parent_run_id TEXT,
    tags TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS runs_by_created ON runs (created_at);
CREATE INDEX IF NOT EXISTS runs_by_agent ON runs (agent, created_at);
CREATE INDEX IF NOT EXISTS runs_by_status ON runs (status, created_at);
CREATE TABLE IF NOT EXISTS leases (
    run_id TEXT PRIMARY KEY,
    owner TEXT,
    token INTEGER NOT NULL,
    expires_at REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS macs (
    run_id TEXT NOT NULL,
    seq INTEGER NOT NULL,
    mac TEXT NOT NULL,
    PRIMARY KEY (run_id, seq)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS kv (
    namespace TEXT NOT NULL,
    key TEXT NOT NULL,
    value TEXT NOT NULL,
    updated_at TEXT NOT NULL,
    PRIMARY KEY (namespace, key)
) WITHOUT ROWID;
"""


def update_index(db: sqlite3.Connection, run_id: str, new: list[Event]) -> None:
    """Fold the new events into the run's index row, in place (no read-modify-write)."""
    started = next((e for e in new if isinstance(e, RunStarted)), None)
    if started is not None:
        row = index_row(None, [started])
        assert row is not None
        db.execute(
            "INSERT OR REPLACE INTO runs VALUES (?, ?, ?, ?, ?, ?, 0, 0, 0, 0.0, 0, 0, ?, ?)",
            (
                row.run_id,
                row.agent,
                row.goal,
                row.status,
                utc_text(row.created_at),
                utc_text(row.updated_at),
                row.parent_run_id,
                orjson.dumps(row.tags).decode(),
            ),
        )
    tokens_in = tokens_out = requests = 0
    cost: float | None = 0.0
    steps = 0
    status: str | None = None
    for event in new:
        if isinstance(event, ModelResponded):
            tokens_in += event.usage.input_tokens
            tokens_out += event.usage.output_tokens
            requests += 1
            cost = None if cost is None or event.usage.cost is None else cost + event.usage.cost
            if not event.final:
                steps = max(steps, event.step)
        if isinstance(event, RunFinished):
            status = event.status
        elif status in ("waiting_for_user", "waiting_for_approval"):
            status = "running"
    db.execute(
        """UPDATE runs SET
            updated_at = ?,
            events = events + ?,
            input_tokens = input_tokens + ?,
            output_tokens = output_tokens + ?,
            requests = requests + ?,
            cost = CASE WHEN cost IS NULL OR ? IS NULL THEN NULL ELSE cost + ? END,
            steps = MAX(steps, ?),
            status = COALESCE(?, CASE WHEN status IN ('waiting_for_user', 'waiting_for_approval')
                                      THEN 'running' ELSE status END)
        WHERE run_id = ?""",
        (
            utc_text(new[-1].at),
            len(new),
            tokens_in,
            tokens_out,
            requests,
            cost,
            cost,
            steps,
            status,
            run_id,
        ),
    )


def insert_macs(db: sqlite3.Connection, rows: Sequence[tuple[str, int, str]]) -> None:
    """Store ``(run_id, seq, mac)`` rows beside the events they vouch for.

    The ``macs`` table (``tether.auditkey``) is apart from ``events`` so that a store written
    without a key, or by a version that knew no MACs, reads as it always did.
    """
    db.executemany("INSERT OR REPLACE INTO macs (run_id, seq, mac) VALUES (?, ?, ?)", rows)


def stored_macs(
    db: sqlite3.Connection, run_id: str, *, seqs: tuple[int, int] | None = None
) -> dict[int, str]:
    """A run's MACs by seq (``seqs``: only those from the first up to, not with, the second).

    None in a store that has no ``macs`` table (read-only, older).
    """
    sql = "SELECT seq, mac FROM macs WHERE run_id = ?"
    params: tuple[str | int, ...] = (run_id,)
    if seqs is not None:
        sql, params = sql + " AND seq >= ? AND seq < ?", (run_id, *seqs)
    try:
        rows = db.execute(sql, params).fetchall()
    except sqlite3.OperationalError as exc:
        if "no such table" in str(exc):
            return {}
        raise
    return {int(seq): str(mac) for seq, mac in rows}


def lease_token(db: sqlite3.Connection, run_id: str) -> int:
    row = db.execute("SELECT token FROM leases WHERE run_id = ?", (run_id,)).fetchone()
    return 0 if row is None else int(row[0])


def stored_tail(db: sqlite3.Connection, run_id: str) -> tuple[int, str] | None:
    row = db.execute(
        "SELECT seq, hash FROM events WHERE run_id = ? ORDER BY seq DESC LIMIT 1", (run_id,)
    ).fetchone()
    return None if row is None else (int(row[0]), str(row[1]))


def stored_hash(db: sqlite3.Connection, run_id: str, seq: int) -> str | None:
    found = db.execute(
        "SELECT hash FROM events WHERE run_id = ? AND seq = ?", (run_id, seq)
    ).fetchone()
    return None if found is None else str(found[0])


def utc_text(moment: datetime) -> str:
    """A time as sortable UTC text (naive times are taken as UTC)."""
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    try:
        moment = moment.astimezone(UTC)
    except OverflowError:  # a time in year 1 or 9999 that UTC puts outside them: the edge
        moment = (datetime.min if moment.year == 1 else datetime.max).replace(tzinfo=UTC)
    return moment.isoformat(timespec="microseconds")


def run_info(row: Sequence[Any]) -> RunInfo:
    (
        run_id,
        agent,
        goal,
        status,
        created,
        updated,
        tin,
        tout,
        requests,
        cost,
        steps,
        events,
        parent,
        tags,
    ) = row
    try:
        return RunInfo(
            run_id=run_id,
            agent=agent,
            goal=goal,
            status=cast(RunIndexStatus, status),
            created_at=datetime.fromisoformat(created),
            updated_at=datetime.fromisoformat(updated),
            usage=Usage(input_tokens=tin, output_tokens=tout, requests=requests, cost=cost),
            steps=steps,
            events=events,
            parent_run_id=parent,
            tags=tuple(orjson.loads(tags)),
        )
    except (ValueError, TypeError) as exc:  # orjson's JSONDecodeError is a ValueError
        raise StoreCorrupt(
            f"the store's index row of run {str(run_id)[:80]!r} is damaged ({exc}); the run's "
            "events are kept apart from it. Restore the file from a backup, or export the "
            "run's events with sqlite3 (SELECT body FROM events WHERE run_id = ...)"
        ) from None
