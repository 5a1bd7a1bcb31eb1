"""The policy port: one deterministic check every tool call passes before it runs."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence

from tether._internal.frozen import frozen
from tether.content import ToolResult
from tether.events import Decision, Event
from tether.messages import ToolCall
from tether.tools.base import ToolDefinition

__all__ = ["AllowAll", "Policy", "PolicyContext", "PolicyDecision"]


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


@frozen
class PolicyContext:
    """What a policy may read about the run a call belongs to."""

    run_id: str
    """The run."""
    events: Sequence[Event]
    """The run's log so far (it grows as the run goes on; never modify it)."""
    tools: Mapping[str, ToolDefinition]
    """Every tool the agent offers, by name (control tools included)."""


class Policy(ABC):
    """Decides on tool calls. Must be deterministic code: never ask a model.

    ``decide`` is the one abstract method. A policy may also check results
    (``check_result``) and cap how many calls of a tool run at once (``concurrency``).
    """

    @abstractmethod
    def decide(self, call: ToolCall, tool: ToolDefinition, run: PolicyContext) -> PolicyDecision:
        """Decide on one call, after ``tool_call_requested`` and before it runs.

        Args:
            call: The call, with the model's arguments (already validated).
            tool: The tool's definition, annotations included.
            run: The run so far (its log, its tools), for rate limits, provenance and such.
        """

    def check_result(
        self, call: ToolCall, tool: ToolDefinition, result: ToolResult, run: PolicyContext
    ) -> ToolResult | None:
        """Check a result before it is recorded; return a replacement, or ``None`` to keep it."""
        return None

    def concurrency(self, tool: str) -> int | None:
        """How many calls of ``tool`` may run at once in this process (``None``: no cap)."""
        return None

    def observe(self, run: PolicyContext) -> None:  # noqa: B027 - optional hook
        """The run's log grew outside a decision (humans decided on approvals): catch up.

        A policy that counts calls uses it to give back the places of denied calls.
        """


class AllowAll(Policy):
    """Allows every call: no gate at all. Only for tests and fully trusted tools."""

    _DECISION = PolicyDecision(decision="allow", rule="allow_all", reason="no policy configured")

    def decide(self, call: ToolCall, tool: ToolDefinition, run: PolicyContext) -> PolicyDecision:
        """Allow."""
        return self._DECISION
