"""``FunctionModel``: a model whose answer is a function of the request (a test double)."""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable

from tether.models.base import Model, ModelRequest, ModelResponse

__all__ = ["FunctionModel"]


class FunctionModel(Model):
    """Calls ``function(request)`` (sync or async) for every request."""

    real = False

    def __init__(
        self,
        function: Callable[[ModelRequest], ModelResponse | Awaitable[ModelResponse]],
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
            return await result
        return result
