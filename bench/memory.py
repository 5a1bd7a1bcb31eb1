"""Long-term memory at scale: writes per second and search latency at 10k and 100k records.

Each backend gets the same synthetic corpus: sentences of 8-20 words drawn from a Zipf
distribution over a 20,000-word vocabulary (so keyword postings are as skewed as real
text), each with a 384-dimensional unit vector (the size of all-MiniLM-L6-v2's). Records
carry their vectors, and queries are embedded by an embedder that returns a stored record's
vector plus noise, so the timing includes the embedder's call but not a model. Queries are
3-6 words of a random record (known-item search: common words and rare ones, as a user's
words are). SQLite runs in a temporary file.

Prints one JSON line: for each backend and size, ``put_per_s`` and search ``p50``/``p95``
in milliseconds for hybrid, keyword and vector search (limit 5); ``search_p95_ms_100k`` is
SQLite's hybrid p95 at 100k. The retrieval-quality keys (``recall_at_5_*``) are ``null``:
they need a real embedder and a labelled set, which this bench does not have yet.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import statistics
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from tether.memory import Embedder, InProcessMemory, Memory, MemoryQuery, MemoryRecord, SqliteMemory

DIMS = 384
VOCABULARY = 20_000
BATCH = 1_000


class NoisyEmbedder(Embedder):
    """Embeds a query as a known vector plus noise (a stand-in for a model's call)."""

    def __init__(self, vectors: np.ndarray, seed: int = 7) -> None:
        self._vectors = vectors
        self._rng = np.random.default_rng(seed)

    @property
    def name(self) -> str:
        return "bench-384"

    async def embed(self, texts: Sequence[str]) -> list[list[float]]:
        rows = self._rng.integers(0, len(self._vectors), size=len(texts))
        noisy = self._vectors[rows] + self._rng.normal(0, 0.05, size=(len(texts), DIMS))
        return [list(map(float, row)) for row in noisy.astype(np.float32)]


def corpus(size: int, seed: int = 11) -> tuple[list[str], np.ndarray]:
    rng = np.random.default_rng(seed)
    words = [f"w{i}" for i in range(VOCABULARY)]
    lengths = rng.integers(8, 21, size=size)
    picks = np.minimum(rng.zipf(1.3, size=int(lengths.sum())), VOCABULARY) - 1
    texts: list[str] = []
    at = 0
    for n in lengths:
        texts.append(" ".join(words[i] for i in picks[at : at + n]))
        at += n
    vectors = rng.normal(size=(size, DIMS)).astype(np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    return texts, vectors


def queries(texts: list[str], count: int, seed: int = 13) -> list[str]:
    """Known-item queries: 3-6 words of a random record, in a random order."""
    rng = random.Random(seed)
    out: list[str] = []
    for _ in range(count):
        words = texts[rng.randrange(len(texts))].split()
        out.append(" ".join(rng.sample(words, min(len(words), rng.randint(3, 6)))))
    return out


async def fill(memory: Memory, texts: list[str], vectors: np.ndarray) -> float:
    """Puts every record in batches; returns records per second."""
    start = time.perf_counter()
    for at in range(0, len(texts), BATCH):
        await memory.upsert(
            [
                MemoryRecord(
                    namespace="bench",
                    text=texts[i],
                    id=f"r{i}",
                    embedding=tuple(map(float, vectors[i])),
                    embedding_model="bench-384",
                )
                for i in range(at, min(at + BATCH, len(texts)))
            ]
        )
    return len(texts) / (time.perf_counter() - start)


async def latencies(memory: Memory, asked: list[str], mode: str) -> dict[str, float]:
    for text in asked[:5]:  # warm: the vector matrix is built by the first vector search
        await memory.search(MemoryQuery(namespace="bench", text=text, mode=mode))  # pyright: ignore[reportArgumentType]
    times: list[float] = []
    for text in asked:
        start = time.perf_counter()
        await memory.search(MemoryQuery(namespace="bench", text=text, mode=mode))  # pyright: ignore[reportArgumentType]
        times.append((time.perf_counter() - start) * 1000)
    times.sort()
    return {
        "p50": round(statistics.median(times), 2),
        "p95": round(times[int(len(times) * 0.95) - 1], 2),
    }


async def measure(backend: str, size: int, directory: Path, searches: int) -> dict[str, object]:
    texts, vectors = corpus(size)
    embedder = NoisyEmbedder(vectors)
    memory: Memory = (
        InProcessMemory(embedder=embedder)
        if backend == "inprocess"
        else SqliteMemory(directory / f"memory-{size}.db", embedder=embedder)
    )
    try:
        put_per_s = await fill(memory, texts, vectors)
        asked = queries(texts, searches)
        out: dict[str, object] = {"put_per_s": round(put_per_s)}
        for mode in ("hybrid", "keyword", "vector"):
            out[mode] = await latencies(memory, asked, mode)
        return out
    finally:
        await memory.close()


async def main(sizes: list[int], searches: int, inprocess_max: int) -> dict[str, object]:
    results: dict[str, object] = {}
    with tempfile.TemporaryDirectory() as directory:
        for size in sizes:
            results[f"sqlite_{size}"] = await measure("sqlite", size, Path(directory), searches)
            if size <= inprocess_max:
                results[f"inprocess_{size}"] = await measure(
                    "inprocess", size, Path(directory), searches
                )
    return results


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--sizes", default="10000,100000", help="record counts, comma-separated")
    parser.add_argument("--searches", type=int, default=200, help="queries per mode")
    parser.add_argument(
        "--inprocess-max", type=int, default=10_000, help="largest size run in-process"
    )
    args = parser.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    found = asyncio.run(main(sizes, args.searches, args.inprocess_max))
    largest = found.get("sqlite_100000")
    line = {
        "bench": "memory",
        "dims": DIMS,
        "searches": args.searches,
        "load": os.getloadavg()[0],
        **found,
        "search_p95_ms_100k": largest["hybrid"]["p95"] if isinstance(largest, dict) else None,  # pyright: ignore[reportUnknownMemberType]
        "recall_at_5_hybrid": None,
        "recall_at_5_keyword": None,
        "recall_at_5_vector": None,
    }
    print(json.dumps(line))
    sys.exit(0)
