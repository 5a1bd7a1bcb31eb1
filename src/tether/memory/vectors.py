"""Exact nearest-vector search with numpy over one namespace's stored vectors."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from tether.errors import MissingExtraError

if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt

__all__ = ["VectorMatrix", "nearest_rows"]


def _numpy() -> Any:
    try:
        import numpy
    except ImportError:
        raise MissingExtraError("memory", "numpy") from None
    return numpy


class VectorMatrix:
    """One namespace's vectors of one model, normalized, with their rows' ids and expiry."""

    __slots__ = ("expires", "rowids", "vectors")

    def __init__(
        self,
        rowids: npt.NDArray[np.int64],
        vectors: npt.NDArray[np.float32],
        expires: npt.NDArray[np.float64],
    ) -> None:
        self.rowids = rowids
        self.vectors = vectors
        self.expires = expires

    @classmethod
    def of(cls, rows: Sequence[Sequence[Any]], dims: int) -> VectorMatrix | None:
        """From ``(rowid, float32 bytes, expires or None)`` rows (``None`` for no rows)."""
        if not rows:
            return None
        np = _numpy()
        vectors = np.frombuffer(b"".join(bytes(r[1]) for r in rows), dtype=np.float32)
        vectors = vectors.reshape(len(rows), dims)
        norms = np.linalg.norm(vectors, axis=1, keepdims=True)
        vectors = (vectors / np.where(norms == 0, 1, norms)).astype(np.float32, copy=False)
        rowids = np.fromiter((r[0] for r in rows), dtype=np.int64, count=len(rows))
        expires = np.fromiter(
            (np.nan if r[2] is None else r[2] for r in rows), dtype=np.float64, count=len(rows)
        )
        return cls(rowids, vectors, expires)


def nearest_rows(
    matrix: VectorMatrix,
    probe: Sequence[float],
    now: float,
    min_similarity: float,
    take: int,
    allowed: Sequence[int] | None = None,
) -> list[int]:
    """The row ids of the ``take`` live vectors nearest ``probe`` (above ``min_similarity``).

    ``allowed``: only these row ids (the query's other filters), when given.
    """
    np = _numpy()
    q = np.asarray(probe, dtype=np.float32)
    norm = float(np.linalg.norm(q))
    if norm == 0.0 or take <= 0:
        return []
    scores = matrix.vectors @ (q / norm)
    live = np.isnan(matrix.expires) | (matrix.expires > now)
    if allowed is not None:
        live &= np.isin(matrix.rowids, np.asarray(allowed, dtype=np.int64))
    scores = np.where(live & (scores > min_similarity), scores, -np.inf)
    take = min(take, len(scores))
    top = np.argpartition(-scores, take - 1)[:take]
    top = top[np.argsort(-scores[top], kind="stable")]
    return [int(matrix.rowids[i]) for i in top if np.isfinite(scores[i])]
