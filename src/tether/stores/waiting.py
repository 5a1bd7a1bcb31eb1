"""Cancelling a run that waits for a human (an answer, or approvals), through its log.

A waiting run has stopped cleanly: no process executes it, and nothing of it is in flight.
``cancel_waiting_run`` ends it as a run cancelled while it executes ends (``run.cancel()``):
under the run's lease (refused while a live process holds it: one that is continuing the
run), each call still without a result gets one saying it was not executed (``cancelled``),
then ``run_finished`` with ``status="cancelled"`` and ``ErrorInfo(type="Cancelled")`` naming
who cancelled it and why. Resuming the run afterwards changes nothing.
"""

from __future__ import annotations

from collections.abc import Sequence

from tether._internal.clock import Clock
from tether._internal.frozen import frozen
from tether.errors import UserError
from tether.events import Event, RunFinished
from tether.outcome import ErrorInfo
from tether.run.journal import Journal
from tether.run.unfinished import refuse
from tether.state import StateBuilder
from tether.stores._ending import Ended, end_under_lease
from tether.stores.base import RunStore

__all__ = ["CancelledWaiting", "cancel_waiting_run"]

_WAITS_FOR = {
    "waiting_for_user": "the user's answer",
    "waiting_for_approval": "approvals",
}


@frozen
class CancelledWaiting(Ended):
    """What ``cancel_waiting_run`` recorded (its ``run_finished`` is ``cancelled``)."""


async def cancel_waiting_run(
    store: RunStore,
    run_id: str,
    *,
    reason: str,
    by: str,
    owner: str | None = None,
    clock: Clock | None = None,
) -> CancelledWaiting:
    """End a run that waits for an answer or approvals: cancelled, for good, through its log.

    Args:
        store: The run's store.
        run_id: The run.
        reason: Why it is cancelled (recorded).
        by: Who cancels it (recorded), e.g. an API key's id.
        owner: The lease owner to take it as (default: this process, ``default_owner()``).
        clock: The clock of the events' times (default: the system's).

    Raises:
        LeaseHeld: a live process holds the run's lease (it is continuing the run).
        UserError: the run does not wait for a human (it is running, or has ended).
        RunNotFound: no such run. StoreError: the store failed; nothing was appended.
    """

    def ending(journal: Journal, state: StateBuilder, stored: Sequence[Event], held: str) -> int:
        last = stored[-1]
        assert isinstance(last, RunFinished)  # checked: it waits
        what = _WAITS_FOR[last.status]
        calls = list(state.pending.values())
        for call in calls:  # it stopped cleanly: none of them ran
            text = f"not executed: the run was cancelled while it waited for {what}"
            refuse(journal.add, call, text, "cancelled")
        who = f"{by} ({held})" if by else held
        journal.add(
            RunFinished,
            status="cancelled",
            answer=state.last_text or None,
            error=ErrorInfo(
                type="Cancelled",
                message=(
                    f"cancelled by {who} while it waited for {what}: {reason or 'no reason given'}"
                ),
            ),
            usage=state.usage,
            steps=state.steps,
            tool_calls=state.tool_calls,
        )
        return len(calls)

    new, closed, warnings = await end_under_lease(
        store, run_id, check=_check_waiting, ending=ending, owner=owner, clock=clock
    )
    return CancelledWaiting(run_id=run_id, events=new, closed_calls=closed, warnings=warnings)


def _check_waiting(run_id: str, events: Sequence[Event]) -> None:
    last = events[-1] if events else None
    if isinstance(last, RunFinished) and last.status in _WAITS_FOR:
        return
    where = "is running" if not isinstance(last, RunFinished) else f"has ended ({last.status})"
    raise UserError(
        f"run {run_id} does not wait for a human: it {where}, so there is nothing to cancel "
        "here (a run executing is cancelled by the process executing it)"
    )
