r"""Text that UTF-8 cannot encode, mended: each lone surrogate written out as its escape.

A Python string may hold a lone surrogate (``"\udce9"``): that is what ``os.listdir``,
``sys.argv`` and ``os.environ`` give for bytes that are not UTF-8 (a file name written in
Latin-1), and what ``json.loads`` gives for an escape like ``"\ud800"``. No JSON encoder
that writes UTF-8 can store it, so an event holding one cannot be sealed. What a tool
returned or a model wrote is mended (each lone surrogate written out as its escape, so the
model and the log read ``caf\udce9.txt``, nothing lost), and so is what the caller gives (a
goal, an answer, a memory record, a document): refusing a file's name would only stop the
caller where a visible escape loses nothing.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any, TypeVar, cast

__all__ = ["mended", "nul_free"]

T = TypeVar("T")


def _text(text: str) -> str:
    if text.isascii():
        return text
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return text.encode("utf-8", "backslashreplace").decode("utf-8")
    return text


def mended(value: T) -> T:
    """``value`` with every lone surrogate in its strings written out as its escape.

    Walks strings, lists, tuples, dicts (keys too) and dataclasses (a copy where a field
    changed); anything else is returned as it is. Unchanged values are the same objects.
    """
    return cast(T, _mend(value))


def nul_free(value: T) -> T:
    r"""``mended``, and every NUL character written out as its escape (``\u0000``).

    For what a store keeps whose database cannot hold NUL (PostgreSQL's text and JSONB):
    every backend stores the same text, so a record reads back alike from each.
    """
    return cast(T, _mend(value, _nul_text))


def _nul_text(text: str) -> str:
    text = _text(text)
    return text.replace("\0", "\\u0000") if "\0" in text else text


def _mend(value: Any, fix: Callable[[str], str] = _text) -> Any:
    if isinstance(value, str):
        return fix(value)
    if isinstance(value, list | tuple):
        given = cast(list[Any], value)
        items: list[Any] = [_mend(v, fix) for v in given]
        if all(a is b for a, b in zip(items, given, strict=True)):
            return given
        return items if isinstance(value, list) else tuple(items)
    if isinstance(value, dict):
        mapping = cast(dict[Any, Any], value)
        pairs = [(_mend(k, fix), _mend(v, fix)) for k, v in mapping.items()]
        if all(a is k and b is v for (a, b), (k, v) in zip(pairs, mapping.items(), strict=True)):
            return mapping
        return dict(pairs)
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        changed = {
            f.name: new
            for f in dataclasses.fields(value)
            if f.init and (new := _mend(old := getattr(value, f.name), fix)) is not old
        }
        return dataclasses.replace(value, **changed) if changed else value
    return value
