"""Only event objects this process sealed skip the store's re-hash; copies never do."""

from __future__ import annotations

import dataclasses
from datetime import timedelta

import pytest

from tests.stores.helpers import T0, agent_log
from tether import Agent
from tether._internal import sealed
from tether.codec import decode_event, encode_event, seal
from tether.events import GENESIS_HASH, UserReplied
from tether.stores import MemoryStore, StoreConflict
from tether.testing import ScriptedModel, finish


async def test_events_of_a_run_into_a_store_are_trusted_and_their_copies_are_not() -> None:
    store = MemoryStore()
    outcome = await Agent(model=ScriptedModel([finish("x")]), store=store).run("go")
    log = list(outcome.events)
    assert all(sealed.trusted(e) for e in log)
    copy = dataclasses.replace(log[2])
    assert copy == log[2]
    assert not sealed.trusted(copy)
    assert not sealed.trusted(decode_event(encode_event(log[2])))


async def test_a_run_without_a_store_registers_nothing_and_a_store_checks_its_events() -> None:
    log = await agent_log()  # no store: nothing would use the registry
    assert not any(sealed.trusted(e) for e in log)
    store = MemoryStore()
    await store.append(log[0].run_id, log)  # hashed again on the way in, and accepted
    assert await store.read(log[0].run_id) == log


async def test_a_tampered_copy_of_a_trusted_event_is_refused() -> None:
    log = await agent_log()
    tampered = dataclasses.replace(log[3], at=log[3].at + timedelta(seconds=1))  # hash kept
    store = MemoryStore()
    await store.append(log[0].run_id, log[:3])
    with pytest.raises(StoreConflict, match="does not match its hash"):
        await store.append(log[0].run_id, [tampered])


def test_the_oldest_are_forgotten_and_never_confused_with_new_objects() -> None:
    first = seal(UserReplied(run_id="r", seq=0, at=T0, prev_hash=GENESIS_HASH, text="a"))
    assert sealed.trusted(first)
    for i in range(sealed._KEEP):  # pyright: ignore[reportPrivateUsage]
        seal(UserReplied(run_id="r", seq=i + 1, at=T0, prev_hash=GENESIS_HASH, text="b"))
    assert not sealed.trusted(first)  # forgotten: a store re-hashes it, which is always safe
