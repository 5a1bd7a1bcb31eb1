"""A turn's tool calls: intent, validation, the policy, and execution.

Calls run in parallel up to a cap, and each gets exactly one result, in call order.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine, Mapping
from typing import Any, Generic, cast

from tether.content import TextBlock, ToolResult
from tether.errors import LoopBlocked, ModelRetry
from tether.events import (
    ApprovalRequested,
    Event,
    PolicyDecided,
    RetryPrompted,
    ToolCallFinished,
    ToolCallRequested,
    ToolCallUnknown,
)
from tether.jsontypes import JsonObject
from tether.memory.config import MEMORY_TOOLS
from tether.messages import ASK_USER, FINISH_TASK, SEARCH_KNOWLEDGE
from tether.models.base import ModelResponse
from tether.outcome import ErrorInfo
from tether.policy.base import PolicyDecision
from tether.run import vault
from tether.run.approvalargs import arguments_hash
from tether.run.base import Cancelled, OutputT, Planned, Stop
from tether.run.consulting import question_of
from tether.run.context import RunContext
from tether.run.loopmonitor import Call
from tether.run.policypoint import PolicyPoint
from tether.run.reflexion import Reflexion
from tether.run.remembering import Notes
from tether.run.toolexec import (
    ABANDONED,
    INTERRUPTED,
    Drive,
    Turn,
    abandoned_text,
    bounded,
    no_turn,
    run_tool,
    timed_out,
    tool_error,
)
from tether.tools.base import MemoryAccess, Tool, ToolContext

__all__ = ["ToolStage"]

_NO_CONTEXT = ToolContext(run_id="", call_id="", tool="")


class ToolStage(Generic[OutputT]):
    """A turn's tool calls, each on one path: intent, validation, the policy, the call, its check.

    The policy is consulted through one point (``policy``, a ``PolicyPoint``): its decision
    before a call, its concurrency slot for the call's turn, its check of the result.
    """

    __slots__ = (
        "_add",
        "_ctx",
        "_interrupts",
        "_journal",
        "_spec",
        "_state",
        "after_turn_recall",
        "check_answer",
        "check_citations",
        "check_reply",
        "consult",
        "memory",
        "policy",
        "reflexion",
        "runnable",
    )

    def __init__(self, ctx: RunContext[OutputT]) -> None:
        self._ctx = ctx
        self._spec = ctx.spec
        self._state = ctx.state
        self._journal = ctx.journal
        self._add = ctx.add
        self._interrupts = ctx.interrupts
        self.policy = PolicyPoint.of(ctx)
        """Where every call meets the policy: its decision, its turn, its result's check."""
        self.runnable = 0
        """How many calls of the turn just planned will run (more than one: in parallel)."""
        self.check_answer: Callable[[Planned], Awaitable[None]] | None = None
        """Checks ``finish_task``'s answer before it is taken (the reflector), if on."""
        self.check_citations: Callable[[Planned], None] | None = None
        """Sends back a ``finish_task`` whose citations do not hold (knowledge), the check a
        recovered answer passes too."""
        self.check_reply: Callable[[str], str | None] | None = None
        """Why a plain-text reply cannot end the run (knowledge: its citations), if any."""
        self.consult: Callable[[Planned], Awaitable[None]] | None = None
        """Answers a ``search_knowledge`` call (``item.answered``), with a knowledge base."""
        self.memory: Callable[[str, Notes], MemoryAccess] | None = None
        """The run's memory for a call of the memory tools (``Remember(tools=True)``)."""
        self.reflexion: Reflexion[OutputT] | None = None
        """Reflects on failed calls and refuses a third identical one, if on."""
        self.after_turn_recall: Callable[[], Awaitable[bool]] | None = None
        """After a turn's results: what memory holds on a failed call, if on."""

    def plan(self, response: ModelResponse) -> list[Planned]:  # noqa: C901 - a flat decision table
        """Record intent and decide, for every call of the turn, what happens to it."""
        add, spec = self._add, self._spec
        calls = response.tool_calls
        if not calls:
            self.runnable = 0
            return []
        reason = response.text or None
        redacted: dict[str, JsonObject] = {}  # call id: its arguments as the log holds them
        journal = self._journal
        # the calls repeat what the model's answer held: if the redactor passed that, they pass
        record = journal.add if self._ctx.answer_redacted else journal.add_seen
        for call in calls:
            recorded = record(
                ToolCallRequested,
                call_id=call.id,
                tool=call.name,
                arguments=call.arguments,
                reason=reason,
            )
            if recorded.arguments is not call.arguments:
                redacted[call.id] = recorded.arguments  # markers where the secrets were
        budget = spec.limits.max_tool_calls - self._state.tool_calls
        runnable = 0
        planned: list[Planned] = []
        finishing = False
        for call in calls:
            item = Planned(call)
            planned.append(item)
            name = call.name
            if finishing:  # finish_task ends the turn: what comes after it does not run
                item.synthetic = ToolResult.error("not executed: finish_task came before this call")
                item.error_type = "after_finish"
                continue
            if call.parse_error is not None:
                item.synthetic = ToolResult.error(
                    f"the arguments are not a JSON object: {call.parse_error}"
                )
                item.error_type = "invalid_arguments"
                continue
            if name == FINISH_TASK:
                definition = spec.finish_definition
                try:
                    item.output = spec.output.validate(call.arguments)
                except ModelRetry as exc:
                    item.synthetic, item.error_type = (
                        ToolResult.error(exc.message),
                        "invalid_output",
                    )
                    continue
                except Exception as exc:  # an output type's own validator failed
                    message = f"invalid output: {type(exc).__name__}: {exc}"
                    item.synthetic, item.error_type = ToolResult.error(message), "invalid_output"
                    continue
                item.finish = True
            elif name == ASK_USER and spec.can_ask_user:
                assert spec.ask_user is not None
                definition = spec.ask_user
                question = call.arguments.get("question")
                if not isinstance(question, str) or not question:
                    item.synthetic = ToolResult.error(
                        "invalid arguments: 'question' must be a non-empty string"
                    )
                    item.error_type = "invalid_arguments"
                    continue
                item.question = question
            elif name == SEARCH_KNOWLEDGE and spec.knowledge is not None:
                definition = spec.tool_map[SEARCH_KNOWLEDGE]
                question = question_of(call)
                if question is None:
                    item.synthetic = ToolResult.error(
                        "invalid arguments: 'question' must be the question to search for, in words"
                    )
                    item.error_type = "invalid_arguments"
                    continue
                if budget <= 0:
                    item.synthetic, item.error_type = _over_limit(spec.limits.max_tool_calls)
                    continue
                item.search = question
            else:
                tool = spec.registry.get(name)
                if tool is None:
                    item.synthetic = ToolResult.error(
                        f"there is no tool named {name!r}; the tools are: {', '.join(spec.tool_names)}"
                    )
                    item.error_type = "unknown_tool"
                    continue
                try:
                    item.arguments = tool.validator(call.arguments)
                except ModelRetry as exc:
                    item.synthetic, item.error_type = (
                        ToolResult.error(exc.message),
                        "invalid_arguments",
                    )
                    continue
                except Exception as exc:  # a broken validator is the tool's fault, not the run's
                    item.synthetic, item.error_type = tool_error(tool, exc, None)
                    continue
                if self.reflexion is not None and call.id not in redacted:
                    # (redacted arguments look alike whatever the secret: never compared)
                    refused = self.reflexion.repeated(name, call.arguments)
                    if refused is not None:
                        item.synthetic, item.error_type = refused, "repeated_failure"
                        continue
                if budget <= 0:
                    item.synthetic, item.error_type = _over_limit(spec.limits.max_tool_calls)
                    continue
                definition = tool.definition
                item.tool = tool
            decision = self.policy.decide(call, item.arguments, definition)
            if decision.decision == "needs_approval" and (
                item.finish or name == ASK_USER or item.search is not None
            ):
                decision = PolicyDecision(
                    decision="deny",
                    rule=decision.rule,
                    reason=f"{decision.reason} (tether's control tools cannot wait for approval)",
                )
            elif decision.decision == "needs_approval" and call.id in redacted:
                # the log holds markers where the secrets are: the real arguments wait in
                # this process's memory for the approval (``vault``), never in the log
                vault.keep(self._ctx.run_id, call.id, call.arguments)
            # the tool's name was in the answer; a policy's rule and reason mostly repeat
            seen = not self._ctx.answer_redacted and journal.seen(decision.rule, decision.reason)
            (journal.add_seen if seen else add)(
                PolicyDecided,
                call_id=call.id,
                tool=name,
                decision=decision.decision,
                rule=decision.rule,
                reason=decision.reason,
            )
            if decision.decision == "allow":
                if item.tool is not None:
                    budget -= 1
                    runnable += 1
                elif item.search is not None:  # a search counts as a call (it asks the model)
                    budget -= 1
                finishing = finishing or item.finish
            elif decision.decision == "deny":
                item.tool, item.finish, item.question, item.search = None, False, None, None
                item.synthetic = ToolResult.error(
                    f"denied by policy ({decision.rule}): {decision.reason}"
                )
                item.error_type = "denied"
                if decision.stop_run:
                    item.stop_reason = f"{decision.rule}: {decision.reason}"
            else:
                if item.tool is not None:
                    budget -= 1  # an approved call runs: its place is kept
                item.tool, item.finish, item.question = None, False, None
                item.awaiting_approval = True
                shown = redacted.get(call.id, call.arguments)  # never a hash of a secret
                add(
                    ApprovalRequested,
                    call_id=call.id,
                    tool=name,
                    arguments=shown,
                    arguments_hash=arguments_hash(shown),
                )
        self.runnable = runnable
        return planned

    async def execute_inline(self, planned: list[Planned]) -> None:
        """Record every result of a turn with at most one call to run (the common case)."""
        for item in planned:
            if item.tool is not None:
                result, error_type, duration = await self.run_one(item)
                self.record_result(item, result, error_type, duration)
            else:
                await self._control(item, planned)
                self._record_planned(item, planned)
        if self.after_turn_recall is not None:
            await self.after_turn_recall()

    async def execute_parallel(self, planned: list[Planned]) -> AsyncIterator[list[Event]]:
        """Run the allowed calls concurrently (capped) and commit each result in call order."""
        semaphore = asyncio.Semaphore(self._spec.limits.max_parallel_tools)

        async def guarded(item: Planned) -> tuple[ToolResult, str | None, float]:
            async with semaphore:
                return await self.run_one(item, child=True)

        tasks = {id(p): asyncio.ensure_future(guarded(p)) for p in planned if p.tool is not None}
        try:
            for item in planned:
                task = tasks.get(id(item))
                if task is not None:
                    self._interrupts.interruptible = True
                    try:
                        result, error_type, duration = await task
                    except asyncio.CancelledError as exc:
                        self._record_done_siblings(planned, tasks)  # what finished is kept
                        self._interrupts.unwind(exc)
                        raise
                    finally:
                        self._interrupts.interruptible = False
                    self.record_result(item, result, error_type, duration)
                else:
                    await self._control(item, planned)
                    self._record_planned(item, planned)
                if self._journal.has_pending:
                    yield await self._journal.commit()
            if self.after_turn_recall is not None and await self.after_turn_recall():
                yield await self._journal.commit()
        finally:
            pending = [t for t in tasks.values() if not t.done()]
            for task in pending:
                task.cancel()
            if pending:
                await asyncio.gather(*pending, return_exceptions=True)

    def _record_done_siblings(
        self,
        planned: list[Planned],
        tasks: Mapping[int, asyncio.Future[tuple[ToolResult, str | None, float]]],
    ) -> None:
        """On cancellation: keep the real results of calls that did finish.

        They may come out of call order here (an earlier call is still running); a truthful
        log matters more than the order, and each result still answers exactly one call.
        """
        for item in planned:
            if item.call.id not in self._state.pending:
                continue
            task = tasks.get(id(item))
            if task is None or not task.done() or task.cancelled() or task.exception() is not None:
                continue
            result, error_type, duration = task.result()
            self._ctx.in_flight.discard(item.call.id)
            self.record_result(item, result, error_type, duration)

    async def run_one(
        self, item: Planned, *, child: bool = False
    ) -> tuple[ToolResult, str | None, float]:
        """Run one allowed call; ``child`` when it runs in its own task (parallel calls).

        Whatever the tool does, the call ends within its timeout (and the run's remaining
        time) plus ``GRACE``: see ``toolexec``.
        """
        tool = item.tool
        assert tool is not None
        assert item.arguments is not None
        limits = self._spec.limits
        timeout = tool.timeout if tool.timeout is not None else limits.tool_timeout
        t0 = self._ctx.monotonic()
        deadline = self._ctx.deadline
        if deadline is not None:
            remaining = max(0.0, deadline - t0)
            if timeout is None or remaining < timeout:
                timeout = remaining
        memory = None
        if self.memory is not None and tool.name in MEMORY_TOOLS:
            item.notes = []
            memory = self.memory(item.call.id, item.notes)
        ctx = (
            ToolContext(
                run_id=self._ctx.run_id, call_id=item.call.id, tool=tool.name, memory=memory
            )
            if tool.takes_context or self._ctx.tool_runner is not run_tool
            else _NO_CONTEXT
        )
        self._ctx.in_flight.add(item.call.id)
        slot = self.policy.slot(tool.name)
        turn = Turn() if slot is not None else None
        work = self._call(tool, item, ctx, slot, turn)
        if child:  # already in a task of its own: bounded by a timer, watched on its own
            watch = Call(self._ctx.run_id)
            watch.calling(tool.name, timeout)
            result, error_type = await bounded(work, timeout, tool, self._ctx.run_id, turn, watch)
            blocked = watch.done()
        else:
            result, error_type, blocked = await self._on_task(tool, work, timeout, turn)
        if blocked is not None and timeout is not None and self._ctx.monotonic() - t0 > timeout:
            result, error_type = self._blocked(tool, blocked, timeout)
        self._ctx.in_flight.discard(item.call.id)
        if error_type == INTERRUPTED:  # Ctrl-C reached the tool: the run is cancelled
            self._interrupts.interrupt(f"interrupted by KeyboardInterrupt in tool {tool.name!r}")
        if self.policy.checks_results and error_type not in (ABANDONED, "loop_blocked"):
            result, error_type = self.policy.check(item.call, tool, result, error_type)
        return result, error_type, self._ctx.monotonic() - t0

    async def _on_task(
        self,
        tool: Tool,
        work: Coroutine[Any, Any, tuple[ToolResult, str | None]],
        timeout: float | None,
        turn: Turn | None,
    ) -> tuple[ToolResult, str | None, float | None]:
        """The call on the run's own task, bounded by the watchdog; abandoned if it must be.

        Returns its result, its error type, and when it was seen blocking the event loop.
        """
        interrupts = self._interrupts
        watch = self._ctx.watch
        watch.calling(tool.name, timeout)
        drive = Drive(work, interrupts.ours, tool, self._ctx.run_id)
        interrupts.begin(timeout)  # also bounds the wait for a concurrency slot
        how, result, error_type = None, None, None
        caught: asyncio.CancelledError | None = None
        try:
            result, error_type = await drive
        except asyncio.CancelledError as exc:
            caught = exc  # re-raised as it came: its message says who cancelled (anyio reads it)
            how = interrupts.settle()
        finally:
            interrupts.end()
        blocked = watch.done()
        if how is None and (drive.swallowed or interrupts.owed()):
            how = interrupts.settle()  # it did not follow a cancellation: ours, or the owner's
        match how:
            case None:
                assert result is not None
                return result, error_type, blocked
            case "cancel":
                raise Cancelled
            case "external":
                raise caught or asyncio.CancelledError()
            case "tool":  # it raised CancelledError with nobody cancelling it
                result, error_type = tool_error(tool, RuntimeError("raised CancelledError"), None)
                return result, error_type, blocked
            case "timeout":
                assert timeout is not None
                if turn is not None and not turn.started:  # it never ran: nothing is unknown
                    return no_turn(tool, timeout), "timeout", blocked
                if error_type == ABANDONED or tool.runs_as == "thread":
                    return ToolResult.error(abandoned_text(tool, timeout)), ABANDONED, blocked
                return timed_out(tool.name, timeout), "timeout", blocked

    async def _call(
        self,
        tool: Tool,
        item: Planned,
        ctx: ToolContext,
        slot: asyncio.Semaphore | None,
        turn: Turn | None,
    ) -> tuple[ToolResult, str | None]:
        """The call itself: a concurrency slot (if capped), then the tool runner."""
        assert item.arguments is not None
        runner = self._ctx.tool_runner
        try:
            if slot is None:
                return await runner(tool, item.call, ctx, item.arguments, None)
            async with slot:
                if turn is not None:
                    turn.started = True
                return await runner(tool, item.call, ctx, item.arguments, None)
        except (Exception, SystemExit, KeyboardInterrupt) as exc:  # a custom runner failed
            return tool_error(tool, exc, None)

    def _blocked(self, tool: Tool, since: float, timeout: float) -> tuple[ToolResult, str]:
        """A call that held the event loop past its timeout: an error, and the run ends."""
        held = time.monotonic() - since
        error = LoopBlocked(tool.name, held, timeout, run_id=self._ctx.run_id)
        self._ctx.fatal = ErrorInfo(type="LoopBlocked", message=str(error))
        return ToolResult.error(str(error)), "loop_blocked"

    def record_result(
        self,
        item: Planned,
        result: ToolResult,
        error_type: str | None,
        duration: float,
        *,
        synthetic: bool = False,
    ) -> None:
        """Record a call's result (an abandoned call with effects: ``tool_call_unknown``)."""
        if item.notes:  # what a memory tool did, right before its result
            for kind, fields in item.notes:
                self._add(kind, **fields)
            item.notes = None
        if error_type == ABANDONED:  # it may still run: unknown, unless it changes nothing
            tool = item.tool
            if tool is None or not tool.annotations.is_read_only:
                reason = result.content[0].text if isinstance(result.content[0], TextBlock) else ""
                self._add(ToolCallUnknown, call_id=item.call.id, tool=item.call.name, reason=reason)
                return
            error_type = "timeout"
        self._add(
            ToolCallFinished,
            call_id=item.call.id,
            tool=item.call.name,
            content=result.content,
            structured=result.structured,
            is_error=result.is_error,
            error_type=error_type,
            duration_s=duration,
            synthetic=synthetic,
            untrusted=result.untrusted,
        )
        if (
            result.is_error
            and self.reflexion is not None
            and (not synthetic or error_type in ("invalid_arguments", "unknown_tool"))
        ):
            self.reflexion.failed(item, result, error_type)

    async def _control(self, item: Planned, planned: list[Planned]) -> None:
        """What the run works out for a control tool: a knowledge search, an answer's check."""
        if item.search is not None and self.consult is not None:
            await self.consult(item)
        elif item.finish and self.check_answer is not None:
            if any(p.awaiting_approval for p in planned):
                return  # not taken anyway (``_record_planned`` says why)
            await self.check_answer(item)

    def _record_planned(self, item: Planned, planned: list[Planned]) -> None:
        """Results tether writes itself: errors, and the answer to ``finish_task``."""
        if item.synthetic is not None:
            result, error_type = item.synthetic, item.error_type
        elif item.answered is not None:  # a knowledge search's: worked out, not refused
            self.record_result(item, item.answered, item.error_type, item.seconds)
            return
        elif item.finish and any(p.awaiting_approval for p in planned):
            item.finish = False
            result = ToolResult.error(
                "finish_task not accepted: other calls of this turn await approval"
            )
            error_type = "invalid_output"
        elif item.finish:
            result, error_type = ToolResult(content=(TextBlock(text="done"),)), None
        else:
            return  # ask_user: answered later by the user
        self.record_result(item, result, error_type, 0.0, synthetic=not item.finish)

    def after_turn(self, planned: list[Planned]) -> Stop | None:
        """After a turn's results: finished, waiting, or go on?"""
        if self._ctx.fatal is not None:
            return Stop("failed", error=self._ctx.fatal)
        if not planned:
            return self.no_tool_call()
        waiting = asking = limited = False
        for item in planned:
            if item.stop_reason is not None:
                return Stop(
                    "policy_denied", error=ErrorInfo(type="PolicyDenied", message=item.stop_reason)
                )
            if item.stop is not None:
                return item.stop
        for item in planned:
            if item.finish:
                self._ctx.output = cast(OutputT, item.output)
                return Stop("finished")
            waiting = waiting or item.awaiting_approval
            asking = asking or item.question is not None
            limited = limited or item.error_type == "limit"
        if waiting:
            return Stop("waiting_for_approval")
        if asking:
            return Stop("waiting_for_user")
        if limited:
            maximum = self._spec.limits.max_tool_calls
            return Stop("budget_exhausted", "max_tool_calls", self._state.tool_calls, maximum, True)
        self._ctx.check_cancel()
        return None

    def no_tool_call(self) -> Stop | None:
        """The model answered without calling a tool."""
        spec, st = self._spec, self._state
        last = st.messages[-1]
        text = last.text if last.kind == "assistant" else ""
        if spec.output.is_text and text.strip():
            check = self.check_reply
            refused = None if check is None else check(text)
            if st.cut_off:  # the output limit ended it: not all the model meant to say
                refused = "it stopped at the model's output limit (cut off): give it, shorter."
            if refused is None:
                self._ctx.output = cast(OutputT, text)
                return Stop("finished")
            self._add(
                RetryPrompted,
                reason="not_accepted",
                text=f"Your reply was not accepted: {refused} Then call finish_task.",
            )
            return None
        why = (
            "Your reply was empty. Call a tool, or call finish_task with the result."
            if not text.strip()
            else "Call finish_task with the result in its arguments; a plain reply does not end the task."
        )
        self._add(RetryPrompted, reason="no_tool_call", text=why)
        return None


def _over_limit(maximum: int) -> tuple[ToolResult, str]:
    """The result of a call past ``max_tool_calls``."""
    message = f"not executed: the run's limit of {maximum} tool calls is reached"
    return ToolResult.error(message), "limit"
