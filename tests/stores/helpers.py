"""Event logs for the store conformance suite: real agent runs and hand-built chains."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta

from tether import Agent, Event, Usage, tool
from tether.auditkey import AuditKey
from tether.codec import compute_hash, seal
from tether.events import GENESIS_HASH, RunFinished, ToolCallFinished, UserReplied
from tether.messages import ToolCall
from tether.stores import RunStore
from tether.testing import FakeClock, ScriptedModel, call, finish

T0 = datetime(2026, 1, 1, tzinfo=UTC)
"""The start of every fake clock here unless a test picks another."""

TURN_USAGE = Usage(input_tokens=10, output_tokens=5, cost=0.25)
"""What each scripted model turn reports (exact in binary, so sums compare exactly)."""


@tool(read_only=True, idempotent=True, open_world=False, blocking=False)
def add(a: int, b: int) -> int:
    """Add two integers.

    Args:
        a: The first number.
        b: The second number.
    """
    return a + b


async def agent_log(
    *,
    run_id: str | None = None,
    agent: str = "agent",
    goal: str = "add some numbers",
    calls: int = 2,
    start: datetime = T0,
    tags: Sequence[str] = (),
    parent_run_id: str | None = None,
    usage: Usage = TURN_USAGE,
) -> list[Event]:
    """A real run's log: ``calls`` model turns that call ``add``, then ``finish_task``."""
    script: list[ToolCall] = [call("add", a=i, b=i + 1) for i in range(calls)]
    script.append(finish("done"))
    outcome = await Agent(name=agent, tools=[add]).run(
        goal,
        run_id=run_id,
        model=ScriptedModel(script, usage=usage),
        clock=FakeClock(start),
        tags=tags,
        parent_run_id=parent_run_id,
    )
    assert outcome.status == "finished"
    return list(outcome.events)


async def waiting_log(*, run_id: str | None = None, start: datetime = T0) -> list[Event]:
    """A real run's log that ends ``waiting_for_user`` (the model asked a question)."""
    outcome = await Agent(can_ask_user=True).run(
        "ask me something",
        run_id=run_id,
        model=ScriptedModel([call("ask_user", question="which one?")], usage=TURN_USAGE),
        clock=FakeClock(start),
    )
    assert outcome.status == "waiting_for_user"
    return list(outcome.events)


def reply(log: Sequence[Event], text: str = "the first") -> UserReplied:
    """The user's answer, chained after ``log``."""
    last = log[-1]
    return seal(
        UserReplied(
            run_id=last.run_id,
            seq=last.seq + 1,
            at=last.at + timedelta(seconds=1),
            prev_hash=last.hash,
            text=text,
        )
    )


def finished(log: Sequence[Event]) -> RunFinished:
    """A ``run_finished`` (finished) chained after ``log``."""
    last = log[-1]
    return seal(
        RunFinished(
            run_id=last.run_id,
            seq=last.seq + 1,
            at=last.at + timedelta(seconds=1),
            prev_hash=last.hash,
            status="finished",
            answer="done",
        )
    )


def tool_results(run_id: str, count: int, *, start: datetime = T0) -> list[Event]:
    """A hand-built chain of ``count`` tool results (no ``run_started``: no index row)."""
    events: list[Event] = []
    prev = GENESIS_HASH
    for seq in range(count):
        event = seal(
            ToolCallFinished(
                run_id=run_id,
                seq=seq,
                at=start + timedelta(milliseconds=seq),
                prev_hash=prev,
                call_id=f"call_{seq}",
                tool="add",
                content=(),
                structured=seq,
            )
        )
        events.append(event)
        prev = event.hash
    return events


def rechain(events: Sequence[Event], *, prev_hash: str | None = None) -> list[Event]:
    """Re-link and re-seal ``events`` (after an edit), starting from ``prev_hash``.

    ``None`` keeps the first event's own ``prev_hash``.
    """
    out: list[Event] = []
    prev = events[0].prev_hash if prev_hash is None else prev_hash
    for event in events:
        fixed = resealed(dataclasses.replace(event, prev_hash=prev))
        out.append(fixed)
        prev = fixed.hash
    return out


def resealed(event: Event) -> Event:
    """``event`` with its hash recomputed (a valid seal of whatever it now says)."""
    blank = dataclasses.replace(event, hash="")
    return dataclasses.replace(blank, hash=compute_hash(blank))


def relabel(events: Sequence[Event], run_id: str) -> list[Event]:
    """The same log as run ``run_id`` (every event moved, the chain re-sealed)."""
    return rechain([dataclasses.replace(e, run_id=run_id) for e in events], prev_hash=GENESIS_HASH)


async def stored_long_run(
    store: RunStore, length: int, *, key: AuditKey | None = None, tags: Sequence[str] = ()
) -> list[Event]:
    """A finished run with ``length`` user replies in it, written straight to ``store``.

    With ``key``: each event's MAC under it beside it, as a keyed writer stores them.
    """
    start = await agent_log(tags=tags)
    log = start[:-1]
    for i in range(length):
        log.append(reply(log, f"reply {i} " + "x" * (i % 50)))
    log.append(finished(log))
    if key is None:
        await store.append(log[0].run_id, log)
    else:
        await store.append_copied(log[0].run_id, log, [key.mac(e.hash) for e in log])
    return log
