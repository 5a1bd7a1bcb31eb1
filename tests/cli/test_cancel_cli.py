"""``tether cancel``: a run that waits for a human is ended ``cancelled`` from the command line."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from typer.testing import CliRunner

from tether import Agent, tool
from tether.cli.app import app
from tether.codec import verify_chain
from tether.events import RunFinished, ToolCallFinished
from tether.policy import RulePolicy, require_approval
from tether.stores import SqliteStore
from tether.testing import ScriptedModel, call

ASKING = Agent(
    name="asking",
    model=ScriptedModel([call("ask_user", question="Which city?")]),
    can_ask_user=True,
)


@pytest.fixture(autouse=True)
def _isolated(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:  # pyright: ignore[reportUnusedFunction]
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("TETHER_DB", raising=False)
    monkeypatch.setenv("COLUMNS", "2000")


def stored(db: Path, agent: Agent[str]) -> str:
    async def go() -> str:
        store = SqliteStore(db)
        try:
            outcome = await agent.run("go", store=store)
            assert outcome.status in ("waiting_for_user", "waiting_for_approval")
            return outcome.run_id
        finally:
            await store.close()

    return asyncio.run(go())


def events(db: Path, run_id: str) -> list[object]:
    async def go() -> list[object]:
        store = SqliteStore(db)
        try:
            found = await store.read(run_id)
            verify_chain(found, run_id=run_id)
            return list(found)
        finally:
            await store.close()

    return asyncio.run(go())


def test_cancel_ends_a_run_waiting_for_an_answer(tmp_path: Path) -> None:
    db = tmp_path / "t.db"
    run_id = stored(db, ASKING)
    result = CliRunner().invoke(
        app, ["cancel", run_id[:8], "--reason", "ticket closed", "--by", "ops", "--db", str(db)]
    )
    assert result.exit_code == 0, result.output
    assert f"cancelled {run_id}" in result.stderr
    last = events(db, run_id)[-1]
    assert isinstance(last, RunFinished)
    assert last.status == "cancelled"
    assert last.error is not None
    assert "ops" in last.error.message
    assert "ticket closed" in last.error.message


def test_cancel_closes_the_calls_waiting_for_approval(tmp_path: Path) -> None:
    @tool(read_only=False, destructive=True)
    def wipe(path: str) -> str:
        """Delete a file.

        Args:
            path: The file.
        """
        raise AssertionError("never run")

    agent = Agent(
        name="wiping",
        model=ScriptedModel([call("wipe", path="a.txt")]),
        tools=[wipe],
        policy=RulePolicy(None, require_approval("wipe", reason="a human decides")),
    )
    db = tmp_path / "t.db"
    run_id = stored(db, agent)
    result = CliRunner().invoke(app, ["cancel", run_id, "--db", str(db)])
    assert result.exit_code == 0, result.output
    assert "1 waiting call not executed" in result.stderr
    found = events(db, run_id)
    closed = [e for e in found if isinstance(e, ToolCallFinished)]
    assert len(closed) == 1
    assert closed[0].is_error
    assert closed[0].error_type == "cancelled"
    last = found[-1]
    assert isinstance(last, RunFinished)
    assert last.status == "cancelled"


def test_cancel_refuses_a_run_that_has_ended(tmp_path: Path) -> None:
    db = tmp_path / "t.db"
    run_id = stored(db, ASKING)
    assert CliRunner().invoke(app, ["cancel", run_id, "--db", str(db)]).exit_code == 0
    again = CliRunner().invoke(app, ["cancel", run_id, "--db", str(db)])
    assert again.exit_code == 2
    assert "does not wait for a human" in again.stderr
    assert "Traceback" not in again.output
