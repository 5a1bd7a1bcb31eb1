"""`tether run` is durable by default and `tether resume` continues a stored run."""

from __future__ import annotations

import asyncio
import json
import sys
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

import pytest
from typer.testing import CliRunner

from tests.cli import log_named
from tether.cli.app import app
from tether.codec import read_jsonl
from tether.events import Event, ToolCallFinished
from tether.examples.demo import assistant
from tether.stores import SqliteStore
from tether.testing import ScriptedModel, call, finish


def script(tmp_path: Path, name: str, steps: Sequence[object]) -> str:
    path = tmp_path / name
    path.write_text(json.dumps(steps))
    return f"scripted:{path}"


CALC_THEN_FINISH = [
    {"tool_calls": [{"name": "calculate", "arguments": {"expression": "6 * 7"}}]},
    {"tool_calls": [{"name": "finish_task", "arguments": {"answer": "42"}}]},
]


def test_run_is_stored_and_resuming_a_finished_run_changes_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    runner = CliRunner()
    model = script(tmp_path, "s.json", CALC_THEN_FINISH)
    ran = runner.invoke(app, ["run", "what is 6*7?", "--model", model, "--no-log"])
    assert ran.exit_code == 0, ran.output
    store = SqliteStore(tmp_path / ".tether" / "tether.db")
    try:
        (row,) = asyncio.run(store.runs())
        before = asyncio.run(store.read(row.run_id))
    finally:
        asyncio.run(store.close())
    assert row.status == "finished"
    again = runner.invoke(app, ["resume", row.run_id[:13]])
    assert again.exit_code == 0, again.output
    store = SqliteStore(tmp_path / ".tether" / "tether.db")
    try:
        assert asyncio.run(store.read(row.run_id)) == before
    finally:
        asyncio.run(store.close())


def test_resume_with_an_answer_for_a_finished_run_exits_2_saying_what_to_do(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("COLUMNS", "2000")
    runner = CliRunner()
    model = script(tmp_path, "s.json", CALC_THEN_FINISH)
    ran = runner.invoke(app, ["run", "what is 6*7?", "--model", model, "--no-log"])
    assert ran.exit_code == 0, ran.output
    store = SqliteStore(tmp_path / ".tether" / "tether.db")
    try:
        (row,) = asyncio.run(store.runs())
        before = asyncio.run(store.read(row.run_id))
    finally:
        asyncio.run(store.close())

    answered = runner.invoke(app, ["resume", row.run_id[:13], "--answer", "Paris"])

    assert answered.exit_code == 2, answered.output
    assert answered.stdout == ""
    assert answered.stderr.splitlines() == [
        f"error: run {row.run_id} does not wait for an answer: it ended finished, so --answer "
        f"was not used; see how with `tether show {row.run_id}`"
    ]
    store = SqliteStore(tmp_path / ".tether" / "tether.db")
    try:
        assert asyncio.run(store.read(row.run_id)) == before
    finally:
        asyncio.run(store.close())


def test_resume_continues_a_crashed_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    db = tmp_path / "runs.db"

    async def crashed_run() -> str:
        agent = assistant()
        outcome = await agent.run(
            "what is 6*7?",
            model=ScriptedModel([call("calculate", expression="6 * 7"), finish("42")]),
            agent_ref="tether.examples.demo:assistant",
        )
        first_result = next(
            i for i, e in enumerate(outcome.events) if isinstance(e, ToolCallFinished)
        )
        store = SqliteStore(db)
        try:
            await store.append(outcome.run_id, outcome.events[:first_result])  # killed here
        finally:
            await store.close()
        return outcome.run_id

    run_id = asyncio.run(crashed_run())
    model = script(
        tmp_path, "s.json", CALC_THEN_FINISH
    )  # the whole script: it continues after turn 1
    resumed = CliRunner().invoke(app, ["resume", run_id, "--db", str(db), "--model", model])
    assert resumed.exit_code == 0, resumed.output
    assert "42" in resumed.stdout
    store = SqliteStore(db)
    try:
        events = asyncio.run(store.read(run_id))
        kinds = [e.kind for e in events]
    finally:
        asyncio.run(store.close())
    assert "run_resumed" in kinds
    assert kinds[-1] == "run_finished"
    calculated = [e for e in events if isinstance(e, ToolCallFinished) and e.tool == "calculate"]
    assert len(calculated) == 1  # calculate is read-only: it ran again once, after the crash
    # and its JSONL log is whole: resume wrote none, so replay "matched" a stale half-log
    assert read_jsonl(tmp_path / ".tether" / "runs" / f"{run_id}.jsonl") == events


def test_resume_of_an_unknown_run_exits_2(tmp_path: Path) -> None:
    db = tmp_path / "runs.db"
    store = SqliteStore(db)
    asyncio.run(store.runs())  # creates the file
    asyncio.run(store.close())
    result = CliRunner().invoke(app, ["resume", "nope", "--db", str(db)])
    assert result.exit_code == 2
    assert "error:" in result.stderr


FACTORY = "tests.cli.log_named:make_agent"


def waiting_run(db: Path, ref: str) -> tuple[str, list[Event]]:
    """A stored run of ``log_named``'s agent, waiting to approve a calculation; its log names ``ref``."""

    async def go() -> tuple[str, list[Event]]:
        store = SqliteStore(db)
        try:
            agent = replace(log_named.AGENT, store=store)
            model = ScriptedModel([call("calculate", expression="6 * 7"), finish("42")])
            outcome = await agent.run("what is 6*7?", model=model, agent_ref=ref)
            assert outcome.status == "waiting_for_approval"
            return outcome.run_id, await store.read(outcome.run_id)
        finally:
            await store.close()

    return asyncio.run(go())


def stored(db: Path, run_id: str) -> list[Event]:
    store = SqliteStore(db)
    try:
        return asyncio.run(store.read(run_id))
    finally:
        asyncio.run(store.close())


@pytest.mark.parametrize("command", [["resume"], ["approve", "--all"]])
def test_resume_and_approve_never_call_an_agent_factory_the_log_names(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, command: list[str]
) -> None:
    # a run's log (imported, say) named a function; resume and approve imported and called it
    monkeypatch.setenv("COLUMNS", "2000")
    db = tmp_path / "t.db"
    run_id, before = waiting_run(db, FACTORY)
    log_named.calls.clear()

    result = CliRunner().invoke(app, [command[0], run_id, *command[1:], "--db", str(db)])

    assert result.exit_code == 2, result.output
    assert log_named.calls == []
    message = " ".join(result.stderr.split())
    assert message.startswith(f"error: the log names the agent {FACTORY!r}")
    assert "a log's words are not run as code" in message
    assert f"pass it yourself: `--agent {FACTORY}`" in message
    assert stored(db, run_id) == before


def test_resume_never_imports_a_module_the_log_names(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # importing a module runs its code: a log could name one that acts when imported
    db = tmp_path / "t.db"
    run_id, before = waiting_run(db, "tests.cli.log_named:AGENT")
    monkeypatch.delitem(sys.modules, "tests.cli.log_named")

    result = CliRunner().invoke(app, ["resume", run_id, "--db", str(db)])

    assert result.exit_code == 2, result.output
    assert "tests.cli.log_named" not in sys.modules
    assert stored(db, run_id) == before


def test_approve_with_the_agent_passed_continues_a_run_whose_log_names_it(
    tmp_path: Path,
) -> None:
    db = tmp_path / "t.db"
    run_id, _ = waiting_run(db, FACTORY)
    log_named.calls.clear()
    model = script(tmp_path, "s.json", CALC_THEN_FINISH)

    result = CliRunner().invoke(
        app, ["approve", run_id, "--all", "--agent", FACTORY, "--model", model, "--db", str(db)]
    )

    assert result.exit_code == 0, result.output
    assert "42" in result.stdout
    assert log_named.calls == ["make_agent"]
    assert stored(db, run_id)[-1].kind == "run_finished"
