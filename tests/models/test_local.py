"""The local model adapter's request shaping (no model loaded; real runs are separate)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import jsonschema
import pytest

from tether.errors import ModelError, ModelWeightsError
from tether.models._constrained import step_schema
from tether.models.local import LocalModel
from tether.models.registry import resolve_model
from tether.models.weights import KNOWN_MODELS, installed
from tether.tools.builtin import calculate, days_until


def test_the_step_schema_admits_exactly_one_call_of_a_known_tool() -> None:
    schema = step_schema((calculate.definition, days_until.definition))
    validator = jsonschema.Draft202012Validator(schema)

    def valid(instance: dict[str, Any]) -> bool:
        return not list(validator.iter_errors(instance))  # pyright: ignore[reportUnknownMemberType]

    assert valid({"tool": "calculate", "arguments": {"expression": "1+1"}})
    assert not valid({"tool": "calculate", "arguments": {"expr": "1+1"}})
    assert not valid({"tool": "rm", "arguments": {}})
    assert not valid({"tool": "calculate", "arguments": {"expression": "1"}, "x": 1})
    assert not valid({"tool": "calculate", "arguments": {"expression": "1", "extra": True}})


def test_local_model_strings(tmp_path: Path) -> None:
    assert resolve_model("local").name == "local:qwen2.5-coder-1.5b"
    gguf = tmp_path / "x.gguf"
    gguf.write_bytes(b"GGUF")
    assert resolve_model(f"local:{gguf}").name == "local:x.gguf"
    assert resolve_model("local") is resolve_model("local")  # loaded once per process


def test_a_local_model_that_is_not_installed_is_refused_when_named(tmp_path: Path) -> None:
    if installed(KNOWN_MODELS["qwen2.5-coder-0.5b"]):
        pytest.skip("the small model is installed here")
    with pytest.raises(ModelWeightsError, match=r"tether\[local-small\]"):
        resolve_model("local:qwen2.5-coder-0.5b")
    with pytest.raises(ModelWeightsError, match="does not exist"):
        resolve_model(f"local:{tmp_path / 'missing.gguf'}")
    with pytest.raises(ModelError, match="unknown local model"):
        LocalModel(model="gpt-9")


def test_with_no_model_configured_the_installed_embedded_model_is_used(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("TETHER_MODEL", raising=False)
    monkeypatch.setattr("tether.models.registry.local_model_available", lambda: True)
    assert resolve_model(None).name == "local:qwen2.5-coder-1.5b"  # named, not loaded yet
    monkeypatch.setenv("TETHER_MODEL", "ollama:llama3.2")
    assert resolve_model(None).name == "ollama:llama3.2"  # the environment wins
