"""Continuing a stored run: answering what it waited for, repairing what a crash left."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import Generic

from tether.content import TextBlock
from tether.errors import ConfigError, UserError
from tether.events import (
    ApprovalGiven,
    Event,
    ModelResponded,
    PolicyDecided,
    RunResumed,
    RunStarted,
    ToolCallFinished,
    ToolCallUnknown,
    UserReplied,
)
from tether.memory.config import MEMORY_TOOLS
from tether.messages import ASK_USER, FINISH_TASK, SEARCH_KNOWLEDGE
from tether.outcome import ErrorInfo
from tether.run.approvalargs import redacted_calls
from tether.run.approving import Approving
from tether.run.base import OutputT, Planned, Stop
from tether.run.budget import warned_from
from tether.run.consulting import question_of
from tether.run.context import RunContext
from tether.run.toolcalls import ToolStage
from tether.run.unfinished import verdict

__all__ = ["Recovery"]


class Recovery(Generic[OutputT]):
    """Resume: the log so far is the run; continue it without repeating anything."""

    __slots__ = ("_approving", "_ctx", "_tools", "committed")

    def __init__(
        self, ctx: RunContext[OutputT], tools: ToolStage[OutputT], approving: Approving[OutputT]
    ) -> None:
        self._ctx = ctx
        self._tools = tools
        self._approving = approving
        self.committed: list[Event] = []
        """What a crash recovery committed before it ran a call again (the loop yields it)."""

    async def recover(self) -> Stop | None:  # noqa: C901 - one pass over what a stop leaves
        """Continue a stored run: answer what it waited for, or repair what a crash left.

        A crash leaves calls whose intent is recorded and whose result is not. A call that
        never passed the policy never ran, and gets a result saying so. One that did may have
        run: it runs again only if that cannot repeat its effect (read-only, idempotent, or
        deduplicated by its idempotency key, which is the same on every attempt); otherwise
        it is recorded as ``tool_call_unknown`` and the model is told so.
        """
        st, spec = self._ctx.state, self._ctx.spec
        events = self._ctx.journal.events
        if not events or not isinstance(events[0], RunStarted):
            raise ConfigError(f"run {self._ctx.run_id!r} has no run_started event to resume from")
        self._restart_clock(events)
        finished = st.finished
        if self._ctx.approvals and (finished is None or finished.status != "waiting_for_approval"):
            where = "has not stopped" if finished is None else f"ended {finished.status}"
            raise UserError(
                f"run {self._ctx.run_id!r} does not wait for approvals (it {where}); approvals "
                "apply only to the calls a waiting run lists (resume it without approvals)"
            )
        if self._ctx.answer is not None and (
            finished is None or finished.status != "waiting_for_user"
        ):
            if finished is None:
                state, then = "has not stopped", "resume it without an answer to continue it"
            elif finished.status == "waiting_for_approval":
                state, then = "waits for approvals", "resume it with approvals=[...] instead"
            else:
                state, then = f"ended {finished.status}", "its log shows how it ended"
            raise UserError(
                f"run {self._ctx.run_id!r} does not wait for an answer (it {state}), so the answer "
                f"was not given to it: {then}"
            )
        if finished is not None:
            if finished.status == "waiting_for_user":
                if self._ctx.answer is None:
                    raise UserError(
                        f"run {self._ctx.run_id!r} waits for the user's answer to "
                        f"{finished.question!r}: resume it with answer=..."
                    )
                self._ctx.add(RunResumed, reason="answer", attempt=1, owner=self._ctx.owner)
                self._ctx.add(UserReplied, text=self._ctx.answer)
                for call in list(st.pending.values()):
                    text = (
                        self._ctx.answer
                        if call.name == ASK_USER
                        else "not executed: the run paused"
                    )
                    self._ctx.add(
                        ToolCallFinished,
                        call_id=call.id,
                        tool=call.name,
                        content=(TextBlock(text=text),),
                        synthetic=call.name != ASK_USER,
                        is_error=call.name != ASK_USER,
                        error_type=None if call.name == ASK_USER else "run_ended",
                    )
                return None
            if finished.status == "waiting_for_approval":
                return self._approving.take_approvals(self._ctx.approvals)
            return None  # ended for good: the outcome is in the log
        attempt = 1  # crashes in a row with no progress (a tool's own result) between them:
        for e in reversed(events):  # a long run may crash now and then (a model answer is no
            if isinstance(e, ToolCallFinished) and not e.synthetic:  # progress: a call after
                break  # it may be what kills the process, every time)
            if isinstance(e, RunResumed) and e.reason == "crash":
                attempt += 1
        self._ctx.add(RunResumed, reason="crash", attempt=attempt, owner=self._ctx.owner)
        if attempt > self._ctx.max_recoveries:
            message = (
                f"gave up after {attempt - 1} recovery attempts in a row with no progress "
                "between them; the log shows where it stopped"
            )
            return Stop("failed", error=ErrorInfo(type="RecoveryFailed", message=message))
        # committed before a call runs again: one that kills the process every time still
        # leaves its recoveries counted (else max_recoveries never came)
        self.committed = await self._ctx.journal.commit()
        decided = {e.call_id: e for e in events if isinstance(e, PolicyDecided)}
        given = {e.call_id: e for e in events if isinstance(e, ApprovalGiven)}
        masked = redacted_calls(events)  # their stored arguments are not what the tool got
        stop: Stop | None = None
        waiting = False
        for call in list(st.pending.values()):
            became, text = verdict(call, decided, given)
            if became == "not_started":  # never passed the policy, so it never ran
                self._ctx.refuse(
                    call,
                    "not executed: the run stopped before this call started; call it again if "
                    "it is still needed",
                    "interrupted",
                )
                continue
            if became == "waiting":
                waiting = True  # still waits for a human: nothing ran
                continue
            if became == "denied":
                self._ctx.refuse(call, text, "denied")
                continue
            approval = given.get(call.id)
            if approval is not None and approval.arguments is not None:
                call = replace(call, arguments=approval.arguments)  # the approved, edited ones
            if call.name == FINISH_TASK:
                output = spec.output.validate(call.arguments)
                if self._tools.check_citations is not None:  # not taken unchecked
                    item = Planned(call)
                    item.output, item.finish = output, True
                    self._tools.check_citations(item)
                    if item.synthetic is not None:
                        self._tools.record_result(
                            item, item.synthetic, item.error_type, 0.0, synthetic=True
                        )
                        continue
                self._ctx.output = output
                self._ctx.add(
                    ToolCallFinished,
                    call_id=call.id,
                    tool=call.name,
                    content=(TextBlock(text="done"),),
                )
                stop = Stop("finished")
                continue
            if call.name == ASK_USER:
                stop = Stop("waiting_for_user")
                continue
            if call.name == SEARCH_KNOWLEDGE:  # read-only: searched again
                item = Planned(call)
                item.search = question_of(call)
                if item.search is None or self._tools.consult is None:
                    self._ctx.refuse(
                        call,
                        "not executed: the run stopped before this call started",
                        "interrupted",
                    )
                    continue
                await self._tools.consult(item)
                assert item.answered is not None
                self._tools.record_result(item, item.answered, item.error_type, item.seconds)
                continue
            tool = spec.registry.get(call.name)
            # the memory tools redact their own input: the stored arguments do what they did
            own = self._tools.memory is not None and call.name in MEMORY_TOOLS
            if tool is not None and tool.safe_to_retry and (call.id not in masked or own):
                item = Planned(call)
                item.tool = tool
                item.arguments = tool.validator(call.arguments)
                result, error_type, duration = await self._tools.run_one(item)
                self._tools.record_result(item, result, error_type, duration)
                continue
            self._ctx.add(
                ToolCallUnknown,
                call_id=call.id,
                tool=call.name,
                reason=(
                    f"the run stopped while {call.name} was running; it may or may not have taken "
                    "effect. Do not assume either: check before calling it again"
                ),
            )
        if stop is None and waiting:
            stop = Stop("waiting_for_approval")
        if stop is None:
            stop = self._finished_before_crash()
        return stop

    def _finished_before_crash(self) -> Stop | None:
        """A run whose last turn's ``finish_task`` succeeded but whose outcome was not written."""
        for event in reversed(self._ctx.journal.events):
            if (
                isinstance(event, ToolCallFinished)
                and event.tool == FINISH_TASK
                and not event.is_error
            ):
                call = next(
                    c
                    for e in self._ctx.journal.events
                    if isinstance(e, ModelResponded) and e.purpose is None
                    for c in e.tool_calls
                    if c.id == event.call_id
                )
                self._ctx.output = self._ctx.spec.output.validate(call.arguments)
                return Stop("finished")
            if isinstance(event, ModelResponded) and event.purpose is None:
                return None
        return None

    def _restart_clock(self, events: Sequence[Event]) -> None:
        """Resume the run's time budget where it stopped (waiting time not counted)."""
        used = (events[-1].at - events[0].at).total_seconds()
        self._ctx.t0 = self._ctx.monotonic() - used
        max_seconds = self._ctx.spec.limits.max_seconds
        if max_seconds is not None:
            self._ctx.deadline = self._ctx.t0 + max_seconds
        self._ctx.warned.update(warned_from(events, self._ctx.spec.budget_warnings))
