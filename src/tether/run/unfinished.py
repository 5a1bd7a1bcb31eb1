"""Calls a stopped run left without a result: what the log says became of each.

A crash (or a run given up) leaves calls whose intent is recorded and whose result is not.
The log alone tells whether one can have run: a call never decided never started, one
waiting for a human never ran, one denied (by the policy, or by a human, whose decision is
the last) never ran, and only one allowed or approved may have. Crash recovery and
``tether abandon`` both judge them here, and both answer a call that did not run the same
way (``refuse``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, Literal

from tether.content import TextBlock
from tether.events import ApprovalGiven, Event, PolicyDecided, ToolCallFinished
from tether.messages import ToolCall

__all__ = ["Verdict", "denial_text", "refuse", "verdict"]

Verdict = tuple[Literal["not_started", "waiting", "denied", "may_have_run"], str]
"""What became of the call, and for a denied one the text the model gets."""


def denial_text(approval: ApprovalGiven) -> str:
    """What the model reads when a human denied its call."""
    who = approval.by or "a human"
    because = f": {approval.reason}" if approval.reason else ""
    return f"denied by {who}{because}. Do not try this call again unless the user asks for it"


def verdict(
    call: ToolCall,
    decided: Mapping[str, PolicyDecided],
    given: Mapping[str, ApprovalGiven],
) -> Verdict:
    """What the log says of ``call``: never started, waits, denied, or may have run.

    The last decision stands: a deny (also of edited arguments after an approval) is final;
    otherwise only an allow or a human's approval lets a call run.
    """
    decision = decided.get(call.id)
    if decision is None:
        return "not_started", ""
    approval = given.get(call.id)
    if decision.decision == "needs_approval" and approval is None:
        return "waiting", ""
    denied = decision.decision == "deny" or (approval is not None and not approval.approved)
    allowed = decision.decision == "allow" or (approval is not None and approval.approved)
    if denied or not allowed:
        if approval is None or approval.approved:
            return "denied", f"denied by policy ({decision.rule}): {decision.reason}"
        return "denied", denial_text(approval)
    return "may_have_run", ""


def refuse(add: Callable[..., Event], call: ToolCall, text: str, error_type: str) -> Any:
    """Answer ``call`` with an error tether writes itself: the tool did not run."""
    return add(
        ToolCallFinished,
        call_id=call.id,
        tool=call.name,
        content=(TextBlock(text=text),),
        is_error=True,
        error_type=error_type,
        synthetic=True,
    )
