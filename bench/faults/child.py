"""What every agent process of ``bench/faults.py`` runs.

``python -m bench.faults.child tether ARGS...`` runs the real ``tether`` command (the
console script's own entry point) with ``ARGS``. ``python -m bench.faults.child agent NAME
DB`` runs ``bench.faults.agents``'s agent ``NAME`` on the SQLite store ``DB`` from Python
and prints its outcome as one JSON line (``run_id``, ``status``, ``error``).

Either way, from the environment:

- ``$BENCH_FAULTS_COMMITTED``: after each ``SqliteStore.append`` that returns, one line
  ``RUN SEQ HASH KIND UNIX_TIME`` per event is written there: to a file (``fsync``-ed
  before the run goes on, so it survives a ``kill -9``), or to an inherited pipe
  (``fd:N``; a pipe is not subject to the file-size limit).
- ``$BENCH_FAULTS_FSIZE``: the file-size limit (``RLIMIT_FSIZE``) in bytes, from the start.
  With it, and with ``$BENCH_FAULTS_FILL`` (a tool lowers the limit mid-run), ``SIGXFSZ`` is
  ignored: a write past the limit fails with ``EFBIG``, as one past a full disk fails with
  ``ENOSPC``.
"""

from __future__ import annotations

import asyncio
import json
import os
import resource
import signal
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from bench.faults.agents import AGENTS, FILL, ref

from tether.events import Event
from tether.stores import Lease, SqliteStore

COMMITTED = "BENCH_FAULTS_COMMITTED"
FSIZE = "BENCH_FAULTS_FSIZE"


def _recorder(target: str) -> tuple[int, bool]:
    if target.startswith("fd:"):
        return int(target[3:]), False
    flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC
    return os.open(target, flags, 0o644), True


def install_recorder() -> None:
    """Record every append that returned (see the module docstring)."""
    target = os.environ.get(COMMITTED)
    if not target:
        return
    fd, sync = _recorder(target)
    original = SqliteStore.append

    async def append(
        self: SqliteStore, run_id: str, events: Sequence[Event], *, lease: Lease | None = None
    ) -> None:
        events = list(events)
        await original(self, run_id, events, lease=lease)
        now = time.time()
        data = "".join(f"{run_id} {e.seq} {e.hash} {e.kind} {now:.6f}\n" for e in events)
        view = memoryview(data.encode())
        while view:
            view = view[os.write(fd, view) :]
        if sync:
            os.fsync(fd)  # before the run goes on: a kill -9 right after keeps the line

    setattr(SqliteStore, "append", append)  # noqa: B010 - patched on the class for the CLI


def limit_disk() -> None:
    size = os.environ.get(FSIZE)
    if size is None and os.environ.get(FILL) != "1":
        return
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    if size is not None:
        hard = resource.getrlimit(resource.RLIMIT_FSIZE)[1]
        resource.setrlimit(resource.RLIMIT_FSIZE, (int(size), hard))


async def run_agent(name: str, db: Path) -> dict[str, Any]:
    from dataclasses import replace

    store = SqliteStore(db)
    try:
        agent = replace(AGENTS[name](), store=store)
        outcome = await agent.run("go", agent_ref=ref(name))
    finally:
        await store.close()
    error = None if outcome.error is None else outcome.error.type
    return {"run_id": outcome.run_id, "status": outcome.status, "error": error}


def main() -> None:
    mode, args = sys.argv[1], sys.argv[2:]
    install_recorder()
    limit_disk()
    if mode == "tether":
        from tether.cli.app import main as tether

        sys.argv = ["tether", *args]
        tether()
    else:
        print(json.dumps(asyncio.run(run_agent(args[0], Path(args[1])))), flush=True)


if __name__ == "__main__":
    main()
