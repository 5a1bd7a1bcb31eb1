"""Shared test setup: real model requests are blocked unless a test opts in."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tether.models.base import allow_model_requests


@pytest.fixture(autouse=True)
def _block_real_model_requests(request: pytest.FixtureRequest) -> Iterator[None]:  # pyright: ignore[reportUnusedFunction]
    """Tests never reach a real model by accident; ``@pytest.mark.real_model`` opts in."""
    allowed = request.node.get_closest_marker("real_model") is not None
    with allow_model_requests(allowed):
        yield
