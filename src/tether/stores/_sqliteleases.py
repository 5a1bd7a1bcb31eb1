"""The leases a SQLite store grants and holds, renewed by heartbeat while it holds them.

A lease's fencing token only grows. The store renews the leases it holds every third of
their TTL on its own thread (``Database.periodic``), so a run whose process is alive keeps
its lease through model calls and long tools; it is taken over only when its owner is dead
(the local pid check) or its heartbeat has expired.
"""

from __future__ import annotations

import asyncio
import logging
import sqlite3
import time
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import cast

from tether._internal.leftbehind import leave_behind
from tether.errors import StoreError
from tether.stores._pendinglog import Record, record_line
from tether.stores._sqlitedb import Database
from tether.stores._sqlitetables import lease_token, stored_tail
from tether.stores.base import Lease, LeaseHeld, StaleLease, alive

__all__ = ["Held", "Leases"]

_log = logging.getLogger("tether.stores")


@dataclass(slots=True)
class Held:
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


class Leases:
    """Granting, renewing and giving up the leases of one store's database."""

    def __init__(self, db: Database, *, ttl: float) -> None:
        self._db = db
        self.ttl = ttl
        """Seconds a lease lasts without renewal, unless its ``acquire`` said otherwise."""
        self.held: dict[str, Held] = {}
        """The leases this store holds, by run id."""
        self.orphaned: dict[str, str] = {}
        """Runs whose lease was asked for by a caller that stopped waiting: to their owner."""
        self._heartbeat_at = 0.0
        db.periodic.append(self._due)

    def _hold(self, run_id: str, held: Held) -> None:
        """Hold a lease just granted; the first one starts the heartbeat's clock.

        A lease is as fresh as can be when granted: renewing it at once would be a wasted
        transaction (and would apply this store's pending records early).
        """
        if not self.held:
            self._heartbeat_at = time.monotonic()
        self.held[run_id] = held

    def mine(self, run_id: str, lease: Lease | None) -> Held | None:
        """What this store holds of ``lease``, if it granted it and holds it still."""
        held = None if lease is None else self.held.get(run_id)
        return (
            held if held is not None and lease is not None and held.token == lease.token else None
        )

    # -- the heartbeat (store's thread) ------------------------------------------------------

    def _due(self, connection: Callable[[], sqlite3.Connection], now: float) -> float | None:
        """Renew the held leases if a third of the shortest TTL has passed; next due."""
        spans = [h.ttl for h in list(self.held.values()) if h.ttl > 0]
        if not spans:
            return None
        interval = min(spans) / 3
        if now >= self._heartbeat_at + interval:
            self._heartbeat(connection())
            self._heartbeat_at = now
        return max(0.0, self._heartbeat_at + interval - time.monotonic())

    def _heartbeat(self, conn: sqlite3.Connection) -> None:
        """Renew every lease this store holds, in one transaction."""
        db = self._db
        held = list(self.held.items())
        if not held or db.read_only:
            return
        now = time.time()
        try:  # this store's own records first: a new run's lease may still be one of them
            with db.briefly(conn), db.transaction(conn, others=False):
                for run_id, lease in held:
                    if lease.lost or lease.ttl <= 0:
                        continue
                    renewed = conn.execute(
                        "UPDATE leases SET expires_at = MAX(expires_at, ?) "
                        "WHERE run_id = ? AND token = ?",
                        (now + lease.ttl, run_id, lease.token),
                    ).rowcount
                    if renewed:
                        lease.safe_until = now + lease.ttl * 2 / 3
                    else:
                        lease.lost = lease_token(conn, run_id)
        except StoreError as exc:  # busy: the leases stay valid until safe_until
            _log.warning("tether: could not renew leases in %s yet (%s)", db.path, exc)

    async def confirm(self, run_id: str, held: Held) -> None:
        """Renew a lease whose heartbeat is late (the database was busy) before appending."""
        db = self._db

        def renew(conn: sqlite3.Connection) -> None:
            now = time.time()
            if held.ttl <= 0:  # an append proves its holder alive: from now on, a heartbeat
                held.ttl = self.ttl
            with db.transaction(conn, others=False):
                renewed = conn.execute(
                    "UPDATE leases SET expires_at = MAX(expires_at, ?) WHERE run_id = ? AND token = ?",
                    (now + held.ttl, run_id, held.token),
                ).rowcount
                if not renewed:
                    held.lost = lease_token(conn, run_id)
                    raise StaleLease(run_id, held.token, held.lost)
            held.safe_until = now + held.ttl * 2 / 3

        await db.call(renew)

    # -- granting and giving up ------------------------------------------------------------

    async def acquire(
        self, run_id: str, owner: str, *, ttl: float | None = None, fresh: bool = False
    ) -> Lease:
        """Grant a lease with the next fencing token (``SqliteStore.acquire``)."""
        db = self._db
        db.check_open()
        span = self.ttl if ttl is None else ttl
        if fresh and db.log is not None and run_id not in self.held:
            if not db.verified:  # once per store: a damaged file is found before a run
                await db.call(db.verify)
            if db.broken is not None:
                raise db.broken
            db.check_writable()
            now = time.time()
            grant = (owner, now + span)
            record = Record(run_id, 1, [], [], grant=grant)
            line = record_line(run_id, 1, [], grant=grant)
            db.commit(record, line, f"starting run {run_id!r}")
            self._hold(
                run_id,
                Held(token=1, owner=owner, ttl=span, tail=None, safe_until=now + span * 2 / 3),
            )
            return Lease(run_id=run_id, owner=owner, token=1, expires_at=now + span)

        def job(conn: sqlite3.Connection) -> tuple[int, tuple[int, str] | None, float]:
            db.check_writable()
            now = time.time()
            with db.transaction(conn):
                held = conn.execute(
                    "SELECT owner, token, expires_at FROM leases WHERE run_id = ?", (run_id,)
                ).fetchone()
                token = 1
                if held is not None:
                    holder, current, expires = cast(tuple[str | None, int, float], tuple(held))
                    if holder is not None and expires > now and alive(holder):
                        # The same owner may take it again, but only through the store that
                        # granted it: another store could not fence the first one's appends.
                        mine = run_id in self.held and self.held[run_id].token == current
                        orphan = self.orphaned.get(run_id) == holder  # granted to no one here
                        if (holder != owner or not mine) and not orphan:
                            raise LeaseHeld(run_id, holder, expires)
                    token = current + 1
                conn.execute(
                    "INSERT OR REPLACE INTO leases (run_id, owner, token, expires_at) "
                    "VALUES (?, ?, ?, ?)",
                    (run_id, owner, token, now + span),
                )
                tail = stored_tail(conn, run_id)  # complete: every pending record is applied
            return token, tail, now

        work = asyncio.ensure_future(db.call(job))
        try:
            token, tail, now = await asyncio.shield(work)
        except asyncio.CancelledError:  # the grant may land anyway: then it is given back
            self.orphaned[run_id] = owner
            work.add_done_callback(partial(self._give_back, run_id, owner, span))
            raise
        self.orphaned.pop(run_id, None)  # (kept until then: the release may not be applied)
        self._hold(
            run_id,
            Held(token=token, owner=owner, ttl=span, tail=tail, safe_until=now + span * 2 / 3),
        )
        db.worker.wake()  # the heartbeat now has a lease to renew
        return Lease(run_id=run_id, owner=owner, token=token, expires_at=now + span)

    def _give_back(
        self,
        run_id: str,
        owner: str,
        span: float,
        done: asyncio.Future[tuple[int, tuple[int, str] | None, float]],
    ) -> None:
        """A lease granted to a caller that stopped waiting for it: released at once.

        It was held, by nobody, until it expired: the same run id again got ``LeaseHeld``.
        """
        if done.cancelled() or done.exception() is not None or run_id in self.held:
            return  # not granted, or taken again meanwhile (a newer token): nothing to give
        token, tail, now = done.result()
        self._hold(
            run_id,
            Held(token=token, owner=owner, ttl=span, tail=tail, safe_until=now + span * 2 / 3),
        )
        lease = Lease(run_id=run_id, owner=owner, token=token, expires_at=now + span)
        leave_behind(asyncio.ensure_future(self.release(lease)))

    async def release(self, lease: Lease) -> None:
        """Drop the lease if it is still current (``SqliteStore.release``)."""
        db = self._db
        held = self.held.get(lease.run_id)
        if held is not None and held.token == lease.token:
            del self.held[lease.run_id]
            if db.log is not None and not db.closed:
                record = Record(lease.run_id, lease.token, [], [], release=True)
                line = record_line(lease.run_id, lease.token, [], release=True)
                db.commit(record, line, f"releasing the lease of run {lease.run_id!r}")
                return
        db.check_open()

        def job(conn: sqlite3.Connection) -> None:
            if db.read_only:
                return
            with db.transaction(conn, others=False):
                conn.execute(
                    "UPDATE leases SET owner = NULL, expires_at = 0 WHERE run_id = ? AND token = ?",
                    (lease.run_id, lease.token),
                )

        await db.call(job)
