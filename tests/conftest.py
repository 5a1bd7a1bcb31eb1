"""Shared test setup: real model requests are blocked unless a test opts in."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import cast

import pytest

from tests.support import open_store
from tether.models.base import allow_model_requests
from tether.stores import RunStore


@pytest.fixture(autouse=True)
def _block_real_model_requests(request: pytest.FixtureRequest) -> Iterator[None]:  # pyright: ignore[reportUnusedFunction]
    """Tests never reach a real model by accident; ``@pytest.mark.real_model`` opts in."""
    allowed = request.node.get_closest_marker("real_model") is not None
    with allow_model_requests(allowed):
        yield


@pytest.fixture(autouse=True)
def _no_audit_key_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:  # pyright: ignore[reportUnusedFunction]
    """A developer's audit key must not change what the tests write; tests that want one set it."""
    monkeypatch.delenv("TETHER_AUDIT_KEY_FILE", raising=False)
    monkeypatch.delenv("TETHER_AUDIT_KEY", raising=False)


@pytest.fixture(params=["memory", "sqlite"])
async def store(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[RunStore]:
    """An empty store of each backend, closed after the test."""
    opened = open_store(cast(str, request.param), tmp_path / "t.db")
    try:
        yield opened
    finally:
        await opened.close()
