"""One call of one of an agent's tools, as a run of its own (``tether mcp serve --tools``).

The run's agent is the original with its tools, policy, redactor, store and hooks, and a
``DirectModel`` that makes exactly the call the caller asked for; nothing else of the
agent's loop takes part (no memory, knowledge, thinking, questions to the user, structured
output), and its limits allow two steps and one call at most. ``tether approve`` and
``tether resume`` rebuild the same agent for a run whose model is ``direct:TOOL``, so a
held call continues as it started.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from typing import Any

from tether.agent import Agent
from tether.errors import ConfigError
from tether.limits import Limits
from tether.memory.config import MEMORY_TOOLS
from tether.models.direct import DirectModel
from tether.tools.base import ToolDefinition

__all__ = ["DIRECT_PREFIX", "direct_agent", "direct_agents", "fits_a_call"]

DIRECT_PREFIX = "direct:"
"""How a direct run's model is named in its ``run_started``: ``direct:TOOL``."""


def fits_a_call(limits: Limits) -> bool:
    """Whether ``limits`` allow a call and the step that finishes with its result."""
    think = limits.think
    phase_steps = None if think is None else think.max_steps
    return (
        limits.max_steps >= 2
        and limits.max_tool_calls >= 1
        and (phase_steps is None or phase_steps >= 2)
    )


def direct_agent(agent: Agent[Any], tool: str, model: DirectModel | None = None) -> Agent[str]:
    """The agent whose runs make one call of ``agent``'s ``tool`` (see the module)."""
    if tool not in agent.spec.registry:
        raise ConfigError(f"the agent {agent.name!r} has no tool {tool!r} to call")
    if not fits_a_call(agent.limits):
        raise ConfigError(
            f"the limits of {agent.name!r} allow no call and the step that finishes after it"
        )
    return dataclasses.replace(
        agent,  # pyright: ignore[reportArgumentType] - the output type becomes str
        name=f"{agent.name}.{tool}",
        model=model if model is not None else DirectModel(tool),
        output_type=str,
        output_schema=None,
        memory=None,
        knowledge=None,
        thinking=None,
        compaction=None,
        can_ask_user=False,
        budget_warnings=(),
        limits=dataclasses.replace(agent.limits, max_steps=2, max_tool_calls=1),
    )


def direct_agents(
    agent: Agent[Any],
) -> Iterator[tuple[ToolDefinition, Agent[str], DirectModel]]:
    """Each of ``agent``'s own tools, with the agent that runs one call of it and its model.

    None when the agent's limits fit no call; not its memory tools (they need the memory,
    which a call does not use).
    """
    if not fits_a_call(agent.limits):
        return
    memory = agent.spec.memory
    memory_tools = MEMORY_TOOLS if memory is not None and memory.tools else ()
    for tool in agent.spec.registry:
        definition = tool.definition
        if definition.name in memory_tools:
            continue
        model = DirectModel(definition.name)
        yield definition, direct_agent(agent, definition.name, model), model
