"""``MemoryStore``: runs kept in this process's memory (tests, ephemeral runs).

Its leases follow the same rule as any store's: a lease is renewed for as long as the store
that granted it holds it (here the store lives in the holder's own process, so a held lease
with a positive TTL does not lapse until it is released), and a lease whose holder is a dead
process of this host is free at once.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from datetime import UTC, datetime

from tether.auditkey import AuditKey
from tether.events import Event
from tether.jsontypes import JsonValue
from tether.stores._appendcheck import new_events
from tether.stores._pages import check_limit
from tether.stores._runindex import index_row
from tether.stores.base import (
    Lease,
    LeaseHeld,
    RunInfo,
    RunNotFound,
    RunQuery,
    RunStore,
    StaleLease,
    alive,
)
from tether.stores.kv import KeyValueStore, KvEntry, check_key, decode_value, encode_value

__all__ = ["MemoryStore"]


class MemoryStore(RunStore, KeyValueStore):
    """A run store (and key-value store) in dicts. Fast, and gone with the process.

    Args:
        audit_key: Store a MAC under this key beside every event appended
            (``tether.auditkey``); none by default (the environment is not read).
    """

    def __init__(self, *, audit_key: AuditKey | None = None) -> None:
        self._audit_key = audit_key
        self._macs: dict[str, dict[int, str]] = {}
        self._events: dict[str, list[Event]] = {}
        self._index: dict[str, RunInfo] = {}
        self._leases: dict[str, tuple[Lease, float]] = {}  # run -> (lease, its ttl)
        self._tokens: dict[str, int] = {}
        # values kept as JSON text, so a caller's later edits cannot reach the stored copy
        self._kv: dict[str, dict[str, tuple[str, datetime]]] = {}

    async def append(
        self, run_id: str, events: Sequence[Event], *, lease: Lease | None = None
    ) -> None:
        """Append in order; re-appending stored events is a no-op."""
        new = self._add(run_id, events, lease)
        key = self._audit_key
        if new and key is not None:
            self._macs.setdefault(run_id, {}).update((e.seq, key.mac(e.hash)) for e in new)

    async def append_copied(
        self, run_id: str, events: Sequence[Event], macs: Sequence[str | None]
    ) -> None:
        """Append events written elsewhere, keeping the MACs they came with (no new ones)."""
        given = {e.seq: m for e, m in zip(events, macs, strict=True) if m is not None}
        new = self._add(run_id, events, None)
        kept = {e.seq: given[e.seq] for e in new if e.seq in given}
        if kept:
            self._macs.setdefault(run_id, {}).update(kept)

    async def read_macs(self, run_id: str) -> dict[int, str]:
        """The MACs stored beside the run's events, by seq."""
        if run_id not in self._events:
            raise RunNotFound(run_id)
        return dict(self._macs.get(run_id, {}))

    async def read_macs_page(
        self, run_id: str, *, after_seq: int = -1, limit: int
    ) -> dict[int, str]:
        """The MACs stored beside the events ``after_seq + 1`` to ``after_seq + limit``."""
        check_limit(limit)
        if run_id not in self._events:
            raise RunNotFound(run_id)
        macs = self._macs.get(run_id, {})
        first = max(after_seq, -1) + 1
        if limit < len(macs):
            return {seq: macs[seq] for seq in range(first, first + limit) if seq in macs}
        return {seq: mac for seq, mac in macs.items() if first <= seq < first + limit}

    def _add(self, run_id: str, events: Sequence[Event], lease: Lease | None) -> list[Event]:
        if lease is not None:
            current = self._tokens.get(run_id, 0)
            if lease.token != current:
                raise StaleLease(run_id, lease.token, current)
        if lease is not None:
            held, span = self._leases.get(run_id, (lease, 0.0))
            if span <= 0:  # an append proves its holder alive: from now on, renewed
                renewed = Lease(
                    run_id=run_id, owner=held.owner, token=held.token, expires_at=time.time() + 30
                )
                self._leases[run_id] = (renewed, 30.0)
        log = self._events.get(run_id)
        stored = log or []
        last = (len(stored) - 1, stored[-1].hash) if stored else None
        new = new_events(run_id, events, last, lambda seq: stored[seq].hash)
        if not new:
            return new
        if log is None:
            log = self._events[run_id] = []
        log.extend(new)
        row = index_row(self._index.get(run_id), new)
        if row is not None:
            self._index[run_id] = row
        return new

    async def read(self, run_id: str, *, after_seq: int = -1) -> list[Event]:
        """The run's events after ``after_seq``."""
        log = self._events.get(run_id)
        if log is None:
            raise RunNotFound(run_id)
        return log[max(after_seq, -1) + 1 :]

    async def read_page(self, run_id: str, *, after_seq: int = -1, limit: int) -> list[Event]:
        """At most ``limit`` of the run's events after ``after_seq``."""
        check_limit(limit)
        log = self._events.get(run_id)
        if log is None:
            raise RunNotFound(run_id)
        first = max(after_seq, -1) + 1
        return log[first : first + limit]

    async def runs(self, query: RunQuery = RunQuery()) -> list[RunInfo]:
        """Index rows, newest first."""
        rows = [r for r in self._index.values() if _matches(r, query)]
        rows.sort(key=lambda r: (r.created_at, r.run_id), reverse=True)
        return rows[: query.limit]

    async def acquire(
        self, run_id: str, owner: str, *, ttl: float | None = None, fresh: bool = False
    ) -> Lease:
        """Grant a lease with the next fencing token."""
        now = time.time()
        found = self._leases.get(run_id)
        if found is not None:
            held, span = found
            renewed = span > 0  # the holder's store (this one) renews it while it is held
            if held.owner != owner and (renewed or held.expires_at > now) and alive(held.owner):
                raise LeaseHeld(run_id, held.owner, max(held.expires_at, now + span))
        span = 30.0 if ttl is None else ttl
        token = self._tokens.get(run_id, 0) + 1
        self._tokens[run_id] = token
        lease = Lease(run_id=run_id, owner=owner, token=token, expires_at=now + span)
        self._leases[run_id] = (lease, span)
        return lease

    async def release(self, lease: Lease) -> None:
        """Drop the lease if it is still the current one."""
        found = self._leases.get(lease.run_id)
        if found is not None and found[0].token == lease.token:
            del self._leases[lease.run_id]

    async def delete(self, run_ids: Sequence[str]) -> int:
        """Forget runs."""
        count = 0
        for run_id in run_ids:
            if self._events.pop(run_id, None) is not None:
                count += 1
            self._macs.pop(run_id, None)
            self._index.pop(run_id, None)
            self._leases.pop(run_id, None)
        return count

    # -- key-value -------------------------------------------------------------------------

    async def kv_get(self, namespace: str, key: str) -> KvEntry | None:
        """The entry under ``key``, or ``None``."""
        check_key(namespace, "namespace")
        check_key(key)
        found = self._kv.get(namespace, {}).get(key)
        if found is None:
            return None
        return KvEntry(key=key, value=decode_value(found[0]), updated_at=found[1])

    async def kv_set(self, namespace: str, key: str, value: JsonValue) -> None:
        """Store ``value`` under ``key``."""
        check_key(namespace, "namespace")
        check_key(key)
        text = encode_value(value)
        self._kv.setdefault(namespace, {})[key] = (text, datetime.now(UTC))

    async def kv_delete(self, namespace: str, key: str) -> bool:
        """Remove ``key``; whether it existed."""
        check_key(namespace, "namespace")
        check_key(key)
        return self._kv.get(namespace, {}).pop(key, None) is not None

    async def kv_list(self, namespace: str, prefix: str = "", limit: int = 100) -> list[str]:
        """Keys starting with ``prefix``, in order."""
        check_key(namespace, "namespace")
        if prefix:
            check_key(prefix, "prefix")
        keys = sorted(k for k in self._kv.get(namespace, {}) if k.startswith(prefix))
        return keys[: max(limit, 0)]


def _matches(row: RunInfo, query: RunQuery) -> bool:
    return (
        (query.status is None or row.status == query.status)
        and (query.agent is None or row.agent == query.agent)
        and (query.since is None or row.created_at >= query.since)
        and (query.until is None or row.created_at < query.until)
        and (query.tag is None or query.tag in row.tags)
        and (
            query.after is None
            or (row.created_at, row.run_id) < (query.after.created_at, query.after.run_id)
        )
    )
