"""The key-value port: small JSON values under string keys, grouped in namespaces.

Agents remember facts between runs here (``tether.tools.builtin.kv``). The run stores
implement it next to the runs: ``MemoryStore`` in a dict, ``SqliteStore`` in a ``kv`` table
of the same file. Entries are not run events: they are written at once, each in its own
short transaction, and need no lease.
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from datetime import datetime
from typing import cast

import orjson

from tether._internal.frozen import frozen
from tether.errors import InvalidEntry
from tether.jsontypes import JsonValue

__all__ = [
    "MAX_KEY_LENGTH",
    "InvalidEntry",
    "KeyValueStore",
    "KvEntry",
    "check_key",
    "decode_value",
    "encode_value",
]

MAX_KEY_LENGTH = 256
"""The longest key or namespace, in characters."""

_MAX_DEPTH = 64
_INT_RANGE = (-(2**63), 2**64)  # what orjson, and so tool results and event hashes, can carry


@frozen
class KvEntry:
    """One stored value."""

    key: str
    """Its key."""
    value: JsonValue
    """The value, decoded from JSON."""
    updated_at: datetime
    """When it was last set (UTC)."""


def check_key(key: str, what: str = "key") -> str:
    """Return ``key`` if it can be stored, else raise ``InvalidEntry`` saying why."""
    if not isinstance(key, str) or not key:  # pyright: ignore[reportUnnecessaryIsInstance]
        raise InvalidEntry(f"the {what} must be a non-empty string")
    if len(key) > MAX_KEY_LENGTH:
        raise InvalidEntry(f"the {what} is {len(key)} characters; the limit is {MAX_KEY_LENGTH}")
    for ch in key:
        # C0, DEL and C1 controls, and lone surrogates (not encodable, so not storable)
        if ch < " " or "\x7f" <= ch <= "\x9f" or "\ud800" <= ch <= "\udfff":
            raise InvalidEntry(
                f"the {what} {key!r} contains the control character {ch!r}; "
                "use printable characters only"
            )
    return key


def encode_value(value: JsonValue) -> str:
    """``value`` as compact JSON text, or ``InvalidEntry`` if it is not plain JSON.

    Refused rather than silently changed: non-finite floats (JSON has none), integers
    beyond 64 bits, non-string object keys, and nesting deeper than 64 levels.
    """
    _check_json(value)
    try:
        return orjson.dumps(value).decode()
    except orjson.JSONEncodeError as exc:  # lone surrogates in strings
        raise InvalidEntry(f"the value is not storable as JSON: {exc}") from None


def decode_value(text: str | bytes) -> JsonValue:
    """The value stored as ``text``."""
    decoded: JsonValue = orjson.loads(text)
    return decoded


def _check_json(value: object) -> None:
    stack: list[tuple[object, int]] = [(value, 0)]
    while stack:
        item, depth = stack.pop()
        if depth > _MAX_DEPTH:
            raise InvalidEntry(f"the value is nested deeper than {_MAX_DEPTH} levels")
        if item is None or isinstance(item, bool | str):
            continue
        if isinstance(item, int):
            if not _INT_RANGE[0] <= item < _INT_RANGE[1]:
                raise InvalidEntry("integers must fit in 64 bits; store big numbers as strings")
        elif isinstance(item, float):
            if not math.isfinite(item):
                raise InvalidEntry(f"{item} is not a JSON number")
        elif isinstance(item, list):
            stack.extend((v, depth + 1) for v in cast(list[object], item))
        elif isinstance(item, dict):
            for k, v in cast(dict[object, object], item).items():
                if not isinstance(k, str):
                    raise InvalidEntry(f"object keys must be strings, not {type(k).__name__}")
                stack.append((v, depth + 1))
        else:
            raise InvalidEntry(f"a {type(item).__name__} is not a JSON value")


class KeyValueStore(ABC):
    """JSON values under ``(namespace, key)``. Keys: see ``check_key``."""

    @abstractmethod
    async def kv_get(self, namespace: str, key: str) -> KvEntry | None:
        """The entry under ``key``, or ``None``."""

    @abstractmethod
    async def kv_set(self, namespace: str, key: str, value: JsonValue) -> None:
        """Store ``value`` under ``key``, replacing what was there.

        Raises:
            InvalidEntry: the namespace, key or value cannot be stored.
        """

    @abstractmethod
    async def kv_delete(self, namespace: str, key: str) -> bool:
        """Remove ``key``; returns whether it existed."""

    @abstractmethod
    async def kv_list(self, namespace: str, prefix: str = "", limit: int = 100) -> list[str]:
        """Up to ``limit`` keys starting with ``prefix``, in code-point order."""
