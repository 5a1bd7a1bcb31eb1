"""Making a run's next event in one step: its fields and the values its hash covers.

The journal makes every event of a run, and this is the hottest path of the loop. Building
one through its dataclass constructor parses the keyword arguments a second time and builds
its ``__dict__`` field by field; its hash then needs every field read back in declaration
order. Here each event class gets one generated function that takes the event's own fields,
sets its slots and returns the tuple the hash covers (``codec.hashed_fields``: every field
but ``hash``) alongside, and the tuple of the fields the redaction probe looks at. A second
generated function turns the hashed values and the hash into the event's body (the dict
``orjson`` would make of it), for a store to encode without walking the slots.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

from tether.events import Event, late_fields

__all__ = ["BODIES", "MAKERS", "NOT_SCANNED", "body", "maker"]

_BASE = ("kind", "run_id", "seq", "at", "prev_hash", "hash")

NOT_SCANNED = frozenset(
    {
        *_BASE,
        "call_id",
        "request_digest",
        "spec_digest",
        "arguments_hash",
        "of_seq",
        "step",
        "usage",
        "latency_s",
        "final",
        "duration_s",
        "is_error",
        "synthetic",
        "decision",
        "approved",
        "attempt",
        "will_retry",
        "transient",
        "retry_in_s",
        "limits",
        "used",
        "maximum",
        "ask_for_answer",
        "tokens_before",
        "tokens_after",
        "count",
        "fields",
        "kinds",
        "untrusted",
    }
)
"""Fields that hold only tether's own identifiers, numbers, times and hashes: the redaction
probe never looks at them (numbers would look like phone numbers to it)."""

Maker = Callable[..., tuple[Event, tuple[Any, ...], tuple[Any, ...]]]
"""``make(run_id, seq, at, prev_hash, **fields) -> (event, hashed values, scanned values)``:
the scanned values are those of the fields that may hold outside text."""

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
    namespace: dict[str, Any] = {"_new": object.__new__, "_cls": cls}
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
    late = late_fields(cls)
    for name in names:  # the slot descriptors: set directly (the class refuses setattr)
        namespace[f"_set_{name}"] = getattr(cls, name).__set__
    sets = "".join(f"    _set_{n}(event, {n})\n" for n in ("kind", *_BASE[1:5], *own_names))
    values = ", ".join(n for n in own_names if n not in late)
    extra = ""  # late fields: hashed up to the last one that is set (``events.LATE``)
    if late:
        assert own_names[-len(late) :] == list(late), f"{cls.__name__}: late fields last"
        choices = "".join(
            f"({', '.join(late[: k + 1])},) if {late[k]} is not None else "
            for k in reversed(range(len(late)))
        )
        extra = f" + ({choices}())"
    scanned = "".join(f"{n}, " for n in own_names if n not in NOT_SCANNED)
    signature = "run_id, seq, at, prev_hash" + (", *, " + ", ".join(params) if params else "")
    source = (
        f"def make({signature}):\n"
        "    event = _new(_cls)\n"
        "    kind = _kind\n"
        f"{sets}"
        "    _set_hash(event, '')\n"
        f"    return event, (_kind, run_id, seq, at, prev_hash{', ' + values if values else ''})"
        f"{extra}, ({scanned})\n"
    )
    exec(source, namespace)
    made: Maker = namespace["make"]
    return made


Body = Callable[[tuple[Any, ...], str], dict[str, Any]]
"""``body(hashed values, hash) -> the event as a dict``, in field order: what
``orjson.dumps(event)`` would encode, without orjson walking a slotted dataclass."""

BODIES: dict[type[Any], Body] = {}
"""The body builders generated so far, by class."""


def body(cls: type[Event]) -> Body:
    """The body builder of events of ``cls`` (generated once per class)."""
    found = BODIES.get(cls)
    if found is None:
        names = [f.name for f in dataclasses.fields(cls)]
        late = late_fields(cls)
        items = ", ".join(
            f"{n!r}: digest"
            if n == "hash"
            else f"{n!r}: (h[{i - 1}] if len(h) > {i - 1} else None)"
            if n in late
            else f"{n!r}: h[{i - (i > 5)}]"
            for i, n in enumerate(names)
        )
        namespace: dict[str, Any] = {}
        exec(f"def body(h, digest):\n    return {{{items}}}\n", namespace)
        found = BODIES[cls] = namespace["body"]
    return found
