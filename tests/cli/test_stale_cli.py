"""``tether runs --stale`` and ``tether abandon``: runs left running by a process that died.

The runs are real: a worker process (``tests.durability.lease_worker``) runs an agent whose
tool waits, and is killed with SIGKILL mid-tool, leaving its run ``running`` with a lease
whose owner is gone. A worker that is left alive owns its run: nothing may end it.
"""

from __future__ import annotations

import asyncio
import dataclasses
import gc
import sys
import uuid
from collections.abc import AsyncIterator, Iterator
from datetime import UTC
from pathlib import Path

import pytest
from typer.testing import CliRunner

from tests.support import assert_protocol_valid
from tether.cli.app import app
from tether.events import Event, RunFinished, ToolCallUnknown
from tether.stores import RunInfo, SqliteStore

ROOT = Path(__file__).parents[2]


@pytest.fixture(autouse=True)
def _isolated(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[None]:  # pyright: ignore[reportUnusedFunction]
    """Run inside tmp_path; collect garbage to catch a file a command left open."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("TETHER_DB", raising=False)
    monkeypatch.delenv("FORCE_COLOR", raising=False)
    monkeypatch.setenv("COLUMNS", "2000")
    yield
    gc.collect()


@dataclasses.dataclass(frozen=True, slots=True)
class Ran:
    exit_code: int
    stdout: str
    stderr: str
    crash: str


def tether(*args: str) -> Ran:
    result = CliRunner().invoke(app, list(args))
    crash = "" if isinstance(result.exception, SystemExit | None) else repr(result.exception)
    return Ran(result.exit_code, result.stdout, result.stderr, crash)


async def cli(*args: str) -> Ran:
    """``tether`` off the event loop (a worker's pipes are read meanwhile)."""
    return await asyncio.to_thread(tether, *args)


@dataclasses.dataclass(slots=True)
class Worker:
    proc: asyncio.subprocess.Process
    db: Path
    run_id: str
    folder: Path

    async def line(self) -> str:
        assert self.proc.stdout is not None
        return (await asyncio.wait_for(self.proc.stdout.readline(), 120)).decode().strip()


async def start_worker(tmp_path: Path) -> Worker:
    """A process running a run, inside its tool (it waits there until ``go`` exists)."""
    db, run_id = tmp_path / "t.db", str(uuid.uuid4())
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "tests.durability.lease_worker",
        "run",
        str(db),
        run_id,
        str(tmp_path),
        "async",
        "default",  # 30 s leases: alive or dead is told by the process, not a lapse
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        cwd=ROOT,
    )
    worker = Worker(proc, db, run_id, tmp_path)
    assert await worker.line() == "in tool"
    return worker


@pytest.fixture
async def killed(tmp_path: Path) -> Worker:
    """A run whose process was killed (SIGKILL) while its tool ran."""
    worker = await start_worker(tmp_path)
    worker.proc.kill()
    await worker.proc.wait()
    return worker


@pytest.fixture
async def live(tmp_path: Path) -> AsyncIterator[Worker]:
    """A run whose process is alive, inside its tool; it finishes when the test is done."""
    worker = await start_worker(tmp_path)
    try:
        yield worker
    finally:
        (tmp_path / "go").touch()
        await asyncio.wait_for(worker.proc.communicate(), 120)


async def stored(db: Path, run_id: str) -> tuple[RunInfo, list[Event]]:
    store = SqliteStore(db)
    try:
        return await store.info(run_id), await store.read(run_id)
    finally:
        await store.close()


# -- listing them ----------------------------------------------------------------------------


async def test_runs_stale_lists_a_run_whose_process_was_killed(killed: Worker) -> None:
    ran = await cli("runs", "--stale", "--db", str(killed.db))

    assert ran.exit_code == 0, ran
    [row] = ran.stdout.splitlines()
    run_id, agent, owner, reason, last = row.split("\t")
    assert (run_id, agent, reason) == (killed.run_id, "leaser", "owner_gone")
    assert owner.split(":")[1] == str(killed.proc.pid)  # the process that was killed
    info, _ = await stored(killed.db, killed.run_id)
    assert last == info.updated_at.astimezone(UTC).isoformat(timespec="seconds")
    assert f"tether resume {killed.run_id}" in ran.stderr
    assert f"tether abandon {killed.run_id}" in ran.stderr


async def test_runs_stale_leaves_out_a_run_whose_owner_is_alive(live: Worker) -> None:
    ran = await cli("runs", "--stale", "--db", str(live.db))

    assert ran.exit_code == 0, ran
    assert ran.stdout == ""
    assert "no stale runs" in ran.stderr
    listed = await cli("runs", "--status", "running", "--db", str(live.db))
    assert live.run_id in listed.stdout  # it is running: it is just not stale


async def test_prune_never_deletes_a_stale_run(killed: Worker) -> None:
    ran = await cli("prune", "--keep-last", "0", "--db", str(killed.db))

    assert ran.exit_code == 0, ran
    assert "deleted 0 runs" in ran.stderr
    info, _ = await stored(killed.db, killed.run_id)
    assert info.status == "running"


# -- ending them -----------------------------------------------------------------------------


async def test_abandon_ends_a_dead_owners_run_through_its_log(killed: Worker) -> None:
    _, before = await stored(killed.db, killed.run_id)

    ran = await cli(
        "abandon", killed.run_id[:13], "--reason", "its worker was killed", "--by", "ops",
        "--db", str(killed.db),
    )  # fmt: skip

    assert ran.exit_code == 0, ran
    assert f"abandoned {killed.run_id}: it ended failed (Abandoned)" in ran.stderr
    info, events = await stored(killed.db, killed.run_id)
    assert events[: len(before)] == before  # appended to, never edited
    added = events[len(before) :]
    assert [e.kind for e in added] == ["tool_call_unknown", "run_finished"]
    unknown, finished = added
    assert isinstance(unknown, ToolCallUnknown)
    assert unknown.tool == "slow_effect"  # allowed, and it was running: it may have run
    assert isinstance(finished, RunFinished)
    assert finished.status == "failed"
    assert finished.error is not None
    assert finished.error.type == "Abandoned"
    assert finished.error.message.startswith("abandoned by ops (")
    assert "its worker was killed" in finished.error.message
    assert info.status == "failed"
    assert_protocol_valid(events)
    shown = await cli("show", killed.run_id, "--db", str(killed.db))
    assert shown.stdout.splitlines()[-1].split()[1:4] == ["run", "failed", "—"]
    assert "Abandoned: abandoned by ops" in shown.stdout.splitlines()[-1]
    audited = await cli("audit", killed.run_id, "--db", str(killed.db))
    assert audited.exit_code == 0, audited
    assert f"chain verified: {len(events)} events" in audited.stderr
    assert (await cli("runs", "--stale", "--db", str(killed.db))).stdout == ""


async def test_an_abandoned_run_can_be_pruned(killed: Worker) -> None:
    assert (await cli("abandon", killed.run_id, "--db", str(killed.db))).exit_code == 0

    ran = await cli("prune", "--keep-last", "0", "--db", str(killed.db))

    assert ran.exit_code == 0, ran
    assert ran.stdout.split() == [killed.run_id]
    assert (await cli("runs", "--db", str(killed.db))).stdout == ""


async def test_resuming_an_abandoned_run_changes_nothing_and_says_it_ended(
    killed: Worker,
) -> None:
    assert (await cli("abandon", killed.run_id, "--db", str(killed.db))).exit_code == 0
    _, before = await stored(killed.db, killed.run_id)

    ran = await cli("resume", killed.run_id, "--db", str(killed.db))

    assert ran.exit_code == 1, ran  # it did not finish: it failed, abandoned
    assert ran.crash == ""
    assert f"run {killed.run_id} has ended already (failed)" in ran.stderr
    assert "Abandoned" in ran.stderr
    _, after = await stored(killed.db, killed.run_id)
    assert after == before
    assert (killed.folder / "effects").read_text() == "effect 1\n"  # never run again


async def test_abandoning_a_run_that_ended_is_refused(killed: Worker) -> None:
    assert (await cli("abandon", killed.run_id, "--db", str(killed.db))).exit_code == 0
    _, before = await stored(killed.db, killed.run_id)

    ran = await cli("abandon", killed.run_id, "--db", str(killed.db))

    assert ran.exit_code == 2, ran
    assert ran.stderr.splitlines() == [
        f"error: run {killed.run_id} has ended already (failed), so there is nothing to "
        f"abandon: see how it ended with `tether show {killed.run_id}`"
    ]
    _, after = await stored(killed.db, killed.run_id)
    assert after == before


async def test_abandon_is_refused_while_the_owner_is_alive(live: Worker) -> None:
    _, before = await stored(live.db, live.run_id)

    ran = await cli("abandon", live.run_id, "--reason", "looks stuck", "--db", str(live.db))

    assert ran.exit_code == 2, ran
    [line] = ran.stderr.splitlines()
    assert line.startswith(f"error: run {live.run_id!r} is owned by ")
    assert f":{live.proc.pid}:" in line
    assert "which is alive" in line
    _, after = await stored(live.db, live.run_id)
    assert after == before
    (live.folder / "go").touch()
    assert await live.line() == "finished"  # its owner goes on, undisturbed


async def test_abandon_of_an_unknown_run_exits_2(killed: Worker) -> None:
    ran = await cli("abandon", "nope", "--db", str(killed.db))

    assert ran.exit_code == 2, ran
    assert ran.stderr.splitlines() == ["error: no run 'nope' in the store (see `tether runs`)"]
