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
from tether.events import KnowledgeRetrieved, PassageVerdict, Purpose, SearchRound
from tether.knowledge.base import Passage
from tether.knowledge.config import Knowledge, cited_labels
from tether.knowledge.retrieval import Retrieval, Round, Searchable
from tether.messages import ToolCall
from tether.models.base import ModelRequest, ModelResponse
from tether.run.base import Cancelled, OutputT, Planned
from tether.run.context import RunContext
from tether.run.modelstep import ModelStep
from tether.run.remembering import why

__all__ = ["FAILED", "Consultant", "question_of"]

FAILED = "the knowledge base could not be searched: "
"""How the warning of a search that failed begins (a replay fails it again the same way)."""

_GRADE_TOKENS = 600
"""About what one grading request costs (a passage, the question, the verdict)."""


class _SearchFailed(Exception):
    """The knowledge base raised ``cause`` on a search (not a bug of the sub-loop)."""

    def __init__(self, cause: Exception) -> None:
        super().__init__(str(cause))
        self.cause = cause


class _Recording:
    """The knowledge base as one retrieval searches it: what each search found is kept."""

    __slots__ = ("_base", "found")

    def __init__(self, base: Searchable) -> None:
        self._base = base
        self.found: dict[str, Passage] = {}

    async def search(self, query: str, *, limit: int = 5) -> list[Passage]:
        try:
            passages = await self._base.search(query, limit=limit)
        except (Cancelled, UserError):
            raise
        except Exception as exc:  # the base's failure, told apart from the sub-loop's bugs
            raise _SearchFailed(exc) from exc
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
        if question.casefold() in ctx.state.questions:
            item.answered = ToolResult.error(
                "this question was searched already in this run: its passages are in that "
                "call's result. Search with other words, or answer"
            )
            item.error_type = "repeated_search"
            return
        t0 = ctx.monotonic()
        ungraded = 0

        async def asked(request: ModelRequest, purpose: Purpose) -> ModelResponse | None:
            nonlocal ungraded
            response = None
            if ctx.affords(_GRADE_TOKENS):  # else not asked: its passage is not relevant
                response = await step.aside(request, purpose)
            if response is None and purpose == "grade":
                ungraded += 1
            return response

        async def grade(request: ModelRequest) -> ModelResponse | None:
            return await asked(request, "grade")

        async def rewrite(request: ModelRequest) -> ModelResponse | None:
            return await asked(request, "rewrite")

        recording = _Recording(self.base)
        rounds: list[Round] = []
        warning: str | None = None
        try:
            await self.settings.retriever(recording).retrieve(
                question, grade, rewrite=rewrite, rounds=rounds
            )
        except _SearchFailed as failed:  # the call's error, not the run's (rounds done kept)
            warning = f"{FAILED}{why(failed.cause)}"
        item.seconds = ctx.monotonic() - t0
        if warning is None and ungraded:
            warning = (
                f"{ungraded} passage{'s' * (ungraded != 1)} could not be graded (the run's "
                "limits are near, or the grader failed): not counted as relevant"
            )
        relevant = Retrieval(question=question, rounds=tuple(rounds)).relevant
        labels = _labels([p.id for p in relevant], ctx.state.citable)
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
            relevant=tuple(p.id for p in relevant),
            labels=labels,
            warning=warning,
        )
        event = cast(KnowledgeRetrieved, recorded)
        if warning is not None and warning.startswith(FAILED) and not relevant:
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
            found = (
                "Nothing in the knowledge base answers this"
                if event.warning is None
                else f"Nothing found could be confirmed ({event.warning})"
            )
            return ToolResult(
                content=(
                    TextBlock(
                        text=f"{found} (searched for: {queries}). Do not guess. If nothing "
                        f"else tells you, {say}"
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
        output = cast(OutputT, item.output)
        answer = self._ctx.spec.output.as_text(output)
        reason = self.reason(answer, example=isinstance(output, str))
        if reason is None:
            return
        item.finish = False
        item.error_type = "not_accepted"
        item.synthetic = ToolResult.error(f"finish_task not accepted: {reason}")

    def reason(self, answer: str, *, example: bool = False) -> str | None:
        """Why ``answer`` cannot be taken (``None``: it can).

        A label the run's searches did not grade relevant is never taken, searched or not;
        after a search, an answer must cite (``require_citations``), or, when nothing was
        found relevant, carry the disclaimer. ``example``: spell the fix out for a text answer.
        """
        settings, st = self.settings, self._ctx.state
        cited = cited_labels(answer)
        citable = st.citable
        unknown = [label for label in cited if label not in citable]
        if unknown:
            allowed = ", ".join(citable) or "none: search first"
            return (
                f"{', '.join(f'[{u}]' for u in unknown)} is not a passage this run's knowledge "
                f"searches found relevant (those are: {allowed}). Cite only those, or search again."
            )
        if not st.questions:
            return None  # the run never searched: nothing to disclaim
        disclaimed = settings.disclaimer is not None and _plain(settings.disclaimer) in _plain(
            answer
        )
        if not citable and settings.disclaimer is not None and not disclaimed:
            return (
                "no search of the knowledge base found anything relevant, so the answer "
                f'must not guess: begin it with "{settings.disclaimer}", then add what '
                "you know from elsewhere, if anything."
            )
        if citable and not cited and settings.require_citations and not disclaimed:
            reason = (
                "cite the passages the answer comes from, like [K1] (found relevant: "
                f"{', '.join(citable)}). If none of them answers, search again or say the "
                "knowledge base does not tell."
            )
            if example:  # the fix, spelled out: small models copy it
                label = self._closest(answer)
                reason += (
                    f' For example: finish_task(answer="{answer.rstrip()}", citations=["{label}"])'
                )
            return reason
        return None

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


def _labels(relevant: list[str], citable: dict[str, str]) -> tuple[str, ...]:
    """The citation label of each relevant passage: its earlier one, else the next number."""
    by_id = {passage_id: label for label, passage_id in citable.items()}
    taken = [int(label[1:]) for label in citable]
    number = max(taken, default=0)
    labels: list[str] = []
    for passage_id in relevant:
        label = by_id.get(passage_id)
        if label is None:
            number += 1
            label = by_id[passage_id] = f"K{number}"
        labels.append(label)
    return tuple(labels)


def _words(text: str) -> set[str]:
    return {w for w in re.findall(r"\w+", text.casefold()) if len(w) > 2}


def _plain(text: str) -> str:
    return " ".join(text.casefold().split()).strip(" .")


def question_of(call: ToolCall) -> str | None:
    """A ``search_knowledge`` call's question (``query`` is taken too: small models write it)."""
    arguments = call.arguments
    question = arguments.get("question")
    if not isinstance(question, str) or len(question.strip()) < 2:
        question = arguments.get("query")
    if not isinstance(question, str) or len(question.strip()) < 2:
        return None
    return " ".join(question.split())[:500]
