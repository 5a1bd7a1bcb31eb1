"""The ``store`` fixture: every conformance test runs against every backend."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import cast

import pytest

from tether.stores import MemoryStore, RunStore, SqliteStore


def open_store(kind: str, path: Path) -> RunStore:
    """A fresh store of backend ``kind`` (SQLite files live at ``path``)."""
    if kind == "memory":
        return MemoryStore()
    if kind == "sqlite":
        return SqliteStore(path)
    raise AssertionError(f"unknown backend {kind!r}")


@pytest.fixture(params=["memory", "sqlite"])
async def store(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[RunStore]:
    """An empty store of each backend, closed after the test."""
    opened = open_store(cast(str, request.param), tmp_path / "t.db")
    try:
        yield opened
    finally:
        await opened.close()
