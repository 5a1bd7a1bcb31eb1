"""``ScriptedModel``: a model that plays a fixed list of steps (a test double)."""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TypeAlias, cast

import orjson

from tether.content import JsonObject
from tether.errors import ConfigError, ModelError
from tether.messages import AssistantMessage, ToolCall
from tether.models.base import Model, ModelProfile, ModelRequest, ModelResponse
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
    """Answers a run's requests with the steps of a script, in order (a test double).

    Each run keeps its own position in the script, so one instance serves any number of
    runs, one after another or at once. A run the instance has not seen (a run resumed after
    a crash, by a fresh instance built from the same script) starts where its history left
    off: after the step that gave its last model turn (error steps give no turn). Requests
    outside a run (an empty ``run_id``) share one position. Running out of steps is a model
    error.

    Tool calls without an id get ``call_<step>_<index>``. ``usage`` is reported for every
    step that is not a whole ``ModelResponse``; by default its cost is unknown (``None``), as
    a model that reports no cost is: pass ``usage=Usage(cost=...)`` to script one.

    What a history cannot tell a fresh instance: whether the error steps just after its last
    turn were played before the crash (they are played again), and how many steps the repair
    rounds of a ``PromptedToolsModel`` took (each leaves no turn; the run continues early).
    """

    real = False

    def __init__(
        self,
        steps: Sequence[ScriptStep],
        *,
        name: str = "scripted",
        usage: Usage = Usage(),
        max_runs: int = 1024,
        context_window: int | None = None,
    ) -> None:
        """Build the model.

        Args:
            steps: The script: what each request is answered with, in order.
            name: The model's name, as recorded in events.
            usage: Tokens and cost reported for each step that is not a ``ModelResponse``.
            max_runs: How many runs' positions are kept; the least recently used is
                forgotten, and continues from its history if it asks again.
            context_window: The window its profile declares (``None``: not known).
        """
        if max_runs < 1:
            raise ConfigError(f"max_runs must be 1 or more, got {max_runs}")
        self._steps = list(steps)
        self._answers = [i for i, s in enumerate(self._steps) if not isinstance(s, BaseException)]
        self._name = name
        self._usage = usage
        self._max_runs = max_runs
        self._window = context_window
        self._runs: OrderedDict[str, _Position] = OrderedDict()
        self._shared = _Position(step=0, turns=0, resumed=0)
        self.requests: list[ModelRequest] = []
        """Every request received, in order (for assertions)."""

    @property
    def name(self) -> str:
        """The model's name."""
        return self._name

    @property
    def profile(self) -> ModelProfile:
        """The base profile, with the context window it was given."""
        return ModelProfile(context_window=self._window)

    def _start(self, turns: int) -> int:
        """Where a run whose history holds ``turns`` model turns continues the script.

        Every answer step gave one turn and every error step none, so it continues just past
        the step that gave its last turn. Errors after that step are played (the history
        cannot say whether they were).
        """
        if turns == 0:
            return 0
        if turns > len(self._answers):
            return len(self._steps)
        return self._answers[turns - 1] + 1

    async def request(self, request: ModelRequest) -> ModelResponse:
        """Play the run's next step."""
        self.requests.append(request)
        turns = request.compacted + sum(
            1 for m in request.messages[request.earlier :] if isinstance(m, AssistantMessage)
        )
        known = self._runs.get(request.run_id) if request.run_id else None
        if request.purpose is not None and known is not None:
            # a thinking stage's request shows its own view of the history: it is the next
            # step of the run's script, and says nothing about the run's turns
            position = known
        else:
            position = self._position(request.run_id, turns)
            position.turns = turns
        step = position.step
        position.step += 1
        if step >= len(self._steps):
            raise self._exhausted(request.run_id, step, position)
        return as_response(self._steps[step], self._usage, step)

    def _position(self, run_id: str, turns: int) -> _Position:
        if not run_id:
            return self._shared
        runs = self._runs
        position = runs.get(run_id)
        # A history shorter than at this run's last request is a new run under a reused id.
        if position is None or turns < position.turns:
            position = _Position(step=self._start(turns), turns=turns, resumed=turns)
            runs[run_id] = position
            if len(runs) > self._max_runs:
                runs.popitem(last=False)
        else:
            runs.move_to_end(run_id)
        return position

    def _exhausted(self, run_id: str, step: int, position: _Position) -> ModelError:
        who = f"run {run_id!r}" if run_id else "a request"
        message = f"the script has {len(self._steps)} steps and {who} asked for step {step + 1}"
        if position.resumed:
            message += (
                f". The run had {position.resumed} model turns before this model saw it, and "
                "continues the script after the step that gave its last one: give the model "
                "of a resumed run the whole script, not the steps that remain"
            )
        return ModelError(message, model=self._name)


@dataclass(slots=True)
class _Position:
    step: int
    """The script step the run plays next."""
    turns: int
    """Model turns in the run's history at its last request."""
    resumed: int
    """Model turns in the run's history before this model first saw it."""


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
