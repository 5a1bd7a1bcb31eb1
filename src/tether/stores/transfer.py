"""Moving runs between stores: export a run's log as JSONL, import it back.

The JSONL is exactly what ``codec.write_jsonl`` writes, one canonical encoding per line, so
an exported run can be read with ``read_jsonl``, replayed, or imported into another store,
and ``export → import → export`` gives the same bytes. An import checks everything (every
line decodes, the hash chain holds) before it writes anything, and never overwrites a run
that is already stored with other content.

A run stored with MACs (``tether.auditkey``) is exported with each event's MAC on its line
(``codec.encode_line``), and imported with them: an import copies MACs, it never makes them
(it did not write the events) and does not check them (``tether audit`` with the key does).
"""

from __future__ import annotations

import asyncio
import io
import os
from collections.abc import AsyncGenerator, Iterable, Sequence
from contextlib import aclosing
from pathlib import Path
from typing import BinaryIO

from tether._internal.frozen import frozen
from tether._internal.ids import RUN_ID
from tether.codec import (
    MAX_LINE_BYTES,
    decode_event,
    decode_line,
    encode_line,
    iter_jsonl_lines,
    verify_chain,
)
from tether.errors import BrokenChain, EmptyLog, LogError, UserError
from tether.events import Event, RunStarted
from tether.stores.base import RunNotFound, RunStore, StoreConflict, default_owner

__all__ = [
    "JsonlLog",
    "decode_jsonl",
    "decode_jsonl_log",
    "export_pages",
    "export_run",
    "import_events",
    "import_run",
]


@frozen
class JsonlLog:
    """A run's JSONL log, decoded: its events and the MAC each line carried."""

    events: tuple[Event, ...]
    """The events, in order."""
    macs: tuple[str | None, ...]
    """Each event's MAC (``None``: its line had none), lined up with ``events``."""


async def export_run(store: RunStore, run_id: str) -> bytes:
    """A stored run's log as JSONL bytes, one canonical event encoding per line.

    Args:
        store: The store holding the run.
        run_id: The run's full id.

    Returns:
        The log, as ``codec.write_jsonl`` would write it to a file; each event stored with a
        MAC has it on its line. ``export_pages`` gives it a page at a time.

    Raises:
        RunNotFound: no such run.
        LogError: a stored event does not decode (nothing is exported).
        BrokenChain: the stored log has been tampered with (nothing is exported).
    """
    async with aclosing(export_pages(store, run_id)) as pages:
        return b"".join([page async for page in pages])


async def export_pages(store: RunStore, run_id: str, *, limit: int = 100) -> AsyncGenerator[bytes]:
    """``export_run``'s bytes, ``limit`` lines at a time: a long run is never held whole.

    The log is read twice, a page at a time. The first reading checks all of it, as
    ``export_run`` does, before any page is given: a log that does not decode or whose
    chain is broken gives nothing (the error is the one reading it whole raised: the first
    event that does not decode, else the first break in the chain). The second reading
    gives the pages, each checked again, up to where the first ended (a run that goes on
    meanwhile is exported as it was then).

    Raises:
        RunNotFound: no such run.
        LogError: a stored event does not decode.
        BrokenChain: the log is tampered with (or was, between the readings: then the pages
            given already are not the whole log).
        UserError: ``limit`` is not positive.
    """
    count, last = await _checked(store, run_id, limit)
    given = 0
    prev: Event | None = None
    async with aclosing(store.read_encoded_pages(run_id, limit=limit)) as pages:
        async for bodies in pages:
            events = [decode_event(body) for body in bodies[: count - given]]
            if not events:
                break
            _verify_page(run_id, events, prev)
            macs = await store.read_macs_page(run_id, after_seq=given - 1, limit=len(events))
            yield b"".join(encode_line(event, macs.get(event.seq)) + b"\n" for event in events)
            given, prev = given + len(events), events[-1]
            if given == count:
                break
    if given != count or (prev is not None and prev.hash != last):
        raise BrokenChain(
            "the log changed while it was exported: it no longer has the events checked",
            seq=given,
            run_id=run_id,
        )


async def _checked(store: RunStore, run_id: str, limit: int) -> tuple[int, str | None]:
    """How many events a stored run has, and its last hash, once all are checked.

    Every event is decoded before a break in the chain is raised, as ``store.read``
    decoded them all before the chain was verified: the error is the one that gave.
    """
    count = 0
    prev: Event | None = None
    broken: BrokenChain | None = None
    async with aclosing(store.read_encoded_pages(run_id, limit=limit)) as pages:
        async for bodies in pages:
            events = [decode_event(body) for body in bodies]
            if broken is None:
                try:
                    _verify_page(run_id, events, prev)
                except BrokenChain as exc:
                    broken = exc
            count, prev = count + len(events), events[-1]
    if broken is not None:
        raise broken
    return count, None if prev is None else prev.hash


def _verify_page(run_id: str, events: list[Event], prev: Event | None) -> None:
    """``verify_chain`` of a page, linked to the last event of the page before it."""
    if prev is None:
        verify_chain(events, run_id=run_id)
    else:  # checked again with the page: how the page's first link is checked
        verify_chain([prev, *events], run_id=run_id, start_seq=prev.seq)


def decode_jsonl(
    data: bytes | BinaryIO, *, name: str | None = None, max_line_bytes: int = MAX_LINE_BYTES
) -> list[Event]:
    """Decode a run's JSONL log and verify it is one whole run; blank lines are skipped.

    ``decode_jsonl_log`` also returns the lines' MACs. Raises as that does.
    """
    return list(decode_jsonl_log(data, name=name, max_line_bytes=max_line_bytes).events)


def decode_jsonl_log(
    data: bytes | BinaryIO, *, name: str | None = None, max_line_bytes: int = MAX_LINE_BYTES
) -> JsonlLog:
    """Decode a run's JSONL log and verify it is one whole run; blank lines are skipped.

    Args:
        data: The log's bytes, or a binary stream of them (read line by line, not closed).
        name: What to call the log in errors (a file's name, ``stdin``).
        max_line_bytes: The longest line accepted (see ``codec.MAX_LINE_BYTES``).

    Returns:
        The events, in order, with their lines' MACs (not checked).

    Raises:
        EmptyLog: the log holds no events.
        LogError: a line is not a valid event or is longer than ``max_line_bytes`` (the
            message names the line), or the log does not begin with ``run_started``.
        BrokenChain: the events do not form one untampered chain (the line is named).
    """
    stream = io.BytesIO(data) if isinstance(data, bytes) else data
    numbered = iter_jsonl_lines(stream, name=name, max_line_bytes=max_line_bytes)
    events: list[Event] = []
    macs: list[str | None] = []
    lines: list[int] = []
    for number, raw in numbered:
        event, mac = decode_line(raw, line=number)
        events.append(event)
        macs.append(mac)
        lines.append(number)
    _check_whole_run(events, lines, name)
    return JsonlLog(events=tuple(events), macs=tuple(macs))


def _check_whole_run(
    events: Sequence[Event], lines: Sequence[int] | None, name: str | None
) -> None:
    """One untampered chain from ``run_started``; ``lines`` maps seq to the line, if known."""
    if not events:
        raise EmptyLog(name)
    try:
        verify_chain(events)
    except BrokenChain as exc:
        if exc.line is None and lines is not None and exc.seq < len(lines):
            exc.line = lines[exc.seq]
            exc.args = (f"{exc.args[0]} (line {exc.line})",)
        raise
    if not isinstance(events[0], RunStarted):
        raise LogError(
            f"the log begins with a {events[0].kind!r} event, not 'run_started': it is not a "
            "whole run. Export the complete run and import that",
            run_id=events[0].run_id,
            line=lines[0] if lines else None,
        )
    if not RUN_ID.fullmatch(events[0].run_id):  # tether never makes one: no command could name it
        raise LogError(
            f"the log's run id {events[0].run_id[:80]!r} is not one tether makes or takes (1-200 "
            "letters, digits and . _ : @ + = -, starting with a letter or digit): it was not "
            "written by tether, or was edited",
            line=lines[0] if lines else None,
        )


def _read_file(path: Path) -> JsonlLog:
    with path.open("rb") as fh:
        return decode_jsonl_log(fh, name=str(path))


async def import_run(store: RunStore, source: bytes | str | os.PathLike[str]) -> str:
    """Import a run from a JSONL log (as written by ``export_run`` or ``write_jsonl``).

    Every line is decoded and the hash chain verified before anything is written; the
    events are then appended in one atomic append, with the MACs the lines carry. Importing
    a run that is already stored with identical events is a no-op.

    Args:
        store: Where the run goes.
        source: The log's bytes, or the path of a JSONL file.

    Returns:
        The run's id.

    Raises:
        LogError: the log is malformed, empty (``EmptyLog``), has a line longer than
            ``codec.MAX_LINE_BYTES``, or is tampered with (``BrokenChain``); nothing was
            written.
        StoreConflict: a run with this id is stored with different events.
    """
    if isinstance(source, bytes):
        log = decode_jsonl_log(source)
    else:
        log = await asyncio.to_thread(_read_file, Path(source))
    return await _store(store, list(log.events), log.macs)


async def import_events(
    store: RunStore, events: Iterable[Event], *, macs: Sequence[str | None] | None = None
) -> str:
    """Import a run's events, decoded already (``decode_jsonl_log``), into ``store``.

    The events are checked first as ``import_run`` checks a log (one whole, untampered
    run), then appended in one atomic append; a run stored already with identical events
    is a no-op. Decoding before opening a store keeps a bad log from creating one.

    Args:
        store: Where the run goes.
        events: The run's events, in order.
        macs: The MACs the log carried, lined up with ``events`` (copied, never made).

    Returns:
        The run's id.

    Raises:
        LogError: the events are empty, not a whole run, or tampered with; nothing was
            written.
        StoreConflict: a run with this id is stored with different events.
    """
    chosen = list(events)
    _check_whole_run(chosen, None, None)
    if macs is not None and len(macs) != len(chosen):
        raise UserError(f"{len(macs)} MACs given for {len(chosen)} events: give one per event")
    return await _store(store, chosen, macs)


async def _store(store: RunStore, events: list[Event], macs: Sequence[str | None] | None) -> str:
    run_id = events[0].run_id
    try:
        stored = await store.read(run_id)
    except RunNotFound:
        stored = None
    if stored is not None and _continues(stored, events):
        # the store holds a cut copy of this log (a process died mid-run, or an earlier
        # export): the rest is added, under the run's lease, so a live owner is not raced
        lease = await store.acquire(run_id, default_owner())
        try:
            rest = (macs if macs is not None else [None] * len(events))[len(stored) :]
            await store.append_copied(run_id, events[len(stored) :], rest)
        finally:
            await store.release(lease)
        return run_id
    if stored is not None:
        _check_identical(run_id, stored, events)
        return run_id
    # never store.append: a store with an audit key would make MACs for a copy it did not write
    await store.append_copied(run_id, events, macs if macs is not None else [None] * len(events))
    return run_id


def _continues(stored: Sequence[Event], imported: Sequence[Event]) -> bool:
    """Whether ``imported`` is ``stored`` and more (the stored run is a prefix of it)."""
    return len(stored) < len(imported) and all(
        a.hash == b.hash for a, b in zip(stored, imported, strict=False)
    )


def _check_identical(run_id: str, stored: Sequence[Event], imported: Sequence[Event]) -> None:
    """Nothing to import: the log is the stored run, or an earlier copy of it (a prefix)."""
    if len(stored) >= len(imported) and all(
        a.hash == b.hash for a, b in zip(stored, imported, strict=False)
    ):
        return  # (an earlier copy was said to "differ from seq N", where the copy ended)
    differ = next(
        (i for i, (a, b) in enumerate(zip(stored, imported, strict=False)) if a.hash != b.hash),
        min(len(stored), len(imported)),
    )
    raise StoreConflict(
        f"run {run_id!r} is already stored with different events ({len(stored)} stored, "
        f"{len(imported)} in the log; they differ from seq {differ}). Nothing was imported, "
        "and the stored run is as it was: import the log into another store (`--db PATH`)",
        run_id=run_id,
    )
