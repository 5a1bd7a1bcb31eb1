"""Chunking: a document cut into overlapping pieces, each with its exact offsets.

A chunk is a slice of its document's text (``text[start:end]``), so a citation can always be
checked against the source. Cuts fall between paragraphs where they can, else between
sentences, else between words; consecutive chunks share up to ``overlap`` characters, so a
fact cut in two by one boundary is whole in the next chunk.
"""

from __future__ import annotations

import bisect
import itertools
import re

from tether._internal.frozen import frozen
from tether.errors import ConfigError

__all__ = ["Chunk", "chunk_text"]

_PARAGRAPH = re.compile(r"\n[ \t]*\n\s*")
_SENTENCE = re.compile(r"(?<=[.!?;:])\s+")
_HEADING = re.compile(r"^#{1,6}[ \t]+(.+?)[ \t#]*$", re.MULTILINE)


@frozen
class Chunk:
    """One piece of a document."""

    index: int
    """Its position among the document's chunks (0 first)."""
    start: int
    """Where it begins in the document's text."""
    end: int
    """Where it ends (exclusive): its text is ``document.text[start:end]``."""
    text: str
    """The slice."""
    section: str | None = None
    """The Markdown heading it falls under, if any."""
    page: int | None = None
    """The page it begins on (1 first), for a document with pages."""


def _cuts(text: str, pattern: re.Pattern[str], start: int, end: int) -> list[int]:
    """The positions in ``text[start:end]`` just after each match of ``pattern``."""
    return [m.end() for m in pattern.finditer(text, start, end) if start < m.end() < end]


def _segments(text: str, size: int) -> list[tuple[int, int]]:
    """Spans covering ``text`` exactly, none longer than ``size``: paragraphs, sentences, words."""
    spans: list[tuple[int, int]] = []
    bounds = [0, *_cuts(text, _PARAGRAPH, 0, len(text)), len(text)]
    for a, b in itertools.pairwise(bounds):
        if b - a <= size:
            spans.append((a, b))
            continue
        inner = [a, *_cuts(text, _SENTENCE, a, b), b]
        for c, d in itertools.pairwise(inner):
            while d - c > size:  # a sentence longer than a chunk: cut between words
                cut = text.rfind(" ", c + 1, c + size)
                cut = c + size if cut <= c else cut + 1
                spans.append((c, cut))
                c = cut
            spans.append((c, d))
    return [(a, b) for a, b in spans if b > a]


def chunk_text(
    text: str, *, size: int = 1000, overlap: int = 150, pages: tuple[int, ...] = ()
) -> list[Chunk]:
    """``text`` as chunks of at most ``size`` characters, consecutive ones sharing up to ``overlap``.

    ``pages``: where each page begins (a PDF's), so that each chunk knows its page.
    """
    if not isinstance(size, int) or size < 100:  # pyright: ignore[reportUnnecessaryIsInstance] - user input
        raise ConfigError(f"a chunk size must be at least 100 characters, not {size!r}")
    if not isinstance(overlap, int) or not 0 <= overlap < size // 2:  # pyright: ignore[reportUnnecessaryIsInstance] - user input
        raise ConfigError(f"a chunk overlap must be 0 to less than half the size, not {overlap!r}")
    if not text.strip():
        return []
    segments = _segments(text, size)
    headings = [(m.start(), m.group(1).strip()) for m in _HEADING.finditer(text)]
    heading_at = [h[0] for h in headings]
    chunks: list[Chunk] = []
    first = 0
    while first < len(segments):
        last = first
        while last + 1 < len(segments) and segments[last + 1][1] - segments[first][0] <= size:
            last += 1
        start, end = segments[first][0], segments[last][1]
        body = text[start:end]
        if body.strip():
            h = bisect.bisect_right(heading_at, start) - 1
            p = bisect.bisect_right(pages, start) if pages else 0
            chunks.append(
                Chunk(
                    index=len(chunks),
                    start=start,
                    end=end,
                    text=body,
                    section=headings[h][1] if h >= 0 else None,
                    page=p or None,
                )
            )
        if last + 1 >= len(segments):
            break
        # the next chunk starts as early as its overlap allows, and always moves on
        following = last + 1
        while following - 1 > first and end - segments[following - 1][0] <= overlap:
            following -= 1
        # and it must reach past this one's end, or it would hold nothing new
        while following <= last and segments[last + 1][1] - segments[following][0] > size:
            following += 1
        first = following
    return chunks
