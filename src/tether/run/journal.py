"""The append side of a run's log: seq, time and hash chain, then commit to the sinks."""

from __future__ import annotations

import asyncio
import errno
import hashlib
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import fields as fields_of
from datetime import datetime
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any, TypeVar
from weakref import WeakKeyDictionary

import orjson

from tether._internal.clock import Clock, now_of
from tether._internal.eventmaker import BODIES, MAKERS, NOT_SCANNED, body, maker
from tether._internal.mend import mended
from tether._internal.sealed import remember as _remember
from tether.auditkey import AuditKeySetting, resolve_audit_key
from tether.codec import MAX_LINE_BYTES, decode_line, encode_line, hashed_fields, kept
from tether.errors import ConfigError, LogError, StoreError, StoreWriteError
from tether.events import GENESIS_HASH, Event, EventBase, Redacted, RunFinished
from tether.policy.knownsecrets import KnownSecrets
from tether.policy.redaction import Redaction, Redactor
from tether.sinks import EventSink

if TYPE_CHECKING:
    from tether.stores.base import Lease, RunStore

__all__ = ["EventTooLarge", "Journal", "JsonlSink", "StoreSink"]

E = TypeVar("E", bound=Event)

_BASE_FIELDS = frozenset({"kind", "run_id", "seq", "at", "prev_hash", "hash"})

_dumps = orjson.dumps
_set_hash: Callable[[Event, str], None] = vars(EventBase)["hash"].__set__  # the slot's own setter
_sha256 = hashlib.sha256

_PASSED: WeakKeyDictionary[Redactor, dict[tuple[str, ...], bool]] = WeakKeyDictionary()
"""Per redactor: texts its patterns pass (``Journal.seen``), shared by the runs it redacts
(a policy's stock reasons repeat from run to run, and each run's first look cost a pass)."""


class StoreSink(EventSink):
    """Commits to a run store under a lease (the fencing token is checked on every append)."""

    def __init__(self, store: RunStore, run_id: str, lease: Lease | None) -> None:
        self.store = store
        self.run_id = run_id
        self.lease = lease

    async def write(self, events: Sequence[Event]) -> None:
        """Append the batch atomically."""
        await self.store.append(self.run_id, events, lease=self.lease)


class JsonlSink(EventSink):
    """Appends each event as one line to ``<dir>/<run_id>.jsonl``.

    With an audit key (``"env"``, the default: ``$TETHER_AUDIT_KEY_FILE`` or
    ``$TETHER_AUDIT_KEY`` if set) each line ends with the event's MAC (``codec.encode_line``).
    """

    def __init__(
        self, directory: str | Path, run_id: str, *, audit_key: AuditKeySetting = "env"
    ) -> None:
        self._key = resolve_audit_key(audit_key)
        path = Path(directory)
        self.path = path / f"{run_id}.jsonl"
        self._fh: IO[bytes] | None = None  # opened by the first write: a run that never
        self._failed = self._closed = False  # started leaves no empty file behind
        try:
            path.mkdir(parents=True, exist_ok=True)
            if not os.access(path, os.W_OK | os.X_OK):
                raise PermissionError(errno.EACCES, "permission denied")
        except OSError as exc:
            blocker = next((p for p in (path, *path.parents) if p.is_file()), None)
            why = f"{blocker} is a file, not a directory" if blocker else exc.strerror or exc
            raise ConfigError(
                f"cannot write run logs to {path}: {why}. Pass another --log-dir (or "
                "$TETHER_LOG_DIR, or Agent(log_dir=...)), or --no-log"
            ) from None

    def _open(self) -> IO[bytes]:
        if self._fh is not None:
            return self._fh
        if self._closed:
            raise RuntimeError(f"the log {self.path} is closed")
        try:
            self._fh = self.path.open("ab")
        except OSError as exc:
            raise StoreWriteError(
                f"could not open the run log {self.path}: {exc.strerror or exc}"
            ) from None
        return self._fh

    async def catch_up(self, events: Sequence[Event]) -> None:
        """Bring the file up to the run's log before a continued run's first batch.

        A file that holds a prefix of the log gets the rest; a missing or empty one, all of
        it; a last line cut mid-write (a crash) is dropped first. One that holds anything
        else is left as it is, and this run writes no copy there.
        """
        held = await asyncio.to_thread(self._prefix_held, events)
        if held is None:
            raise StoreWriteError(
                f"the run log {self.path} holds another history of this run than the "
                "store's; it was left as it is (move it aside for a whole copy)"
            )
        await self.write(events[held:])

    def _prefix_held(self, events: Sequence[Event]) -> int | None:
        """How many of ``events`` the file holds (``None``: it holds something else).

        Decided before anything is written: only a file that holds a prefix of the log is
        mended (a last line a crash cut is dropped, a missing newline added).
        """
        held, last, before, ends = 0, b"", b"", 0  # lines; the last two; where the last begins
        try:
            with self.path.open("rb") as fh:
                while line := fh.readline(MAX_LINE_BYTES + 1):
                    if line.strip():
                        held, last, before = held + 1, line, last
                    ends += len(line) if line.endswith(b"\n") else 0
        except FileNotFoundError:
            return 0
        except OSError as exc:
            raise StoreWriteError(f"could not read the run log {self.path}: {exc}") from None
        if not held:
            return 0
        if not self._is(last.strip(), events, held - 1):
            cut = not last.endswith(b"\n") and held <= len(events)
            if not (cut and self._line(events[held - 1]).startswith(last)):
                return None
            if held > 1 and not self._is(before.strip(), events, held - 2):
                return None
            os.truncate(self.path, ends)  # the line a crash cut: not part of the log
            return held - 1
        if not last.endswith(b"\n"):  # whole but for its newline: the next must not join it
            with self.path.open("ab") as fh:
                fh.write(b"\n")
        return held

    def _line(self, event: Event) -> bytes:
        """The line this sink writes for ``event``."""
        key = self._key
        return _dumps(event) if key is None else encode_line(event, key.mac(event.hash))

    @staticmethod
    def _is(line: bytes, events: Sequence[Event], index: int) -> bool:
        """Whether ``line`` is the event at ``index`` of ``events``."""
        if index >= len(events):
            return False
        try:
            event, _ = decode_line(line)
        except LogError:
            return False
        return event.hash == events[index].hash

    async def write(self, events: Sequence[Event]) -> None:
        """Append the events' lines and flush them to the OS."""
        fh = self._open()
        try:
            fh.write(b"".join(self._line(e) + b"\n" for e in events))  # as catch-up reads them
            fh.flush()
        except OSError as exc:
            self._failed = True
            raise StoreWriteError(
                f"could not write the run log {self.path}: {exc.strerror or exc}. Free space "
                "or fix its permissions; the run's store (if it has one) is not affected"
            ) from None

    async def close(self) -> None:
        """Close the file (after a failed write, what it could not flush is dropped)."""
        fh, self._fh, self._closed = self._fh, None, True
        if fh is None:
            return
        try:
            fh.close()
        except OSError:
            if not self._failed:
                raise
            # the failure was reported when the write failed; closing retried the same bytes


class EventTooLarge(ValueError):
    """An event over the journal's ``cap``: it was not added (``size``: its JSON's bytes)."""

    def __init__(self, size: int) -> None:
        super().__init__(f"the event is {size} bytes of JSON")
        self.size = size


class Journal:
    """Builds a run's events (seq, time, hash chain) and commits them in batches."""

    __slots__ = (
        "_batch_at",
        "_known",
        "_known_probe",
        "_now",
        "_passed",
        "_pending",
        "_redactor",
        "_seen",
        "_started",
        "_unseen",
        "cap",
        "clock",
        "committed",
        "events",
        "last_redacted",
        "on_event",
        "prev_hash",
        "remember",
        "run_id",
        "seq",
        "sinks",
        "warnings",
    )

    def __init__(
        self,
        run_id: str,
        *,
        clock: Clock,
        sinks: Sequence[EventSink] = (),
        prefix: Sequence[Event] = (),
        on_event: Callable[[Event], None] | None = None,
        redactor: Redactor | None = None,
    ) -> None:
        self.run_id = run_id
        self._redactor = redactor if redactor is not None and redactor.active else None
        self.clock = clock
        self._now = now_of(clock)
        self.sinks = tuple(sinks)
        self.events: list[Event] = list(prefix)
        self.seq = len(self.events)
        self.prev_hash = self.events[-1].hash if self.events else GENESIS_HASH
        self._pending: list[Event] = []
        self._started: list[EventSink] = []
        """Sinks that have had a batch (a sink's first one may need ``catch_up`` first)."""
        self._batch_at: datetime | None = None
        self.on_event = on_event
        """Called with every event as it is added (the run's fold)."""
        self.committed = self.seq
        """How many of ``events`` every sink has taken (the rest wait for ``commit``)."""
        self.warnings: list[str] = []
        """Sinks after the first that failed and were dropped, in words."""
        self.last_redacted = False
        """Whether the redactor changed the last event added (or might have: a run's end)."""
        self._seen: dict[tuple[str, ...], bool] = {}
        self._passed: dict[tuple[str, ...], bool] = (
            {} if self._redactor is None else _PASSED.setdefault(self._redactor, {})
        )
        self._known = KnownSecrets()
        """Secrets found in this run so far, by kind: redacted wherever they appear again.
        This run's alone, with the regexes that find them: ``close`` drops them."""
        self._known_probe: tuple[bytes, ...] = ()
        """``_known``'s secrets as they appear in JSON (what the probe searches)."""
        self._unseen = True  # the next event gets the redaction probe (``add_seen``: not)
        self.cap: int | None = None
        """While set: an event whose JSON is larger is refused (``EventTooLarge``), unadded."""
        self.remember = False
        """Register each sealed event (``sealed.remember``), so that a store skips hashing it
        again; only worth it when a store is a sink."""

    def add(self, cls: type[E], **fields: Any) -> E:
        """Build, seal and buffer the next event (not yet committed), then fold it.

        Events committed together share one time: when their batch began.
        """
        at = self._batch_at
        if at is None:
            at = self._batch_at = self._now()
        make = MAKERS.get(cls) or maker(cls)
        event, hashed, scanned = make(self.run_id, self.seq, at, self.prev_hash, **fields)
        try:
            payload = _dumps(hashed)
        except TypeError:  # a lone surrogate (a file name that is not UTF-8): its escape
            fields = mended(fields)  # (anything else JSON cannot hold raises again: the caller's)
            event, hashed, scanned = make(self.run_id, self.seq, at, self.prev_hash, **fields)
            payload = _dumps(hashed)
        if self.cap is not None and len(payload) > self.cap:
            raise EventTooLarge(len(payload))
        redactor = self._redactor
        found: Redaction | None = None
        redacted = False
        if self._unseen:
            if redactor is not None and scanned and self._might_hold(redactor, _dumps(scanned)):
                found = redactor.redact_event_fields(event, NOT_SCANNED, self._known)
                redacted = found is not None
                if found is not None and found.values:
                    self._learn(found.values)
                if found is not None and cls is RunFinished:  # the outcome stays last
                    own = {
                        f.name: getattr(event, f.name)
                        for f in fields_of(cls)
                        if f.name not in _BASE_FIELDS
                    }
                    self._record_redaction(found, self.seq + 1)
                    event = cls(
                        run_id=self.run_id, seq=self.seq, at=at, prev_hash=self.prev_hash, **own
                    )
                    found = None
                hashed = hashed_fields(cls)(event)
                payload = _dumps(hashed)
        else:
            self._unseen = True
        digest = _sha256(payload).hexdigest()
        _set_hash(event, digest)  # sealed before anyone else sees it
        if self.remember:  # a store takes it next: its encoding is made here, from the values
            _remember(event, kept(_dumps((BODIES.get(cls) or body(cls))(hashed, digest))))
        self.seq += 1
        self.prev_hash = digest
        self.events.append(event)
        self._pending.append(event)
        if self.on_event is not None:
            self.on_event(event)
        if found is not None:
            self._record_redaction(found, event.seq)
        self.last_redacted = redacted
        return event  # pyright: ignore[reportReturnType] - made for ``cls``

    def add_seen(self, cls: type[E], **fields: Any) -> E:
        """``add`` an event whose every outside text the redactor has just passed.

        For an event that repeats what an earlier one carried (a call's arguments after the
        model's answer that held them, a policy's stock reasons): its probe is skipped.
        """
        self._unseen = False
        return self.add(cls, **fields)

    def _might_hold(self, redactor: Redactor, encoded: bytes) -> bool:
        """Whether an event's JSON may hold a secret: a pattern's, or one found earlier."""
        if redactor.might_match(encoded):
            return True
        return any(secret in encoded for secret in self._known_probe)  # mostly none

    def _learn(self, values: Mapping[str, str]) -> None:
        """Remember the secrets an event held: the rest of the run redacts them anywhere."""
        self._known.learn(values.items())
        self._known_probe = tuple(_dumps(secret)[1:-1] for secret in self._known)
        self._seen.clear()  # a text that passed before may hold one of them now

    def seen(self, *texts: str) -> bool:
        """Whether the redactor passes ``texts`` unchanged (remembered for texts that repeat)."""
        redactor = self._redactor
        if redactor is None:
            return True
        known = self._seen.get(texts)
        if known is None:
            if len(self._seen) > 256:
                self._seen.clear()
            passed = self._passed.get(texts)  # the patterns' verdict: the same in every run
            if passed is None or self._known_probe:
                encoded = _dumps(mended(texts))
                if passed is None:
                    if len(self._passed) > 1024:
                        self._passed.clear()
                    passed = self._passed[texts] = not redactor.might_match(encoded)
                known = passed and not any(secret in encoded for secret in self._known_probe)
            else:
                known = passed
            self._seen[texts] = known
        return known

    def redacted(self, value: Any) -> Any:
        """``value`` (text, or JSON) as an event's field would hold it in this run's log."""
        value = mended(value)
        redactor = self._redactor
        if redactor is None:
            return value
        found = Redaction()
        out = redactor.redact_value(value, "value", found, self._known)
        if any(v not in self._known for v in found.values):  # as ``redact_event_fields``
            out = redactor.redact_value(
                value, "value", Redaction(), self._known.joined(found.values)
            )
        return out

    def _record_redaction(self, found: Redaction, of_seq: int) -> None:
        """Record what was redacted and where, never the data.

        It goes right after the redacted event, or, for the run's outcome, right before it.
        """
        redactor, self._redactor = self._redactor, None
        try:
            self.add(
                Redacted,
                of_seq=of_seq,
                fields=tuple(found.fields),
                kinds=tuple(found.kinds),
                count=found.count,
            )
        finally:
            self._redactor = redactor

    @property
    def redactor(self) -> Redactor | None:
        """The redactor every event passes (``None``: none)."""
        return self._redactor

    @property
    def has_pending(self) -> bool:
        """Whether events wait to be committed."""
        return bool(self._pending)

    def load(self, events: Sequence[Event]) -> None:
        """Continue after stored events (resume): they are the log so far, already committed."""
        self.events = list(events)
        self.seq = self.committed = len(self.events)
        self.prev_hash = self.events[-1].hash if self.events else GENESIS_HASH
        if self.on_event is not None:
            for event in self.events:
                self.on_event(event)

    def add_sink(self, sink: EventSink, *, first: bool = False) -> None:
        """Also commit to ``sink`` from now on (``first``: before the others)."""
        self.sinks = (sink, *self.sinks) if first else (*self.sinks, sink)

    def rollback(self) -> list[Event]:
        """Forget the events not yet committed (a sink refused them); returns them.

        The log goes back to what the sinks hold, as if the process had stopped there; the
        caller folds its state again.
        """
        dropped = self._pending
        self._pending = []
        self._batch_at = None
        del self.events[self.committed :]
        self.seq = len(self.events)
        self.prev_hash = self.events[-1].hash if self.events else GENESIS_HASH
        return dropped

    @property
    def in_memory(self) -> bool:
        """Whether committing writes nowhere (no sinks): ``take()`` then suffices."""
        return not self.sinks

    def take(self) -> list[Event]:
        """Commit for a journal without sinks: hand over the buffered events."""
        batch = self._pending
        self._batch_at = None
        if batch:
            self._pending = []
            self.committed += len(batch)
        return batch

    async def commit(self) -> list[Event]:
        """Write the buffered events to every sink; they are then part of the run.

        The first sink is the commit point (the run's store, when it has one): if it fails,
        the events stay buffered (``rollback`` drops them), no other sink gets them, and the
        error propagates. Once it took them they are committed, whatever the others do.
        """
        batch = self._pending
        self._batch_at = None
        if not batch:
            return batch
        sinks = self.sinks
        new = len(self._started) < len(sinks)  # a sink that has had no batch yet
        if sinks:
            if new and sinks[0] not in self._started:
                await self._begin(sinks[0], batch)
            await sinks[0].write(batch)
        self._pending = []
        self.committed += len(batch)
        for sink in sinks[1:]:
            try:
                if new and sink not in self._started:
                    await self._begin(sink, batch)
                await sink.write(batch)
            except StoreError as exc:  # a copy failed, not the run: stop writing the copy
                self.sinks = tuple(s for s in self.sinks if s is not sink)
                self._started = [s for s in self._started if s is not sink]
                self.warnings.append(f"{exc}; that copy of the log stops at seq {batch[0].seq}")
                await sink.close()
        for sink in sinks:
            if notes := sink.take_warnings():
                self.warnings.extend(notes)
        return batch

    async def _begin(self, sink: EventSink, batch: Sequence[Event]) -> None:
        """A sink's first batch: a run continued here gives it the events before it first."""
        if batch[0].seq > 0:
            await sink.catch_up(self.events[: batch[0].seq])
        self._started.append(sink)

    async def close(self) -> None:
        """Close every sink, and forget the secrets the run learnt: it is over."""
        self.forget_secrets()
        for sink in self.sinks:
            await sink.close()

    def forget_secrets(self) -> None:
        """Drop the secrets this run learnt, and the regexes that find them.

        Redaction of the events still to come rests on the patterns alone: call it once the
        run has ended (``close`` does). The verdicts the agent's runs share (``_PASSED``)
        lose every text that holds one of them (a goal that named a password the run learnt
        later): none of this run's secrets outlives it there either.
        """
        known = self._known
        if known and self._passed:
            for texts in list(self._passed):  # at most 1,024: one search each
                if any(known.spans(text) for text in texts):
                    self._passed.pop(texts, None)
        known.forget()
        self._known_probe = ()
        self._seen.clear()  # verdicts that counted them
