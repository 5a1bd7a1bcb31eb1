"""The JSON codec for events, the hash chain, and JSONL logs.

An event's encoding is orjson's encoding of the dataclass: one JSON object, fields in
declaration order, ``kind`` first. Its ``hash`` is the SHA-256 (hex) of the JSON array of
every other field's value in declaration order (``prev_hash`` included, so each event seals
the whole log before it). Decoding is exact, ``decode_event(encode_event(e)) == e``, which is
what lets a reader re-check every hash.

A line of a JSONL log may end with a ``"mac"`` key after the event's fields: the event's
MAC under an audit key (``tether.auditkey``), which is not part of the event.
``encode_line`` writes it, ``decode_line`` returns it, ``decode_event`` leaves it aside.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterable, Iterator
from contextlib import ExitStack
from dataclasses import fields
from functools import cache
from operator import attrgetter
from pathlib import Path
from typing import TYPE_CHECKING, Any, BinaryIO, TypeVar, cast

import orjson

from tether._internal.sealed import remember
from tether.errors import BrokenChain, EmptyLog, LogError, UnknownEventKind
from tether.events import EVENT_TYPES, GENESIS_HASH, Event, late_fields
from tether.jsontypes import JsonValue

if TYPE_CHECKING:
    from pydantic import TypeAdapter

__all__ = [
    "MAX_LINE_BYTES",
    "canonical_json",
    "compute_hash",
    "decode_event",
    "decode_line",
    "encode_event",
    "encode_line",
    "event_to_dict",
    "hashed_fields",
    "iter_jsonl",
    "iter_jsonl_lines",
    "kept",
    "read_jsonl",
    "seal",
    "verify_chain",
    "write_jsonl",
]

E = TypeVar("E", bound=Event)

MAX_LINE_BYTES = 16 * 1024 * 1024
"""The longest line (one event, its line ending not counted) a JSONL reader accepts: 16 MiB.

Readers stop at a longer line with a ``LogError`` instead of holding it in memory: tether
never writes such an event unless a tool result escaped every size limit, so the line is
corrupt or the file is not a run's log. Every reader takes ``max_line_bytes`` to read a
genuine log with larger events.
"""

_sha256 = hashlib.sha256
_dumps = orjson.dumps


def encode_event(event: Event) -> bytes:
    """The canonical JSON encoding of an event (one line, no trailing newline)."""
    return _dumps(event)


def encode_line(event: Event, mac: str | None) -> bytes:
    """A JSONL line's content: the event's encoding, then its MAC (if any) as ``"mac"``."""
    encoded = _dumps(event)
    if mac is None:
        return encoded
    return b"".join((encoded[:-1], b',"mac":', _dumps(mac), b"}"))


def kept(data: bytes) -> bytes:
    """``data`` in a buffer of its own size, for bytes that are kept (not used and dropped).

    orjson (3.12 and later) returns small outputs in a buffer of about 4 KiB; bytes that a
    store holds in memory, thousands at a time, would each keep that much (measured here: a
    process committing 1,000 concurrent runs to SQLite peaked at 450 MiB).
    """
    return b"".join((data, b""))


def event_to_dict(event: Event) -> dict[str, JsonValue]:
    """The event as plain JSON data (for rendering and comparison)."""
    return cast(dict[str, JsonValue], orjson.loads(_dumps(event)))


def canonical_json(value: object) -> bytes:
    """Deterministic JSON for hashing values whose key order is not meaningful."""
    return _dumps(value, option=orjson.OPT_SORT_KEYS)


_hashed_fields: dict[type[Any], Callable[[Any], tuple[Any, ...]]] = {}


def hashed_fields(cls: type[Any]) -> Callable[[Any], tuple[Any, ...]]:
    """The getter of an event class's hashed field values (every field but ``hash``).

    Late fields (``events.LATE``) are hashed only when one of them is set.
    """
    getter = _hashed_fields.get(cls)
    if getter is None:
        late = late_fields(cls)
        names = [f.name for f in fields(cls) if f.name != "hash" and f.name not in late]
        getter = _hashed_fields[cls] = _with_late(attrgetter(*names), late)
    return getter


def _with_late(
    values: Callable[[Any], tuple[Any, ...]], late: tuple[str, ...]
) -> Callable[[Any], tuple[Any, ...]]:
    """``values``, followed by the late fields' values up to the last one that is set.

    A log written before a late field existed, or without it set, hashes as it did: a
    field added later never changes the hash of an event that does not set it.
    """
    if not late:
        return values

    def late_values(event: Any) -> tuple[Any, ...]:
        return tuple(getattr(event, name) for name in late)

    def hashed(event: Any) -> tuple[Any, ...]:
        extra: tuple[Any, ...] = late_values(event)
        end = len(extra)
        while end and extra[end - 1] is None:
            end -= 1
        found: tuple[Any, ...] = values(event)
        return found + extra[:end] if end else found

    return hashed


def compute_hash(event: Event) -> str:
    """The hash an event must carry: SHA-256 of the JSON array of its other fields' values."""
    return _sha256(_dumps(hashed_fields(type(event))(event))).hexdigest()


def seal(event: E) -> E:
    """Set the hash of a freshly built event (built with ``hash=""``) and return it.

    The event is not yet shared with anyone; sealing it in place avoids building it twice
    on the loop's hot path.
    """
    object.__setattr__(event, "hash", compute_hash(event))
    remember(event)
    return event


@cache
def _adapter(kind: str) -> TypeAdapter[Any]:
    from pydantic import TypeAdapter

    return TypeAdapter(EVENT_TYPES[kind])


def decode_event(data: bytes | str, *, line: int | None = None) -> Event:
    """Decode one event; a malformed line or an unknown ``kind`` is a clear error.

    A line's ``"mac"`` (see ``decode_line``) is left aside.

    Raises:
        UnknownEventKind: the ``kind`` is not one this version knows.
        LogError: the line is not JSON, not an object, or does not fit its event type.
    """
    return decode_line(data, line=line)[0]


def decode_line(data: bytes | str, *, line: int | None = None) -> tuple[Event, str | None]:
    """Decode one line of a log: the event, and the MAC the line carries (``None``: none).

    Raises:
        UnknownEventKind: the ``kind`` is not one this version knows.
        LogError: the line is not JSON, not an object, does not fit its event type, or has
            a ``"mac"`` that is not a string.
    """
    try:
        raw = orjson.loads(data)
    except orjson.JSONDecodeError as exc:
        raise LogError(f"an event is not valid JSON ({exc})", line=line) from None
    if not isinstance(raw, dict):
        raise LogError("an event must be a JSON object", line=line)
    fields_ = cast(dict[str, object], raw)
    kind = fields_.get("kind")
    if not isinstance(kind, str):
        raise LogError("an event has no string 'kind' field", line=line)
    if kind not in EVENT_TYPES:
        raise UnknownEventKind(kind, line=line)
    mac: str | None = None
    if "mac" in fields_:
        found = fields_.pop("mac")
        if not isinstance(found, str):
            raise LogError("an event's 'mac' must be a string", line=line)
        mac = found
        data = _dumps(fields_)  # the event without its MAC, as the schema checks it
    from pydantic import ValidationError

    try:
        return cast(Event, _adapter(kind).validate_json(data, strict=True)), mac
    except ValidationError as exc:
        if any("recursion limit" in err["msg"] for err in exc.errors()):
            return _deep(kind, fields_, line), mac
        problems = "; ".join(
            f"{'.'.join(str(p) for p in err['loc']) or '<event>'}: {err['msg']}"
            for err in exc.errors()
        )
        raise LogError(f"a {kind!r} event does not fit its schema: {problems}", line=line) from None


def _deep(kind: str, fields_: dict[str, object], line: int | None) -> Event:
    """An event nested deeper than the strict JSON reader goes (~200 levels; orjson: 254).

    It is read from the parsed values, and taken only if it encodes to them exactly: it is
    then what the strict reader would have made of it.
    """
    from pydantic import ValidationError

    try:
        event = cast(Event, _adapter(kind).validate_python(fields_))
    except ValidationError:
        event = None
    if event is None or _dumps(event) != _dumps(fields_):
        raise LogError(f"a {kind!r} event does not fit its schema", line=line)
    return event


def verify_chain(events: Iterable[Event], *, run_id: str | None = None, start_seq: int = 0) -> None:
    """Check that events form one unbroken, untampered chain of one run.

    Raises:
        BrokenChain: at the first event that is out of order, of another run, or whose
            hash does not match its content or its predecessor.
    """
    expected_prev = GENESIS_HASH if start_seq == 0 else None
    seq = start_seq
    for event in events:
        rid = run_id if run_id is not None else event.run_id
        run_id = rid
        if event.run_id != rid:
            raise BrokenChain(
                f"event belongs to run {event.run_id!r}, not {rid!r}", seq=seq, run_id=rid
            )
        if event.seq != seq:
            raise BrokenChain(f"expected seq {seq}, found {event.seq}", seq=seq, run_id=rid)
        if expected_prev is not None and event.prev_hash != expected_prev:
            raise BrokenChain("prev_hash does not match the previous event", seq=seq, run_id=rid)
        if compute_hash(event) != event.hash:
            raise BrokenChain("the hash does not match the event's content", seq=seq, run_id=rid)
        expected_prev = event.hash
        seq += 1


def _mib(size: int) -> str:
    return f"{size / (1024 * 1024):g} MiB" if size >= 1024 * 1024 else f"{size} bytes"


_BOM = b"\xef\xbb\xbf"
"""UTF-8's byte order mark, which some editors put at the start of a file they save."""


def iter_jsonl_lines(
    source: str | Path | BinaryIO,
    *,
    name: str | None = None,
    max_line_bytes: int = MAX_LINE_BYTES,
) -> Iterator[tuple[int, bytes]]:
    """The non-blank lines of a JSONL file or binary stream, with their numbers (from 1).

    A byte order mark at the start of the file (an editor saved it so) is not part of line 1.

    A line is read with a bounded ``readline``, so memory stays within about twice
    ``max_line_bytes`` whatever the file holds.

    Args:
        source: A file's path, or a binary stream open for reading (not closed here).
        name: What to call the source in errors (default: the path, or ``the log``).
        max_line_bytes: The longest line accepted, its line ending not counted.

    Raises:
        LogError: a line is longer than ``max_line_bytes`` (the message names the source,
            the line and the limit).
    """
    with ExitStack() as stack:
        if isinstance(source, str | Path):
            fh: BinaryIO = stack.enter_context(Path(source).open("rb"))
            shown = name or str(source)
        else:
            fh, shown = source, name or "the log"
        number = 0
        while raw := fh.readline(max_line_bytes + 1):
            number += 1
            if number == 1 and raw.startswith(_BOM):  # an editor's mark, not the log's: dropped
                raw = raw[len(_BOM) :]
            if len(raw) > max_line_bytes and not raw.endswith(b"\n"):
                raise LogError(
                    f"{shown}: a line is longer than {_mib(max_line_bytes)}, the limit on one "
                    "event (tether.codec.MAX_LINE_BYTES), and was not read. The line is corrupt "
                    "or the file is not a run's log: check the file; to read a genuine log with "
                    "larger events, pass max_line_bytes to the reader",
                    line=number,
                )
            if raw.strip():
                yield number, raw


def iter_jsonl(
    source: str | Path | BinaryIO, *, max_line_bytes: int = MAX_LINE_BYTES
) -> Iterator[Event]:
    """Decode events from a JSONL file or binary stream, line by line, without checking the chain.

    Raises:
        LogError: a line is not a valid event, or is longer than ``max_line_bytes``.
    """
    for number, raw in iter_jsonl_lines(source, max_line_bytes=max_line_bytes):
        yield decode_event(raw, line=number)


def read_jsonl(
    source: str | Path | BinaryIO, *, verify: bool = True, max_line_bytes: int = MAX_LINE_BYTES
) -> list[Event]:
    """Read a run's JSONL log and (by default) verify it: one unbroken chain, not empty.

    Args:
        source: A file's path, or a binary stream open for reading.
        verify: Check the hash chain, and that there is at least one event.
        max_line_bytes: The longest line accepted (see ``MAX_LINE_BYTES``).

    Raises:
        EmptyLog: ``verify`` is set and the file holds no events (empty or blank).
        BrokenChain: ``verify`` is set and the events do not form one untampered chain.
        LogError: a line is not a valid event, or is longer than ``max_line_bytes``.
    """
    events = list(iter_jsonl(source, max_line_bytes=max_line_bytes))
    if verify:
        if not events:
            raise EmptyLog(str(source) if isinstance(source, str | Path) else None)
        verify_chain(events)
    return events


def write_jsonl(path: str | Path, events: Iterable[Event]) -> None:
    """Write events to a JSONL file, one canonical encoding per line."""
    with Path(path).open("wb") as fh:
        for event in events:
            fh.write(_dumps(event))
            fh.write(b"\n")
