"""Memory keeps agents apart, keeps secrets out of every field, and takes odd input plainly.

Found by probing: a reflexion lesson's metadata kept a secret the run had learned (and a
later run recalled it into its model's view); agents named 人事 and 销售 shared the namespace
``agent:__``; a record whose metadata was a list broke every filtered search of its
namespace; a query with a lone surrogate failed in the embedder; one oversized top hit kept
every smaller one that fitted out of the recall.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from tests.memory.servers import Make
from tether import Agent, Remember, tool
from tether.content import JsonObject
from tether.errors import InvalidEntry, ModelRetry
from tether.events import MemoryRecalled
from tether.memory import InProcessMemory, MemoryQuery, MemoryRecord, SqliteMemory
from tether.run.sessions import namespace_of
from tether.testing import HashEmbedder, ScriptedModel, call, finish

SECRET = "Zq8vLm3pTx"
NOW = datetime.now(UTC)


@tool(open_world=False)
def login(user: str) -> str:
    """Log a user in.

    Args:
        user: Who.
    """
    raise ModelRetry(f"login failed for {user}: credential {SECRET} was rejected")


@tool(read_only=True, open_world=False)
def vault(user: str) -> str:
    """Read a user's vault entry.

    Args:
        user: Who.
    """
    return f"password: {SECRET}"


async def test_a_lesson_keeps_no_secret_the_run_learned_in_its_metadata_either() -> None:
    memory = InProcessMemory()
    script = [call("login", user="bob"), call("vault", user="bob"), finish("done")]
    agent = Agent(
        name="sec",
        model=ScriptedModel(script),
        tools=[login, vault],
        memory=Remember(memory=memory, reflexion=True),
    )
    outcome = await agent.run("log bob in")
    assert outcome.status == "finished", outcome.error
    found = await memory.search(MemoryQuery(namespace="agent:sec", text="login", limit=20))
    assert found.hits, "no lesson was kept"
    for hit in found.hits:
        assert SECRET not in repr(hit.record), hit.record


def test_agents_whose_names_clean_alike_get_namespaces_of_their_own() -> None:
    remember = Remember(memory=InProcessMemory())
    assert remember.namespace_for("helpdesk") == "agent:helpdesk"  # as it always was
    assert remember.namespace_for("Support Bot") == "agent:Support_Bot"  # its records stay
    names = ["人事", "销售", "support bot", "a" * 240 + "x", "a" * 240 + "y"]
    spaces = [remember.namespace_for(n) for n in names]
    assert len(set(spaces)) == len(spaces), spaces
    for space in spaces:
        MemoryRecord(namespace=space, text="a valid namespace")  # the record takes it
    long_one, long_two = (namespace_of("a" * 300 + end) for end in "xy")
    assert long_one != long_two
    assert len(long_one) <= 256
    assert namespace_of("helpdesk") == "tether:sessions:helpdesk"


@pytest.mark.parametrize(
    ("fields", "says"),
    [
        ({"metadata": [1, 2]}, "metadata must be a JSON object"),
        ({"importance": "0.5"}, "importance is a number between 0 and 1"),
    ],
)
def test_a_record_of_the_wrong_shape_is_refused(fields: dict[str, object], says: str) -> None:
    with pytest.raises(InvalidEntry, match=says):
        MemoryRecord(namespace="n", text="t", **fields)  # pyright: ignore[reportArgumentType]


def test_a_query_with_a_lone_surrogate_is_searchable() -> None:
    query = MemoryQuery(namespace="n", text="caf\udce9 menu")
    assert query.text == "caf\\udce9 menu"
    query.text.encode("utf-8")


async def test_an_oversized_top_hit_does_not_keep_smaller_ones_out_of_the_recall() -> None:
    memory = InProcessMemory()
    await memory.upsert(
        [
            MemoryRecord(namespace="agent:a", text="staging database host notes " + "x" * 900),
            MemoryRecord(namespace="agent:a", text="The staging database host is db7"),
        ]
    )
    agent = Agent(
        name="a",
        model=ScriptedModel([finish("db7")]),
        memory=Remember(memory=memory, recall_tokens=100),
    )
    outcome = await agent.run("staging database host")
    (recalled,) = [e for e in outcome.events if isinstance(e, MemoryRecalled)]
    assert recalled.texts == ("The staging database host is db7",)


async def test_a_small_namespace_finds_its_own_match_beside_a_large_one(tmp_path: Path) -> None:
    # the newest-first walk of a common word's matches gave up (20,000 of another
    # namespace's) before it reached the small namespace's only record
    memory = SqliteMemory(tmp_path / "m.db")
    try:
        await memory.put(MemoryRecord(namespace="small", text="alpha launch plan is in room 4"))
        for start in range(0, 25_000, 5_000):
            await memory.upsert(
                [
                    MemoryRecord(namespace="big", text=f"alpha item number {i}")
                    for i in range(start, start + 5_000)
                ]
            )
        found = await memory.search(MemoryQuery(namespace="small", text="alpha"))
        assert [h.record.text for h in found.hits] == ["alpha launch plan is in room 4"]
    finally:
        await memory.close()


async def test_a_record_stored_before_metadata_had_to_be_an_object_still_reads(
    tmp_path: Path,
) -> None:
    memory = SqliteMemory(tmp_path / "m.db")
    try:
        await memory.put(MemoryRecord(namespace="n", text="an old fact", id="old"))
    finally:
        await memory.close()
    import sqlite3

    with sqlite3.connect(tmp_path / "m.db") as db:  # as an earlier version could write it
        db.execute("UPDATE memory_records SET metadata = '[\"tag\"]'")
    memory = SqliteMemory(tmp_path / "m.db")
    try:
        found = await memory.search(MemoryQuery(namespace="n", text="fact"))
        assert [h.record.metadata for h in found.hits] == [{"value": ["tag"]}]
    finally:
        await memory.close()


async def test_a_list_filter_finds_its_match_among_many(tmp_path: Path) -> None:
    # a list value was left out of the SQL and checked on the top candidates only: missed
    memory = SqliteMemory(tmp_path / "m.db")
    try:
        await memory.upsert(
            [MemoryRecord(namespace="n", text=f"report draft {i}") for i in range(300)]
        )
        await memory.put(
            MemoryRecord(
                namespace="n", text="quarterly report draft", metadata={"tags": ["finance"]}
            )
        )
        await memory.put(
            MemoryRecord(namespace="n", text="café report draft", metadata={"tags": ["café", 1]})
        )
        accented = await memory.search(
            MemoryQuery(namespace="n", text="report draft", metadata={"tags": ["café", 1.0]})
        )
        assert [h.record.text for h in accented.hits] == ["café report draft"]
        for mode in ("keyword", "hybrid"):
            found = await memory.search(
                MemoryQuery(
                    namespace="n", text="report draft", metadata={"tags": ["finance"]}, mode=mode
                )
            )
            assert [h.record.text for h in found.hits] == ["quarterly report draft"], mode
        huge = await memory.search(
            MemoryQuery(namespace="n", text="report", metadata={"n": 2**70})  # OverflowError
        )
        assert huge.hits == ()
    finally:
        await memory.close()


async def test_without_numpy_search_falls_back_to_keywords_and_says_so(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # the whole search failed ("needs the optional dependency 'numpy'"), keywords and all
    import importlib.util

    from tether.memory import InProcessMemory, MemoryQuery, MemoryRecord
    from tether.testing import HashEmbedder

    memory = InProcessMemory(embedder=HashEmbedder())
    await memory.put(MemoryRecord(namespace="ns", text="the deploy runs on fridays"))
    real = importlib.util.find_spec

    def find_spec(name: str, package: str | None = None) -> object:
        return None if name == "numpy" else real(name, package)

    monkeypatch.setattr(importlib.util, "find_spec", find_spec)
    found = await memory.search(MemoryQuery(namespace="ns", text="deploy"))
    assert found.mode == "keyword"
    assert found.warning is not None
    assert "tether[memory]" in found.warning
    assert [r.text for r in found.records] == ["the deploy runs on fridays"]


def _nested(depth: int) -> JsonObject:
    value: JsonObject = {"leaf": 1}
    for _ in range(depth - 1):
        value = {"a": value}
    return value


async def test_a_vector_float32_cannot_hold_is_refused_before_it_is_stored(make: Make) -> None:
    # stored as float32 it was inf: every later search or get of the namespace that met
    # the record raised InvalidEntry, on each backend but the in-process one
    memory = await make()
    with pytest.raises(InvalidEntry, match="float32"):
        await memory.put(MemoryRecord(namespace="ns", text="huge vector", embedding=(1e39, 1.0)))
    await memory.put(MemoryRecord(namespace="ns", text="a plain vector", embedding=(3e38, 1.0)))
    found = await memory.search(MemoryQuery(namespace="ns", text="vector", mode="keyword"))
    assert [r.text for r in found.records] == ["a plain vector"]


async def test_a_vector_stored_as_inf_before_is_read_without_it(tmp_path: Path) -> None:
    import sqlite3
    from array import array

    memory = SqliteMemory(tmp_path / "m.db")
    try:
        await memory.put(MemoryRecord(namespace="n", text="an old fact", embedding=(1.0, 2.0)))
    finally:
        await memory.close()
    with sqlite3.connect(tmp_path / "m.db") as db:  # as an earlier version could write it
        db.execute("UPDATE memory_records SET embedding = ?", (array("f", [1e39, 1]).tobytes(),))
    memory = SqliteMemory(tmp_path / "m.db", embedder=HashEmbedder(2))
    try:
        found = await memory.search(MemoryQuery(namespace="n", text="fact"))
        assert [(r.text, r.embedding) for r in found.records] == [("an old fact", None)]
    finally:
        await memory.close()


async def test_a_nul_or_lone_surrogate_in_run_id_or_model_reads_back_alike(make: Make) -> None:
    # UnicodeEncodeError from SQLite and PostgreSQL; PostgreSQL also refused the NUL
    memory = await make()
    record = MemoryRecord(
        namespace="ns",
        text="from a run",
        id="r",
        run_id="run\0caf\udce9",
        embedding=(1.0, 0.5),
        embedding_model="model\0\udce9",
        created=NOW.replace(microsecond=0),
    )
    assert record.run_id == "run\\u0000caf\\udce9"
    assert record.embedding_model == "model\\u0000\\udce9"
    await memory.put(record)
    assert await memory.get("ns", ["r"]) == [record]


@pytest.mark.parametrize(
    ("fields", "says"),
    [
        ({"metadata": _nested(65)}, "nested deeper than 64"),
        ({"metadata": _nested(2000)}, "nested deeper than 64"),  # RecursionError
    ],
)
def test_metadata_nested_too_deeply_is_refused(fields: dict[str, object], says: str) -> None:
    MemoryRecord(namespace="n", text="t", metadata=_nested(64))
    with pytest.raises(InvalidEntry, match=says):
        MemoryRecord(namespace="n", text="t", **fields)  # pyright: ignore[reportArgumentType]
    with pytest.raises(InvalidEntry, match=says):
        MemoryQuery(namespace="n", text="t", **fields)  # pyright: ignore[reportArgumentType]


@pytest.mark.parametrize(
    ("fields", "says"),
    [
        ({"namespace": "agent:My Bot"}, "namespace"),  # found nothing, without a word
        ({"kinds": "episodic"}, "tuple of kinds"),  # a string: backends disagreed
        ({"kinds": ("fact",)}, "not one of"),
        ({"min_similarity": float("nan")}, "cosine"),  # no vector matched
        ({"limit": 2.5}, "limit"),  # TypeError
        ({"limit": True}, "limit"),
        ({"after": datetime(2026, 1, 1)}, "timezone"),  # TypeError in every backend
        ({"before": datetime(2026, 1, 1)}, "timezone"),
    ],
)
def test_a_query_that_could_only_fail_or_find_nothing_is_refused(
    fields: dict[str, object], says: str
) -> None:
    values: dict[str, object] = {"namespace": "ns", "text": "x", **fields}
    with pytest.raises(InvalidEntry, match=says):
        MemoryQuery(**values)  # pyright: ignore[reportArgumentType]


def test_a_cap_on_a_namespace_no_record_can_have_is_refused() -> None:
    # agent "My Bot" writes to agent:My_Bot: a cap on "agent:My Bot" never held
    with pytest.raises(InvalidEntry, match="agent:My Bot"):
        InProcessMemory(caps={"agent:My Bot": 100})
    assert InProcessMemory(caps={"agent:My_Bot": 100}).caps == {"agent:My_Bot": 100}


async def test_forget_at_a_naive_time_is_refused_and_forgets_nothing(make: Make) -> None:
    # in-process raised a bare TypeError; the others read it as local time
    memory = await make()
    await memory.put(MemoryRecord(namespace="ns", text="x", id="x", expires=NOW + timedelta(1)))
    with pytest.raises(InvalidEntry, match="timezone-aware"):
        await memory.forget(now=datetime(2999, 1, 1))
    assert [r.id for r in await memory.get("ns", ["x"])] == ["x"]
