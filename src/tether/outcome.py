"""The result contract of a run: its status, typed output, answer, usage and events."""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING, Generic

from typing_extensions import TypeVar

from tether._internal.frozen import frozen
from tether.status import TERMINAL_STATUSES, ErrorInfo, RunStatus
from tether.usage import Usage

if TYPE_CHECKING:
    from tether.events import Event, PolicyDecided

__all__ = ["TERMINAL_STATUSES", "ErrorInfo", "PendingCall", "RunOutcome", "RunStatus"]

OutputT = TypeVar("OutputT", default=str)


@frozen
class PendingCall:
    """A tool call that waits for a human decision (``Approval.approve(pending)`` answers it)."""

    call_id: str
    """The call's id."""
    tool: str
    """The tool's name."""
    arguments: dict[str, object]
    """The exact arguments the approval would bind to."""
    run_id: str = ""
    """The run it belongs to (an approval never applies to another run)."""
    arguments_hash: str = ""
    """SHA-256 of the canonical arguments: what an approval binds to."""
    rule: str = ""
    """The policy rule that asked for approval."""
    reason: str = ""
    """Why, in the policy's words."""
    note: str = ""
    """What the approver must know besides (the arguments hold a secret, and where it is)."""


@frozen
class RunOutcome(Generic[OutputT]):
    """Everything a caller needs from a run (covers seed 004's ``AgentResult``)."""

    run_id: str
    """The run's id."""
    status: RunStatus
    """How the run ended."""
    output: OutputT | None
    """The validated output of ``finish_task``; ``None`` unless ``status == "finished"``."""
    answer: str | None
    """Text answer: the output as text when finished, else the best-effort answer, if any."""
    usage: Usage
    """Tokens and cost over the run."""
    steps: int
    """Model turns taken."""
    tool_calls: int
    """Tool calls executed."""
    events: tuple[Event, ...]
    """The run's whole event log."""
    started_at: datetime
    """When the run started (UTC)."""
    finished_at: datetime
    """When the run ended (UTC)."""
    error: ErrorInfo | None = None
    """Why the run failed, was cancelled or was stopped."""
    limit: str | None = None
    """For ``budget_exhausted``: the limit that was reached."""
    question: str | None = None
    """For ``waiting_for_user``: what the agent asks."""
    pending: tuple[PendingCall, ...] = ()
    """For ``waiting_for_approval``: the calls waiting for a decision."""
    warnings: tuple[str, ...] = ()
    """What the caller should know although the run went as it did, e.g. that ``max_cost``
    could not be enforced because a model's price is unknown."""

    @property
    def denied(self) -> tuple[PolicyDecided, ...]:
        """Every call the policy denied in this run: its decision (call, tool, rule, reason).

        A denied call did not run; the model was told, and the run went on (or stopped, if
        the rule said so). Check this before trusting a ``finished`` run's answer.
        """
        return tuple(e for e in self.events if e.kind == "policy_decided" and e.decision == "deny")

    @property
    def unresolved_denials(self) -> tuple[PolicyDecided, ...]:
        """The denied calls the run never made up for (no later call of the tool succeeded).

        A ``finished`` run with any gave its answer without what they would have done
        (``tether run`` then exits 3).
        """
        unresolved: dict[str, list[PolicyDecided]] = {}
        for event in self.events:
            if event.kind == "policy_decided" and event.decision == "deny":
                unresolved.setdefault(event.tool, []).append(event)
            elif (
                event.kind == "tool_call_finished"
                and not event.is_error
                and not event.synthetic
                and event.tool in unresolved
            ):
                del unresolved[event.tool]
        return tuple(sorted((d for ds in unresolved.values() for d in ds), key=lambda d: d.seq))

    @property
    def success(self) -> bool:
        """Whether the task was completed (``status == "finished"``)."""
        return self.status == "finished"

    @property
    def duration_s(self) -> float:
        """Wall-clock seconds from start to end."""
        return (self.finished_at - self.started_at).total_seconds()
