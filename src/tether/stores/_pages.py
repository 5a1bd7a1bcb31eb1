"""Reading a run's log in pages: the one rule every backend checks a page's size by."""

from __future__ import annotations

from tether.errors import UserError

__all__ = ["check_limit"]


def check_limit(limit: int) -> None:
    """Refuse a page that could hold no event.

    Raises:
        UserError: ``limit`` is below 1.
    """
    if limit < 1:
        raise UserError(f"a page holds at least one event: limit must be 1 or more, not {limit}")
