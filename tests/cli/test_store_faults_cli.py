"""Every command against every way a store fails: one ``error:`` line, exit 2, no traceback.

The faults are made for real (``tests.stores.faults``): damaged pages, a file that is not a
database, read-only files and directories, another process holding the write lock past the
busy timeout, a store path below a regular file, and a full disk (a file-size limit, in a
process of its own: ``tests.cli.full_disk``). A store that cannot be written can still be
read: ``runs``, ``show``, ``export`` and ``audit`` work on it.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import os
import shutil
import sys
from contextlib import AbstractContextManager
from dataclasses import replace
from pathlib import Path

import pytest
from typer.testing import CliRunner

from tests.cli import full_disk
from tests.stores.faults import WriteLock, corrupt_pages, read_only
from tether.cli.app import app
from tether.codec import write_jsonl
from tether.events import PolicyDecided, ToolCallFinished
from tether.examples.demo import assistant
from tether.stores import SqliteStore
from tether.testing import ScriptedModel, call, finish

ROOT = Path(__file__).parents[2]
CALCULATE: list[dict[str, object]] = [
    {"tool_calls": [{"name": "calculate", "arguments": {"expression": "6 * 7"}}]},
    {"tool_calls": [{"name": "finish_task", "arguments": {"answer": "42"}}]},
]
FILL_SCRIPT: list[dict[str, object]] = [
    {"tool_calls": [{"name": "fill_disk", "arguments": {}}]},
    {"tool_calls": [{"name": "finish_task", "arguments": {"answer": "done"}}]},
]
DEMO = "tether.examples.demo:assistant"


@dataclasses.dataclass(frozen=True, slots=True)
class Runs:
    """The runs of the template store, by what each is for."""

    finished: str
    crashed: str
    """Stopped mid-tool without a lease (a crash): resumable, stale, abandonable."""
    waiting: str
    """Waits for approval of ``fill_disk`` (``full_disk.GATED``)."""
    crashed_filler: str
    """``full_disk.AGENT``'s run, stopped after ``fill_disk`` was allowed."""


async def _build(db: Path, folder: Path) -> Runs:
    store = SqliteStore(db)
    try:
        finished = ""
        for _ in range(30):  # enough pages to damage past the first
            outcome = await assistant().run(
                "what is 6*7?",
                model=ScriptedModel([call("calculate", expression="6 * 7"), finish("42")]),
                agent_ref=DEMO,
            )
            await store.append(outcome.run_id, outcome.events)
            finished = outcome.run_id
        crashed = await assistant().run(
            "what is 6*7?",
            model=ScriptedModel([call("calculate", expression="6 * 7"), finish("42")]),
            agent_ref=DEMO,
        )
        cut = next(i for i, e in enumerate(crashed.events) if isinstance(e, ToolCallFinished))
        await store.append(crashed.run_id, crashed.events[:cut])  # killed mid-tool
        waiting = await replace(full_disk.GATED, store=store).run(
            "fill it", agent_ref="tests.cli.full_disk:GATED"
        )
        assert waiting.status == "waiting_for_approval"
        filler = await full_disk.AGENT.run("fill it", agent_ref="tests.cli.full_disk:AGENT")
        cut = 1 + next(i for i, e in enumerate(filler.events) if isinstance(e, PolicyDecided))
        await store.append(filler.run_id, filler.events[:cut])  # killed as the tool began
        other = await assistant().run("x", model=ScriptedModel([finish("1")]))
        write_jsonl(folder / "new.jsonl", other.events)
    finally:
        await store.close()
    for extra in ("-wal", "-shm"):  # as a store nobody has open leaves its file
        db.with_name(db.name + extra).unlink(missing_ok=True)
    return Runs(
        finished=finished,
        crashed=crashed.run_id,
        waiting=waiting.run_id,
        crashed_filler=filler.run_id,
    )


@pytest.fixture(scope="module")
def template(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Runs]:
    """A folder holding ``store/t.db`` with the runs the commands need, and ``new.jsonl``."""
    folder = tmp_path_factory.mktemp("template")
    (folder / "store").mkdir()
    runs = asyncio.run(_build(folder / "store" / "t.db", folder))
    (folder / "calculate.json").write_text(json.dumps(CALCULATE))
    (folder / "fill.json").write_text(json.dumps(FILL_SCRIPT))
    return folder, runs


@dataclasses.dataclass(frozen=True, slots=True)
class Setup:
    folder: Path
    db: Path
    runs: Runs


@pytest.fixture
def setup(template: tuple[Path, Runs], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Setup:
    """A fresh copy of the template store for one test, run inside its folder."""
    source, runs = template
    folder = tmp_path / "w"
    shutil.copytree(source, folder)
    monkeypatch.chdir(folder)
    monkeypatch.delenv("TETHER_DB", raising=False)
    monkeypatch.delenv("TETHER_LOG_DIR", raising=False)
    monkeypatch.delenv("TETHER_BUSY_TIMEOUT", raising=False)
    monkeypatch.delenv("FORCE_COLOR", raising=False)
    monkeypatch.setenv("COLUMNS", "80")  # a message longer than this must not be wrapped
    return Setup(folder, folder / "store" / "t.db", runs)


def command(name: str, s: Setup) -> list[str]:
    """The arguments of one command against the store (``--db`` is added by the caller)."""
    calculate, fill = (
        f"scripted:{s.folder / 'calculate.json'}",
        f"scripted:{s.folder / 'fill.json'}",
    )
    return {
        "runs": ["runs"],
        "runs --stale": ["runs", "--stale"],
        "show": ["show", s.runs.finished],
        "export": ["export", s.runs.finished],
        "audit": ["audit", s.runs.finished],
        "import": ["import", str(s.folder / "new.jsonl")],
        "prune": ["prune", "--keep-last", "0"],
        "run": ["run", "what is 6*7?", "--model", calculate, "--no-log"],
        "run (disk fills mid-run)": [
            "run",
            "fill it",
            "--agent",
            "tests.cli.full_disk:AGENT",
            "--model",
            fill,
            "--no-log",
        ],
        "resume": ["resume", s.runs.crashed, "--model", calculate],
        "resume (disk fills mid-run)": [
            *("resume", s.runs.crashed_filler, "--model", fill),
            *("--agent", "tests.cli.full_disk:AGENT"),  # a log's agent is not imported
        ],
        "approve": ["approve", s.runs.waiting, "--all", "--agent", "tests.cli.full_disk:GATED"],
        "abandon": ["abandon", s.runs.crashed, "--reason", "its worker was killed"],
    }[name]


READS = ["runs", "runs --stale", "show", "export", "audit"]
WRITES = ["import", "prune", "run", "resume", "approve", "abandon"]
COMMANDS = READS + WRITES


@dataclasses.dataclass(frozen=True, slots=True)
class Ran:
    exit_code: int
    stdout: str
    stderr: str
    crash: str
    """The uncaught exception, if any (``""``: none; ``SystemExit`` is how commands end)."""


def invoke(args: list[str], env: dict[str, str] | None = None) -> Ran:
    result = CliRunner().invoke(app, args, env=env)
    crash = "" if isinstance(result.exception, SystemExit | None) else repr(result.exception)
    return Ran(result.exit_code, result.stdout, result.stderr, crash)


async def invoke_locked(db: Path, args: list[str]) -> Ran:
    """``args`` run while another process holds the store's write lock."""
    async with WriteLock(db):
        return await asyncio.to_thread(invoke, args)


async def invoke_in_process(*args: str, mode: str = "now") -> Ran:
    """``tether args`` in a process of its own, on a full disk (``tests.cli.full_disk``)."""
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "tests.cli.full_disk",
        mode,
        *args,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        cwd=os.getcwd(),
        env={**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), *sys.path])},
    )
    out, err = await asyncio.wait_for(proc.communicate(), 120)
    assert proc.returncode is not None
    return Ran(proc.returncode, out.decode(), err.decode(), "")


OTHER_LINES = ("tether: ", "approve ", "goal: ", "model: ")
"""What else a failing command may print on stderr: the store's log lines, approve's list of
the decisions it is about to record, and the demo's goal and model."""


def assert_one_error_line(ran: Ran, *, names: Path, says: str) -> None:
    """Exit 2, one ``error:`` line naming the file and saying what happened; no traceback."""
    context = f"stdout={ran.stdout!r}\nstderr={ran.stderr!r}\n{ran.crash}"
    assert ran.crash == "", context
    assert "Traceback" not in ran.stderr, context
    assert ran.exit_code == 2, context
    lines = ran.stderr.splitlines()
    errors = [line for line in lines if line.startswith("error: ")]
    assert len(errors) == 1, context
    # every other line is a whole line of its own (no message wrapped onto it)
    assert all(line.startswith(OTHER_LINES) for line in lines if line not in errors), context
    [line] = errors
    assert str(names) in line, context
    assert says in line, context


def assert_works(ran: Ran, name: str, s: Setup) -> None:
    context = f"stdout={ran.stdout!r}\nstderr={ran.stderr!r}\n{ran.crash}"
    assert ran.crash == "", context
    assert ran.exit_code == 0, context
    assert not any(line.startswith("error") for line in ran.stderr.splitlines()), context
    expected = {
        "runs": s.runs.finished,
        "runs --stale": s.runs.crashed,
        "show": "run finished",
        "export": s.runs.finished,
        "audit": "chain verified",
    }[name]
    assert expected in ran.stdout + ran.stderr, context


def flat(text: str) -> str:
    """``text`` without the frame and line breaks of a usage error's box."""
    return " ".join(text.replace("│", " ").split())


def with_db(args: list[str], db: Path) -> list[str]:
    return [*args, "--db", str(db)]


# -- damaged, or not a store at all ---------------------------------------------------------


@pytest.mark.parametrize("name", COMMANDS)
def test_a_damaged_store_is_one_error_line_naming_the_file(setup: Setup, name: str) -> None:
    corrupt_pages(setup.db)

    ran = invoke(with_db(command(name, setup), setup.db))

    assert_one_error_line(ran, names=setup.db, says="is damaged")


@pytest.mark.parametrize("name", COMMANDS)
def test_a_file_that_is_not_a_store_is_one_error_line_naming_it(setup: Setup, name: str) -> None:
    setup.db.write_text("shopping list\n" * 500)

    ran = invoke(with_db(command(name, setup), setup.db))

    assert_one_error_line(ran, names=setup.db, says="is not a tether run store")


# -- read-only: reads work, writes are refused ----------------------------------------------


def _read_only(s: Setup, what: str) -> AbstractContextManager[None]:
    folder = s.db.parent
    targets = {"file": (s.db,), "directory": (folder,), "both": (folder, s.db)}[what]
    return read_only(*targets)


@pytest.mark.parametrize("what", ["file", "directory", "both"])
@pytest.mark.parametrize("name", READS)
def test_a_read_only_store_can_be_read(setup: Setup, name: str, what: str) -> None:
    with _read_only(setup, what):
        ran = invoke(with_db(command(name, setup), setup.db))

    assert_works(ran, name, setup)


@pytest.mark.parametrize("what", ["file", "directory", "both"])
@pytest.mark.parametrize("name", WRITES)
def test_a_write_to_a_read_only_store_is_one_error_line(setup: Setup, name: str, what: str) -> None:
    with _read_only(setup, what):
        ran = invoke(with_db(command(name, setup), setup.db))

    assert_one_error_line(ran, names=setup.db, says="read-only")


# -- another process holds the lock ---------------------------------------------------------


@pytest.mark.parametrize("name", READS)
async def test_a_store_locked_by_another_process_can_be_read(setup: Setup, name: str) -> None:
    args = [*with_db(command(name, setup), setup.db), "--busy-timeout", "0.5"]

    ran = await invoke_locked(setup.db, args)

    assert_works(ran, name, setup)


@pytest.mark.parametrize("name", [w for w in WRITES if w != "run"])
async def test_a_write_to_a_store_locked_past_the_busy_timeout_is_one_error_line(
    setup: Setup, name: str
) -> None:
    args = [*with_db(command(name, setup), setup.db), "--busy-timeout", "0.5"]

    ran = await invoke_locked(setup.db, args)

    assert_one_error_line(ran, names=setup.db, says="locked by another process")


async def test_a_new_run_goes_on_while_the_store_is_locked_and_is_stored_after(
    setup: Setup,
) -> None:
    args = [*with_db(command("run", setup), setup.db), "--busy-timeout", "0.5"]
    before = await asyncio.to_thread(invoke, with_db(["runs", "--limit", "1000"], setup.db))

    ran = await invoke_locked(setup.db, args)  # its commits need the pending file only

    assert ran.exit_code == 0, ran
    assert ran.crash == ""
    after = await asyncio.to_thread(invoke, with_db(["runs", "--limit", "1000"], setup.db))
    assert len(after.stdout.splitlines()) == len(before.stdout.splitlines()) + 1  # applied


async def test_the_busy_timeout_can_come_from_the_environment(
    setup: Setup, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TETHER_BUSY_TIMEOUT", "0.5")
    args = with_db(command("abandon", setup), setup.db)

    ran = await invoke_locked(setup.db, args)

    assert_one_error_line(ran, names=setup.db, says="locked by another process")


def test_a_busy_timeout_that_is_not_a_number_is_a_usage_error(setup: Setup) -> None:
    ran = invoke(with_db(["runs", "--busy-timeout", "soon"], setup.db))

    assert ran.exit_code == 2
    assert ran.crash == ""
    assert "Invalid value for '--busy-timeout' (env var: 'TETHER_BUSY_TIMEOUT')" in flat(ran.stderr)


# -- a store path below a regular file ------------------------------------------------------


@pytest.mark.parametrize("given", ["--db", "$TETHER_DB"])
@pytest.mark.parametrize("name", COMMANDS)
def test_a_store_below_a_regular_file_is_one_error_line_naming_it(
    setup: Setup, name: str, given: str
) -> None:
    blocker = setup.folder / "runs"
    blocker.write_text("a file where a directory should be")
    db = blocker / "t.db"
    args = command(name, setup)
    env = None
    if given == "--db":
        args = with_db(args, db)
    else:
        env = {"TETHER_DB": str(db)}

    ran = invoke(args, env)

    assert_one_error_line(ran, names=blocker, says=f"{blocker} is a file, not a directory")


@pytest.mark.parametrize(
    ("args", "env"),
    [
        (["run", "hi", "--model", "scripted:calculate.json", "--log-dir", "runs/logs"], {}),
        (["run", "hi", "--model", "scripted:calculate.json"], {"TETHER_LOG_DIR": "runs/logs"}),
        (["demo", "--log-dir", "runs/logs"], {}),
    ],
    ids=["run --log-dir", "run $TETHER_LOG_DIR", "demo --log-dir"],
)
def test_a_log_dir_below_a_regular_file_is_one_error_line_naming_it(
    setup: Setup, args: list[str], env: dict[str, str]
) -> None:
    blocker = setup.folder / "runs"
    blocker.write_text("a file where a directory should be")

    ran = invoke(with_db(args, setup.db) if args[0] == "run" else args, env)

    assert_one_error_line(ran, names=Path("runs"), says="runs is a file, not a directory")


# -- a full disk ------------------------------------------------------------------------------


@pytest.mark.parametrize("name", COMMANDS)
async def test_a_full_disk_is_one_error_line_naming_the_store(setup: Setup, name: str) -> None:
    ran = await invoke_in_process(*with_db(command(name, setup), setup.db))

    assert_one_error_line(ran, names=setup.db, says="full")


@pytest.mark.parametrize(
    "name", ["run (disk fills mid-run)", "resume (disk fills mid-run)", "approve"]
)
async def test_a_run_whose_store_fills_up_mid_run_is_one_error_line_and_exit_2(
    setup: Setup, name: str
) -> None:
    ran = await invoke_in_process(*with_db(command(name, setup), setup.db), mode="in-tool")

    assert_one_error_line(ran, names=setup.db, says="full")
    (line,) = [x for x in ran.stderr.splitlines() if x.startswith("error:")]
    assert "tether resume" in line  # the error itself says how to go on once there is space
    store = SqliteStore(setup.db)
    try:
        runs = await store.runs()
        target = {
            "run (disk fills mid-run)": next(
                (
                    r.run_id
                    for r in runs
                    if r.agent == "filler" and r.run_id != setup.runs.crashed_filler
                ),
                "",
            ),
            "resume (disk fills mid-run)": setup.runs.crashed_filler,
            "approve": setup.runs.waiting,
        }[name]
        info = await store.info(target)
        log = await store.read(target)
    finally:
        await store.close()
    # what it stored is kept, and it is resumable as after a crash
    assert info.status == "running"
    assert log[-1].kind != "run_finished"
