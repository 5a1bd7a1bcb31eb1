"""The long-term memory port: namespaced records with hybrid (keyword + vector) search."""

from __future__ import annotations

import hashlib
import json
import re
from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import field
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Literal, cast

from tether._internal.frozen import frozen
from tether._internal.mend import nul_free
from tether.content import JsonObject
from tether.errors import InvalidEntry

if TYPE_CHECKING:
    from tether.memory.embedder import Embedder

__all__ = [
    "FLOAT32_MAX",
    "KINDS",
    "NAMESPACE",
    "Memory",
    "MemoryHit",
    "MemoryKind",
    "MemoryQuery",
    "MemoryRecord",
    "MemorySearch",
    "SearchMode",
    "moment",
    "record_id",
    "replaced",
]

MemoryKind = Literal["semantic", "episodic", "procedural"]
"""semantic: facts; episodic: what happened in a run (outcomes, reflections); procedural: how to."""
KINDS: tuple[MemoryKind, ...] = ("semantic", "episodic", "procedural")

SearchMode = Literal["hybrid", "keyword", "vector"]

FLOAT32_MAX = 3.4028234663852886e38
"""The largest float32: vectors are stored as float32, where anything larger is inf."""

_SPACE = re.compile(r"\s+")
NAMESPACE = re.compile(r"[A-Za-z0-9_.:@/-]{1,200}")
"""What a memory namespace may be."""


def moment(now: datetime | None) -> datetime:
    """``now`` (default: the current time), which must be timezone-aware.

    A naive time was compared with the records' aware ones (a bare TypeError in one backend)
    or read as local time (in the others), so each backend forgot something else.
    """
    if now is None:
        return datetime.now(UTC)
    if now.tzinfo is None:
        raise InvalidEntry("now must be timezone-aware (datetime.now(UTC))")
    return now


def record_id(namespace: str, text: str) -> str:
    """The id a record gets when none is given: the same text in a namespace is one record.

    Case and runs of whitespace aside, so that a fact remembered twice is stored once.
    """
    normal = _SPACE.sub(" ", text.strip()).casefold()
    return hashlib.sha256(f"{namespace}\0{normal}".encode()).hexdigest()[:32]


@frozen
class MemoryRecord:
    """One remembered thing."""

    namespace: str
    """Where it belongs (an agent, a user, a project): searches never cross namespaces."""
    text: str
    """What is remembered."""
    id: str = ""
    """The record's id; empty: derived from the namespace and text (``record_id``)."""
    kind: MemoryKind = "semantic"
    """semantic (a fact), episodic (something that happened), procedural (how to do a thing)."""
    metadata: JsonObject = field(default_factory=lambda: {})
    """Free-form attributes (searches can filter on them)."""
    embedding: tuple[float, ...] | None = None
    """The text's vector; ``None``: the memory's embedder makes it when the record is stored."""
    embedding_model: str | None = None
    """Which embedder made ``embedding`` (vectors of different models are never compared)."""
    created: datetime | None = None
    """When it was first stored (set by the store when ``None``)."""
    expires: datetime | None = None
    """After this the record is neither found nor kept (``forget`` deletes it)."""
    importance: float = 0.5
    """0 to 1: what a namespace's cap evicts last."""
    run_id: str | None = None
    """The run it came from, if any."""
    event_seq: int | None = None
    """The event of that run it came from, if any."""

    def __post_init__(self) -> None:
        if not NAMESPACE.fullmatch(self.namespace):
            raise InvalidEntry(
                f"memory namespace {self.namespace!r} is not valid: use 1-200 letters, digits "
                "and _ . : @ / -"
            )
        if not self.text.strip():
            raise InvalidEntry(f"a memory record in {self.namespace!r} has no text")
        # a lone surrogate or a NUL: its escape (no UTF-8 encoder, or PostgreSQL, holds it)
        object.__setattr__(self, "text", nul_free(self.text))
        object.__setattr__(self, "id", nul_free(self.id))
        for name in ("run_id", "embedding_model"):  # text columns too, as the text is
            object.__setattr__(self, name, nul_free(getattr(self, name)))
        if self.kind not in KINDS:
            raise InvalidEntry(f"memory kind {self.kind!r} is not one of {', '.join(KINDS)}")
        self._check_numbers()
        object.__setattr__(self, "metadata", _metadata(self.metadata, "a memory record's"))
        if self.embedding is not None and (
            not self.embedding or not all(_float32(x) for x in self.embedding)
        ):
            # stored as float32, a larger number is inf, and the record could not be read
            raise InvalidEntry(
                "a record's embedding must be a non-empty list of finite numbers within "
                f"float32's range (±{FLOAT32_MAX:.4g}): scale the vector, or check the embedder"
            )
        for name in ("created", "expires"):
            when = getattr(self, name)
            if when is not None and when.tzinfo is None:
                raise InvalidEntry(f"{name} must be timezone-aware (datetime.now(UTC))")
        if not self.id:
            object.__setattr__(self, "id", record_id(self.namespace, self.text))

    def _check_numbers(self) -> None:
        importance = cast(object, self.importance)
        if isinstance(importance, bool) or not isinstance(importance, int | float):
            raise InvalidEntry(f"importance is a number between 0 and 1, not {importance!r}")
        if not 0.0 <= importance <= 1.0:
            raise InvalidEntry(f"importance must be between 0 and 1, not {importance}")
        seq = cast(object, self.event_seq)
        if seq is not None and (
            isinstance(seq, bool) or not isinstance(seq, int) or not 0 <= seq < 2**63
        ):
            raise InvalidEntry(f"event_seq is an event's number (0 to 2**63-1), not {seq!r}")

    def expired(self, now: datetime) -> bool:
        """Whether the record has expired at ``now``."""
        return self.expires is not None and self.expires <= now

    def with_ttl(self, ttl: timedelta, *, now: datetime | None = None) -> MemoryRecord:
        """This record, expiring ``ttl`` from ``now`` (default: the current time)."""
        start = moment(now)
        return replaced(self, expires=start + ttl)


def replaced(record: MemoryRecord, **changes: object) -> MemoryRecord:
    """``record`` with ``changes`` (checked again, as a new record)."""
    values = {name: getattr(record, name) for name in _FIELDS}
    values.update(changes)
    return MemoryRecord(**values)  # pyright: ignore[reportArgumentType] - the record's own fields


_FIELDS = (
    "namespace",
    "text",
    "id",
    "kind",
    "metadata",
    "embedding",
    "embedding_model",
    "created",
    "expires",
    "importance",
    "run_id",
    "event_seq",
)


@frozen
class MemoryQuery:
    """What to search for, and where."""

    namespace: str
    """The namespace searched."""
    text: str
    """The query, in words."""
    limit: int = 5
    """At most this many hits."""
    mode: SearchMode = "hybrid"
    """hybrid (keyword and vector ranks fused), keyword, or vector."""
    kinds: tuple[MemoryKind, ...] = ()
    """Only these kinds (empty: all)."""
    metadata: JsonObject = field(default_factory=lambda: {})
    """Only records whose metadata holds each of these key/value pairs."""
    after: datetime | None = None
    """Only records created at or after this time."""
    before: datetime | None = None
    """Only records created before this time."""
    min_similarity: float = 0.0
    """Vector matches below this cosine are not matches (keyword matches are kept)."""

    def __post_init__(self) -> None:
        # a query of another namespace than a record can have would find nothing, silently
        if not isinstance(self.namespace, str) or not NAMESPACE.fullmatch(self.namespace):  # pyright: ignore[reportUnnecessaryIsInstance] - user input
            raise InvalidEntry(
                f"memory namespace {self.namespace!r} is not valid: use 1-200 letters, digits "
                "and _ . : @ / -"
            )
        object.__setattr__(self, "text", nul_free(self.text))  # as the records hold theirs
        object.__setattr__(self, "metadata", _metadata(self.metadata, "a memory search's"))
        limit = cast(object, self.limit)
        if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= 1000:
            raise InvalidEntry(f"a memory search's limit must be 1 to 1000, not {limit!r}")
        if self.mode not in ("hybrid", "keyword", "vector"):
            raise InvalidEntry(f"search mode {self.mode!r} is not hybrid, keyword or vector")
        kinds = cast(object, self.kinds)
        if isinstance(kinds, str) or not isinstance(kinds, tuple | list | frozenset | set):
            raise InvalidEntry(
                f"a memory search's kinds is a tuple of kinds, such as ('episodic',), not {kinds!r}"
            )
        object.__setattr__(self, "kinds", tuple(cast(Sequence[MemoryKind], kinds)))
        if unknown := [k for k in self.kinds if k not in KINDS]:
            raise InvalidEntry(
                f"memory kind {unknown[0]!r} is not one of {', '.join(KINDS)} (a search for "
                "it would find nothing)"
            )
        similarity = cast(object, self.min_similarity)
        if not isinstance(similarity, int | float) or not -1.0 <= similarity <= 1.0:
            raise InvalidEntry(
                f"min_similarity is a cosine, -1 to 1 (0: any vector match), not {similarity!r}"
            )
        for name in ("after", "before"):
            when = getattr(self, name)
            if when is not None and when.tzinfo is None:
                raise InvalidEntry(f"{name} must be timezone-aware (datetime.now(UTC))")

    def admits(self, record: MemoryRecord, now: datetime) -> bool:
        """Whether ``record`` passes this query's filters (and has not expired)."""
        return record.namespace == self.namespace and self.passes(
            record.kind, record.metadata, record.created, record.expires, now
        )

    def passes(
        self,
        kind: str,
        metadata: JsonObject,
        created: datetime | None,
        expires: datetime | None,
        now: datetime,
    ) -> bool:
        """Whether a record of this namespace with these fields passes the filters at ``now``."""
        if expires is not None and expires <= now:
            return False
        if self.kinds and kind not in self.kinds:
            return False
        if any(metadata.get(k, _MISSING) != v for k, v in self.metadata.items()):
            return False
        if self.after is not None and (created is None or created < self.after):
            return False
        return not (self.before is not None and (created is None or created >= self.before))


_MISSING = object()


_DEPTH = 64
"""How deeply metadata may nest (as the run store's key-value entries)."""


def _metadata(metadata: object, whose: str) -> JsonObject:
    """``metadata`` checked (a JSON object, at most ``_DEPTH`` deep) and mended (``nul_free``).

    The depth is checked before anything walks the value: a deeper one raised RecursionError.
    """
    if not isinstance(metadata, dict):
        raise InvalidEntry(
            f"{whose} metadata must be a JSON object ({{...}}), not {type(metadata).__name__}"
        )
    stack: list[tuple[object, int]] = [(metadata, 1)]
    while stack:
        item, depth = stack.pop()
        if depth > _DEPTH and isinstance(item, dict | list | tuple):
            raise InvalidEntry(
                f"{whose} metadata is nested deeper than {_DEPTH} levels: flatten it"
            )
        if isinstance(item, dict):
            stack.extend((v, depth + 1) for v in cast(dict[object, object], item).values())
        elif isinstance(item, list | tuple):
            stack.extend((v, depth + 1) for v in cast(Sequence[object], item))
    mended = nul_free(cast(JsonObject, metadata))
    try:
        json.dumps(mended, allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise InvalidEntry(f"{whose} metadata must be JSON: {exc}") from None
    return mended


def _float32(x: object) -> bool:
    """Whether ``x`` is a number float32 holds (finite, within its range)."""
    return isinstance(x, int | float) and abs(x) <= FLOAT32_MAX


@frozen
class MemoryHit:
    """A record a search found, and how."""

    record: MemoryRecord
    """The record."""
    score: float
    """The fused score (higher is better; comparable within one search only)."""
    keyword_rank: int | None = None
    """Its place (1-based) among the keyword matches, if it was one."""
    vector_rank: int | None = None
    """Its place (1-based) among the nearest vectors, if it was one."""


@frozen
class MemorySearch:
    """A search's hits, and what the search could do."""

    hits: tuple[MemoryHit, ...]
    """Best first."""
    mode: SearchMode
    """What was done: a hybrid or vector search without an embedder falls back to keyword;
    a vector search where records hold another embedder's vectors is hybrid."""
    warning: str | None = None
    """Why the search did less than was asked (no embedder, another's vectors), in words."""

    @property
    def records(self) -> tuple[MemoryRecord, ...]:
        """The records found, best first."""
        return tuple(hit.record for hit in self.hits)


class Memory(ABC):
    """Namespaced records with hybrid search; a backend implements the abstract methods.

    Every backend passes one conformance suite (``tests/memory/test_conformance.py``).
    """

    embedder: Embedder | None = None
    """What makes the records' vectors (``None``: none; search is by keywords)."""

    @abstractmethod
    async def upsert(self, records: Sequence[MemoryRecord]) -> list[str]:
        """Store records; one whose id is stored already replaces it (its ``created`` stays).

        Records without an embedding get one from the memory's embedder, if it has one.
        Returns their ids, in order. A namespace's cap is enforced afterwards.
        """

    @abstractmethod
    async def get(self, namespace: str, ids: Sequence[str]) -> list[MemoryRecord]:
        """The records of ``namespace`` with these ids that exist and have not expired."""

    @abstractmethod
    async def delete(self, namespace: str, ids: Sequence[str]) -> int:
        """Delete records; returns how many existed."""

    @abstractmethod
    async def search(self, query: MemoryQuery) -> MemorySearch:
        """The records that best match ``query``."""

    @abstractmethod
    async def namespaces(self) -> list[str]:
        """The namespaces that hold records, sorted."""

    @abstractmethod
    async def forget(self, *, now: datetime | None = None) -> int:
        """Delete expired records and enforce every namespace's cap; returns how many went."""

    async def put(self, record: MemoryRecord) -> str:
        """Store one record; returns its id."""
        return (await self.upsert([record]))[0]

    async def find(self, namespace: str, text: str, *, limit: int = 5) -> list[MemoryRecord]:
        """The records of ``namespace`` that best match ``text`` (a hybrid search)."""
        found = await self.search(MemoryQuery(namespace=namespace, text=text, limit=limit))
        return list(found.records)

    async def close(self) -> None:  # noqa: B027 - a backend that holds nothing keeps this
        """Release what the backend holds (connections, threads)."""
