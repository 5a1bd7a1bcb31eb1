"""tether: a small, durable, safe runtime for LLM agents. The log is the run."""

from tether.agent import Agent
from tether.compaction import Compaction
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
    StoreError,
    TetherError,
    UserError,
)
from tether.events import Event
from tether.hooks import Hooks
from tether.knowledge.base import KnowledgeBase
from tether.knowledge.config import Knowledge
from tether.limits import Limits, PhaseLimits
from tether.loop import AgentRun
from tether.memory.config import Remember, SessionHistory
from tether.messages import ToolCall
from tether.models.base import Model, ModelRequest, ModelResponse, ModelSettings
from tether.models.select import ModelNeeds
from tether.outcome import RunOutcome, RunStatus
from tether.policy.approvals import Approval
from tether.policy.base import AllowAll, Policy, PolicyDecision
from tether.policy.gate import RulePolicy
from tether.policy.redaction import Redactor
from tether.policy.rules import Rules, allow, deny, require_approval
from tether.sinks import EventSink
from tether.state import RunState, fold
from tether.tools.base import Tool, ToolAnnotations, ToolContext, ToolDefinition
from tether.tools.function import tool
from tether.usage import Usage

__version__ = "0.1.0"

__all__ = [
    "Agent",
    "AgentRun",
    "AllowAll",
    "Approval",
    "ApprovalRequired",
    "Compaction",
    "ConfigError",
    "ContentBlock",
    "Event",
    "EventSink",
    "Hooks",
    "ImageBlock",
    "JsonObject",
    "JsonValue",
    "Knowledge",
    "KnowledgeBase",
    "Limits",
    "Model",
    "ModelError",
    "ModelNeeds",
    "ModelRequest",
    "ModelResponse",
    "ModelRetry",
    "ModelSettings",
    "PhaseLimits",
    "Policy",
    "PolicyDecision",
    "Redactor",
    "Remember",
    "ResourceBlock",
    "RulePolicy",
    "Rules",
    "RunError",
    "RunOutcome",
    "RunState",
    "RunStatus",
    "SessionHistory",
    "StoreError",
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
    "allow",
    "deny",
    "fold",
    "require_approval",
    "tool",
]
