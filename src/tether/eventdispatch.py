"""One dispatch over the event kinds, shared by every fold and view of a log.

``EventHandler`` has one method per kind of event (``on_run_started``, ...), all abstract:
a handler that forgets a kind cannot be made, so a new kind of event cannot be missed by the
state fold (``tether.state``) or the renderer (``tether.cli.render``). ``handle(event)``
calls the method for the event's class: one dictionary lookup, built once per handler class.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable
from typing import Any, ClassVar, Generic

from typing_extensions import TypeVar

from tether.events import (
    EVENT_TYPES,
    ApprovalGiven,
    ApprovalRequested,
    BudgetWarning,
    ContextCompacted,
    Event,
    KnowledgeRetrieved,
    LimitReached,
    MemoryRecalled,
    MemoryWritten,
    ModelFailed,
    ModelResponded,
    PlanMade,
    PlanRevised,
    PolicyDecided,
    Redacted,
    Reflected,
    RetryPrompted,
    Routed,
    RunFinished,
    RunResumed,
    RunStarted,
    SessionContinued,
    ToolCallFinished,
    ToolCallRequested,
    ToolCallUnknown,
    UserReplied,
)

__all__ = ["EventHandler"]

R = TypeVar("R")


class EventHandler(ABC, Generic[R]):
    """Handles each kind of event with a method of its own (see the module's docstring)."""

    __slots__ = ()
    _table: ClassVar[dict[type[Any], Callable[[Any, Any], Any]]] = {}

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        cls._table = {
            event_class: getattr(cls, f"on_{kind}") for kind, event_class in EVENT_TYPES.items()
        }

    def handle(self, event: Event) -> R:
        """Call the method for ``event``'s kind."""
        result: R = self._table[type(event)](self, event)
        return result

    @abstractmethod
    def on_run_started(self, event: RunStarted) -> R:
        """Handle ``run_started``."""

    @abstractmethod
    def on_session_continued(self, event: SessionContinued) -> R:
        """Handle ``session_continued``."""

    @abstractmethod
    def on_plan_made(self, event: PlanMade) -> R:
        """Handle ``plan_made``."""

    @abstractmethod
    def on_plan_revised(self, event: PlanRevised) -> R:
        """Handle ``plan_revised``."""

    @abstractmethod
    def on_routed(self, event: Routed) -> R:
        """Handle ``routed``."""

    @abstractmethod
    def on_model_responded(self, event: ModelResponded) -> R:
        """Handle ``model_responded``."""

    @abstractmethod
    def on_model_failed(self, event: ModelFailed) -> R:
        """Handle ``model_failed``."""

    @abstractmethod
    def on_retry_prompted(self, event: RetryPrompted) -> R:
        """Handle ``retry_prompted``."""

    @abstractmethod
    def on_tool_call_requested(self, event: ToolCallRequested) -> R:
        """Handle ``tool_call_requested``."""

    @abstractmethod
    def on_policy_decided(self, event: PolicyDecided) -> R:
        """Handle ``policy_decided``."""

    @abstractmethod
    def on_approval_requested(self, event: ApprovalRequested) -> R:
        """Handle ``approval_requested``."""

    @abstractmethod
    def on_approval_given(self, event: ApprovalGiven) -> R:
        """Handle ``approval_given``."""

    @abstractmethod
    def on_tool_call_finished(self, event: ToolCallFinished) -> R:
        """Handle ``tool_call_finished``."""

    @abstractmethod
    def on_tool_call_unknown(self, event: ToolCallUnknown) -> R:
        """Handle ``tool_call_unknown``."""

    @abstractmethod
    def on_reflected(self, event: Reflected) -> R:
        """Handle ``reflected``."""

    @abstractmethod
    def on_memory_recalled(self, event: MemoryRecalled) -> R:
        """Handle ``memory_recalled``."""

    @abstractmethod
    def on_memory_written(self, event: MemoryWritten) -> R:
        """Handle ``memory_written``."""

    @abstractmethod
    def on_knowledge_retrieved(self, event: KnowledgeRetrieved) -> R:
        """Handle ``knowledge_retrieved``."""

    @abstractmethod
    def on_context_compacted(self, event: ContextCompacted) -> R:
        """Handle ``context_compacted``."""

    @abstractmethod
    def on_budget_warning(self, event: BudgetWarning) -> R:
        """Handle ``budget_warning``."""

    @abstractmethod
    def on_limit_reached(self, event: LimitReached) -> R:
        """Handle ``limit_reached``."""

    @abstractmethod
    def on_run_resumed(self, event: RunResumed) -> R:
        """Handle ``run_resumed``."""

    @abstractmethod
    def on_user_replied(self, event: UserReplied) -> R:
        """Handle ``user_replied``."""

    @abstractmethod
    def on_redacted(self, event: Redacted) -> R:
        """Handle ``redacted``."""

    @abstractmethod
    def on_run_finished(self, event: RunFinished) -> R:
        """Handle ``run_finished``."""
