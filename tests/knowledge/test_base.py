"""A knowledge base indexes documents into a real memory and finds checkable passages."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from tether.errors import ConfigError
from tether.knowledge import Document, KnowledgeBase
from tether.memory import InProcessMemory, Memory, SqliteMemory
from tether.testing import HashEmbedder

PARIS = Document(
    source="guide/paris.md",
    title="Paris",
    text="# Paris\n\n"
    + "The Louvre is the most visited museum in the world. " * 3
    + "\n\n## Food\n\n"
    + "Croissants are best from a bakery before nine in the morning. " * 3,
)
ROME = Document(
    source="guide/rome.md",
    text="# Rome\n\n" + "The Colosseum held about fifty thousand spectators. " * 4,
)


@pytest.fixture(params=["inprocess", "sqlite"])
async def memory(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Memory]:
    made: Memory = (
        InProcessMemory(embedder=HashEmbedder())
        if request.param == "inprocess"
        else SqliteMemory(tmp_path / "kb.db", embedder=HashEmbedder())
    )
    yield made
    await made.close()


async def test_a_search_finds_the_passage_and_where_it_is(memory: Memory) -> None:
    kb = KnowledgeBase(memory, chunk_size=200, overlap=40)
    await kb.add_all([PARIS, ROME])
    found = await kb.search("When should I buy croissants?", limit=3)
    best = found[0]
    assert "Croissants" in best.text
    assert best.source == "guide/paris.md"
    assert best.section == "Food"
    assert best.title == "Paris"
    assert PARIS.text[best.start : best.end] == best.text  # a checkable citation
    assert [p.id for p in await kb.passages([best.id])] == [best.id]


async def test_adding_again_replaces_and_an_unchanged_document_is_left(memory: Memory) -> None:
    kb = KnowledgeBase(memory, chunk_size=200, overlap=40)
    first = await kb.add(PARIS)
    assert len(first) >= 2
    assert await kb.add(PARIS) == first
    shorter = Document(source=PARIS.source, text="# Paris\n\nThe Seine crosses the city.")
    second = await kb.add(shorter)
    assert len(second) == 1
    assert [p.id for p in await kb.passages(first)] == second  # the stale chunks are gone
    found = await kb.search("Louvre museum")
    assert all(p.source != PARIS.source or "Louvre" not in p.text for p in found)


async def test_a_document_is_removed_whole(memory: Memory) -> None:
    kb = KnowledgeBase(memory, chunk_size=200, overlap=40)
    ids = await kb.add(PARIS)
    await kb.add(ROME)
    assert await kb.remove(PARIS.source) == len(ids)
    assert {p.source for p in await kb.search("museum croissants Colosseum", limit=10)} == {
        ROME.source
    }


async def test_a_file_is_read_and_indexed(memory: Memory, tmp_path: Path) -> None:
    page = tmp_path / "faq.html"
    page.write_text("<title>FAQ</title><h2>Refunds</h2><p>Refunds take ten days.</p>")
    kb = KnowledgeBase(memory)
    await kb.add(page)
    (hit,) = await kb.search("how long do refunds take", limit=1)
    assert hit.text.endswith("Refunds take ten days.")
    assert hit.section == "Refunds"
    assert hit.source == str(page)


def test_a_knowledge_base_needs_a_memory() -> None:
    with pytest.raises(ConfigError, match="Memory"):
        KnowledgeBase("memory.db")  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="chunk"):
        KnowledgeBase(InProcessMemory(), chunk_size=10)


async def test_an_add_cut_short_is_repaired_by_adding_again(memory: Memory) -> None:
    kb = KnowledgeBase(memory, chunk_size=200, overlap=40)
    ids = await kb.add(PARIS)
    await memory.delete(kb.namespace, ids[-1:])  # as if the last batch never landed
    assert await kb.add(PARIS) == ids
    assert [p.id for p in await kb.passages(ids)] == ids


async def test_a_document_embedded_by_another_model_is_embedded_again(tmp_path: Path) -> None:
    # an unchanged document was left as it was: its chunks kept the old model's vectors, which
    # a search with the new embedder never compares, so vector search found none of them
    doc = Document(source="h.md", text="# Leave\n\nStaff get 25 days of paid leave a year.")
    old = SqliteMemory(tmp_path / "kb.db", embedder=HashEmbedder(256))
    await KnowledgeBase(old).add(doc)
    await old.close()
    new = SqliteMemory(tmp_path / "kb.db", embedder=HashEmbedder(64, synonyms={"holiday": "leave"}))
    kb = KnowledgeBase(new)
    await kb.add(doc)
    found = await kb.search("holiday")  # a word only the new model's vectors connect
    assert [p.source for p in found] == ["h.md"]
    await new.close()
