"""The SQLite store's pending file: the commit point of leased appends.

A "crash" here closes the store's pending file without applying it (the kernel drops the
``flock`` exactly as when the process dies); the real ``kill -9`` runs are in
``tests/durability``.
"""

from __future__ import annotations

import asyncio
import os
import socket
from pathlib import Path

import pytest

from tether.stores import LeaseHeld, SqliteStore, StaleLease
from tether.stores._pendinglog import LOG_SUFFIX

from .helpers import agent_log


def crash(store: SqliteStore) -> None:
    """Lose the store as a killed process would: nothing applied, the files left behind.

    Closing a file drops its ``flock`` exactly as the kernel does when the process dies.
    """
    db = store._db  # pyright: ignore[reportPrivateUsage]
    log = db.log
    assert log is not None
    files = [*log._older.values(), log._current]  # pyright: ignore[reportPrivateUsage]
    for file in files:
        if file is not None:
            os.close(file.fd)
    log._older.clear()  # pyright: ignore[reportPrivateUsage]
    log._current = None  # pyright: ignore[reportPrivateUsage]
    store._leases.held.clear()  # pyright: ignore[reportPrivateUsage]
    db.pending.clear()
    db.closed = True
    db.worker.stop()


DEAD = f"{socket.gethostname()}:999999:gone"
"""An owner whose process is gone: its lease is free at once, as after a real crash."""


def pending_files(store: SqliteStore) -> list[Path]:
    assert store.pending_dir is not None
    return sorted(store.pending_dir.glob(f"*{LOG_SUFFIX}"))


def db_rows(path: Path, run_id: str) -> int:
    import sqlite3

    with sqlite3.connect(path) as conn:
        (count,) = conn.execute(
            "SELECT COUNT(*) FROM events WHERE run_id = ?", (run_id,)
        ).fetchone()
    return int(count)


async def test_a_leased_append_is_in_the_file_before_the_database(tmp_path: Path) -> None:
    store = SqliteStore(tmp_path / "t.db", apply_interval=3600)
    log = await agent_log()
    run_id = log[0].run_id
    lease = await store.acquire(run_id, "worker-a")
    await store.append(run_id, log[:3], lease=lease)
    assert db_rows(store.path, run_id) == 0  # committed to the file only
    assert len(pending_files(store)) == 1
    assert await store.read(run_id) == log[:3]  # a read applies it
    assert db_rows(store.path, run_id) == 3
    await store.close()
    assert pending_files(store) == []  # closed cleanly: nothing left behind


async def test_a_crashed_stores_appends_are_replayed_by_the_next_store(tmp_path: Path) -> None:
    first = SqliteStore(tmp_path / "t.db", apply_interval=3600)
    log = await agent_log()
    run_id = log[0].run_id
    lease = await first.acquire(run_id, DEAD, ttl=600)
    await first.append(run_id, log[:4], lease=lease)
    await first.append(run_id, log[4:6], lease=lease)
    crash(first)

    second = SqliteStore(tmp_path / "t.db")
    try:
        assert await second.read(run_id) == log[:6]
        assert (await second.info(run_id)).events == 6
        assert pending_files(second) == []  # applied, then deleted
        taken = await second.acquire(run_id, "worker-b")  # its owner is gone
        assert taken.token == lease.token + 1
        await second.append(run_id, log[6:], lease=taken)
        assert await second.read(run_id) == log
    finally:
        await second.close()


async def test_a_torn_last_record_never_happened(tmp_path: Path) -> None:
    first = SqliteStore(tmp_path / "t.db", apply_interval=3600)
    log = await agent_log()
    run_id = log[0].run_id
    lease = await first.acquire(run_id, "worker-a")
    await first.append(run_id, log[:2], lease=lease)
    [path] = pending_files(first)
    whole = path.read_bytes()
    await first.append(run_id, log[2:5], lease=lease)
    torn = path.read_bytes()[: len(whole) + (len(path.read_bytes()) - len(whole)) // 2]
    crash(first)
    path.write_bytes(torn)  # the process died inside the second write

    second = SqliteStore(tmp_path / "t.db")
    try:
        assert await second.read(run_id) == log[:2]
        assert pending_files(second) == []
    finally:
        await second.close()


async def test_a_fresh_lease_is_not_renewed_at_once(tmp_path: Path) -> None:
    """The first heartbeat comes a third of the TTL after the grant, never at once: it would
    be a wasted transaction, and would apply the pending records before they are due."""
    import sqlite3

    def expires(run_id: str) -> float:
        with sqlite3.connect(tmp_path / "t.db") as conn:
            (value,) = conn.execute(
                "SELECT expires_at FROM leases WHERE run_id = ?", (run_id,)
            ).fetchone()
        return float(value)

    store = SqliteStore(tmp_path / "t.db", apply_interval=3600)
    try:
        log = await agent_log()
        run_id = log[0].run_id
        lease = await store.acquire(run_id, "worker-a")
        await asyncio.sleep(0.05)
        await store.append(run_id, log[:3], lease=lease)
        store._db.worker.wake()  # pyright: ignore[reportPrivateUsage] - a tick of its thread
        await asyncio.sleep(0.3)
        assert expires(run_id) == lease.expires_at  # as granted: not renewed yet
        assert db_rows(store.path, run_id) == 0  # still only in the pending file
    finally:
        await store.close()


async def test_a_damaged_file_is_kept_and_what_precedes_the_damage_applied(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    first = SqliteStore(tmp_path / "t.db", apply_interval=3600)
    log = await agent_log()
    run_id = log[0].run_id
    lease = await first.acquire(run_id, "worker-a")
    await first.append(run_id, log[:2], lease=lease)
    await first.append(run_id, log[2:4], lease=lease)
    await first.append(run_id, log[4:6], lease=lease)
    [path] = pending_files(first)
    lines = path.read_bytes().split(b"\n")
    crash(first)
    path.write_bytes(b"\n".join([lines[0], b"{not json", *lines[2:]]))

    second = SqliteStore(tmp_path / "t.db")
    try:
        assert await second.read(run_id) == log[:2]
        assert pending_files(second) == []
        assert path.with_suffix(".damaged").exists()  # kept for a person to look at
        assert "damaged" in caplog.text
    finally:
        await second.close()


async def test_a_live_stores_appends_and_release_are_seen_by_another(tmp_path: Path) -> None:
    first = SqliteStore(tmp_path / "t.db", apply_interval=3600)
    second = SqliteStore(tmp_path / "t.db", apply_interval=3600)
    try:
        log = await agent_log()
        run_id = log[0].run_id
        lease = await first.acquire(run_id, "worker-a", ttl=600)
        await first.append(run_id, log[:3], lease=lease)
        assert await second.read(run_id) == log[:3]  # read from the live file
        with pytest.raises(LeaseHeld):
            await second.acquire(run_id, "worker-b")
        await first.release(lease)  # a record in the file, not yet in the database
        taken = await second.acquire(run_id, "worker-b")
        assert taken.token == lease.token + 1
        await second.append(run_id, log[3:], lease=taken)
        with pytest.raises(StaleLease):
            await first.append(run_id, log[3:], lease=lease)
        assert await first.read(run_id) == log
        assert len(pending_files(first)) == 2  # each store's own file, still live
    finally:
        await first.close()
        await second.close()
    assert pending_files(first) == []


async def test_a_record_whose_lease_was_replaced_is_kept_not_applied(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A writer that lost its lease while paused must not fork the log (fencing on apply)."""
    first = SqliteStore(tmp_path / "t.db", apply_interval=3600)
    log = await agent_log()
    run_id = log[0].run_id
    lease = await first.acquire(run_id, DEAD, ttl=600)
    await first.append(run_id, log[:3], lease=lease)
    [path] = pending_files(first)
    before = path.read_bytes()
    await first.append(run_id, log[3:5], lease=lease)
    late = path.read_bytes()[len(before) :]
    crash(first)
    path.write_bytes(before)  # as if the second write came after another owner took over

    second = SqliteStore(tmp_path / "t.db")
    try:
        taken = await second.acquire(run_id, "worker-b")
        await second.append(run_id, log[3:4], lease=taken)
        dead = tmp_path / "t.db-pending" / f"999999-dead{LOG_SUFFIX}"
        dead.write_bytes(late)  # the paused writer's record surfaces now
        assert await second.read(run_id) == log[:4]
        refused = tmp_path / "t.db-pending" / "refused.jsonl"
        assert refused.read_bytes() == late
        assert "could not be applied" in caplog.text
    finally:
        await second.close()


async def test_leased_appends_reach_the_database_without_a_read(tmp_path: Path) -> None:
    store = SqliteStore(tmp_path / "t.db", apply_interval=0.05)
    log = await agent_log()
    run_id = log[0].run_id
    lease = await store.acquire(run_id, "worker-a")
    await store.append(run_id, log, lease=lease)
    for _ in range(600):  # the store's thread applies them on its own, within moments
        if db_rows(store.path, run_id) == len(log):
            break
        await asyncio.sleep(0.05)
    assert db_rows(store.path, run_id) == len(log)
    await store.close()


async def test_a_run_cancelled_while_it_takes_its_lease_can_be_run_again_at_once(
    tmp_path: Path,
) -> None:
    # the lease was granted on the store's thread after the caller stopped waiting: held by
    # nobody until it expired (30 s), the same run id got LeaseHeld ("alive ... another
    # process is running it"), the supervisor pattern of calling again after a timeout failed
    import asyncio

    from tether import Agent
    from tether.stores import SqliteStore
    from tether.testing import ScriptedModel, finish

    store = SqliteStore(tmp_path / "t.db")
    agent = Agent(model=ScriptedModel([finish("ok")]), store=store)
    assert (await agent.run("warm up")).status == "finished"  # the store is open and checked
    for i in range(5):
        run_id = f"job-{i}"
        task = asyncio.create_task(agent.run("nightly report", run_id=run_id))
        await asyncio.sleep(0)  # now waiting for the lease on the store's thread
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        again = await agent.run("nightly report", run_id=run_id)
        assert again.status == "finished"
    await store.close()
