"""What an adapter returned that a log cannot hold: checked before anything of it is recorded.

Adapters are user code and servers send what they like (``"prompt_tokens": NaN``, a number
for the text): caught here, a bad answer is a failed request, never an event the log cannot
read back (or one recorded twice when the run's fold then fails).
"""

from __future__ import annotations

import math
from typing import cast

from tether.messages import ToolCall
from tether.models.base import ModelResponse

__all__ = ["malformed"]


def malformed(response: object) -> str | None:
    """What is wrong with what an adapter returned, that a log cannot hold (``None``: nothing).

    Adapters are user code and servers send what they like (``"prompt_tokens": NaN``, a
    number for the text): caught here, a bad answer is a failed request, never an event the
    log cannot read back (or one recorded twice when the run's fold then fails).
    """
    if not isinstance(response, ModelResponse):
        return f"{type(response).__name__}, not a ModelResponse"
    usage = response.usage
    text, reasoning = cast(object, response.text), cast(object, response.reasoning)
    calls = cast(tuple[object, ...], response.tool_calls)
    if (
        isinstance(text, str)  # (a subclass too: the encoder writes it as text)
        and (reasoning is None or isinstance(reasoning, str))
        and type(calls) is tuple
        and (  # (no generator for the common cases: the loop's hot path)
            not calls
            or (len(calls) == 1 and isinstance(calls[0], ToolCall))
            or all(isinstance(c, ToolCall) for c in calls)
        )
    ):
        if (
            type(usage.input_tokens) is int  # not a bool, not NaN
            and type(usage.output_tokens) is int
            and type(usage.requests) is int
            and usage.input_tokens >= 0
            and usage.output_tokens >= 0
            and usage.requests >= 0
            and (
                usage.cost is None
                or (isinstance(usage.cost, float) and 0.0 <= usage.cost < math.inf)
            )
        ):
            return None
        return (
            f"a response whose usage is not counts of zero or more ({usage.input_tokens!r} "
            f"input, {usage.output_tokens!r} output, {usage.requests!r} requests) and a cost "
            f"of zero or more or None ({usage.cost!r})"
        )
    if not isinstance(text, str):
        return f"a response whose text is {type(text).__name__}, not str"
    if reasoning is not None and not isinstance(reasoning, str):
        return f"a response whose reasoning is {type(reasoning).__name__}, not str"
    return "a response whose tool_calls is not a tuple of ToolCall"
