"""The events of long-term memory, of sessions, and of the context's compaction."""

from __future__ import annotations

from dataclasses import field
from typing import Literal

from tether._internal.frozen import frozen
from tether.eventbase import EventBase
from tether.latefields import LATE

__all__ = ["ContextCompacted", "MemoryRecalled", "MemoryWritten", "SessionContinued"]


@frozen
class MemoryRecalled(EventBase):
    """Long-term memory was searched and results entered the context."""

    kind: Literal["memory_recalled"] = "memory_recalled"
    """Discriminator."""
    namespace: str
    """The memory namespace searched."""
    query: str
    """What was searched for."""
    records: tuple[str, ...]
    """Ids of the records recalled, best first."""
    texts: tuple[str, ...] = ()
    """Their texts, as the model reads them (a resumed or replayed run reads these, not
    the memory, which may have changed since)."""
    mode: str = "hybrid"
    """What the search did: hybrid, keyword or vector (no embedder: keyword)."""
    warning: str | None = None
    """Why the search did less than was asked, or failed, in words."""
    call_id: str | None = field(default=None, metadata=LATE)
    """The ``recall`` call that searched (``None``: the run's own recall, which enters the
    model's view after its instructions; a call's recall is that call's result)."""
    after_call: str | None = field(default=None, metadata=LATE)
    """The failed call whose tool and error were searched for, before the next turn
    (``Remember(recall_on_failure=True)``); ``None``: the run's recall at its start."""
    notes: tuple[str, ...] | None = field(default=None, metadata=LATE)
    """For each text, the reflexion lesson it holds as ``tool`` NUL ``note`` ("" for a text
    that is none), shown with the goal (``None``: no text is a lesson)."""


@frozen
class MemoryWritten(EventBase):
    """A record was written to long-term memory."""

    kind: Literal["memory_written"] = "memory_written"
    """Discriminator."""
    namespace: str
    """The memory namespace."""
    record_id: str
    """The record's id."""
    text: str
    """The text stored (after the run's redaction: it never holds what the log redacted)."""
    memory_kind: str = "episodic"
    """semantic, episodic or procedural (``tether.memory.MemoryKind``)."""
    call_id: str | None = field(default=None, metadata=LATE)
    """The ``remember`` call that wrote it (``None``: the run wrote it at its end)."""


@frozen
class SessionContinued(EventBase):
    """The run continues a conversation: the session's earlier turns enter the model's view.

    Each turn is an earlier run of the session: what the user asked and what it answered,
    as those runs' logs hold them. A resumed or replayed run reads them here.
    """

    kind: Literal["session_continued"] = "session_continued"
    """Discriminator."""
    session: str
    """The session's id."""
    run_ids: tuple[str, ...] = ()
    """The earlier turns' runs, oldest first."""
    goals: tuple[str, ...] = ()
    """What the user asked in each."""
    answers: tuple[str, ...] = ()
    """What each answered."""
    complete: bool = True
    """Whether every earlier turn is here (``False``: the oldest were left out, over the
    session's turn or token bound)."""
    warning: str | None = None
    """Why the earlier turns could not be read, in words (the run goes on without them)."""


@frozen
class ContextCompacted(EventBase):
    """Older history was summarised to fit the context."""

    kind: Literal["context_compacted"] = "context_compacted"
    """Discriminator."""
    tokens_before: int
    """Estimated tokens before compaction."""
    tokens_after: int
    """Estimated tokens after compaction."""
    summary: str
    """The message that replaced the older ones: the calls they made and how each went,
    and the summary of what matters later."""
    start: int | None = field(default=None, metadata=LATE)
    """The first replaced message's position in the conversation (after the goal)."""
    end: int | None = field(default=None, metadata=LATE)
    """The position just past the last replaced message (the newest turns from there on
    are kept verbatim)."""
    window: int | None = field(default=None, metadata=LATE)
    """The model's context window it compacted for (``None``: for
    ``Compaction.max_context_tokens``)."""
