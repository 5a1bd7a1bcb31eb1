"""Faults a run store meets in the field, made for real: locks, read-only media, damage.

``WriteLock`` is another process holding a write transaction on the file (a DB browser with
unsaved edits, a backup, a VACUUM). ``read_only`` makes a file or a directory unwritable:
with ``chmod`` for an ordinary user, with the immutable attribute for root (whom permission
bits do not stop).
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from collections.abc import Generator
from contextlib import contextmanager
from pathlib import Path

__all__ = ["WriteLock", "corrupt_pages", "read_only"]

_HOLDER = """
import sqlite3, sys
db = sqlite3.connect(sys.argv[1], isolation_level=None, timeout=60)
db.execute("BEGIN IMMEDIATE")
print("locked", flush=True)
sys.stdin.readline()  # hold it until told to let go (or until the parent dies)
db.execute("ROLLBACK")
"""


class WriteLock:
    """Another process holding ``BEGIN IMMEDIATE`` on a SQLite file until ``release``."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._proc: asyncio.subprocess.Process | None = None

    async def __aenter__(self) -> WriteLock:
        proc = await asyncio.create_subprocess_exec(
            sys.executable,
            "-c",
            _HOLDER,
            str(self.path),
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
        )
        self._proc = proc
        assert proc.stdout is not None
        line = await asyncio.wait_for(proc.stdout.readline(), 60)
        assert line == b"locked\n", line
        return self

    async def release(self) -> None:
        """Let go of the lock and wait for the process to end."""
        proc = self._proc
        if proc is None or proc.returncode is not None:
            return
        assert proc.stdin is not None
        proc.stdin.write(b"go\n")
        await proc.stdin.drain()
        await asyncio.wait_for(proc.wait(), 60)

    async def __aexit__(self, *exc: object) -> None:
        proc = self._proc
        if proc is not None and proc.returncode is None:
            proc.kill()
            await proc.wait()


def _immutable(path: Path, on: bool) -> None:
    subprocess.run(["chattr", "+i" if on else "-i", str(path)], check=True)


@contextmanager
def read_only(*paths: Path) -> Generator[None]:
    """Make ``paths`` (files or directories) unwritable for the ``with`` block."""
    root = os.geteuid() == 0
    modes = {p: p.stat().st_mode for p in paths}
    for p in paths:
        if root:
            _immutable(p, True)
        else:
            p.chmod(0o555 if p.is_dir() else 0o444)
    try:
        yield
    finally:
        for p in reversed(paths):
            if root:
                _immutable(p, False)
            else:
                p.chmod(modes[p])


def corrupt_pages(path: Path) -> None:
    """Overwrite the middle of a database file with garbage, past its header page."""
    size = path.stat().st_size
    assert size > 3 * 4096, "the database is too small to damage past its first page"
    with path.open("r+b") as fh:
        fh.seek(4096)
        fh.write(b"\xde\xad\xbe\xef" * ((size - 4096) // 8))
