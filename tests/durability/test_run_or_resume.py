"""One call starts a run under a given id or continues it: a supervisor can re-issue it.

``agent.run(goal, run_id=ID)`` with a store: no run under ``ID`` starts it; a run that
crashed continues from its log (nothing completed runs twice); one that ended or waits for
a human returns its outcome as stored, writing nothing; another goal under ``ID`` is refused.
"""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path

import pytest
from typer.testing import CliRunner

from tests.durability.test_leases import line, start
from tests.support import add, assert_protocol_valid
from tether import Agent
from tether.cli.app import app
from tether.errors import RunExists
from tether.stores import RunStore, SqliteStore
from tether.testing import ScriptedModel, call, finish

SCRIPT = [call("add", a=1, b=2), finish("3")]


async def test_issuing_the_same_run_twice_returns_the_stored_outcome(store: RunStore) -> None:
    model = ScriptedModel(SCRIPT)
    agent = Agent(model=model, tools=[add], store=store)
    first = await agent.run("add", run_id="job-1")
    stored = await store.read("job-1")
    again = await agent.run("add", run_id="job-1")
    assert (first.status, again.status) == ("finished", "finished")
    assert again.output == first.output == "3"
    assert await store.read("job-1") == stored  # nothing written the second time
    assert len(model.requests) == 2  # the model was not asked again


async def test_a_waiting_run_issued_again_returns_its_question(store: RunStore) -> None:
    agent = Agent(
        model=ScriptedModel([call("ask_user", question="Which city?")]),
        can_ask_user=True,
        store=store,
    )
    first = await agent.run("book a trip", run_id="trip")
    again = await agent.run("book a trip", run_id="trip")
    assert first.status == again.status == "waiting_for_user"
    assert again.question == "Which city?"


async def test_another_goal_under_a_stored_id_is_refused(store: RunStore) -> None:
    agent = Agent(model=ScriptedModel(SCRIPT), tools=[add], store=store)
    await agent.run("add", run_id="job-2")
    before = await store.read("job-2")
    with pytest.raises(RunExists, match="is stored already, for agent 'agent' with the goal 'add'"):
        await agent.run("something else", run_id="job-2")
    assert await store.read("job-2") == before


async def test_an_id_never_stored_starts_a_run_under_it(store: RunStore) -> None:
    outcome = await Agent(model=ScriptedModel(SCRIPT), tools=[add], store=store).run(
        "add", run_id="fresh"
    )
    assert outcome.run_id == "fresh"
    assert outcome.status == "finished"


async def test_a_killed_run_issued_again_continues_without_repeating_its_effect(
    tmp_path: Path,
) -> None:
    db, run_id = tmp_path / "t.db", str(uuid.uuid4())
    owner = await start("run", str(db), run_id, str(tmp_path), "async")
    assert await line(owner) == "in tool"
    owner.kill()  # kill -9 while the side effect runs
    await owner.wait()
    (tmp_path / "go").touch()
    again = await start("run", str(db), run_id, str(tmp_path), "async")  # the same call
    assert await line(again) == "finished"
    _, err = await asyncio.wait_for(again.communicate(), 120)
    assert again.returncode == 0, err.decode()
    assert (tmp_path / "effects").read_text() == "effect 1\n"  # not run twice
    store = SqliteStore(db)
    try:
        events = await store.read(run_id)
    finally:
        await store.close()
    kinds = [e.kind for e in events]
    assert kinds.count("run_started") == 1
    assert "tool_call_unknown" in kinds  # its outcome is unknown, and the model was told
    assert kinds[-1] == "run_finished"
    assert_protocol_valid(events)


def stored_log(db: Path, run_id: str) -> list[str]:
    async def read() -> list[str]:
        store = SqliteStore(db)
        try:
            return [e.hash for e in await store.read(run_id)]
        finally:
            await store.close()

    return asyncio.run(read())


def test_the_cli_run_under_an_id_can_be_issued_again(tmp_path: Path) -> None:
    db, run_id = tmp_path / "t.db", "nightly-report"
    script = tmp_path / "script.json"
    script.write_text('[{"tool_calls": [{"name": "finish_task", "arguments": {"answer": "42"}}]}]')
    args = ["run", "report", "--model", f"scripted:{script}", "--db", str(db), "--no-log"]
    first = CliRunner().invoke(app, [*args, "--run-id", run_id])
    assert first.exit_code == 0, first.output
    stored = stored_log(db, run_id)
    again = CliRunner().invoke(app, [*args, "--run-id", run_id])
    assert again.exit_code == 0, again.output
    assert again.stdout.strip() == first.stdout.strip() == "42"
    assert stored_log(db, run_id) == stored  # nothing new: it had finished
    other = CliRunner().invoke(app, ["run", "another goal", *args[2:], "--run-id", run_id])
    assert other.exit_code == 2
    assert "is stored already" in other.stderr
