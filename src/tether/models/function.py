"""``FunctionModel``: a model whose answer is a function of the request (a test double)."""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable

from tether.models.base import Model, ModelRequest, ModelResponse
from tether.models.scripted import ScriptStep, as_response
from tether.usage import Usage

__all__ = ["FunctionModel"]


class FunctionModel(Model):
    """Calls ``function(request)`` (sync or async) for every request.

    The function may return what a ``ScriptedModel`` step may be: a ``ModelResponse``, text,
    a ``ToolCall`` or a list of them; calls without an id get one. Only a whole
    ``ModelResponse`` can report usage; the others report none (an unknown cost).
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
        self._turn = 0

    @property
    def name(self) -> str:
        """The model's name."""
        return self._name

    async def request(self, request: ModelRequest) -> ModelResponse:
        """Answer with the function's result."""
        result = self._function(request)
        if inspect.isawaitable(result):
            result = await result
        turn = self._turn
        self._turn += 1
        return as_response(result, Usage(), turn)
