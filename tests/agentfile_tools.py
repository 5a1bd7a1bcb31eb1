"""A tool an agent file names by ``function = "tests.agentfile_tools:lookup"``."""

from __future__ import annotations

__all__ = ["lookup"]


def lookup(term: str) -> str:
    """Looks a term up.

    Args:
        term: What to look up.
    """
    return f"{term}: nothing found"
