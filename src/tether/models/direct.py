"""``DirectModel``: no language model, one tool call a caller asked for, as a run.

A caller outside any agent (an MCP client calling one of an agent's tools) still wants
what every tether run gives: the policy gate, approvals, redaction, the event log. So the
call becomes a run whose "model" asks for exactly that call, then finishes with its
result. The call is described in the goal (``direct_goal``); its arguments reach the
model only as they were given (``give``, by run id, until ``forget``): the log keeps the
goal redacted, so reading them back from it could call the tool with ``[REDACTED]`` (or a
custom redactor's mask) in place of a secret. A run continued where its arguments were not
given (another process) goes on if its call was made already, as it does once it waited
for approval; one that had not made it yet fails, saying to call the tool again.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import ClassVar

import orjson

from tether.content import content_text
from tether.errors import ModelError
from tether.jsontypes import JsonObject
from tether.messages import FINISH_TASK, AssistantMessage, ToolCall, ToolResultMessage
from tether.models.base import Model, ModelProfile, ModelRequest, ModelResponse

__all__ = ["DIRECT_CALL_ID", "DirectModel", "direct_goal"]

DIRECT_CALL_ID = "direct"
"""The id of the one call a direct run makes."""
_MARK = " with the arguments (JSON): "
_HELD = 10_000  # runs whose arguments one model holds at most (the oldest go first)
_ANSWER = 1000  # characters of the result the run's answer repeats (the log has it whole)


def direct_goal(tool: str, arguments: JsonObject) -> str:
    """The goal of a run that makes one call of ``tool`` with ``arguments``."""
    return f"Call the tool {tool}{_MARK}{orjson.dumps(arguments).decode()}"


class DirectModel(Model):
    """Calls ``tool`` once, with the arguments given for its run (``give``), then finishes.

    Its answer is the call's result as text (or, for a call that failed or was refused,
    what the run told the model about it). It makes no request anywhere and costs nothing.
    """

    real: ClassVar[bool] = False  # no request leaves the process

    def __init__(self, tool: str) -> None:
        self._tool = tool
        self._given: OrderedDict[str, JsonObject] = OrderedDict()

    def give(self, run_id: str, arguments: JsonObject) -> None:
        """The arguments of the run ``run_id``'s call, as the caller gave them."""
        self._given[run_id] = arguments
        while len(self._given) > _HELD:
            self._given.popitem(last=False)

    def holds(self, run_id: str) -> bool:
        """Whether arguments were given for ``run_id`` (and not forgotten yet)."""
        return run_id in self._given

    def forget(self, run_id: str) -> None:
        """Drop what ``give`` held for ``run_id`` (its call is made, or will not be)."""
        self._given.pop(run_id, None)

    @property
    def tool(self) -> str:
        """The tool it calls."""
        return self._tool

    @property
    def name(self) -> str:
        """``direct:TOOL``."""
        return f"direct:{self._tool}"

    @property
    def profile(self) -> ModelProfile:
        """Native tool calls, one at a time."""
        return ModelProfile(parallel_tool_calls=False)

    async def request(self, request: ModelRequest) -> ModelResponse:
        """The call (first turn), then ``finish_task`` with its result."""
        results = [m for m in request.messages if isinstance(m, ToolResultMessage)]
        if any(m.call_id == DIRECT_CALL_ID for m in results):
            result = next(m for m in reversed(results) if m.call_id == DIRECT_CALL_ID)
            answer = content_text(result.content)
            if len(answer) > _ANSWER:
                answer = (
                    f"{answer[:_ANSWER]}… ({len(answer)} characters: tool_call_finished has it all)"
                )
            return _finish(answer or ("the call failed" if result.is_error else "(no output)"))
        if any(isinstance(m, AssistantMessage) and m.tool_calls for m in request.messages):
            return _finish("the call was not made")  # the run refused it before it ran
        arguments = self._given.get(request.run_id)
        if arguments is None:
            raise ModelError(
                f"the arguments of this call of {self._tool!r} were given to the process that "
                "took the call, and only there (the log keeps them redacted): call the tool again",
                model=self.name,
            )
        return ModelResponse(
            tool_calls=(ToolCall(id=DIRECT_CALL_ID, name=self._tool, arguments=arguments),)
        )


def _finish(answer: str) -> ModelResponse:
    return ModelResponse(
        tool_calls=(
            ToolCall(id=f"{DIRECT_CALL_ID}-end", name=FINISH_TASK, arguments={"answer": answer}),
        )
    )
