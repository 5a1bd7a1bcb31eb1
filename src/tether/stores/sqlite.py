"""``SqliteStore``: runs in one SQLite file (WAL), the embedded default.

Each append is one transaction: the lease check, the new events and the runs index row
commit together or not at all. With ``synchronous=NORMAL`` in WAL mode a committed append
survives the process being killed at any instant (``durability="power"`` also survives a
power cut, at the cost of an fsync per commit). Several processes may share the file;
SQLite's locking serializes their writes.
"""

from __future__ import annotations

import asyncio
import os
import sqlite3
import time
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal, cast

import orjson

from tether._internal.appendcheck import new_events
from tether._internal.runindex import index_row
from tether.codec import decode_event, encode_event, verify_chain
from tether.events import Event, ModelResponded, RunFinished, RunStarted
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
        self._queue: list[tuple[str, list[Event], Lease | None, asyncio.Future[None]]] = []
        self._flush_scheduled = False
        self._tails: dict[str, tuple[int, int, str]] = {}  # run -> (lease token, seq, hash)
        self._batch_tails: dict[str, tuple[int, str]] = {}
        self._batch_hashes: dict[tuple[str, int], str] = {}
        self._renewed: dict[tuple[str, int], float] = {}

    # -- writing -------------------------------------------------------------------------

    async def append(
        self, run_id: str, events: Sequence[Event], *, lease: Lease | None = None
    ) -> None:
        """Append atomically (lease check, events, index row); returns once committed.

        Appends made in the same event-loop iteration (many concurrent runs) share one
        transaction, each in its own savepoint: one refused append fails alone, and every
        caller returns only after the COMMIT that made its events durable.
        """
        if not events:
            return
        loop = asyncio.get_running_loop()
        done: asyncio.Future[None] = loop.create_future()
        self._queue.append((run_id, list(events), lease, done))
        if not self._flush_scheduled:
            self._flush_scheduled = True
            loop.call_soon(self._flush)
        await done

    def _flush(self) -> None:  # noqa: C901 - one transaction, read top to bottom
        """Commit every queued append in one transaction (group commit).

        Each append is checked first, reading only; those that pass are then written
        together. A refused append has written nothing, so no savepoints are needed.
        """
        self._flush_scheduled = False
        batch, self._queue = self._queue, []
        db = self._db
        results: list[tuple[asyncio.Future[None], BaseException | None]] = []
        rows: list[tuple[str, int, str, str, bytes]] = []
        accepted: list[tuple[str, list[Event], Lease | None]] = []
        self._batch_tails: dict[str, tuple[int, str]] = {}  # what this flush has accepted
        self._batch_hashes: dict[tuple[str, int], str] = {}
        try:
            db.execute("BEGIN IMMEDIATE")
            for run_id, events, lease, done in batch:
                try:
                    new = self._check(run_id, events, lease)
                except Exception as exc:
                    results.append((done, exc))
                    continue
                results.append((done, None))
                if new:
                    rows.extend((run_id, e.seq, e.kind, e.hash, encode_event(e)) for e in new)
                    accepted.append((run_id, new, lease))
                    self._batch_tails[run_id] = (new[-1].seq, new[-1].hash)
                    self._batch_hashes.update({(run_id, e.seq): e.hash for e in new})
            if rows:
                try:
                    db.executemany(
                        "INSERT INTO events (run_id, seq, kind, hash, body) VALUES (?, ?, ?, ?, ?)",
                        rows,
                    )
                except sqlite3.IntegrityError:
                    raise StoreConflict(
                        "a run was appended to by another writer at the same time; read it again"
                    ) from None
                for run_id, new, _ in accepted:
                    self._update_index(run_id, new)
            db.execute("COMMIT")
        except Exception as exc:
            if db.in_transaction:
                db.execute("ROLLBACK")
            self._tails.clear()  # what was cached may not have been committed
            results = [(done, exc) for _, _, _, done in batch]
        else:
            for run_id, new, lease in accepted:
                if lease is not None:
                    self._tails[run_id] = (lease.token, new[-1].seq, new[-1].hash)
        for done, error in results:
            if done.cancelled():
                continue
            if error is None:
                done.set_result(None)
            else:
                done.set_exception(error)

    def _check(self, run_id: str, events: list[Event], lease: Lease | None) -> list[Event]:
        """The events of one append that are new; raises if the append must be refused."""
        db = self._db
        tail: tuple[int, int, str] | None = None
        if lease is not None:
            row = db.execute("SELECT token FROM leases WHERE run_id = ?", (run_id,)).fetchone()
            current = 0 if row is None else int(row[0])
            if current != lease.token:
                raise StaleLease(run_id, lease.token, current)
            now = time.time()
            if now >= self._renewed.get((run_id, lease.token), 0.0) + self._lease_ttl / 3:
                db.execute(
                    "UPDATE leases SET expires_at = MAX(expires_at, ?) WHERE run_id = ?",
                    (now + self._lease_ttl, run_id),
                )
                self._renewed[(run_id, lease.token)] = now
            tail = self._tails.get(run_id)
            if tail is not None and tail[0] != lease.token:
                tail = None
        last: tuple[int, str] | None
        if run_id in self._batch_tails:  # an earlier append of this same flush
            last = self._batch_tails[run_id]
        elif tail is not None:
            # This connection wrote the run's last events under this very lease. Should a
            # lease-less writer have appended since, the seq collides: the insert fails on
            # the unique index and the append is refused, never silently forked.
            last = (tail[1], tail[2])
        else:
            last = db.execute(
                "SELECT seq, hash FROM events WHERE run_id = ? ORDER BY seq DESC LIMIT 1", (run_id,)
            ).fetchone()
        stored = None if last is None else (int(last[0]), str(last[1]))
        return new_events(run_id, events, stored, lambda seq: self._stored_hash(run_id, seq))

    def _stored_hash(self, run_id: str, seq: int) -> str | None:
        pending = self._batch_hashes.get((run_id, seq))
        if pending is not None:
            return pending
        found = self._db.execute(
            "SELECT hash FROM events WHERE run_id = ? AND seq = ?", (run_id, seq)
        ).fetchone()
        return None if found is None else str(found[0])

    def _update_index(self, run_id: str, new: list[Event]) -> None:
        """Fold the new events into the run's index row, in place (no read-modify-write)."""
        started = next((e for e in new if isinstance(e, RunStarted)), None)
        if started is not None:
            row = index_row(None, [started])
            assert row is not None
            self._db.execute(
                "INSERT OR REPLACE INTO runs VALUES (?, ?, ?, ?, ?, ?, 0, 0, 0, 0.0, 0, 0, ?, ?)",
                (
                    row.run_id,
                    row.agent,
                    row.goal,
                    row.status,
                    _utc_text(row.created_at),
                    _utc_text(row.updated_at),
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
        self._db.execute(
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
                _utc_text(new[-1].at),
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
        self._tails.pop(lease.run_id, None)
        self._renewed.pop((lease.run_id, lease.token), None)
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
                self._tails.pop(run_id, None)
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
