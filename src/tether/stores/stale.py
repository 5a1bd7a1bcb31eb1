"""Runs that stopped without an ending, and ending them for good.

A run whose process was killed stays ``running`` in the index: only its lease shows that
nobody is running it any more. ``stale_runs`` finds such runs: ``running``, and the owner of
their lease is gone (a process of this host that no longer runs), or the lease lapsed, or
it was given up (or never taken) without a ``run_finished``. Each can be continued
(``Agent.resume``, ``tether resume``) or ended with ``abandon_run``.

``abandon_run`` ends a run through its log, never by editing the index: under the run's
lease it appends what a crash recovery would record for the calls left without a result
(never decided: not executed; allowed: outcome unknown), then a ``run_finished`` that says
the run failed: abandoned, by whom and why. Events are built and sealed as the engine
builds them (the hash chain continues the stored log; secrets are redacted).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Literal, TypeAlias

from tether._internal.clock import Clock
from tether._internal.frozen import frozen
from tether.errors import UserError
from tether.events import (
    ApprovalGiven,
    Event,
    PolicyDecided,
    RunFinished,
    ToolCallUnknown,
)
from tether.messages import CONTROL_TOOLS
from tether.outcome import ErrorInfo
from tether.run.journal import Journal
from tether.run.unfinished import refuse, verdict
from tether.state import StateBuilder
from tether.stores._ending import Ended, end_under_lease
from tether.stores.base import RunInfo, RunQuery, RunStore, alive
from tether.stores.sqlite import SqliteStore

__all__ = ["ABANDONED", "Abandoned", "StaleReason", "StaleRun", "abandon_run", "stale_runs"]

ABANDONED = "Abandoned"
"""The ``ErrorInfo.type`` of a run ended by ``abandon_run``."""

_ALL = 1 << 62
"""A ``RunQuery.limit`` that lists every run."""

StaleReason: TypeAlias = Literal["owner_gone", "lease_expired", "no_owner"]
"""Why nobody runs a ``running`` run: its owner's process is gone; its lease lapsed
unrenewed; or it has no owner (the lease was given up, or never taken)."""


@frozen
class StaleRun:
    """A run that is ``running`` in the index, but that no live process runs."""

    info: RunInfo
    """Its index row (``updated_at``: when its last event was recorded)."""
    owner: str | None
    """Who held its lease last (``host:pid:start:random``); ``None``: nobody holds it."""
    reason: StaleReason
    """Why it is stale."""


@frozen
class Abandoned(Ended):
    """What ``abandon_run`` recorded (its ``run_finished`` failed, as ``Abandoned``)."""


async def stale_runs(store: SqliteStore, *, agent: str | None = None) -> list[StaleRun]:
    """The runs that are ``running`` but that no live process runs, newest first.

    A run is stale when its lease's owner is gone (a process of this host that no longer
    runs, or whose pid another process has now), when its lease lapsed unrenewed (an owner
    on another host, or a process that stopped renewing it), or when nobody holds it (given
    up, or never taken) and its log has no ``run_finished``.

    Args:
        store: The run store (leases are listed by ``SqliteStore.leases``).
        agent: Only this agent's runs.
    """
    running = await store.runs(RunQuery(status="running", agent=agent, limit=_ALL))
    if not running:
        return []
    leases = await store.leases()
    now = time.time()
    found: list[StaleRun] = []
    for info in running:
        owner, _, expires_at = leases.get(info.run_id, (None, 0, 0.0))
        reason = _stale_reason(owner, expires_at, now)
        if reason is None:
            continue
        # It may have ended between the listing and the leases (a lease is released only
        # after the run_finished is stored): only a run still running is stale.
        current = await store.info(info.run_id)
        if current.status == "running":
            found.append(StaleRun(info=current, owner=owner, reason=reason))
    return found


def _stale_reason(owner: str | None, expires_at: float, now: float) -> StaleReason | None:
    if owner is None:
        return "no_owner"
    if not alive(owner):
        return "owner_gone"
    if expires_at <= now:
        return "lease_expired"
    return None


async def abandon_run(
    store: RunStore,
    run_id: str,
    *,
    reason: str,
    by: str,
    owner: str | None = None,
    clock: Clock | None = None,
) -> Abandoned:
    """End a run that stopped without an ending: it fails, for good, through its log.

    Under the run's lease, the calls left without a result get the result a crash recovery
    gives them (a call never decided did not run: ``interrupted``; one that was allowed may
    have run: ``tool_call_unknown``; one waiting for approval or denied did not run), then
    ``run_finished`` with ``status="failed"`` and ``ErrorInfo(type="Abandoned")`` naming
    ``by``, this process and ``reason``. Resuming the run afterwards changes nothing.

    Args:
        store: The run's store.
        run_id: The run.
        reason: Why it is ended (recorded).
        by: Who ends it (recorded), e.g. a user name.
        owner: The lease owner to take it as (default: this process, ``default_owner()``).
        clock: The clock of the events' times (default: the system's).

    Raises:
        LeaseHeld: the run's owner is alive (another process runs it).
        UserError: the run has ended already, or waits for an answer or approvals.
        RunNotFound: no such run. StoreError: the store failed; nothing was appended.
    """

    def ending(journal: Journal, state: StateBuilder, stored: Sequence[Event], held: str) -> int:
        closed = _close_calls(journal, state, stored)
        who = f"{by} ({held})" if by else held
        why = reason or "no reason given"
        journal.add(
            RunFinished,
            status="failed",
            answer=state.last_text or None,
            error=ErrorInfo(
                type=ABANDONED,
                message=(
                    f"abandoned by {who}: {why}. The run had stopped without an ending (its "
                    "process crashed or was killed); it was ended for good, its calls left "
                    "without a result recorded as not executed or with an unknown outcome"
                ),
            ),
            usage=state.usage,
            steps=state.steps,
            tool_calls=state.tool_calls,
        )
        return closed

    new, closed, warnings = await end_under_lease(
        store, run_id, check=_check_abandonable, ending=ending, owner=owner, clock=clock
    )
    return Abandoned(run_id=run_id, events=new, closed_calls=closed, warnings=warnings)


def _check_abandonable(run_id: str, events: Sequence[Event]) -> None:
    last = events[-1] if events else None
    if not isinstance(last, RunFinished):
        return
    if last.status == "waiting_for_approval":
        raise UserError(
            f"run {run_id} has not stopped by a crash: it waits for approvals. Decide them "
            f"(`tether approve {run_id} --all --deny --reason ...` ends the calls unrun) "
            "instead of abandoning it"
        )
    if last.status == "waiting_for_user":
        raise UserError(
            f"run {run_id} has not stopped by a crash: it waits for the user's answer. "
            f"Answer it (`tether resume {run_id} --answer ...`) instead of abandoning it"
        )
    raise UserError(
        f"run {run_id} has ended already ({last.status}), so there is nothing to abandon: "
        f"see how it ended with `tether show {run_id}`"
    )


def _close_calls(journal: Journal, state: StateBuilder, events: Sequence[Event]) -> int:
    """Give every call without a result the one a crash recovery gives it; how many."""
    decided = {e.call_id: e for e in events if isinstance(e, PolicyDecided)}
    given = {e.call_id: e for e in events if isinstance(e, ApprovalGiven)}
    calls = list(state.pending.values())
    for call in calls:
        became, text = verdict(call, decided, given)
        if became == "not_started":  # never passed the policy, so it never ran
            refuse(
                journal.add,
                call,
                "not executed: the run stopped before this call started",
                "interrupted",
            )
        elif became == "waiting":
            refuse(
                journal.add,
                call,
                "not executed: the run was abandoned while the call waited for approval",
                "run_ended",
            )
        elif became == "denied":
            refuse(journal.add, call, text, "denied")
        elif call.name in CONTROL_TOOLS:  # tether's own: nothing outside ran
            refuse(journal.add, call, "not executed: the run was abandoned", "run_ended")
        else:
            journal.add(
                ToolCallUnknown,
                call_id=call.id,
                tool=call.name,
                reason=(
                    f"the run stopped while {call.name} was running; it may or may not have "
                    "taken effect. Do not assume either: check before calling it again"
                ),
            )
    return len(calls)
