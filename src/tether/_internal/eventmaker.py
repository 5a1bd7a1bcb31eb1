"""Making a run's next event in one step: its fields and the values its hash covers.

The journal makes every event of a run, and this is the hottest path of the loop. Building
one through its dataclass constructor parses the keyword arguments a second time and builds
its ``__dict__`` field by field; its hash then needs every field read back in declaration
order. Here each event class gets one generated function that takes the event's own fields,
sets the ``__dict__`` in one go (in declaration order, as the constructor would) and returns
the tuple the hash covers (``codec.hashed_fields``: every field but ``hash``) alongside.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

from tether.events import Event

__all__ = ["MAKERS", "maker"]

_BASE = ("kind", "run_id", "seq", "at", "prev_hash", "hash")

Maker = Callable[..., tuple[Event, tuple[Any, ...]]]
"""``make(run_id, seq, at, prev_hash, **fields) -> (event, hashed values)``."""

MAKERS: dict[type[Any], Maker] = {}
"""The makers generated so far, by class (the journal looks here first: one dict lookup)."""


def maker(cls: type[Event]) -> Maker:
    """The maker of events of ``cls`` (generated once per class)."""
    found = MAKERS.get(cls)
    if found is None:
        found = MAKERS[cls] = _generate(cls)
    return found


def _generate(cls: type[Any]) -> Maker:
    fields = dataclasses.fields(cls)
    names = [f.name for f in fields]
    assert tuple(names[: len(_BASE)]) == _BASE, f"{cls.__name__}: base fields out of order"
    own = fields[len(_BASE) :]
    namespace: dict[str, Any] = {"_new": object.__new__, "_set": object.__setattr__, "_cls": cls}
    namespace["_kind"] = next(f.default for f in fields if f.name == "kind")
    params: list[str] = []
    for f in own:
        if f.default is not dataclasses.MISSING:
            namespace[f"_default_{f.name}"] = f.default
            params.append(f"{f.name}=_default_{f.name}")
        elif f.default_factory is not dataclasses.MISSING:
            raise TypeError(f"{cls.__name__}.{f.name}: events take no default factories")
        else:
            params.append(f.name)
    own_names = [f.name for f in own]
    items = ", ".join(f"{n!r}: {n}" for n in own_names)
    values = ", ".join(own_names)
    signature = "run_id, seq, at, prev_hash" + (", *, " + ", ".join(params) if params else "")
    source = (
        f"def make({signature}):\n"
        "    event = _new(_cls)\n"
        "    _set(event, '__dict__', {'kind': _kind, 'run_id': run_id, 'seq': seq, 'at': at,"
        f" 'prev_hash': prev_hash, 'hash': ''{', ' + items if items else ''}}})\n"
        f"    return event, (_kind, run_id, seq, at, prev_hash{', ' + values if values else ''})\n"
    )
    exec(source, namespace)
    made: Maker = namespace["make"]
    return made
