"""Retention: delete runs older than a TTL or beyond the newest N, per agent.

A run whose status is ``running`` is never deleted (it may be live; a crashed one is
resumed or failed first). Before deleting, ``prune`` takes each run's lease, so a run that a
live process owns (for example one being resumed right now) is skipped as well.
"""

from __future__ import annotations

import contextlib
import re
from collections import defaultdict
from datetime import UTC, datetime, timedelta

from tether.errors import ConfigError
from tether.stores.base import Lease, LeaseHeld, RunInfo, RunQuery, RunStore, default_owner

__all__ = ["parse_age", "prune"]

_ALL = 1 << 62
"""A ``RunQuery.limit`` that lists every run."""

_UNITS = {"s": "seconds", "m": "minutes", "h": "hours", "d": "days", "w": "weeks"}
_AGE = re.compile(r"(\d+)\s*([smhdw])", re.IGNORECASE)
_PRUNE_LEASE_TTL = 60.0


_MAX_AGE = timedelta(days=36_500)
"""The longest age a command takes (a hundred years)."""


def parse_age(text: str) -> timedelta:
    """Parse an age such as ``"30d"``, ``"12h"``, ``"90m"``, ``"45s"`` or ``"2w"``.

    Args:
        text: A whole number followed by one unit: s, m, h, d or w.

    Returns:
        The age as a ``timedelta``.

    Raises:
        ConfigError: (a ``ValueError``) the text is not such an age.
    """
    match = _AGE.fullmatch(text.strip())
    if match is None:
        raise ConfigError(
            f"{text!r} is not an age: write a whole number and a unit, s, m, h, d or w "
            "(e.g. '30d', '12h', '90m', '45s', '2w')"
        )
    amount, unit = match.groups()
    try:
        age = timedelta(**{_UNITS[unit.lower()]: int(amount)})
    except OverflowError:
        age = _MAX_AGE + _MAX_AGE
    if age > _MAX_AGE:  # older than that, nothing was stored: and a date before it overflows
        raise ConfigError(f"{text!r} is too long an age: give at most {_MAX_AGE.days}d")
    return age


async def prune(
    store: RunStore,
    *,
    older_than: timedelta | None = None,
    keep_last: int | None = None,
    agent: str | None = None,
    now: datetime | None = None,
    dry_run: bool = False,
) -> list[str]:
    """Delete runs created more than ``older_than`` ago and/or beyond the newest ``keep_last``.

    A run is deleted if it meets either given criterion. ``keep_last`` counts per agent:
    each agent keeps its newest ``keep_last`` runs (with ``agent``, only that agent's runs
    are considered at all). Runs with status ``running``, and runs whose lease a live owner
    holds, are never deleted; they still count among the newest.

    Args:
        store: The store to prune.
        older_than: Delete runs created before ``now - older_than``.
        keep_last: Keep only the newest ``keep_last`` runs of each agent.
        agent: Only prune this agent's runs.
        now: The current time (timezone-aware; default: now, UTC).
        dry_run: Delete nothing; return the runs that would be deleted.

    Returns:
        The ids of the runs deleted (or, with ``dry_run``, that would be), newest first.

    Raises:
        ConfigError: neither ``older_than`` nor ``keep_last`` was given, or one is negative,
            or ``now`` is naive.
    """
    if older_than is None and keep_last is None:
        raise ConfigError(
            "prune needs older_than and/or keep_last; without either it would delete nothing"
        )
    if older_than is not None and older_than < timedelta(0):
        raise ConfigError(f"older_than must not be negative, got {older_than}")
    if keep_last is not None and keep_last < 0:
        raise ConfigError(f"keep_last must be 0 or more, got {keep_last}")
    if now is None:
        now = datetime.now(UTC)
    elif now.tzinfo is None:
        raise ConfigError("now must be timezone-aware, e.g. datetime.now(UTC)")
    rows = await store.runs(RunQuery(agent=agent, limit=_ALL))
    doomed = _select(rows, None if older_than is None else now - older_than, keep_last)
    if dry_run or not doomed:
        return doomed
    return await _delete_unowned(store, doomed)


def _select(rows: list[RunInfo], cutoff: datetime | None, keep_last: int | None) -> list[str]:
    """The ids of ``rows`` (newest first) that the criteria condemn, ``running`` ones kept."""
    seen: defaultdict[str, int] = defaultdict(int)
    doomed: list[str] = []
    for row in rows:
        rank = seen[row.agent]
        seen[row.agent] = rank + 1
        too_old = cutoff is not None and row.created_at < cutoff
        too_many = keep_last is not None and rank >= keep_last
        if (too_old or too_many) and row.status != "running":
            doomed.append(row.run_id)
    return doomed


async def _delete_unowned(store: RunStore, run_ids: list[str]) -> list[str]:
    """Lease each run (skipping those a live owner holds), then delete the leased ones."""
    owner = default_owner()
    leases: list[Lease] = []
    try:
        for run_id in run_ids:
            try:
                leases.append(await store.acquire(run_id, owner, ttl=_PRUNE_LEASE_TTL))
            except LeaseHeld:
                continue
        leased = [lease.run_id for lease in leases]
        await store.delete(leased)
    except BaseException:
        for lease in leases:  # let their owners-to-be in at once rather than after the TTL
            with contextlib.suppress(Exception):
                await store.release(lease)
        raise
    return leased
