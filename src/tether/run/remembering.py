"""Long-term memory in the run: recall at the start, write what a finished run learned.

Both are recorded before they take effect. ``memory_recalled`` holds the recalled texts as
the model reads them, so a resumed or replayed run reads the log, never the memory (which
may have changed). ``memory_written`` is committed before the record is stored; storing it
again is harmless (a record's id comes from its text). Memory never fails a run: a search
or write that fails becomes a warning (in the event, or in the outcome).
"""

from __future__ import annotations

from typing import Generic

from tether.errors import TetherError
from tether.memory.base import MemoryQuery, MemoryRecord, MemorySearch
from tether.memory.config import Remember
from tether.memoryevents import MemoryRecalled, MemoryWritten
from tether.models.tokens import estimate_tokens
from tether.run.base import OutputT
from tether.run.context import RunContext

__all__ = ["Rememberer"]


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
        query = MemoryQuery(
            namespace=self.namespace,
            text=goal,
            limit=self.settings.recall_limit,
            mode=self.settings.recall_mode,
        )
        try:
            found = await self.settings.memory.search(query)
        except Exception as exc:  # memory never fails a run: the log says what went wrong
            ctx.add(
                MemoryRecalled,
                namespace=self.namespace,
                query=goal,
                records=(),
                mode=query.mode,
                warning=f"memory search failed, the run goes on without it: {_why(exc)}",
            )
            return
        ids, texts = self._within_budget(found)
        ctx.add(
            MemoryRecalled,
            namespace=self.namespace,
            query=goal,
            records=ids,
            texts=texts,
            mode=found.mode,
            warning=found.warning,
        )

    def _within_budget(self, found: MemorySearch) -> tuple[tuple[str, ...], tuple[str, ...]]:
        budget = self.settings.recall_tokens
        ids: list[str] = []
        texts: list[str] = []
        for record in found.records:
            text = self._ctx.journal.redacted(record.text)  # what the log, and a replay, holds
            if not isinstance(text, str):
                continue
            cost = estimate_tokens(len(text) + 3)
            if cost > budget:
                break
            budget -= cost
            ids.append(record.id)
            texts.append(text)
        return tuple(ids), tuple(texts)

    def outcome_record(self, answer: str) -> MemoryRecord | None:
        """The record a finished run writes (after redaction and the write policy).

        ``None`` when there is nothing to write, or when building it failed (the reason is
        an outcome warning: memory never fails a run).
        """
        try:
            return self._outcome_record(answer)
        except Exception as exc:
            self._ctx.journal.warnings.append(
                f"memory: nothing was written for this run: {_why(exc)}"
            )
            return None

    def _outcome_record(self, answer: str) -> MemoryRecord | None:
        ctx = self._ctx
        if not self.settings.write_outcome or not answer.strip():
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
        if self.settings.ttl is not None:
            record = record.with_ttl(self.settings.ttl)
        policy = self.settings.policy
        if policy is not None:
            kept = policy(record)
            if kept is None:
                return None
            # what the policy changed passes the redaction again: it never adds a secret
            again = ctx.journal.redacted(kept.text)
            record = kept if again == kept.text else None
        return record

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
                f"not be stored: {_why(exc)}"
            )


def _why(exc: BaseException) -> str:
    """An exception in words: tether's own say what to do; others are named by their type."""
    if isinstance(exc, TetherError | OSError):
        return str(exc)
    return f"{type(exc).__name__}: {exc}"
