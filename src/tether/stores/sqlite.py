"""``SqliteStore``: runs in one SQLite file (WAL), the embedded default.

Each append is one transaction: the lease check, the new events and the runs index row
commit together or not at all. With ``synchronous=NORMAL`` in WAL mode a committed append
survives the process being killed at any instant (``durability="power"`` also survives a
power cut, at the cost of an fsync per commit). Several processes may share the file;
SQLite's locking serializes their writes.
"""

from __future__ import annotations

import os
import sqlite3
import time
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal, cast

import orjson

from tether._internal.runindex import index_row
from tether.codec import decode_event, encode_event, verify_chain
from tether.events import Event
from tether.stores.base import (
    Lease,
    LeaseHeld,
    RunIndexStatus,
    RunInfo,
    RunNotFound,
    RunQuery,
    RunStore,
    StaleLease,
    StoreConflict,
)
from tether.stores.memory import check_link
from tether.usage import Usage

__all__ = ["DEFAULT_PATH", "SqliteStore", "default_store_path"]

DEFAULT_PATH = Path(".tether") / "tether.db"
"""Where the store lives unless configured (``$TETHER_DB`` overrides)."""

_SCHEMA = """
CREATE TABLE IF NOT EXISTS events (
    run_id TEXT NOT NULL,
    seq INTEGER NOT NULL,
    kind TEXT NOT NULL,
    hash TEXT NOT NULL,
    body BLOB NOT NULL,
    PRIMARY KEY (run_id, seq)
) WITHOUT ROWID;
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
"""


def default_store_path() -> Path:
    """``$TETHER_DB``, else ``./.tether/tether.db``."""
    return Path(os.environ.get("TETHER_DB") or DEFAULT_PATH)


class SqliteStore(RunStore):
    """A run store in one SQLite file."""

    def __init__(
        self,
        path: str | Path | None = None,
        *,
        durability: Literal["process", "power"] = "process",
        lease_ttl: float = 30.0,
    ) -> None:
        self.path = Path(path) if path is not None else default_store_path()
        if str(self.path) != ":memory:":
            self.path.parent.mkdir(parents=True, exist_ok=True)
        self._db = sqlite3.connect(
            self.path, isolation_level=None, timeout=30.0, check_same_thread=False
        )
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute(f"PRAGMA synchronous={'FULL' if durability == 'power' else 'NORMAL'}")
        self._db.executescript(_SCHEMA)
        self._lease_ttl = lease_ttl

    # -- writing -------------------------------------------------------------------------

    async def append(
        self, run_id: str, events: Sequence[Event], *, lease: Lease | None = None
    ) -> None:
        """Append in one transaction (lease check, events, index row)."""
        if not events:
            return
        db = self._db
        db.execute("BEGIN IMMEDIATE")
        try:
            if lease is not None:
                row = db.execute("SELECT token FROM leases WHERE run_id = ?", (run_id,)).fetchone()
                current = 0 if row is None else int(row[0])
                if current != lease.token:
                    raise StaleLease(run_id, lease.token, current)
                db.execute(
                    "UPDATE leases SET expires_at = MAX(expires_at, ?) WHERE run_id = ?",
                    (time.time() + self._lease_ttl, run_id),
                )
            last = db.execute(
                "SELECT seq, hash FROM events WHERE run_id = ? ORDER BY seq DESC LIMIT 1", (run_id,)
            ).fetchone()
            expected = 0 if last is None else int(last[0]) + 1
            previous_hash: str | None = None if last is None else str(last[1])
            new: list[Event] = []
            for event in events:
                if event.run_id != run_id:
                    raise StoreConflict(
                        f"event of run {event.run_id!r} appended to run {run_id!r}", run_id=run_id
                    )
                if event.seq < expected and not new:
                    stored = db.execute(
                        "SELECT hash FROM events WHERE run_id = ? AND seq = ?", (run_id, event.seq)
                    ).fetchone()
                    if stored is None or stored[0] != event.hash:
                        raise StoreConflict(
                            f"run {run_id!r} already has a different event at seq {event.seq}",
                            run_id=run_id,
                        )
                    continue
                if event.seq != expected:
                    raise StoreConflict(
                        f"run {run_id!r}: expected seq {expected}, got {event.seq} (a gap)",
                        run_id=run_id,
                    )
                check_link(run_id, event, previous_hash)
                new.append(event)
                previous_hash = event.hash
                expected += 1
            if new:
                db.executemany(
                    "INSERT INTO events (run_id, seq, kind, hash, body) VALUES (?, ?, ?, ?, ?)",
                    [(run_id, e.seq, e.kind, e.hash, encode_event(e)) for e in new],
                )
                self._update_index(run_id, new)
            db.execute("COMMIT")
        except BaseException:
            db.execute("ROLLBACK")
            raise

    def _update_index(self, run_id: str, new: list[Event]) -> None:
        row = index_row(self._row(run_id), new)
        if row is None:
            return
        self._db.execute(
            "INSERT OR REPLACE INTO runs VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (
                row.run_id,
                row.agent,
                row.goal,
                row.status,
                _utc_text(row.created_at),
                _utc_text(row.updated_at),
                row.usage.input_tokens,
                row.usage.output_tokens,
                row.usage.requests,
                row.usage.cost,
                row.steps,
                row.events,
                row.parent_run_id,
                orjson.dumps(row.tags).decode(),
            ),
        )

    # -- reading -------------------------------------------------------------------------

    async def read(self, run_id: str, *, after_seq: int = -1) -> list[Event]:
        """The run's events after ``after_seq``, decoded and chain-checked."""
        rows = self._db.execute(
            "SELECT seq, body FROM events WHERE run_id = ? AND seq > ? ORDER BY seq",
            (run_id, after_seq),
        ).fetchall()
        if not rows and (after_seq < 0 or not self._exists(run_id)):
            raise RunNotFound(run_id)
        events = [decode_event(body) for _, body in rows]
        if after_seq < 0:
            verify_chain(events, run_id=run_id)
        return events

    def _exists(self, run_id: str) -> bool:
        found = self._db.execute("SELECT 1 FROM events WHERE run_id = ? LIMIT 1", (run_id,))
        return found.fetchone() is not None

    def _row(self, run_id: str) -> RunInfo | None:
        found = self._db.execute("SELECT * FROM runs WHERE run_id = ?", (run_id,)).fetchone()
        return None if found is None else _info(found)

    async def runs(self, query: RunQuery = RunQuery()) -> list[RunInfo]:
        """Index rows, newest first."""
        where: list[str] = []
        params: list[Any] = []
        if query.status is not None:
            where.append("status = ?")
            params.append(query.status)
        if query.agent is not None:
            where.append("agent = ?")
            params.append(query.agent)
        if query.since is not None:
            where.append("created_at >= ?")
            params.append(_utc_text(query.since))
        if query.until is not None:
            where.append("created_at < ?")
            params.append(_utc_text(query.until))
        sql = "SELECT * FROM runs"
        if where:
            sql += " WHERE " + " AND ".join(where)
        sql += " ORDER BY created_at DESC, run_id DESC LIMIT ?"
        params.append(query.limit)
        return [_info(r) for r in self._db.execute(sql, params).fetchall()]

    async def info(self, run_id: str) -> RunInfo:
        """One index row."""
        row = self._row(run_id)
        if row is None:
            raise RunNotFound(run_id)
        return row

    # -- leases --------------------------------------------------------------------------

    async def acquire(self, run_id: str, owner: str, *, ttl: float = 30.0) -> Lease:
        """Grant a lease with the next fencing token, atomically across processes."""
        db = self._db
        now = time.time()
        db.execute("BEGIN IMMEDIATE")
        try:
            held = db.execute(
                "SELECT owner, token, expires_at FROM leases WHERE run_id = ?", (run_id,)
            ).fetchone()
            token = 1
            if held is not None:
                holder, current, expires = cast(tuple[str | None, int, float], tuple(held))
                if holder is not None and holder != owner and expires > now and _alive(holder):
                    raise LeaseHeld(run_id, holder, expires)
                token = current + 1
            db.execute(
                "INSERT OR REPLACE INTO leases (run_id, owner, token, expires_at) VALUES (?, ?, ?, ?)",
                (run_id, owner, token, now + ttl),
            )
            db.execute("COMMIT")
        except BaseException:
            db.execute("ROLLBACK")
            raise
        return Lease(run_id=run_id, owner=owner, token=token, expires_at=now + ttl)

    async def release(self, lease: Lease) -> None:
        """Drop the lease if it is still current (the token is kept: it only grows)."""
        self._db.execute(
            "UPDATE leases SET owner = NULL, expires_at = 0 WHERE run_id = ? AND token = ?",
            (lease.run_id, lease.token),
        )

    async def delete(self, run_ids: Sequence[str]) -> int:
        """Delete runs, their events and leases."""
        db = self._db
        count = 0
        db.execute("BEGIN IMMEDIATE")
        try:
            for run_id in run_ids:
                removed = db.execute("DELETE FROM events WHERE run_id = ?", (run_id,)).rowcount
                indexed = db.execute("DELETE FROM runs WHERE run_id = ?", (run_id,)).rowcount
                count += 1 if removed or indexed else 0
                # The lease row stays, unowned: its fencing token must only ever grow.
                db.execute(
                    "UPDATE leases SET owner = NULL, expires_at = 0 WHERE run_id = ?", (run_id,)
                )
            db.execute("COMMIT")
        except BaseException:
            db.execute("ROLLBACK")
            raise
        return count

    async def close(self) -> None:
        """Close the connection."""
        self._db.close()


def _utc_text(moment: datetime) -> str:
    """A time as sortable UTC text (naive times are taken as UTC)."""
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return moment.astimezone(UTC).isoformat(timespec="microseconds")


def _alive(owner: str) -> bool:
    """Whether a lease holder may still be running.

    A process of this host that has gone away (``host:pid:…``) holds nothing, so its run can
    be resumed at once after a crash instead of waiting for the lease to lapse.
    """
    import socket

    host, _, rest = owner.partition(":")
    pid_text = rest.partition(":")[0]
    if host != socket.gethostname() or not pid_text.isdigit():
        return True
    try:
        os.kill(int(pid_text), 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _info(row: Sequence[Any]) -> RunInfo:
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
