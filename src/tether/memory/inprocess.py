"""Memory held in this process (tests and small runs): gone when the process ends."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import UTC, datetime

from tether.memory.base import Memory, MemoryQuery, MemoryRecord, MemorySearch, moment, replaced
from tether.memory.embedder import Embedder
from tether.memory.ranking import (
    bm25_ranking,
    caps_of,
    cosine,
    embedded,
    evictions,
    fuse,
    held_by,
    other_vectors,
)
from tether.memory.ranking import probe as probe_of

__all__ = ["InProcessMemory"]


class InProcessMemory(Memory):
    """Records in a dict; search scans them (fine up to some thousands per namespace).

    ``embedder``: what gives records and queries their vectors (none: keyword search only).
    ``caps``: the most records a namespace keeps (least important, then oldest, go first).
    """

    def __init__(
        self,
        *,
        embedder: Embedder | None = None,
        caps: Mapping[str, int] | None = None,
    ) -> None:
        self.embedder = embedder
        self.caps = caps_of(caps)
        self._records: dict[str, dict[str, MemoryRecord]] = {}

    async def upsert(self, records: Sequence[MemoryRecord]) -> list[str]:
        """Store records (see ``Memory.upsert``)."""
        ready = await embedded(records, self.embedder)
        now = datetime.now(UTC)
        touched: set[str] = set()
        for record in ready:
            space = self._records.setdefault(record.namespace, {})
            old = space.get(record.id)
            created = old.created if old is not None and not old.expired(now) else None
            space[record.id] = replaced(record, created=created or record.created or now)
            touched.add(record.namespace)
        for namespace in touched:
            self._cap(namespace)
        return [r.id for r in ready]

    async def get(self, namespace: str, ids: Sequence[str]) -> list[MemoryRecord]:
        """The live records with these ids (see ``Memory.get``)."""
        now = datetime.now(UTC)
        space = self._records.get(namespace, {})
        found = (space.get(i) for i in dict.fromkeys(ids))
        return [r for r in found if r is not None and not r.expired(now)]

    async def delete(self, namespace: str, ids: Sequence[str]) -> int:
        """Delete records (see ``Memory.delete``)."""
        space = self._records.get(namespace, {})
        gone = sum(space.pop(i, None) is not None for i in set(ids))
        if not space:
            self._records.pop(namespace, None)
        return gone

    async def search(self, query: MemoryQuery) -> MemorySearch:
        """Rank by BM25 and by cosine, fused (see ``Memory.search``)."""
        now = datetime.now(UTC)
        space = self._records.get(query.namespace, {})
        mode, warning, probe, model, pool = other_vectors(
            await probe_of(query, self.embedder),
            (held_by(r) for r in space.values()),
            query.namespace,
        )
        candidates = list(space.values())
        candidates = [r for r in candidates if query.admits(r, now)]
        keyword = bm25_ranking(query.text, candidates)[:pool] if mode != "vector" else []
        vector: list[MemoryRecord] = []
        if probe is not None:
            name = model
            scored = [
                (cosine(probe, r.embedding), r)
                for r in candidates
                if r.embedding is not None
                and r.embedding_model == name
                and len(r.embedding) == len(probe)
            ]
            scored = [s for s in scored if s[0] > query.min_similarity]
            scored.sort(key=lambda s: (-s[0], s[1].id))
            vector = [r for _, r in scored[:pool]]
        return MemorySearch(
            hits=tuple(fuse(keyword, vector, query.limit)), mode=mode, warning=warning
        )

    async def namespaces(self) -> list[str]:
        """The namespaces that hold records, sorted."""
        return sorted(n for n, space in self._records.items() if space)

    async def forget(self, *, now: datetime | None = None) -> int:
        """Delete expired records and enforce caps (see ``Memory.forget``)."""
        at = moment(now)
        gone = 0
        for namespace in list(self._records):
            space = self._records[namespace]
            expired = [i for i, r in space.items() if r.expired(at)]
            for i in expired:
                del space[i]
            gone += len(expired) + self._cap(namespace, at)
        return gone

    def _cap(self, namespace: str, now: datetime | None = None) -> int:
        """Enforce the namespace's cap on its live records (the expired go first, uncounted)."""
        cap = self.caps.get(namespace)
        space = self._records.get(namespace, {})
        if cap is None or len(space) <= cap:
            return 0
        at = now or datetime.now(UTC)
        expired = [i for i, r in space.items() if r.expired(at)]
        for i in expired:
            del space[i]
        dropped = evictions(
            (
                (r.id, r.importance, r.created.timestamp() if r.created else 0.0)
                for r in space.values()
            ),
            cap,
        )
        for i in dropped:
            del space[i]
        return len(expired) + len(dropped)
