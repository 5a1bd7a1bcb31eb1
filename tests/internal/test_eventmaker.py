"""The journal's fast path makes the very events, hashes and encodings the slow path does."""

from __future__ import annotations

import dataclasses

from tests.stores.helpers import agent_log, waiting_log
from tests.support import add
from tether import Agent
from tether._internal import sealed
from tether._internal.eventmaker import body, maker
from tether.codec import compute_hash, encode_event, hashed_fields
from tether.events import EVENT_TYPES, Event
from tether.stores import MemoryStore
from tether.testing import ScriptedModel, call, finish


def remade(event: Event) -> tuple[Event, tuple[object, ...]]:
    cls = type(event)
    own = {
        f.name: getattr(event, f.name)
        for f in dataclasses.fields(cls)
        if f.name not in ("kind", "run_id", "seq", "at", "prev_hash", "hash")
    }
    made, hashed, _ = maker(cls)(event.run_id, event.seq, event.at, event.prev_hash, **own)
    return made, hashed


async def test_the_maker_builds_what_the_constructor_does_for_every_kind_in_real_logs() -> None:
    logs = [await agent_log(calls=3), await waiting_log()]
    seen: set[str] = set()
    for log in logs:
        for event in log:
            made, hashed = remade(event)
            assert hashed == hashed_fields(type(event))(event)
            assert dataclasses.replace(made, hash=event.hash) == event
            assert compute_hash(event) == event.hash
            seen.add(event.kind)
    assert {"run_started", "model_responded", "tool_call_finished", "run_finished"} <= seen


def test_a_maker_exists_for_every_event_kind() -> None:
    for cls in EVENT_TYPES.values():
        assert callable(maker(cls))
        assert callable(body(cls))


async def test_the_bodies_handed_to_a_store_are_the_events_encodings() -> None:
    store = MemoryStore()
    script = [call("add", a=1, b=2), call("ask_user", question="more?")]
    outcome = await Agent(
        model=ScriptedModel(script), tools=[add], store=store, can_ask_user=True
    ).run("add")
    outcome = await Agent(
        model=ScriptedModel([*script, finish("3")]), tools=[add], store=store, can_ask_user=True
    ).resume(outcome.run_id, answer="no")
    for event in outcome.events[-3:]:
        given = sealed.body_of(event)
        assert given == encode_event(event)  # byte for byte: export, audit and import agree
