"""A SQLite store's file: its connection on its own thread, and its pending records.

``SqliteStore`` is three collaborators: this one (the database file, the pending file that is
the commit point, and how pending records reach the database), ``_sqliteleases`` (the leases
the store holds, renewed by heartbeat) and the store itself (the ``RunStore`` operations).

Every SQLite call runs on the store's thread (``_sqliteworker``). Records committed to the
pending file stay in memory until a transaction has put them in the database; a pending file
is deleted only once every record in it is there. Any transaction first applies this
store's pending records, and (``others``) those other stores left in their pending files.
"""

from __future__ import annotations

import asyncio
import logging
import os
import sqlite3
import threading
import time
from collections.abc import Callable, Generator
from contextlib import contextmanager
from pathlib import Path
from typing import TypeVar

from tether.errors import StoreBusy, StoreError, StoreUnavailable, StoreWriteError
from tether.stores._pendinglog import OtherLog, PendingLog, Record, other_logs
from tether.stores._sqliteapply import Applier
from tether.stores._sqliteopen import connect, os_error, sqlite_error
from tether.stores._sqliteworker import Worker

__all__ = ["Database", "Periodic"]

T = TypeVar("T")

_log = logging.getLogger("tether.stores")

_RETRY_APPLY = 0.5
"""Seconds before applying again after the database was busy."""

_LONGEST_BUSY_TIMEOUT = (2**31 - 1) / 1000
"""Seconds: the longest busy timeout SQLite takes (milliseconds in a C ``int``)."""

Periodic = Callable[[Callable[[], sqlite3.Connection], float], float | None]
"""Work the store's thread does when due: ``(connection, now) -> seconds until next due``."""


class Database:
    """The database file and its pending records (see the module docstring)."""

    def __init__(
        self,
        path: Path,
        *,
        power: bool,
        apply_interval: float,
        busy_timeout: float,
    ) -> None:
        self.path = path
        self.power = power
        """``durability="power"``: an ``fdatasync`` per commit, a synchronous database."""
        self._apply_interval = apply_interval
        # SQLite counts milliseconds in a C int: longer (inf: wait for ever) is about 24 days
        self.busy_timeout = min(busy_timeout, _LONGEST_BUSY_TIMEOUT)
        in_memory = str(path) == ":memory:"
        self.pending_dir = None if in_memory else path.with_name(path.name + "-pending")
        """Where appends are committed before they reach the database (``None``: in memory)."""
        self.log = None if self.pending_dir is None else PendingLog(self.pending_dir)
        """This store's pending file (``None``: in memory, every append a transaction)."""
        self.read_only = False
        """Whether the file could only be opened for reading (known once it is opened)."""
        self.broken: StoreError | None = None
        """Why pending records can no longer reach the database, once they cannot."""
        self.closed = False
        self.verified = False
        self.periodic: list[Periodic] = []
        """More work for the store's thread (the leases' heartbeat)."""
        self._applier: Applier | None = None
        self.worker = Worker(f"tether-sqlite:{path.name}", self._open, self._tick)
        self._lock = threading.Lock()
        self.pending: list[Record] = []
        """Records in this store's pending files, not yet in the database (oldest first)."""
        self._first_pending_at = 0.0
        self._busy_since: float | None = None
        self._sync_waiters: list[tuple[int, asyncio.Future[None]]] = []

    # -- the store's thread -------------------------------------------------------------

    def _open(self) -> sqlite3.Connection:
        db, read_only = connect(self.path, busy_timeout=self.busy_timeout, power=self.power)
        self.read_only = read_only
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
        """Apply this store's pending records when due, then the periodic work; next due."""
        now = time.monotonic()
        delays: list[float] = []
        if self.pending and self.broken is None:
            due = self._first_pending_at + self._apply_interval
            if now >= due:
                applied = self._apply_own(connection())
                if self.pending and self.broken is None:  # more came, or it was busy
                    delays.append(self._apply_interval if applied else _RETRY_APPLY)
            else:
                delays.append(due - now)
        for work in self.periodic:
            delay = work(connection, now)
            if delay is not None:
                delays.append(delay)
        if self._sync_waiters:
            self._sync_log()
        return min(delays) if delays else None

    def _apply_own(self, db: sqlite3.Connection) -> bool:
        """Apply this store's pending records; whether that worked (busy: try again later)."""
        try:
            with self.briefly(db), self.transaction(db, others=False):
                pass
        except StoreBusy as exc:
            if self._busy_since is None:
                self._busy_since = time.monotonic()
                _log.warning(
                    "tether: %s; %d pending records wait in %s and are applied once it is free",
                    exc,
                    len(self.pending),
                    self.pending_dir,
                )
            return False
        except (StoreError, OSError) as exc:
            error = exc if isinstance(exc, StoreError) else os_error(exc, self.path, "applying")
            self.broken = error
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

    def verify(self, db: sqlite3.Connection) -> None:
        """Read a little of every table: a damaged or foreign file fails here, typed."""
        for table in ("events", "runs", "leases"):
            db.execute(f"SELECT * FROM {table} ORDER BY rowid DESC LIMIT 1").fetchall()
            db.execute(f"SELECT * FROM {table} LIMIT 1").fetchall()
        if str(self.path) != ":memory:" and not os.access(self.path, os.W_OK):
            self.read_only = True  # read-only file, medium or immutable: found before a run
        self.verified = True

    def _sync_log(self) -> None:
        assert self.log is not None
        try:
            through = self.log.sync()
            error: BaseException | None = None
        except OSError as exc:
            through = -1
            error = os_error(exc, self.log.directory, "syncing the pending file")
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

    # -- committing (the event loop's side) -----------------------------------------------

    def commit(self, record: Record, line: bytes, doing: str) -> int:
        """Write ``record`` (encoded as ``line``) to the pending file; its sync number."""
        log = self.log
        assert log is not None
        try:
            record.gen, number = log.write(line)
        except OSError as exc:
            raise os_error(exc, log.directory, doing) from None
        self._queue(record)
        return number

    def _queue(self, record: Record) -> None:
        with self._lock:
            pending = self.pending
            pending.append(record)
            first = len(pending) == 1
            if first:
                self._first_pending_at = time.monotonic()
        if first:
            self.worker.wake()

    async def synced(self, number: int) -> None:
        """Return once the pending file is on disk through write ``number`` (``power``)."""
        done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        with self._lock:
            self._sync_waiters.append((number, done))
        self.worker.wake()
        await done

    # -- bringing the database up to date (store's thread) ---------------------------------

    @contextmanager
    def transaction(
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
            records = list(self.pending)
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
            del self.pending[:count]
            left = self.pending[0].gen if self.pending else None
            if self.pending:
                self._first_pending_at = time.monotonic()
        log = self.log
        if log is not None:
            log.applied_below(left if left is not None else log.generation)

    def _other_logs(self) -> list[OtherLog]:
        if self.pending_dir is None:
            return []
        own: set[Path] = set() if self.log is None else self.log.paths
        return list(other_logs(self.pending_dir, own))

    def sync(self, db: sqlite3.Connection) -> None:
        """Apply this store's pending records and every other store's (store's thread)."""
        if self.read_only:
            return
        logs = self._other_logs()
        if not self.pending and not logs:
            return
        with self.transaction(db, logs=logs):
            pass

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
    def briefly(self, db: sqlite3.Connection) -> Generator[None]:
        """Wait at most a second for another process's lock (work that can be done later).

        The store's own periodic work must not sit in a lock for the whole busy timeout:
        it would hold up everything queued behind it (a close, a read).
        """
        brief = int(min(1.0, self.busy_timeout) * 1000)
        db.execute(f"PRAGMA busy_timeout = {brief}")
        try:
            yield
        finally:
            db.execute(f"PRAGMA busy_timeout = {int(self.busy_timeout * 1000)}")

    def _typed(self, exc: sqlite3.Error, doing: str) -> StoreError:
        if getattr(exc, "sqlite_errorname", "").startswith("SQLITE_READONLY"):
            self.read_only = True  # opened for writing, but the file or medium refuses
        return sqlite_error(exc, self.path, doing)

    # -- calls and checks ------------------------------------------------------------------

    async def call(self, job: Callable[[sqlite3.Connection], T]) -> T:
        """Run ``job`` on the store's thread (``sqlite3`` errors become store errors)."""
        self.check_open()

        def guarded(db: sqlite3.Connection) -> T:
            try:
                return job(db)
            except sqlite3.Error as exc:
                raise self._typed(exc, "reading or writing it") from None
            except OSError as exc:
                where = self.pending_dir or self.path
                raise os_error(exc, where, "applying pending records") from None

        return await self.worker.run(guarded)

    def check_open(self) -> None:
        """Raise ``StoreUnavailable`` once the store is closed."""
        if self.closed:
            raise StoreUnavailable(f"the run store {self.path} is closed")

    def check_writable(self) -> None:
        """Raise ``StoreWriteError`` for a store that can only be read."""
        if self.read_only:
            raise StoreWriteError(
                f"the run store {self.path} is read-only (the file or its directory cannot be "
                "written): it can be read, not written. Fix the permissions or copy it"
            )

    # -- closing ---------------------------------------------------------------------------

    async def close(self) -> None:
        """Apply what is pending, remove this store's files, stop the thread.

        A pending file is deleted only once every record in it is in the database. If the
        database cannot take them now (locked past the busy timeout, damaged, full), the
        file is kept, closed: it is durable, and the next store that opens the file applies
        it.
        """
        self.closed = True
        refused: list[StoreError] = []

        def final(db: sqlite3.Connection | None) -> None:
            if db is not None and self.pending and not self.read_only:
                try:  # briefly: what it cannot take now is durable, and applied later
                    with self.briefly(db), self.transaction(db, others=False):
                        pass
                except StoreError as exc:
                    _log.warning("tether: %s", exc)
                    if not isinstance(exc, StoreBusy):
                        refused.append(exc)
            log = self.log
            if log is not None:
                kept = log.close(keep=bool(self.pending))
                if kept:
                    _log.warning(
                        "tether: %d pending records could not reach %s yet; they are kept in "
                        "%s and applied by the next store that opens it",
                        len(self.pending),
                        self.path,
                        ", ".join(str(p) for p in kept),
                    )

        try:
            if self.pending:
                await self.worker.run(final)
            elif self.worker.started:
                await self.worker.run_if_open(final)
        finally:
            self.worker.stop()
            for _, done in self._sync_waiters:
                _settle(done, StoreUnavailable(f"the run store {self.path} was closed"))
        broken = refused[0] if refused else self.broken
        if broken is not None and self.pending_dir is not None:
            # the records are safe in the pending files, but this database cannot take them
            raise type(broken)(
                f"{broken}; the records it could not take are kept in {self.pending_dir}"
            )


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
