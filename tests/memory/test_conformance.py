"""The ``Memory`` contract, checked against every backend (the ``make`` fixture)."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from psycopg.sql import SQL, Identifier

from tests.memory.servers import PG_URL, Make, drop, postgres_answers
from tether.content import JsonObject
from tether.errors import InvalidEntry
from tether.memory import (
    InProcessMemory,
    MemoryQuery,
    MemoryRecord,
    SqliteMemory,
    record_id,
)
from tether.memory.base import replaced
from tether.memory.postgres import PostgresMemory
from tether.testing import HashEmbedder

NOW = datetime.now(UTC)


def rec(text: str, namespace: str = "ns", **fields: object) -> MemoryRecord:
    return MemoryRecord(namespace=namespace, text=text, **fields)  # pyright: ignore[reportArgumentType]


async def test_a_record_round_trips_with_every_field(make: Make) -> None:
    memory = await make()
    record = rec(
        "The user prefers metric units",
        id="pref-1",
        kind="procedural",
        metadata={"user": "ana", "n": 3, "ok": True, "tags": ["a", "b"]},
        embedding=(0.5, -0.25, 1.0),
        embedding_model="m",
        created=datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC),
        expires=NOW + timedelta(days=1),
        importance=0.9,
        run_id="run-1",
        event_seq=7,
    )
    assert await memory.upsert([record]) == ["pref-1"]
    (back,) = await memory.get("ns", ["pref-1"])
    assert back == record  # float32-exact values survive storage unchanged


async def test_a_nul_reads_back_alike_from_every_backend(make: Make) -> None:
    # PostgreSQL's text and JSONB cannot hold NUL: every backend keeps its escape instead
    memory = await make()
    record = rec(
        "a\0b",
        id="n\0",
        metadata={"k\0": ["v\0"]},
        event_seq=2**40,
        created=NOW.replace(microsecond=0),
    )
    assert record.text == "a\\u0000b"
    assert record.metadata == {"k\\u0000": ["v\\u0000"]}
    assert await memory.upsert([record]) == ["n\\u0000"]
    assert await memory.get("ns", ["n\\u0000"]) == [record]
    found = await memory.search(
        MemoryQuery(namespace="ns", text="a\0b", mode="keyword", metadata={"k\0": ["v\0"]})
    )
    assert [r.id for r in found.records] == [record.id]


async def test_the_same_text_is_one_record(make: Make) -> None:
    memory = await make()
    first = await memory.put(rec("Paris is the capital of France"))
    again = await memory.put(rec("  paris is the   CAPITAL of france "))
    assert first == again == record_id("ns", "Paris is the capital of France")
    assert len(await memory.get("ns", [first])) == 1
    other = await memory.put(rec("Paris is the capital of France", namespace="other"))
    assert other != first


async def test_an_upsert_replaces_the_record_and_keeps_when_it_was_created(make: Make) -> None:
    memory = await make()
    await memory.put(rec("v1", id="k", metadata={"v": 1}))
    (old,) = await memory.get("ns", ["k"])
    await memory.put(rec("v2", id="k", metadata={"v": 2}, importance=0.1))
    (new,) = await memory.get("ns", ["k"])
    assert (new.text, new.metadata, new.importance) == ("v2", {"v": 2}, 0.1)
    assert new.created == old.created
    found = await memory.search(MemoryQuery(namespace="ns", text="v1"))
    assert found.hits == ()  # the old text is gone from the keyword index too


async def test_get_keeps_the_order_asked_and_skips_what_is_missing(make: Make) -> None:
    memory = await make()
    await memory.upsert([rec("a", id="a"), rec("b", id="b"), rec("c", id="c")])
    got = await memory.get("ns", ["c", "zz", "a", "c"])
    assert [r.id for r in got] == ["c", "a"]
    assert await memory.get("other", ["a"]) == []


async def test_delete_counts_what_existed_and_namespaces_follow(make: Make) -> None:
    memory = await make()
    await memory.upsert([rec("a", id="a"), rec("b", id="b", namespace="zeta")])
    assert await memory.namespaces() == ["ns", "zeta"]
    assert await memory.delete("ns", ["a", "a", "nope"]) == 1
    assert await memory.namespaces() == ["zeta"]
    assert (await memory.search(MemoryQuery(namespace="ns", text="a"))).hits == ()


async def test_expired_records_are_neither_found_nor_kept(make: Make) -> None:
    memory = await make()
    await memory.upsert(
        [
            rec("old news about tea", id="old", expires=NOW - timedelta(seconds=1)),
            rec("fresh news about tea", id="new", expires=NOW + timedelta(days=1)),
            rec("lasting news about tea", id="forever"),
        ]
    )
    assert [r.id for r in await memory.get("ns", ["old", "new", "forever"])] == ["new", "forever"]
    found = await memory.search(MemoryQuery(namespace="ns", text="news tea", limit=10))
    assert {r.id for r in found.records} == {"new", "forever"}
    assert await memory.forget() == 1
    assert await memory.forget(now=NOW + timedelta(days=2)) == 1
    assert [r.id for r in await memory.get("ns", ["old", "new", "forever"])] == ["forever"]


async def test_with_ttl_sets_the_expiry() -> None:
    record = rec("x").with_ttl(timedelta(hours=1), now=NOW)
    assert record.expires == NOW + timedelta(hours=1)
    assert record.expired(NOW + timedelta(hours=2))
    assert not record.expired(NOW)


async def test_a_capped_namespace_drops_the_least_important_then_the_oldest(make: Make) -> None:
    memory = await make(caps={"ns": 2})
    t = datetime(2026, 1, 1, tzinfo=UTC)
    await memory.upsert(
        [
            rec("keep, important", id="vip", importance=0.9, created=t),
            rec("older", id="older", importance=0.5, created=t + timedelta(seconds=1)),
            rec("newer", id="newer", importance=0.5, created=t + timedelta(seconds=2)),
            rec("elsewhere", id="free", namespace="uncapped", importance=0.0),
        ]
    )
    assert [r.id for r in await memory.get("ns", ["vip", "older", "newer"])] == ["vip", "newer"]
    assert await memory.get("uncapped", ["free"]) != []
    await memory.put(rec("low", id="low", importance=0.1))
    assert [r.id for r in await memory.get("ns", ["vip", "newer", "low"])] == ["vip", "newer"]


async def test_expired_records_do_not_count_against_a_cap(make: Make) -> None:
    memory = await make(caps={"ns": 2})
    gone = NOW - timedelta(seconds=1)
    await memory.upsert(
        [
            rec("old but important", id="old1", importance=0.9, expires=gone),
            rec("also old and important", id="old2", importance=0.9, expires=gone),
            rec("fresh", id="fresh", importance=0.1),
        ]
    )
    assert [r.id for r in await memory.get("ns", ["fresh"])] == ["fresh"]


async def test_a_word_common_in_other_namespaces_still_finds_this_ones(make: Make) -> None:
    memory = await make()
    await memory.upsert([rec(f"common filler {i}", namespace="crowd") for i in range(3200)])
    await memory.upsert(
        [rec("a common thread", id="mine1"), rec("common ground", id="mine2", kind="episodic")]
    )
    found = await memory.search(MemoryQuery(namespace="ns", text="common", limit=5))
    assert {r.id for r in found.records} == {"mine1", "mine2"}
    episodic = MemoryQuery(namespace="ns", text="common", kinds=("episodic",))
    assert [r.id for r in (await memory.search(episodic)).records] == ["mine2"]


async def test_keyword_search_ranks_by_the_query_words_within_a_namespace(make: Make) -> None:
    memory = await make()
    await memory.upsert(
        [
            rec("The invoice for ACME is due on Friday", id="invoice"),
            rec("Lunch with the ACME team", id="lunch"),
            rec("The weather is nice", id="weather"),
            rec("The invoice for ACME is overdue", id="other-ns", namespace="elsewhere"),
        ]
    )
    found = await memory.search(MemoryQuery(namespace="ns", text="ACME invoice", limit=5))
    assert [r.id for r in found.records] == ["invoice", "lunch"]
    assert found.hits[0].keyword_rank == 1
    assert found.hits[0].vector_rank is None
    assert found.hits[0].score > found.hits[1].score
    assert (await memory.search(MemoryQuery(namespace="ns", text="zebra"))).hits == ()
    assert (await memory.search(MemoryQuery(namespace="ns", text="  ?! "))).hits == ()


async def test_without_an_embedder_search_falls_back_to_keywords_and_says_so(make: Make) -> None:
    memory = await make()
    await memory.put(rec("tea is a drink", id="tea"))
    found = await memory.search(MemoryQuery(namespace="ns", text="tea"))
    assert found.mode == "keyword"
    assert found.warning is not None
    assert "no embedder" in found.warning
    assert [r.id for r in found.records] == ["tea"]
    plain = await memory.search(MemoryQuery(namespace="ns", text="tea", mode="keyword"))
    assert (plain.mode, plain.warning) == ("keyword", None)


async def test_query_words_with_quotes_and_operators_are_only_words(make: Make) -> None:
    memory = await make()
    await memory.put(rec('say "NOTE" AND OR near(x) * zebra', id="odd"))
    cases = {'"NOTE"': ["odd"], "near(x)": ["odd"], "zebra*": ["odd"], "*": [], 'a"b': []}
    for text, expected in cases.items():  # no syntax error from the index: only words
        found = await memory.search(MemoryQuery(namespace="ns", text=text, mode="keyword"))
        assert [r.id for r in found.records] == expected, text
    stop_words = await memory.search(MemoryQuery(namespace="ns", text="AND OR", mode="keyword"))
    assert {r.id for r in stop_words.records} <= {"odd"}  # PostgreSQL's english drops them


async def test_filters_narrow_every_search_mode(make: Make) -> None:
    memory = await make(embedder=HashEmbedder())
    t = datetime(2026, 3, 1, tzinfo=UTC)
    await memory.upsert(
        [
            rec("deploy notes alpha", id="a", kind="episodic", metadata={"env": "prod"}, created=t),
            rec(
                "deploy notes beta",
                id="b",
                kind="semantic",
                metadata={"env": "dev", "ok": True},
                created=t + timedelta(days=1),
            ),
            rec(
                "deploy notes gamma",
                id="c",
                kind="episodic",
                metadata={"env": "dev", "ok": False, "deep": {"x": 1}},
                created=t + timedelta(days=2),
            ),
        ]
    )

    async def ids(**filters: object) -> dict[str, set[str]]:
        out: dict[str, set[str]] = {}
        for mode in ("keyword", "vector", "hybrid"):
            query = MemoryQuery(namespace="ns", text="deploy notes", mode=mode, limit=10, **filters)  # pyright: ignore[reportArgumentType]
            out[mode] = {r.id for r in (await memory.search(query)).records}
        return out

    def same(expected: set[str]) -> dict[str, set[str]]:
        return {"keyword": expected, "vector": expected, "hybrid": expected}

    assert await ids() == same({"a", "b", "c"})
    assert await ids(kinds=("episodic",)) == same({"a", "c"})
    assert await ids(metadata={"env": "dev"}) == same({"b", "c"})
    assert await ids(metadata={"ok": True}) == same({"b"})
    assert await ids(metadata={"ok": False}) == same({"c"})
    assert await ids(metadata={"deep": {"x": 1}}) == same({"c"})
    assert await ids(metadata={"missing": None}) == same(set())
    assert await ids(after=t + timedelta(days=1)) == same({"b", "c"})
    assert await ids(before=t + timedelta(days=1)) == same({"a"})
    assert await ids(kinds=("semantic",), metadata={"env": "prod"}) == same(set())


async def test_a_filter_on_a_key_with_a_quote_finds_what_ranks_last(make: Make) -> None:
    # SQLite: no JSON path names 'say "hi"', so the filter was applied to the best-ranked
    # candidates only, and a match ranked below them was not found
    memory = await make()
    odd: JsonObject = {'say "hi"': "yes", "back\\slash": ["a", 1]}
    filler = " ".join(f"word{i}" for i in range(200))
    await memory.upsert(
        [rec(f"note {i}", id=f"n{i}") for i in range(80)]
        + [rec(f"note {filler}", id="wanted", metadata=odd)]
    )
    each: list[JsonObject] = [odd, {'say "hi"': "yes"}, {"back\\slash": ["a", 1]}]
    for metadata in each:
        query = MemoryQuery(namespace="ns", text="note", mode="keyword", limit=1, metadata=metadata)
        assert [r.id for r in (await memory.search(query)).records] == ["wanted"], metadata
    query = MemoryQuery(namespace="ns", text="note", mode="keyword", metadata={'say "hi"': ["yes"]})
    assert (await memory.search(query)).records == ()


async def test_vector_search_finds_what_keywords_cannot(make: Make) -> None:
    embedder = HashEmbedder(synonyms={"automobile": "car", "vehicle": "car"})
    memory = await make(embedder=embedder)
    await memory.upsert(
        [
            rec("my car is blue", id="car"),
            rec("an automobile is parked outside", id="auto"),
            rec("bananas are yellow", id="banana"),
        ]
    )
    keyword = await memory.search(MemoryQuery(namespace="ns", text="vehicle", mode="keyword"))
    assert keyword.hits == ()
    vector = await memory.search(MemoryQuery(namespace="ns", text="vehicle", mode="vector"))
    assert vector.mode == "vector"
    assert vector.warning is None
    assert {r.id for r in vector.records} == {"car", "auto"}
    assert all(h.vector_rank is not None and h.keyword_rank is None for h in vector.hits)
    hybrid = await memory.search(MemoryQuery(namespace="ns", text="parked vehicle"))
    assert hybrid.mode == "hybrid"
    assert hybrid.records[0].id == "auto"  # found both ways: ranked above one-way matches
    assert (hybrid.hits[0].keyword_rank, hybrid.hits[0].vector_rank) == (1, 1)
    strict = MemoryQuery(namespace="ns", text="vehicle", mode="vector", min_similarity=0.99)
    assert (await memory.search(strict)).hits == ()


async def test_the_embedder_fills_missing_vectors_and_other_models_are_not_compared(
    make: Make,
) -> None:
    embedder = HashEmbedder(16)
    memory = await make(embedder=embedder)
    await memory.upsert(
        [
            rec("red apples", id="mine"),
            rec("red apples too", id="theirs", embedding=(1.0,) * 16, embedding_model="other"),
            rec("red apples three", id="short", embedding=(1.0, 0.0), embedding_model="hash-16"),
        ]
    )
    (mine,) = await memory.get("ns", ["mine"])
    assert mine.embedding_model == "hash-16"
    assert mine.embedding is not None
    assert len(mine.embedding) == 16
    found = await memory.search(MemoryQuery(namespace="ns", text="red apples", mode="vector"))
    by_vector = [h.record.id for h in found.hits if h.vector_rank is not None]
    assert by_vector == ["mine"]  # the others only by keywords, and the search says why
    assert {r.id for r in found.records} == {"mine", "theirs", "short"}
    assert found.mode == "hybrid"
    assert found.warning is not None
    assert "hash-16 (2 dimensions); other (16 dimensions), which" in found.warning


async def test_records_of_another_embedder_are_found_by_keywords_with_a_warning(
    make: Make,
) -> None:
    memory = await make(embedder=HashEmbedder(8))
    await memory.upsert([rec("the pump leaks oil", id="pump"), rec("tea is hot", id="tea")])
    memory.embedder = HashEmbedder(16)  # opened again, with another embedder
    await memory.put(rec("valve sticks", id="valve"))
    vector = await memory.search(MemoryQuery(namespace="ns", text="pump", mode="vector"))
    assert vector.mode == "hybrid"  # not an empty answer: keywords find the old records
    assert [(h.record.id, h.keyword_rank, h.vector_rank) for h in vector.hits] == [
        ("pump", 1, None)
    ]
    assert vector.warning == (
        "memory namespace 'ns' holds records embedded by hash-8 (8 dimensions), which this "
        "memory's embedder hash-16 (16 dimensions) cannot compare with its own vectors: those "
        "records were matched by keywords only (the vector search was made hybrid). Store them "
        "again without their embedding to embed them with hash-16"
    )
    hybrid = await memory.search(MemoryQuery(namespace="ns", text="valve"))
    assert hybrid.mode == "hybrid"
    assert hybrid.warning is not None
    assert hybrid.warning.count("hash-8") == 1
    assert "made hybrid" not in hybrid.warning
    keyword = await memory.search(MemoryQuery(namespace="ns", text="pump", mode="keyword"))
    assert keyword.warning is None
    old = await memory.get("ns", ["pump", "tea"])
    await memory.upsert([replaced(r, embedding=None, embedding_model=None) for r in old])
    again = await memory.search(MemoryQuery(namespace="ns", text="pump", mode="vector"))
    assert (again.mode, again.warning) == ("vector", None)
    assert [(h.record.id, h.vector_rank) for h in again.hits][:1] == [("pump", 1)]


async def test_records_stored_without_an_embedder_are_named_when_one_searches(
    make: Make,
) -> None:
    memory = await make()
    await memory.put(rec("the pump leaks oil", id="pump"))
    memory.embedder = HashEmbedder(16)
    found = await memory.search(MemoryQuery(namespace="ns", text="pump", mode="vector"))
    assert [r.id for r in found.records] == ["pump"]
    assert found.warning is not None
    assert "holds records with no vector, which this memory's embedder hash-16" in found.warning


async def test_search_limits_and_orders_deterministically(make: Make) -> None:
    memory = await make(embedder=HashEmbedder())
    await memory.upsert([rec(f"note number {i} about pumps", id=f"n{i:02}") for i in range(30)])
    found = await memory.search(MemoryQuery(namespace="ns", text="pumps", limit=7))
    assert len(found.hits) == 7
    assert found == await memory.search(MemoryQuery(namespace="ns", text="pumps", limit=7))
    scores = [h.score for h in found.hits]
    assert scores == sorted(scores, reverse=True)


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"namespace": "has space"}, "namespace"),
        ({"namespace": ""}, "namespace"),
        ({"text": "   "}, "no text"),
        ({"kind": "gossip"}, "kind"),
        ({"importance": 1.5}, "importance"),
        ({"embedding": ()}, "embedding"),
        ({"embedding": (float("nan"),)}, "embedding"),
        ({"created": datetime(2026, 1, 1)}, "timezone"),
        ({"metadata": {"tags": {1, 2}}}, "JSON"),
        ({"metadata": {"x": float("inf")}}, "JSON"),
        ({"event_seq": -1}, "event_seq"),
        ({"event_seq": 2**63}, "event_seq"),
        ({"event_seq": "7"}, "event_seq"),
    ],
)
def test_a_bad_record_is_refused_with_what_to_fix(fields: dict[str, object], message: str) -> None:
    values: dict[str, object] = {"namespace": "ns", "text": "t", **fields}
    with pytest.raises(InvalidEntry, match=message):
        MemoryRecord(**values)  # pyright: ignore[reportArgumentType]


def test_a_bad_query_or_cap_is_refused() -> None:
    with pytest.raises(InvalidEntry, match="limit"):
        MemoryQuery(namespace="ns", text="x", limit=0)
    with pytest.raises(InvalidEntry, match="mode"):
        MemoryQuery(namespace="ns", text="x", mode="fuzzy")  # pyright: ignore[reportArgumentType]
    with pytest.raises(InvalidEntry, match="cap"):
        InProcessMemory(caps={"ns": 0})


_texts = st.lists(
    st.tuples(
        st.sampled_from(["ns", "other"]),
        st.text(alphabet="abc de", min_size=1, max_size=12).filter(str.strip),
        st.sampled_from(["semantic", "episodic"]),
        st.booleans(),
    ),
    max_size=12,
)


@given(records=_texts, query=st.text(alphabet="abc de", max_size=8))
@settings(
    max_examples=40,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
async def test_search_returns_only_admitted_records_once_each(
    make: Make, records: list[tuple[str, str, str, bool]], query: str
) -> None:
    memory = await make(embedder=HashEmbedder(8))
    stored = [
        rec(text, namespace=ns, kind=kind, expires=NOW - timedelta(1) if gone else None)  # pyright: ignore[reportArgumentType]
        for ns, text, kind, gone in records
    ]
    await memory.upsert(stored)
    for mode in ("keyword", "vector", "hybrid"):
        q = MemoryQuery(namespace="ns", text=query, kinds=("episodic",), mode=mode, limit=5)  # pyright: ignore[reportArgumentType]
        found = (await memory.search(q)).records
        ids = [r.id for r in found]
        assert len(ids) == len(set(ids)) <= 5
        assert all(q.admits(r, datetime.now(UTC)) for r in found)
    await memory.delete("ns", [r.id for r in stored])
    await memory.delete("other", [r.id for r in stored])


async def test_a_sqlite_memory_persists_and_sees_other_connections_writes(tmp_path: Path) -> None:
    path = tmp_path / "shared.db"
    embedder = HashEmbedder()
    one = SqliteMemory(path, embedder=embedder)
    two = SqliteMemory(path, embedder=embedder)
    try:
        await one.put(rec("the blue whale is large", id="whale"))
        query = MemoryQuery(namespace="ns", text="whale", mode="vector")
        assert [r.id for r in (await two.search(query)).records] == ["whale"]
        await one.put(rec("a whale song", id="song"))
        assert {r.id for r in (await two.search(query)).records} == {"whale", "song"}
        await one.delete("ns", ["whale"])
        assert [r.id for r in (await two.search(query)).records] == ["song"]
    finally:
        await one.close()
        await two.close()
    again = SqliteMemory(path, embedder=embedder)
    try:
        assert [r.id for r in await again.get("ns", ["song"])] == ["song"]
    finally:
        await again.close()


async def test_a_sqlite_memory_shares_the_run_stores_file(tmp_path: Path) -> None:
    from tether import Agent
    from tether.stores import SqliteStore
    from tether.testing import ScriptedModel, finish

    path = tmp_path / "tether.db"
    memory = SqliteMemory(path)
    await memory.put(rec("remembered next to the runs", id="r"))
    store = SqliteStore(path)
    try:
        agent = Agent(name="a", model=ScriptedModel([finish("ok")]), store=store)
        outcome = await agent.run("go")
        assert outcome.status == "finished"
        assert len(await store.read(outcome.run_id)) > 2
        assert [r.id for r in await memory.get("ns", ["r"])] == ["r"]
    finally:
        await store.close()
        await memory.close()


async def test_a_closed_sqlite_memory_says_so(tmp_path: Path) -> None:
    from tether.errors import StoreError

    memory = SqliteMemory(tmp_path / "m.db")
    await memory.close()
    with pytest.raises(StoreError, match="closed"):
        await memory.get("ns", ["x"])


async def test_a_file_that_is_not_a_database_is_reported_not_overwritten(tmp_path: Path) -> None:
    from tether.errors import StoreCorrupt

    path = tmp_path / "notes.txt"
    path.write_bytes(b"these are my notes, not a database" * 100)
    memory = SqliteMemory(path)
    try:
        with pytest.raises(StoreCorrupt, match="not a SQLite file"):
            await memory.put(rec("x"))
    finally:
        await memory.close()
    assert path.read_bytes().startswith(b"these are my notes")


async def test_two_postgres_workers_see_each_others_writes() -> None:
    if (why := await postgres_answers()) is not None:
        pytest.skip(why)
    import psycopg

    table = f"tether_mem_{uuid.uuid4().hex[:12]}"
    embedder = HashEmbedder()
    one = PostgresMemory(PG_URL, table=table, embedder=embedder)
    two = PostgresMemory(PG_URL, table=table, embedder=embedder)
    try:
        await one.put(rec("the blue whale is large", id="whale"))
        query = MemoryQuery(namespace="ns", text="whale", mode="vector")
        assert [r.id for r in (await two.search(query)).records] == ["whale"]
        await one.put(rec("a whale song", id="song"))
        assert {r.id for r in (await two.search(query)).records} == {"whale", "song"}
        await one.delete("ns", ["whale"])
        assert [r.id for r in (await two.search(query)).records] == ["song"]
    finally:
        await one.close()
        await two.close()
        async with await psycopg.AsyncConnection.connect(PG_URL, autocommit=True) as conn:
            await conn.execute(drop(table))


async def test_a_postgres_table_of_an_older_tether_gets_a_wide_event_seq() -> None:
    if (why := await postgres_answers()) is not None:
        pytest.skip(why)
    import psycopg

    table = f"tether_mem_{uuid.uuid4().hex[:12]}"
    old = PostgresMemory(PG_URL, table=table)
    try:
        await old.put(rec("made before", id="old", event_seq=3))
        await old.close()
        async with await psycopg.AsyncConnection.connect(PG_URL, autocommit=True) as conn:
            await conn.execute(
                SQL("ALTER TABLE {t} ALTER COLUMN event_seq TYPE INTEGER").format(
                    t=Identifier(table)
                )
            )
        old = PostgresMemory(PG_URL, table=table)
        await old.put(rec("made after", id="new", event_seq=2**40))
        assert [r.event_seq for r in await old.get("ns", ["old", "new"])] == [3, 2**40]
    finally:
        await old.close()
        async with await psycopg.AsyncConnection.connect(PG_URL, autocommit=True) as conn:
            await conn.execute(drop(table))


async def test_an_unreachable_postgres_is_a_clear_error() -> None:
    from tether.errors import StoreUnavailable

    memory = PostgresMemory("postgresql://postgres@127.0.0.1:1/none", connect_timeout=2)
    with pytest.raises(StoreUnavailable, match="cannot connect"):
        await memory.get("ns", ["x"])
    await memory.close()
