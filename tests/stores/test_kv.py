"""The ``KeyValueStore`` port, over every backend that implements it."""

from __future__ import annotations

import math
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from pathlib import Path
from typing import cast

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tether.jsontypes import JsonValue
from tether.stores import InvalidEntry, KeyValueStore, MemoryStore, SqliteStore
from tether.stores.kv import MAX_KEY_LENGTH, check_key


@pytest.fixture(params=["memory", "sqlite"])
async def kv(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[KeyValueStore]:
    opened = MemoryStore() if request.param == "memory" else SqliteStore(tmp_path / "kv.db")
    try:
        yield opened
    finally:
        await opened.close()


async def test_set_get_overwrite_delete(kv: KeyValueStore) -> None:
    before = datetime.now(UTC)
    assert await kv.kv_get("ns", "a") is None
    await kv.kv_set("ns", "a", {"x": [1, 2.5, None, True, "é"]})
    entry = await kv.kv_get("ns", "a")
    assert entry is not None
    assert entry.key == "a"
    assert entry.value == {"x": [1, 2.5, None, True, "é"]}
    assert before <= entry.updated_at <= datetime.now(UTC)
    await kv.kv_set("ns", "a", "second")
    entry = await kv.kv_get("ns", "a")
    assert entry is not None
    assert entry.value == "second"
    assert await kv.kv_delete("ns", "a") is True
    assert await kv.kv_delete("ns", "a") is False
    assert await kv.kv_get("ns", "a") is None


async def test_null_is_a_value_not_an_absence(kv: KeyValueStore) -> None:
    await kv.kv_set("ns", "nothing", None)
    entry = await kv.kv_get("ns", "nothing")
    assert entry is not None
    assert entry.value is None


async def test_namespaces_are_separate(kv: KeyValueStore) -> None:
    await kv.kv_set("one", "k", 1)
    await kv.kv_set("two", "k", 2)
    one, two = await kv.kv_get("one", "k"), await kv.kv_get("two", "k")
    assert one is not None
    assert one.value == 1
    assert two is not None
    assert two.value == 2
    assert await kv.kv_delete("one", "k")
    assert await kv.kv_get("two", "k") is not None
    assert await kv.kv_list("one") == []


async def test_the_stored_value_is_a_copy(kv: KeyValueStore) -> None:
    value: dict[str, JsonValue] = {"items": [1]}
    await kv.kv_set("ns", "k", value)
    cast(list[JsonValue], value["items"]).append(2)
    entry = await kv.kv_get("ns", "k")
    assert entry is not None
    assert entry.value == {"items": [1]}


async def test_list_filters_by_exact_prefix_in_order_and_caps(kv: KeyValueStore) -> None:
    keys = ["b", "a/2", "a/1", "a%", "a_x", "A/1", "ab", "a/\U0010ffff", "a0"]
    for key in keys:
        await kv.kv_set("ns", key, key)
    assert await kv.kv_list("ns") == sorted(keys)
    assert await kv.kv_list("ns", "a/") == ["a/1", "a/2", "a/\U0010ffff"]
    # % and _ are not wildcards, and case matters
    assert await kv.kv_list("ns", "a%") == ["a%"]
    assert await kv.kv_list("ns", "a_") == ["a_x"]
    assert await kv.kv_list("ns", "a", limit=2) == ["a%", "a/1"]
    assert await kv.kv_list("ns", "zzz") == []
    assert await kv.kv_list("ns", limit=0) == []


@pytest.mark.parametrize(
    "key",
    ["", "a\x00b", "line\nbreak", "tab\t", "\x7f", "\x85", "\ud800", "k" * (MAX_KEY_LENGTH + 1)],
)
async def test_bad_keys_and_namespaces_are_refused(kv: KeyValueStore, key: str) -> None:
    with pytest.raises(InvalidEntry):
        await kv.kv_set("ns", key, 1)
    with pytest.raises(InvalidEntry):
        await kv.kv_set(key, "k", 1)
    with pytest.raises(InvalidEntry):
        await kv.kv_get("ns", key)
    with pytest.raises(InvalidEntry):
        await kv.kv_delete("ns", key)
    assert await kv.kv_list("ns") == []


async def test_the_longest_key_is_accepted(kv: KeyValueStore) -> None:
    key = "k" * MAX_KEY_LENGTH
    await kv.kv_set("ns", key, 1)
    assert await kv.kv_list("ns") == [key]


@pytest.mark.parametrize(
    "value",
    [math.nan, math.inf, [1, -math.inf], 2**64, {1: "x"}, {"a": ("t",)}, b"x", "\ud800", object()],
    ids=repr,
)
async def test_values_that_are_not_plain_json_are_refused(kv: KeyValueStore, value: object) -> None:
    await kv.kv_set("ns", "k", "kept")
    with pytest.raises(InvalidEntry):
        await kv.kv_set("ns", "k", cast(JsonValue, value))
    entry = await kv.kv_get("ns", "k")
    assert entry is not None
    assert entry.value == "kept"


async def test_deep_nesting_is_refused(kv: KeyValueStore) -> None:
    value: JsonValue = 1
    for _ in range(100):
        value = [value]
    with pytest.raises(InvalidEntry, match="nested"):
        await kv.kv_set("ns", "k", value)


json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**63), max_value=2**64 - 1)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(st.characters(exclude_categories=("Cs",))),
    lambda children: (
        st.lists(children, max_size=4)
        | st.dictionaries(
            st.text(st.characters(exclude_categories=("Cs",)), max_size=5), children, max_size=4
        )
    ),
    max_leaves=12,
)


@settings(
    max_examples=60, suppress_health_check=[HealthCheck.function_scoped_fixture], deadline=None
)
@given(value=json_values)
async def test_json_values_round_trip(kv: KeyValueStore, value: JsonValue) -> None:
    await kv.kv_set("ns", "k", value)
    entry = await kv.kv_get("ns", "k")
    assert entry is not None
    assert entry.value == value


def test_check_key_names_the_problem() -> None:
    with pytest.raises(InvalidEntry, match=r"namespace.*control character '\\n'"):
        check_key("a\nb", "namespace")
    assert check_key("ok/ключ 1") == "ok/ключ 1"


async def test_sqlite_entries_survive_reopening_next_to_runs(tmp_path: Path) -> None:
    path = tmp_path / "t.db"
    first = SqliteStore(path)
    await first.kv_set("ns", "k", {"v": 1})
    await first.kv_set("ns", "gone", 1)
    assert await first.kv_delete("ns", "gone")
    await first.close()
    second = SqliteStore(path)
    try:
        entry = await second.kv_get("ns", "k")
        assert entry is not None
        assert entry.value == {"v": 1}
        assert await second.kv_list("ns") == ["k"]
        assert await second.runs() == []  # the runs tables are untouched
    finally:
        await second.close()


async def test_sqlite_entries_are_shared_between_stores_on_one_file(tmp_path: Path) -> None:
    a, b = SqliteStore(tmp_path / "t.db"), SqliteStore(tmp_path / "t.db")
    try:
        await a.kv_set("ns", "k", "from a")
        entry = await b.kv_get("ns", "k")
        assert entry is not None
        assert entry.value == "from a"
    finally:
        await a.close()
        await b.close()
