"""The knowledge base in the run: ``search_knowledge`` answered, and answers' citations checked.

A ``search_knowledge`` call runs the retrieval sub-loop (``tether.knowledge.Retriever``):
each grading and rewriting request is a ``model_responded`` of purpose ``grade`` or
``rewrite`` (bounded by the run's limits: one it cannot pay for is not asked, and its
passage is not relevant), then one ``knowledge_retrieved`` records every search, passage
and verdict, and the call's result shows the relevant passages labelled ``[K1]``, ``[K2]``...
(numbered across the run). ``finish_task`` is then checked: it may cite only those labels,
must cite one when there are any (``require_citations``), and must carry the disclaimer
when every search found nothing relevant. A knowledge base that fails is the call's error,
never the run's.
"""

from __future__ import annotations

import re
from typing import Generic, cast

from tether.content import TextBlock, ToolResult
from tether.errors import UserError
from tether.events import KnowledgeRetrieved, PassageVerdict, SearchRound
from tether.knowledge.base import Passage
from tether.knowledge.config import Knowledge, cited_labels
from tether.knowledge.retrieval import Retrieval, Searchable
from tether.models.base import ModelRequest, ModelResponse
from tether.run.base import Cancelled, OutputT, Planned
from tether.run.context import RunContext
from tether.run.modelstep import ModelStep
from tether.run.remembering import why

__all__ = ["FAILED", "Consultant"]

FAILED = "the knowledge base could not be searched: "
"""How the warning of a search that failed begins (a replay fails it again the same way)."""

_GRADE_TOKENS = 600
"""About what one grading request costs (a passage, the question, the verdict)."""


class _Recording:
    """The knowledge base as one retrieval searches it: what each search found is kept."""

    __slots__ = ("_base", "found")

    def __init__(self, base: Searchable) -> None:
        self._base = base
        self.found: dict[str, Passage] = {}

    async def search(self, query: str, *, limit: int = 5) -> list[Passage]:
        passages = await self._base.search(query, limit=limit)
        for passage in passages:
            self.found.setdefault(passage.id, passage)
        return passages


class Consultant(Generic[OutputT]):
    """The run's use of its knowledge base (only made when the agent has one)."""

    __slots__ = ("_ctx", "_step", "base", "settings")

    def __init__(
        self, ctx: RunContext[OutputT], step: ModelStep[OutputT], settings: Knowledge
    ) -> None:
        self._ctx = ctx
        self._step = step
        self.settings = settings
        self.base: Searchable = settings.base
        """What is searched (a replay puts the recording's searches here)."""

    async def search(self, item: Planned) -> None:
        """Answer the ``search_knowledge`` call ``item`` (its result goes to ``item.answered``)."""
        assert item.search is not None
        ctx, step = self._ctx, self._step
        question = item.search
        t0 = ctx.monotonic()

        async def grade(request: ModelRequest) -> ModelResponse | None:
            if not ctx.affords(_GRADE_TOKENS):
                return None  # the run's limits leave no room: not relevant, not asked
            return await step.aside(request, "grade")

        async def rewrite(request: ModelRequest) -> ModelResponse | None:
            if not ctx.affords(_GRADE_TOKENS):
                return None
            return await step.aside(request, "rewrite")

        recording = _Recording(self.base)
        retrieval: Retrieval | None = None
        warning: str | None = None
        try:
            retrieval = await self.settings.retriever(recording).retrieve(
                question, grade, rewrite=rewrite
            )
        except (Cancelled, UserError):
            raise
        except Exception as exc:  # the knowledge base failed: the call's error, not the run's
            warning = f"{FAILED}{why(exc)}"
        item.seconds = ctx.monotonic() - t0
        rounds = () if retrieval is None else retrieval.rounds
        relevant = [] if retrieval is None else [p.id for p in retrieval.relevant]
        by_id = {passage_id: label for label, passage_id in ctx.state.citable.items()}
        labels: list[str] = []
        for passage_id in relevant:
            label = by_id.get(passage_id)
            if label is None:
                label = by_id[passage_id] = f"K{len(ctx.state.citable) + len(labels) + 1}"
            labels.append(label)
        recorded = ctx.add(
            KnowledgeRetrieved,
            call_id=item.call.id,
            question=question,
            rounds=tuple(
                SearchRound(
                    query=r.query,
                    verdicts=tuple(
                        PassageVerdict(
                            passage=g.passage.id,
                            relevant=g.relevant,
                            confidence=g.confidence,
                            evidence=g.evidence,
                        )
                        for g in r.grades
                    ),
                )
                for r in rounds
            ),
            passages=tuple(recording.found.values()),
            relevant=tuple(relevant),
            labels=tuple(labels),
            warning=warning,
        )
        event = cast(KnowledgeRetrieved, recorded)
        if warning is not None:
            item.answered = ToolResult.error(f"{warning}; go on without it")
            item.error_type = "knowledge_unavailable"
            return
        item.answered = self._view(event)

    def _view(self, event: KnowledgeRetrieved) -> ToolResult:
        """The call's result: the relevant passages as the log holds them, or why none."""
        if not event.relevant:
            queries = "; ".join(f'"{r.query}"' for r in event.rounds) or f'"{event.question}"'
            disclaimer = self.settings.disclaimer
            say = (
                f'begin your answer with "{disclaimer}"'
                if disclaimer is not None
                else "say that the knowledge base does not tell"
            )
            return ToolResult(
                content=(
                    TextBlock(
                        text=f"Nothing in the knowledge base answers this (searched for: "
                        f"{queries}). Do not guess. If nothing else tells you, {say}"
                    ),
                )
            )
        texts = {p.id: p for p in event.passages}
        limit = self.settings.passage_chars
        parts = ["Passages checked as relevant (cite the ones you use, like [K1]):"]
        for label, passage_id in zip(event.labels, event.relevant, strict=False):
            passage = texts[passage_id]
            where = passage.title or passage.source
            if passage.section:
                where += f" / {passage.section}"
            if passage.page is not None:
                where += f", page {passage.page}"
            parts.append(f"[{label}] {where}\n{passage.text[:limit]}")
        return ToolResult.text("\n\n".join(parts), untrusted=True)

    def check(self, item: Planned) -> None:
        """Send back a ``finish_task`` whose citations do not hold (``item.synthetic``)."""
        ctx, settings = self._ctx, self.settings
        st = ctx.state
        if st.knowledge_searches == 0:
            return  # the run never searched: nothing to cite, nothing to disclaim
        answer = ctx.spec.output.as_text(cast(OutputT, item.output))
        cited = cited_labels(answer)
        citable = st.citable
        unknown = [label for label in cited if label not in citable]
        reason: str | None = None
        if unknown:
            allowed = ", ".join(citable) or "none"
            reason = (
                f"{', '.join(f'[{u}]' for u in unknown)} is not a passage this run's knowledge "
                f"searches found relevant (those are: {allowed}). Cite only those, or search again."
            )
        elif not citable and settings.disclaimer is not None:
            if _plain(settings.disclaimer) not in _plain(answer):
                reason = (
                    "no search of the knowledge base found anything relevant, so the answer "
                    f'must not guess: begin it with "{settings.disclaimer}", then add what '
                    "you know from elsewhere, if anything."
                )
        elif citable and not cited and settings.require_citations:
            disclaimer = settings.disclaimer
            if disclaimer is None or _plain(disclaimer) not in _plain(answer):
                reason = (
                    "cite the passages the answer comes from, like [K1] (found relevant: "
                    f"{', '.join(citable)}). If none of them answers, search again or say the "
                    "knowledge base does not tell."
                )
                if isinstance(item.output, str):  # the fix, spelled out: small models copy it
                    label = self._closest(answer)
                    reason += (
                        f' For example: finish_task(answer="{answer.rstrip()}", '
                        f'citations=["{label}"])'
                    )

        if reason is None:
            return
        item.finish = False
        item.error_type = "not_accepted"
        item.synthetic = ToolResult.error(f"finish_task not accepted: {reason}")

    def _closest(self, answer: str) -> str:
        """The citable label whose passage shares the most words with ``answer``."""
        citable = self._ctx.state.citable
        texts = {
            p.id: p.text
            for e in self._ctx.journal.events
            if isinstance(e, KnowledgeRetrieved)
            for p in e.passages
        }
        words = _words(answer)
        return max(citable, key=lambda label: len(words & _words(texts.get(citable[label], ""))))


def _words(text: str) -> set[str]:
    return {w for w in re.findall(r"\w+", text.casefold()) if len(w) > 2}


def _plain(text: str) -> str:
    return " ".join(text.casefold().split()).strip(" .")
