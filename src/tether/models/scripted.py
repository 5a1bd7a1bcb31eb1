"""``ScriptedModel``: a model that plays a fixed list of steps (a test double)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TypeAlias, cast

import orjson

from tether.content import JsonObject
from tether.errors import ConfigError, ModelError
from tether.messages import ToolCall
from tether.models.base import Model, ModelRequest, ModelResponse
from tether.usage import Usage

__all__ = ["ScriptStep", "ScriptedModel", "as_response", "load_script"]

ScriptStep: TypeAlias = "str | ToolCall | Sequence[ToolCall] | ModelResponse | BaseException"
"""One scripted turn: text, one or more tool calls, a whole response, or an error to raise."""


def as_response(step: ScriptStep, usage: Usage, turn: int) -> ModelResponse:
    """A script step as a response (raising it, if it is an exception)."""
    if isinstance(step, BaseException):
        raise step
    if isinstance(step, ModelResponse):
        response = step
    elif isinstance(step, str):
        response = ModelResponse(text=step, usage=usage)
    elif isinstance(step, ToolCall):
        response = ModelResponse(tool_calls=(step,), usage=usage)
    else:
        response = ModelResponse(tool_calls=tuple(step), usage=usage)
    if any(not c.id for c in response.tool_calls):
        calls = tuple(
            c
            if c.id
            else ToolCall(
                id=f"call_{turn}_{i}", name=c.name, arguments=c.arguments, parse_error=c.parse_error
            )
            for i, c in enumerate(response.tool_calls)
        )
        response = ModelResponse(
            text=response.text,
            tool_calls=calls,
            reasoning=response.reasoning,
            usage=response.usage,
            finish_reason=response.finish_reason,
        )
    return response


class ScriptedModel(Model):
    """Answers request *n* with step *n* of a script; running out of steps is a model error.

    Tool calls without an id get ``call_<turn>_<index>``. ``usage`` is reported for every
    step that is not a whole ``ModelResponse``; by default its cost is unknown (``None``), as
    a model that reports no cost is: pass ``usage=Usage(cost=...)`` to script one.
    """

    real = False
    reusable = False

    def __init__(
        self,
        steps: Sequence[ScriptStep],
        *,
        name: str = "scripted",
        usage: Usage = Usage(),
    ) -> None:
        self._steps = list(steps)
        self._name = name
        self._usage = usage
        self.requests: list[ModelRequest] = []
        """Every request received, in order (for assertions)."""

    @property
    def name(self) -> str:
        """The model's name."""
        return self._name

    async def request(self, request: ModelRequest) -> ModelResponse:
        """Play the next step."""
        turn = len(self.requests)
        self.requests.append(request)
        if turn >= len(self._steps):
            raise ModelError(
                f"the script has {len(self._steps)} steps and request {turn + 1} asked for more",
                model=self._name,
            )
        return as_response(self._steps[turn], self._usage, turn)


def _step_from_json(raw: object, index: int) -> ScriptStep:
    if not isinstance(raw, dict):
        raise ConfigError(f"script step {index}: expected an object, got {type(raw).__name__}")
    step = cast(dict[str, object], raw)
    if "error" in step:
        return ModelError(str(step["error"]), transient=bool(step.get("transient", False)))
    calls = step.get("tool_calls")
    text = step.get("text", "")
    if not isinstance(text, str):
        raise ConfigError(f"script step {index}: 'text' must be a string")
    if calls is None:
        return text
    if not isinstance(calls, list):
        raise ConfigError(f"script step {index}: 'tool_calls' must be a list")
    parsed: list[ToolCall] = []
    for call in cast(list[object], calls):
        if not isinstance(call, dict) or not isinstance(call.get("name"), str):  # pyright: ignore[reportUnknownMemberType]
            raise ConfigError(f"script step {index}: each tool call needs a 'name'")
        c = cast(dict[str, object], call)
        args = c.get("arguments", {})
        if not isinstance(args, dict):
            raise ConfigError(f"script step {index}: 'arguments' must be an object")
        parsed.append(
            ToolCall(
                id=str(c.get("id", "")), name=cast(str, c["name"]), arguments=cast(JsonObject, args)
            )
        )
    return ModelResponse(text=text, tool_calls=tuple(parsed))


def load_script(path: str | Path) -> list[ScriptStep]:
    """Read a script from JSON: a list of ``{"text"}``, ``{"tool_calls": [...]}``, ``{"error"}``."""
    try:
        data = orjson.loads(Path(path).read_bytes())
    except (OSError, orjson.JSONDecodeError) as exc:
        raise ConfigError(f"cannot read the model script {str(path)!r}: {exc}") from None
    if not isinstance(data, list):
        raise ConfigError(f"model script {str(path)!r}: expected a JSON list of steps")
    return [_step_from_json(raw, i) for i, raw in enumerate(cast(list[object], data))]
