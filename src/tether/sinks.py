"""Where committed events go: the ``EventSink`` port.

A run commits its events in batches; every sink gets each batch, in order, once the commit
point (the run's store, when it has one) took it. ``Agent.run(..., sinks=[...])`` adds
your own; the JSONL log (``log_dir``) and hooks (``tether.hooks``) are sinks too.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence

from tether.events import Event

__all__ = ["EventSink"]


class EventSink(ABC):
    """Where committed events go (a JSONL file, a run store, your code).

    ``write`` raising ``StoreError`` drops the sink from the run (the outcome warns that
    its copy of the log stops there); the run itself goes on.
    """

    @abstractmethod
    async def write(self, events: Sequence[Event]) -> None:
        """Persist ``events`` (in order); return only when they are written."""

    async def catch_up(self, events: Sequence[Event]) -> None:  # noqa: B027 - optional hook
        """The run's events before the first batch this sink gets (a continued run's).

        Called once, before that batch, only when the run did not start in this process:
        a copy of the whole log brings itself up to date here; the default ignores them.
        """

    async def close(self) -> None:  # noqa: B027 - optional hook
        """Release resources; called once when the run ends."""

    def take_warnings(self) -> list[str]:
        """Problems this sink met and got over since it was last asked, in words.

        The run's outcome lists them (``RunOutcome.warnings``); the default has none.
        """
        return []
