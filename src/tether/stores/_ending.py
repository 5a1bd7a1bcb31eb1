"""Ending a run that no process executes, for good, through its log, under its lease.

``abandon_run`` (a run a dead process left) and ``cancel_waiting_run`` (a run waiting for a
human) both end a run here: check the log, take the run's lease (refused while a live owner
holds it), read the whole log again under it (the last owner's last events too), check it
again, build the ending as the engine builds events (the hash chain continues the stored
log; secrets are redacted), append it under the lease, and give the lease back.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from tether._internal.clock import Clock
from tether._internal.frozen import frozen
from tether.errors import StoreError
from tether.events import Event
from tether.policy.redaction import Redactor
from tether.run.journal import Journal
from tether.state import StateBuilder
from tether.stores.base import RunStore, default_owner

__all__ = ["Check", "Ended", "Ending", "end_under_lease"]


@frozen
class Ended:
    """What ending a run here recorded (``Abandoned``, ``CancelledWaiting``)."""

    run_id: str
    """The run."""
    events: tuple[Event, ...]
    """The events appended: the calls' results, then ``run_finished``."""
    closed_calls: int
    """How many calls were left without a result (each got one)."""
    warnings: tuple[str, ...] = ()
    """What went wrong after the ending was stored (the lease could not be released)."""


Check = Callable[[str, Sequence[Event]], None]
"""Raises if the run (its id, its stored log) may not be ended so."""

Ending = Callable[[Journal, StateBuilder, Sequence[Event], str], int]
"""Adds the ending to the journal (the log loaded, its fold, the log, the lease's owner);
returns how many calls it gave a result."""


async def end_under_lease(
    store: RunStore,
    run_id: str,
    *,
    check: Check,
    ending: Ending,
    owner: str | None,
    clock: Clock | None,
) -> tuple[tuple[Event, ...], int, tuple[str, ...]]:
    """End ``run_id`` under its lease: the events appended, the calls closed, warnings.

    Raises:
        LeaseHeld: the run's owner is alive (another process executes it).
        RunNotFound: no such run. StoreError: the store failed; nothing was appended.
        Whatever ``check`` raises, before anything is appended.
    """
    check(run_id, await store.read(run_id))
    lease = await store.acquire(run_id, owner or default_owner())
    try:
        stored = await store.read(run_id)  # the whole log: the last owner's too
        check(run_id, stored)
        state = StateBuilder()
        journal = Journal(run_id, clock=clock or Clock(), on_event=state.apply, redactor=Redactor())
        journal.load(stored)
        closed = ending(journal, state, stored, lease.owner)
        new = journal.events[len(stored) :]
        await store.append(run_id, new, lease=lease)
    except BaseException as exc:
        try:
            await store.release(lease)
        except StoreError as also:  # the first failure is the one to report; the lease
            exc.add_note(f"the lease could not be released either: {also}")  # lapses anyway
        raise
    warnings: tuple[str, ...] = ()
    try:
        await store.release(lease)
    except StoreError as exc:  # the ending is stored; the lease lapses once this process ends
        warnings = (f"the run's lease could not be released ({exc})",)
    return tuple(new), closed, warnings
