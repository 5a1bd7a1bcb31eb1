"""Built-in tools: ``calculate``, ``current_time`` and ``days_until`` (more arrive with the safety issue)."""

from tether.tools.builtin.calculator import calculate
from tether.tools.builtin.clock import current_time, days_until

__all__ = ["calculate", "current_time", "days_until"]
