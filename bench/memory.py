"""Long-term memory at scale: writes per second and search latency at 10k and 100k records.

Each backend gets the same synthetic corpus: sentences of 8-20 words drawn from a Zipf
distribution over a 20,000-word vocabulary (so keyword postings are as skewed as real
text), each with a 384-dimensional unit vector (the size of all-MiniLM-L6-v2's). Records
carry their vectors, and queries are embedded by an embedder that returns a stored record's
vector plus noise, so the timing includes the embedder's call but not a model. Queries are
3-6 words of a random record (known-item search: common words and rare ones, as a user's
words are). SQLite runs in a temporary file; PostgreSQL is the server at
``$TETHER_BENCH_POSTGRES`` (default: 127.0.0.1:5432, database ``test``; ``--no-postgres``
skips it); Redis the server at ``$TETHER_BENCH_REDIS`` (default: 127.0.0.1:6379, database 0,
keys under a fresh prefix; ``--no-redis`` skips it). ``after_write`` is a write of one record
followed by a hybrid search, as a session that remembers and recalls turn by turn does: the
backends that keep a namespace's vectors (or, Redis, its records) decoded read them again.

Retrieval quality: SQuAD v1.1 dev as a retrieval set (its 2,067 paragraphs stored in a
SQLite memory with the embedded embedder, ``MiniLMEmbedder``; a seeded sample of its
questions, each answered by one paragraph; data from PyPI, see ``bench/qadata.py``), searched
hybrid, keyword-only and vector-only: recall@5 (the answering paragraph is among the first
five) and MRR@10, in percent. The 600 questions ``RRF_K`` was chosen on are never asked here.

Prints one JSON line: for each backend and size, ``put_per_s`` and search ``p50``/``p95``
in milliseconds for hybrid, keyword and vector search (limit 5); ``search_p95_ms_100k`` is
SQLite's hybrid p95 at 100k; ``recall_at_5_{hybrid,keyword,vector}`` and ``mrr_at_10_*``.
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
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))  # bench/qadata.py

from tether.memory import Embedder, InProcessMemory, Memory, MemoryQuery, MemoryRecord, SqliteMemory

DIMS = 384
REDIS = os.environ.get("TETHER_BENCH_REDIS", "redis://127.0.0.1:6379/0")
POSTGRES = os.environ.get("TETHER_BENCH_POSTGRES", "postgresql://postgres@127.0.0.1:5432/test")
"""The PostgreSQL server measured (each size in a table of its own, dropped after)."""
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
    return percentiles(times)


def percentiles(times: list[float]) -> dict[str, float]:
    times = sorted(times)
    return {
        "p50": round(statistics.median(times), 2),
        "p95": round(times[max(0, int(len(times) * 0.95) - 1)], 2),
    }


async def after_write(memory: Memory, asked: list[str], vectors: np.ndarray) -> dict[str, float]:
    """A one-record write, then a hybrid search: the turn-by-turn pattern of a session."""
    times: list[float] = []
    for i, text in enumerate(asked[:20]):
        record = MemoryRecord(
            namespace="bench",
            text=f"{text} again",
            id=f"w{i}",
            embedding=tuple(map(float, vectors[i])),
            embedding_model="bench-384",
        )
        start = time.perf_counter()
        await memory.put(record)
        await memory.search(MemoryQuery(namespace="bench", text=text))
        times.append((time.perf_counter() - start) * 1000)
    return percentiles(times)


async def measure(backend: str, size: int, directory: Path, searches: int) -> dict[str, object]:
    texts, vectors = corpus(size)
    embedder = NoisyEmbedder(vectors)
    table = f"tether_bench_{os.getpid()}_{size}"
    prefix = f"tether-bench:{os.getpid()}:{size}"
    memory: Memory
    if backend == "inprocess":
        memory = InProcessMemory(embedder=embedder)
    elif backend == "redis":
        from tether.memory import RedisMemory

        memory = RedisMemory(REDIS, prefix=prefix, embedder=embedder)
    elif backend == "postgres":
        from tether.memory import PostgresMemory

        memory = PostgresMemory(POSTGRES, table=table, embedder=embedder)
    else:
        memory = SqliteMemory(directory / f"memory-{size}.db", embedder=embedder)
    try:
        put_per_s = await fill(memory, texts, vectors)
        asked = queries(texts, searches)
        out: dict[str, object] = {"put_per_s": round(put_per_s)}
        for mode in ("hybrid", "keyword", "vector"):
            out[mode] = await latencies(memory, asked, mode)
        out["after_write"] = await after_write(memory, asked, vectors)
        return out
    finally:
        await memory.close()
        if backend == "redis":
            await drop_redis(prefix)
        if backend == "postgres":
            import psycopg
            from psycopg.sql import SQL, Identifier

            async with await psycopg.AsyncConnection.connect(POSTGRES, autocommit=True) as conn:
                await conn.execute(
                    SQL("DROP TABLE IF EXISTS {}, {}").format(
                        Identifier(table), Identifier(f"{table}_versions")
                    )
                )


async def drop_redis(prefix: str) -> None:
    import redis.asyncio

    client: Any = redis.asyncio.Redis.from_url(REDIS)  # pyright: ignore[reportUnknownMemberType]
    try:
        keys: list[Any] = [k async for k in client.scan_iter(match=f"{prefix}:*", count=5000)]
        for at in range(0, len(keys), 5000):
            await client.delete(*keys[at : at + 5000])
    finally:
        await client.aclose()


async def quality(directory: Path, questions_n: int, seed: int = 5) -> dict[str, object]:
    """recall@5 and MRR@10 on SQuAD v1.1 dev (question -> its paragraph), per search mode."""
    from qadata import squad_retrieval

    from tether.memory import MiniLMEmbedder

    passages, questions, gold = squad_retrieval()
    memory = SqliteMemory(directory / "squad.db", embedder=MiniLMEmbedder())
    try:
        start = time.perf_counter()
        ids = list(passages)
        for at in range(0, len(ids), 64):
            await memory.upsert(
                [MemoryRecord(namespace="squad", text=passages[i], id=i) for i in ids[at : at + 64]]
            )
        indexed_s = time.perf_counter() - start
        held_out = set(random.Random(1).sample(sorted(questions), 600))  # RRF_K was tuned on these
        rest = sorted(set(questions) - held_out)
        asked = random.Random(seed).sample(rest, min(questions_n, len(rest)))
        out: dict[str, object] = {
            "quality_set": "squad-v1.1-dev",
            "quality_passages": len(passages),
            "quality_questions": len(asked),
            "quality_index_s": round(indexed_s, 1),
        }
        for mode in ("hybrid", "keyword", "vector"):
            found5 = 0
            reciprocal = 0.0
            for qid in asked:
                query = MemoryQuery(namespace="squad", text=questions[qid], mode=mode, limit=10)  # pyright: ignore[reportArgumentType]
                ranked = [r.id for r in (await memory.search(query)).records]
                if gold[qid] in ranked[:5]:
                    found5 += 1
                if gold[qid] in ranked:
                    reciprocal += 1 / (ranked.index(gold[qid]) + 1)
            out[f"recall_at_5_{mode}"] = round(100 * found5 / len(asked), 1)
            out[f"mrr_at_10_{mode}"] = round(100 * reciprocal / len(asked), 1)
        return out
    finally:
        await memory.close()


async def main(
    sizes: list[int],
    searches: int,
    inprocess_max: int,
    questions: int,
    postgres: bool,
    redis_max: int,
) -> dict[str, object]:
    results: dict[str, object] = {}
    with tempfile.TemporaryDirectory() as directory:
        if questions > 0:
            results.update(await quality(Path(directory), questions))
        for size in sizes:
            results[f"sqlite_{size}"] = await measure("sqlite", size, Path(directory), searches)
            if size <= inprocess_max:
                results[f"inprocess_{size}"] = await measure(
                    "inprocess", size, Path(directory), searches
                )
            if postgres:
                results[f"postgres_{size}"] = await measure(
                    "postgres", size, Path(directory), searches
                )
            if size <= redis_max:
                results[f"redis_{size}"] = await measure("redis", size, Path(directory), searches)
    return results


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--sizes", default="10000,100000", help="record counts, comma-separated")
    parser.add_argument("--searches", type=int, default=200, help="queries per mode")
    parser.add_argument(
        "--inprocess-max", type=int, default=10_000, help="largest size run in-process"
    )
    parser.add_argument(
        "--questions", type=int, default=1000, help="SQuAD questions for quality (0: none)"
    )
    parser.add_argument("--no-postgres", action="store_true", help=f"skip PostgreSQL ({POSTGRES})")
    parser.add_argument(
        "--redis-max",
        type=int,
        default=100_000,
        help=f"largest size run on Redis ({REDIS}); 0: none",
    )
    args = parser.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    found = asyncio.run(
        main(
            sizes,
            args.searches,
            args.inprocess_max,
            args.questions,
            not args.no_postgres,
            args.redis_max,
        )
    )
    largest = found.get("sqlite_100000")
    line = {
        "bench": "memory",
        "dims": DIMS,
        "searches": args.searches,
        "load": os.getloadavg()[0],
        **found,
        "search_p95_ms_100k": largest["hybrid"]["p95"] if isinstance(largest, dict) else None,  # pyright: ignore[reportUnknownMemberType]
    }
    print(json.dumps(line))
    sys.exit(0)
