"""Context given with a goal (``agent.run(goal, context=...)``): the model reads it, the log holds it."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from tether import Agent, UserError
from tether.codec import verify_chain
from tether.errors import BrokenChain, RunExists
from tether.events import RunStarted
from tether.messages import UserMessage
from tether.models.base import ModelRequest
from tether.replay import replay
from tether.stores import SqliteStore
from tether.testing import FunctionModel, ScriptedModel, finish

from .support import add

CUSTOMER = {"name": "Ada", "plan": "pro", "open_tickets": [101, 102], "vip": True}


def _reader(seen: list[str]) -> FunctionModel:
    def answer(request: ModelRequest) -> object:
        first = request.messages[0]
        assert isinstance(first, UserMessage)
        seen.append(first.text)
        return finish("done")

    return FunctionModel(answer)  # pyright: ignore[reportArgumentType]


async def test_the_model_reads_the_context_with_the_goal_and_the_log_records_it() -> None:
    seen: list[str] = []
    agent = Agent(name="support", model=_reader(seen), tools=[add])
    outcome = await agent.run("Summarise this customer.", context=CUSTOMER)
    assert outcome.status == "finished"
    started = outcome.events[0]
    assert isinstance(started, RunStarted)
    assert started.goal == "Summarise this customer."
    assert started.context == CUSTOMER
    first = seen[0]
    assert first.startswith("Summarise this customer.\n\nContext given with the task:\n<context>")
    block = first[first.index("<context>\n") + 10 : first.index("\n</context>")]
    assert json.loads(block) == CUSTOMER
    verify_chain(outcome.events)


async def test_a_run_without_context_reads_and_hashes_as_before() -> None:
    seen: list[str] = []
    outcome = await Agent(name="plain", model=_reader(seen), tools=[add]).run("Just this.")
    started = outcome.events[0]
    assert isinstance(started, RunStarted)
    assert started.context is None
    assert seen == ["Just this."]  # no empty context block


async def test_the_context_is_in_the_hash_chain() -> None:
    outcome = await Agent(name="c", model=ScriptedModel([finish("ok")])).run(
        "Go.", context={"limit": 5}
    )
    started = outcome.events[0]
    assert isinstance(started, RunStarted)
    forged = [dataclasses.replace(started, context={"limit": 500}), *outcome.events[1:]]
    with pytest.raises(BrokenChain):
        verify_chain(forged)


async def test_a_secret_in_the_context_is_redacted_before_anyone_sees_it() -> None:
    seen: list[str] = []
    key = "sk-" + "a1B2c3D4e5F6g7H8i9J0k1L2m3N4o5P6"
    outcome = await Agent(name="s", model=_reader(seen), tools=[add]).run(
        "Check the account.", context={"account": "ada", "api_key": key}
    )
    started = outcome.events[0]
    assert isinstance(started, RunStarted)
    assert started.context is not None
    assert key not in json.dumps(started.context)
    assert started.context["account"] == "ada"
    assert key not in seen[0]  # the model reads what the log holds
    assert any(e.kind == "redacted" and e.of_seq == 0 for e in outcome.events)  # pyright: ignore[reportAttributeAccessIssue]


@pytest.mark.parametrize(
    ("context", "message"),
    [
        (["not", "a", "mapping"], "context must be a mapping"),
        ({"when": {1, 2}}, "cannot be stored as JSON"),
        ({1: "int key"}, "cannot be stored as JSON"),
        ({"price": float("nan")}, r"holds nan \(at price\), a number JSON cannot carry"),
        ({"a": [1.0, float("-inf")]}, r"holds -inf \(at a\[1\]\)"),
    ],
)
async def test_a_context_that_is_not_a_json_object_is_refused(
    context: object, message: str
) -> None:
    agent = Agent(name="c", model=ScriptedModel([finish("ok")]))
    with pytest.raises(UserError, match=message):
        await agent.run("Go.", context=context)  # type: ignore[arg-type]


async def test_replay_gives_the_recorded_context() -> None:
    agent = Agent(name="r", model=ScriptedModel([finish("ok")]))
    outcome = await agent.run("Go.", context={"ticket": 7})
    report = await replay(list(outcome.events), agent=agent)
    assert report.ok, report.divergence
    started = report.replayed[0]
    assert isinstance(started, RunStarted)
    assert started.context == {"ticket": 7}


async def test_a_run_id_names_one_goal_with_one_context(tmp_path: Path) -> None:
    store = SqliteStore(tmp_path / "runs.db")
    agent = Agent(name="r", model=ScriptedModel([finish("ok")]), store=store)
    try:
        first = await agent.run("Go.", context={"ticket": 7}, run_id="run-7")
        again = await agent.run("Go.", context={"ticket": 7}, run_id="run-7")
        assert again.status == first.status == "finished"
        assert len(again.events) == len(first.events)  # the stored run, not another
        with pytest.raises(RunExists, match="its own context"):
            await agent.run("Go.", context={"ticket": 8}, run_id="run-7")
    finally:
        await store.close()


async def test_the_same_call_with_a_secret_names_the_same_run(tmp_path: Path) -> None:
    """The log holds the goal and context redacted; the caller gives them whole."""
    store = SqliteStore(tmp_path / "runs.db")
    agent = Agent(name="r", model=ScriptedModel([finish("ok")]), store=store)
    goal = "Rotate the key sk-" + "a1B2c3D4e5F6g7H8i9J0k1L2m3N4o5P6" + " today."
    context = {"account": "ada", "api_key": "k-123456789"}
    try:
        first = await agent.run(goal, context=context, run_id="run-s")
        again = await agent.run(goal, context=context, run_id="run-s")
        assert again.run_id == first.run_id
        assert len(again.events) == len(first.events)  # the stored run, not a RunExists
        with pytest.raises(RunExists):
            await agent.run(goal, context={**context, "account": "bob"}, run_id="run-s")
    finally:
        await store.close()
