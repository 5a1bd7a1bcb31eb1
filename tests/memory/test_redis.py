"""What RedisMemory adds to the conformance suite: sharing, idle expiry, atomic caps, errors."""

from __future__ import annotations

import asyncio
import sys
import uuid
from collections.abc import AsyncIterator, Callable
from datetime import timedelta

import pytest

from tests.memory.servers import REDIS_URL, drop_redis, redis_answers
from tether.errors import StoreError, StoreUnavailable
from tether.memory import MemoryQuery, MemoryRecord, RedisMemory
from tether.testing import HashEmbedder

Open = Callable[..., RedisMemory]


@pytest.fixture
async def opened() -> AsyncIterator[Open]:
    if (why := await redis_answers()) is not None:
        pytest.skip(why)

    prefix = f"tether-test:{uuid.uuid4().hex[:12]}"
    made: list[RedisMemory] = []

    def open_(**options: object) -> RedisMemory:
        memory = RedisMemory(REDIS_URL, prefix=prefix, **options)  # pyright: ignore[reportArgumentType]
        made.append(memory)
        return memory

    yield open_
    for memory in made:
        await memory.close()
    await drop_redis(prefix)


def rec(text: str, namespace: str = "session:1", **fields: object) -> MemoryRecord:
    return MemoryRecord(namespace=namespace, text=text, **fields)  # pyright: ignore[reportArgumentType]


async def test_two_clients_see_each_others_writes_at_once(opened: Open) -> None:
    embedder = HashEmbedder()
    one, two = opened(embedder=embedder), opened(embedder=embedder)
    query = MemoryQuery(namespace="session:1", text="whale", mode="vector")
    await one.put(rec("the blue whale is large", id="whale"))
    assert [r.id for r in (await two.search(query)).records] == ["whale"]
    await one.put(rec("a whale song", id="song"))  # two's decoded copy is stale now
    assert {r.id for r in (await two.search(query)).records} == {"whale", "song"}
    await one.delete("session:1", ["whale"])
    assert [r.id for r in (await two.search(query)).records] == ["song"]


async def test_another_process_writes_and_this_one_finds_it(opened: Open) -> None:
    memory = opened()
    assert (await memory.search(MemoryQuery(namespace="session:1", text="kettle"))).hits == ()
    script = (
        "import asyncio\n"
        "from tether.memory import MemoryRecord, RedisMemory\n"
        "async def main():\n"
        f"    m = RedisMemory({REDIS_URL!r}, prefix={memory.prefix!r})\n"
        "    await m.put(MemoryRecord(namespace='session:1', text='the kettle is on', id='k'))\n"
        "    await m.close()\n"
        "asyncio.run(main())\n"
    )
    writer = await asyncio.create_subprocess_exec(sys.executable, "-c", script)
    assert await asyncio.wait_for(writer.wait(), 60) == 0
    found = await memory.search(MemoryQuery(namespace="session:1", text="kettle"))
    assert [r.id for r in found.records] == ["k"]


async def test_an_idle_namespace_expires_whole_and_a_write_keeps_it_alive(opened: Open) -> None:
    memory = opened(idle_ttl=timedelta(seconds=2))
    await memory.put(rec("short-lived note", id="a"))
    await memory.put(rec("kept note", id="b", namespace="session:2"))
    for _ in range(6):  # writes to session:2 keep it; session:1 is idle past its 2 s
        await asyncio.sleep(0.5)
        await memory.put(rec(f"touch {_}", namespace="session:2"))
    assert await memory.get("session:1", ["a"]) == []
    assert await memory.namespaces() == ["session:2"]
    assert [r.id for r in await memory.get("session:2", ["b"])] == ["b"]
    found = await memory.search(MemoryQuery(namespace="session:1", text="note"))
    assert found.hits == ()
    assert await memory.forget() == 0  # the expired name leaves the set; nothing else goes
    assert await memory.namespaces() == ["session:2"]


async def test_concurrent_writers_never_leave_a_capped_namespace_over_its_cap(
    opened: Open,
) -> None:
    writers = [opened(caps={"session:1": 10}) for _ in range(4)]

    async def write(i: int, memory: RedisMemory) -> None:
        for j in range(25):
            await memory.put(rec(f"note {i} {j}", importance=(j % 10) / 10))

    await asyncio.gather(*(write(i, m) for i, m in enumerate(writers)))
    reader = opened()
    found = await reader.search(MemoryQuery(namespace="session:1", text="note", limit=100))
    assert len(found.hits) == 10
    # 8 notes of importance 0.9 were written, then 0.8: the least important went first
    assert sorted(r.importance for r in found.records) == [0.8] * 2 + [0.9] * 8


async def test_an_expired_record_written_again_is_new(opened: Open) -> None:
    from datetime import UTC, datetime

    memory = opened()
    past = datetime(2026, 1, 1, tzinfo=UTC)
    await memory.put(rec("x", id="x", created=past, expires=datetime.now(UTC)))
    await memory.put(rec("x", id="x", created=None))
    (back,) = await memory.get("session:1", ["x"])
    assert back.created is not None
    assert back.created > past
    assert back.expires is None


async def test_an_unreachable_redis_is_a_clear_error_that_keeps_the_password() -> None:
    memory = RedisMemory("redis://ana:hunter2@127.0.0.1:1/0", connect_timeout=2)
    with pytest.raises(StoreUnavailable, match="cannot reach") as caught:
        await memory.get("ns", ["x"])
    assert "hunter2" not in str(caught.value)
    assert "ana:***@127.0.0.1:1" in str(caught.value)
    await memory.close()
    with pytest.raises(StoreError, match="closed") as closed:
        await memory.get("ns", ["x"])
    assert "hunter2" not in str(closed.value)


def test_a_bad_prefix_or_ttl_is_refused() -> None:
    from tether.errors import ConfigError

    with pytest.raises(ConfigError, match="prefix"):
        RedisMemory(prefix="a{b}")
    with pytest.raises(ConfigError, match="idle_ttl"):
        RedisMemory(idle_ttl=timedelta(0))


async def test_a_searcher_never_takes_lost_writes_for_its_cached_version(opened: Open) -> None:
    """After the server lost writes (a restart, FLUSHDB), new writes are never "the same"."""
    reader, writer = opened(), opened()
    await writer.put(rec("first note", id="one"))
    query = MemoryQuery(namespace="session:1", text="note")
    assert [r.id for r in (await reader.search(query)).records] == ["one"]
    await drop_redis(writer.prefix)  # the server lost everything, its write counter too
    await writer.put(rec("second note", id="two"))
    assert [r.id for r in (await reader.search(query)).records] == ["two"]
