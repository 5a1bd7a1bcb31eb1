"""What can fail is found before a run is stored: no run is left ``running`` by a bad setup."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from tether.cli.app import app
from tether.errors import MissingExtraError, ModelWeightsError
from tether.models.anthropic import AnthropicModel
from tether.models.local import LocalModel
from tether.models.openai import OpenAIModel
from tether.stores import SqliteStore


@pytest.mark.parametrize(
    ("package", "build"),
    [
        ("openai", lambda: OpenAIModel("gpt-4o")),
        ("anthropic", lambda: AnthropicModel("claude-sonnet-4-5")),
        ("xllamacpp", lambda: LocalModel()),
    ],
)
def test_an_adapter_without_its_extra_fails_when_built(
    monkeypatch: pytest.MonkeyPatch, package: str, build: object
) -> None:
    monkeypatch.setitem(sys.modules, package, None)  # as if it were not installed
    with pytest.raises(MissingExtraError, match=r'pip install "tether\['):
        build()  # type: ignore[operator]  # pyright: ignore[reportCallIssue, reportUnknownVariableType]


def test_a_local_model_file_that_does_not_exist_fails_when_built(tmp_path: Path) -> None:
    with pytest.raises(ModelWeightsError, match="does not exist"):
        LocalModel(tmp_path / "missing.gguf")


def test_run_with_a_model_whose_extra_is_missing_exits_2_and_stores_no_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "openai", None)
    db = tmp_path / "t.db"
    result = CliRunner().invoke(
        app, ["run", "hi", "--model", "openai:gpt-4o", "--db", str(db), "--no-log"]
    )
    assert result.exit_code == 2, result.output
    assert 'pip install "tether[openai]"' in result.stderr
    store = SqliteStore(db)
    try:
        assert asyncio.run(store.runs()) == []  # nothing left "running"
    finally:
        asyncio.run(store.close())
