"""``SqliteStore``: runs in one SQLite file (WAL), the embedded default.

An append under a lease (what a running agent does) commits with one ``write`` to the
store's own pending file (``<db>-pending/``): that file is the commit point, so each step of
a run costs one system call on the event loop. Everything that can wait (SQLite's locks, an
``fsync``) happens on the store's own thread (``_sqliteworker``), never on the event loop:
another process holding the file locked delays the database, not the runs.

The thread applies pending records to the database in batches (every ``apply_interval``
seconds, and before any read, lease or delete), and a pending file is deleted only once
every record in it is in the database. With ``durability="process"`` (the default) a
returned append survives the process being killed at any instant; ``durability="power"``
adds an ``fdatasync`` per commit (shared by the appends waiting for it) and a synchronous
database, and survives a power cut.

Leases are renewed by the thread every third of their TTL for as long as the store holds
them (a heartbeat): a run whose process is alive keeps its lease through model calls and
long tools. Any store on the file applies every pending file before it reads, leases or
deletes, so a crashed writer's appends are never lost and a live one's are seen. Other
appends (imports, tests) are one transaction each. Several processes may share the file.

The store is three collaborators: the file and its pending records (``_sqlitedb``), the
leases it holds (``_sqliteleases``), and the ``RunStore`` operations here.
"""

from __future__ import annotations

import os
import sqlite3
import time
from collections.abc import AsyncGenerator, Sequence
from pathlib import Path
from typing import Any, Literal

from tether._internal.sealed import body_of
from tether.auditkey import AuditKeySetting, resolve_audit_key
from tether.codec import decode_event, encode_event, kept, verify_chain
from tether.errors import ConfigError
from tether.events import Event
from tether.jsontypes import JsonValue
from tether.stores import _sqlitekv
from tether.stores._appendcheck import new_events
from tether.stores._pages import check_limit
from tether.stores._pendinglog import Record, record_line
from tether.stores._sqlitedb import Database
from tether.stores._sqliteleases import Held, Leases
from tether.stores._sqliteopen import prepare_directory
from tether.stores._sqlitetables import (
    insert_macs,
    lease_token,
    run_info,
    stored_hash,
    stored_macs,
    stored_tail,
    update_index,
    utc_text,
)
from tether.stores.base import (
    Lease,
    RunInfo,
    RunNotFound,
    RunQuery,
    RunStore,
    StaleLease,
    StoreConflict,
)
from tether.stores.kv import KeyValueStore, KvEntry

__all__ = ["DEFAULT_PATH", "SqliteStore", "default_store_path"]

DEFAULT_PATH = Path(".tether") / "tether.db"
"""Where the store lives unless configured (``$TETHER_DB`` overrides)."""


def default_store_path() -> Path:
    """``$TETHER_DB``, else ``./.tether/tether.db``."""
    return Path(os.environ.get("TETHER_DB") or DEFAULT_PATH)


class SqliteStore(RunStore, KeyValueStore):
    """A run store in one SQLite file, with a pending-records file as its commit point.

    Its key-value entries live in the file's ``kv`` table, each write its own transaction.

    Args:
        path: The database file (default: ``$TETHER_DB``, else ``./.tether/tether.db``);
            ``":memory:"`` keeps it in memory (no pending file).
        durability: ``"process"``: an append survives the process being killed;
            ``"power"``: also a power cut (an ``fdatasync`` per commit).
        lease_ttl: Seconds a lease lasts without renewal; the store renews the leases it
            holds every third of that.
        apply_interval: Seconds between batches of pending records reaching the database.
        busy_timeout: Seconds to wait for another process's lock on the file before an
            operation fails with ``StoreBusy``.
        audit_key: Store a MAC under this key beside every event this store appends, in
            the ``macs`` table (``tether.auditkey``). ``"env"`` (the default): the key of
            ``$TETHER_AUDIT_KEY_FILE`` or ``$TETHER_AUDIT_KEY``, if one is set; ``None``: none.

    Raises:
        AuditKeyError: ``audit_key`` is ``"env"`` and the environment's key cannot be used.
    """

    def __init__(
        self,
        path: str | Path | None = None,
        *,
        durability: Literal["process", "power"] = "process",
        lease_ttl: float = 30.0,
        apply_interval: float = 0.05,
        busy_timeout: float = 30.0,
        audit_key: AuditKeySetting = "env",
    ) -> None:
        if not busy_timeout >= 0:  # NaN included
            raise ConfigError(f"busy_timeout must be seconds >= 0, not {busy_timeout!r}")
        self._audit_key = resolve_audit_key(audit_key)
        self.path = Path(path) if path is not None else default_store_path()
        if str(self.path) != ":memory:":
            prepare_directory(self.path)
        self._db = Database(
            self.path,
            power=durability == "power",
            apply_interval=apply_interval,
            busy_timeout=busy_timeout,
        )
        self._leases = Leases(self._db, ttl=lease_ttl)
        self.pending_dir = self._db.pending_dir
        """Where appends are committed before they reach the database (``None``: in memory)."""

    @property
    def read_only(self) -> bool:
        """Whether the file could only be opened for reading (known once it is opened)."""
        return self._db.read_only

    # -- writing -------------------------------------------------------------------------

    async def append(
        self, run_id: str, events: Sequence[Event], *, lease: Lease | None = None
    ) -> None:
        """Append atomically; returns once the events are durable.

        An append under a lease that this store granted is committed by one write to the
        store's pending file, at once, and reaches the database within ``apply_interval``
        seconds, or at once when any store on the file reads, leases or closes. Any other
        append is one database transaction on the store's thread. Either way the lease, the
        seq and the hash chain are checked before anything is written.

        Raises:
            StaleLease: the lease was replaced. StoreConflict: the events do not continue the
            log. StoreWriteError, StoreBusy, StoreError: nothing of this append was stored.
        """
        if not events:
            return
        db = self._db
        db.check_open()
        held = self._leases.mine(run_id, lease)
        if held is not None and lease is not None and db.log is not None:
            if db.broken is not None:
                raise db.broken
            if held.lost:
                raise StaleLease(run_id, lease.token, held.lost)
            if time.time() >= held.safe_until:
                await self._leases.confirm(run_id, held)
            tail = held.tail
            first = events[0]
            if (tail is None and first.seq == 0) or (tail is not None and first.seq == tail[0] + 1):
                await self._append_to_log(run_id, list(events), lease, held)
                return
        # not this store's lease, or it does not simply continue the log: a transaction
        items = list(events)
        await db.call(lambda conn: self._append_in_db(conn, run_id, items, lease))

    async def _append_to_log(
        self, run_id: str, events: list[Event], lease: Lease, held: Held
    ) -> None:
        new = new_events(run_id, events, held.tail, _nothing_stored)
        bodies = [body_of(e) or kept(encode_event(e)) for e in new]
        key = self._audit_key
        macs = None if key is None else [key.mac(e.hash) for e in new]
        record = Record(run_id, lease.token, new, bodies, macs=macs)
        line = record_line(run_id, lease.token, bodies, macs=macs)
        number = self._db.commit(record, line, f"appending to run {run_id!r}")
        held.tail = (new[-1].seq, new[-1].hash)
        if self._db.power:
            await self._db.synced(number)

    async def append_copied(
        self, run_id: str, events: Sequence[Event], macs: Sequence[str | None]
    ) -> None:
        """Append events written elsewhere (an import), keeping the MACs they came with.

        One transaction, checked as any append is; this store makes no MACs for them.
        """
        if not events:
            return
        items = list(events)
        given = {e.seq: m for e, m in zip(items, macs, strict=True) if m is not None}
        await self._db.call(lambda conn: self._append_in_db(conn, run_id, items, None, given))

    def _append_in_db(
        self,
        conn: sqlite3.Connection,
        run_id: str,
        events: list[Event],
        lease: Lease | None,
        copied: dict[int, str] | None = None,
    ) -> None:
        """One transaction: bring the database up to date, check, insert (store's thread).

        ``copied``: the events were written elsewhere; store these MACs, make none.
        """
        self._db.check_writable()
        with self._db.transaction(conn):
            if lease is not None:
                current = lease_token(conn, run_id)
                if current != lease.token:
                    raise StaleLease(run_id, lease.token, current)
                conn.execute(
                    "UPDATE leases SET expires_at = MAX(expires_at, ?) WHERE run_id = ?",
                    (time.time() + self._leases.ttl, run_id),
                )
            last = stored_tail(conn, run_id)
            new = new_events(run_id, events, last, lambda s: stored_hash(conn, run_id, s))
            if not new:
                return
            try:
                conn.executemany(
                    "INSERT INTO events (run_id, seq, kind, hash, body) VALUES (?, ?, ?, ?, ?)",
                    [(run_id, e.seq, e.kind, e.hash, encode_event(e)) for e in new],
                )
            except sqlite3.IntegrityError:
                raise StoreConflict(
                    f"run {run_id!r} was appended to by another writer at the same time; read "
                    "it again",
                    run_id=run_id,
                ) from None
            update_index(conn, run_id, new)
            key = self._audit_key
            if copied is not None:
                insert_macs(conn, [(run_id, e.seq, copied[e.seq]) for e in new if e.seq in copied])
            elif key is not None:
                insert_macs(conn, [(run_id, e.seq, key.mac(e.hash)) for e in new])
        held = self._leases.mine(run_id, lease)
        if held is not None:
            held.tail = (new[-1].seq, new[-1].hash)

    # -- reading -------------------------------------------------------------------------

    async def read(self, run_id: str, *, after_seq: int = -1) -> list[Event]:
        """The run's events after ``after_seq``, decoded and chain-checked."""

        def job(db: sqlite3.Connection) -> list[bytes] | None:
            self._db.sync(db)
            rows = _query(  # the whole run: no lower bound (a row below seq 0 fails the check)
                db,
                "SELECT body FROM events WHERE run_id = ? AND seq > ? ORDER BY seq",
                (run_id, after_seq if after_seq >= 0 else -(2**63)),
            )
            if not rows and (after_seq < 0 or not self._exists(db, run_id)):
                return None
            return [_bytes(body) for (body,) in rows]

        bodies = await self._db.call(job)
        if bodies is None:
            raise RunNotFound(run_id)
        events = [decode_event(body) for body in bodies]
        if after_seq < 0:
            verify_chain(events, run_id=run_id)
        return events

    async def read_page(self, run_id: str, *, after_seq: int = -1, limit: int) -> list[Event]:
        """At most ``limit`` events after ``after_seq``, decoded and chain-checked.

        The event at ``after_seq`` is read too, so that the page's link to it (the last of
        the page before) is checked: pages read one after another check the whole chain.
        """
        check_limit(limit)
        start = max(after_seq, -1)

        def job(db: sqlite3.Connection) -> list[bytes] | None:
            self._db.sync(db)
            if start < 0:  # no lower bound: a row written below seq 0 is read (and fails)
                rows = _query(
                    db,
                    "SELECT body FROM events WHERE run_id = ? ORDER BY seq LIMIT ?",
                    (run_id, limit),
                )
            else:
                rows = _query(
                    db,
                    "SELECT body FROM events WHERE run_id = ? AND seq >= ? ORDER BY seq LIMIT ?",
                    (run_id, start, limit + 1),
                )
            if not rows and (start < 0 or not self._exists(db, run_id)):
                return None
            return [_bytes(body) for (body,) in rows]

        bodies = await self._db.call(job)
        if bodies is None:
            raise RunNotFound(run_id)
        events = [decode_event(body) for body in bodies]
        verify_chain(events, run_id=run_id, start_seq=max(start, 0))
        return events[1:] if start >= 0 else events

    async def read_encoded(self, run_id: str) -> list[bytes]:
        """The run's stored event bodies in ``seq`` order, neither decoded nor checked."""

        def job(db: sqlite3.Connection) -> list[bytes]:
            self._db.sync(db)
            rows = _query(db, "SELECT body FROM events WHERE run_id = ? ORDER BY seq", (run_id,))
            return [_bytes(body) for (body,) in rows]

        bodies = await self._db.call(job)
        if not bodies:
            raise RunNotFound(run_id)
        return bodies

    async def read_encoded_pages(self, run_id: str, *, limit: int) -> AsyncGenerator[list[bytes]]:
        """The run's stored event bodies in ``seq`` order, a page at a time, unchecked."""
        check_limit(limit)
        after: int | None = None  # the first page: no lower bound (a row below seq 0 is read)
        while True:

            def job(db: sqlite3.Connection, after: int | None = after) -> list[Any]:
                self._db.sync(db)
                if after is None:
                    return _query(
                        db,
                        "SELECT seq, body FROM events WHERE run_id = ? ORDER BY seq LIMIT ?",
                        (run_id, limit),
                    )
                return _query(
                    db,
                    "SELECT seq, body FROM events WHERE run_id = ? AND seq > ? "
                    "ORDER BY seq LIMIT ?",
                    (run_id, after, limit),
                )

            rows = await self._db.call(job)
            if not rows and after is None:
                raise RunNotFound(run_id)
            if rows:
                yield [_bytes(body) for (_, body) in rows]
                after = int(rows[-1][0])
            if len(rows) < limit:
                return

    async def read_macs(self, run_id: str) -> dict[int, str]:
        """The MACs stored beside the run's events, by seq (none in an older store)."""

        def job(db: sqlite3.Connection) -> dict[int, str] | None:
            self._db.sync(db)
            return stored_macs(db, run_id) if self._exists(db, run_id) else None

        macs = await self._db.call(job)
        if macs is None:
            raise RunNotFound(run_id)
        return macs

    async def read_macs_page(
        self, run_id: str, *, after_seq: int = -1, limit: int
    ) -> dict[int, str]:
        """The MACs stored beside the events ``after_seq + 1`` to ``after_seq + limit``."""
        check_limit(limit)
        first = max(after_seq, -1) + 1

        def job(db: sqlite3.Connection) -> dict[int, str] | None:
            self._db.sync(db)
            if not self._exists(db, run_id):
                return None
            return stored_macs(db, run_id, seqs=(first, first + limit))

        macs = await self._db.call(job)
        if macs is None:
            raise RunNotFound(run_id)
        return macs

    def _exists(self, db: sqlite3.Connection, run_id: str) -> bool:
        found = _query(db, "SELECT 1 FROM events WHERE run_id = ? LIMIT 1", (run_id,))
        return bool(found)

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
            params.append(utc_text(query.since))
        if query.until is not None:
            where.append("created_at < ?")
            params.append(utc_text(query.until))
        if query.tag is not None:
            where.append("EXISTS (SELECT 1 FROM json_each(runs.tags) WHERE value = ?)")
            params.append(query.tag)
        if query.after is not None:
            where.append("(created_at < ? OR (created_at = ? AND run_id < ?))")
            moment = utc_text(query.after.created_at)
            params.extend((moment, moment, query.after.run_id))
        sql = "SELECT * FROM runs"
        if where:
            sql += " WHERE " + " AND ".join(where)
        sql += " ORDER BY created_at DESC, run_id DESC LIMIT ?"
        params.append(query.limit)

        def job(db: sqlite3.Connection) -> list[RunInfo]:
            self._db.sync(db)
            return [run_info(r) for r in _query(db, sql, params)]

        return await self._db.call(job)

    async def info(self, run_id: str) -> RunInfo:
        """One index row."""

        def job(db: sqlite3.Connection) -> list[Any]:
            self._db.sync(db)
            return _query(db, "SELECT * FROM runs WHERE run_id = ?", (run_id,))

        rows = await self._db.call(job)
        if not rows:
            raise RunNotFound(run_id)
        return run_info(rows[0])

    async def leases(self) -> dict[str, tuple[str | None, int, float]]:
        """Every lease row: run id -> (owner, token, expires at); ``owner`` ``None``: free."""

        def job(db: sqlite3.Connection) -> dict[str, tuple[str | None, int, float]]:
            self._db.sync(db)
            rows = _query(db, "SELECT run_id, owner, token, expires_at FROM leases", ())
            return {r[0]: (r[1], int(r[2]), float(r[3])) for r in rows}

        return await self._db.call(job)

    # -- leases --------------------------------------------------------------------------

    async def acquire(
        self, run_id: str, owner: str, *, ttl: float | None = None, fresh: bool = False
    ) -> Lease:
        """Grant a lease with the next fencing token, atomically across processes.

        Every pending record is applied first, so the new owner reads the whole log: a
        crashed writer's records included. A lease whose holder is alive (its process, on
        this host) or whose heartbeat has not expired is refused with ``LeaseHeld``.

        A ``fresh`` run id (made up by the caller just now: no process can know it yet) gets
        its first lease by a record in this store's pending file, like any commit: no trip to
        the database. Anyone who leases the run later applies that record first.
        """
        return await self._leases.acquire(run_id, owner, ttl=ttl, fresh=fresh)

    async def release(self, lease: Lease) -> None:
        """Drop the lease if it is still current (the token stays: it only grows).

        A lease this store granted is given up by a record in its pending file, in order
        after the run's events; any store that leases the run applies it first.
        """
        await self._leases.release(lease)

    async def delete(self, run_ids: Sequence[str]) -> int:
        """Delete runs, their events and leases."""
        db = self._db
        db.check_open()
        ids = list(run_ids)

        def job(conn: sqlite3.Connection) -> int:
            db.check_writable()
            count = 0
            with db.transaction(conn):
                for run_id in ids:
                    removed = conn.execute(
                        "DELETE FROM events WHERE run_id = ?", (run_id,)
                    ).rowcount
                    conn.execute("DELETE FROM macs WHERE run_id = ?", (run_id,))
                    indexed = conn.execute("DELETE FROM runs WHERE run_id = ?", (run_id,)).rowcount
                    count += 1 if removed or indexed else 0
                    # The lease row stays, unowned: its fencing token must only ever grow.
                    conn.execute(
                        "UPDATE leases SET owner = NULL, expires_at = 0 WHERE run_id = ?",
                        (run_id,),
                    )
            return count

        for run_id in ids:
            self._leases.held.pop(run_id, None)
        return await db.call(job)

    # -- key-value entries (not events: no pending file, no lease) ------------------------

    async def kv_get(self, namespace: str, key: str) -> KvEntry | None:
        """The entry under ``key``, or ``None``."""
        return await self._db.call(lambda db: _sqlitekv.kv_get(db, namespace, key))

    async def kv_set(self, namespace: str, key: str, value: JsonValue) -> None:
        """Store ``value`` under ``key``, in its own transaction."""

        def job(db: sqlite3.Connection) -> None:
            self._db.check_writable()
            _sqlitekv.kv_set(db, namespace, key, value)

        await self._db.call(job)

    async def kv_delete(self, namespace: str, key: str) -> bool:
        """Remove ``key``; whether it existed."""

        def job(db: sqlite3.Connection) -> bool:
            self._db.check_writable()
            return _sqlitekv.kv_delete(db, namespace, key)

        return await self._db.call(job)

    async def kv_list(self, namespace: str, prefix: str = "", limit: int = 100) -> list[str]:
        """Keys starting with ``prefix``, in order."""
        return await self._db.call(lambda db: _sqlitekv.kv_list(db, namespace, prefix, limit))

    # -- closing ---------------------------------------------------------------------------

    async def close(self) -> None:
        """Apply what is pending, remove this store's files, close the connection.

        A pending file is deleted only once every record in it is in the database. If the
        database cannot take them now (locked past the busy timeout, damaged, full), the
        file is kept, closed: it is durable, and the next store that opens the file applies
        it.
        """
        if self._db.closed:
            return
        self._leases.held.clear()
        await self._db.close()


def _nothing_stored(seq: int) -> str | None:
    raise AssertionError(f"an append that continues the log re-appended seq {seq}")


def _bytes(body: object) -> bytes:
    # an edited row may hold text, or anything else SQLite stores: read it as it is
    return body if isinstance(body, bytes) else str(body).encode()


def _query(db: sqlite3.Connection, sql: str, params: Sequence[Any]) -> list[Any]:
    return db.execute(sql, params).fetchall()
