"""Text cut short without a piece of a word at its end: what a cut secret would leave.

A secret's pattern needs the whole of it (``postgres://app:pw@host`` needs the ``@host``; a
quoted password its closing quote): text cut inside one keeps a prefix no pattern matches,
and it reached the log unredacted. So a cut drops the partial token it ends in.
"""

from __future__ import annotations

__all__ = ["cut_clean"]


def cut_clean(text: str, limit: int) -> str:
    """``text`` cut to at most ``limit`` characters, less the partial token it would end in.

    The cut text ends at whitespace; of a token longer than 4,096 characters, the last
    4,096 before the cut go.
    """
    if len(text) <= limit:
        return text
    cut = text[:limit]
    if not text[limit].isspace():  # the cut fell inside a token: it goes whole
        start = max(0, len(cut) - 4096)  # only the end is looked at
        space = max(cut.rfind(c, start) for c in " \t\n\r")
        if space >= 0:
            cut = cut[: space + 1]
        elif start > 0:
            cut = cut[:start]
    return cut
