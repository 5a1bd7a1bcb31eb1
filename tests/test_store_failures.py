"""A run whose store fails: typed errors, a ``failed`` outcome, and never more than is stored.

Before anything of a run is stored, a store failure is raised (there is no run to end).
After that, the run ends ``failed`` in the caller's process with the store's error, its log
goes back to what the store holds, and it is never reported ``finished`` unless its
``run_finished`` is stored. Resuming once the store works continues it as after a crash.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import IO, Any

import pytest

from tests.support import add, assert_protocol_valid
from tether import Agent, Model, ModelRequest, ModelResponse, ToolCall
from tether.errors import (
    ConfigError,
    ModelRequestsBlocked,
    StaleLease,
    StoreError,
    StoreUnavailable,
    StoreWriteError,
)
from tether.events import Event, RunFinished
from tether.policy.approvals import Approval
from tether.policy.gate import RulePolicy
from tether.policy.rules import Rules, require_approval
from tether.run.journal import JsonlSink
from tether.stores import Lease, MemoryStore, RunStore, SqliteStore
from tether.stores.base import RunInfo, RunQuery
from tether.testing import FunctionModel, ScriptedModel, call, finish

SCRIPT = [call("add", a=1, b=2), call("add", a=3, b=4), finish("done")]


def full_disk() -> IO[bytes]:
    """A file on a full disk: every flush fails with ``ENOSPC``."""
    return Path("/dev/full").open("ab")


class FailingStore(RunStore):
    """A store that refuses every append from the ``fail_at``-th on (counted from 1)."""

    def __init__(self, inner: RunStore, fail_at: int, error: StoreError | None = None) -> None:
        self.inner = inner
        self.fail_at = fail_at
        self.appends = 0
        self.error = error or StoreWriteError("could not write the pending file: disk full")

    async def append(
        self, run_id: str, events: Sequence[Event], *, lease: Lease | None = None
    ) -> None:
        self.appends += 1
        if self.appends >= self.fail_at:
            raise self.error
        await self.inner.append(run_id, events, lease=lease)

    async def read(self, run_id: str, *, after_seq: int = -1) -> list[Event]:
        return await self.inner.read(run_id, after_seq=after_seq)

    async def runs(self, query: RunQuery = RunQuery()) -> list[RunInfo]:
        return await self.inner.runs(query)

    async def acquire(
        self, run_id: str, owner: str, *, ttl: float | None = None, fresh: bool = False
    ) -> Lease:
        return await self.inner.acquire(run_id, owner, ttl=ttl, fresh=fresh)

    async def release(self, lease: Lease) -> None:
        await self.inner.release(lease)

    async def delete(self, run_ids: Sequence[str]) -> int:
        return await self.inner.delete(run_ids)


@pytest.mark.parametrize("fail_at", [2, 3, 4, 5])
async def test_a_store_failing_mid_run_ends_it_failed_with_only_what_is_stored(
    fail_at: int,
) -> None:
    inner = MemoryStore()
    store = FailingStore(inner, fail_at)
    outcome = await Agent(model=ScriptedModel(SCRIPT), tools=[add], store=store).run("add")
    assert outcome.status == "failed"
    assert outcome.error is not None
    assert outcome.error.type == "StoreWriteError"
    assert "disk full" in outcome.error.message
    stored = await inner.read(outcome.run_id)
    assert f"stored up to seq {len(stored) - 1}" in outcome.error.message
    assert "tether resume" in outcome.error.message
    # the outcome's log is the stored one plus an ending that exists in memory only
    assert [e.hash for e in outcome.events[:-1]] == [e.hash for e in stored]
    assert isinstance(outcome.events[-1], RunFinished)
    assert not any(isinstance(e, RunFinished) for e in stored)
    assert (await inner.info(outcome.run_id)).status == "running"  # resumable, not ended


async def test_a_run_whose_last_commit_fails_is_never_reported_finished() -> None:
    inner = MemoryStore()
    script = [finish("done")]
    store = FailingStore(inner, fail_at=3)  # run_started, the turn, then the outcome
    outcome = await Agent(model=ScriptedModel(script), store=store).run("x")
    assert outcome.status == "failed"
    assert outcome.output is None
    assert all(e.kind != "run_finished" for e in await inner.read(outcome.run_id))


async def test_a_store_failing_before_anything_is_stored_raises_its_error() -> None:
    store = FailingStore(MemoryStore(), fail_at=1, error=StoreUnavailable("gone"))
    with pytest.raises(StoreUnavailable, match="gone"):
        await Agent(model=ScriptedModel(SCRIPT), tools=[add], store=store).run("add")


async def test_a_run_that_failed_on_its_store_resumes_as_after_a_crash(tmp_path: Path) -> None:
    inner = SqliteStore(tmp_path / "t.db")
    try:
        first = await Agent(
            model=ScriptedModel(SCRIPT), tools=[add], store=FailingStore(inner, fail_at=4)
        ).run("add")
        assert first.status == "failed"
        agent = Agent(model=ScriptedModel(SCRIPT), tools=[add], store=inner)
        done = await agent.resume(first.run_id)
        assert done.status == "finished"
        log = await inner.read(first.run_id)
        assert_protocol_valid(log)
        assert [e.kind for e in log].count("run_finished") == 1
    finally:
        await inner.close()


async def test_a_lease_taken_over_ends_this_process_part_and_says_who_goes_on() -> None:
    store = FailingStore(MemoryStore(), fail_at=3, error=StaleLease("r", 1, 2))
    outcome = await Agent(model=ScriptedModel(SCRIPT), tools=[add], store=store).run("add")
    assert outcome.status == "failed"
    assert outcome.error is not None
    assert outcome.error.type == "StaleLease"
    assert "took the run over continues it" in outcome.error.message


async def test_a_log_file_that_fails_is_dropped_with_a_warning_when_a_store_holds_the_run(
    tmp_path: Path,
) -> None:
    logs = tmp_path / "logs"
    store = MemoryStore()
    agent = Agent(model=ScriptedModel(SCRIPT), tools=[add], store=store, log_dir=logs)
    run = agent.stream("add")
    async for event in run:
        if event.seq == 0:  # from now on the log's disk is full
            sink = run._journal.sinks[1]  # pyright: ignore[reportPrivateUsage]
            assert isinstance(sink, JsonlSink)
            await sink.close()
            sink._fh = full_disk()  # pyright: ignore[reportPrivateUsage]
    outcome = run.outcome
    assert outcome.status == "finished"
    assert any("could not write the run log" in w for w in outcome.warnings)
    assert len(await store.read(outcome.run_id)) == len(outcome.events)


def test_a_log_dir_below_a_regular_file_is_a_config_error(tmp_path: Path) -> None:
    (tmp_path / "f").write_text("x")
    agent = Agent(model=ScriptedModel(SCRIPT), tools=[add], log_dir=tmp_path / "f" / "logs")
    with pytest.raises(ConfigError, match="is a file, not a directory"):
        agent.stream("add")


async def test_a_user_error_mid_run_ends_the_stored_run_failed_before_it_propagates() -> None:
    store = MemoryStore()

    def second_request_is_a_mistake(request: ModelRequest) -> ModelResponse:
        if any(m.kind == "assistant" for m in request.messages):
            raise ConfigError("the model was configured wrongly")
        return ModelResponse(tool_calls=(ToolCall(id="c", name="add", arguments={"a": 1, "b": 2}),))

    agent = Agent(model=FunctionModel(second_request_is_a_mistake), tools=[add], store=store)
    with pytest.raises(ConfigError, match="configured wrongly"):
        await agent.run("add")
    (row,) = await store.runs()
    assert row.status == "failed"  # not left "running" forever


async def test_a_real_model_that_may_not_be_called_stores_nothing() -> None:
    class Real(Model):
        @property
        def name(self) -> str:
            return "real:model"

        async def request(self, request: ModelRequest) -> ModelResponse:
            raise AssertionError("never called")

    store = MemoryStore()
    with pytest.raises(ModelRequestsBlocked):
        await Agent(model=Real(), store=store).run("x")
    assert await store.runs() == []


async def test_a_bug_before_the_run_exists_propagates_instead_of_leaving_no_outcome() -> None:
    class Broken(Model):
        real = False

        @property
        def name(self) -> str:
            raise ZeroDivisionError("a bug in the adapter")

        async def request(self, request: ModelRequest) -> ModelResponse:
            raise AssertionError("never called")

    store = MemoryStore()
    with pytest.raises(ZeroDivisionError, match="a bug in the adapter"):
        await Agent(model=Broken(), store=store).run("x")
    assert await store.runs() == []


async def test_a_resume_whose_first_commit_fails_ends_failed_and_says_how_to_resume() -> None:
    inner = MemoryStore()
    first = await Agent(
        model=ScriptedModel(SCRIPT), tools=[add], store=FailingStore(inner, fail_at=4)
    ).run("add")
    stored = len(await inner.read(first.run_id))
    again = await Agent(
        model=ScriptedModel(SCRIPT), tools=[add], store=FailingStore(inner, fail_at=1)
    ).resume(first.run_id)
    assert again.status == "failed"  # the run exists: it is ended here, not raised
    assert again.error is not None
    assert f"tether resume {first.run_id}" in again.error.message
    assert len(await inner.read(first.run_id)) == stored  # and nothing was added to it


@pytest.mark.parametrize("given", ["answer", "approval"])
async def test_an_answer_or_approval_the_store_refused_is_raised_to_be_given_again(
    given: str,
) -> None:
    inner = MemoryStore()
    if given == "answer":
        script = [call("ask_user", question="which?"), finish("done")]
        agent = Agent(model=ScriptedModel(script), tools=[add], can_ask_user=True, store=inner)
    else:
        policy = RulePolicy(Rules(rules=(require_approval(["add"]),)))
        agent = Agent(model=ScriptedModel(SCRIPT), tools=[add], policy=policy, store=inner)
    waiting = await agent.run("add")
    assert waiting.status.startswith("waiting_for")
    kwargs: dict[str, Any] = (
        {"answer": "that one"}
        if given == "answer"
        else {"approvals": [Approval.approve(p) for p in waiting.pending]}
    )
    failing = replace(agent, store=FailingStore(inner, fail_at=1))
    with pytest.raises(StoreWriteError):  # not stored: repeating the command is the way on
        await failing.resume(waiting.run_id, **kwargs)
    log = await inner.read(waiting.run_id)
    last = log[-1]
    assert isinstance(last, RunFinished)
    assert last.status == waiting.status  # it still waits, as it did
    done = await agent.resume(waiting.run_id, **kwargs)
    assert done.status in ("finished", "waiting_for_approval")
