"""``FunctionModel``: a model whose answer is a function of the request (a test double)."""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable

from tether.messages import AssistantMessage
from tether.models.base import Model, ModelRequest, ModelResponse
from tether.models.scripted import ScriptStep, as_response
from tether.usage import Usage

__all__ = ["FunctionModel"]


class FunctionModel(Model):
    """Calls ``function(request)`` (sync or async) for every request.

    The function may return what a ``ScriptedModel`` step may be: a ``ModelResponse``, text,
    a ``ToolCall`` or a list of them. Calls without an id get ``call_<turn>_<index>``, where
    ``turn`` counts the model turns in the request's history: the model keeps no state of its
    own, so one instance serves any number of runs, and a resumed run gets the ids it would
    have had without the interruption. Only a whole ``ModelResponse`` can report usage; the
    others report none (an unknown cost).
    """

    real = False

    def __init__(
        self,
        function: Callable[[ModelRequest], ScriptStep | Awaitable[ScriptStep]],
        *,
        name: str = "function",
    ) -> None:
        self._function = function
        self._name = name

    @property
    def name(self) -> str:
        """The model's name."""
        return self._name

    async def request(self, request: ModelRequest) -> ModelResponse:
        """Answer with the function's result."""
        result = self._function(request)
        if inspect.isawaitable(result):
            result = await result
        turn = sum(1 for m in request.messages if isinstance(m, AssistantMessage))
        return as_response(result, Usage(), turn)
