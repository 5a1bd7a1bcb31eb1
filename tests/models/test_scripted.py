"""``ScriptedModel``: one script position per run, continued from history by a fresh model."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Sequence
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.support import add, assert_protocol_valid
from tether import Agent, Limits, ModelRequest, ModelResponse, RulePolicy, allow, tool
from tether.errors import ConfigError, ModelError
from tether.events import Event, ModelFailed, ModelResponded, ToolCallFinished
from tether.messages import AssistantMessage, Message, ToolCall, UserMessage
from tether.models.base import ModelProfile
from tether.models.prompted import require_tools
from tether.retry import Backoff
from tether.stores import MemoryStore, SqliteStore
from tether.testing import ScriptedModel, ScriptStep, call, finish

NOTES = RulePolicy(None, allow("note", reason="the test's own side effect"))
"""The notes are allowed explicitly (the default policy denies side effects)."""
NO_WAIT = Backoff(initial=0.0, jitter=0.0)
"""Retries of transient errors without a back-off (no wall-clock waits in tests)."""


class Crash(BaseException):
    """The process dying while a tool runs (not an Exception: nothing catches it)."""


notes: list[int] = []
crash_at: set[int] = set()


@tool(idempotent=True, open_world=False, blocking=False)
def note(n: int) -> str:
    """Write a note; dies the first time it writes a note in ``crash_at``.

    Args:
        n: Which note.
    """
    if n in crash_at:
        crash_at.discard(n)
        raise Crash
    notes.append(n)
    return f"noted {n}"


@pytest.fixture
async def sqlite(tmp_path: Path) -> AsyncIterator[SqliteStore]:
    store = SqliteStore(tmp_path / "t.db")
    try:
        yield store
    finally:
        await store.close()


def ask(*messages: Message, run_id: str = "") -> ModelRequest:
    return ModelRequest(
        instructions="", messages=(UserMessage(text="goal"), *messages), tools=(), run_id=run_id
    )


def turns(n: int) -> tuple[Message, ...]:
    return tuple(AssistantMessage(text=f"turn {i}") for i in range(n))


def answers(events: Sequence[Event]) -> list[tuple[str, tuple[ToolCall, ...]]]:
    return [(e.text, e.tool_calls) for e in events if isinstance(e, ModelResponded)]


def failures(events: Sequence[Event]) -> list[str]:
    return [e.error.message for e in events if isinstance(e, ModelFailed)]


def noted(events: Sequence[Event]) -> list[str]:
    return [e.call_id for e in events if isinstance(e, ToolCallFinished) and e.tool == "note"]


# -- one model, many runs ------------------------------------------------------------------------


async def test_one_agent_runs_twice_in_a_row() -> None:
    agent = Agent(model=ScriptedModel([call("add", a=2, b=3), finish("5")]), tools=[add])
    first = await agent.run("add 2 and 3")
    second = await agent.run("add 2 and 3")
    assert (first.status, first.output) == ("finished", "5")
    assert (second.status, second.output) == ("finished", "5")
    assert answers(second.events) == answers(first.events)


async def test_one_agent_runs_twice_at_once() -> None:
    model = ScriptedModel([call("add", a=2, b=3), call("add", a=1, b=1), finish("done")])
    agent = Agent(model=model, tools=[add])
    first, second = await asyncio.gather(agent.run("go"), agent.run("go"))
    assert (first.status, second.status) == ("finished", "finished")
    assert answers(first.events) == answers(second.events)
    assert len(answers(first.events)) == 3
    assert len(model.requests) == 6  # every request of both runs, in order


async def test_a_model_string_gives_one_model_to_every_run_of_an_agent(tmp_path: Path) -> None:
    path = tmp_path / "script.json"
    path.write_text(
        json.dumps([{"tool_calls": [{"name": "finish_task", "arguments": {"answer": "ok"}}]}])
    )
    agent = Agent(model=f"scripted:{path}")
    assert agent.resolved_model() is agent.resolved_model()
    runs = [await agent.run("go"), await agent.run("go")]
    assert [r.status for r in runs] == ["finished", "finished"]


async def test_each_run_gets_its_best_effort_answer_from_its_own_position() -> None:
    script: list[ScriptStep] = [call("add", a=1, b=1), call("add", a=2, b=2), "4, roughly"]
    agent = Agent(model=ScriptedModel(script), tools=[add], limits=Limits(max_steps=2))
    for _ in range(2):
        outcome = await agent.run("add")
        assert outcome.status == "budget_exhausted"
        assert outcome.answer == "4, roughly"


async def test_a_prompted_script_serves_runs_one_after_another() -> None:
    class TextOnly(ScriptedModel):
        @property
        def profile(self) -> ModelProfile:
            return ModelProfile(native_tools=False, parallel_tool_calls=False)

    model = require_tools(
        TextOnly(
            [
                '<tool_call>{"name": "add", "arguments": {"a": 2, "b": 3}}</tool_call>',
                '<tool_call>{"name": "finish_task", "arguments": {"answer": "5"}}</tool_call>',
            ]
        )
    )
    agent = Agent(model=model, tools=[add])
    outcomes = [await agent.run("add 2 and 3"), await agent.run("add 2 and 3")]
    assert [o.output for o in outcomes] == ["5", "5"]


# -- positions ----------------------------------------------------------------------------------


async def test_requests_outside_a_run_share_one_position() -> None:
    model = ScriptedModel(["one", "two"])
    assert (await model.request(ask())).text == "one"
    assert (await model.request(ask())).text == "two"
    with pytest.raises(ModelError, match="the script has 2 steps and a request asked for step 3"):
        await model.request(ask())


async def test_an_error_step_advances_the_position_of_its_run_only() -> None:
    flaky = ModelError("overloaded", transient=True)
    model = ScriptedModel([flaky, "answer"])
    with pytest.raises(ModelError) as raised:
        await model.request(ask(run_id="a"))
    assert raised.value is flaky
    assert (await model.request(ask(run_id="a"))).text == "answer"  # the retry
    with pytest.raises(ModelError) as other:
        await model.request(ask(run_id="b"))  # another run starts at the beginning
    assert other.value is flaky


async def test_a_new_run_continues_after_the_step_of_its_last_turn() -> None:
    model = ScriptedModel([ModelError("down"), call("add", a=1, b=2), finish("3")])
    response = await model.request(ask(*turns(1), run_id="resumed"))
    assert response.tool_calls == (
        ToolCall(id="call_2_0", name="finish_task", arguments={"answer": "3"}),
    )


async def test_error_steps_after_the_last_turn_are_played() -> None:
    flaky = ModelError("overloaded", transient=True)
    model = ScriptedModel(["first", flaky, "second"])
    with pytest.raises(ModelError) as raised:
        await model.request(ask(*turns(1), run_id="resumed"))
    assert raised.value is flaky
    assert (await model.request(ask(*turns(1), run_id="resumed"))).text == "second"


async def test_a_reused_run_id_with_a_shorter_history_starts_over() -> None:
    model = ScriptedModel(["one", "two"])
    assert (await model.request(ask(run_id="r"))).text == "one"
    assert (await model.request(ask(*turns(1), run_id="r"))).text == "two"
    assert (await model.request(ask(run_id="r"))).text == "one"


async def test_only_max_runs_positions_are_kept() -> None:
    flaky = ModelError("overloaded", transient=True)
    model = ScriptedModel(["one", flaky, "two"], max_runs=1)
    await model.request(ask(run_id="a"))
    with pytest.raises(ModelError):
        await model.request(ask(*turns(1), run_id="a"))
    await model.request(ask(run_id="b"))  # run a is forgotten
    with pytest.raises(ModelError) as raised:  # a continues from its history: the error again
        await model.request(ask(*turns(1), run_id="a"))
    assert raised.value is flaky


def test_max_runs_must_be_positive() -> None:
    with pytest.raises(ConfigError, match="max_runs"):
        ScriptedModel([], max_runs=0)


async def test_resuming_with_the_remaining_steps_only_says_to_give_the_whole_script() -> None:
    model = ScriptedModel([finish("done")])
    with pytest.raises(ModelError, match="give the model of a resumed run the whole script"):
        await model.request(ask(*turns(1), run_id="resumed"))


# -- resuming with a fresh model ---------------------------------------------------------------


async def test_a_fresh_model_continues_a_run_that_waited_for_the_user(
    sqlite: SqliteStore,
) -> None:
    script = [call("ask_user", question="Which numbers?"), call("add", a=2, b=3), finish("5")]
    first = await Agent(
        model=ScriptedModel(script), tools=[add], can_ask_user=True, store=sqlite
    ).run("add")
    assert first.status == "waiting_for_user"
    fresh = ScriptedModel(script)
    done = await Agent(model=fresh, tools=[add], can_ask_user=True, store=sqlite).resume(
        first.run_id, answer="2 and 3"
    )
    assert (done.status, done.output) == ("finished", "5")
    assert len(fresh.requests) == 2  # the two turns that had not happened
    assert [calls[0].name for _, calls in answers(done.events)] == [
        "ask_user",
        "add",
        "finish_task",
    ]


async def test_a_fresh_model_continues_a_crashed_run_without_repeating_turns(
    sqlite: SqliteStore,
) -> None:
    notes.clear()
    crash_at.clear()
    crash_at.add(2)
    script = [call("note", n=1), call("note", n=2), call("note", n=3), finish("done")]
    with pytest.raises(Crash):
        await Agent(model=ScriptedModel(script), tools=[note], policy=NOTES, store=sqlite).run(
            "notes", run_id="r1"
        )
    assert notes == [1]
    fresh = ScriptedModel(script)
    done = await Agent(model=fresh, tools=[note], policy=NOTES, store=sqlite).resume("r1")
    assert done.status == "finished"
    assert notes == [1, 2, 3]  # note 2 was in flight (idempotent: it ran again), nothing twice
    assert noted(done.events) == ["call_0_0", "call_1_0", "call_2_0"]
    assert len(fresh.requests) == 2  # note 3 and the finish
    assert len(answers(done.events)) == 4
    assert_protocol_valid(done.events)


async def test_error_steps_before_and_after_the_crash_are_each_played_once(
    sqlite: SqliteStore,
) -> None:
    notes.clear()
    crash_at.clear()
    crash_at.add(2)
    script: list[ScriptStep] = [
        ModelError("overloaded", transient=True),
        call("note", n=1),
        call("note", n=2),
        ModelError("rate limited", transient=True),
        call("note", n=3),
        finish("done"),
    ]

    def agent(model: ScriptedModel) -> Agent:
        return Agent(model=model, tools=[note], policy=NOTES, store=sqlite, backoff=NO_WAIT)

    with pytest.raises(Crash):
        await agent(ScriptedModel(script)).run("notes", run_id="r1")
    fresh = ScriptedModel(script)
    done = await agent(fresh).resume("r1")
    assert done.status == "finished"
    assert notes == [1, 2, 3]
    assert failures(done.events) == ["overloaded", "rate limited"]
    assert len(fresh.requests) == 3  # the error after the crash, its retry, the finish
    assert_protocol_valid(done.events)


# -- the position a history implies ------------------------------------------------------------


def script_of(errors: list[bool]) -> list[ScriptStep]:
    """Distinct steps: an error or a call, each naming its index."""
    return [
        ModelError(f"error {i}", transient=True) if error else call("step", i=i)
        for i, error in enumerate(errors)
    ]


async def play(model: ScriptedModel, request: ModelRequest) -> ModelResponse | BaseException:
    try:
        return await model.request(request)
    except ModelError as exc:
        return exc


@settings(max_examples=60, deadline=None)
@given(st.lists(st.booleans(), max_size=12))
def test_a_fresh_model_continues_where_an_uninterrupted_run_would(errors: list[bool]) -> None:
    async def check() -> None:
        script = script_of(errors)
        steps = len(script)
        uninterrupted = ScriptedModel(script)
        history: tuple[Message, ...] = ()
        first_after_turn = True
        for _ in range(steps + 1):
            request = ask(*history, run_id="run")
            played = await play(uninterrupted, request)
            if first_after_turn:  # where a crash may leave the run: a fresh model joins here
                fresh = await play(ScriptedModel(script), request)
                if isinstance(played, BaseException):
                    assert fresh is played or (
                        isinstance(fresh, ModelError) and "asked for step" in str(fresh)
                    )
                else:
                    assert fresh == played
            first_after_turn = isinstance(played, ModelResponse)
            if isinstance(played, ModelResponse):
                history = (*history, AssistantMessage(tool_calls=played.tool_calls))

    asyncio.run(check())


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.booleans(), min_size=1, max_size=8), st.data())
def test_a_run_resumed_at_any_turn_by_a_fresh_model_ends_as_an_uninterrupted_one(
    errors: list[bool], data: st.DataObject
) -> None:
    # At most one error in a row: a resumed run plays the errors after its last turn again,
    # and its log still holds the earlier attempts, so more could exhaust the retries.
    errors = [e and not (i and errors[i - 1]) for i, e in enumerate(errors)]
    script = [
        ModelError(f"error {i}", transient=True) if error else call("add", a=i, b=1)
        for i, error in enumerate(errors)
    ]
    script.append(finish("done"))

    def agent(store: MemoryStore | None = None) -> Agent:
        return Agent(model=ScriptedModel(script), tools=[add], store=store, backoff=NO_WAIT)

    async def check() -> None:
        whole = await agent().run("add", run_id="r")
        assert whole.status == "finished"
        events = list(whole.events)
        # a cut just before the first model attempt after a turn (or the first of all)
        model_events = [
            i for i, e in enumerate(events) if isinstance(e, ModelResponded | ModelFailed)
        ]
        cuts = [
            i
            for n, i in enumerate(model_events)
            if n == 0 or isinstance(events[model_events[n - 1]], ModelResponded)
        ]
        cut = data.draw(st.sampled_from(cuts))
        store = MemoryStore()
        await store.append("r", events[:cut])
        resumed = await agent(store).resume("r")
        assert resumed.status == "finished"
        assert answers(resumed.events) == answers(events)
        assert failures(resumed.events[cut:]) == failures(events[cut:])

    asyncio.run(check())
