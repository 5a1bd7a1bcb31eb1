"""An agent's own tools as MCP tools (``tether mcp serve --tools``), each call a run.

A tool called from outside an agent is still a tether run: the agent's policy decides it
(a held call asks the client, as an agent's run does), the redactor and the limits apply,
and the log records it (``tether show RUN``). The run's model is a ``DirectModel``: it
asks for exactly the call the client made and finishes with its result. The MCP tool is
named ``AGENT.TOOL`` and has the tool's own input schema and annotations.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator
from typing import Any

from mcp import types as mcp_types
from mcp.server.mcpserver.tools import Tool as McpTool
from mcp.server.mcpserver.utilities.func_metadata import FuncMetadata
from mcp.types import (
    CallToolResult,
    EmbeddedResource,
    ImageContent,
    TextContent,
    TextResourceContents,
)

from tether.agent import Agent
from tether.content import ContentBlock, ImageBlock, TextBlock
from tether.events import ToolCallFinished
from tether.memory.config import MEMORY_TOOLS
from tether.models.direct import DirectModel
from tether.outcome import RunOutcome
from tether.tools.base import ToolDefinition

__all__ = ["direct_agents", "mcp_tool", "tool_result"]


def direct_agents(
    agent: Agent[Any],
) -> Iterator[tuple[ToolDefinition, Agent[str], DirectModel]]:
    """Each of ``agent``'s own tools, with the agent that runs one call of it and its model.

    That agent has the original's tools, policy, redactor, limits (two steps, one call),
    store and hooks; no memory, knowledge, thinking or questions to the user.
    """
    for tool in agent.spec.registry:
        definition = tool.definition
        if definition.name in MEMORY_TOOLS:
            continue  # the memory tools need the agent's memory, which a call does not use
        limits = dataclasses.replace(agent.limits, max_steps=2, max_tool_calls=1)
        model = DirectModel(definition.name)
        direct: Agent[str] = dataclasses.replace(
            agent,  # pyright: ignore[reportArgumentType] - the output type becomes str
            name=f"{agent.name}.{definition.name}",
            model=model,
            output_type=str,
            output_schema=None,
            memory=None,
            knowledge=None,
            thinking=None,
            compaction=None,
            can_ask_user=False,
            budget_warnings=(),
            limits=limits,
        )
        yield definition, direct, model


class _Arguments(FuncMetadata):
    """Hands the client's arguments through whole.

    The run validates them, as it would the model's, against the tool's own schema.
    """

    def validate_arguments(self, arguments_to_validate: dict[str, Any]) -> dict[str, Any]:
        return {"arguments": dict(arguments_to_validate)}


def mcp_tool(
    definition: ToolDefinition, name: str, agent: str, call: Callable[..., Any]
) -> McpTool:
    """The MCP tool ``name`` for ``definition``, answered by ``call(ctx, arguments)``."""
    annotations = definition.annotations
    made = McpTool.from_function(
        call,
        name=name,
        title=definition.title or name,
        description=(
            f"{definition.description.strip()}\n\n(The tool {definition.name!r} of the tether "
            f"agent {agent!r}: each call is a run, checked by the agent's policy.)"
        ).strip(),
        annotations=mcp_types.ToolAnnotations(
            read_only_hint=annotations.read_only,
            destructive_hint=annotations.destructive,
            idempotent_hint=annotations.idempotent,
            open_world_hint=annotations.open_world,
        ),
        structured_output=False,
    )
    metadata = _Arguments(arg_model=made.fn_metadata.arg_model)
    return made.model_copy(
        update={"parameters": dict(definition.input_schema), "fn_metadata": metadata}
    )


def tool_result(
    outcome: RunOutcome[Any], finished: ToolCallFinished | None
) -> CallToolResult | None:
    """The call's result as the run recorded it (redacted as the log is).

    ``None`` when the run did not get that far (it waits, or ended otherwise).
    """
    if finished is None or outcome.status in ("waiting_for_approval", "waiting_for_user"):
        return None
    structured = finished.structured if isinstance(finished.structured, dict) else None
    return CallToolResult(
        content=[_content(block) for block in finished.content],
        structured_content=structured,
        is_error=finished.is_error,
        _meta={"tether/run_id": outcome.run_id},
    )


def _content(block: ContentBlock) -> mcp_types.ContentBlock:
    if isinstance(block, TextBlock):
        return TextContent(type="text", text=block.text)
    if isinstance(block, ImageBlock):
        return ImageContent(type="image", data=block.data, mime_type=block.mime_type)
    return EmbeddedResource(
        type="resource",
        resource=TextResourceContents(
            uri=block.uri, mime_type=block.mime_type, text=block.text or ""
        ),
    )
