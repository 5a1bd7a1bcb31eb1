"""The OpenAI-compatible embedder against a REAL server: llama.cpp's, serving embeddings."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any, cast

import pytest

from tether.errors import ModelError
from tether.memory import MemoryQuery, MemoryRecord, OpenAIEmbedder, SqliteMemory
from tether.memory.ranking import cosine

pytestmark = [pytest.mark.real_model, pytest.mark.timeout(600)]


@pytest.fixture(scope="module")
def embedding_server(model_path: Path) -> Iterator[str]:
    """llama.cpp's server in embedding mode (mean pooling) on the embedded model's file."""
    import xllamacpp  # pyright: ignore[reportMissingTypeStubs]

    xll = cast(Any, xllamacpp)
    params = xll.CommonParams()
    params.model.path = str(model_path)
    params.model_alias = {"embedder"}
    params.n_ctx = 2048
    params.embedding = True
    params.pooling_type = xll.llama_pooling_type.LLAMA_POOLING_TYPE_MEAN
    params.verbosity = -1
    server = xll.Server(params)
    yield str(server.listening_address).rstrip("/") + "/v1"
    del server


async def test_vectors_come_back_one_per_text_in_order(embedding_server: str) -> None:
    embedder = OpenAIEmbedder("embedder", base_url=embedding_server, batch_size=2)
    try:
        texts = ["a cat", "a kitten", "the bond market", "a cat"]
        vectors = await embedder.embed(texts)
        assert len(vectors) == 4
        assert len({len(v) for v in vectors}) == 1
        assert cosine(vectors[0], vectors[3]) > 0.9999  # batches of 2, order kept
        assert cosine(vectors[0], vectors[1]) > cosine(vectors[0], vectors[2])
    finally:
        await embedder.aclose()


async def test_memory_searches_with_the_servers_vectors(
    embedding_server: str, tmp_path: Path
) -> None:
    embedder = OpenAIEmbedder("embedder", base_url=embedding_server)
    memory = SqliteMemory(tmp_path / "m.db", embedder=embedder)
    try:
        await memory.upsert(
            [
                MemoryRecord(namespace="ns", text="def add(a, b): return a + b", id="code"),
                MemoryRecord(namespace="ns", text="Paris is the capital of France", id="geo"),
            ]
        )
        found = await memory.search(
            MemoryQuery(namespace="ns", text="python function", mode="vector")
        )
        assert found.mode == "vector"
        assert {r.embedding_model for r in found.records} == {"openai:embedder"}
    finally:
        await memory.close()
        await embedder.aclose()


async def test_a_server_that_is_not_there_is_a_model_error() -> None:
    embedder = OpenAIEmbedder("embedder", base_url="http://127.0.0.1:1/v1", timeout=2)
    with pytest.raises(ModelError, match="failed"):
        await embedder.embed(["x"])
    await embedder.aclose()
