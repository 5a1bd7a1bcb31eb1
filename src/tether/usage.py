"""Token and cost accounting: what a model call or a whole run consumed."""

from __future__ import annotations

from tether._internal.frozen import frozen

__all__ = ["Usage"]


@frozen(slots=False)
class Usage:
    """Tokens and cost. An unknown cost is ``None``, never counted as zero.

    ``cost`` defaults to ``None``: a model that reports no cost (a test double, an adapter
    that knows no price) has spent an unknown amount, not nothing. What costs nothing says
    so: ``Usage(cost=0.0)`` is a local model's request, or a run that made none.
    """

    input_tokens: int = 0
    """Prompt tokens sent to the model."""
    output_tokens: int = 0
    """Tokens the model generated."""
    requests: int = 0
    """Model requests answered (a run's usage counts its ``model_responded`` events)."""
    cost: float | None = None
    """Cost in US dollars; ``None`` (the default) when it, or any part of it, is unknown."""

    @property
    def total_tokens(self) -> int:
        """Input plus output tokens."""
        return self.input_tokens + self.output_tokens

    @property
    def cost_known(self) -> bool:
        """Whether the cost is known (every request had a known price)."""
        return self.cost is not None

    def __post_init__(self) -> None:
        if type(self.cost) is int:  # keep the encoding of a log stable: cost is a float
            object.__setattr__(self, "cost", float(self.cost))

    def __add__(self, other: Usage) -> Usage:
        cost = None if self.cost is None or other.cost is None else self.cost + other.cost
        return Usage(
            input_tokens=self.input_tokens + other.input_tokens,
            output_tokens=self.output_tokens + other.output_tokens,
            requests=self.requests + other.requests,
            cost=cost,
        )
