"""``tether runs / show / export / import / prune`` against an SQLite run store."""

from __future__ import annotations

import asyncio
import dataclasses
import gc
import io
import sqlite3
from collections.abc import Iterator, Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import cast

import pytest
from rich.console import Console
from typer.testing import CliRunner

from tests.support import add, long_line
from tether import Agent, Event, Usage
from tether.cli import store_commands
from tether.cli.app import app
from tether.codec import MAX_LINE_BYTES, encode_event, read_jsonl, write_jsonl
from tether.content import TextBlock
from tether.events import ToolCallFinished
from tether.stores import RunInfo, RunNotFound, SqliteStore
from tether.testing import FakeClock, ScriptedModel, call, finish

TURN = Usage(input_tokens=10, output_tokens=5)


@pytest.fixture(autouse=True)
def _isolated(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[None]:  # pyright: ignore[reportUnusedFunction]
    """Run inside tmp_path with the store at tmp_path/t.db; collect garbage to catch leaks."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("TETHER_DB", str(tmp_path / "t.db"))
    monkeypatch.delenv("FORCE_COLOR", raising=False)
    monkeypatch.setenv("COLUMNS", "2000")
    yield
    gc.collect()


@dataclasses.dataclass(frozen=True, slots=True)
class Ran:
    exit_code: int
    stdout: str
    stdout_bytes: bytes
    stderr: str
    output: str


def invoke(*args: str, input: bytes | None = None) -> Ran:
    result = CliRunner().invoke(app, list(args), input=input)
    crash = "" if isinstance(result.exception, SystemExit | None) else repr(result.exception)
    return Ran(
        result.exit_code, result.stdout, result.stdout_bytes, result.stderr, result.output + crash
    )


def flat(text: str) -> str:
    return " ".join(text.split())


async def _store_runs(
    db: Path, agent: str, starts: Sequence[datetime], run_ids: Sequence[str | None], running: bool
) -> list[list[Event]]:
    store = SqliteStore(db)
    logs: list[list[Event]] = []
    try:
        for start, run_id in zip(starts, run_ids, strict=True):
            model = ScriptedModel([call("add", a=1, b=2), finish("3")], usage=TURN)
            outcome = await Agent(name=agent, model=model, tools=[add]).run(
                "add 1 and 2", run_id=run_id, clock=FakeClock(start)
            )
            events = list(outcome.events[:-1] if running else outcome.events)
            await store.append(outcome.run_id, events)
            logs.append(events)
    finally:
        await store.close()
    return logs


def store_runs(
    db: Path,
    *ages: timedelta,
    agent: str = "adder",
    run_ids: Sequence[str | None] = (),
    running: bool = False,
) -> list[list[Event]]:
    """Store one finished run of ``agent`` per age (created that long ago); their logs."""
    now = datetime.now(UTC)
    ids = list(run_ids) or [None] * len(ages)
    return asyncio.run(_store_runs(db, agent, [now - a for a in ages], ids, running))


def store_run(db: Path, age: timedelta = timedelta(hours=1), **kwargs: str) -> list[Event]:
    [log] = store_runs(db, age, agent=kwargs.get("agent", "adder"), run_ids=[kwargs.get("run_id")])
    return log


def stored_ids(db: Path) -> list[str]:
    async def read() -> list[RunInfo]:
        store = SqliteStore(db)
        try:
            return await store.runs()
        finally:
            await store.close()

    return [r.run_id for r in asyncio.run(read())]


def stored_log(db: Path, run_id: str) -> list[Event]:
    async def read() -> list[Event]:
        store = SqliteStore(db)
        try:
            return await store.read(run_id)
        finally:
            await store.close()

    return asyncio.run(read())


def jsonl(events: Sequence[Event]) -> bytes:
    return b"".join(encode_event(e) + b"\n" for e in events)


def tampered(events: Sequence[Event]) -> tuple[list[Event], int]:
    index = next(i for i, e in enumerate(events) if isinstance(e, ToolCallFinished))
    edited = list(events)
    edited[index] = dataclasses.replace(
        cast(ToolCallFinished, events[index]), content=(TextBlock(text="4"),)
    )
    return edited, index


def test_help_lists_the_store_commands() -> None:
    result = invoke("--help")
    for command in ("runs", "show", "export", "import", "prune", "run", "replay"):
        assert command in result.output


# -- runs ----------------------------------------------------------------------------------------


def test_runs_without_a_store_says_so_and_creates_nothing(tmp_path: Path) -> None:
    result = invoke("runs")

    assert result.exit_code == 0, result.output
    assert result.stdout == ""
    assert flat(result.stderr) == f"no runs: no store at {tmp_path / 't.db'} yet"
    assert not (tmp_path / "t.db").exists()


def created(log: Sequence[Event]) -> str:
    return log[0].at.astimezone(UTC).isoformat(timespec="seconds")


def test_runs_not_on_a_terminal_prints_whole_values_tab_separated_newest_first(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("COLUMNS", "40")  # a narrow terminal width must not matter to a pipe
    [old] = store_runs(tmp_path / "t.db", timedelta(days=3), agent="adder")
    [new] = store_runs(tmp_path / "t.db", timedelta(hours=2), agent="a helper\twith\nspaces")

    result = invoke("runs")

    assert result.exit_code == 0, result.output
    assert result.stdout.splitlines() == [
        f"{new[0].run_id}\ta helper with spaces\tfinished\t2\t30\t{created(new)}",
        f"{old[0].run_id}\tadder\tfinished\t2\t30\t{created(old)}",
    ]


class Terminal(io.StringIO):
    """What Rich writes to, standing in for a terminal."""

    def isatty(self) -> bool:
        return True


@pytest.mark.parametrize("width", [20, 60, 200])
def test_runs_on_a_terminal_prints_a_table_that_never_cuts_ids(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, width: int
) -> None:
    terminal = Terminal()
    monkeypatch.setattr(
        store_commands, "out", Console(file=terminal, width=width, color_system=None)
    )
    [old] = store_runs(tmp_path / "t.db", timedelta(days=3), agent="a-rather-long-agent-name")
    [new] = store_runs(tmp_path / "t.db", timedelta(hours=2), agent="helper")

    result = invoke("runs")

    assert result.exit_code == 0, result.output
    rows = [line.split() for line in terminal.getvalue().splitlines()]
    assert [row[0] for row in rows] == ["id", new[0].run_id, old[0].run_id]
    assert [row[3:] for row in rows[1:]] == [["2", "30", "2h"], ["2", "30", "3d"]]
    wide = width == 200
    assert rows[2][1] == ("a-rather-long-agent-name" if wide else "a-ra…")


def test_runs_filters_by_status_agent_and_limit(tmp_path: Path) -> None:
    db = tmp_path / "t.db"
    [done] = store_runs(db, timedelta(minutes=5), agent="a")
    [live] = store_runs(db, timedelta(minutes=4), agent="a", running=True)
    [other] = store_runs(db, timedelta(minutes=3), agent="b")

    def ids(*args: str) -> list[str]:
        result = invoke("runs", *args)
        assert result.exit_code == 0, result.output
        return [line.split("\t")[0] for line in result.stdout.splitlines()]

    assert ids() == [other[0].run_id, live[0].run_id, done[0].run_id]
    assert ids("--status", "running") == [live[0].run_id]
    assert ids("--agent", "a") == [live[0].run_id, done[0].run_id]
    assert ids("--agent", "a", "--status", "finished") == [done[0].run_id]
    assert ids("--limit", "1") == [other[0].run_id]
    empty = invoke("runs", "--agent", "nobody")
    assert (empty.exit_code, empty.stdout, flat(empty.stderr)) == (0, "", "no runs match")


def test_runs_with_an_unknown_status_exits_2(tmp_path: Path) -> None:
    store_run(tmp_path / "t.db")
    result = invoke("runs", "--status", "done")

    assert result.exit_code == 2
    assert flat(result.stderr).startswith("error: unknown status 'done': use one of running,")


def test_runs_reads_the_store_given_by_db(tmp_path: Path) -> None:
    [log] = store_runs(tmp_path / "other.db", timedelta(seconds=30))

    result = invoke("runs", "--db", str(tmp_path / "other.db"))

    assert result.exit_code == 0, result.output
    assert result.stdout.split("\t")[0] == log[0].run_id
    assert result.stdout.split("\t")[-1] == f"{created(log)}\n"


# -- show ----------------------------------------------------------------------------------------


def test_show_of_a_stored_run_prints_every_event(tmp_path: Path) -> None:
    log = store_run(tmp_path / "t.db")

    result = invoke("show", log[0].run_id)

    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert [int(line.split()[0]) for line in lines] == [e.seq for e in log]
    assert lines[0].split(maxsplit=1)[1].startswith("run started agent=adder model=")
    assert 'call add({"a":1,"b":2})' in result.stdout
    assert "ok add: 3" in result.stdout
    assert lines[-1].split(maxsplit=1)[1] == "run finished 2 steps, 1 tool calls"


def test_show_of_a_file_prints_the_same_as_show_of_the_stored_run(tmp_path: Path) -> None:
    log = store_run(tmp_path / "t.db")
    write_jsonl(tmp_path / "run.jsonl", log)

    from_file = invoke("show", "run.jsonl")
    from_store = invoke("show", log[0].run_id)

    assert from_file.exit_code == 0, from_file.output
    assert from_file.stdout == from_store.stdout


def test_show_and_export_accept_a_unique_prefix(tmp_path: Path) -> None:
    db = tmp_path / "t.db"
    [log] = store_runs(db, timedelta(hours=1), run_ids=["abc-123"])
    store_runs(db, timedelta(hours=1), run_ids=["abd-456"])

    shown = invoke("show", "abc")
    exported = invoke("export", "abc-1")

    assert shown.exit_code == 0, shown.output
    assert shown.stdout == invoke("show", "abc-123").stdout
    assert exported.exit_code == 0, exported.output
    assert exported.stdout_bytes == jsonl(log)


@pytest.mark.parametrize("command", ["show", "export"])
def test_an_ambiguous_prefix_exits_2_listing_the_matches(tmp_path: Path, command: str) -> None:
    store_runs(tmp_path / "t.db", timedelta(hours=2), timedelta(hours=1), run_ids=["ab-1", "ab-2"])

    result = invoke(command, "ab")

    assert result.exit_code == 2
    assert result.stdout == ""
    assert flat(result.stderr) == (
        "error: 2 runs have ids beginning with 'ab' (ab-1, ab-2): give more of the id"
    )


@pytest.mark.parametrize("command", ["show", "export"])
def test_an_unknown_run_exits_2(tmp_path: Path, command: str) -> None:
    store_run(tmp_path / "t.db")

    result = invoke(command, "zzz")

    assert result.exit_code == 2
    assert result.stdout == ""
    assert flat(result.stderr) == "error: no run 'zzz' in the store (see `tether runs`)"


@pytest.mark.parametrize("command", ["show", "export"])
def test_a_run_id_without_a_store_exits_2_saying_what_to_pass(tmp_path: Path, command: str) -> None:
    result = invoke(command, "abc")

    assert result.exit_code == 2
    assert flat(result.stderr) == (
        f"error: no run store at {tmp_path / 't.db'}: pass --db PATH or set $TETHER_DB to the "
        "store's file"
    )
    assert not (tmp_path / "t.db").exists()


@pytest.mark.parametrize("command", ["show", "audit"])
def test_show_or_audit_of_a_missing_file_says_it_does_not_exist(
    tmp_path: Path, command: str
) -> None:
    store_run(tmp_path / "t.db")

    for missing in ("logs/missing.jsonl", "missing.jsonl"):
        result = invoke(command, missing)

        assert result.exit_code == 2  # audit said: no run 'logs/missing.jsonl' in the store
        assert flat(result.stderr) == (
            f"error: the file {missing} does not exist (and it is not a run id)"
        )


def test_show_of_a_directory_exits_2(tmp_path: Path) -> None:
    (tmp_path / "logs").mkdir()

    result = invoke("show", "logs")

    assert result.exit_code == 2
    assert flat(result.stderr) == "error: logs is not a file: give a run id or a run's JSONL log"


@pytest.mark.parametrize("content", [b"", b"\n  \n"], ids=["empty", "blank"])
def test_show_of_a_log_without_events_exits_2(tmp_path: Path, content: bytes) -> None:
    (tmp_path / "run.jsonl").write_bytes(content)

    result = invoke("show", "run.jsonl")

    assert result.exit_code == 2
    assert result.stdout == ""
    assert flat(result.stderr).startswith("error: the log run.jsonl holds no events")
    assert len(result.stderr.strip().splitlines()) == 1


def test_show_of_a_line_over_the_cap_exits_2_naming_the_line(tmp_path: Path) -> None:
    (tmp_path / "run.jsonl").write_bytes(b"\n" + long_line(MAX_LINE_BYTES + 1))

    result = invoke("show", "run.jsonl")

    assert result.exit_code == 2
    assert result.stdout == ""
    message = flat(result.stderr)
    assert message.startswith("error: run.jsonl: a line is longer than 16 MiB")
    assert message.endswith("(line 2)")


@pytest.mark.parametrize("command", ["show", "export"])
def test_a_log_tampered_inside_the_store_exits_2(tmp_path: Path, command: str) -> None:
    log = store_run(tmp_path / "t.db")
    edited, index = tampered(log)
    with sqlite3.connect(tmp_path / "t.db") as db:
        db.execute(
            "UPDATE events SET body = ? WHERE run_id = ? AND seq = ?",
            (encode_event(edited[index]), log[0].run_id, index),
        )
    db.close()

    result = invoke(command, log[0].run_id)

    assert result.exit_code == 2
    assert result.stdout == ""
    assert flat(result.stderr).startswith(
        f"error: event log chain broken at seq {index}: the hash does not match"
    )


def test_a_db_that_is_not_a_store_exits_2(tmp_path: Path) -> None:
    (tmp_path / "notes.txt").write_text("hello, this is not SQLite " * 20)

    result = invoke("show", "abc", "--db", str(tmp_path / "notes.txt"))

    assert result.exit_code == 2
    assert flat(result.stderr).startswith(
        f"error: {tmp_path / 'notes.txt'} is not a tether run store"
    )


# -- export and import ---------------------------------------------------------------------------


def test_export_writes_the_jsonl_that_write_jsonl_writes(tmp_path: Path) -> None:
    log = store_run(tmp_path / "t.db")
    write_jsonl(tmp_path / "expected.jsonl", log)

    result = invoke("export", log[0].run_id)

    assert result.exit_code == 0, result.output
    assert result.stdout_bytes == (tmp_path / "expected.jsonl").read_bytes()
    assert result.stderr == ""


def test_export_then_import_into_another_store_is_exact(tmp_path: Path) -> None:
    log = store_run(tmp_path / "t.db")
    exported = invoke("export", log[0].run_id)
    (tmp_path / "run.jsonl").write_bytes(exported.stdout_bytes)

    imported = invoke("import", "run.jsonl", "--db", str(tmp_path / "copy.db"))

    assert imported.exit_code == 0, imported.output
    assert imported.stdout == f"{log[0].run_id}\n"
    assert stored_log(tmp_path / "copy.db", log[0].run_id) == log
    again = invoke("export", log[0].run_id, "--db", str(tmp_path / "copy.db"))
    assert again.stdout_bytes == exported.stdout_bytes
    assert read_jsonl(tmp_path / "run.jsonl") == log


def test_import_creates_the_store_and_reimporting_is_a_no_op(tmp_path: Path) -> None:
    log = store_run(tmp_path / "source.db")
    write_jsonl(tmp_path / "run.jsonl", log)

    first = invoke("import", "run.jsonl")
    second = invoke("import", "run.jsonl")

    assert (first.exit_code, first.stdout) == (0, f"{log[0].run_id}\n")
    assert (second.exit_code, second.stdout) == (0, f"{log[0].run_id}\n")
    assert stored_ids(tmp_path / "t.db") == [log[0].run_id]
    assert stored_log(tmp_path / "t.db", log[0].run_id) == log


def test_import_reads_stdin_given_a_dash(tmp_path: Path) -> None:
    log = store_run(tmp_path / "source.db")

    result = invoke("import", "-", input=jsonl(log))

    assert result.exit_code == 0, result.output
    assert stored_log(tmp_path / "t.db", log[0].run_id) == log


def test_import_of_a_tampered_log_exits_2_and_stores_nothing(tmp_path: Path) -> None:
    edited, index = tampered(store_run(tmp_path / "source.db"))
    write_jsonl(tmp_path / "run.jsonl", edited)

    result = invoke("import", "run.jsonl")

    assert result.exit_code == 2
    assert result.stdout == ""
    message = flat(result.stderr)
    assert message.startswith(f"error: event log chain broken at seq {index}: the hash does not")
    assert message.endswith(f"(line {index + 1})")
    assert stored_ids(tmp_path / "t.db") == []


def test_import_of_a_line_that_is_not_json_names_the_line(tmp_path: Path) -> None:
    (tmp_path / "bad.jsonl").write_bytes(b"\n{oops\n")

    result = invoke("import", "bad.jsonl")

    assert result.exit_code == 2
    assert "error: an event is not valid JSON" in flat(result.stderr)
    assert flat(result.stderr).endswith("(line 2)")


def store_files(db: Path) -> list[str]:
    """The store's database and the files SQLite and the store keep beside it."""
    return sorted(p.name for p in db.parent.iterdir() if p.name.startswith(db.name))


@pytest.mark.parametrize(
    "case", ["not json", "broken chain", "empty", "blank", "line over the cap", "stdin"]
)
def test_a_failed_import_creates_no_store(tmp_path: Path, case: str) -> None:
    log = store_run(tmp_path / "source.db")
    contents = {
        "not json": b"{oops\n",
        "broken chain": jsonl(tampered(log)[0]),
        "empty": b"",
        "blank": b"\n \n",
        "line over the cap": long_line(MAX_LINE_BYTES + 1) + b"\n",
        "stdin": b"{oops\n",
    }
    (tmp_path / "run.jsonl").write_bytes(contents[case])
    db = tmp_path / "new" / "t.db"
    (tmp_path / "new").mkdir()

    if case == "stdin":
        result = invoke("import", "-", "--db", str(db), input=contents[case])
    else:
        result = invoke("import", "run.jsonl", "--db", str(db))

    assert result.exit_code == 2
    assert result.stdout == ""
    assert flat(result.stderr).startswith("error: ")
    assert store_files(db) == []


def test_import_of_an_empty_log_exits_2_saying_it_holds_no_events(tmp_path: Path) -> None:
    (tmp_path / "run.jsonl").write_bytes(b"\n")

    result = invoke("import", "run.jsonl")

    assert result.exit_code == 2
    assert flat(result.stderr).startswith("error: the log run.jsonl holds no events")


def test_import_of_a_line_over_the_cap_names_the_file_line_and_cap(tmp_path: Path) -> None:
    log = store_run(tmp_path / "source.db")
    (tmp_path / "run.jsonl").write_bytes(
        jsonl(log[:1]) + long_line(MAX_LINE_BYTES + 1) + b"\n" + jsonl(log[1:])
    )

    result = invoke("import", "run.jsonl")

    assert result.exit_code == 2
    message = flat(result.stderr)
    assert message.startswith("error: run.jsonl: a line is longer than 16 MiB, the limit on one")
    assert message.endswith("(line 2)")


def test_import_over_a_different_stored_run_exits_2_and_keeps_it(tmp_path: Path) -> None:
    mine = store_run(tmp_path / "t.db", run_id="run-1")
    theirs = store_run(tmp_path / "other.db", run_id="run-1", agent="someone-else")
    write_jsonl(tmp_path / "theirs.jsonl", theirs)

    result = invoke("import", "theirs.jsonl")

    assert result.exit_code == 2
    assert flat(result.stderr).startswith(
        "error: run 'run-1' is already stored with different events"
    )
    assert stored_log(tmp_path / "t.db", "run-1") == mine


def test_import_of_a_missing_file_exits_2() -> None:
    result = invoke("import", "missing.jsonl")

    assert result.exit_code == 2
    assert flat(result.stderr) == (
        "error: the file missing.jsonl does not exist: give a run's JSONL log, or - for stdin"
    )


# -- prune ---------------------------------------------------------------------------------------


def test_prune_older_than_deletes_old_finished_runs_only(tmp_path: Path) -> None:
    db = tmp_path / "t.db"
    [old, young] = store_runs(db, timedelta(days=40), timedelta(days=1))
    [old_running] = store_runs(db, timedelta(days=50), running=True)

    result = invoke("prune", "--older-than", "30d")

    assert result.exit_code == 0, result.output
    assert result.stdout == f"{old[0].run_id}\n"
    assert flat(result.stderr) == "deleted 1 run"
    assert stored_ids(db) == [young[0].run_id, old_running[0].run_id]
    with pytest.raises(RunNotFound):
        stored_log(db, old[0].run_id)


def test_prune_dry_run_deletes_nothing(tmp_path: Path) -> None:
    db = tmp_path / "t.db"
    logs = store_runs(db, timedelta(days=3), timedelta(days=2), timedelta(days=1))

    result = invoke("prune", "--keep-last", "1", "--dry-run")

    assert result.exit_code == 0, result.output
    assert result.stdout.split() == [logs[1][0].run_id, logs[0][0].run_id]
    assert flat(result.stderr) == "would delete 2 runs"
    assert len(stored_ids(db)) == 3


def test_prune_keep_last_for_one_agent(tmp_path: Path) -> None:
    db = tmp_path / "t.db"
    mine = store_runs(db, timedelta(days=3), timedelta(days=2), agent="mine")
    theirs = store_runs(db, timedelta(days=3), timedelta(days=2), agent="theirs")

    result = invoke("prune", "--keep-last", "1", "--agent", "mine", "--db", str(db))

    assert result.exit_code == 0, result.output
    assert result.stdout == f"{mine[0][0].run_id}\n"
    assert sorted(stored_ids(db)) == sorted([mine[1][0].run_id] + [t[0].run_id for t in theirs])


def test_prune_without_a_criterion_exits_2() -> None:
    result = invoke("prune")

    assert result.exit_code == 2
    assert flat(result.stderr) == (
        "error: say what to prune: give --older-than AGE and/or --keep-last N"
    )


def test_prune_with_a_bad_age_exits_2(tmp_path: Path) -> None:
    store_run(tmp_path / "t.db")

    result = invoke("prune", "--older-than", "30 days")

    assert result.exit_code == 2
    assert flat(result.stderr).startswith("error: '30 days' is not an age: write a whole number")
    assert len(stored_ids(tmp_path / "t.db")) == 1


def test_prune_without_a_store_has_nothing_to_do(tmp_path: Path) -> None:
    result = invoke("prune", "--older-than", "1d")

    assert result.exit_code == 0, result.output
    assert flat(result.stderr) == f"nothing to prune: no store at {tmp_path / 't.db'}"
    assert not (tmp_path / "t.db").exists()
