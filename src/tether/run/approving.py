"""Continuing a run that waits for approvals: record the humans' decisions, then act on them.

The decisions (``approval_given``) are committed before any approved call runs, so a crash
while it runs leaves a log that says it was approved and in flight: it is then re-run only
if that is safe, never approved and run a second time.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Generic

from tether.codec import canonical_json
from tether.content import ToolResult
from tether.errors import ModelRetry, UserError
from tether.events import (
    ApprovalGiven,
    ApprovalRequested,
    PolicyDecided,
    RunResumed,
)
from tether.jsontypes import JsonObject
from tether.messages import ASK_USER, ToolCall
from tether.policy.approvals import Approval
from tether.policy.base import PolicyDecision
from tether.run import vault
from tether.run.approvalargs import has_redaction, redacted_calls, secret_gone
from tether.run.base import OutputT, Planned, Stop
from tether.run.context import RunContext
from tether.run.toolcalls import ToolStage
from tether.run.unfinished import denial_text

__all__ = ["Approving"]


class Approving(Generic[OutputT]):
    """Taking a waiting run's approvals (the tool stage decides on edited arguments)."""

    __slots__ = ("_ctx", "_tools", "decided")

    def __init__(self, ctx: RunContext[OutputT], tools: ToolStage[OutputT]) -> None:
        self._ctx = ctx
        self._tools = tools
        self.decided: list[Planned] | None = None
        """The decided calls, once their approvals are recorded: the loop runs them next."""

    def _waiting_requests(self) -> dict[str, ApprovalRequested]:
        """The run's approval requests no human has decided yet, in call order."""
        requested: dict[str, ApprovalRequested] = {}
        for event in self._ctx.journal.events:
            if isinstance(event, ApprovalRequested):
                requested[event.call_id] = event
            elif isinstance(event, ApprovalGiven):
                requested.pop(event.call_id, None)
        pending = self._ctx.state.pending
        return {k: v for k, v in requested.items() if k in pending}

    def take_approvals(self, approvals: tuple[Approval, ...]) -> Stop | None:
        """Check and record the decisions; plan the decided calls, or keep waiting.

        Raises:
            UserError: no approvals, or one that does not match a pending request of this
                run (another run, another call, other arguments, decided twice); nothing
                is recorded then.
        """
        waiting = self._waiting_requests()
        listing = "; ".join(
            f"{r.call_id}: {r.tool} {canonical_json(r.arguments).decode()}"
            for r in waiting.values()
        )
        if not approvals:
            raise UserError(
                f"run {self._ctx.run_id!r} waits for approval of {listing}. Resume it with "
                "approvals=[Approval.approve(pending) or Approval.deny(pending)] "
                "(`tether approve RUN CALL` from the command line)"
            )
        seen: set[str] = set()
        for approval in approvals:
            self._check_approval(approval, waiting, seen, listing)
        self._ctx.add(RunResumed, reason="approvals", attempt=1, owner=self._ctx.owner)
        by_call = {a.call_id: a for a in approvals}
        for call_id in waiting:
            approval = by_call.get(call_id)
            if approval is not None:
                if approval.approved and approval.arguments is not None:
                    # given again (or edited): the log gets them redacted, the call them whole
                    vault.keep(self._ctx.run_id, call_id, approval.arguments)
                self._ctx.add(
                    ApprovalGiven,
                    call_id=call_id,
                    approved=approval.approved,
                    arguments=approval.arguments if approval.approved else None,
                    by=approval.by,
                    reason=approval.reason,
                )
        self._tools.policy.observe()  # its bookkeeping never blocks a human's decision
        if len(by_call) < len(waiting):
            return Stop("waiting_for_approval")
        self.decided = self._plan_decided()
        return None

    def _check_approval(
        self,
        approval: Approval,
        waiting: dict[str, ApprovalRequested],
        seen: set[str],
        listing: str,
    ) -> None:
        call_id = approval.call_id
        if approval.run_id is None:
            raise UserError(
                f"the approval of {call_id!r} does not name its run: build it from the pending "
                "call (Approval.approve(outcome.pending[i])) or pass run_id="
            )
        if approval.run_id != self._ctx.run_id:
            raise UserError(
                f"the approval of {call_id!r} is for run {approval.run_id!r}, not "
                f"{self._ctx.run_id!r}: an approval never applies to another run"
            )
        if call_id in seen:
            raise UserError(f"two decisions for {call_id!r} in one resume; give one")
        seen.add(call_id)
        request = waiting.get(call_id)
        if request is None:
            decided = any(
                isinstance(e, ApprovalGiven) and e.call_id == call_id
                for e in self._ctx.journal.events
            )
            why = "was already decided" if decided else "does not wait for approval"
            raise UserError(
                f"call {call_id!r} of run {self._ctx.run_id!r} {why}; pending: {listing or 'none'}"
            )
        if approval.arguments_hash is None:
            raise UserError(
                f"the approval of {call_id!r} does not say which arguments it approves: build "
                "it from the pending call (Approval.approve(outcome.pending[i])) or pass "
                f"arguments_hash= (pending: {listing})"
            )
        if approval.arguments_hash != request.arguments_hash:
            raise UserError(
                f"the approval of {call_id!r} was given for other arguments than the pending "
                f"request ({request.tool} {canonical_json(request.arguments).decode()}); "
                "look at the request again and approve what it asks"
            )
        tool = self._ctx.spec.registry.get(request.tool)
        if approval.arguments is not None and tool is not None:  # edited: would they run?
            try:
                tool.validator(approval.arguments)
            except ModelRetry as exc:  # approved, the call would only fail: nothing recorded
                raise UserError(
                    f"the edited arguments of {call_id!r} do not fit {request.tool}: "
                    f"{exc.message}. Give all of its arguments, as they should be"
                ) from None

    def _plan_decided(self) -> list[Planned]:
        """Every pending call with a human decision: what happens to it now, in call order."""
        given: dict[str, ApprovalGiven] = {}
        for event in self._ctx.journal.events:
            if isinstance(event, ApprovalGiven):
                given[event.call_id] = event
        planned: list[Planned] = []
        masked = redacted_calls(self._ctx.journal.events)
        for call in list(self._ctx.state.pending.values()):
            approval = given.get(call.id)
            if approval is None:
                continue  # ask_user: answered later by the user
            item = Planned(call)
            planned.append(item)
            if not approval.approved:
                item.synthetic, item.error_type = ToolResult.error(denial_text(approval)), "denied"
                continue
            tool = self._ctx.spec.registry.get(call.name)
            if tool is None:
                item.synthetic = ToolResult.error(
                    f"not executed: this agent has no tool named {call.name!r} any more"
                )
                item.error_type = "unknown_tool"
                continue
            arguments = self._approved_arguments(call, approval, call.id in masked)
            if arguments is None:
                item.synthetic = ToolResult.error(secret_gone(call.id))
                item.error_type = "redacted_arguments"
                continue
            try:
                item.arguments = tool.validator(arguments)
            except ModelRetry as exc:
                item.synthetic, item.error_type = ToolResult.error(exc.message), "invalid_arguments"
                continue
            except Exception as exc:  # a broken validator is the tool's fault, not the run's
                item.synthetic = ToolResult.error(
                    f"{tool.name} failed: {type(exc).__name__}: {exc}"
                )
                item.error_type = "exception"
                continue
            if approval.arguments is not None:
                decision = self._recheck(
                    ToolCall(id=call.id, name=call.name, arguments=arguments),
                    item.arguments,
                    approval,
                )
                if decision.decision == "deny":
                    item.synthetic = ToolResult.error(
                        f"denied by policy ({decision.rule}): {decision.reason}"
                    )
                    item.error_type = "denied"
                    continue
            item.tool = tool
        return planned

    def _approved_arguments(
        self, call: ToolCall, approval: ApprovalGiven, masked: bool
    ) -> JsonObject | None:
        """What an approved call runs with; ``None``: its secret is not in this process."""
        arguments = call.arguments if approval.arguments is None else approval.arguments
        if masked or has_redaction(arguments):
            return vault.take(self._ctx.run_id, call.id)  # the log holds markers, not the secret
        return arguments

    def _recheck(
        self, call: ToolCall, validated: Mapping[str, Any], approval: ApprovalGiven
    ) -> PolicyDecision:
        """Edited arguments are a new request: the policy checks them; a deny stands."""
        decision = self._tools.policy.decide(call, validated, self._ctx.spec.tool_map[call.name])
        if decision.decision != "deny":
            who = approval.by or "a human"
            decision = PolicyDecision(
                decision="allow",
                rule="human_approval",
                reason=(
                    f"approved by {who} with edited arguments; the policy's own answer was "
                    f"{decision.decision} ({decision.rule})"
                ),
            )
        self._ctx.add(
            PolicyDecided,
            call_id=call.id,
            tool=call.name,
            decision=decision.decision,
            rule=decision.rule,
            reason=decision.reason,
        )
        return decision

    def after_decided(self) -> Stop | None:
        """After the decided calls ran: a question still open waits for the user."""
        if any(c.name == ASK_USER for c in self._ctx.state.pending.values()):
            return Stop("waiting_for_user")
        return None
