"""``kv_tools``: get, set, delete and list JSON values, validated and capped."""

from __future__ import annotations

from pathlib import Path

import pytest

from tether.content import JsonObject, ToolResult
from tether.errors import ConfigError, ModelRetry
from tether.jsontypes import JsonValue
from tether.stores import KeyValueStore, MemoryStore, SqliteStore
from tether.tools import Tool, ToolContext
from tether.tools.builtin.kv import MAX_LIST, kv_tools

CTX = ToolContext(run_id="run", call_id="call", tool="kv")


async def call(t: Tool, arguments: JsonObject) -> JsonValue:
    result: ToolResult = await t.handler(CTX, t.validator(arguments))
    assert not result.is_error
    return result.structured


def by_name(
    store: KeyValueStore, *, namespace: str = "default", max_value_bytes: int = 100_000
) -> dict[str, Tool]:
    tools = kv_tools(store, namespace=namespace, max_value_bytes=max_value_bytes)
    return {t.name: t for t in tools}


async def test_the_four_tools_work_together() -> None:
    tools = by_name(MemoryStore())
    assert await call(tools["kv_get"], {"key": "lang"}) == {"key": "lang", "found": False}
    stored = await call(tools["kv_set"], {"key": "lang", "value": {"code": "fr"}})
    assert stored == {"key": "lang", "stored": True, "bytes": len(b'{"code":"fr"}')}
    got = await call(tools["kv_get"], {"key": "lang"})
    assert isinstance(got, dict)
    assert got["found"] is True
    assert got["value"] == {"code": "fr"}
    assert await call(tools["kv_list"], {}) == {"keys": ["lang"], "truncated": False}
    assert await call(tools["kv_delete"], {"key": "lang"}) == {"key": "lang", "deleted": True}
    assert await call(tools["kv_delete"], {"key": "lang"}) == {"key": "lang", "deleted": False}


def test_annotations_are_honest() -> None:
    tools = by_name(MemoryStore())
    assert [t.name for t in kv_tools(MemoryStore())] == ["kv_get", "kv_set", "kv_delete", "kv_list"]
    for name in ("kv_get", "kv_list"):
        hints = tools[name].annotations
        assert hints.is_read_only
        assert not hints.is_open_world
    for name in ("kv_set", "kv_delete"):
        hints = tools[name].annotations
        assert not hints.is_read_only
        assert hints.is_destructive
        assert hints.is_idempotent
        assert not hints.is_open_world


async def test_namespaces_isolate_agents(tmp_path: Path) -> None:
    store = SqliteStore(tmp_path / "t.db")
    try:
        alice, bob = by_name(store, namespace="alice"), by_name(store, namespace="bob")
        await call(alice["kv_set"], {"key": "secret", "value": 42})
        assert await call(bob["kv_get"], {"key": "secret"}) == {"key": "secret", "found": False}
        assert await call(bob["kv_list"], {}) == {"keys": [], "truncated": False}
        entry = await store.kv_get("alice", "secret")
        assert entry is not None
        assert entry.value == 42
    finally:
        await store.close()


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        ({"key": "a\nb", "value": 1}, "control character"),
        ({"key": "", "value": 1}, "key"),
        ({"key": "k" * 300, "value": 1}, "key"),
        ({"value": 1}, "key"),
        ({"key": "k"}, "value"),
        ({"key": "k", "value": 1, "extra": 2}, "extra"),
    ],
)
async def test_bad_arguments_are_retried_and_store_nothing(
    arguments: JsonObject, message: str
) -> None:
    store = MemoryStore()
    t = by_name(store)["kv_set"]
    with pytest.raises(ModelRetry, match=message):
        await t.handler(CTX, t.validator(arguments))
    assert await store.kv_list("default") == []


async def test_values_over_the_cap_are_refused_with_the_sizes() -> None:
    store = MemoryStore()
    t = by_name(store, max_value_bytes=10)["kv_set"]
    assert await call(t, {"key": "k", "value": "12345678"}) == {
        "key": "k",
        "stored": True,
        "bytes": 10,
    }
    with pytest.raises(ModelRetry, match=r"11 bytes of JSON; the limit is 10"):
        await call(t, {"key": "k", "value": "123456789"})
    entry = await store.kv_get("default", "k")
    assert entry is not None
    assert entry.value == "12345678"  # the old value is kept


async def test_a_non_finite_number_is_retried() -> None:
    t = by_name(MemoryStore())["kv_set"]
    with pytest.raises(ModelRetry, match="not a JSON number"):
        await t.handler(CTX, {"key": "k", "value": float("nan")})


async def test_list_filters_by_prefix_and_caps() -> None:
    store = MemoryStore()
    for i in range(5):
        await store.kv_set("default", f"note/{i}", i)
    await store.kv_set("default", "other", 0)
    tools = by_name(store)
    listed = await call(tools["kv_list"], {"prefix": "note/", "limit": 3})
    assert listed == {
        "keys": ["note/0", "note/1", "note/2"],
        "truncated": True,
        "note": "only the first 3 keys; narrow the prefix to see the rest",
    }
    everything = await call(tools["kv_list"], {"prefix": "note/", "limit": 5})
    assert everything == {"keys": [f"note/{i}" for i in range(5)], "truncated": False}
    with pytest.raises(ModelRetry, match="limit"):
        tools["kv_list"].validator({"limit": MAX_LIST + 1})
    with pytest.raises(ModelRetry, match="prefix"):
        await call(tools["kv_list"], {"prefix": "bad\x00"})


def test_misconfiguration_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match="namespace"):
        kv_tools(MemoryStore(), namespace="")
    with pytest.raises(ConfigError, match="max_value_bytes"):
        kv_tools(MemoryStore(), max_value_bytes=0)
