"""The SQLite store's commit point: an append-only file of records not yet in the database.

A leased append is durable once its record is written here (one ``write`` per group
commit; with ``sync`` also one ``fdatasync``). The records are applied to the database in
batches, and the file is replaced by an empty one once they are in. Each store writes its
own file and holds an exclusive ``flock`` on it for as long as it lives: another store that
can take the lock knows the writer is gone and replays the file into the database (then
deletes it); one that cannot still reads it, so a live writer's records are never missed.

One record per line: ``{"run": ID, "token": N, "events": [EVENT, ...]}``, or for a lease
given up, ``{"run": ID, "token": N, "release": true, "events": []}``.
"""

from __future__ import annotations

import fcntl
import os
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import orjson

from tether.codec import decode_event
from tether.errors import LogError
from tether.events import Event

__all__ = ["LOG_SUFFIX", "OtherLog", "PendingLog", "Record", "other_logs", "record_line"]

LOG_SUFFIX = ".pending"
ROTATE_BYTES = 256 * 1024
"""Applied records are cleared out once a store's file passes this size."""


@dataclass(slots=True)
class Record:
    """One append: a run's new events under a lease token (``None``: appended without one).

    ``release``: instead of events, the owner gave the lease up.
    """

    run_id: str
    token: int | None
    events: list[Event]
    bodies: list[bytes]
    release: bool = False


def record_line(
    run_id: str, token: int | None, bodies: Sequence[bytes], *, release: bool = False
) -> bytes:
    """The record as one line, built from the events' encoded bodies (no re-encoding)."""
    head = b'{"run":' + orjson.dumps(run_id) + b',"token":' + orjson.dumps(token)
    if release:
        head += b',"release":true'
    return head + b',"events":[' + b",".join(bodies) + b"]}\n"


class PendingLog:
    """This store's own file; created on the first write, locked for the store's lifetime."""

    def __init__(self, directory: Path, *, sync: bool) -> None:
        self.directory = directory
        self._sync = sync
        self._fd: int | None = None
        self._path: Path | None = None
        self._written = 0

    @property
    def path(self) -> Path | None:
        """The current file (``None`` before the first write)."""
        return self._path

    def write(self, data: bytes) -> None:
        """Append ``data`` (whole records); returns once the OS has them (and the disk, if sync).

        Raises:
            OSError: nothing may be assumed written; the caller fails the appends.
        """
        if self._fd is None:
            self._open()
        assert self._fd is not None
        view = memoryview(data)
        while view:  # a regular file takes it all at once; the loop is for the odd short write
            view = view[os.write(self._fd, view) :]
        if self._sync:
            os.fdatasync(self._fd)
        self._written += len(data)

    def applied(self, *, keep_below: int = ROTATE_BYTES) -> None:
        """Everything written is in the database: past ``keep_below`` bytes, start afresh.

        Once the file has grown past the bound, a new, empty file replaces it.

        A new file rather than a truncation, so that a reader in another process never sees a
        file's bytes change under it: it reads either the old file whole or the new one.
        Records already applied are harmless in the file (applying is idempotent) and cost a
        reader only their reading, hence the size bound rather than a new file per batch.
        """
        if self._written <= keep_below:
            return
        old_fd, old_path = self._fd, self._path
        self._fd = None
        self._path = None
        self._written = 0
        if old_path is not None:
            old_path.unlink(missing_ok=True)
        if old_fd is not None:
            os.close(old_fd)

    def close(self) -> None:
        """Close (and remove) the file; only call once everything written has been applied."""
        self.applied(keep_below=-1)
        if self._fd is not None:
            assert self._path is not None
            self._path.unlink(missing_ok=True)
            os.close(self._fd)
            self._fd = None
            self._path = None

    def _open(self) -> None:
        self.directory.mkdir(parents=True, exist_ok=True)
        name = f"{os.getpid()}-{os.urandom(6).hex()}{LOG_SUFFIX}"
        path = self.directory / name
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_APPEND | os.O_CLOEXEC, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BaseException:
            os.close(fd)
            path.unlink(missing_ok=True)
            raise
        self._fd, self._path = fd, path


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


def other_logs(directory: Path, own: Path | None) -> Iterator[OtherLog]:
    """Every other store's pending file in ``directory``, oldest name first.

    Call ``finish`` on each (after the transaction that applied it, or on failure).
    """
    try:
        names = sorted(n for n in os.listdir(directory) if n.endswith(LOG_SUFFIX))
    except FileNotFoundError:
        return
    for name in names:
        path = directory / name
        if own is not None and path == own:
            continue
        try:
            fd = os.open(path, os.O_RDWR | os.O_CLOEXEC)
        except FileNotFoundError:
            continue  # applied and replaced meanwhile
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                dead = True
            except BlockingIOError:
                dead = False
            with os.fdopen(os.dup(fd), "rb") as file:
                data = file.read()
            records, problem = _parse(data)
        except BaseException:
            os.close(fd)
            raise
        yield OtherLog(path=path, dead=dead, records=records, problem=problem, _fd=fd)


def _parse(data: bytes) -> tuple[list[Record], str | None]:
    """The whole records in ``data``, and what is wrong with the rest if anything.

    Anything unreadable before the last line is damage: reported, and nothing after it used.
    """
    records: list[Record] = []
    lines = data.split(b"\n")
    lines.pop()  # b"", or a write cut short (see below)
    for number, line in enumerate(lines, start=1):
        try:
            records.append(_record(line))
        except (LogError, ValueError, KeyError, TypeError) as exc:
            return records, f"line {number}: {exc}"
    # A last line without its newline is a write cut short: in a live file it is still
    # being written (read next time); in a dead one it never returned to its caller.
    return records, None


def _record(line: bytes) -> Record:
    raw = orjson.loads(line)
    run_id = raw["run"]
    token = raw["token"]
    if not isinstance(run_id, str) or not (token is None or isinstance(token, int)):
        raise ValueError("a record needs a string 'run' and an integer or null 'token'")
    bodies = [orjson.dumps(item) for item in raw["events"]]
    events = [decode_event(body) for body in bodies]
    release = raw.get("release", False) is True
    return Record(run_id=run_id, token=token, events=events, bodies=bodies, release=release)
