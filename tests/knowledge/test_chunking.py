"""Chunks are exact slices of their document, bounded, overlapping, and cover all of it."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from tether.errors import ConfigError
from tether.knowledge.chunking import chunk_text

_WORDS = st.sampled_from(
    ["alpha", "beta", "gamma.", "delta!", "epsilon?", "\n\n", "zeta,", "x" * 150]
)


@example(text=" ".join(["alpha", "x" * 150, "\n\n", "alpha", "x" * 150]), size=157, share=0.0)
@settings(max_examples=150, deadline=None)
@given(
    text=st.lists(_WORDS, max_size=400).map(" ".join),
    size=st.integers(min_value=100, max_value=700),
    share=st.floats(min_value=0.0, max_value=0.45),
)
def test_chunks_are_exact_bounded_slices_that_cover_the_text(
    text: str, size: int, share: float
) -> None:
    overlap = int(size * share)
    chunks = chunk_text(text, size=size, overlap=overlap)
    covered = [False] * len(text)
    for before, after in itertools.pairwise(chunks):
        assert after.start > before.start  # always moves on
        assert after.end > before.end  # and holds something new
        assert not text[before.end : after.start].strip()  # no gap but whitespace
        assert before.end - after.start <= max(overlap, 0)  # shares at most the overlap
    for i, chunk in enumerate(chunks):
        assert chunk.index == i
        assert chunk.text == text[chunk.start : chunk.end]
        assert 0 < len(chunk.text) <= size
        for at in range(chunk.start, chunk.end):
            covered[at] = True
    # every character that says something is in a chunk
    assert all(covered[i] for i, c in enumerate(text) if not c.isspace())


def test_cuts_fall_between_paragraphs_then_sentences() -> None:
    text = ("One sentence here. " * 10).strip() + "\n\n" + ("Another one there. " * 10).strip()
    chunks = chunk_text(text, size=220, overlap=0)
    assert chunks[0].text.endswith("\n\n") or chunks[0].text.endswith(". ")
    assert all(c.text.strip()[-1] == "." for c in chunks)


def test_a_fact_cut_by_one_boundary_is_whole_in_the_next_chunk() -> None:
    sentences = [f"Fact number {i} is {i * 11}." for i in range(40)]
    chunks = chunk_text(" ".join(sentences), size=200, overlap=60)
    for sentence in sentences:
        assert any(sentence in c.text for c in chunks)
    assert any(a.end > b.start for a, b in itertools.pairwise(chunks))


def test_sections_and_pages() -> None:
    text = "# Intro\n\nHello there.\n\n## Usage\n\nRun it like this." + "\n\nMore." * 50
    chunks = chunk_text(text, size=120, overlap=0, pages=(0, 60))
    assert chunks[0].section == "Intro"
    assert chunks[0].page == 1
    assert chunks[-1].section == "Usage"
    assert chunks[-1].page == 2


def test_empty_text_has_no_chunks() -> None:
    assert chunk_text("  \n\n ") == []


@pytest.mark.parametrize(("size", "overlap"), [(50, 0), (1000, 600), (1000, -1), ("big", 0)])
def test_bad_sizes_say_what_they_take(size: object, overlap: int) -> None:
    with pytest.raises(ConfigError, match="chunk"):
        chunk_text("text", size=size, overlap=overlap)  # type: ignore[arg-type]
