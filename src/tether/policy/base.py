"""The policy port: one deterministic check every tool call passes before it runs."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence

from tether._internal.frozen import frozen
from tether.events import Decision, Event
from tether.messages import ToolCall
from tether.tools.base import ToolDefinition

__all__ = ["AllowAll", "Policy", "PolicyDecision"]


@frozen
class PolicyDecision:
    """A decision and why."""

    decision: Decision
    """allow, deny or needs_approval."""
    rule: str
    """The rule that decided."""
    reason: str
    """Why, in words the model and an auditor can read."""
    stop_run: bool = False
    """With ``deny``: also end the run with ``policy_denied`` (for calls that must not be retried)."""


class Policy(ABC):
    """Decides on tool calls. Must be deterministic code: never ask a model."""

    @abstractmethod
    def decide(
        self, call: ToolCall, tool: ToolDefinition, events: Sequence[Event]
    ) -> PolicyDecision:
        """Decide on one call.

        Args:
            call: The call, with the model's arguments (already validated).
            tool: The tool's definition, annotations included.
            events: The run's log so far (for rate limits, provenance and such).
        """


class AllowAll(Policy):
    """Allows every call. The default until a policy is configured."""

    _DECISION = PolicyDecision(decision="allow", rule="allow_all", reason="no policy configured")

    def decide(
        self, call: ToolCall, tool: ToolDefinition, events: Sequence[Event]
    ) -> PolicyDecision:
        """Allow."""
        return self._DECISION
