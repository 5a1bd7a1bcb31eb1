"""Cutting text without leaving a piece of a word (a cut secret) at its end."""

from __future__ import annotations

from tether._internal.textcut import cut_clean


def test_a_cut_drops_the_word_it_falls_in_and_keeps_the_rest() -> None:
    assert cut_clean("short", 10) == "short"
    assert cut_clean("one two three", 9) == "one two "  # "thr" went
    assert cut_clean("one two three", 8) == "one two "  # at a space: nothing to drop
    assert cut_clean("one\ttwo\nthree", 11) == "one\ttwo\n"
    assert cut_clean("x" * 20, 10) == "x" * 10  # one short token: kept as cut
    long = "y" * 10_000
    assert cut_clean(long, 9_000) == "y" * (9_000 - 4_096)  # the look-back is bounded
    assert cut_clean("a " + "z" * 5_000, 4_500) == "a " + "z" * (4_500 - 4_096 - 2)
