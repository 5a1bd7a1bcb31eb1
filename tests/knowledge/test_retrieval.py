"""The retrieval sub-loop grades each passage and rewrites a query whose results miss."""

from __future__ import annotations

import pytest

from tether.errors import ConfigError
from tether.jsontypes import JsonObject
from tether.knowledge import Document, KnowledgeBase, Retriever
from tether.memory import InProcessMemory
from tether.messages import ToolCall, UserMessage
from tether.models.base import ModelRequest, ModelResponse

DOCS = [
    Document(source="a", text="The warranty lasts two years from the date of purchase."),
    Document(source="b", text="Shipping to Norway takes five working days."),
    Document(source="c", text="Returns are accepted within thirty days."),
    Document(source="d", text="The store opens at nine on weekdays."),
]


class Judge:
    """Grades as a careful model would: relevant when the passage holds ``needle``."""

    def __init__(self, needle: str, rewrites: list[str] | None = None) -> None:
        self.needle = needle
        self.rewrites = list(rewrites or [])
        self.asked: list[str] = []

    async def __call__(self, request: ModelRequest) -> ModelResponse | None:
        tool = request.tools[0].name
        self.asked.append(tool)
        message = request.messages[0]
        assert isinstance(message, UserMessage)
        arguments: JsonObject
        if tool == "verdict":
            passage = message.text.split("Passage:\n", 1)[1]
            relevant = self.needle in passage
            arguments = {
                "evidence": passage if relevant else "",
                "relevant": relevant,
                "confidence": 0.9 if relevant else 0.8,
            }
        else:
            if not self.rewrites:
                return None
            arguments = {"query": self.rewrites.pop(0)}
        return ModelResponse(tool_calls=(ToolCall(id="x", name=tool, arguments=arguments),))


async def kb() -> KnowledgeBase:
    base = KnowledgeBase(InProcessMemory())
    await base.add_all(DOCS)
    return base


async def test_relevant_passages_are_kept_and_graded_once_each() -> None:
    retriever = Retriever(await kb(), limit=2)
    judge = Judge("warranty")
    found = await retriever.retrieve("How long is the warranty?", judge)
    assert [p.source for p in found.relevant] == ["a"]
    assert len(found.rounds) == 1  # half relevant: enough, no rewrite
    assert judge.asked.count("verdict") == len(found.rounds[0].grades)


async def test_a_query_whose_results_miss_is_rewritten_at_most_twice() -> None:
    retriever = Retriever(await kb(), limit=2, max_rewrites=2)
    judge = Judge("Norway", rewrites=["returns policy", "opening hours", "never asked"])
    found = await retriever.retrieve("How long do returns take?", judge)
    assert [r.query for r in found.rounds] == [
        "How long do returns take?",
        "returns policy",
        "opening hours",
    ]
    assert found.relevant == ()  # nothing relevant: the answer must say so
    assert judge.asked.count("search") == 2


async def test_a_rewrite_that_repeats_a_query_stops_the_loop() -> None:
    retriever = Retriever(await kb(), limit=2)
    judge = Judge("nothing", rewrites=["How long do returns take?"])
    found = await retriever.retrieve("How long do returns take?", judge)
    assert len(found.rounds) == 1


async def test_a_failed_or_unsure_verdict_is_not_relevant() -> None:
    async def unsure(request: ModelRequest) -> ModelResponse | None:
        if request.tools[0].name == "search":
            return None
        passage = request.messages[0].text.split("Passage:\n", 1)[1]  # type: ignore[union-attr]
        args: JsonObject = {"evidence": passage, "relevant": True, "confidence": 0.2}
        return ModelResponse(tool_calls=(ToolCall(id="x", name="verdict", arguments=args),))

    found = await Retriever(await kb(), limit=2).retrieve("warranty", unsure)
    assert found.relevant == ()
    assert all(g.confidence == 0.2 for g in found.rounds[0].grades)


def test_bounds_say_what_they_take() -> None:
    base = KnowledgeBase(InProcessMemory())
    with pytest.raises(ConfigError, match="passages"):
        Retriever(base, limit=0)
    with pytest.raises(ConfigError, match="max_rewrites"):
        Retriever(base, max_rewrites=9)


async def test_a_verdict_whose_evidence_is_not_in_the_passage_is_not_relevant() -> None:
    async def inventive(request: ModelRequest) -> ModelResponse | None:
        if request.tools[0].name == "search":
            return None
        args: JsonObject = {
            "evidence": "The warranty lasts ten years.",  # not what the passage says
            "relevant": True,
            "confidence": 0.95,
        }
        return ModelResponse(tool_calls=(ToolCall(id="x", name="verdict", arguments=args),))

    found = await Retriever(await kb(), limit=2).retrieve("warranty", inventive)
    assert found.relevant == ()
    assert found.rounds[0].grades[0].evidence == "The warranty lasts ten years."


async def test_evidence_of_punctuation_only_is_no_evidence() -> None:
    async def dotty(request: ModelRequest) -> ModelResponse | None:
        if request.tools[0].name == "search":
            return None
        args: JsonObject = {"evidence": ".", "relevant": True, "confidence": 0.95}
        return ModelResponse(tool_calls=(ToolCall(id="x", name="verdict", arguments=args),))

    found = await Retriever(await kb(), limit=2).retrieve("warranty", dotty)
    assert found.relevant == ()


async def test_evidence_about_something_else_is_not_relevant() -> None:
    """A grader that calls every passage relevant: only evidence sharing the question's
    terms counts."""
    retriever = Retriever(await kb(), limit=4, max_rewrites=0)
    found = await retriever.retrieve("How long is the warranty?", Judge(""))
    assert [p.source for p in found.relevant] == ["a"]


async def test_a_quote_is_compared_by_its_words_not_its_spacing() -> None:
    """Tokenized text (``D . C .``, ``Hill , Washington``) quoted with ordinary spacing."""
    base = KnowledgeBase(InProcessMemory())
    await base.add(
        Document(
            source="t", text="Singer held a press event on Capitol Hill , Washington , D . C . "
        )
    )

    async def tidy(request: ModelRequest) -> ModelResponse | None:
        if request.tools[0].name == "search":
            return None
        args: JsonObject = {
            "evidence": "Singer held a press event on Capitol Hill, Washington, D.C.",
            "relevant": True,
            "confidence": 0.9,
        }
        return ModelResponse(tool_calls=(ToolCall(id="x", name="verdict", arguments=args),))

    found = await Retriever(base, limit=1).retrieve("Where did Singer hold a press event?", tidy)
    assert [p.source for p in found.relevant] == ["t"]
