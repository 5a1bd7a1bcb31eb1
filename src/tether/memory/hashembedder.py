"""A test double: words hashed into a vector (no model; similar words are not similar)."""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence

from tether.memory.embedder import Embedder
from tether.memory.ranking import words

__all__ = ["HashEmbedder"]


class HashEmbedder(Embedder):
    """Each word adds 1 at a place its hash picks; ``synonyms`` maps words onto others.

    Deterministic across processes. Two texts are near when they share words (or synonyms),
    which is what tests of vector search need; it knows no meaning.
    """

    def __init__(self, dimensions: int = 256, *, synonyms: Mapping[str, str] | None = None) -> None:
        self.dimensions = dimensions
        self.synonyms = {k.casefold(): v.casefold() for k, v in (synonyms or {}).items()}
        self.calls = 0
        """How many times ``embed`` was called."""

    @property
    def name(self) -> str:
        """``hash-<dimensions>``."""
        return f"hash-{self.dimensions}"

    async def embed(self, texts: Sequence[str]) -> list[list[float]]:
        """One vector per text."""
        self.calls += 1
        out: list[list[float]] = []
        for text in texts:
            vector = [0.0] * self.dimensions
            for word in words(text):
                word = self.synonyms.get(word, word)
                digest = hashlib.blake2b(word.encode(), digest_size=8).digest()
                vector[int.from_bytes(digest, "little") % self.dimensions] += 1.0
            out.append(vector)
        return out
