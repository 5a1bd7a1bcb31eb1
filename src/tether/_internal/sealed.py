"""Events sealed in this process: their hash is known to match, so a store need not re-hash.

An event is frozen once sealed (only the sealing code writes its ``hash``), so an event
object that this process sealed still matches its hash when it reaches a store. The store
recognises such an object by identity; anything else (an event built, decoded or copied by
other code) is re-hashed as before. The registry keeps the most recent events alive, so an
``id`` in it cannot be reused by another object while it is there.
"""

from __future__ import annotations

from collections import deque

from tether.events import Event

__all__ = ["remember", "trusted"]

_KEEP = 8192
_by_id: dict[int, Event] = {}
_order: deque[Event] = deque()


def remember(event: Event) -> None:
    """Record that this process has just sealed ``event``."""
    _by_id[id(event)] = event
    _order.append(event)
    if len(_order) > _KEEP:
        old = _order.popleft()
        if _by_id.get(id(old)) is old:
            del _by_id[id(old)]


def trusted(event: Event) -> bool:
    """Whether ``event`` is an object this process sealed (and so matches its hash)."""
    return _by_id.get(id(event)) is event
