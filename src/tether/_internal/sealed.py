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

__all__ = ["body_of", "remember", "trusted"]

_KEEP = 8192
_by_id: dict[int, tuple[Event, bytes]] = {}
_order: deque[Event] = deque()


def remember(event: Event, body: bytes = b"") -> None:
    """Record that this process has just sealed ``event`` (and, if given, its encoding)."""
    _by_id[id(event)] = (event, body)
    _order.append(event)
    if len(_order) > _KEEP:
        old = _order.popleft()
        found = _by_id.get(id(old))
        if found is not None and found[0] is old:
            del _by_id[id(old)]


def trusted(event: Event) -> bool:
    """Whether ``event`` is an object this process sealed (and so matches its hash)."""
    found = _by_id.get(id(event))
    return found is not None and found[0] is event


def body_of(event: Event) -> bytes:
    """The encoding the sealer made of ``event`` (``b""``: none; encode it yourself)."""
    found = _by_id.get(id(event))
    return found[1] if found is not None and found[0] is event else b""
