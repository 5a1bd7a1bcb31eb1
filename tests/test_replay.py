"""Replay: a recorded run re-run on its recorded model responses and tool results."""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable, Sequence
from pathlib import Path

import pytest

from tether import Agent, Event, ModelRequest, Tool, tool
from tether.codec import compute_hash, read_jsonl, verify_chain, write_jsonl
from tether.content import TextBlock, ToolResult, content_text
from tether.errors import BrokenChain, ConfigError, ModelError, ReplayDivergence, UserError
from tether.events import (
    GENESIS_HASH,
    ModelFailed,
    ModelResponded,
    PolicyDecided,
    RetryPrompted,
    RunFinished,
    RunStarted,
    ToolCallFinished,
    ToolCallRequested,
)
from tether.examples.demo import DEMO_GOAL, demo_agent
from tether.messages import AssistantMessage, Message, ToolCall, ToolResultMessage, UserMessage
from tether.policy.base import Policy, PolicyContext, PolicyDecision
from tether.replay import first_divergence, load_agent, replay
from tether.retry import Backoff
from tether.testing import FakeClock, ReplayModel, ScriptedModel, call, finish
from tether.tools.base import ToolDefinition

from .support import add, reseal

NO_WAIT = Backoff(initial=0.0, jitter=0.0)
GOAL = "add 2 and 3"


def counter_tool() -> tuple[Tool, list[int]]:
    """A tool whose result changes on every call, and the list it counts in."""
    calls: list[int] = []

    @tool(read_only=True, open_world=False, blocking=False)
    def tick() -> int:
        """Count one more call and return the count."""
        calls.append(len(calls) + 1)
        return len(calls)

    return tick, calls


class DenyAdd(Policy):
    """Denies every call to ``add``."""

    def decide(self, call: ToolCall, tool: ToolDefinition, run: PolicyContext) -> PolicyDecision:
        if call.name == "add":
            return PolicyDecision(decision="deny", rule="no_add", reason="adding is not allowed")
        return PolicyDecision(decision="allow", rule="rest", reason="allowed")


def adder(instructions: str = "Add numbers.", *, policy: Policy | None = None) -> Agent:
    return Agent(
        name="adder",
        instructions=instructions,
        tools=[add],
        policy=policy,
        backoff=NO_WAIT,
    )


async def record(
    agent: Agent, model: ScriptedModel, log_dir: Path, goal: str = GOAL
) -> list[Event]:
    """Run ``agent`` on ``model`` with a log, and read the log back (chain verified)."""
    logged = dataclasses.replace(agent, log_dir=log_dir)
    outcome = await logged.run(goal, model=model, clock=FakeClock())
    files = logs_in(log_dir)
    assert [f.name for f in files] == [f"{outcome.run_id}.jsonl"]
    events = read_jsonl(files[0])
    assert tuple(events) == outcome.events
    return events


async def record_add(log_dir: Path) -> list[Event]:
    return await record(adder(), ScriptedModel([call("add", a=2, b=3), finish("5")]), log_dir)


def logs_in(directory: Path) -> list[Path]:
    return sorted(directory.glob("*.jsonl"))


def edit_first(
    events: Sequence[Event], kind: type[Event], change: Callable[[Event], Event]
) -> tuple[list[Event], int]:
    """Apply ``change`` to the first event of ``kind``; return the events and its index."""
    index = next(i for i, e in enumerate(events) if isinstance(e, kind))
    edited = list(events)
    edited[index] = change(edited[index])
    return edited, index


def kinds(events: Sequence[Event]) -> list[str]:
    return [e.kind for e in events]


def final(events: Sequence[Event]) -> RunFinished:
    last = events[-1]
    assert isinstance(last, RunFinished)
    return last


# -- a faithful replay -------------------------------------------------------------------


async def test_a_recorded_run_replays_ok(tmp_path: Path) -> None:
    events = await record_add(tmp_path)
    assert final(events).status == "finished"

    report = await replay(events, agent=adder())

    assert report.ok
    assert report.divergence is None
    assert report.index is None
    assert report.recorded == tuple(events)
    assert kinds(report.replayed) == kinds(events)
    assert first_divergence(events, report.replayed) is None
    replayed_final = final(report.replayed)
    assert replayed_final.status == "finished"
    assert replayed_final.output == "5"
    assert replayed_final.run_id != events[0].run_id
    verify_chain(report.replayed)


@tool(read_only=True, open_world=False)
def shared_note() -> ToolResult:
    """A note someone else wrote."""
    return ToolResult.text("hello", untrusted=True)


async def test_what_a_result_said_of_its_trust_replays(tmp_path: Path) -> None:
    agent = Agent(name="reader", tools=[shared_note], backoff=NO_WAIT)
    events = await record(agent, ScriptedModel([call("shared_note"), finish("hi")]), tmp_path)
    [note] = [e for e in events if isinstance(e, ToolCallFinished) and e.tool == "shared_note"]
    assert note.untrusted is True

    report = await replay(events, agent=agent)

    assert report.ok, report.divergence
    [again] = [e for e in report.replayed if isinstance(e, ToolCallFinished) and e.untrusted]
    assert again.tool == "shared_note"


async def test_parallel_calls_and_a_retried_model_failure_replay_ok(tmp_path: Path) -> None:
    model = ScriptedModel(
        [
            ModelError("overloaded", transient=True),
            [call("add", a=1, b=2), call("add", a=3, b=4)],
            finish("3 and 7"),
        ]
    )
    events = await record(adder(), model, tmp_path)
    assert [e.will_retry for e in events if isinstance(e, ModelFailed)] == [True]
    assert [content_text(e.content) for e in events if isinstance(e, ToolCallFinished)] == [
        "3",
        "7",
        "done",
    ]

    report = await replay(events, agent=adder())

    assert report.ok, report.divergence
    assert kinds(report.replayed) == kinds(events)


async def test_recorded_tool_results_are_served_instead_of_running_the_tools(
    tmp_path: Path,
) -> None:
    tick, calls = counter_tool()
    agent = Agent(name="counter", tools=[tick])
    events = await record(agent, ScriptedModel([call("tick"), finish("counted")]), tmp_path)
    assert calls == [1]
    [recorded] = [e for e in events if isinstance(e, ToolCallFinished) and e.tool == "tick"]
    assert content_text(recorded.content) == "1"

    report = await replay(events, agent=agent)

    assert report.ok, report.divergence
    assert calls == [1]  # the tool did not run again (it would have answered 2)
    [served] = [e for e in report.replayed if isinstance(e, ToolCallFinished) and e.tool == "tick"]
    assert content_text(served.content) == "1"


async def test_replay_imports_the_recorded_agent_ref(tmp_path: Path) -> None:
    agent = dataclasses.replace(demo_agent, log_dir=tmp_path)
    outcome = await agent.run(DEMO_GOAL, agent_ref="tether.examples.demo:demo_agent")
    assert outcome.status == "finished"
    [path] = logs_in(tmp_path)
    events = read_jsonl(path)
    started = events[0]
    assert isinstance(started, RunStarted)
    assert started.agent_ref == "tether.examples.demo:demo_agent"

    report = await replay(events)

    assert report.ok, report.divergence
    assert final(report.replayed).output == outcome.output


async def test_replay_without_an_agent_or_agent_ref_is_a_config_error(tmp_path: Path) -> None:
    events = await record_add(tmp_path)
    with pytest.raises(ConfigError, match="no agent_ref"):
        await replay(events)


async def test_replay_of_a_recording_without_run_started_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match="must start with a run_started event"):
        await replay([], agent=adder())


# -- divergences -------------------------------------------------------------------------


async def test_a_changed_agent_diverges_at_run_started(tmp_path: Path) -> None:
    events = await record_add(tmp_path)

    report = await replay(events, agent=adder("Add numbers carefully."))

    assert not report.ok
    assert report.index == 0
    assert report.divergence is not None
    assert report.divergence.startswith("event 0 (run_started): spec_digest was ")
    started = events[0]
    assert isinstance(started, RunStarted)
    assert started.spec_digest in report.divergence
    assert started.spec_digest != adder("Add numbers carefully.").spec.digest


async def test_an_edited_and_resealed_model_response_diverges_at_the_event_it_changes(
    tmp_path: Path,
) -> None:
    events = await record_add(tmp_path)

    def more(event: Event) -> Event:
        assert isinstance(event, ModelResponded)
        [original] = event.tool_calls
        edited = dataclasses.replace(original, arguments={"a": 40, "b": 3})
        return dataclasses.replace(event, tool_calls=(edited,))

    edited, responded = edit_first(events, ModelResponded, more)
    sealed = reseal(edited)
    verify_chain(sealed)
    requested = next(i for i, e in enumerate(sealed) if isinstance(e, ToolCallRequested))
    assert requested == responded + 1

    report = await replay(sealed, agent=adder())

    assert not report.ok
    assert report.index == requested
    assert report.divergence == (
        f"event {requested} (tool_call_requested): arguments was {{'a': 2, 'b': 3}} in the "
        "recording, {'a': 40, 'b': 3} in the replay"
    )


async def test_a_model_request_that_differs_ends_the_replayed_run_failed(
    tmp_path: Path,
) -> None:
    model = ScriptedModel(["", finish("done")])
    events = await record(Agent(name="quiet"), model, tmp_path)
    assert kinds(events)[:4] == [
        "run_started",
        "model_responded",
        "retry_prompted",
        "model_responded",
    ]

    def reword(event: Event) -> Event:
        assert isinstance(event, RetryPrompted)
        return dataclasses.replace(event, text="Please finish.")

    edited, prompted = edit_first(events, RetryPrompted, reword)

    report = await replay(reseal(edited), agent=Agent(name="quiet"))

    assert not report.ok
    assert report.index == prompted
    assert report.divergence is not None
    assert report.divergence.startswith(f"event {prompted} (retry_prompted): text was ")
    ended = final(report.replayed)
    assert ended.status == "failed"
    assert ended.error is not None
    assert ended.error.type == "ReplayDivergence"
    assert "model request 2 differs from the recording at message 2" in ended.error.message


async def test_a_replay_that_runs_a_call_the_recording_did_not_run_reports_a_divergence(
    tmp_path: Path,
) -> None:
    # Recorded with a policy that denied `add` (a synthetic result, no tool ran); replayed
    # with one that allows it: no recorded result exists for the call.
    model = ScriptedModel([call("add", a=2, b=3), finish("could not add")])
    events = await record(adder(policy=DenyAdd()), model, tmp_path)
    decided = next(i for i, e in enumerate(events) if isinstance(e, PolicyDecided))
    decision = events[decided]
    assert isinstance(decision, PolicyDecided)
    assert decision.decision == "deny"

    report = await replay(events, agent=adder())

    assert not report.ok
    assert report.index == decided
    assert report.divergence is not None
    assert report.divergence.startswith(f"event {decided} (policy_decided): decision was 'deny'")
    assert isinstance(report.replayed[-1], RunFinished)


async def test_a_tampered_recording_is_refused(tmp_path: Path) -> None:
    events = await record_add(tmp_path)

    def forge(event: Event) -> Event:
        assert isinstance(event, ToolCallFinished)
        return dataclasses.replace(event, content=(TextBlock(text="6"),))

    tampered, index = edit_first(events, ToolCallFinished, forge)

    with pytest.raises(
        BrokenChain, match=f"chain broken at seq {index}: the hash does not match"
    ) as info:
        await replay(tampered, agent=adder())
    assert info.value.seq == index

    path = tmp_path / "tampered.jsonl"
    write_jsonl(path, tampered)
    with pytest.raises(BrokenChain) as on_read:
        read_jsonl(path)
    assert on_read.value.seq == index


async def test_a_recording_with_a_broken_link_is_refused(tmp_path: Path) -> None:
    events = await record_add(tmp_path)
    events[3] = dataclasses.replace(events[3], prev_hash=GENESIS_HASH, hash="")
    events[3] = dataclasses.replace(events[3], hash=compute_hash(events[3]))

    with pytest.raises(BrokenChain, match="seq 3: prev_hash does not match") as info:
        await replay(events, agent=adder())
    assert info.value.seq == 3


# -- first_divergence --------------------------------------------------------------------


async def test_first_divergence_ignores_volatile_fields_and_names_kind_and_length(
    tmp_path: Path,
) -> None:
    first = await record_add(tmp_path / "one")
    second = await record_add(tmp_path / "two")
    assert first[0].run_id != second[0].run_id
    assert first_divergence(first, second) is None

    assert first_divergence(first, second[:-1]) == (
        len(first) - 1,
        f"the recording has {len(first)} events, the replay {len(first) - 1}",
    )
    assert first_divergence(first[:2], [second[0], second[2]]) == (
        1,
        "event 1: recorded 'model_responded', replayed 'tool_call_requested'",
    )


# -- ReplayModel ---------------------------------------------------------------------------


def request(*messages: Message) -> ModelRequest:
    return ModelRequest(instructions="", messages=messages, tools=())


async def test_replay_model_serves_recorded_responses_in_order(tmp_path: Path) -> None:
    events = await record_add(tmp_path)
    responses = [e for e in events if isinstance(e, ModelResponded)]
    model = ReplayModel(events)
    assert model.name == "scripted"

    first = await model.request(request(UserMessage(text=GOAL)))
    assert first.tool_calls == responses[0].tool_calls
    [add_call] = first.tool_calls
    second = await model.request(
        request(
            UserMessage(text=GOAL),
            AssistantMessage(tool_calls=first.tool_calls),
            ToolResultMessage(call_id=add_call.id, name="add", content=(TextBlock(text="5"),)),
        )
    )
    assert second.tool_calls == responses[1].tool_calls
    assert model.served == 2


async def test_replay_model_names_the_first_differing_message(tmp_path: Path) -> None:
    events = await record_add(tmp_path)
    model = ReplayModel(events)

    with pytest.raises(
        ReplayDivergence, match="model request 1 differs from the recording at message 0"
    ) as info:
        await model.request(request(UserMessage(text="add 2 and 4")))
    assert info.value.index == 0
    assert info.value.expected == UserMessage(text=GOAL)
    assert info.value.actual == UserMessage(text="add 2 and 4")
    assert model.served == 0

    first = await model.request(request(UserMessage(text=GOAL)))
    with pytest.raises(
        ReplayDivergence, match="model request 2 differs from the recording at message 2"
    ) as second:
        await model.request(
            request(
                UserMessage(text=GOAL),
                AssistantMessage(tool_calls=first.tool_calls),
                ToolResultMessage(
                    call_id=first.tool_calls[0].id, name="add", content=(TextBlock(text="6"),)
                ),
            )
        )
    assert second.value.index == 1


async def test_replay_model_refuses_a_request_with_a_different_message_count(
    tmp_path: Path,
) -> None:
    events = await record_add(tmp_path)
    model = ReplayModel(events)

    with pytest.raises(
        ReplayDivergence, match="model request 1 has 2 messages; the recording had 1"
    ) as info:
        await model.request(request(UserMessage(text=GOAL), UserMessage(text="more")))
    assert info.value.index == 0
    assert info.value.expected == 1
    assert info.value.actual == 2


async def test_replay_model_refuses_more_requests_than_recorded(tmp_path: Path) -> None:
    events = await record(adder(), ScriptedModel([finish("nothing to add")]), tmp_path)
    model = ReplayModel(events)
    await model.request(request(UserMessage(text=GOAL)))

    with pytest.raises(
        ReplayDivergence, match="made model request 2, but the recording has only 1"
    ) as info:
        await model.request(request(UserMessage(text=GOAL)))
    assert info.value.index == 1
    assert model.served == 1


async def test_replay_model_replays_a_recorded_failure_as_a_model_error(tmp_path: Path) -> None:
    model = ScriptedModel([ModelError("overloaded", transient=True), finish("ok")])
    events = await record(adder(), model, tmp_path)
    replaying = ReplayModel(events)

    with pytest.raises(ModelError, match="overloaded") as info:
        await replaying.request(request(UserMessage(text=GOAL)))
    assert info.value.transient
    response = await replaying.request(request(UserMessage(text=GOAL)))
    assert response.tool_calls == (
        ToolCall(id="call_1_0", name="finish_task", arguments={"answer": "ok"}),
    )


async def test_replay_model_replays_for_one_run_only(tmp_path: Path) -> None:
    events = await record_add(tmp_path)
    model = ReplayModel(events)
    replayed = await adder().run(GOAL, model=model)
    assert replayed.status == "finished"

    with pytest.raises(UserError, match="one instance replays one run"):
        await adder().run(GOAL, model=model)


async def test_a_run_whose_request_differs_from_the_recording_ends_failed(
    tmp_path: Path,
) -> None:
    events = await record_add(tmp_path)

    outcome = await adder().run("add 2 and 4", model=ReplayModel(events))

    assert outcome.status == "failed"
    assert outcome.error is not None
    assert outcome.error.type == "ReplayDivergence"
    assert outcome.error.message.startswith(
        "model request 1 differs from the recording at message 0"
    )


# -- load_agent ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "ref", ["tether.examples.demo", "tether.examples.demo:", ":demo_agent", ""]
)
def test_load_agent_refuses_a_malformed_ref(ref: str) -> None:
    with pytest.raises(ConfigError, match=re.escape("must look like 'package.module:attribute'")):
        load_agent(ref)


def test_load_agent_refuses_a_missing_module() -> None:
    with pytest.raises(
        ConfigError, match=re.escape("cannot import agent 'tether.no_such_module:agent'")
    ):
        load_agent("tether.no_such_module:agent")


def test_load_agent_refuses_a_missing_attribute() -> None:
    with pytest.raises(
        ConfigError, match=re.escape("cannot import agent 'tether.examples.demo:nope'")
    ):
        load_agent("tether.examples.demo:nope")


@pytest.mark.parametrize(
    ("ref", "type_name"),
    [
        ("tether.examples.demo:DEMO_GOAL", "str"),
        ("tether.examples.demo:scripted_demo_model", "FunctionModel"),
    ],
)
def test_load_agent_refuses_what_is_not_an_agent(ref: str, type_name: str) -> None:
    with pytest.raises(ConfigError, match=f"is a {type_name}, not an Agent"):
        load_agent(ref)


def test_load_agent_returns_an_agent_or_calls_a_factory() -> None:
    assert load_agent("tether.examples.demo:demo_agent") is demo_agent
    built = load_agent("tether.examples.demo:assistant")
    assert isinstance(built, Agent)
    assert built.name == "assistant"
    assert built.model is None
    assert built.spec.digest == demo_agent.spec.digest


async def test_a_resumed_run_is_refused_plainly_not_called_divergent() -> None:
    # replaying a run resumed with an answer said "diverged: the recording has 13 events,
    # the replay 5", blaming the agent for a nondeterminism it did not have
    from tether.stores import MemoryStore

    store = MemoryStore()
    agent = Agent(
        model=ScriptedModel([call("ask_user", question="which?"), finish("ok")]),
        can_ask_user=True,
        store=store,
    )
    waiting = await agent.run("pick", run_id="r1")
    done = await agent.resume("r1", answer="red")
    assert (waiting.status, done.status) == ("waiting_for_user", "finished")
    with pytest.raises(UserError, match=r"the run was resumed .* cannot re-run a resumed one"):
        await replay(await store.read("r1"), agent=agent)
