"""The embedder port: texts in, vectors out (what vector search compares)."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence

__all__ = ["Embedder"]


class Embedder(ABC):
    """Turns texts into vectors of one length; implementations say which model they run."""

    @property
    @abstractmethod
    def name(self) -> str:
        """The model's name (records remember it: vectors of two models are never compared)."""

    @abstractmethod
    async def embed(self, texts: Sequence[str]) -> list[list[float]]:
        """One vector per text, in order, all of one length."""
