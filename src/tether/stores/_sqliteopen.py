"""Opening a SQLite run store, and what its failures mean to a user.

Every ``sqlite3`` and ``OSError`` a store meets is turned into one of tether's store errors
(``errors.StoreError``) whose message names the file and says what to do: a store that is
locked, damaged, read-only, full, or not a store at all.

A store that cannot be written (a read-only file, directory or medium) is opened read-only
so that it can still be read: ``mode=ro`` when SQLite can share the write-ahead log, else
``immutable=1``. The latter is used only when no ``-shm`` file exists, which means no
process has the database open for writing.
"""

from __future__ import annotations

import errno
import sqlite3
import time
from pathlib import Path
from urllib.parse import quote

from tether.errors import (
    StoreBusy,
    StoreCorrupt,
    StoreError,
    StoreUnavailable,
    StoreWriteError,
)
from tether.stores._sqlitetables import SCHEMA

__all__ = ["connect", "os_error", "prepare_directory", "sqlite_error"]

_FULL = {errno.ENOSPC, errno.EFBIG, errno.EDQUOT}
_READ_ONLY = {errno.EROFS, errno.EACCES, errno.EPERM}
_NOT_A_DIRECTORY = {errno.ENOTDIR, errno.EEXIST}


def prepare_directory(path: Path) -> None:
    """Make sure the store's directory exists (creating it), or say why it cannot.

    Raises:
        StoreUnavailable: a part of the path is a regular file, or it cannot be created.
    """
    parent = path.parent
    if parent.is_dir():
        return
    try:
        parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        blocker = next((p for p in (parent, *parent.parents) if p.is_file()), None)
        if blocker is not None:
            raise StoreUnavailable(
                f"cannot create the run store {path}: {blocker} is a file, not a directory. "
                "Point --db or $TETHER_DB at a path inside a directory"
            ) from None
        raise StoreUnavailable(
            f"cannot create the directory of the run store {path}: {exc.strerror or exc}. "
            "Check the path and its permissions, or point --db or $TETHER_DB elsewhere"
        ) from None


def connect(path: Path, *, busy_timeout: float, power: bool) -> tuple[sqlite3.Connection, bool]:
    """Open the store (creating its tables); falls back to read-only where it cannot write.

    Returns the connection and whether it is read-only.

    Raises:
        StoreError: the file cannot be opened, is not a store, or is damaged.
    """
    in_memory = str(path) == ":memory:"
    try:
        db = sqlite3.connect(
            path, isolation_level=None, timeout=busy_timeout, check_same_thread=False
        )
    except sqlite3.Error as exc:
        raise sqlite_error(exc, path, "opening it") from None
    deadline = time.monotonic() + busy_timeout
    while True:
        try:
            db.execute("PRAGMA journal_mode=WAL")
            db.execute(f"PRAGMA synchronous={'FULL' if power else 'NORMAL'}")
            db.executescript(SCHEMA)
            return db, False
        except sqlite3.Error as exc:
            # Setting WAL or creating the tables while other connections read can fail at
            # once with SQLITE_BUSY (SQLite skips its busy handler where waiting could
            # deadlock): wait and try again, as the busy handler would have.
            if _busy(exc) and time.monotonic() < deadline:
                time.sleep(0.02)
                continue
            db.close()
            error = sqlite_error(exc, path, "opening it")
            if in_memory or not _read_only_problem(exc) or not path.is_file():
                raise error from None
            break
    return _connect_read_only(path, busy_timeout), True


def _busy(exc: sqlite3.Error) -> bool:
    name = getattr(exc, "sqlite_errorname", "") or ""
    return name.startswith(("SQLITE_BUSY", "SQLITE_LOCKED"))


def _read_only_problem(exc: sqlite3.Error) -> bool:
    return getattr(exc, "sqlite_errorname", "") in ("SQLITE_READONLY", "SQLITE_CANTOPEN")


def _connect_read_only(path: Path, busy_timeout: float) -> sqlite3.Connection:
    target = quote(str(path.resolve()))
    shared_log = path.with_name(path.name + "-shm").exists()
    modes = ["mode=ro"] if shared_log else ["mode=ro", "immutable=1"]
    last: sqlite3.Error | None = None
    for mode in modes:
        try:
            db = sqlite3.connect(
                f"file:{target}?{mode}",
                uri=True,
                isolation_level=None,
                timeout=busy_timeout,
                check_same_thread=False,
            )
            tables = {
                name for (name,) in db.execute("SELECT name FROM sqlite_master WHERE type='table'")
            }
        except sqlite3.Error as exc:
            last = exc
            continue
        if not {"events", "runs", "leases"} <= tables:
            db.close()
            raise StoreUnavailable(
                f"{path} is not a tether run store (it has no runs table) and it is read-only, "
                "so none can be created: point --db or $TETHER_DB at the store's file"
            )
        return db
    assert last is not None
    raise sqlite_error(last, path, "opening it read-only") from None


def sqlite_error(exc: sqlite3.Error, path: Path, doing: str) -> StoreError:
    """The store error a ``sqlite3`` error means, naming the file and what to do."""
    name = getattr(exc, "sqlite_errorname", "") or ""
    text = str(exc)
    if name.startswith("SQLITE_BUSY") or name.startswith("SQLITE_LOCKED") or "locked" in text:
        return StoreBusy(
            f"the run store {path} is locked by another process (a DB browser with unsaved "
            f"changes, a backup, a VACUUM?) and stayed locked while {doing}. Close that "
            "program, or wait for it, and try again"
        )
    if name.startswith("SQLITE_CORRUPT") or "malformed" in text:
        return StoreCorrupt(
            f"the run store {path} is damaged ({text}). Stop every process that uses it and "
            f"keep a copy; then recover what is readable with `sqlite3 {path} .recover | "
            f"sqlite3 {path}.recovered` and point --db or $TETHER_DB at the recovered file, or "
            "restore a backup. Records still waiting in its -pending directory are applied "
            "by the next store that opens a good file"
        )
    if name == "SQLITE_NOTADB" or "not a database" in text:
        return StoreUnavailable(
            f"{path} is not a tether run store ({text}): point --db or $TETHER_DB at the "
            "store's file"
        )
    if name.startswith("SQLITE_READONLY"):
        return StoreWriteError(
            f"the run store {path} is read-only ({text}), so {doing} could not be done: it "
            "can be read (`tether runs`, `show`, `export`), not written. Fix its permissions "
            "or copy it somewhere writable"
        )
    if name.startswith("SQLITE_FULL") or name.startswith("SQLITE_IOERR"):
        return StoreWriteError(
            f"the run store {path} could not be written while {doing} ({text}): the disk may "
            "be full or failing. Free space and try again; what was stored before is intact"
        )
    if name.startswith("SQLITE_CANTOPEN") or name.startswith("SQLITE_PERM"):
        return StoreUnavailable(
            f"cannot open the run store {path} ({text}): check that its directory exists and "
            "that this user may read and write the file and its directory"
        )
    return StoreError(f"the run store {path} failed while {doing}: {text}")


def os_error(exc: OSError, where: Path, doing: str) -> StoreError:
    """The store error an ``OSError`` on one of the store's files means."""
    reason = exc.strerror or str(exc)
    if exc.errno in _FULL:
        return StoreWriteError(
            f"could not write {where} while {doing}: {reason}. The disk (or this process's "
            "file-size limit) is full; nothing of this write was stored. Free space and "
            "resume the run"
        )
    if exc.errno in _READ_ONLY:
        return StoreWriteError(
            f"could not write {where} while {doing}: {reason}. The store's directory or its "
            "-pending directory is read-only or not this user's; fix the permissions"
        )
    if exc.errno in _NOT_A_DIRECTORY:
        return StoreUnavailable(
            f"could not create {where} while {doing}: {reason}. A file is in the way of the "
            "store's -pending directory; move it"
        )
    return StoreWriteError(f"could not write {where} while {doing}: {reason}")
