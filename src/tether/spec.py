"""``AgentSpec``: what an agent's configuration resolves to, the one thing a run reads.

The run engine (``tether.loop``) takes a spec, never an ``Agent``: the configuration and
the machinery that runs it import in one direction only.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Generic

from typing_extensions import TypeVar

from tether._internal.frozen import frozen
from tether.compaction import Compaction
from tether.jsontypes import JsonObject
from tether.knowledge.config import Knowledge
from tether.limits import Limits
from tether.memory.config import Remember, SessionHistory
from tether.models.base import ModelSettings
from tether.policy.base import Policy
from tether.policy.redaction import Redactor
from tether.retry import Backoff
from tether.thinking.config import Thinking
from tether.tools.base import ToolDefinition
from tether.tools.output import OutputSpec
from tether.tools.registry import ToolRegistry

__all__ = ["AgentSpec"]

OutputT = TypeVar("OutputT", default=str)


@frozen
class AgentSpec(Generic[OutputT]):
    """What an agent's configuration resolves to, computed once (derived, not configured)."""

    name: str
    """The agent's name."""
    instructions: str
    """The full system instructions (the agent's, plus how to finish)."""
    registry: ToolRegistry
    """The agent's own tools."""
    output: OutputSpec[OutputT]
    """The output type as ``finish_task``."""
    definitions: tuple[ToolDefinition, ...]
    """Every tool the model is offered, control tools included."""
    finish_definition: ToolDefinition
    """``finish_task`` as the model sees it."""
    tool_names: tuple[str, ...]
    """Their names."""
    tool_map: Mapping[str, ToolDefinition]
    """Every offered tool's definition by name (what the policy reads)."""
    ask_user: ToolDefinition | None
    """The ``ask_user`` definition, when the agent may ask."""
    limits: Limits
    """The run limits."""
    model_settings: ModelSettings
    """Generation settings."""
    policy: Policy
    """The policy gate."""
    backoff: Backoff
    """Retry back-off for transient model failures."""
    digest: str
    """SHA-256 of instructions, tool definitions, output schema and limits."""
    redactor: Redactor | None = None
    """What keeps secrets out of the run's log (``None``: nothing is redacted)."""
    prompt: JsonObject | None = None
    """Where the instructions came from, when a prompt template rendered them (its id,
    version and the text's hash: ``tether.prompts``)."""
    budget_warnings: tuple[float, ...] = (0.8,)
    """The fractions of each limit at which the run records a ``budget_warning``."""
    thinking: Thinking | None = None
    """The thinking stages in use (``None``: none, the plain loop)."""
    memory: Remember | None = None
    """How the run uses long-term memory (``None``: it does not)."""
    session_history: SessionHistory = SessionHistory()
    """How much of a session's earlier conversation a run in one reads."""
    compaction: Compaction | None = None
    """When the run condenses its older turns to fit (``None``: never)."""
    knowledge: Knowledge | None = None
    """The knowledge base ``search_knowledge`` searches (``None``: none is offered)."""

    @property
    def can_ask_user(self) -> bool:
        """Whether ``ask_user`` is offered."""
        return self.ask_user is not None
