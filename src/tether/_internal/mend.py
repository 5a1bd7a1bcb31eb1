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
from typing import Any, TypeVar, cast

__all__ = ["mended"]

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


def _mend(value: Any) -> Any:
    if isinstance(value, str):
        return _text(value)
    if isinstance(value, list | tuple):
        given = cast(list[Any], value)
        items: list[Any] = [_mend(v) for v in given]
        if all(a is b for a, b in zip(items, given, strict=True)):
            return given
        return items if isinstance(value, list) else tuple(items)
    if isinstance(value, dict):
        mapping = cast(dict[Any, Any], value)
        pairs = [(_mend(k), _mend(v)) for k, v in mapping.items()]
        if all(a is k and b is v for (a, b), (k, v) in zip(pairs, mapping.items(), strict=True)):
            return mapping
        return dict(pairs)
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        changed = {
            f.name: new
            for f in dataclasses.fields(value)
            if f.init and (new := _mend(old := getattr(value, f.name))) is not old
        }
        return dataclasses.replace(value, **changed) if changed else value
    return value
