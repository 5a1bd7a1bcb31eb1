"""Resume: a waiting run gets its answer, a crashed run is repaired, nothing runs twice."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

import pytest

from tests.support import assert_protocol_valid
from tether import (
    Agent,
    Event,
    ModelRequest,
    ModelResponse,
    RunOutcome,
    ToolCall,
    ToolContext,
    tool,
)
from tether.content import content_text
from tether.errors import UserError
from tether.events import (
    PolicyDecided,
    RunFinished,
    RunResumed,
    ToolCallFinished,
    ToolCallUnknown,
)
from tether.messages import ToolResultMessage
from tether.policy import RulePolicy, allow, require_approval
from tether.stores import LeaseHeld, RunStore, SqliteStore, StaleLease
from tether.testing import FunctionModel, ScriptedModel, ScriptStep, call, finish

effects: list[str] = []
EFFECTS = RulePolicy(None, allow(["send_email", "charge"], reason="the test's side effects"))
"""The tests' side effects are allowed explicitly (the default policy denies them)."""


@tool(open_world=False)
def send_email(to: str) -> str:
    """Sends an email (a side effect with no idempotency key).

    Args:
        to: The recipient.
    """
    effects.append(f"email:{to}")
    return f"sent to {to}"


@tool(read_only=True, open_world=False, blocking=False)
def read_inbox() -> str:
    """Reads the inbox."""
    effects.append("read")
    return "3 messages"


@tool(open_world=False, idempotency_key=True, blocking=False)
def charge(amount: int, ctx: ToolContext) -> str:
    """Charges a card; the payment service deduplicates by idempotency key.

    Args:
        amount: Cents.
    """
    effects.append(f"charge:{ctx.idempotency_key}")
    return f"charged {amount}"


def crashed_after_intents(events: Sequence[Event]) -> list[Event]:
    """The log as a crash right after the first turn's intents were committed leaves it."""
    first_result = next(i for i, e in enumerate(events) if isinstance(e, ToolCallFinished))
    assert isinstance(events[first_result - 1], PolicyDecided)
    return list(events[:first_result])


async def record(
    store: RunStore, script: Sequence[ScriptStep], tools: list[object]
) -> tuple[str, list[Event]]:
    agent = Agent(model=ScriptedModel(script), tools=tools, policy=EFFECTS)  # pyright: ignore[reportArgumentType]
    outcome = await agent.run("goal")
    partial = crashed_after_intents(outcome.events)
    await store.append(outcome.run_id, partial)
    return outcome.run_id, partial


class Killed(BaseException):
    """Stands for the process dying: not an Exception, so nothing records it."""


async def resumed_until_it_ends(agent: Agent[str], run_id: str, tries: int) -> RunOutcome[str]:
    """Resume ``run_id`` (each crash a fresh process's try) until a resume returns."""
    for _ in range(tries):
        try:
            return await agent.resume(run_id)
        except Killed:
            continue
    raise AssertionError(f"run {run_id!r} still crashing after {tries} resumes")


async def test_a_non_idempotent_call_in_flight_becomes_unknown(store: RunStore) -> None:
    effects.clear()
    script = [call("send_email", to="a@x"), finish("checked")]
    run_id, _ = await record(store, script, [send_email])
    effects.clear()
    agent = Agent(model=ScriptedModel(script), tools=[send_email], store=store)
    outcome = await agent.resume(run_id)
    assert outcome.status == "finished"
    assert effects == []  # never run again on its own
    unknown = [e for e in outcome.events if isinstance(e, ToolCallUnknown)]
    assert len(unknown) == 1
    assert "may or may not have taken effect" in unknown[0].reason
    resumed = [e for e in outcome.events if isinstance(e, RunResumed)]
    assert [(r.reason, r.attempt) for r in resumed] == [("crash", 1)]
    assert_protocol_valid(outcome.events)
    assert await store.read(run_id) == list(outcome.events)


async def test_read_only_and_keyed_calls_in_flight_run_again(store: RunStore) -> None:
    effects.clear()
    script: list[ScriptStep] = [[call("read_inbox"), call("charge", amount=500)], finish("done")]
    run_id, partial = await record(store, script, [read_inbox, charge])
    first_key = next(e for e in effects if e.startswith("charge:"))
    effects.clear()
    agent = Agent(model=ScriptedModel(script), tools=[read_inbox, charge], store=store)
    outcome = await agent.resume(run_id)
    assert outcome.status == "finished"
    assert effects == ["read", first_key]  # the same idempotency key as the first attempt
    redone = [e for e in outcome.events[len(partial) :] if isinstance(e, ToolCallFinished)]
    assert [content_text(e.content) for e in redone[:2]] == ["3 messages", "charged 500"]
    assert_protocol_valid(outcome.events)


async def test_a_finish_whose_outcome_was_not_written_finishes(store: RunStore) -> None:
    outcome = await Agent(model=ScriptedModel([finish("the answer")])).run("goal")
    without_end = [e for e in outcome.events if not isinstance(e, RunFinished)]
    await store.append(outcome.run_id, without_end)
    resumed = await Agent(model=ScriptedModel([]), store=store).resume(outcome.run_id)
    assert resumed.status == "finished"
    assert resumed.output == "the answer"


async def test_completed_turns_are_not_repeated(store: RunStore) -> None:
    script = [call("read_inbox"), call("read_inbox"), finish("x")]
    outcome = await Agent(model=ScriptedModel(script), tools=[read_inbox]).run("goal")
    cut = list(outcome.events[:5])  # run_started, the first turn and its result
    await store.append(outcome.run_id, cut)
    resume_model = ScriptedModel(script)
    resumed = await Agent(model=resume_model, tools=[read_inbox], store=store).resume(
        outcome.run_id
    )
    assert resumed.status == "finished"
    assert len(resume_model.requests) == 2  # only the turns that had not happened
    assert resumed.steps == 3


async def test_waiting_for_user_resumes_with_the_answer(store: RunStore) -> None:
    agent = Agent(
        model=ScriptedModel([call("ask_user", question="Which city?")]),
        can_ask_user=True,
        store=store,
    )
    first = await agent.run("weather")
    assert first.status == "waiting_for_user"
    assert (await store.info(first.run_id)).status == "waiting_for_user"

    def answer_with_the_city(request: ModelRequest) -> ToolCall:
        reply = request.messages[-1]
        assert isinstance(reply, ToolResultMessage)
        return finish(f"weather in {content_text(reply.content)}")

    answering = Agent(model=FunctionModel(answer_with_the_city), can_ask_user=True, store=store)
    with pytest.raises(UserError, match="answer"):
        await answering.resume(first.run_id)
    outcome = await answering.resume(first.run_id, answer="Paris")
    assert outcome.status == "finished"
    assert outcome.output == "weather in Paris"
    assert (await store.info(first.run_id)).status == "finished"
    assert_protocol_valid(outcome.events)


async def stopped_run(store: RunStore, how: str) -> str:
    """A stored run that does not wait for the user: it ended, waits for approvals, or crashed."""
    match how:
        case "finished":
            agent = Agent(model=ScriptedModel([finish("done")]), store=store)
        case "failed":
            agent = Agent(model=ScriptedModel([]), store=store)  # the script runs out
        case "waiting_for_approval":
            agent = Agent(
                model=ScriptedModel([call("send_email", to="a@x")]),
                tools=[send_email],
                policy=RulePolicy(None, require_approval("send_email", reason="mail")),
                store=store,
            )
        case _:
            run_id, _ = await record(store, [call("read_inbox"), finish("x")], [read_inbox])
            return run_id
    outcome = await agent.run("goal")
    assert outcome.status == how
    return outcome.run_id


@pytest.mark.parametrize(
    ("how", "state"),
    [
        ("finished", "it ended finished"),
        ("failed", "it ended failed"),
        ("waiting_for_approval", "it waits for approvals"),
        ("crashed", "it has not stopped"),
    ],
)
async def test_an_answer_for_a_run_that_does_not_wait_for_one_is_refused(
    store: RunStore, how: str, state: str
) -> None:
    run_id = await stopped_run(store, how)
    before = await store.read(run_id)
    agent = Agent(model=ScriptedModel([finish("x")]), tools=[read_inbox, send_email], store=store)

    with pytest.raises(UserError, match=f"does not wait for an answer \\({state}\\)"):
        await agent.resume(run_id, answer="Paris")

    assert await store.read(run_id) == before


async def test_resuming_a_finished_run_changes_nothing(store: RunStore) -> None:
    agent = Agent(model=ScriptedModel([finish("done")]), store=store)
    first = await agent.run("goal")
    again = await Agent(model=ScriptedModel([]), store=store).resume(first.run_id)
    assert again.status == "finished"
    assert again.events == first.events
    assert again.output == "done"


async def test_recovery_gives_up_after_max_recoveries(store: RunStore) -> None:
    run_id, _ = await record(store, [call("send_email", to="b@x"), finish("done")], [send_email])

    class Crashing(ScriptedModel):
        async def request(self, request: object) -> object:  # pyright: ignore[reportIncompatibleMethodOverride]
            raise Killed

    for _ in range(2):
        with pytest.raises(Killed):
            await Agent(
                model=Crashing([]), tools=[send_email], store=store, max_recoveries=2
            ).resume(run_id)
    final = await Agent(
        model=ScriptedModel([]), tools=[send_email], store=store, max_recoveries=2
    ).resume(run_id)
    assert final.status == "failed"
    assert final.error is not None
    assert "gave up after 2 recovery attempts" in final.error.message


async def test_crashes_with_progress_between_them_do_not_use_up_the_recoveries(
    store: RunStore,
) -> None:
    # every crash counted: a long run killed now and then failed for good at the third,
    # whatever it had done between them
    @tool(read_only=True, open_world=False)
    def lookup(q: str) -> str:
        """Look up.

        Args:
            q: The query.
        """
        return f"found {q}"

    def model() -> FunctionModel:
        """Answers one turn, then the process dies at the next request."""
        answered: list[bool] = []

        def respond(request: ModelRequest) -> ScriptStep:
            found = sum(1 for m in request.messages if isinstance(m, ToolResultMessage))
            if found == 5:
                return finish("done")
            if answered:
                raise Killed
            answered.append(True)
            return call("lookup", q=str(found))

        return FunctionModel(respond)

    agent = Agent(model=model(), tools=[lookup], store=store, max_recoveries=2)
    with pytest.raises(Killed):
        await agent.run("goal", run_id="long-run")
    for _ in range(3):  # three more crashes, each after a step of progress
        with pytest.raises(Killed):
            await replace(agent, model=model()).resume("long-run")
    final = await replace(agent, model=model()).resume("long-run")
    assert final.status == "finished", final.error
    assert final.output == "done"


async def test_a_call_that_kills_the_process_every_time_uses_up_the_recoveries(
    store: RunStore,
) -> None:
    # a model answer counted as progress: a tool that killed the process after each answer
    # kept the run recovering for ever (only max_steps stopped the paid loop)
    @tool(read_only=False, open_world=False)
    def poison() -> str:
        """Crash (not safe to repeat: a recovery does not run it again, the model does)."""
        raise Killed

    def model() -> FunctionModel:
        return FunctionModel(lambda _: call("poison"))

    agent = Agent(model=model(), tools=[poison], store=store, max_recoveries=2)
    with pytest.raises(Killed):
        await agent.run("goal", run_id="poisoned")
    outcome = await resumed_until_it_ends(replace(agent, model=model()), "poisoned", 4)
    assert outcome.status == "failed"
    assert outcome.error is not None
    assert "recovery attempts in a row" in outcome.error.message


async def test_a_safe_call_that_kills_the_process_when_run_again_uses_up_the_recoveries(
    store: RunStore,
) -> None:
    # recovery runs a safe call again: its run_resumed was committed after the call, so a
    # call that kills the process every time left no trace of the recoveries, and they never
    # ran out
    @tool(read_only=True, open_world=False)
    def poison() -> str:
        """Crash."""
        raise Killed

    agent = Agent(
        model=FunctionModel(lambda _: call("poison")), tools=[poison], store=store, max_recoveries=2
    )
    with pytest.raises(Killed):
        await agent.run("goal", run_id="poisoned-safe")
    outcome = await resumed_until_it_ends(agent, "poisoned-safe", 5)
    assert outcome.status == "failed"
    assert outcome.error is not None
    assert "gave up after 2 recovery attempts in a row" in outcome.error.message


async def test_only_one_owner_at_a_time(tmp_path: Path) -> None:
    first = SqliteStore(tmp_path / "t.db")
    second = SqliteStore(tmp_path / "t.db")
    try:
        run_id, _ = await record(first, [call("read_inbox"), finish("x")], [read_inbox])
        held = await first.acquire(run_id, "someone-else:1:x", ttl=60)
        with pytest.raises(LeaseHeld):
            await Agent(
                model=ScriptedModel([finish("x")]), tools=[read_inbox], store=second
            ).resume(run_id)
        await first.acquire(run_id, "someone-else:1:x", ttl=-1)  # its owner lets it lapse
        taken = await second.acquire(run_id, "other-host:2:y")  # a lapsed lease can be taken
        with pytest.raises(StaleLease):
            await first.append(run_id, (await first.read(run_id))[-1:], lease=held)
        assert taken.token > held.token
    finally:
        await first.close()
        await second.close()


async def test_a_detached_run_is_left_as_a_crash_leaves_it_and_resumes(tmp_path: Path) -> None:
    # a process going away on purpose (a server's graceful shutdown) had only cancel(),
    # which ends a run for good
    store = SqliteStore(tmp_path / "t.db")
    started = asyncio.Event()

    async def slow(request: ModelRequest) -> ModelResponse:
        if len(request.messages) == 1:
            started.set()
            await asyncio.sleep(30)
        return ModelResponse(tool_calls=(finish("done"),))

    agent = Agent(model=FunctionModel(slow), store=store)
    run = agent.stream("go")
    kinds: list[str] = []

    async def follow() -> None:
        async for event in run:
            kinds.append(event.kind)

    following = asyncio.ensure_future(follow())
    await asyncio.wait_for(started.wait(), 30)
    run.detach("shutting down")
    await asyncio.wait_for(following, 30)
    assert kinds == ["run_started"]
    assert not run.done
    with pytest.raises(RuntimeError, match="the run was detached: it has no outcome here"):
        run.outcome  # noqa: B018 - it has none
    (info,) = await store.runs()
    assert info.status == "running"
    from tether.stores.stale import stale_runs

    (stale,) = await stale_runs(store)  # its lease given back: a restart would resume it
    assert (stale.info.run_id, stale.reason) == (info.run_id, "no_owner")
    fast = Agent(
        model=FunctionModel(lambda _: ModelResponse(tool_calls=(finish("done"),))), store=store
    )
    outcome = await fast.resume(info.run_id)
    assert outcome.status == "finished"
    assert [e.kind for e in outcome.events].count("run_finished") == 1
    await store.close()
