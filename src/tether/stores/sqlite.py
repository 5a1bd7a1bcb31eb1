"""``SqliteStore``: runs in one SQLite file (WAL), the embedded default.

An append under a lease (what a running agent does) commits with one ``write`` to the
store's own pending file (``<db>-pending/``) and reaches the database in batches: the file is
the commit point, so each step of a run costs a system call, not a transaction. With
``durability="process"`` (the default) a returned append survives the process being killed
at any instant; ``durability="power"`` adds an ``fdatasync`` per commit and a synchronous
database, and survives a power cut. Any store on the file applies every pending file before
it reads, leases or deletes, so a crashed writer's appends are never lost and a live one's
are seen. Other appends (imports, tests) are one transaction each: the lease check, the new
events and the runs index row commit together or not at all. Several processes may share
the file; SQLite's locking serializes their transactions.
"""

from __future__ import annotations

import asyncio
import logging
import os
import sqlite3
import time
from collections.abc import Generator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Literal, cast

from tether._internal.appendcheck import new_events
from tether.codec import decode_event, encode_event, verify_chain
from tether.events import Event
from tether.jsontypes import JsonValue
from tether.stores import _sqlitekv
from tether.stores._pendinglog import OtherLog, PendingLog, Record, other_logs, record_line
from tether.stores._sqliteapply import Applier
from tether.stores._sqlitetables import (
    SCHEMA,
    lease_token,
    run_info,
    stored_hash,
    stored_tail,
    update_index,
    utc_text,
)
from tether.stores.base import (
    Lease,
    LeaseHeld,
    RunInfo,
    RunNotFound,
    RunQuery,
    RunStore,
    StaleLease,
    StoreConflict,
    StoreWriteError,
)
from tether.stores.kv import KeyValueStore, KvEntry

__all__ = ["DEFAULT_PATH", "SqliteStore", "default_store_path"]

_log = logging.getLogger("tether.stores")

_NOT_GRANTED = (0, 0.0)

_Append = tuple[str, list[Event], "Lease | None", "asyncio.Future[None]"]
"""One queued append: run, events, lease, the caller's future."""

DEFAULT_PATH = Path(".tether") / "tether.db"
"""Where the store lives unless configured (``$TETHER_DB`` overrides)."""


def default_store_path() -> Path:
    """``$TETHER_DB``, else ``./.tether/tether.db``."""
    return Path(os.environ.get("TETHER_DB") or DEFAULT_PATH)


class SqliteStore(RunStore, KeyValueStore):
    """A run store in one SQLite file, with a pending-records file as its commit point.

    Its key-value entries live in the file's ``kv`` table, each write its own transaction.
    """

    def __init__(
        self,
        path: str | Path | None = None,
        *,
        durability: Literal["process", "power"] = "process",
        lease_ttl: float = 30.0,
        apply_interval: float = 0.05,
    ) -> None:
        self.path = Path(path) if path is not None else default_store_path()
        in_memory = str(self.path) == ":memory:"
        if not in_memory:
            self.path.parent.mkdir(parents=True, exist_ok=True)
        self._db = sqlite3.connect(
            self.path, isolation_level=None, timeout=30.0, check_same_thread=False
        )
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute(f"PRAGMA synchronous={'FULL' if durability == 'power' else 'NORMAL'}")
        self._db.executescript(SCHEMA)
        self._lease_ttl = lease_ttl
        self._group_commit = durability == "power"  # share each fdatasync between appends
        self._apply_interval = apply_interval
        self.pending_dir = None if in_memory else self.path.with_name(self.path.name + "-pending")
        """Where appends are committed before they reach the database (``None``: in memory)."""
        self._applier = Applier(self._db, self.pending_dir)
        self._log = None
        if self.pending_dir is not None:
            self._log = PendingLog(self.pending_dir, sync=durability == "power")
        self._queue: list[_Append] = []
        self._flush_scheduled = False
        self._pending: list[Record] = []  # in the pending file, not yet in the database
        self._apply_at: asyncio.TimerHandle | None = None
        self._granted: dict[str, tuple[int, float]] = {}  # run -> (token, ask the db again at)
        self._tails: dict[str, tuple[int, int, str]] = {}  # run -> (lease token, seq, hash)
        self._fresh: dict[str, int] = {}  # run -> token of a lease granted on an empty log
        self._batch_hashes: dict[tuple[str, int], str] = {}

    # -- writing -------------------------------------------------------------------------

    async def append(
        self, run_id: str, events: Sequence[Event], *, lease: Lease | None = None
    ) -> None:
        """Append atomically; returns once the events are durable.

        An append under a lease that this store granted is committed by one write to the
        store's pending file, at once (with ``durability="power"``, the appends of one
        event-loop iteration share that write and its ``fdatasync``), and reaches the
        database within ``apply_interval`` seconds, or at once when any store on the file
        reads, leases, releases or closes. Any other append is one database transaction,
        shared by the appends of one event-loop iteration. Either way the lease, the seq and
        the hash chain are checked before anything is written.
        """
        if not events:
            return
        log = self._log
        if (
            log is not None
            and lease is not None
            and not self._group_commit
            and not self._queue
            and self._granted.get(run_id, _NOT_GRANTED)[0] == lease.token
        ):
            error = self._commit_to_log(log, [(run_id, list(events), lease)])[0]
            if error is not None:
                raise error
            return
        loop = asyncio.get_running_loop()
        done: asyncio.Future[None] = loop.create_future()
        self._queue.append((run_id, list(events), lease, done))
        if not self._flush_scheduled:
            self._flush_scheduled = True
            loop.call_soon(self._flush)
        await done

    def _flush(self) -> None:
        """Commit every queued append (group commit), then wake their callers."""
        self._flush_scheduled = False
        batch, self._queue = self._queue, []
        granted = self._granted
        log = self._log
        results: list[tuple[asyncio.Future[None], BaseException | None]]
        if log is not None and all(
            lease is not None and granted.get(run_id, _NOT_GRANTED)[0] == lease.token
            for run_id, _, lease, _ in batch
        ):
            items = [(run_id, events, lease) for run_id, events, lease, _ in batch]
            errors = self._commit_to_log(log, cast(list[tuple[str, list[Event], Lease]], items))
            results = [(item[3], error) for item, error in zip(batch, errors, strict=True)]
        else:
            results = self._commit_to_db(batch)
        for done, error in results:
            if done.cancelled():
                continue
            if error is None:
                done.set_result(None)
            else:
                done.set_exception(error)

    def _commit_to_log(
        self, log: PendingLog, items: list[tuple[str, list[Event], Lease]]
    ) -> list[BaseException | None]:
        """Check each append, then write every accepted one with a single ``write``."""
        errors: list[BaseException | None] = []
        records: list[Record] = []
        tails: dict[str, tuple[int, str]] = {}
        now = time.time()
        for run_id, events, lease in items:
            try:
                self._check_granted(run_id, lease, now)
                last = tails.get(run_id) or self._tail(run_id, lease.token)
                new = new_events(run_id, events, last, lambda s, r=run_id: self._synced_hash(r, s))
            except Exception as exc:
                errors.append(exc)
                continue
            errors.append(None)
            if new:
                records.append(Record(run_id, lease.token, new, [encode_event(e) for e in new]))
                tails[run_id] = (new[-1].seq, new[-1].hash)
        if not records:
            return errors
        try:
            data = b"".join(record_line(r.run_id, r.token, r.bodies) for r in records)
            log.write(data)
            self._pending.extend(records)
        except OSError as exc:
            error = StoreWriteError(
                f"could not write the store's pending file in {log.directory}: {exc}. "
                "Nothing of these appends was stored; free disk space or fix the permissions"
            )
            failed = {r.run_id for r in records}
            for run_id in failed:
                self._forget(run_id)
            return [
                error if item[0] in failed else outcome
                for item, outcome in zip(items, errors, strict=True)
            ]
        for record in records:
            last_event = record.events[-1]
            token = record.token
            assert token is not None
            self._tails[record.run_id] = (token, last_event.seq, last_event.hash)
        self._schedule_apply()
        return errors

    def _schedule_apply(self) -> None:
        """Apply this store's pending records ``apply_interval`` seconds from now (batched)."""
        if self._apply_at is not None:
            return
        loop = asyncio.get_running_loop()
        self._apply_at = loop.call_later(self._apply_interval, self._apply_later)

    def _apply_later(self) -> None:
        self._apply_at = None
        try:
            self._sync(others=False)
        except sqlite3.Error as exc:  # e.g. busy for 30 s: the records wait in the file
            _log.warning("tether: could not apply pending records yet (%s); will retry", exc)
            self._schedule_apply()

    def _check_granted(self, run_id: str, lease: Lease, now: float) -> None:
        """Refuse a replaced lease; asks the database only once a third of the TTL has passed.

        Nobody may take a lease before it expires, and each check renews it for a full TTL:
        so until a third of the way there, the answer cannot have changed.
        """
        token, ask_at = self._granted[run_id]
        if now < ask_at:
            return
        renewed = self._db.execute(
            "UPDATE leases SET expires_at = MAX(expires_at, ?) WHERE run_id = ? AND token = ?",
            (now + self._lease_ttl, run_id, token),
        ).rowcount
        if not renewed:
            del self._granted[run_id]
            raise StaleLease(run_id, lease.token, lease_token(self._db, run_id))
        self._granted[run_id] = (token, now + self._lease_ttl / 3)

    def _forget(self, run_id: str) -> None:
        self._tails.pop(run_id, None)
        self._fresh.pop(run_id, None)

    def _tail(self, run_id: str, token: int) -> tuple[int, str] | None:
        """The run's last ``(seq, hash)``, known since the lease was granted."""
        cached = self._tails.get(run_id)
        if cached is not None and cached[0] == token:
            return cached[1], cached[2]
        if self._fresh.pop(run_id, None) == token:
            return None  # empty when leased, and only the holder appends
        self._sync()
        return stored_tail(self._db, run_id)

    def _synced_hash(self, run_id: str, seq: int) -> str | None:
        self._sync()
        return stored_hash(self._db, run_id, seq)

    def _commit_to_db(
        self, batch: list[_Append]
    ) -> list[tuple[asyncio.Future[None], BaseException | None]]:
        """Commit the appends in one transaction, after bringing the database up to date.

        Each append is checked first, reading only; those that pass are then written
        together. A refused append has written nothing, so no savepoints are needed.
        """
        results: list[tuple[asyncio.Future[None], BaseException | None]] = []
        accepted: list[Record] = []
        tails: dict[str, tuple[int, str]] = {}
        try:
            with self._transaction():
                now = time.time()
                for run_id, events, lease, done in batch:
                    try:
                        if lease is not None:
                            self._check_lease(run_id, lease, now)
                        last = tails.get(run_id) or stored_tail(self._db, run_id)
                        new = new_events(run_id, events, last, lambda s, r=run_id: self._hash(r, s))
                    except Exception as exc:
                        results.append((done, exc))
                        continue
                    results.append((done, None))
                    if new:
                        token = None if lease is None else lease.token
                        accepted.append(Record(run_id, token, new, [encode_event(e) for e in new]))
                        tails[run_id] = (new[-1].seq, new[-1].hash)
                        self._batch_hashes.update({(run_id, e.seq): e.hash for e in new})
                for record in accepted:
                    self._insert(record.run_id, record.events, record.bodies)
        except Exception as exc:
            self._tails.clear()  # what was cached may not have been committed
            self._fresh.clear()
            return [(done, exc) for _, _, _, done in batch]
        finally:
            self._batch_hashes.clear()
        for record in accepted:
            last_event = record.events[-1]
            if record.token is None:
                self._forget(record.run_id)
            else:
                self._tails[record.run_id] = (record.token, last_event.seq, last_event.hash)
        return results

    def _check_lease(self, run_id: str, lease: Lease, now: float) -> None:
        """Refuse a replaced lease (asking the database), and renew the current one."""
        current = lease_token(self._db, run_id)
        if current != lease.token:
            raise StaleLease(run_id, lease.token, current)
        self._db.execute(
            "UPDATE leases SET expires_at = MAX(expires_at, ?) WHERE run_id = ?",
            (now + self._lease_ttl, run_id),
        )

    def _hash(self, run_id: str, seq: int) -> str | None:
        pending = self._batch_hashes.get((run_id, seq))
        return pending if pending is not None else stored_hash(self._db, run_id, seq)

    def _insert(self, run_id: str, events: list[Event], bodies: list[bytes]) -> None:
        try:
            self._db.executemany(
                "INSERT INTO events (run_id, seq, kind, hash, body) VALUES (?, ?, ?, ?, ?)",
                [(run_id, e.seq, e.kind, e.hash, b) for e, b in zip(events, bodies, strict=True)],
            )
        except sqlite3.IntegrityError:
            raise StoreConflict(
                f"run {run_id!r} was appended to by another writer at the same time; read it again",
                run_id=run_id,
            ) from None
        update_index(self._db, run_id, events)

    # -- bringing the database up to date ------------------------------------------------

    def _sync(self, *, others: bool = True) -> None:
        """Apply this store's pending records and, if ``others``, every other store's."""
        logs = self._other_logs() if others else []
        if not self._pending and not logs:
            return
        with self._transaction(logs=logs):
            pass

    def _other_logs(self) -> list[OtherLog]:
        if self.pending_dir is None:
            return []
        return list(other_logs(self.pending_dir, None if self._log is None else self._log.path))

    @contextmanager
    def _transaction(
        self, *, logs: list[OtherLog] | None = None, own: bool = True
    ) -> Generator[None]:
        """``BEGIN IMMEDIATE`` … ``COMMIT``, first applying the pending records.

        This store's records (unless not ``own``) come from memory; other stores' from their
        files: a live writer's are applied and left in its file (it replaces the file
        itself), a dead writer's are applied and its file deleted after the commit.
        """
        db = self._db
        if logs is None:
            logs = self._other_logs()
        records: list[Record] = []
        if own:
            records, self._pending = self._pending, []
        committed = False
        try:
            db.execute("BEGIN IMMEDIATE")
            try:
                self._applier.apply(records, mine=True)
                for other in logs:
                    self._applier.apply(other.records, mine=False, source=other)
                    if other.problem is not None and other.dead:
                        _log.error(
                            "tether: the pending file %s is damaged (%s); the records before "
                            "the damage were applied and the file is kept as %s",
                            other.path,
                            other.problem,
                            other.path.with_suffix(".damaged"),
                        )
                yield
                db.execute("COMMIT")
                committed = True
            except BaseException:
                if db.in_transaction:
                    db.execute("ROLLBACK")
                self._pending = records + self._pending
                raise
        finally:
            for other in logs:
                other.finish(applied=committed)
        if records and self._log is not None and not self._pending:
            self._log.applied()

    # -- reading -------------------------------------------------------------------------

    async def read(self, run_id: str, *, after_seq: int = -1) -> list[Event]:
        """The run's events after ``after_seq``, decoded and chain-checked."""
        self._sync()
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

    async def read_encoded(self, run_id: str) -> list[bytes]:
        """The run's stored event bodies in ``seq`` order, neither decoded nor checked."""
        self._sync()
        rows = self._db.execute(
            "SELECT body FROM events WHERE run_id = ? ORDER BY seq", (run_id,)
        ).fetchall()
        if not rows:
            raise RunNotFound(run_id)
        # an edited row may hold text, or anything else SQLite stores: audit it as it is
        return [body if isinstance(body, bytes) else str(body).encode() for (body,) in rows]

    def _exists(self, run_id: str) -> bool:
        found = self._db.execute("SELECT 1 FROM events WHERE run_id = ? LIMIT 1", (run_id,))
        return found.fetchone() is not None

    def _row(self, run_id: str) -> RunInfo | None:
        found = self._db.execute("SELECT * FROM runs WHERE run_id = ?", (run_id,)).fetchone()
        return None if found is None else run_info(found)

    async def runs(self, query: RunQuery = RunQuery()) -> list[RunInfo]:
        """Index rows, newest first."""
        self._sync()
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
        sql = "SELECT * FROM runs"
        if where:
            sql += " WHERE " + " AND ".join(where)
        sql += " ORDER BY created_at DESC, run_id DESC LIMIT ?"
        params.append(query.limit)
        return [run_info(r) for r in self._db.execute(sql, params).fetchall()]

    async def info(self, run_id: str) -> RunInfo:
        """One index row."""
        self._sync()
        row = self._row(run_id)
        if row is None:
            raise RunNotFound(run_id)
        return row

    # -- leases --------------------------------------------------------------------------

    async def acquire(self, run_id: str, owner: str, *, ttl: float = 30.0) -> Lease:
        """Grant a lease with the next fencing token, atomically across processes.

        Every pending record is applied first, so the new owner reads the whole log: a
        crashed writer's records included, and a live one's whose lease has lapsed.
        """
        now = time.time()
        # This store's own records of the run must not be fenced off by the new token.
        own = any(r.run_id == run_id for r in self._pending)
        with self._transaction(own=own):
            held = self._db.execute(
                "SELECT owner, token, expires_at FROM leases WHERE run_id = ?", (run_id,)
            ).fetchone()
            token = 1
            if held is not None:
                holder, current, expires = cast(tuple[str | None, int, float], tuple(held))
                if holder is not None and expires > now and _alive(holder):
                    # The same owner may take it again, but only through the store that
                    # granted it: another store could not fence the first one's appends.
                    mine = self._granted.get(run_id, _NOT_GRANTED)[0] == current
                    if holder != owner or not mine:
                        raise LeaseHeld(run_id, holder, expires)
                token = current + 1
            self._db.execute(
                "INSERT OR REPLACE INTO leases (run_id, owner, token, expires_at) VALUES (?, ?, ?, ?)",
                (run_id, owner, token, now + ttl),
            )
            tail = stored_tail(self._db, run_id)  # complete: every pending record is applied
        self._granted[run_id] = (token, now + ttl / 3)
        if tail is None:
            self._forget(run_id)
            self._fresh[run_id] = token
        else:
            self._tails[run_id] = (token, *tail)
        return Lease(run_id=run_id, owner=owner, token=token, expires_at=now + ttl)

    async def release(self, lease: Lease) -> None:
        """Drop the lease if it is still current (the token stays: it only grows).

        A lease this store granted is given up by a record in its pending file, in order
        after the run's events; any store that leases the run applies it first.
        """
        self._forget(lease.run_id)
        log = self._log
        if log is not None and self._granted.get(lease.run_id, _NOT_GRANTED)[0] == lease.token:
            del self._granted[lease.run_id]
            record = Record(lease.run_id, lease.token, [], [], release=True)
            log.write(record_line(lease.run_id, lease.token, [], release=True))
            self._pending.append(record)
            self._schedule_apply()
            return
        with self._transaction(logs=[]):
            self._db.execute(
                "UPDATE leases SET owner = NULL, expires_at = 0 WHERE run_id = ? AND token = ?",
                (lease.run_id, lease.token),
            )

    async def delete(self, run_ids: Sequence[str]) -> int:
        """Delete runs, their events and leases."""
        db = self._db
        count = 0
        with self._transaction():
            for run_id in run_ids:
                self._forget(run_id)
                self._granted.pop(run_id, None)
                removed = db.execute("DELETE FROM events WHERE run_id = ?", (run_id,)).rowcount
                indexed = db.execute("DELETE FROM runs WHERE run_id = ?", (run_id,)).rowcount
                count += 1 if removed or indexed else 0
                # The lease row stays, unowned: its fencing token must only ever grow.
                db.execute(
                    "UPDATE leases SET owner = NULL, expires_at = 0 WHERE run_id = ?", (run_id,)
                )
        return count

    # -- key-value entries (not events: no pending file, no lease) ------------------------

    async def kv_get(self, namespace: str, key: str) -> KvEntry | None:
        """The entry under ``key``, or ``None``."""
        return _sqlitekv.kv_get(self._db, namespace, key)

    async def kv_set(self, namespace: str, key: str, value: JsonValue) -> None:
        """Store ``value`` under ``key``, in its own transaction."""
        _sqlitekv.kv_set(self._db, namespace, key, value)

    async def kv_delete(self, namespace: str, key: str) -> bool:
        """Remove ``key``; whether it existed."""
        return _sqlitekv.kv_delete(self._db, namespace, key)

    async def kv_list(self, namespace: str, prefix: str = "", limit: int = 100) -> list[str]:
        """Keys starting with ``prefix``, in order."""
        return _sqlitekv.kv_list(self._db, namespace, prefix, limit)

    async def close(self) -> None:
        """Apply what is pending, remove this store's pending file, close the connection."""
        if self._apply_at is not None:
            self._apply_at.cancel()
            self._apply_at = None
        try:
            self._sync(others=False)
            if self._log is not None and not self._pending:
                self._log.close()
        finally:
            self._db.close()


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
