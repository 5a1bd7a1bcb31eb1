"""An agent's own tools as MCP tools (``tether mcp serve --tools``), each call a run.

A tool called from outside an agent is still a tether run: the agent's policy decides it
(a held call asks the client, as an agent's run does), the redactor and the limits apply,
and the log records it (``tether show RUN``). The run's model is a ``DirectModel``: it
asks for exactly the call the client made and finishes with its result. The MCP tool is
named ``AGENT.TOOL`` and has the tool's own input schema and annotations.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from mcp import types as mcp_types
from mcp.server.mcpserver.tools import Tool as McpTool
from mcp.server.mcpserver.utilities.func_metadata import FuncMetadata

from tether.agent import Agent
from tether.policy.gate import RulePolicy, effective_annotations
from tether.tools.base import ToolDefinition

__all__ = ["mcp_tool"]


class _Arguments(FuncMetadata):
    """Hands the client's arguments through whole.

    The run validates them, as it would the model's, against the tool's own schema.
    """

    def validate_arguments(self, arguments_to_validate: dict[str, Any]) -> dict[str, Any]:
        return {"arguments": dict(arguments_to_validate)}


def mcp_tool(
    definition: ToolDefinition, name: str, agent: Agent[Any], call: Callable[..., Any]
) -> McpTool:
    """The MCP tool ``name`` for ``definition``, answered by ``call(ctx, arguments)``.

    Its annotations are those ``agent``'s policy believes (an outside tool's claims of
    safety are not passed on as tether's).
    """
    policy = agent.spec.policy
    believed = (
        policy.annotations(definition)
        if isinstance(policy, RulePolicy)
        else effective_annotations(definition)
    )
    made = McpTool.from_function(
        call,
        name=name,
        title=definition.title or name,
        description=(
            f"{definition.description.strip()}\n\n(The tool {definition.name!r} of the tether "
            f"agent {agent.name!r}: each call is a run, checked by the agent's policy.)"
        ).strip(),
        annotations=mcp_types.ToolAnnotations(
            read_only_hint=believed.read_only,
            destructive_hint=believed.destructive,
            idempotent_hint=believed.idempotent,
            open_world_hint=believed.open_world,
        ),
        structured_output=False,
    )
    metadata = _Arguments(arg_model=made.fn_metadata.arg_model)
    return made.model_copy(
        update={"parameters": dict(definition.input_schema), "fn_metadata": metadata}
    )
