"""The arguments of calls that hold a secret and wait for approval: in memory, never stored.

The log keeps a call's arguments redacted, and an approved call runs from the log, so a
call that needs a password could never be approved. Instead, the real arguments wait here,
in this process's memory only, keyed by run and call, until the approved call takes them.
If the process ends first, they are gone: the approved call then does not run and says
that its arguments must be given again (``Approval.approve(pending, arguments=...)``).
"""

from __future__ import annotations

import threading
from collections import OrderedDict

from tether.jsontypes import JsonObject

__all__ = ["clear", "holds", "keep", "take"]

_MAX = 10_000
"""Calls held at most (the oldest go first): a bound on what a process keeps."""

_held: OrderedDict[tuple[str, str], JsonObject] = OrderedDict()
_lock = threading.Lock()


def keep(run_id: str, call_id: str, arguments: JsonObject) -> None:
    """Hold the real ``arguments`` of a call that waits for approval."""
    with _lock:
        _held[(run_id, call_id)] = arguments
        _held.move_to_end((run_id, call_id))
        while len(_held) > _MAX:
            _held.popitem(last=False)


def holds(run_id: str, call_id: str) -> bool:
    """Whether this process holds the call's real arguments."""
    return (run_id, call_id) in _held


def take(run_id: str, call_id: str) -> JsonObject | None:
    """The call's real arguments, once (``None``: not held here)."""
    with _lock:
        return _held.pop((run_id, call_id), None)


def clear() -> None:
    """Forget every held call (what ending the process does)."""
    with _lock:
        _held.clear()
