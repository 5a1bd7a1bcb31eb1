"""``KnowledgeBase``: documents chunked with their offsets and indexed into a ``Memory``.

Each chunk is a record of the memory (hybrid search: keywords and, with an embedder, vectors)
whose id names the document and the chunk's place in it, and whose metadata holds the
source, the offsets, the section and the page: a passage found is a checkable citation.
Adding a document again replaces its chunks (an unchanged one is left as it is).
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from pathlib import Path

from tether.errors import ConfigError
from tether.jsontypes import JsonObject
from tether.knowledge.chunking import chunk_text
from tether.knowledge.documents import Document, read_document
from tether.knowledgeevents import Passage
from tether.memory.base import Memory, MemoryQuery, MemoryRecord, SearchMode

__all__ = ["KnowledgeBase", "Passage"]

_PROBE = 64
"""Chunk ids probed at a time when a shorter version of a document replaces a longer one."""


def _key(source: str) -> str:
    return hashlib.sha256(source.encode()).hexdigest()[:16]


def _passage(record: MemoryRecord, score: float) -> Passage | None:
    meta = record.metadata
    source, start, end = meta.get("source"), meta.get("start"), meta.get("end")
    if not isinstance(source, str) or not isinstance(start, int) or not isinstance(end, int):
        return None  # not a chunk (another writer's record in the namespace)
    section, page, title = meta.get("section"), meta.get("page"), meta.get("title")
    return Passage(
        id=record.id,
        text=record.text,
        source=source,
        start=start,
        end=end,
        score=score,
        section=section if isinstance(section, str) else None,
        page=page if isinstance(page, int) else None,
        title=title if isinstance(title, str) else None,
    )


class KnowledgeBase:
    """Documents for an agent to search and cite, kept in ``memory`` under ``namespace``."""

    def __init__(
        self,
        memory: Memory,
        *,
        namespace: str = "knowledge",
        chunk_size: int = 1000,
        overlap: int = 150,
    ) -> None:
        if not isinstance(memory, Memory):  # pyright: ignore[reportUnnecessaryIsInstance] - user input
            raise ConfigError(f"KnowledgeBase takes a Memory, not {type(memory).__name__}")
        chunk_text("x", size=chunk_size, overlap=overlap)  # the sizes are checked now
        self.memory = memory
        self.namespace = namespace
        self.chunk_size = chunk_size
        self.overlap = overlap

    async def add(self, document: Document | str | Path) -> list[str]:
        """Chunk and index ``document`` (a ``Document``, or a file's path); its chunk ids."""
        if not isinstance(document, Document):
            document = read_document(document)
        chunks = chunk_text(
            document.text, size=self.chunk_size, overlap=self.overlap, pages=document.pages
        )
        key = _key(document.source)
        digest = hashlib.sha256(
            f"{self.chunk_size}:{self.overlap}:{document.title}:{document.pages}\0"
            f"{document.text}".encode()
        ).hexdigest()
        ids = [f"{key}-{c.index:05d}" for c in chunks]
        if ids:  # unchanged and whole (an add cut short leaves its last chunk or a stale one)
            probe = list(dict.fromkeys([ids[0], ids[-1], f"{key}-{len(ids):05d}"]))
            existing = {r.id: r for r in await self.memory.get(self.namespace, probe)}
            embedder = self.memory.embedder
            model = None if embedder is None else embedder.name
            if (
                all(existing.get(i) is not None for i in probe[:-1])
                and all(existing[i].metadata.get("digest") == digest for i in probe[:-1])
                and all(model in (None, existing[i].embedding_model) for i in probe[:-1])
                and probe[-1] not in existing
            ):
                return ids  # nothing to do (embedded by another model: done again)
        records: list[MemoryRecord] = []
        for chunk, chunk_id in zip(chunks, ids, strict=True):
            metadata: JsonObject = {
                "source": document.source,
                "start": chunk.start,
                "end": chunk.end,
                "chunk": chunk.index,
                "digest": digest,
            }
            if chunk.section is not None:
                metadata["section"] = chunk.section
            if chunk.page is not None:
                metadata["page"] = chunk.page
            if document.title is not None:
                metadata["title"] = document.title
            records.append(
                MemoryRecord(
                    namespace=self.namespace,
                    text=chunk.text,
                    id=chunk_id,
                    kind="semantic",
                    metadata=metadata,
                )
            )
        for at in range(0, len(records), 256):
            await self.memory.upsert(records[at : at + 256])
        await self._drop_from(key, len(chunks))
        return ids

    async def add_all(self, documents: Sequence[Document | str | Path]) -> list[str]:
        """``add`` each; every chunk id, in order."""
        ids: list[str] = []
        for document in documents:
            ids += await self.add(document)
        return ids

    async def remove(self, source: str) -> int:
        """Forget the document ``source``; how many chunks it had."""
        return await self._drop_from(_key(source), 0)

    async def _drop_from(self, key: str, first: int) -> int:
        """Delete the document's chunks from ``first`` on (they are numbered without gaps)."""
        dropped = 0
        while True:
            ids = [f"{key}-{i:05d}" for i in range(first, first + _PROBE)]
            found = [r.id for r in await self.memory.get(self.namespace, ids)]
            if not found:
                return dropped
            dropped += await self.memory.delete(self.namespace, found)
            first += _PROBE

    async def search(
        self, query: str, *, limit: int = 5, mode: SearchMode = "hybrid"
    ) -> list[Passage]:
        """The passages that best match ``query``, best first."""
        found = await self.memory.search(
            MemoryQuery(namespace=self.namespace, text=query, limit=limit, mode=mode)
        )
        passages = [_passage(hit.record, hit.score) for hit in found.hits]
        return [p for p in passages if p is not None]

    async def passages(self, ids: Sequence[str]) -> list[Passage]:
        """The chunks with these ids (what a citation is checked against)."""
        records = await self.memory.get(self.namespace, list(ids))
        passages = [_passage(r, 0.0) for r in records]
        return [p for p in passages if p is not None]
