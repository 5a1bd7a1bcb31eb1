"""A run's lease holds while its owner lives: no other process takes it over mid-tool.

The owner's store renews the lease (a heartbeat on the store's own thread) through model
calls and tools, also while a tool blocks the event loop; another process that tries to
resume the run meanwhile is refused, and the side effect runs exactly once.
"""

from __future__ import annotations

import asyncio
import sys
import uuid
from pathlib import Path

import pytest

from tests.durability.lease_worker import TTL

ROOT = Path(__file__).parents[2]


async def start(*args: str) -> asyncio.subprocess.Process:
    return await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "tests.durability.lease_worker",
        *args,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        cwd=ROOT,
    )


async def line(proc: asyncio.subprocess.Process) -> str:
    assert proc.stdout is not None
    return (await asyncio.wait_for(proc.stdout.readline(), 120)).decode().strip()


@pytest.mark.parametrize(
    ("how", "ttl", "wait"),
    [
        ("async", str(TTL), TTL * 2.5),  # the lease would have lapsed twice over, unrenewed
        ("blocking", str(TTL), TTL * 2.5),  # the loop is blocked: the heartbeat still beats
        ("async", "default", 33.0),  # the field report: 33 s into a tool, 30 s leases
    ],
)
async def test_a_resume_during_a_long_tool_call_is_refused_while_the_owner_lives(
    tmp_path: Path, how: str, ttl: str, wait: float
) -> None:
    db, run_id = tmp_path / "t.db", str(uuid.uuid4())
    owner = await start("run", str(db), run_id, str(tmp_path), how, ttl)
    try:
        assert await line(owner) == "in tool"
        await asyncio.sleep(wait)
        other = await start("resume", str(db), run_id, str(tmp_path))
        answer = await line(other)
        _, err = await asyncio.wait_for(other.communicate(), 120)
        assert answer == "held", err.decode()
        (tmp_path / "go").touch()
        assert await line(owner) == "finished"
        _, err = await asyncio.wait_for(owner.communicate(), 120)
        assert owner.returncode == 0, err.decode()
    finally:
        if owner.returncode is None:
            owner.kill()
            await owner.wait()
    assert (tmp_path / "effects").read_text() == "effect 1\n"  # ran once, by its owner


async def test_a_dead_owners_run_is_taken_over_at_once(tmp_path: Path) -> None:
    db, run_id = tmp_path / "t.db", str(uuid.uuid4())
    owner = await start("run", str(db), run_id, str(tmp_path), "async")
    assert await line(owner) == "in tool"
    owner.kill()  # kill -9 mid-tool: its lease is still unexpired in the file
    await owner.wait()
    (tmp_path / "go").touch()
    other = await start("resume", str(db), run_id, str(tmp_path))
    assert await line(other) == "finished"
    await asyncio.wait_for(other.communicate(), 120)
    # the effect has no idempotency key: after the crash it is not run again blindly
    assert (tmp_path / "effects").read_text() == "effect 1\n"
