r"""Another reading of a text: its escapes undone and its invisible characters dropped.

A secret can stand in a text in a form no pattern matches: JSON inside a JSON string
(``{\\"password\\": \\"...\\"}``), ``\\u002d`` for ``-``, a URL-encoded query
(``password%3Ds3cret``, ``https%3A%2F%2Fuser%3Apw%40host``), or with a zero-width space
inside a key name or a key (``pass\\u200bword=``). ``read`` gives the text as a reader
would take it, and maps each stretch of that reading back to where it stands in the text,
so that what is found in the reading is redacted in the text itself.
"""

from __future__ import annotations

import re
from bisect import bisect_right
from collections.abc import Callable
from functools import cache

__all__ = ["INVISIBLE", "INVISIBLE_RANGES", "Reading", "read", "visible"]

INVISIBLE_RANGES: tuple[tuple[int, int], ...] = (
    (0x00AD, 0x00AD),
    (0x034F, 0x034F),
    (0x061C, 0x061C),
    (0x115F, 0x1160),
    (0x17B4, 0x17B5),
    (0x180B, 0x180F),
    (0x200B, 0x200F),
    (0x202A, 0x202E),
    (0x2060, 0x2064),
    (0x2066, 0x206F),
    (0xFE00, 0xFE0F),
    (0xFEFF, 0xFEFF),
    (0xFFA0, 0xFFA0),
    (0xE0000, 0xE007F),
)
"""Characters that show nothing (first and last code point of each range): zero-width spaces
and joiners, the soft hyphen, direction marks, variation selectors, the byte order mark,
fillers, tags. (Not the Hangul filler U+3164: its UTF-8 starts as most Japanese does, and
the probe would try every character of such a text.)"""
INVISIBLE = "".join(f"{chr(first)}-{chr(last)}" for first, last in INVISIBLE_RANGES)
"""``INVISIBLE_RANGES`` as the body of a regex class."""

_INVISIBLE = frozenset(chr(c) for first, last in INVISIBLE_RANGES for c in range(first, last + 1))


@cache
def _regexes() -> tuple[re.Pattern[str], re.Pattern[str]]:
    """What a reading changes, and a search for where a change may start.

    A JSON or shell escape, a run of percent-escapes, a character that shows nothing
    (compiled on first use).
    """
    change = rf"\\u([0-9a-fA-F]{{4}})|\\([\"'/\\\\])|((?:%[0-9A-Fa-f]{{2}})+)|[{INVISIBLE}]"
    return re.compile(change), re.compile(rf"[\\%{INVISIBLE}]")


def visible(text: str) -> str:
    """``text`` without its invisible characters."""
    return "".join(c for c in text if c not in _INVISIBLE)


_UNRESERVED = frozenset(b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-._~")
"""Bytes no URL encoder escapes: ``%41`` is left as it stands (so that a secret's probe word
is never hidden by an escape no encoder writes)."""


class Reading:
    """``plain``: the text as read; ``span`` maps a stretch of it back to the text."""

    __slots__ = ("_changes", "_starts", "plain", "text")

    def __init__(self, text: str, plain: str, changes: list[tuple[int, int, int, int]]) -> None:
        self.text = text
        """The text as it stands."""
        self.plain = plain
        """The text as read."""
        self._changes = changes  # (plain start, plain end, text start, text end), in order
        self._starts = [change[0] for change in changes]

    def _at(self, index: int) -> tuple[int, int]:
        """Where the reading's character ``index`` stands in the text: ``(start, end)``."""
        i = bisect_right(self._starts, index) - 1
        if i < 0:
            return index, index + 1
        _, plain_end, start, end = self._changes[i]
        if index < plain_end:
            return start, end
        at = end + index - plain_end
        return at, at + 1

    def span(self, start: int, end: int) -> tuple[int, int]:
        """Where the reading's ``plain[start:end]`` (not empty) stands in the text."""
        return self._at(start)[0], self._at(end - 1)[1]

    def changed(self, start: int, end: int) -> bool:
        """Whether ``plain[start:end]`` stands otherwise in the text (an escape is in it)."""
        at, to = self.span(start, end)
        return to - at != end - start or self.text[at:to] != self.plain[start:end]


def read(text: str) -> Reading | None:
    """``text`` as read (escapes undone, invisible characters dropped); ``None``: as it stands."""
    token, trigger = _regexes()
    if trigger.search(text) is None:
        return None
    pieces: list[str] = []
    changes: list[tuple[int, int, int, int]] = []
    done = size = 0  # text consumed; the reading's length so far

    def change(start: int, end: int, out: str) -> None:
        nonlocal done, size
        pieces.append(text[done:start])
        size += start - done
        pieces.append(out)
        changes.append((size, size + len(out), start, end))
        size += len(out)
        done = end

    for match in token.finditer(text):
        code, char, run = match.group(1), match.group(2), match.group(3)
        if run is not None:
            _percent(run, match.start(), change)
        elif code is not None:
            decoded = chr(int(code, 16))
            change(match.start(), match.end(), "" if decoded in _INVISIBLE else decoded)
        else:  # an escaped quote, slash or backslash; or an invisible character
            change(match.start(), match.end(), char if char is not None else "")
    if not changes:
        return None
    pieces.append(text[done:])
    return Reading(text, "".join(pieces), changes)


def _percent(run: str, at: int, change: Callable[[int, int, str], None]) -> None:
    """Each character of a run of percent-escapes (UTF-8), as ``change(start, end, out)``."""
    data = bytes.fromhex(run.replace("%", ""))
    i = 0
    while i < len(data):
        lead = data[i]
        size = 1 if lead < 0xC2 else 2 if lead < 0xE0 else 3 if lead < 0xF0 else 4
        try:
            out = data[i : i + size].decode()
        except UnicodeDecodeError:  # not UTF-8: byte by byte, as Latin-1
            size, out = 1, chr(lead)
        if not (size == 1 and lead in _UNRESERVED):
            change(at + 3 * i, at + 3 * (i + size), "" if out in _INVISIBLE else out)
        i += size
