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
"""

from __future__ import annotations

import asyncio
import logging
import os
import sqlite3
import threading
import time
from collections.abc import Callable, Generator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, TypeVar, cast

from tether._internal.sealed import body_of
from tether.auditkey import AuditKeySetting, resolve_audit_key
from tether.codec import decode_event, encode_event, kept, verify_chain
from tether.errors import ConfigError, StoreBusy, StoreError, StoreUnavailable, StoreWriteError
from tether.events import Event
from tether.jsontypes import JsonValue
from tether.stores import _sqlitekv
from tether.stores._appendcheck import new_events
from tether.stores._pendinglog import OtherLog, PendingLog, Record, other_logs, record_line
from tether.stores._sqliteapply import Applier
from tether.stores._sqliteopen import connect, os_error, prepare_directory, sqlite_error
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
from tether.stores._sqliteworker import Worker
from tether.stores.base import (
    Lease,
    LeaseHeld,
    RunInfo,
    RunNotFound,
    RunQuery,
    RunStore,
    StaleLease,
    StoreConflict,
    alive,
)
from tether.stores.kv import KeyValueStore, KvEntry

__all__ = ["DEFAULT_PATH", "SqliteStore", "default_store_path"]

_LONGEST_BUSY_TIMEOUT = (2**31 - 1) / 1000
"""Seconds: the longest busy timeout SQLite takes (milliseconds in a C ``int``)."""

_log = logging.getLogger("tether.stores")

T = TypeVar("T")

DEFAULT_PATH = Path(".tether") / "tether.db"
"""Where the store lives unless configured (``$TETHER_DB`` overrides)."""

_RETRY_APPLY = 0.5
"""Seconds before applying again after the database was busy."""


def default_store_path() -> Path:
    """``$TETHER_DB``, else ``./.tether/tether.db``."""
    return Path(os.environ.get("TETHER_DB") or DEFAULT_PATH)


@dataclass(slots=True)
class _Held:
    """A lease this store granted and still holds (renewed by the heartbeat)."""

    token: int
    owner: str
    ttl: float
    """Seconds it lasts without renewal (``<= 0``: granted lapsed, never renewed)."""
    tail: tuple[int, str] | None
    """The run's last ``(seq, hash)``: known since the grant (only the holder appends)."""
    safe_until: float
    """Until then (Unix time) nobody can have taken the lease: appends need no database."""
    lost: int = 0
    """The token that replaced this one, once the heartbeat found it replaced."""


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
        in_memory = str(self.path) == ":memory:"
        if not in_memory:
            prepare_directory(self.path)
        self._lease_ttl = lease_ttl
        self._power = durability == "power"
        self._apply_interval = apply_interval
        # SQLite counts milliseconds in a C int: longer (inf: wait for ever) is about 24 days
        self._busy_timeout = min(busy_timeout, _LONGEST_BUSY_TIMEOUT)
        self.pending_dir = None if in_memory else self.path.with_name(self.path.name + "-pending")
        """Where appends are committed before they reach the database (``None``: in memory)."""
        self._log = None if self.pending_dir is None else PendingLog(self.pending_dir)
        self._read_only = False
        self._applier: Applier | None = None
        self._worker = Worker(f"tether-sqlite:{self.path.name}", self._open, self._tick)
        self._lock = threading.Lock()
        self._pending: list[Record] = []  # in this store's files, not yet in the database
        self._first_pending_at = 0.0
        self._held: dict[str, _Held] = {}
        self._broken: StoreError | None = None
        self._busy_since: float | None = None
        self._heartbeat_at = 0.0
        self._sync_waiters: list[tuple[int, asyncio.Future[None]]] = []
        self._closed = False
        self._verified = False

    @property
    def read_only(self) -> bool:
        """Whether the file could only be opened for reading (known once it is opened)."""
        return self._read_only

    # -- opening and periodic work (the store's thread) -----------------------------------

    def _open(self) -> sqlite3.Connection:
        db, read_only = connect(self.path, busy_timeout=self._busy_timeout, power=self._power)
        self._read_only = read_only
        self._applier = Applier(db, self.pending_dir)
        if read_only:
            stranded = [] if self.pending_dir is None else list(self.pending_dir.glob("*.pending"))
            _log.warning(
                "tether: the run store %s is read-only: it can be read, not written%s",
                self.path,
                f"; {len(stranded)} pending files of earlier writers are not applied (open "
                "it writable to apply them)"
                if stranded
                else "",
            )
        return db

    def _tick(self, connection: Callable[[], sqlite3.Connection]) -> float | None:
        """Apply this store's pending records and renew its leases when due; the next due time."""
        now = time.monotonic()
        delays: list[float] = []
        if self._pending and self._broken is None:
            due = self._first_pending_at + self._apply_interval
            if now >= due:
                applied = self._apply_own(connection())
                if self._pending and self._broken is None:  # more came, or it was busy
                    delays.append(self._apply_interval if applied else _RETRY_APPLY)
            else:
                delays.append(due - now)
        spans = [h.ttl for h in list(self._held.values()) if h.ttl > 0]
        if spans:
            interval = min(spans) / 3
            if now >= self._heartbeat_at + interval:
                self._heartbeat(connection())
                self._heartbeat_at = now
            delays.append(max(0.0, self._heartbeat_at + interval - time.monotonic()))
        if self._sync_waiters:
            self._sync_log()
        return min(delays) if delays else None

    def _apply_own(self, db: sqlite3.Connection) -> bool:
        """Apply this store's pending records; whether that worked (busy: try again later)."""
        try:
            with self._briefly(db), self._transaction(db, others=False):
                pass
        except StoreBusy as exc:
            if self._busy_since is None:
                self._busy_since = time.monotonic()
                _log.warning(
                    "tether: %s; %d pending records wait in %s and are applied once it is free",
                    exc,
                    len(self._pending),
                    self.pending_dir,
                )
            return False
        except (StoreError, OSError) as exc:
            error = exc if isinstance(exc, StoreError) else os_error(exc, self.path, "applying")
            self._broken = error
            _log.error(
                "tether: cannot apply pending records to %s (%s); they are kept in %s",
                self.path,
                exc,
                self.pending_dir,
            )
        else:
            if self._busy_since is not None:
                _log.warning("tether: the run store %s is free again", self.path)
            self._busy_since = None
            return True
        return False

    def _verify(self, db: sqlite3.Connection) -> None:
        """Read a little of every table: a damaged or foreign file fails here, typed."""
        for table in ("events", "runs", "leases"):
            db.execute(f"SELECT * FROM {table} ORDER BY rowid DESC LIMIT 1").fetchall()
            db.execute(f"SELECT * FROM {table} LIMIT 1").fetchall()
        if str(self.path) != ":memory:" and not os.access(self.path, os.W_OK):
            self._read_only = True  # read-only file, medium or immutable: found before a run
        self._verified = True

    def _heartbeat(self, db: sqlite3.Connection) -> None:
        """Renew every lease this store holds, in one transaction."""
        held = list(self._held.items())
        if not held or self._read_only:
            return
        now = time.time()
        try:  # this store's own records first: a new run's lease may still be one of them
            with self._briefly(db), self._transaction(db, others=False):
                for run_id, lease in held:
                    if lease.lost or lease.ttl <= 0:
                        continue
                    renewed = db.execute(
                        "UPDATE leases SET expires_at = MAX(expires_at, ?) "
                        "WHERE run_id = ? AND token = ?",
                        (now + lease.ttl, run_id, lease.token),
                    ).rowcount
                    if renewed:
                        lease.safe_until = now + lease.ttl * 2 / 3
                    else:
                        lease.lost = lease_token(db, run_id)
        except StoreError as exc:  # busy: the leases stay valid until safe_until
            _log.warning("tether: could not renew leases in %s yet (%s)", self.path, exc)

    def _sync_log(self) -> None:
        assert self._log is not None
        try:
            through = self._log.sync()
            error: BaseException | None = None
        except OSError as exc:
            through = -1
            error = os_error(exc, self._log.directory, "syncing the pending file")
        with self._lock:
            waiting, self._sync_waiters = self._sync_waiters, []
        keep: list[tuple[int, asyncio.Future[None]]] = []
        for number, done in waiting:
            if error is None and number > through:
                keep.append((number, done))
            else:
                _settle(done, error)
        if keep:
            with self._lock:
                self._sync_waiters.extend(keep)

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
        self._check_open()
        held = None if lease is None else self._held.get(run_id)
        log = self._log
        if held is not None and log is not None and lease is not None and held.token == lease.token:
            if self._broken is not None:
                raise self._broken
            if held.lost:
                raise StaleLease(run_id, lease.token, held.lost)
            if time.time() >= held.safe_until:
                await self._confirm(run_id, held)
            tail = held.tail
            first = events[0]
            if (tail is None and first.seq == 0) or (tail is not None and first.seq == tail[0] + 1):
                await self._append_to_log(log, run_id, list(events), lease, held)
                return
        # not this store's lease, or it does not simply continue the log: a transaction
        items = list(events)
        await self._call(lambda db: self._append_in_db(db, run_id, items, lease))

    async def _append_to_log(
        self, log: PendingLog, run_id: str, events: list[Event], lease: Lease, held: _Held
    ) -> None:
        new = new_events(run_id, events, held.tail, _nothing_stored)
        bodies = [body_of(e) or kept(encode_event(e)) for e in new]
        key = self._audit_key
        macs = None if key is None else [key.mac(e.hash) for e in new]
        record = Record(run_id, lease.token, new, bodies, macs=macs)
        try:
            record.gen, number = log.write(record_line(run_id, lease.token, bodies, macs=macs))
        except OSError as exc:
            raise os_error(exc, log.directory, f"appending to run {run_id!r}") from None
        held.tail = (new[-1].seq, new[-1].hash)
        self._queue(record)
        if self._power:
            await self._synced(number)

    def _queue(self, record: Record) -> None:
        with self._lock:
            pending = self._pending
            pending.append(record)
            first = len(pending) == 1
            if first:
                self._first_pending_at = time.monotonic()
        if first:
            self._worker.wake()

    async def _synced(self, number: int) -> None:
        done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        with self._lock:
            self._sync_waiters.append((number, done))
        self._worker.wake()
        await done

    async def _confirm(self, run_id: str, held: _Held) -> None:
        """Renew a lease whose heartbeat is late (the database was busy) before appending."""

        def renew(db: sqlite3.Connection) -> None:
            now = time.time()
            if held.ttl <= 0:  # an append proves its holder alive: from now on, a heartbeat
                held.ttl = self._lease_ttl
            with self._transaction(db, others=False):
                renewed = db.execute(
                    "UPDATE leases SET expires_at = MAX(expires_at, ?) WHERE run_id = ? AND token = ?",
                    (now + held.ttl, run_id, held.token),
                ).rowcount
                if not renewed:
                    held.lost = lease_token(db, run_id)
                    raise StaleLease(run_id, held.token, held.lost)
            held.safe_until = now + held.ttl * 2 / 3

        await self._call(renew)

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
        await self._call(lambda db: self._append_in_db(db, run_id, items, None, given))

    def _append_in_db(
        self,
        db: sqlite3.Connection,
        run_id: str,
        events: list[Event],
        lease: Lease | None,
        copied: dict[int, str] | None = None,
    ) -> None:
        """One transaction: bring the database up to date, check, insert (store's thread).

        ``copied``: the events were written elsewhere; store these MACs, make none.
        """
        self._check_writable()
        applier = self._applier
        assert applier is not None
        with self._transaction(db):
            if lease is not None:
                current = lease_token(db, run_id)
                if current != lease.token:
                    raise StaleLease(run_id, lease.token, current)
                db.execute(
                    "UPDATE leases SET expires_at = MAX(expires_at, ?) WHERE run_id = ?",
                    (time.time() + self._lease_ttl, run_id),
                )
            last = stored_tail(db, run_id)
            new = new_events(run_id, events, last, lambda s: stored_hash(db, run_id, s))
            if not new:
                return
            try:
                db.executemany(
                    "INSERT INTO events (run_id, seq, kind, hash, body) VALUES (?, ?, ?, ?, ?)",
                    [(run_id, e.seq, e.kind, e.hash, encode_event(e)) for e in new],
                )
            except sqlite3.IntegrityError:
                raise StoreConflict(
                    f"run {run_id!r} was appended to by another writer at the same time; read "
                    "it again",
                    run_id=run_id,
                ) from None
            update_index(db, run_id, new)
            key = self._audit_key
            if copied is not None:
                insert_macs(db, [(run_id, e.seq, copied[e.seq]) for e in new if e.seq in copied])
            elif key is not None:
                insert_macs(db, [(run_id, e.seq, key.mac(e.hash)) for e in new])
        held = self._held.get(run_id)
        if held is not None and lease is not None and held.token == lease.token:
            held.tail = (new[-1].seq, new[-1].hash)

    # -- bringing the database up to date (store's thread) ---------------------------------

    @contextmanager
    def _transaction(
        self, db: sqlite3.Connection, *, others: bool = True, logs: list[OtherLog] | None = None
    ) -> Generator[None]:
        """``BEGIN IMMEDIATE`` … ``COMMIT``, first applying the pending records.

        This store's records come from memory and leave it only after the commit; other
        stores' from their files: a live writer's are applied and left in its file (it
        deletes its files itself), a dead writer's are applied and its file deleted after
        the commit. A failure rolls everything back and keeps every record where it was.
        """
        applier = self._applier
        assert applier is not None
        if logs is None:
            logs = self._other_logs() if others else []
        with self._lock:
            records = list(self._pending)
        committed = False
        try:
            with self._immediate(db, "applying pending records"):
                applier.apply(records, mine=True)
                for other in logs:
                    applier.apply(other.records, mine=False, source=other)
                    if other.problem is not None and other.dead:
                        _log.error(
                            "tether: the pending file %s is damaged (%s); the records before "
                            "the damage were applied and the file is kept as %s",
                            other.path,
                            other.problem,
                            other.path.with_suffix(".damaged"),
                        )
                yield
            committed = True
        finally:
            for other in logs:
                other.finish(applied=committed)
        if records:
            self._applied(len(records))

    def _applied(self, count: int) -> None:
        """The first ``count`` pending records are in the database: drop them, and files."""
        with self._lock:
            del self._pending[:count]
            left = self._pending[0].gen if self._pending else None
            if self._pending:
                self._first_pending_at = time.monotonic()
        log = self._log
        if log is not None:
            log.applied_below(left if left is not None else log.generation)

    def _other_logs(self) -> list[OtherLog]:
        if self.pending_dir is None:
            return []
        own: set[Path] = set() if self._log is None else self._log.paths
        return list(other_logs(self.pending_dir, own))

    def _sync(self, db: sqlite3.Connection) -> None:
        """Apply this store's pending records and every other store's (store's thread)."""
        if self._read_only:
            return
        logs = self._other_logs()
        if not self._pending and not logs:
            return
        with self._transaction(db, logs=logs):
            pass

    # -- reading -------------------------------------------------------------------------

    async def read(self, run_id: str, *, after_seq: int = -1) -> list[Event]:
        """The run's events after ``after_seq``, decoded and chain-checked."""

        def job(db: sqlite3.Connection) -> list[bytes] | None:
            self._sync(db)
            rows = _query(
                db,
                "SELECT body FROM events WHERE run_id = ? AND seq > ? ORDER BY seq",
                (run_id, after_seq),
            )
            if not rows and (after_seq < 0 or not self._exists(db, run_id)):
                return None
            return [_bytes(body) for (body,) in rows]

        bodies = await self._call(job)
        if bodies is None:
            raise RunNotFound(run_id)
        events = [decode_event(body) for body in bodies]
        if after_seq < 0:
            verify_chain(events, run_id=run_id)
        return events

    async def read_encoded(self, run_id: str) -> list[bytes]:
        """The run's stored event bodies in ``seq`` order, neither decoded nor checked."""

        def job(db: sqlite3.Connection) -> list[bytes]:
            self._sync(db)
            rows = _query(db, "SELECT body FROM events WHERE run_id = ? ORDER BY seq", (run_id,))
            return [_bytes(body) for (body,) in rows]

        bodies = await self._call(job)
        if not bodies:
            raise RunNotFound(run_id)
        return bodies

    async def read_macs(self, run_id: str) -> dict[int, str]:
        """The MACs stored beside the run's events, by seq (none in an older store)."""

        def job(db: sqlite3.Connection) -> dict[int, str] | None:
            self._sync(db)
            return stored_macs(db, run_id) if self._exists(db, run_id) else None

        macs = await self._call(job)
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
        sql = "SELECT * FROM runs"
        if where:
            sql += " WHERE " + " AND ".join(where)
        sql += " ORDER BY created_at DESC, run_id DESC LIMIT ?"
        params.append(query.limit)

        def job(db: sqlite3.Connection) -> list[RunInfo]:
            self._sync(db)
            return [run_info(r) for r in _query(db, sql, params)]

        return await self._call(job)

    async def info(self, run_id: str) -> RunInfo:
        """One index row."""

        def job(db: sqlite3.Connection) -> list[Any]:
            self._sync(db)
            return _query(db, "SELECT * FROM runs WHERE run_id = ?", (run_id,))

        rows = await self._call(job)
        if not rows:
            raise RunNotFound(run_id)
        return run_info(rows[0])

    async def leases(self) -> dict[str, tuple[str | None, int, float]]:
        """Every lease row: run id -> (owner, token, expires at); ``owner`` ``None``: free."""

        def job(db: sqlite3.Connection) -> dict[str, tuple[str | None, int, float]]:
            self._sync(db)
            rows = _query(db, "SELECT run_id, owner, token, expires_at FROM leases", ())
            return {r[0]: (r[1], int(r[2]), float(r[3])) for r in rows}

        return await self._call(job)

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
        self._check_open()
        span = self._lease_ttl if ttl is None else ttl
        log = self._log
        if fresh and log is not None and run_id not in self._held:
            if not self._verified:  # once per store: a damaged file is found before a run
                await self._call(self._verify)
            if self._broken is not None:
                raise self._broken
            self._check_writable()
            now = time.time()
            grant = (owner, now + span)
            record = Record(run_id, 1, [], [], grant=grant)
            try:
                record.gen, _ = log.write(record_line(run_id, 1, [], grant=grant))
            except OSError as exc:
                raise os_error(exc, log.directory, f"starting run {run_id!r}") from None
            self._queue(record)
            self._held[run_id] = _Held(
                token=1, owner=owner, ttl=span, tail=None, safe_until=now + span * 2 / 3
            )
            return Lease(run_id=run_id, owner=owner, token=1, expires_at=now + span)

        def job(db: sqlite3.Connection) -> tuple[int, tuple[int, str] | None, float]:
            self._check_writable()
            now = time.time()
            with self._transaction(db):
                held = db.execute(
                    "SELECT owner, token, expires_at FROM leases WHERE run_id = ?", (run_id,)
                ).fetchone()
                token = 1
                if held is not None:
                    holder, current, expires = cast(tuple[str | None, int, float], tuple(held))
                    if holder is not None and expires > now and alive(holder):
                        # The same owner may take it again, but only through the store that
                        # granted it: another store could not fence the first one's appends.
                        mine = run_id in self._held and self._held[run_id].token == current
                        if holder != owner or not mine:
                            raise LeaseHeld(run_id, holder, expires)
                    token = current + 1
                db.execute(
                    "INSERT OR REPLACE INTO leases (run_id, owner, token, expires_at) "
                    "VALUES (?, ?, ?, ?)",
                    (run_id, owner, token, now + span),
                )
                tail = stored_tail(db, run_id)  # complete: every pending record is applied
            return token, tail, now

        token, tail, now = await self._call(job)
        self._held[run_id] = _Held(
            token=token, owner=owner, ttl=span, tail=tail, safe_until=now + span * 2 / 3
        )
        self._worker.wake()  # the heartbeat now has a lease to renew
        return Lease(run_id=run_id, owner=owner, token=token, expires_at=now + span)

    async def release(self, lease: Lease) -> None:
        """Drop the lease if it is still current (the token stays: it only grows).

        A lease this store granted is given up by a record in its pending file, in order
        after the run's events; any store that leases the run applies it first.
        """
        held = self._held.get(lease.run_id)
        log = self._log
        if held is not None and held.token == lease.token:
            del self._held[lease.run_id]
            if log is not None and not self._closed:
                record = Record(lease.run_id, lease.token, [], [], release=True)
                try:
                    record.gen, _ = log.write(
                        record_line(lease.run_id, lease.token, [], release=True)
                    )
                except OSError as exc:
                    raise os_error(
                        exc, log.directory, f"releasing the lease of run {lease.run_id!r}"
                    ) from None
                self._queue(record)
                return
        self._check_open()

        def job(db: sqlite3.Connection) -> None:
            if self._read_only:
                return
            with self._transaction(db, others=False):
                db.execute(
                    "UPDATE leases SET owner = NULL, expires_at = 0 WHERE run_id = ? AND token = ?",
                    (lease.run_id, lease.token),
                )

        await self._call(job)

    async def delete(self, run_ids: Sequence[str]) -> int:
        """Delete runs, their events and leases."""
        self._check_open()
        ids = list(run_ids)

        def job(db: sqlite3.Connection) -> int:
            self._check_writable()
            count = 0
            with self._transaction(db):
                for run_id in ids:
                    removed = db.execute("DELETE FROM events WHERE run_id = ?", (run_id,)).rowcount
                    db.execute("DELETE FROM macs WHERE run_id = ?", (run_id,))
                    indexed = db.execute("DELETE FROM runs WHERE run_id = ?", (run_id,)).rowcount
                    count += 1 if removed or indexed else 0
                    # The lease row stays, unowned: its fencing token must only ever grow.
                    db.execute(
                        "UPDATE leases SET owner = NULL, expires_at = 0 WHERE run_id = ?",
                        (run_id,),
                    )
            return count

        for run_id in ids:
            self._held.pop(run_id, None)
        return await self._call(job)

    # -- key-value entries (not events: no pending file, no lease) ------------------------

    async def kv_get(self, namespace: str, key: str) -> KvEntry | None:
        """The entry under ``key``, or ``None``."""
        return await self._call(lambda db: _sqlitekv.kv_get(db, namespace, key))

    async def kv_set(self, namespace: str, key: str, value: JsonValue) -> None:
        """Store ``value`` under ``key``, in its own transaction."""

        def job(db: sqlite3.Connection) -> None:
            self._check_writable()
            _sqlitekv.kv_set(db, namespace, key, value)

        await self._call(job)

    async def kv_delete(self, namespace: str, key: str) -> bool:
        """Remove ``key``; whether it existed."""

        def job(db: sqlite3.Connection) -> bool:
            self._check_writable()
            return _sqlitekv.kv_delete(db, namespace, key)

        return await self._call(job)

    async def kv_list(self, namespace: str, prefix: str = "", limit: int = 100) -> list[str]:
        """Keys starting with ``prefix``, in order."""
        return await self._call(lambda db: _sqlitekv.kv_list(db, namespace, prefix, limit))

    # -- closing ---------------------------------------------------------------------------

    async def close(self) -> None:
        """Apply what is pending, remove this store's files, close the connection.

        A pending file is deleted only once every record in it is in the database. If the
        database cannot take them now (locked past the busy timeout, damaged, full), the
        file is kept, closed: it is durable, and the next store that opens the file applies
        it.
        """
        if self._closed:
            return
        self._closed = True
        self._held.clear()

        refused: list[StoreError] = []

        def final(db: sqlite3.Connection | None) -> None:
            if db is not None and self._pending and not self._read_only:
                try:  # briefly: what it cannot take now is durable, and applied later
                    with self._briefly(db), self._transaction(db, others=False):
                        pass
                except StoreError as exc:
                    _log.warning("tether: %s", exc)
                    if not isinstance(exc, StoreBusy):
                        refused.append(exc)
            log = self._log
            if log is not None:
                kept = log.close(keep=bool(self._pending))
                if kept:
                    _log.warning(
                        "tether: %d pending records could not reach %s yet; they are kept in "
                        "%s and applied by the next store that opens it",
                        len(self._pending),
                        self.path,
                        ", ".join(str(p) for p in kept),
                    )

        try:
            if self._pending:
                await self._worker.run(final)
            elif self._worker.started:
                await self._worker.run_if_open(final)
        finally:
            self._worker.stop()
            for _, done in self._sync_waiters:
                _settle(done, StoreUnavailable(f"the run store {self.path} was closed"))
        broken = refused[0] if refused else self._broken
        if broken is not None and self.pending_dir is not None:
            # the records are safe in the pending files, but this database cannot take them
            raise type(broken)(
                f"{broken}; the records it could not take are kept in {self.pending_dir}"
            )

    @contextmanager
    def _immediate(self, db: sqlite3.Connection, doing: str) -> Generator[None]:
        """``BEGIN IMMEDIATE`` … ``COMMIT``, rolled back on any failure; sqlite errors typed."""
        try:
            db.execute("BEGIN IMMEDIATE")
        except sqlite3.Error as exc:
            raise self._typed(exc, doing) from None
        try:
            yield
            db.execute("COMMIT")
        except BaseException as exc:
            if db.in_transaction:
                db.execute("ROLLBACK")
            if isinstance(exc, sqlite3.Error):
                raise self._typed(exc, doing) from None
            raise

    @contextmanager
    def _briefly(self, db: sqlite3.Connection) -> Generator[None]:
        """Wait at most a second for another process's lock (work that can be done later).

        The store's own periodic work must not sit in a lock for the whole busy timeout:
        it would hold up everything queued behind it (a close, a read).
        """
        brief = int(min(1.0, self._busy_timeout) * 1000)
        db.execute(f"PRAGMA busy_timeout = {brief}")
        try:
            yield
        finally:
            db.execute(f"PRAGMA busy_timeout = {int(self._busy_timeout * 1000)}")

    def _typed(self, exc: sqlite3.Error, doing: str) -> StoreError:
        if getattr(exc, "sqlite_errorname", "").startswith("SQLITE_READONLY"):
            self._read_only = True  # opened for writing, but the file or medium refuses
        return sqlite_error(exc, self.path, doing)

    # -- helpers ---------------------------------------------------------------------------

    async def _call(self, job: Callable[[sqlite3.Connection], T]) -> T:
        """Run ``job`` on the store's thread (``sqlite3`` errors become store errors)."""
        self._check_open()

        def guarded(db: sqlite3.Connection) -> T:
            try:
                return job(db)
            except sqlite3.Error as exc:
                raise self._typed(exc, "reading or writing it") from None
            except OSError as exc:
                where = self.pending_dir or self.path
                raise os_error(exc, where, "applying pending records") from None

        return await self._worker.run(guarded)

    def _check_open(self) -> None:
        if self._closed:
            raise StoreUnavailable(f"the run store {self.path} is closed")

    def _check_writable(self) -> None:
        if self._read_only:
            raise StoreWriteError(
                f"the run store {self.path} is read-only (the file or its directory cannot be "
                "written): it can be read, not written. Fix the permissions or copy it"
            )


def _nothing_stored(seq: int) -> str | None:
    raise AssertionError(f"an append that continues the log re-appended seq {seq}")


def _bytes(body: object) -> bytes:
    # an edited row may hold text, or anything else SQLite stores: read it as it is
    return body if isinstance(body, bytes) else str(body).encode()


def _query(db: sqlite3.Connection, sql: str, params: Sequence[Any]) -> list[Any]:
    return db.execute(sql, params).fetchall()


def _settle(done: asyncio.Future[None], error: BaseException | None) -> None:
    """Complete a future of another thread's loop, from any thread."""

    def settle() -> None:
        if done.done():
            return
        if error is None:
            done.set_result(None)
        else:
            done.set_exception(error)

    loop = done.get_loop()
    if loop.is_closed():
        return
    loop.call_soon_threadsafe(settle)
