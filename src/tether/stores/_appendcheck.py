"""What every run store checks before it appends: one rule, one place."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from tether._internal.sealed import trusted
from tether.codec import compute_hash
from tether.events import GENESIS_HASH, Event
from tether.stores.base import StoreConflict

__all__ = ["check_link", "new_events"]


def check_link(run_id: str, event: Event, previous_hash: str | None) -> None:
    """Refuse an event that does not chain to its predecessor or whose hash is not its own.

    A store must never accept what it could not read back as an intact log.
    """
    expected = GENESIS_HASH if previous_hash is None else previous_hash
    if event.prev_hash != expected:
        raise StoreConflict(
            f"run {run_id!r}: the event at seq {event.seq} does not chain to the one before",
            run_id=run_id,
        )
    if not trusted(event) and compute_hash(event) != event.hash:
        raise StoreConflict(
            f"run {run_id!r}: the event at seq {event.seq} does not match its hash", run_id=run_id
        )


def new_events(
    run_id: str,
    events: Sequence[Event],
    last: tuple[int, str] | None,
    stored_hash: Callable[[int], str | None],
) -> list[Event]:
    """The events of an append that the store does not have yet.

    Args:
        run_id: The run appended to.
        events: The append, in order.
        last: The stored log's last ``(seq, hash)``; ``None`` for an empty log.
        stored_hash: The hash stored at a seq (for re-appended events).

    Raises:
        StoreConflict: an event of another run, a different event at a stored seq (a fork),
            a gap, or an event that does not chain or does not match its hash.
    """
    expected = 0 if last is None else last[0] + 1
    previous_hash = None if last is None else last[1]
    # The common case, checked cheaply: events this process sealed, continuing the log.
    chained = GENESIS_HASH if previous_hash is None else previous_hash
    for event in events:
        if event.seq != expected or event.prev_hash != chained or not trusted(event):
            break
        if event.run_id != run_id:
            break
        expected += 1
        chained = event.hash
    else:
        return list(events)
    expected = 0 if last is None else last[0] + 1
    new: list[Event] = []
    for event in events:
        if event.run_id != run_id:
            raise StoreConflict(
                f"event of run {event.run_id!r} appended to run {run_id!r}", run_id=run_id
            )
        if event.seq < expected and not new:
            if stored_hash(event.seq) != event.hash:
                raise StoreConflict(
                    f"run {run_id!r} already has a different event at seq {event.seq}",
                    run_id=run_id,
                )
            continue  # already stored: an idempotent re-append
        if event.seq != expected:
            raise StoreConflict(
                f"run {run_id!r}: expected seq {expected}, got {event.seq} (a gap)", run_id=run_id
            )
        check_link(run_id, event, previous_hash)
        new.append(event)
        previous_hash = event.hash
        expected += 1
    return new
