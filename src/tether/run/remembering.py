"""Long-term memory in the run: recall at the start, write what a finished run learned.

Both are recorded before they take effect. ``memory_recalled`` holds the recalled texts as
the model reads them, so a resumed or replayed run reads the log, never the memory (which
may have changed). ``memory_written`` is committed before the record is stored; storing it
again is harmless (a record's id comes from its text). Memory never fails a run: a search
or write that fails becomes a warning (in the event, or in the outcome).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Generic

from tether.content import JsonObject, ToolResult, content_text
from tether.errors import TetherError
from tether.eventbase import EventBase
from tether.memory.base import KINDS, MemoryKind, MemoryQuery, MemoryRecord
from tether.memory.config import Remember, recalled_view
from tether.memoryevents import MemoryRecalled, MemoryWritten
from tether.messages import FINISH_TASK, Message, ToolResultMessage
from tether.models.tokens import estimate_tokens
from tether.run.base import OutputT
from tether.run.context import RunContext

__all__ = ["MODEL_IMPORTANCE", "CallMemory", "Notes", "Rememberer", "why"]

MODEL_IMPORTANCE = 0.6
"""The most importance a model's own ``remember`` gives a record: what the developer stored and
the run's lessons (0.7) outrank it when a namespace's cap evicts."""

Notes = list[tuple[type[EventBase], dict[str, Any]]]
"""Events a call's memory use leaves, recorded right before the call's result."""


class Rememberer(Generic[OutputT]):
    """The run's use of long-term memory (only made when the agent has one)."""

    __slots__ = ("_ctx", "namespace", "settings")

    def __init__(self, ctx: RunContext[OutputT], settings: Remember) -> None:
        self._ctx = ctx
        self.settings = settings
        self.namespace = settings.namespace_for(ctx.spec.name)

    async def recall(self) -> None:
        """Before the first turn, once per run: what memory holds about the goal."""
        ctx, st = self._ctx, self._ctx.state
        if st.steps > 0 or st.recalled is not None or self.settings.recall_limit == 0:
            return
        goal = st.goal  # as the log holds it: redacted, and there on a resumed run too
        ctx.add(MemoryRecalled, **await self._searched(goal, self.settings.recall_limit))

    async def after_failure(self) -> bool:
        """Before a turn that follows a failed call: what memory holds on its tool and error.

        Once per failed call (the log says which were searched for), and only the records
        this run has not been given yet; they reach the model after the call's result.
        Returns whether a ``memory_recalled`` was added.
        """
        settings, st = self.settings, self._ctx.state
        if not settings.recall_on_failure or settings.recall_limit == 0:
            return False
        failed = _last_failure(st.messages)
        if failed is None or failed.call_id in st.searched_after:
            return False
        error = " ".join(content_text(failed.content).split())[:300]
        query = self._ctx.journal.redacted(f"{failed.name} {error}")
        limit = min(settings.recall_limit, 3)
        fields = await self._searched(query, limit, given=st.recalled_ids)
        self._ctx.add(MemoryRecalled, **fields, after_call=failed.call_id)
        return True

    async def _searched(
        self,
        query: str,
        limit: int,
        *,
        given: set[str] | None = None,
        failed: str = "memory search failed, the run goes on without it",
    ) -> dict[str, Any]:
        """A search as ``memory_recalled``'s fields: what fits the budget, or why it failed.

        ``given``: records the run has already (they are skipped, not counted).
        """
        settings = self.settings
        skip = given or set[str]()
        fields: dict[str, Any] = {"namespace": self.namespace, "query": query}
        try:
            found = await settings.memory.search(
                MemoryQuery(
                    namespace=self.namespace,
                    text=query,
                    limit=min(1000, limit + len(skip)),
                    mode=settings.recall_mode,
                )
            )
        except Exception as exc:  # memory never fails a run: the log says what went wrong
            warning = f"{failed}: {why(exc)}"
            return {**fields, "records": (), "mode": settings.recall_mode, "warning": warning}
        records = [r for r in found.records if r.id not in skip][:limit]
        ids, texts, notes = self._within_budget(records)
        return {
            **fields,
            "records": ids,
            "texts": texts,
            "mode": found.mode,
            "warning": found.warning,
            "notes": notes,
        }

    def _within_budget(
        self, records: Sequence[MemoryRecord]
    ) -> tuple[tuple[str, ...], tuple[str, ...], tuple[str, ...] | None]:
        """The ids and texts that fit the token budget, and their lessons (reflexion)."""
        budget = self.settings.recall_tokens
        ids: list[str] = []
        texts: list[str] = []
        notes: list[str] = []
        journal = self._ctx.journal
        for record in records:
            if estimate_tokens(len(record.text)) > 4 * budget:  # far past it: not worth a
                continue  # redaction's pass (a 1 MB record took 0.2 s of the run's time)
            text = journal.redacted(record.text)  # what the log, and a replay, holds
            if not isinstance(text, str):
                continue
            cost = estimate_tokens(len(text) + 3)
            if cost > budget:
                continue  # a lesser one that fits is still worth its place
            budget -= cost
            ids.append(record.id)
            texts.append(text)
            notes.append(_lesson_note(record, journal.redacted))
        return tuple(ids), tuple(texts), tuple(notes) if any(notes) else None

    def outcome_record(self, answer: str) -> MemoryRecord | None:
        """The record a finished run writes (after redaction and the write policy).

        ``None`` when there is nothing to write, or when building it failed (the reason is
        an outcome warning: memory never fails a run).
        """
        try:
            return self._outcome_record(answer)
        except Exception as exc:
            self._ctx.journal.warnings.append(
                f"memory: nothing was written for this run: {why(exc)}"
            )
            return None

    def _outcome_record(self, answer: str) -> MemoryRecord | None:
        ctx = self._ctx
        if not self.settings.write_outcome or not answer.strip() or self._unverified():
            return None
        goal = ctx.state.goal.strip()
        text = ctx.journal.redacted(f"Task: {goal}\nAnswer: {answer.strip()}")
        if not isinstance(text, str) or not text.strip():
            return None
        record = MemoryRecord(
            namespace=self.namespace,
            text=text,
            kind="episodic",
            metadata={"agent": ctx.spec.name, "status": "finished"},
            run_id=ctx.run_id,
            event_seq=ctx.journal.seq,
        )
        return self.admitted(record)

    def lesson(self, text: str, *, metadata: JsonObject) -> MemoryRecord | None:
        """An episodic record of a lesson (reflexion), redacted and through the write policy.

        ``None``: nothing to keep, or building it failed (an outcome warning says why).
        """
        ctx = self._ctx
        try:
            clean = ctx.journal.redacted(text)
            if not isinstance(clean, str) or not clean.strip():
                return None
            return self.admitted(
                MemoryRecord(
                    namespace=self.namespace,
                    text=clean,
                    kind="episodic",
                    importance=0.7,
                    # the metadata holds the failure's words too: redacted as the text is
                    metadata={"agent": ctx.spec.name, **ctx.journal.redacted(metadata)},
                    run_id=ctx.run_id,
                    event_seq=ctx.journal.seq,
                )
            )
        except Exception as exc:
            ctx.journal.warnings.append(f"memory: a lesson of this run was not kept: {why(exc)}")
            return None

    def _unverified(self) -> bool:
        """Whether the answer follows a failed tool call that nothing made good.

        Such an answer claims what the tools refused: remembered, it would teach later runs
        to claim it too. (With reflexion, the failure is kept as a lesson instead.)
        """
        for message in reversed(self._ctx.state.messages):
            if isinstance(message, ToolResultMessage) and message.name != FINISH_TASK:
                return message.is_error
        return False

    def admitted(self, record: MemoryRecord) -> MemoryRecord | None:
        """``record`` as it may be stored: with the TTL, through the write policy.

        ``None``: the policy keeps nothing of it, or what it changed is not clean.
        """
        if self.settings.ttl is not None:
            record = record.with_ttl(self.settings.ttl)
        policy = self.settings.policy
        if policy is None:
            return record
        kept = policy(record)
        if kept is None:
            return None
        # what the policy changed passes the redaction again: it never adds a secret
        return kept if self._ctx.journal.redacted(kept.text) == kept.text else None

    async def call_remember(
        self, call_id: str, notes: Notes, text: str, kind: str, importance: float
    ) -> ToolResult:
        """A ``remember`` call: ``text`` (redacted, through the write policy) is stored."""
        ctx = self._ctx
        clean = ctx.journal.redacted(text.strip())
        if kind not in KINDS:
            return ToolResult.error(f"kind must be one of {', '.join(KINDS)}, not {kind!r}")
        memory_kind: MemoryKind = kind  # pyright: ignore[reportAssignmentType] - checked above
        importance = min(importance, MODEL_IMPORTANCE)
        try:
            record = self.admitted(
                MemoryRecord(
                    namespace=self.namespace,
                    text=clean,
                    kind=memory_kind,
                    importance=importance,
                    metadata={"agent": ctx.spec.name, "source": "remember"},
                    run_id=ctx.run_id,
                    event_seq=ctx.journal.seq,
                )
            )
        except Exception as exc:  # a bad record, or the write policy failed
            return ToolResult.error(f"nothing was remembered: {why(exc)}")
        if record is None:
            return ToolResult.text(
                "Not remembered: this memory's write policy does not keep it.",
                structured={"remembered": False},
            )
        try:
            await self.settings.memory.upsert([record])
        except Exception as exc:  # memory never fails a run: the model hears why
            return ToolResult.error(f"memory could not store it: {why(exc)}")
        notes.append(
            (
                MemoryWritten,
                {
                    "namespace": record.namespace,
                    "record_id": record.id,
                    "text": record.text,
                    "memory_kind": record.kind,
                    "call_id": call_id,
                },
            )
        )
        note = " (parts were redacted first)" if clean != text.strip() else ""
        return ToolResult.text(
            f"Remembered{note}.",
            structured={
                "remembered": True,
                "id": record.id,
                "redacted": bool(note),
                "importance": record.importance,
            },
        )

    async def call_recall(self, call_id: str, notes: Notes, query: str, limit: int) -> ToolResult:
        """A ``recall`` call: what the namespace holds about ``query``, within the budget."""
        searched = self._ctx.journal.redacted(query.strip())
        fields = await self._searched(searched, limit, failed="memory search failed")
        fields.pop("notes", None)  # a call's recall: lessons stay text, in its result
        notes.append((MemoryRecalled, {**fields, "call_id": call_id}))
        if "texts" not in fields:
            return ToolResult.error(f"{fields['warning']}; go on without it")
        view = recalled_view(fields["texts"]) or "Nothing in memory matches that."
        return ToolResult.text(view, untrusted=True)

    def access(self, call_id: str, notes: Notes) -> CallMemory:
        """The memory as the call ``call_id`` uses it (its events go to ``notes``)."""
        return CallMemory(self, call_id, notes)

    def written(self, record: MemoryRecord) -> None:
        """Record that ``record`` is written (before it is stored)."""
        self._ctx.add(
            MemoryWritten,
            namespace=record.namespace,
            record_id=record.id,
            text=record.text,
            memory_kind=record.kind,
        )

    async def store(self, record: MemoryRecord) -> None:
        """Store a record whose ``memory_written`` is committed; a failure is a warning."""
        try:
            await self.settings.memory.upsert([record])
        except Exception as exc:  # memory never fails a run: the outcome says what went wrong
            self._ctx.journal.warnings.append(
                f"memory: the record {record.id} of {record.namespace} (memory_written) could "
                f"not be stored: {why(exc)}"
            )


class CallMemory:
    """The run's memory as one call of ``remember`` or ``recall`` uses it.

    What it does becomes ``memory_written`` / ``memory_recalled`` with the call's id, recorded
    right before the call's result (the call itself, with its arguments, was recorded before
    it ran). A failure is the call's error result, never the run's.
    """

    __slots__ = ("_owner", "call_id", "notes")

    def __init__(self, owner: Rememberer[Any], call_id: str, notes: Notes) -> None:
        self._owner = owner
        self.call_id = call_id
        self.notes = notes

    async def remember(self, text: str, *, kind: str, importance: float) -> ToolResult:
        """Store ``text`` (see ``Rememberer.call_remember``)."""
        return await self._owner.call_remember(self.call_id, self.notes, text, kind, importance)

    async def recall(self, query: str, *, limit: int) -> ToolResult:
        """Search for ``query`` (see ``Rememberer.call_recall``)."""
        return await self._owner.call_recall(self.call_id, self.notes, query, limit)


def _last_failure(messages: list[Message]) -> ToolResultMessage | None:
    """The last failed result of the turn just ended, if the history ends with results."""
    for message in reversed(messages):
        if not isinstance(message, ToolResultMessage):
            return None
        if message.is_error and not message.synthetic and message.name != FINISH_TASK:
            return message
    return None


def _lesson_note(record: MemoryRecord, redacted: Callable[[Any], Any]) -> str:
    """A recalled reflexion lesson's note as ``tool`` NUL ``note`` ("" if the record is none).

    Only records that reflexion wrote carry it (their metadata, which neither a model nor a
    tool's output can set), never a text that merely looks like one.
    """
    metadata = record.metadata
    tool, note = metadata.get("tool"), metadata.get("note")
    if metadata.get("reflection") is not True or not isinstance(tool, str):
        return ""
    clean = redacted(note) if isinstance(note, str) else None
    return f"{tool}\0{clean}" if isinstance(clean, str) and clean.strip() else ""


def why(exc: BaseException) -> str:
    """An exception in words: tether's own say what to do; others are named by their type."""
    if isinstance(exc, TetherError | OSError):
        return str(exc)
    return f"{type(exc).__name__}: {exc}"
