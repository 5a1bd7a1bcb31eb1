"""The run store port: runs' event logs, an index of runs, and leases with fencing tokens.

A store keeps each run's events in ``seq`` order. ``append`` is the commit point: when it
returns, the events are durable (to the backend's promise). Appending events that are
already there (same ``seq``, same ``hash``) is a no-op, so a retried append is safe; a
different event at a taken ``seq``, or a gap, is refused.

One process owns a run at a time. ``acquire`` grants a lease with a fencing token that grows
with every grant; ``append`` with a lease is refused once a newer lease exists, so a stale
owner (one that paused, lost its lease and came back) can never commit.
"""

from __future__ import annotations

import os
import socket
from abc import ABC, abstractmethod
from collections.abc import AsyncGenerator, Sequence
from datetime import datetime
from typing import Literal, TypeAlias

from tether._internal.frozen import frozen
from tether.errors import (
    LeaseHeld,
    RunNotFound,
    StaleLease,
    StoreConflict,
    StoreWriteError,
)
from tether.events import Event
from tether.outcome import RunStatus
from tether.stores._pages import check_limit
from tether.usage import Usage

__all__ = [
    "Lease",
    "LeaseHeld",
    "RunIndexStatus",
    "RunInfo",
    "RunNotFound",
    "RunPosition",
    "RunQuery",
    "RunStore",
    "StaleLease",
    "StoreConflict",
    "StoreWriteError",
    "alive",
    "default_owner",
]

RunIndexStatus: TypeAlias = Literal["running"] | RunStatus
"""A run's status in the index: ``running`` until its log has a ``run_finished``."""


@frozen
class Lease:
    """The right to append to a run, until ``expires_at`` (Unix seconds)."""

    run_id: str
    """The run."""
    owner: str
    """Who holds it (``host:pid:random`` by default)."""
    token: int
    """The fencing token: grows with every grant for this run."""
    expires_at: float
    """When the lease lapses unless renewed (appends renew it)."""


@frozen
class RunInfo:
    """One row of the runs index."""

    run_id: str
    """The run's id."""
    agent: str
    """The agent's name."""
    goal: str
    """The task."""
    status: RunIndexStatus
    """``running`` or how the run ended (or waits)."""
    created_at: datetime
    """When it started."""
    updated_at: datetime
    """When its last event was recorded."""
    usage: Usage
    """Tokens and cost so far."""
    steps: int
    """Model turns so far."""
    events: int
    """Events in its log."""
    parent_run_id: str | None = None
    """The run that started this one."""
    tags: tuple[str, ...] = ()
    """Labels."""


@frozen
class RunPosition:
    """Where a run stands in the runs index's order, newest first: when it began, then its id.

    A run's position never changes, so a listing resumed after one (``RunQuery.after``)
    neither repeats nor skips a run, however many begin meanwhile: those come before it.
    """

    created_at: datetime
    """When the run started (timezone-aware)."""
    run_id: str
    """Its id: among runs started at the same instant, the greater id comes first."""

    @classmethod
    def of(cls, info: RunInfo) -> RunPosition:
        """The position of an index row (the last of a page: where the next page begins)."""
        return cls(created_at=info.created_at, run_id=info.run_id)


@frozen
class RunQuery:
    """Which runs to list; newest first."""

    status: RunIndexStatus | None = None
    """Only runs with this status."""
    agent: str | None = None
    """Only runs of this agent."""
    since: datetime | None = None
    """Only runs created at or after this time."""
    until: datetime | None = None
    """Only runs created before this time."""
    limit: int = 100
    """At most this many."""
    tag: str | None = None
    """Only runs with this tag."""
    after: RunPosition | None = None
    """Only runs after this position, newest first (the next page after a page's last run)."""


def default_owner() -> str:
    """An owner id naming this process: ``host:pid:start:random``.

    ``start`` is when the process started (in the kernel's clock ticks since boot, where it
    can be read), so that another process given the same pid later is not taken for it.
    """
    return f"{_this_process()}:{os.urandom(3).hex()}"


_process: tuple[int, str] = (0, "")


def _this_process() -> str:
    """``host:pid:start`` of this process, read once (again after a fork: a new pid)."""
    global _process
    pid = os.getpid()
    if _process[0] != pid:
        _process = (pid, f"{socket.gethostname()}:{pid}:{_start_time(pid)}")
    return _process[1]


def alive(owner: str) -> bool:
    """Whether a lease holder may still be running.

    An owner of this host (``host:pid[:start]:…``) whose process has gone away, or is a
    zombie, or whose pid now names another process, holds nothing: its run can be taken
    over at once after a crash instead of waiting for the lease to lapse. An owner this
    cannot check (another host, another format) is taken to be alive until its lease lapses.
    """
    host, _, rest = owner.partition(":")
    parts = rest.split(":")
    if host != socket.gethostname() or not parts[0].isdigit():
        return True
    pid = int(parts[0])
    status = _proc_stat(pid)
    if status is None:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return False
        except PermissionError:
            return True
        return True
    state, started = status
    if state in ("Z", "X"):
        return False
    recorded = parts[1] if len(parts) >= 3 else ""
    return not (recorded.isdigit() and started and recorded != started)


def _proc_stat(pid: int) -> tuple[str, str] | None:
    """A process's state letter and start time from ``/proc`` (``("X", "")`` if gone)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            text = fh.read().decode("ascii", "replace")
    except FileNotFoundError:
        return ("X", "") if os.path.isdir("/proc/self") else None
    except OSError:
        return None
    fields = text.rpartition(")")[2].split()
    if len(fields) < 20:
        return None
    return fields[0], fields[19]


def _start_time(pid: int) -> str:
    status = _proc_stat(pid)
    return status[1] if status is not None and status[1] else "0"


class RunStore(ABC):
    """Where runs live. Backends: in-memory, SQLite (the embedded default)."""

    @abstractmethod
    async def append(
        self, run_id: str, events: Sequence[Event], *, lease: Lease | None = None
    ) -> None:
        """Append events to a run's log, in order, atomically (all or none).

        Raises:
            StoreConflict: the events do not continue the stored log.
            StaleLease: ``lease`` has been replaced by a newer one.
        """

    @abstractmethod
    async def read(self, run_id: str, *, after_seq: int = -1) -> list[Event]:
        """A run's events with ``seq > after_seq``, in order.

        Raises:
            RunNotFound: no such run.
        """

    @abstractmethod
    async def runs(self, query: RunQuery = RunQuery()) -> list[RunInfo]:
        """The runs index, newest first."""

    @abstractmethod
    async def acquire(
        self, run_id: str, owner: str, *, ttl: float | None = None, fresh: bool = False
    ) -> Lease:
        """Take (or renew, for the same owner) the run's lease.

        ``fresh``: the caller made the run id up just now, so no process can know it yet; a
        store may then grant the first lease without asking anyone (it must still make the
        grant durable before the run's first append is).

        The store renews a lease it granted (a heartbeat) for as long as it holds it, until
        ``release``: a run keeps its lease through long model calls and tools. A lease is
        free once its holder is known dead (a process of this host that is gone) or it was
        not renewed for ``ttl`` seconds (the store's default if ``None``; ``ttl <= 0`` grants
        a lease that has lapsed already and is never renewed, for tests).

        Raises:
            LeaseHeld: another owner holds the lease and is alive.
        """

    @abstractmethod
    async def release(self, lease: Lease) -> None:
        """Give the lease up (a no-op if it was already replaced)."""

    @abstractmethod
    async def delete(self, run_ids: Sequence[str]) -> int:
        """Delete runs and their logs; returns how many existed."""

    async def read_page(self, run_id: str, *, after_seq: int = -1, limit: int) -> list[Event]:
        """At most ``limit`` of a run's events with ``seq > after_seq``, in order.

        A long run read page by page (each page's last seq the next ``after_seq``) is never
        held whole. The backends read only the page; this default, for a store that cannot,
        reads what follows ``after_seq`` and keeps the page.

        Raises:
            RunNotFound: no such run.
            UserError: ``limit`` is not positive.
        """
        check_limit(limit)
        return (await self.read(run_id, after_seq=after_seq))[:limit]

    async def read_encoded(self, run_id: str) -> list[bytes]:
        """A run's events as stored (their JSON), unchecked: what an audit verifies.

        Raises:
            RunNotFound: no such run.
        """
        from tether.codec import encode_event

        return [encode_event(e) for e in await self.read(run_id)]

    async def read_encoded_pages(self, run_id: str, *, limit: int) -> AsyncGenerator[list[bytes]]:
        """``read_encoded`` in pages of at most ``limit`` events, read as they are asked for.

        The pages end with the first that is short: together they are what ``read_encoded``
        returns (a run that goes on meanwhile: what it had by the last page), never held
        whole. This default encodes ``read_page``'s events.

        Raises:
            RunNotFound: no such run (at the first page).
            UserError: ``limit`` is not positive.
        """
        from tether.codec import encode_event

        after = -1
        while True:
            page = await self.read_page(run_id, after_seq=after, limit=limit)
            if page:
                yield [encode_event(e) for e in page]
                after = page[-1].seq
            if len(page) < limit:
                return

    async def read_macs(self, run_id: str) -> dict[int, str]:
        """The MACs kept beside a run's events (``tether.auditkey``), by seq; unchecked.

        A store given an audit key stores one for every event it appends; this default is a
        store that keeps none.

        Raises:
            RunNotFound: no such run (a store may also return ``{}``).
        """
        return {}

    async def read_macs_page(
        self, run_id: str, *, after_seq: int = -1, limit: int
    ) -> dict[int, str]:
        """The MACs kept beside the events ``after_seq + 1`` to ``after_seq + limit``, by seq.

        What a page of ``read_page`` or ``read_encoded_pages`` needs beside it, so that a long
        run's MACs are never held whole either; unchecked. The backends read only these;
        this default, for a store that cannot, keeps them out of ``read_macs``.

        Raises:
            RunNotFound: no such run (a store may also return ``{}``).
            UserError: ``limit`` is not positive.
        """
        check_limit(limit)
        first = max(after_seq, -1) + 1
        macs = await self.read_macs(run_id)
        return {seq: mac for seq, mac in macs.items() if first <= seq < first + limit}

    async def append_copied(
        self, run_id: str, events: Sequence[Event], macs: Sequence[str | None]
    ) -> None:
        """Append events written elsewhere (an import) with the MACs they came with.

        The store never makes MACs for these events, even with an audit key: it did not
        write them, and a MAC made now would vouch for whatever the copy holds. ``macs``
        lines up with ``events`` (``None``: that event came without one). This default,
        for a store that keeps no MACs, appends the events and drops the MACs; a store that
        makes MACs in ``append`` must override it.

        Raises:
            StoreConflict: the events do not continue the stored log.
        """
        await self.append(run_id, events)

    async def info(self, run_id: str) -> RunInfo:
        """The index row of one run.

        Raises:
            RunNotFound: no such run.
        """
        for row in await self.runs(RunQuery(limit=1_000_000)):
            if row.run_id == run_id:
                return row
        raise RunNotFound(run_id)

    async def close(self) -> None:  # noqa: B027 - optional hook
        """Release connections and files."""
