"""Key-value tools: an agent remembers JSON values under keys, in a ``KeyValueStore``.

``kv_tools(store)`` returns ``kv_get``, ``kv_set``, ``kv_delete`` and ``kv_list``, all bound
to one namespace, so agents given different namespaces cannot see each other's entries.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, cast

from tether.content import JsonObject
from tether.errors import ConfigError, ModelRetry
from tether.jsontypes import JsonValue
from tether.stores.kv import MAX_KEY_LENGTH, InvalidEntry, KeyValueStore, check_key, encode_value
from tether.tools.base import Tool, ToolAnnotations, ToolContext
from tether.tools.builtin._mark import builtin

__all__ = ["MAX_LIST", "kv_tools"]

MAX_LIST = 200
"""The most keys ``kv_list`` returns in one call."""

_KEY: JsonObject = {
    "type": "string",
    "minLength": 1,
    "maxLength": MAX_KEY_LENGTH,
    "description": "The key: printable text, e.g. 'user/preferred_language'.",
}


def _schema(properties: JsonObject, required: list[JsonValue]) -> JsonObject:
    return {
        "type": "object",
        "properties": properties,
        "required": required,
        "additionalProperties": False,
    }


def _key(arguments: Mapping[str, Any], name: str = "key") -> str:
    try:
        return check_key(cast(str, arguments[name]), name)
    except InvalidEntry as exc:
        raise ModelRetry(f"invalid {name}: {exc}") from None


def kv_tools(
    store: KeyValueStore, *, namespace: str = "default", max_value_bytes: int = 100_000
) -> list[Tool]:
    """Tools to get, set, delete and list JSON values in ``store`` under ``namespace``.

    Args:
        store: Where the values live (``MemoryStore``, ``SqliteStore``).
        namespace: The entries these tools see; other namespaces are out of reach.
        max_value_bytes: The largest value ``kv_set`` accepts, as UTF-8 JSON.
    """
    try:
        check_key(namespace, "namespace")
    except InvalidEntry as exc:
        raise ConfigError(f"kv_tools: {exc}") from None
    if max_value_bytes < 1:
        raise ConfigError("kv_tools: max_value_bytes must be at least 1")

    async def get(ctx: ToolContext, arguments: Mapping[str, Any]) -> object:
        key = _key(arguments)
        entry = await store.kv_get(namespace, key)
        if entry is None:
            return {"key": key, "found": False}
        return {
            "key": key,
            "found": True,
            "value": entry.value,
            "updated_at": entry.updated_at.isoformat(timespec="seconds"),
        }

    async def set_(ctx: ToolContext, arguments: Mapping[str, Any]) -> object:
        key = _key(arguments)
        value = cast(JsonValue, arguments["value"])
        try:
            size = len(encode_value(value).encode())
        except InvalidEntry as exc:
            raise ModelRetry(f"invalid value: {exc}") from None
        if size > max_value_bytes:
            raise ModelRetry(
                f"the value is {size} bytes of JSON; the limit is {max_value_bytes}. "
                "Store less, or split it over several keys"
            )
        await store.kv_set(namespace, key, value)
        return {"key": key, "stored": True, "bytes": size}

    async def delete(ctx: ToolContext, arguments: Mapping[str, Any]) -> object:
        key = _key(arguments)
        return {"key": key, "deleted": await store.kv_delete(namespace, key)}

    async def list_(ctx: ToolContext, arguments: Mapping[str, Any]) -> object:
        prefix = cast(str, arguments.get("prefix", ""))
        if prefix:
            prefix = _key(arguments, "prefix")
        limit = cast(int, arguments.get("limit", 50))
        keys = await store.kv_list(namespace, prefix, limit + 1)  # one more: is there more?
        result: dict[str, JsonValue] = {"keys": list[JsonValue](keys[:limit])}
        result["truncated"] = len(keys) > limit
        if len(keys) > limit:
            result["note"] = f"only the first {limit} keys; narrow the prefix to see the rest"
        return result

    tools = [
        Tool.from_schema(
            name="kv_get",
            description="Read the value stored under a key (found: false if there is none).",
            input_schema=_schema({"key": _KEY}, ["key"]),
            handler=get,
            annotations=ToolAnnotations(read_only=True, idempotent=True, open_world=False),
        ),
        Tool.from_schema(
            name="kv_set",
            description=(
                "Store a JSON value under a key, replacing any value already there. "
                f"Values may be up to {max_value_bytes} bytes of JSON."
            ),
            input_schema=_schema(
                {"key": _KEY, "value": {"description": "Any JSON value."}}, ["key", "value"]
            ),
            handler=set_,
            annotations=ToolAnnotations(
                read_only=False, destructive=True, idempotent=True, open_world=False
            ),
        ),
        Tool.from_schema(
            name="kv_delete",
            description="Delete the value under a key (deleted: false if there was none).",
            input_schema=_schema({"key": _KEY}, ["key"]),
            handler=delete,
            annotations=ToolAnnotations(
                read_only=False, destructive=True, idempotent=True, open_world=False
            ),
        ),
        Tool.from_schema(
            name="kv_list",
            description="List stored keys in order, optionally only those with a prefix.",
            input_schema=_schema(
                {
                    "prefix": {
                        "type": "string",
                        "maxLength": MAX_KEY_LENGTH,
                        "description": "Only keys starting with this text.",
                    },
                    "limit": {
                        "type": "integer",
                        "minimum": 1,
                        "maximum": MAX_LIST,
                        "description": f"At most this many keys (default 50, at most {MAX_LIST}).",
                    },
                },
                [],
            ),
            handler=list_,
            annotations=ToolAnnotations(read_only=True, idempotent=True, open_world=False),
        ),
    ]
    return [builtin(t) for t in tools]
