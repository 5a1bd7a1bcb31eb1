"""Hooks (``tether.hooks``): your code sees each committed event, by kind, and never changes the run."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from pathlib import Path

import pytest

from tether import (
    Agent,
    Approval,
    ConfigError,
    Event,
    EventSink,
    Hooks,
    RulePolicy,
    require_approval,
)
from tether.codec import verify_chain
from tether.events import RunFinished, RunStarted, ToolCallFinished, ToolCallRequested
from tether.stores import SqliteStore
from tether.testing import ScriptedModel, call, finish

from .support import add, send_money


def _agent(hooks: Hooks, **kwargs: object) -> Agent:
    script = ScriptedModel([call("add", a=1, b=2), call("add", a=3, b=4), finish("7")])
    return Agent(name="hooked", model=script, tools=[add], hooks=hooks, **kwargs)  # type: ignore[arg-type]


async def test_handlers_see_the_committed_events_of_their_kind_in_log_order() -> None:
    hooks = Hooks()
    finished: list[int] = []
    seen: list[str] = []

    @hooks.on(ToolCallFinished)
    def on_result(event: ToolCallFinished) -> None:
        finished.append(event.seq)

    @hooks.on(RunFinished)
    async def on_end(event: RunFinished) -> None:
        await asyncio.sleep(0)
        seen.append(f"end:{event.status}")

    @hooks.every
    def every(event: Event) -> None:
        seen.append(event.kind)

    outcome = await _agent(hooks).run("add twice")
    assert outcome.status == "finished"
    assert outcome.warnings == ()
    kinds = [e.kind for e in outcome.events]
    assert seen == [*kinds[:-1], "end:finished", "run_finished"]  # own handlers, then every's
    assert finished == [e.seq for e in outcome.events if isinstance(e, ToolCallFinished)]


async def test_a_hook_that_fails_is_reported_once_and_the_run_goes_on(
    caplog: pytest.LogCaptureFixture,
) -> None:
    hooks = Hooks()
    after: list[str] = []

    @hooks.on(ToolCallRequested)
    def broken(event: ToolCallRequested) -> None:
        raise ValueError(f"no metrics for {event.tool}")

    @hooks.on(ToolCallRequested)
    def next_one(event: ToolCallRequested) -> None:
        after.append(event.call_id)

    with caplog.at_level(logging.WARNING, logger="tether"):
        outcome = await _agent(hooks).run("add twice")
    assert outcome.status == "finished"
    assert len(after) == 3  # the next handler still ran, each time
    assert len(outcome.warnings) == 1  # twice failed, said once in the outcome
    assert "broken raised ValueError: no metrics for add" in outcome.warnings[0]
    assert "the run went on" in outcome.warnings[0]
    assert sum("broken raised" in r.getMessage() for r in caplog.records) == 3


async def test_an_async_hook_past_its_timeout_is_cancelled_even_one_that_ignores_it() -> None:
    hooks = Hooks(timeout=0.05)
    release = asyncio.Event()

    @hooks.on(RunStarted)
    async def stuck(event: RunStarted) -> None:
        while not release.is_set():
            try:
                await asyncio.sleep(3600)
            except asyncio.CancelledError:
                continue  # ignores cancellation: it must not hold the run

    outcome = await asyncio.wait_for(_agent(hooks).run("add twice"), 30)
    release.set()
    assert outcome.status == "finished"
    assert len(outcome.warnings) == 1
    assert "stuck took longer than 0.05 s and was cancelled" in outcome.warnings[0]
    assert "on run_started" in outcome.warnings[0]


async def test_a_hook_that_timed_out_is_not_called_again_in_the_run() -> None:
    hooks = Hooks(timeout=0.05)
    calls: list[str] = []

    @hooks.every
    async def slow(event: Event) -> None:
        calls.append(event.kind)
        await asyncio.sleep(3600)

    outcome = await asyncio.wait_for(_agent(hooks).run("add twice"), 30)
    assert outcome.status == "finished"
    assert calls == ["run_started"]  # one wait in the run, not one per event
    assert len(outcome.warnings) == 1
    assert "not called again in this run" in outcome.warnings[0]


async def test_a_hook_sees_an_event_only_once_the_store_holds_it(tmp_path: Path) -> None:
    store = SqliteStore(tmp_path / "runs.db")
    hooks = Hooks()
    stored_when_seen: list[bool] = []

    @hooks.every
    async def check(event: Event) -> None:
        stored = await store.read(event.run_id)
        stored_when_seen.append(any(e.seq == event.seq for e in stored))

    try:
        outcome = await _agent(hooks, store=store).run("add twice")
    finally:
        await store.close()
    assert outcome.status == "finished"
    assert len(stored_when_seen) == len(outcome.events)
    assert all(stored_when_seen)


async def test_hooks_see_a_resumed_run_too(tmp_path: Path) -> None:
    store = SqliteStore(tmp_path / "runs.db")
    hooks = Hooks()
    kinds: list[str] = []
    hooks.every(lambda event: kinds.append(event.kind))
    policy = RulePolicy(None, require_approval(["send_money"]))
    script = ScriptedModel([call("send_money", iban="DE89370400440532013000"), finish("sent")])
    agent = Agent(
        name="payer", model=script, tools=[send_money], policy=policy, store=store, hooks=hooks
    )
    try:
        waiting = await agent.run("pay bob")
        assert waiting.status == "waiting_for_approval"
        kinds.clear()
        done = await agent.resume(waiting.run_id, approvals=[Approval.approve(waiting.pending[0])])
    finally:
        await store.close()
    assert done.status == "finished"
    assert kinds[0] == "run_resumed"
    assert kinds[-1] == "run_finished"
    assert "tool_call_finished" in kinds


def test_on_takes_an_event_class() -> None:
    hooks = Hooks()
    with pytest.raises(ConfigError, match="takes an event class"):
        hooks.on("tool_call_finished")  # type: ignore[arg-type]
    for bad in (0, -1, float("nan"), "5", True, None):
        with pytest.raises(ConfigError, match="positive number of seconds"):
            Hooks(timeout=bad)  # type: ignore[arg-type]
    assert not hooks  # nothing added: a run gets no hook sink at all


async def test_a_sinks_own_warnings_reach_the_outcome() -> None:
    class Counting(EventSink):
        def __init__(self) -> None:
            self.written = 0
            self.notes: list[str] = []

        async def write(self, events: Sequence[Event]) -> None:
            self.written += len(events)
            if any(isinstance(e, RunFinished) for e in events):
                self.notes.append("the dashboard was slow; 1 batch sent late")

        def take_warnings(self) -> list[str]:
            notes, self.notes = self.notes, []
            return notes

    sink = Counting()
    outcome = await _agent(Hooks()).run("add twice", sinks=[sink])
    assert sink.written == len(outcome.events)
    assert outcome.warnings == ("the dashboard was slow; 1 batch sent late",)


async def test_a_hook_that_changes_an_event_changes_nothing_of_the_run() -> None:
    # a hook's edit of a call's arguments reached the sealed events: the chain broke
    hooks = Hooks()

    @hooks.on(ToolCallRequested)
    def meddle(event: ToolCallRequested) -> None:
        event.arguments["a"] = 1000

    outcome = await _agent(hooks).run("add twice")
    assert outcome.status == "finished"
    assert outcome.warnings == ()
    verify_chain(outcome.events)
    requested = [e for e in outcome.events if isinstance(e, ToolCallRequested)]
    assert all(e.arguments.get("a") != 1000 for e in requested)


def test_a_hook_that_ignores_cancellation_does_not_keep_the_program_from_exiting() -> None:
    # it was cancelled but left in the loop's registry: asyncio.run awaited it for ever
    import subprocess
    import sys
    import textwrap

    script = textwrap.dedent(
        """
        import asyncio
        from tether import Agent, Hooks
        from tether.events import RunFinished
        from tether.testing import ScriptedModel, finish

        hooks = Hooks(timeout=0.2)

        @hooks.on(RunFinished)
        async def notify(event):
            while True:  # a retry loop that swallows cancellation
                try:
                    await asyncio.sleep(1)
                except asyncio.CancelledError:
                    pass

        async def main():
            outcome = await Agent(model=ScriptedModel([finish("done")]), hooks=hooks).run("go")
            print(outcome.status, len(outcome.warnings))

        asyncio.run(main())
        print("exited")
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=30, check=False
    )
    assert done.stdout.split() == ["finished", "1", "exited"], done.stderr
