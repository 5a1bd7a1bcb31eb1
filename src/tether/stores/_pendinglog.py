"""The SQLite store's commit point: append-only files of records not yet in the database.

A leased append is durable once its record is written here (one ``write``; with ``sync`` an
``fdatasync`` follows on the store's thread). The records are applied to the database in
batches by the store's thread. Each store writes its own files and holds an exclusive
``flock`` on each for as long as it lives: another store that can take the lock knows the
writer is gone and replays the file into the database (then deletes it); one that cannot
still reads it, so a live writer's records are never missed.

A store's file is replaced by a new one (a new *generation*) once it grows past a bound, and
an old file is deleted only when every record written to it is in the database: a file is
never deleted while it holds the only copy of a committed record.

One record per line: ``{"run": ID, "token": N, "events": [EVENT, ...]}``, with
``"macs": [MAC, ...]`` before ``"events"`` when the writer has an audit key; for a lease
given up, ``{"run": ID, "token": N, "release": true, "events": []}``; for the first lease of a
run id this store made up (no other process can know it yet),
``{"run": ID, "token": 1, "grant": [OWNER, EXPIRES_AT], "events": []}``.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import threading
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import cast

import orjson

from tether.codec import decode_event, kept
from tether.errors import LogError
from tether.events import Event

__all__ = [
    "LOG_SUFFIX",
    "MAX_RECORD_BYTES",
    "OtherLog",
    "PendingLog",
    "Record",
    "other_logs",
    "record_line",
]

LOG_SUFFIX = ".pending"
ROTATE_BYTES = 256 * 1024
"""A store starts a new file once its current one passes this size."""
MAX_RECORD_BYTES = 256 * 1024 * 1024
"""A line longer than this in another store's file is damage, not a record (bounded reads)."""


@dataclass(slots=True)
class Record:
    """One append: a run's new events under a lease token (``None``: appended without one).

    ``release``: instead of events, the owner gave the lease up. ``grant``: instead of
    events, the first lease of a new run, ``(owner, expires_at)``. ``gen``: the generation
    of this store's file it was written to (``-1``: not from this store's files). ``macs``:
    the events' MACs (``tether.auditkey``), made by the writer; ``None`` if it had no key.
    """

    run_id: str
    token: int | None
    events: list[Event]
    bodies: list[bytes]
    release: bool = False
    gen: int = -1
    grant: tuple[str, float] | None = None
    macs: list[str] | None = None


def record_line(
    run_id: str,
    token: int | None,
    bodies: Sequence[bytes],
    *,
    release: bool = False,
    grant: tuple[str, float] | None = None,
    macs: Sequence[str] | None = None,
) -> bytes:
    """The record as one line, built from the events' encoded bodies (no re-encoding)."""
    head = b'{"run":' + orjson.dumps(run_id) + b',"token":' + orjson.dumps(token)
    if release:
        head += b',"release":true'
    if grant is not None:
        head += b',"grant":' + orjson.dumps(grant)
    if macs is not None:
        head += b',"macs":' + orjson.dumps(macs)
    return head + b',"events":[' + b",".join(bodies) + b"]}\n"


@dataclass(slots=True)
class _File:
    gen: int
    fd: int
    path: Path
    size: int = 0
    synced_dir: bool = False


class PendingLog:
    """This store's own files: the one being written, and older ones not yet applied.

    ``write`` runs on the event loop's thread (one system call); ``sync``, ``applied_below``
    and ``close`` on the store's thread. A lock guards the list of files, never a write.
    """

    def __init__(self, directory: Path, *, rotate_bytes: int = ROTATE_BYTES) -> None:
        self.directory = directory
        self._rotate_bytes = rotate_bytes
        self._lock = threading.Lock()
        self._current: _File | None = None
        self._older: dict[int, _File] = {}
        self._dirty: set[int] = set()
        self._gen = 0
        self._written = 0

    @property
    def paths(self) -> set[Path]:
        """Every file of this store (others skip them)."""
        with self._lock:
            files = list(self._older.values())
            if self._current is not None:
                files.append(self._current)
        return {f.path for f in files}

    @property
    def generation(self) -> int:
        """The generation the next write goes to (or the current one's)."""
        current = self._current
        return current.gen if current is not None else self._gen + 1

    def write(self, data: bytes) -> tuple[int, int]:
        """Append ``data`` (whole records) to the current file.

        Returns the file's generation and the write's number (``sync`` says up to which
        number the writes are on disk).

        Raises:
            OSError: nothing may be assumed written; the caller fails the appends. The file
                is then retired (its partial tail, if any, is a cut-short last line that no
                reader applies) and the next write starts a new one.
        """
        current = self._current or self._open()
        view = memoryview(data)
        try:
            while view:  # a regular file takes it all at once; the loop is for short writes
                view = view[os.write(current.fd, view) :]
        except OSError:
            # undo a partial write; failing that, the cut-short line stays the file's last,
            # which no reader applies (the file is retired: nothing is written after it)
            with contextlib.suppress(OSError):
                os.ftruncate(current.fd, current.size)
            self._retire(current)
            raise
        current.size += len(data)
        with self._lock:
            self._dirty.add(current.gen)
            self._written += 1
            number = self._written
        if current.size > self._rotate_bytes:
            self._retire(current)
        return current.gen, number

    def sync(self) -> int:
        """``fdatasync`` every file written since the last sync (and a new file's directory).

        Returns the number of the last write now on disk.
        """
        with self._lock:
            dirty, self._dirty = self._dirty, set()
            through = self._written
            files = [f for f in (*self._older.values(), self._current) if f is not None]
        for f in files:
            if f.gen not in dirty:
                continue
            os.fdatasync(f.fd)
            if not f.synced_dir:
                _sync_directory(self.directory)
                f.synced_dir = True
        return through

    def applied_below(self, gen: int) -> list[Path]:
        """Every record of generations below ``gen`` is in the database: delete those files."""
        with self._lock:
            done = [f for g, f in self._older.items() if g < gen]
            for f in done:
                del self._older[f.gen]
        for f in done:
            f.path.unlink(missing_ok=True)
            os.close(f.fd)
        return [f.path for f in done]

    def close(self, *, keep: bool) -> list[Path]:
        """Close every file (releasing its lock); delete them unless ``keep``.

        Returns the files kept (those that may hold records not in the database).
        """
        with self._lock:
            files = [f for f in (*self._older.values(), self._current) if f is not None]
            self._older.clear()
            self._current = None
        kept: list[Path] = []
        for f in files:
            if keep and f.size > 0:
                kept.append(f.path)
            else:
                f.path.unlink(missing_ok=True)
            os.close(f.fd)
        return kept

    def _retire(self, current: _File) -> None:
        with self._lock:
            self._older[current.gen] = current
            self._current = None

    def _open(self) -> _File:
        self.directory.mkdir(parents=True, exist_ok=True)
        self._gen += 1
        name = f"{os.getpid()}-{os.urandom(6).hex()}{LOG_SUFFIX}"
        path = self.directory / name
        # Created under another name and locked before it gets its own: a reader that saw
        # it unlocked would take it for a dead writer's file, and delete it.
        draft = path.with_name(name + ".new")
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_APPEND | os.O_CLOEXEC
        fd = os.open(draft, flags, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            os.rename(draft, path)
        except BaseException:
            os.close(fd)
            draft.unlink(missing_ok=True)
            raise
        opened = _File(gen=self._gen, fd=fd, path=path)
        with self._lock:
            self._current = opened
        return opened


def _sync_directory(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY | os.O_CLOEXEC)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


@dataclass(slots=True)
class OtherLog:
    """Another store's file, read whole. ``dead``: its writer is gone and we hold its lock."""

    path: Path
    dead: bool
    records: list[Record]
    problem: str | None = None
    _fd: int | None = field(default=None, repr=False)

    def finish(self, *, applied: bool) -> None:
        """Release the file; a dead writer's file is deleted once its records are applied.

        A file with a problem is kept, renamed, for a person to look at.
        """
        if self._fd is None:
            return
        try:
            if self.dead and applied:
                if self.problem is None:
                    self.path.unlink(missing_ok=True)
                else:
                    self.path.rename(self.path.with_suffix(".damaged"))
        finally:
            os.close(self._fd)
            self._fd = None


def other_logs(directory: Path, own: set[Path]) -> Iterator[OtherLog]:
    """Every other store's pending file in ``directory``, oldest name first.

    Call ``finish`` on each (after the transaction that applied it, or on failure). Files
    are opened read-only: a ``flock`` needs no write access, so a read-only store can tell
    a dead writer's file from a live one's.
    """
    try:
        names = sorted(n for n in os.listdir(directory) if n.endswith(LOG_SUFFIX))
    except (FileNotFoundError, NotADirectoryError):
        return
    for name in names:
        path = directory / name
        if path in own:
            continue
        try:
            fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
        except FileNotFoundError:
            continue  # applied and replaced meanwhile
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                dead = True
            except BlockingIOError:
                dead = False
            records, problem = _read_records(fd)
        except BaseException:
            os.close(fd)
            raise
        yield OtherLog(path=path, dead=dead, records=records, problem=problem, _fd=fd)


def _read_records(fd: int) -> tuple[list[Record], str | None]:
    with os.fdopen(os.dup(fd), "rb") as file:
        records: list[Record] = []
        number = 0
        while True:
            line = file.readline(MAX_RECORD_BYTES + 1)
            if not line:
                return records, None
            number += 1
            if not line.endswith(b"\n"):
                if len(line) > MAX_RECORD_BYTES:
                    return records, f"line {number} is longer than {MAX_RECORD_BYTES} bytes"
                # A last line without its newline is a write cut short: in a live file it is
                # still being written (read next time); in a dead one it never returned.
                return records, None
            try:
                records.append(_record(line))
            except (LogError, ValueError, KeyError, TypeError) as exc:
                return records, f"line {number}: {exc}"


def _record(line: bytes) -> Record:
    raw = orjson.loads(line)
    run_id = raw["run"]
    token = raw["token"]
    if not isinstance(run_id, str) or not (token is None or isinstance(token, int)):
        raise ValueError("a record needs a string 'run' and an integer or null 'token'")
    bodies = [kept(orjson.dumps(item)) for item in raw["events"]]
    events = [decode_event(body) for body in bodies]
    release = raw.get("release", False) is True
    granted = raw.get("grant")
    grant = None
    if granted is not None:
        owner, expires = granted
        if not isinstance(owner, str) or not isinstance(expires, int | float):
            raise ValueError("a grant needs an owner and an expiry time")
        grant = (owner, float(expires))
    macs = raw.get("macs")
    if macs is not None and (
        not isinstance(macs, list)
        or len(cast(list[object], macs)) != len(events)
        or not all(isinstance(m, str) for m in cast(list[object], macs))
    ):
        raise ValueError("'macs' must be a list of strings, one per event")
    return Record(
        run_id=run_id,
        token=token,
        events=events,
        bodies=bodies,
        release=release,
        grant=grant,
        macs=cast(list[str] | None, macs),
    )
