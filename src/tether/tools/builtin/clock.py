"""Clock tools: the current time, and days until a date."""

from __future__ import annotations

from datetime import UTC, date, datetime
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from tether.errors import ModelRetry
from tether.tools.base import Tool
from tether.tools.builtin._mark import builtin
from tether.tools.function import tool

__all__ = ["current_time", "days_until"]


def _zone(name: str) -> ZoneInfo:
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError):
        raise ModelRetry(
            f"unknown time zone {name!r}: use an IANA name such as 'UTC' or 'Europe/Paris'"
        ) from None


def _current_time(timezone: str = "UTC") -> dict[str, str]:
    """The current date and time.

    Args:
        timezone: An IANA time zone name, e.g. ``UTC`` or ``Europe/Paris``.
    """
    now = datetime.now(_zone(timezone))
    return {
        "datetime": now.isoformat(timespec="seconds"),
        "date": now.date().isoformat(),
        "weekday": now.strftime("%A"),
    }


def _days_until(target: str, timezone: str = "UTC") -> dict[str, int | str]:
    """Whole days from today until a date (negative if it has passed).

    Args:
        target: The date, as YYYY-MM-DD.
        timezone: The time zone whose "today" counts, an IANA name.
    """
    try:
        day = date.fromisoformat(target.strip())
    except ValueError:
        raise ModelRetry(f"{target!r} is not a date: use YYYY-MM-DD, e.g. 2027-01-01") from None
    today = datetime.now(_zone(timezone) if timezone != "UTC" else UTC).date()
    return {"today": today.isoformat(), "target": day.isoformat(), "days": (day - today).days}


current_time: Tool = builtin(
    tool(name="current_time", read_only=True, open_world=False, blocking=False)(_current_time)
)
"""The ``current_time`` tool."""

days_until: Tool = builtin(
    tool(name="days_until", read_only=True, open_world=False, blocking=False)(_days_until)
)
"""The ``days_until`` tool."""
