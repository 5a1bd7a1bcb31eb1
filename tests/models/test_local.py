"""The local model adapter's request shaping (no model loaded; real runs are separate)."""

from __future__ import annotations

from typing import Any

import jsonschema
import pytest

from tether.errors import ModelError
from tether.models._constrained import step_schema
from tether.models.local import LocalModel
from tether.models.registry import resolve_model
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


def test_local_model_strings() -> None:
    assert resolve_model("local").name == "local:qwen2.5-coder-1.5b"
    assert resolve_model("local:qwen2.5-coder-0.5b").name == "local:qwen2.5-coder-0.5b"
    assert resolve_model("local:/models/x.gguf").name == "local:x.gguf"
    assert resolve_model("local") is resolve_model("local")  # loaded once per process
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
