"""Tools: definitions, ``@tool``, the registry and the output tool ``finish_task``."""

from tether.tools.base import (
    ArgumentsValidator,
    Tool,
    ToolAnnotations,
    ToolContext,
    ToolDefinition,
    ToolHandler,
    to_tool_result,
)
from tether.tools.function import function_tool, tool
from tether.tools.output import ASK_USER, FINISH_TASK, OutputSpec
from tether.tools.registry import (
    ToolRegistry,
    from_anthropic,
    from_openai,
    to_anthropic,
    to_openai,
)

__all__ = [
    "ASK_USER",
    "FINISH_TASK",
    "ArgumentsValidator",
    "OutputSpec",
    "Tool",
    "ToolAnnotations",
    "ToolContext",
    "ToolDefinition",
    "ToolHandler",
    "ToolRegistry",
    "from_anthropic",
    "from_openai",
    "function_tool",
    "to_anthropic",
    "to_openai",
    "to_tool_result",
    "tool",
]
