"""The SQLite store under faults: another process's lock, read-only media, damage, full disks.

Whatever happens, no committed event is lost, the event loop is never frozen by SQLite, and
every failure is a typed store error that names the file and says what to do.
"""

from __future__ import annotations

import asyncio
import math
import sqlite3
import sys
import textwrap
from pathlib import Path

import pytest

from tests.stores.faults import WriteLock, corrupt_pages, read_only
from tether import Agent, tool
from tether.errors import (
    ConfigError,
    StoreBusy,
    StoreCorrupt,
    StoreUnavailable,
    StoreWriteError,
)
from tether.events import RunFinished
from tether.stores import SqliteStore
from tether.stores._pendinglog import LOG_SUFFIX
from tether.stores._sqliteopen import sqlite_error
from tether.testing import ScriptedModel, call, finish

from .helpers import agent_log


def pending_files(store: SqliteStore) -> list[Path]:
    assert store.pending_dir is not None
    return sorted(store.pending_dir.glob(f"*{LOG_SUFFIX}"))


async def stored(path: Path, run_id: str) -> list[str]:
    """The kinds of the run's events, read by a fresh store on the file."""
    store = SqliteStore(path)
    try:
        return [e.kind for e in await store.read(run_id)]
    finally:
        await store.close()


# -- another process holds the file locked ---------------------------------------------------


async def test_a_lock_held_longer_than_the_busy_timeout_loses_no_event(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "t.db"
    store = SqliteStore(path, busy_timeout=0.2)
    gate = asyncio.Event()
    locked = asyncio.Event()

    @tool(read_only=True, open_world=False)
    async def wait_for_lock(n: int) -> str:
        """Waits while another process takes the file.

        Args:
            n: Which call.
        """
        if n == 1:
            locked.set()
            await gate.wait()
        return f"waited {n}"

    script = [call("wait_for_lock", n=i) for i in range(4)] + [finish("done")]
    agent = Agent(model=ScriptedModel(script), tools=[wait_for_lock], store=store)
    run = asyncio.ensure_future(agent.run("go"))
    await asyncio.wait_for(locked.wait(), 60)  # mid-run: the second tool call is running
    async with WriteLock(path) as lock:
        gate.set()
        outcome = await run  # the run goes on: its commits do not need the database
        assert outcome.status == "finished"
        for _ in range(600):  # the store's thread tries, and fails, to apply them: it says so
            if "pending records wait in" in caplog.text:
                break
            await asyncio.sleep(0.05)
        assert "pending records wait in" in caplog.text
        assert pending_files(store)  # not applied yet: the file holds them, and stays
        await lock.release()
    await store.close()
    kinds = await stored(path, outcome.run_id)
    assert kinds == [e.kind for e in outcome.events]  # every event, in order, none lost
    assert kinds[-1] == "run_finished"
    assert not (store.pending_dir or path).joinpath("refused.jsonl").exists()
    assert pending_files(store) == []  # deleted only after every record was applied
    check = SqliteStore(path)
    try:
        assert (await check.info(outcome.run_id)).status == "finished"
    finally:
        await check.close()


async def test_the_event_loop_keeps_moving_while_the_file_is_locked(tmp_path: Path) -> None:
    path = tmp_path / "t.db"
    log = await agent_log()
    store = SqliteStore(path, busy_timeout=60)
    await store.append(log[0].run_id, log[:2])  # the file exists, with a run
    ticks = 0

    async def ticker() -> None:
        nonlocal ticks
        for _ in range(20):
            await asyncio.sleep(0.01)
            ticks += 1

    async with WriteLock(path) as lock:
        waiting = asyncio.ensure_future(store.acquire(log[0].run_id, "worker"))  # needs the lock
        await asyncio.wait_for(ticker(), 30)  # on a frozen loop this could not finish
        assert ticks == 20
        assert not waiting.done()  # still waiting for the lock, off the loop
        await lock.release()  # released only now: a frozen loop would never get here
        lease = await asyncio.wait_for(waiting, 60)
    await store.release(lease)
    await store.close()


async def test_close_keeps_records_the_database_cannot_take_yet(tmp_path: Path) -> None:
    path = tmp_path / "t.db"
    log = await agent_log()
    run_id = log[0].run_id
    store = SqliteStore(path, apply_interval=3600, busy_timeout=0.2)
    lease = await store.acquire(run_id, "worker")
    async with WriteLock(path) as lock:
        await store.append(run_id, log, lease=lease)  # durable in the pending file
        await store.close()  # cannot apply: keeps the file rather than deleting it
        assert len(pending_files(store)) == 1
        await lock.release()
    assert await stored(path, run_id) == [e.kind for e in log]  # the next store applies it


async def test_a_new_run_starts_and_finishes_while_the_file_is_locked(tmp_path: Path) -> None:
    path = tmp_path / "t.db"
    store = SqliteStore(path, busy_timeout=0.3)
    await store.runs()  # create the file
    agent = Agent(model=ScriptedModel([finish("x")]), store=store)
    async with WriteLock(path) as lock:
        outcome = await agent.run("go")  # its commits need the pending file, not the database
        assert outcome.status == "finished"
        await lock.release()
    await store.close()
    assert await stored(path, outcome.run_id) == [e.kind for e in outcome.events]


async def test_a_lock_at_the_start_of_a_named_run_is_a_busy_error(tmp_path: Path) -> None:
    path = tmp_path / "t.db"
    store = SqliteStore(path, busy_timeout=0.3)
    await store.runs()  # create the file
    agent = Agent(model=ScriptedModel([finish("x")]), store=store)
    async with WriteLock(path):
        with pytest.raises(StoreBusy, match="locked by another process"):
            await agent.run("go", run_id="nightly")  # the id may exist: the database decides
    assert await store.runs() == []  # nothing was started
    await store.close()


# -- read-only files and directories ----------------------------------------------------------


async def make_store_with_a_run(path: Path) -> str:
    log = await agent_log()
    store = SqliteStore(path)
    await store.append(log[0].run_id, log)
    await store.close()
    for extra in ("-wal", "-shm"):
        path.with_name(path.name + extra).unlink(missing_ok=True)
    return log[0].run_id


@pytest.mark.parametrize("what", ["file", "directory", "both"])
async def test_a_read_only_store_can_be_read_and_refuses_writes(tmp_path: Path, what: str) -> None:
    folder = tmp_path / "store"
    folder.mkdir()
    path = folder / "t.db"
    run_id = await make_store_with_a_run(path)
    targets = {"file": (path,), "directory": (folder,), "both": (folder, path)}[what]
    with read_only(*targets):
        store = SqliteStore(path)
        try:
            assert [r.run_id for r in await store.runs()] == [run_id]
            events = await store.read(run_id)
            assert isinstance(events[-1], RunFinished)
            assert len(await store.read_encoded(run_id)) == len(events)
            with pytest.raises(StoreWriteError, match="read-only"):
                await store.acquire("another", "worker")
            assert store.read_only
        finally:
            await store.close()


# -- damage, wrong files, paths, full disks ---------------------------------------------------


async def test_a_damaged_file_is_reported_as_corrupt_with_how_to_recover(tmp_path: Path) -> None:
    path = tmp_path / "t.db"
    store = SqliteStore(path)
    for _ in range(30):
        log = await agent_log()
        await store.append(log[0].run_id, log)
    await store.close()
    corrupt_pages(path)
    damaged = SqliteStore(path)
    with pytest.raises(StoreCorrupt) as caught:
        await damaged.runs()
    await damaged.close()
    message = str(caught.value)
    assert str(path) in message
    assert ".recover" in message


async def test_a_file_that_is_not_a_database_is_named_as_such(tmp_path: Path) -> None:
    path = tmp_path / "notes.txt"
    path.write_text("shopping list\n" * 500)
    store = SqliteStore(path)
    with pytest.raises(StoreUnavailable, match="not a tether run store"):
        await store.runs()
    await store.close()


def test_a_store_below_a_regular_file_says_which_file_is_in_the_way(tmp_path: Path) -> None:
    blocker = tmp_path / "runs"
    blocker.write_text("I am a file")
    with pytest.raises(StoreUnavailable, match=r"runs is a file, not a directory"):
        SqliteStore(blocker / "deeper" / "t.db")


def test_permission_problems_are_not_reported_as_a_wrong_file(tmp_path: Path) -> None:
    exc = sqlite3.OperationalError("unable to open database file")
    exc.sqlite_errorname = "SQLITE_CANTOPEN"  # pyright: ignore[reportAttributeAccessIssue]
    error = sqlite_error(exc, tmp_path / "t.db", "opening it")
    assert isinstance(error, StoreUnavailable)
    assert "may read and write" in str(error)
    assert "not a tether run store" not in str(error)


_FULL_DISK = """
import asyncio, resource, signal, sys
from pathlib import Path
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the limit fails with EFBIG
from tests.stores.helpers import agent_log
from tether.errors import StoreWriteError
from tether.stores import SqliteStore

async def main(path):
    log = await agent_log()
    store = SqliteStore(path, apply_interval=3600)
    lease = await store.acquire(log[0].run_id, "worker")
    await store.append(log[0].run_id, log[:2], lease=lease)
    size = sum(p.stat().st_size for p in store.pending_dir.iterdir())
    hard = resource.getrlimit(resource.RLIMIT_FSIZE)[1]
    resource.setrlimit(resource.RLIMIT_FSIZE, (size + 10, hard))
    try:
        await store.append(log[0].run_id, log[2:], lease=lease)
    except StoreWriteError as exc:
        print("append:", exc)
    resource.setrlimit(resource.RLIMIT_FSIZE, (1, hard))  # not even a new, empty file grows
    try:
        await store.release(lease)
    except StoreWriteError as exc:
        print("release:", exc)
    resource.setrlimit(resource.RLIMIT_FSIZE, (hard, hard))
    await store.close()
    reread = SqliteStore(path)
    print("kept:", len(await reread.read(log[0].run_id)))
    await reread.close()

asyncio.run(main(Path(sys.argv[1])))
"""


async def test_a_full_disk_is_a_store_write_error_and_keeps_what_was_stored(
    tmp_path: Path,
) -> None:
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-c",
        textwrap.dedent(_FULL_DISK),
        str(tmp_path / "t.db"),
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        cwd=Path(__file__).parents[2],
    )
    out, err = await asyncio.wait_for(proc.communicate(), 120)
    assert proc.returncode == 0, err.decode()
    lines = out.decode().splitlines()
    assert lines[0].startswith("append: could not write"), lines
    assert "full" in lines[0], lines
    assert lines[1].startswith("release: could not write"), lines
    assert lines[2] == "kept: 2", lines


@tool(read_only=True, open_world=False)
async def pause() -> str:
    """Takes a moment: the store's thread applies what the run committed meanwhile."""
    await asyncio.sleep(0.3)
    return "ok"


@pytest.mark.parametrize("seconds", [math.inf, 1e12])
async def test_a_busy_timeout_of_for_ever_works(
    tmp_path: Path, seconds: float, caplog: pytest.LogCaptureFixture
) -> None:
    store = SqliteStore(tmp_path / "t.db", busy_timeout=seconds, apply_interval=0.01)
    try:
        script = [call("pause"), call("pause"), finish("done")]
        agent = Agent(model=ScriptedModel(script), tools=[pause], store=store)
        assert (await agent.run("wait")).status == "finished"
    finally:
        await store.close()
    # the store's brief waits for a lock set SQLite's timeout back to one it can hold
    assert [r.getMessage() for r in caplog.records if r.levelname == "WARNING"] == []


@pytest.mark.parametrize("seconds", [math.nan, -1.0])
def test_a_busy_timeout_that_is_not_seconds_is_a_config_error(
    tmp_path: Path, seconds: float
) -> None:
    with pytest.raises(ConfigError, match="busy_timeout"):
        SqliteStore(tmp_path / "t.db", busy_timeout=seconds)
    assert not (tmp_path / "t.db").exists()
