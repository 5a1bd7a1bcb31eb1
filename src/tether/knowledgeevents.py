"""The event of a knowledge search: what was searched, found and graded, and what may be cited."""

from __future__ import annotations

from typing import Literal

from tether._internal.frozen import frozen
from tether.eventbase import EventBase

__all__ = ["KnowledgeRetrieved", "Passage", "PassageVerdict", "SearchRound"]


@frozen(slots=False)
class Passage:
    """A chunk of a knowledge base found by a search: what to cite, and where it is."""

    id: str
    """The chunk's id (what a citation names)."""
    text: str
    """The chunk's text."""
    source: str
    """The document it is from."""
    start: int
    """Where it begins in the document's text."""
    end: int
    """Where it ends (exclusive)."""
    score: float
    """How well it matched (the memory's fused score: higher is better)."""
    section: str | None = None
    """The heading it falls under."""
    page: int | None = None
    """The page it begins on."""
    title: str | None = None
    """The document's title."""


@frozen(slots=False)
class PassageVerdict:
    """What the grader said of one passage, after tether checked it."""

    passage: str
    """The passage's id."""
    relevant: bool
    """Graded relevant, with evidence found in the passage that bears on the question, at
    the confidence asked for: what may be cited."""
    confidence: float
    """The grader's confidence, 0 to 1."""
    evidence: str = ""
    """The sentence the grader quoted as the answer ("" when none)."""


@frozen(slots=False)
class SearchRound:
    """One query and the verdicts on what it found, best match first."""

    query: str
    """The query (the question, then each rewrite)."""
    verdicts: tuple[PassageVerdict, ...]
    """One per passage found."""


@frozen
class KnowledgeRetrieved(EventBase):
    """A ``search_knowledge`` call's retrieval: its rounds, and the passages it may cite.

    The grader's and rewriter's requests are the ``model_responded`` events before it
    (purposes ``grade`` and ``rewrite``); the call's result follows it. A replay serves the
    searches from here, never from the knowledge base (which may have changed).
    """

    kind: Literal["knowledge_retrieved"] = "knowledge_retrieved"
    """Discriminator."""
    call_id: str
    """The ``search_knowledge`` call."""
    question: str
    """What was asked."""
    rounds: tuple[SearchRound, ...] = ()
    """Each search, in order."""
    passages: tuple[Passage, ...] = ()
    """Every passage found, once each, in the order first found (as it was then, after the
    run's redaction)."""
    relevant: tuple[str, ...] = ()
    """The ids of the passages graded relevant, once each, best first."""
    labels: tuple[str, ...] = ()
    """The citation label of each relevant passage (``K1``, ``K2``, ... numbered across the
    run: a passage found again keeps its label)."""
    warning: str | None = None
    """Why the search did less than was asked, or failed, in words."""
