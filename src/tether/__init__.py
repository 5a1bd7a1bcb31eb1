"""tether: a small, durable, safe runtime for LLM agents. The log is the run."""

from tether.agent import Agent
from tether.content import (
    ContentBlock,
    ImageBlock,
    JsonObject,
    JsonValue,
    ResourceBlock,
    TextBlock,
    ToolResult,
)
from tether.errors import (
    ApprovalRequired,
    ConfigError,
    ModelError,
    ModelRetry,
    RunError,
    TetherError,
    UserError,
)
from tether.events import Event
from tether.limits import Limits
from tether.loop import AgentRun
from tether.messages import ToolCall
from tether.models.base import Model, ModelRequest, ModelResponse, ModelSettings
from tether.outcome import RunOutcome, RunStatus
from tether.policy.base import Policy, PolicyDecision
from tether.state import RunState, fold
from tether.tools.base import Tool, ToolAnnotations, ToolContext, ToolDefinition
from tether.tools.function import tool
from tether.usage import Usage

__version__ = "0.1.0"

__all__ = [
    "Agent",
    "AgentRun",
    "ApprovalRequired",
    "ConfigError",
    "ContentBlock",
    "Event",
    "ImageBlock",
    "JsonObject",
    "JsonValue",
    "Limits",
    "Model",
    "ModelError",
    "ModelRequest",
    "ModelResponse",
    "ModelRetry",
    "ModelSettings",
    "Policy",
    "PolicyDecision",
    "ResourceBlock",
    "RunError",
    "RunOutcome",
    "RunState",
    "RunStatus",
    "TetherError",
    "TextBlock",
    "Tool",
    "ToolAnnotations",
    "ToolCall",
    "ToolContext",
    "ToolDefinition",
    "ToolResult",
    "Usage",
    "UserError",
    "__version__",
    "fold",
    "tool",
]
