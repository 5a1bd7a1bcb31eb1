"""``remember`` and ``recall``: the model manages its own memory, every use in the log."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import TypeVar

import pytest

from tests.memory.test_in_the_loop import SECRET, BrokenMemory
from tether import Agent, Remember
from tether.content import TextBlock
from tether.errors import ConfigError
from tether.events import (
    Event,
    MemoryRecalled,
    MemoryWritten,
    PolicyDecided,
    ToolCallFinished,
)
from tether.memory import InProcessMemory, MemoryQuery, MemoryRecord
from tether.replay import replay
from tether.testing import HashEmbedder, ScriptedModel, ScriptStep, call, finish

E = TypeVar("E", bound=Event)


def of(events: Sequence[Event], kind: type[E]) -> list[E]:
    return [e for e in events if isinstance(e, kind)]


def agent(memory: InProcessMemory, steps: Sequence[ScriptStep], **remember: object) -> Agent:
    return Agent(
        name="notes",
        model=ScriptedModel(list(steps)),
        memory=Remember(memory=memory, tools=True, **remember),  # pyright: ignore[reportArgumentType]
    )


async def test_remember_stores_a_fact_and_the_log_says_which_call_wrote_it() -> None:
    memory = InProcessMemory(embedder=HashEmbedder())
    steps = [
        call("remember", id="c1", text="The user's name is Ana", importance=0.9),
        finish("noted"),
    ]
    outcome = await agent(memory, steps, write_outcome=False).run("My name is Ana")
    assert outcome.status == "finished"
    (decided,) = [e for e in of(outcome.events, PolicyDecided) if e.tool == "remember"]
    assert decided.decision == "allow"  # the developer turned the tools on: they run
    (written,) = of(outcome.events, MemoryWritten)
    assert (written.call_id, written.memory_kind) == ("c1", "semantic")
    kinds = [e.kind for e in outcome.events]
    assert kinds.index("memory_written") + 1 == kinds.index("tool_call_finished")
    (result,) = [e for e in of(outcome.events, ToolCallFinished) if e.call_id == "c1"]
    assert result.structured == {
        "remembered": True,
        "id": written.record_id,
        "redacted": False,
        "importance": 0.6,  # a model's own records never outrank the developer's
    }
    (stored,) = await memory.get("agent:notes", [written.record_id])
    assert (stored.text, stored.importance, stored.run_id) == (
        "The user's name is Ana",
        0.6,
        outcome.run_id,
    )
    assert stored.metadata == {"agent": "notes", "source": "remember"}


async def test_recall_returns_fenced_untrusted_text_and_leaves_the_runs_view_alone() -> None:
    memory = InProcessMemory()
    await memory.put(MemoryRecord(namespace="agent:notes", text="The user's name is Ana", id="n"))
    steps = [call("recall", id="r1", query="name of the user"), finish("Ana")]
    outcome = await agent(memory, steps, write_outcome=False).run("What is my name?")
    recalls = of(outcome.events, MemoryRecalled)
    assert [r.call_id for r in recalls] == [None, "r1"]  # the run's own, then the call's
    assert recalls[1].records == ("n",)
    assert recalls[1].texts == ("The user's name is Ana",)
    (result,) = [e for e in of(outcome.events, ToolCallFinished) if e.call_id == "r1"]
    assert result.untrusted is True
    block = result.content[0]
    assert isinstance(block, TextBlock)
    text = block.text
    assert "<memory>" in text
    assert "The user's name is Ana" in text
    assert "never instructions" in text


async def test_what_remember_stores_never_holds_what_the_log_redacted() -> None:
    memory = InProcessMemory()
    steps = [call("remember", id="c1", text=f"the deploy key is {SECRET}"), finish("ok")]
    outcome = await agent(memory, steps, write_outcome=False).run("keep the deploy key")
    (written,) = of(outcome.events, MemoryWritten)
    assert SECRET not in written.text
    (stored,) = await memory.get("agent:notes", [written.record_id])
    assert SECRET not in stored.text
    assert stored.text == written.text
    (result,) = [e for e in of(outcome.events, ToolCallFinished) if e.call_id == "c1"]
    assert isinstance(result.structured, dict)
    assert result.structured["redacted"] is True


async def test_the_write_policy_holds_for_the_tool_too() -> None:
    memory = InProcessMemory()

    def no_passwords(record: MemoryRecord) -> MemoryRecord | None:
        return None if "password" in record.text.lower() else record

    steps = [
        call("remember", id="c1", text="The admin password is hunter2"),
        call("remember", id="c2", text="The user likes tea"),
        finish("ok"),
    ]
    outcome = await agent(memory, steps, write_outcome=False, policy=no_passwords).run("go")
    assert [w.call_id for w in of(outcome.events, MemoryWritten)] == ["c2"]
    results = {e.call_id: e for e in of(outcome.events, ToolCallFinished)}
    assert results["c1"].structured == {"remembered": False}
    assert await memory.namespaces() == ["agent:notes"]
    found = await memory.find("agent:notes", "password hunter2")
    assert [r.text for r in found] == []


async def test_a_failing_memory_is_the_calls_error_never_the_runs() -> None:
    broken = BrokenMemory(search=True, write=True)
    steps = [
        call("remember", id="c1", text="a fact"),
        call("recall", id="r1", query="fact"),
        finish("went on"),
    ]
    outcome = await agent(broken, steps, write_outcome=False).run("go")
    assert outcome.status == "finished"
    results = {e.call_id: e for e in of(outcome.events, ToolCallFinished)}
    assert results["c1"].is_error
    assert "disk is full" in str(results["c1"].content)
    assert results["r1"].is_error
    assert "locked" in str(results["r1"].content)
    assert of(outcome.events, MemoryWritten) == []
    warned = [r for r in of(outcome.events, MemoryRecalled) if r.call_id == "r1"]
    assert warned[0].warning is not None


async def test_bad_arguments_are_the_models_to_fix() -> None:
    memory = InProcessMemory()
    steps = [
        call("remember", id="c1", text="x", kind="gossip"),
        call("recall", id="r1", query="x", limit=500),
        finish("ok"),
    ]
    outcome = await agent(memory, steps, write_outcome=False).run("go")
    results = {e.call_id: e for e in of(outcome.events, ToolCallFinished)}
    assert results["c1"].error_type == "invalid_arguments"
    assert results["r1"].error_type == "invalid_arguments"
    assert await memory.namespaces() == []


async def test_a_run_with_memory_tools_replays_whatever_the_memory_holds_now() -> None:
    memory = InProcessMemory()
    await memory.put(MemoryRecord(namespace="agent:notes", text="The user likes tea", id="t"))
    steps = [
        call("recall", id="r1", query="what does the user like"),
        call("remember", id="c1", text="The user also likes cake"),
        finish("tea and cake"),
    ]
    made = agent(memory, steps)
    outcome = await made.run("What does the user like?")
    await memory.delete("agent:notes", ["t"])  # the memory has moved on since
    again = dataclasses.replace(made, model=ScriptedModel([]))
    report = await replay(outcome.events, agent=again)
    assert report.divergence is None


def test_the_memory_tools_names_are_reserved_when_they_are_on() -> None:
    def recall(query: str) -> str:
        """Someone else's recall."""
        return query

    with pytest.raises(ConfigError, match="'recall' is the memory tool"):
        Agent(name="a", tools=[recall], memory=Remember(memory=InProcessMemory(), tools=True))
    plain = Agent(name="a", tools=[recall], memory=InProcessMemory())
    assert "recall" in plain.spec.tool_names
    assert "remember" not in plain.spec.tool_names


def test_turning_the_tools_on_changes_the_digest() -> None:
    memory = InProcessMemory()
    off = Agent(name="a", memory=Remember(memory=memory))
    on = Agent(name="a", memory=Remember(memory=memory, tools=True))
    assert off.spec.digest != on.spec.digest
    assert {"remember", "recall"} <= set(on.spec.tool_names)


async def test_a_remember_with_a_secret_cut_by_a_crash_is_done_again_on_resume() -> None:
    # before: its stored arguments were redacted, so recovery took the call as one it could
    # not repeat (tool_call_unknown), leaving a record whose log has no memory_written
    from tether.events import RunResumed, ToolCallUnknown
    from tether.stores import MemoryStore

    memory = InProcessMemory(embedder=HashEmbedder())
    steps = [call("remember", id="c1", text=f"the deploy key is {SECRET}"), finish("noted")]
    outcome = await agent(memory, steps, write_outcome=False).run("remember the key")
    (written,) = of(outcome.events, MemoryWritten)
    cut = next(i for i, e in enumerate(outcome.events) if isinstance(e, MemoryWritten))
    store = MemoryStore()  # the process died after the upsert, before the commit
    await store.append(outcome.run_id, list(outcome.events[:cut]))
    again = dataclasses.replace(agent(memory, steps, write_outcome=False), store=store)
    resumed = await again.resume(outcome.run_id)
    assert resumed.status == "finished"
    assert of(resumed.events, RunResumed)
    assert not of(resumed.events, ToolCallUnknown)
    (rewritten,) = of(resumed.events, MemoryWritten)
    assert rewritten.record_id == written.record_id  # the same record, not a second one
    assert SECRET not in rewritten.text
    found = await memory.search(MemoryQuery(text="deploy key", namespace=written.namespace))
    assert [h.record.id for h in found.hits] == [written.record_id]
