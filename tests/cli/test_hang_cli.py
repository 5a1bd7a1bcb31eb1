"""``tether run`` with a tool that blocks the event loop for good: the process ends, exit 2.

From inside the loop nothing can stop such a tool; the monitor thread sees the loop held past
the call's deadline and ends the process with a message, and the run goes on with
``tether resume`` as after a crash (the call's outcome unknown).
"""

from __future__ import annotations

import asyncio
import os
import signal
import sys
import time
from pathlib import Path

from tether.stores import SqliteStore

ROOT = Path(__file__).parents[2]


async def spawn(*args: str, env: dict[str, str] | None = None) -> asyncio.subprocess.Process:
    """``tether ARGS`` in a process of its own, from the repository's root."""
    return await asyncio.create_subprocess_exec(
        sys.executable,
        "-c",
        "from tether.cli.app import main; main()",
        *args,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        cwd=ROOT,
        env=env,
    )


async def tether(*args: str, env: dict[str, str] | None = None) -> tuple[int, str, str]:
    proc = await spawn(*args, env=env)
    out, err = await asyncio.wait_for(proc.communicate(), 120)
    assert proc.returncode is not None
    return proc.returncode, out.decode(), err.decode()


async def test_a_tool_that_blocks_the_loop_for_good_ends_the_process_not_hangs_it(
    tmp_path: Path,
) -> None:
    db = str(tmp_path / "t.db")
    started = time.monotonic()
    code, _, err = await tether(
        "run", "go", "--agent", "tests.cli.hang_agent:agent", "--db", db, "--no-log"
    )
    # the call's timeout and the hang margin (a few seconds) plus start-up, with room for a busy
    # machine; a hang would last the tool's hour
    assert time.monotonic() - started < 60
    assert code == 2, err
    assert "blocked the event loop" in err
    assert "Traceback" not in err
    store = SqliteStore(db)
    try:
        (row,) = await store.runs()
        kinds = [e.kind for e in await store.read(row.run_id)]
    finally:
        await store.close()
    assert kinds[-1] == "policy_decided"  # the call was under way: its intent is logged

    code, _, err = await tether(
        "resume", row.run_id, "--agent", "tests.cli.hang_agent:agent", "--db", db
    )
    assert code == 0, err
    store = SqliteStore(db)
    try:
        kinds = [e.kind for e in await store.read(row.run_id)]
    finally:
        await store.close()
    assert "tool_call_unknown" in kinds  # not run again: it may have taken effect
    assert kinds[-1] == "run_finished"


async def wait_for_start(started: Path) -> None:
    deadline = time.monotonic() + 60
    while not started.exists():
        assert time.monotonic() < deadline, "the tool never started"
        await asyncio.sleep(0.05)


async def test_ctrl_c_during_a_thread_tool_ends_the_run_without_waiting_for_it(
    tmp_path: Path,
) -> None:
    # before: the program waited for the tool's minute (a thread cannot be stopped), silently,
    # and the log said the call was interrupted as if it had stopped
    started, db = tmp_path / "started", tmp_path / "t.db"
    proc = await spawn(
        *("run", "go", "--agent", "tests.cli.thread_agent:agent", "--db", str(db), "--no-log"),
        env={**os.environ, "TETHER_TEST_STARTED": str(started)},
    )
    await wait_for_start(started)
    proc.send_signal(signal.SIGINT)
    t0 = time.monotonic()
    _, err = await asyncio.wait_for(proc.communicate(), 50)
    assert time.monotonic() - t0 < 40  # not the tool's minute
    text = " ".join(err.decode().split())
    assert "cancelling (Ctrl-C)" in text
    assert "outcome is recorded as unknown" in text
    assert "Traceback" not in text
    store = SqliteStore(str(db))
    try:
        (row,) = await store.runs()
        events = await store.read(row.run_id)
    finally:
        await store.close()
    assert row.status == "cancelled"
    assert [e.kind for e in events][-2:] == ["tool_call_unknown", "run_finished"]


async def test_ctrl_c_says_what_it_does_and_a_second_one_quits_at_once(tmp_path: Path) -> None:
    # before: a second Ctrl-C printed a traceback, and the command suggested resuming a run
    # that had ended; a tool holding the event loop is what only a second Ctrl-C ends
    started = tmp_path / "started"
    proc = await spawn(
        *("run", "go", "--agent", "tests.cli.loop_hog_agent:agent"),
        *("--db", str(tmp_path / "t.db"), "--no-log"),
        env={**os.environ, "TETHER_TEST_STARTED": str(started)},
    )
    await wait_for_start(started)
    proc.send_signal(signal.SIGINT)
    await asyncio.sleep(1.0)
    proc.send_signal(signal.SIGINT)
    t0 = time.monotonic()
    _, err = await asyncio.wait_for(proc.communicate(), 30)
    assert time.monotonic() - t0 < 20  # not the tool's minute
    assert proc.returncode == 130
    text = " ".join(err.decode().split())
    assert "cancelling (Ctrl-C)" in text
    assert "quitting now" in text
    assert "Traceback" not in text
