"""What every memory backend shares: words, keyword scores, vectors, rank fusion, caps.

Hybrid search fuses the keyword ranking and the vector ranking by reciprocal rank fusion
(Cormack, Clarke and Büttcher, 2009): a record's score is the sum of ``1 / (K + rank)`` over
the rankings it appears in. It needs no calibration between BM25 scores and cosines, which
live on different scales, and it is what Elasticsearch, OpenSearch and pgvector's guides use.
"""

from __future__ import annotations

import importlib.util
import math
import re
from collections import Counter
from collections.abc import Container, Iterable, Mapping, Sequence
from typing import NamedTuple

from tether.errors import InvalidEntry
from tether.memory.base import (
    NAMESPACE,
    MemoryHit,
    MemoryQuery,
    MemoryRecord,
    SearchMode,
    replaced,
)
from tether.memory.embedder import Embedder

__all__ = [
    "MATCH_BUDGET",
    "RRF_K",
    "KeywordIndex",
    "Probe",
    "Vectors",
    "bm25_ranking",
    "budgeted",
    "caps_of",
    "cosine",
    "embedded",
    "evictions",
    "fuse",
    "held_by",
    "mode_of",
    "normalized",
    "other_vectors",
    "probe",
    "words",
]

RRF_K = 5
"""Reciprocal rank fusion's constant. The paper's 60 fused many TREC runs; fusing two short
rankings, a smaller one lets a record first in one ranking beat one that is tenth in both.
Chosen on 600 SQuAD dev questions held out from ``bench/memory.py``'s (recall@5: keyword
90.3, k=60 92.5, k=10 94.8, k=5 95.5, k=1 95.5)."""

MATCH_BUDGET = 3000
"""About how many matching records a keyword search ranks at most (see ``budgeted``)."""


def budgeted(counts: list[tuple[int, str]]) -> tuple[list[str], bool]:
    """The terms a keyword search ranks by, from ``(records it matches, term)`` pairs.

    BM25 ranks every record that matches any term, so a common word ("the", "is") makes it
    rank most of the table. Terms are taken rarest first while the records they match stay
    within ``MATCH_BUDGET`` (the rarest always); a common word adds little to BM25 anyway.
    The flag is whether even the rarest matches more than that: the words say little, and
    a backend gives the newest matches first. A backend counts each term's records up to
    ``MATCH_BUDGET + 1`` only, so counting is bounded too.
    """
    if not counts:
        return [], False
    ordered = sorted(counts)
    kept: list[str] = []
    matched = 0
    for count, term in ordered:
        if kept and matched + count > MATCH_BUDGET:
            break
        kept.append(term)
        matched += count
    return kept, ordered[0][0] > MATCH_BUDGET


_WORD = re.compile(r"\w+", re.UNICODE)


def words(text: str) -> list[str]:
    """A text's words, case-folded (what keyword search matches)."""
    return [w.casefold() for w in _WORD.findall(text)]


class KeywordIndex:
    """BM25 over a fixed list of texts, with an inverted index: a query reads its words' postings.

    Built once for texts that do not change (a namespace as of one version) and asked many
    times; ``bm25_ranking`` builds one for a single question.
    """

    __slots__ = ("average", "lengths", "postings")

    def __init__(self, texts: Sequence[str]) -> None:
        self.postings: dict[str, list[tuple[int, int]]] = {}
        self.lengths: list[int] = []
        for i, text in enumerate(texts):
            counts = Counter(words(text))
            self.lengths.append(sum(counts.values()))
            for term, tf in counts.items():
                self.postings.setdefault(term, []).append((i, tf))
        self.average = (sum(self.lengths) / len(self.lengths) if self.lengths else 0.0) or 1.0

    def rank(
        self,
        query: str,
        allowed: Container[int] | None = None,
        *,
        k1: float = 1.2,
        b: float = 0.75,
    ) -> list[int]:
        """The positions of the texts that share a word with ``query``, best score first.

        ``allowed``: only these positions (a query's filters). Ties go to the earlier text.
        """
        total = len(self.lengths)
        scores: dict[int, float] = {}
        for term in set(words(query)):
            posting = self.postings.get(term)
            if not posting:
                continue
            idf = math.log(1 + (total - len(posting) + 0.5) / (len(posting) + 0.5))
            for i, tf in posting:
                if allowed is None or i in allowed:
                    norm = k1 * (1 - b + b * self.lengths[i] / self.average)
                    scores[i] = scores.get(i, 0.0) + idf * tf * (k1 + 1) / (tf + norm)
        return sorted((i for i, s in scores.items() if s > 0), key=lambda i: (-scores[i], i))


def bm25_ranking(query: str, records: Sequence[MemoryRecord]) -> list[MemoryRecord]:
    """``records`` that share a word with ``query``, best BM25 score first.

    For the in-process backend; SQLite and PostgreSQL rank in the database.
    """
    if not records or not words(query):
        return []
    return [records[i] for i in KeywordIndex([r.text for r in records]).rank(query)]


def normalized(vector: Sequence[float]) -> tuple[float, ...]:
    """``vector`` scaled to length 1 (a zero vector stays zero)."""
    norm = math.sqrt(sum(x * x for x in vector))
    return tuple(x / norm for x in vector) if norm else tuple(vector)


def cosine(a: Sequence[float], b: Sequence[float]) -> float:
    """The cosine of two vectors of one length (0 for a zero vector)."""
    dot = sum(x * y for x, y in zip(a, b, strict=True))
    norms = math.sqrt(sum(x * x for x in a)) * math.sqrt(sum(y * y for y in b))
    return dot / norms if norms else 0.0


def fuse(
    keyword: Sequence[MemoryRecord], vector: Sequence[MemoryRecord], limit: int
) -> list[MemoryHit]:
    """Reciprocal rank fusion of two rankings (either may be empty), best first."""
    scores: dict[str, float] = {}
    by_id: dict[str, MemoryRecord] = {}
    ranks: dict[str, list[int | None]] = {}
    for which, ranking in enumerate((keyword, vector)):
        for rank, record in enumerate(ranking, start=1):
            by_id.setdefault(record.id, record)
            scores[record.id] = scores.get(record.id, 0.0) + 1.0 / (RRF_K + rank)
            ranks.setdefault(record.id, [None, None])[which] = rank
    order = sorted(scores, key=lambda i: (-scores[i], min(r for r in ranks[i] if r), i))
    return [
        MemoryHit(
            record=by_id[i],
            score=round(scores[i], 9),
            keyword_rank=ranks[i][0],
            vector_rank=ranks[i][1],
        )
        for i in order[:limit]
    ]


def caps_of(caps: Mapping[str, int] | None) -> dict[str, int]:
    """Validated per-namespace caps (how many records a namespace keeps at most)."""
    out = dict(caps or {})
    for namespace, cap in out.items():
        if not isinstance(namespace, str) or not NAMESPACE.fullmatch(namespace):  # pyright: ignore[reportUnnecessaryIsInstance] - user input
            # no record is ever stored there: the cap would never hold, without a word
            raise InvalidEntry(
                f"caps names memory namespace {namespace!r}, which no record can have: use "
                "1-200 letters, digits and _ . : @ / - (an agent's runs use agent:NAME, "
                "other characters written as _)"
            )
        if isinstance(cap, bool) or not isinstance(cap, int) or cap < 1:  # pyright: ignore[reportUnnecessaryIsInstance]
            raise InvalidEntry(f"the cap of memory namespace {namespace!r} must be an int >= 1")
    return out


def evictions(rows: Iterable[tuple[str, float, float]], cap: int) -> list[str]:
    """The ids a namespace over its cap drops: least important first, then oldest.

    ``rows`` are ``(id, importance, created as a timestamp)``, as the SQL backends store them.
    """
    kept = sorted(rows, key=lambda r: (-r[1], -r[2], r[0]))
    return [r[0] for r in kept[cap:]]


async def embedded(
    records: Sequence[MemoryRecord], embedder: Embedder | None
) -> list[MemoryRecord]:
    """``records``, those without a vector given one by ``embedder`` (none: as they are)."""
    missing = [i for i, r in enumerate(records) if r.embedding is None]
    if embedder is None or not missing:
        return list(records)
    vectors = await embedder.embed([records[i].text for i in missing])
    if len(vectors) != len(missing):
        raise InvalidEntry(
            f"the embedder {embedder.name} returned {len(vectors)} vectors for {len(missing)} texts"
        )
    out = list(records)
    for i, vector in zip(missing, vectors, strict=True):
        out[i] = replaced(
            records[i], embedding=tuple(float(x) for x in vector), embedding_model=embedder.name
        )
    return out


def mode_of(query: MemoryQuery, embedder: Embedder | None) -> tuple[SearchMode, str | None]:
    """What a search can do: without an embedder (or numpy), keywords only, and why."""
    if query.mode == "keyword":
        return query.mode, None
    if embedder is not None:
        if importlib.util.find_spec("numpy") is not None:
            return query.mode, None
        return "keyword", (
            f"vector search needs numpy, which is not installed, so the {query.mode} search "
            f'for {query.text[:60]!r} matched keywords only: pip install "tether[memory]"'
        )
    return "keyword", (
        f"this memory has no embedder, so the {query.mode} search for {query.text[:60]!r} "
        "matched keywords only; pass embedder= to the memory for semantic search"
    )


class Probe(NamedTuple):
    """What a search needs before it asks a backend: what it can do, and the query's vector."""

    mode: SearchMode
    """What the search does (``mode_of``)."""
    warning: str | None
    """Why it does less than was asked."""
    vector: list[float] | None
    """The query's vector (``None``: no vector search)."""
    model: str
    """The embedder that made it ("" without one)."""
    pool: int
    """How many candidates each ranking gives the fusion."""


async def probe(query: MemoryQuery, embedder: Embedder | None) -> Probe:
    """Decide a search's mode and embed its query (once, whatever the backend)."""
    mode, warning = mode_of(query, embedder)
    vector: list[float] | None = None
    model = ""
    if mode != "keyword" and embedder is not None:
        (vector,) = await embedder.embed([query.text])
        model = embedder.name
    return Probe(mode, warning, vector, model, max(query.limit * 4, 20))


Vectors = tuple[str | None, int | None]
"""Which vectors a record holds: the embedder's name and the dimensions (no vector: both
``None``; a vector given without a name: ``None`` and its dimensions)."""


def held_by(record: MemoryRecord) -> Vectors:
    """The vectors ``record`` holds (``Vectors``)."""
    if record.embedding is None:
        return None, None
    return record.embedding_model, len(record.embedding)


def other_vectors(probe: Probe, held: Iterable[Vectors], namespace: str) -> Probe:
    """``probe``, for a namespace whose records hold ``held``: others' are found by keywords.

    Vectors of two embedders are never compared (their scores would mean nothing), so a
    record embedded by another embedder than the query's, or not at all, has no place in the
    vector ranking: a ``vector`` search becomes ``hybrid``, so keywords still find it, and
    the search says why, naming both embedders. A search without a vector is as it was.
    """
    if probe.vector is None:
        return probe
    mine: Vectors = (probe.model, len(probe.vector))
    others = sorted({h for h in held if h != mine}, key=lambda h: (h[0] or "", h[1] or 0))
    if not others:
        return probe
    named = [f"{m or 'an unnamed embedder'} ({d} dimensions)" for m, d in others if d]
    if len(named) > 3:
        named[3:] = [f"{len(named) - 3} more"]
    parts = [f"records embedded by {'; '.join(named)}"] if named else []
    if (None, None) in others:
        parts.append("records with no vector")
    mode: SearchMode = "hybrid" if probe.mode == "vector" else probe.mode
    made = " (the vector search was made hybrid)" if mode != probe.mode else ""
    warning = (
        f"memory namespace {namespace!r} holds {' and '.join(parts)}, which this memory's "
        f"embedder {probe.model} ({len(probe.vector)} dimensions) cannot compare with its "
        f"own vectors: those records were matched by keywords only{made}. Store them again "
        f"without their embedding to embed them with {probe.model}"
    )
    if probe.warning:
        warning = f"{probe.warning}; {warning}"
    return probe._replace(mode=mode, warning=warning)
