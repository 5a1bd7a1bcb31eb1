"""Prices of well-known models, and the cost of one request.

A model missing from the table has an unknown price: its requests cost ``None`` (unknown),
never 0.0, and a run's ``max_cost`` cannot be enforced for it (the outcome says so). Pass
``price=Price(...)`` to an adapter to set or override a price. Models that run on your own
machine (``local:``, ``ollama:``) cost 0.0: there is no one to pay.

Prices are US dollars per million tokens, as published by the providers (checked 2025-11;
they change: override them when they do).
"""

from __future__ import annotations

import re

from tether._internal.frozen import frozen

__all__ = ["PRICES", "Price", "cost_of", "price_of"]


@frozen
class Price:
    """US dollars per million input and output tokens."""

    input_per_mtok: float
    """Per million prompt tokens."""
    output_per_mtok: float
    """Per million generated tokens."""

    def cost(self, input_tokens: int, output_tokens: int) -> float:
        """The cost of one request."""
        return (input_tokens * self.input_per_mtok + output_tokens * self.output_per_mtok) / 1e6


PRICES: dict[str, Price] = {
    # OpenAI
    "gpt-5": Price(input_per_mtok=1.25, output_per_mtok=10.0),
    "gpt-5-mini": Price(input_per_mtok=0.25, output_per_mtok=2.0),
    "gpt-5-nano": Price(input_per_mtok=0.05, output_per_mtok=0.40),
    "gpt-4.1": Price(input_per_mtok=2.0, output_per_mtok=8.0),
    "gpt-4.1-mini": Price(input_per_mtok=0.40, output_per_mtok=1.60),
    "gpt-4.1-nano": Price(input_per_mtok=0.10, output_per_mtok=0.40),
    "gpt-4o": Price(input_per_mtok=2.50, output_per_mtok=10.0),
    "gpt-4o-mini": Price(input_per_mtok=0.15, output_per_mtok=0.60),
    "o3": Price(input_per_mtok=2.0, output_per_mtok=8.0),
    "o4-mini": Price(input_per_mtok=1.10, output_per_mtok=4.40),
    # Anthropic
    "claude-opus-4-5": Price(input_per_mtok=5.0, output_per_mtok=25.0),
    "claude-opus-4-1": Price(input_per_mtok=15.0, output_per_mtok=75.0),
    "claude-opus-4": Price(input_per_mtok=15.0, output_per_mtok=75.0),
    "claude-sonnet-4-5": Price(input_per_mtok=3.0, output_per_mtok=15.0),
    "claude-sonnet-4": Price(input_per_mtok=3.0, output_per_mtok=15.0),
    "claude-3-7-sonnet": Price(input_per_mtok=3.0, output_per_mtok=15.0),
    "claude-haiku-4-5": Price(input_per_mtok=1.0, output_per_mtok=5.0),
    "claude-3-5-haiku": Price(input_per_mtok=0.80, output_per_mtok=4.0),
}
"""Known prices by model name (dated snapshots such as ``gpt-4o-2024-08-06`` or
``claude-sonnet-4-5-20250929`` match their family; ``-latest`` too)."""


def price_of(model: str) -> Price | None:
    """The price of a model by name, or ``None`` when unknown.

    Matches the exact name first, then the longest known name that the model's name extends
    with a ``-`` suffix (a date, ``latest``): ``gpt-4o-mini-2024-07-18`` is ``gpt-4o-mini``,
    never ``gpt-4o``.
    """
    found = PRICES.get(model)
    if found is not None:
        return found
    families = [
        name
        for name in PRICES
        if model.startswith(name + "-") and _is_version_suffix(model[len(name) + 1 :])
    ]
    return PRICES[max(families, key=len)] if families else None


def _is_version_suffix(rest: str) -> bool:
    """``20250929``, ``2024-08-06`` or ``latest``: a snapshot of the same model.

    A short number is not a snapshot but another model: ``claude-opus-4-6`` is not Opus 4.
    """
    return rest == "latest" or re.fullmatch(r"\d{8}|\d{4}-\d{2}-\d{2}", rest) is not None


def cost_of(
    model: str, input_tokens: int, output_tokens: int, *, price: Price | None = None
) -> float | None:
    """The cost of one request in US dollars; ``None`` when the price is unknown."""
    chosen = price if price is not None else price_of(model)
    return None if chosen is None else chosen.cost(input_tokens, output_tokens)
