"""``Knowledge``: how an agent's run searches a knowledge base and cites what it found.

``Agent(knowledge=KnowledgeBase(...))`` (or ``Knowledge(base, ...)`` to set the retrieval)
offers the model the control tool ``search_knowledge``. The run answers it with the
retrieval sub-loop (``Retriever``: search, grade each passage, rewrite the query when most
miss), each request and verdict in the log, and returns the passages graded relevant,
labelled ``[K1]``, ``[K2]``... An answer may cite only those labels: ``finish_task`` with any
other is sent back, and so, unless ``require_citations=False``, is an answer that cites
nothing when relevant passages were found. When the run searched and found nothing
relevant, its answer must say so (``disclaimer``) instead of guessing.
"""

from __future__ import annotations

from dataclasses import dataclass

from tether.errors import ConfigError
from tether.jsontypes import JsonObject
from tether.knowledge.retrieval import Retriever, Searchable
from tether.messages import SEARCH_KNOWLEDGE
from tether.tools.base import ToolAnnotations, ToolDefinition
from tether.tools.output import cited_labels

__all__ = ["DISCLAIMER", "Knowledge", "cited_labels", "search_definition"]

DISCLAIMER = "The knowledge base does not say."
"""How an answer begins when the run's searches found nothing relevant (the default)."""


def search_definition() -> ToolDefinition:
    """``search_knowledge`` as the model sees it."""
    return ToolDefinition(
        name=SEARCH_KNOWLEDGE,
        description=(
            "Search the knowledge base (documents the developer gave you) for passages that "
            "answer a question. Only passages checked as relevant come back, labelled [K1], "
            "[K2]...: cite the ones you use in your answer, like [K1]. When nothing relevant "
            "is found, do not guess: say that the knowledge base does not tell."
        ),
        input_schema={
            "type": "object",
            "properties": {
                "question": {
                    "type": "string",
                    "minLength": 2,
                    "maxLength": 500,
                    "description": "The question to answer, in words (one question a search).",
                }
            },
            "required": ["question"],
            "additionalProperties": False,
        },
        annotations=ToolAnnotations(
            read_only=True, idempotent=True, open_world=False, untrusted_output=True
        ),
    )


@dataclass(frozen=True, kw_only=True)
class Knowledge:
    """A knowledge base an agent searches, and how (see the module's docstring).

    ``Agent(knowledge=kb)`` is ``Agent(knowledge=Knowledge(base=kb))``.
    """

    base: Searchable
    """What is searched: a ``KnowledgeBase``."""
    limit: int = 4
    """Passages a search returns to be graded."""
    max_rewrites: int = 2
    """Rewritten queries a search may try when most passages miss."""
    min_confidence: float = 0.5
    """The grader's confidence below which a passage is not relevant."""
    passage_chars: int = 1500
    """How much of each passage the grader reads (and the model, when it is relevant)."""
    require_citations: bool = True
    """Send back an answer that cites nothing when the run found relevant passages."""
    disclaimer: str | None = DISCLAIMER
    """When every search found nothing relevant, the answer must contain this (``None``: no
    such check)."""

    def __post_init__(self) -> None:
        search = getattr(self.base, "search", None)
        if not callable(search):
            raise ConfigError(
                "Knowledge takes a KnowledgeBase (tether.knowledge.KnowledgeBase(memory)), not "
                f"{type(self.base).__name__}"
            )
        if not 0 <= self.min_confidence <= 1:
            raise ConfigError(f"min_confidence takes 0 to 1, not {self.min_confidence!r}")
        if self.passage_chars < 100:
            raise ConfigError(f"passage_chars takes 100 or more, not {self.passage_chars!r}")
        if self.disclaimer is not None and (
            not isinstance(self.disclaimer, str) or not self.disclaimer.strip()  # pyright: ignore[reportUnnecessaryIsInstance] - user input
        ):
            raise ConfigError("disclaimer takes a sentence, or None for no disclaimer check")
        self.retriever()  # limit and max_rewrites are checked now

    def retriever(self, base: Searchable | None = None) -> Retriever:
        """The retrieval sub-loop over ``base`` (by default this one's)."""
        return Retriever(
            self.base if base is None else base,
            limit=self.limit,
            max_rewrites=self.max_rewrites,
            min_confidence=self.min_confidence,
            passage_chars=self.passage_chars,
        )

    def describe(self) -> JsonObject:
        """What of it shapes a run (part of the agent's digest)."""
        return {
            "limit": self.limit,
            "max_rewrites": self.max_rewrites,
            "min_confidence": self.min_confidence,
            "passage_chars": self.passage_chars,
            "require_citations": self.require_citations,
            "disclaimer": self.disclaimer,
        }
