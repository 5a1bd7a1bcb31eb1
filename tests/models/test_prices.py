"""The price table: exact names, dated snapshots, and unknown prices as unknown (never 0)."""

from __future__ import annotations

import pytest

from tether.models.prices import PRICES, Price, cost_of, price_of


@pytest.mark.parametrize(
    ("model", "family"),
    [
        ("gpt-4o", "gpt-4o"),
        ("gpt-4o-mini", "gpt-4o-mini"),
        ("gpt-4o-mini-2024-07-18", "gpt-4o-mini"),
        ("gpt-4o-2024-08-06", "gpt-4o"),
        ("claude-sonnet-4-5-20250929", "claude-sonnet-4-5"),
        ("claude-3-5-haiku-latest", "claude-3-5-haiku"),
        ("claude-opus-4-1-20250805", "claude-opus-4-1"),
    ],
)
def test_a_snapshot_costs_what_its_family_costs(model: str, family: str) -> None:
    assert price_of(model) == PRICES[family]


@pytest.mark.parametrize(
    "model",
    [
        "qwen2.5-coder:1.5b",
        "gpt-4o-realtime-preview",
        "my-finetune",
        "gpt-4",
        "",
        "claude-opus-4-6",  # a later model, not a snapshot of Opus 4
        "claude-sonnet-4-6-20260101",
        "gpt-5-2",
    ],
)
def test_an_unknown_model_has_an_unknown_cost(model: str) -> None:
    assert price_of(model) is None
    assert cost_of(model, 1000, 1000) is None


def test_the_cost_of_a_request() -> None:
    assert cost_of("gpt-4o-mini", 1_000_000, 1_000_000) == pytest.approx(0.15 + 0.60)
    assert cost_of("claude-sonnet-4-5", 2000, 500) == pytest.approx(0.006 + 0.0075)


def test_a_given_price_overrides_the_table() -> None:
    mine = Price(input_per_mtok=1.0, output_per_mtok=2.0)
    assert cost_of("anything", 1_000_000, 500_000, price=mine) == pytest.approx(2.0)
    assert cost_of("gpt-4o", 1_000_000, 0, price=mine) == pytest.approx(1.0)
