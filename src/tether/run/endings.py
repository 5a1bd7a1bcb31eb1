"""How a run ends: a limit, finishing, waiting, failing or being cancelled.

Every exit is one ``run_finished`` after a protocol-valid history; a limit first asks for
a best-effort answer where the budget allows.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Callable
from dataclasses import replace
from typing import Generic, cast

from tether.errors import ModelError, StaleLease, StoreError
from tether.events import (
    ApprovalRequested,
    Event,
    LimitReached,
    ModelFailed,
    ModelResponded,
    PolicyDecided,
    RunFinished,
    ToolCallUnknown,
)
from tether.jsontypes import JsonObject
from tether.memory.base import MemoryRecord
from tether.messages import ASK_USER
from tether.outcome import ErrorInfo, PendingCall, RunOutcome, RunStatus
from tether.run import vault
from tether.run.approvalargs import has_redaction, secret_gone, was_redacted
from tether.run.base import Cancelled, OutputT, Stop, error_info
from tether.run.context import RunContext
from tether.run.modelstep import ModelStep
from tether.run.reflexion import Reflexion
from tether.run.remembering import Rememberer
from tether.run.sessions import Sessions
from tether.usage import Usage

__all__ = ["Endings"]

_log = logging.getLogger("tether")


class Endings(Generic[OutputT]):
    """Writing a run's end (a limit first asks the model step for a best-effort answer)."""

    __slots__ = ("_ctx", "_step", "check_reply", "reflexion", "rememberer", "sessions")

    def __init__(self, ctx: RunContext[OutputT], step: ModelStep[OutputT]) -> None:
        self._ctx = ctx
        self._step = step
        self.rememberer: Rememberer[OutputT] | None = None
        self.sessions: Sessions[OutputT] | None = None
        self.reflexion: Reflexion[OutputT] | None = None
        """Writes what a finished run learned to long-term memory (``None``: no memory)."""
        self.check_reply: Callable[[str], str | None] | None = None
        """Why a text answer cannot be taken (knowledge: its citations), ``None``: it can."""

    def close_pending(
        self, reason: str, error_type: str, *, interrupted: str | None = None
    ) -> None:
        """Give every call still without a result a synthetic one (protocol validity).

        A call that had started gets ``interrupted`` instead: it may have had some effect. One
        running in a thread with effects is ``tool_call_unknown``: the thread runs on.
        """
        for call in list(self._ctx.state.pending.values()):
            text = reason
            if interrupted is not None and call.id in self._ctx.in_flight:
                tool = self._ctx.spec.registry.get(call.name)
                if (
                    tool is not None
                    and tool.runs_as == "thread"
                    and not tool.annotations.is_read_only
                ):
                    self._ctx.add(
                        ToolCallUnknown,
                        call_id=call.id,
                        tool=call.name,
                        reason=f"{interrupted} while the tool was running in a thread, which "
                        "cannot be stopped: it may still be running, or have taken effect",
                    )
                    continue
                text = f"{interrupted} while the tool was running; it may have had partial effects"
            self._ctx.refuse(call, text, error_type)

    async def stop(self, stop: Stop) -> AsyncIterator[list[Event]]:
        """End the run as ``stop`` says: its last events, then ``run_finished``, committed."""
        st = self._ctx.state
        answer: str | None = None
        question: str | None = None
        if stop.status == "budget_exhausted":
            async for batch in self._best_effort(stop):
                yield batch
            answer = st.last_text or None
            if stop.limit == "max_reflections" and st.reflection is not None:
                answer = st.reflection.answer  # the best answer there is: the last checked
        elif stop.status == "finished":
            answer = self._ctx.spec.output.as_text(cast(OutputT, self._ctx.output))
        elif stop.status == "waiting_for_user":
            question = next(
                (
                    str(c.arguments.get("question", ""))
                    for c in st.pending.values()
                    if c.name == ASK_USER
                ),
                None,
            )
            answer = st.last_text or None
        else:
            answer = st.last_text or None
        if (
            answer is not None
            and stop.status not in ("finished", "waiting_for_user")
            and self.check_reply is not None
            and self.check_reply(answer) is not None
        ):  # a best-effort answer is checked as any other: one citing what was not found
            answer = None  # relevant is not the run's answer (the log keeps the text)
        if stop.status in ("finished", "failed", "policy_denied"):
            self.close_pending(f"not executed: the run ended ({stop.status})", "run_ended")
        async for batch in self._learned(stop, answer):
            yield batch
        self._ctx.add(
            RunFinished,
            status=stop.status,
            output=self._ctx.spec.output.dump(cast(OutputT, self._ctx.output))
            if stop.status == "finished"
            else None,
            answer=answer,
            error=stop.error,
            limit=stop.limit,
            question=question,
            usage=st.usage,
            steps=st.steps,
            tool_calls=st.tool_calls,
        )
        if batch := await self._ctx.journal.commit():
            yield batch
        self.finish_outcome()

    async def _learned(self, stop: Stop, answer: str | None) -> AsyncIterator[list[Event]]:
        """What the run leaves for later runs: its outcome, its lessons, its session turn."""
        rememberer = self.rememberer
        if stop.status == "finished" and rememberer is not None and answer is not None:
            record = rememberer.outcome_record(answer)
            async for batch in self._remember(rememberer, [] if record is None else [record]):
                yield batch
        if (
            self.reflexion is not None
            and rememberer is not None
            and not stop.status.startswith("waiting")
        ):
            async for batch in self._remember(rememberer, self.reflexion.lessons()):
                yield batch
        if stop.status == "finished" and self.sessions is not None and answer is not None:
            await self.sessions.end(answer)

    async def _remember(
        self, rememberer: Rememberer[OutputT], records: list[MemoryRecord]
    ) -> AsyncIterator[list[Event]]:
        """Write records: each ``memory_written`` committed first, then they are stored."""
        if not records:
            return
        for record in records:
            if record.id not in self._ctx.state.written:
                rememberer.written(record)
        if batch := await self._ctx.journal.commit():
            yield batch
        for record in records:
            await rememberer.store(record)

    async def _best_effort(self, stop: Stop) -> AsyncIterator[list[Event]]:
        """Record the limit and, where budget allows, ask once for a tool-free answer."""
        assert stop.limit is not None
        self.close_pending(f"not executed: the run reached its limit ({stop.limit})", "limit")
        remaining = self._ctx.remaining()
        ask = (
            stop.ask_for_answer
            and self._ctx.state.steps > 0  # nothing was done: there is nothing to summarise
            and (remaining is None or remaining > 0)
            and (not self._ctx.phased or self._ctx.phase_spent("respond") is None)
        )
        self._ctx.add(
            LimitReached,
            limit=stop.limit,
            used=float(stop.used),
            maximum=float(stop.maximum),
            ask_for_answer=ask,
        )
        if batch := await self._ctx.journal.commit():
            yield batch
        if not ask:
            return
        request = self._step.request(final=True)
        t0 = self._ctx.monotonic()
        try:
            response = await self._step.call_model(request, final=True, now=t0)
        except Cancelled:
            raise
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            failed: Exception | None = exc
        else:
            taken = self._step.record_capped(
                request, response, self._ctx.state.steps, t0, final=True
            )
            failed = taken if isinstance(taken, ModelError) else None
            if failed is None:
                self.close_pending(
                    "not executed: the run is over; answer without tools", "run_ended"
                )
        if failed is not None:
            self._ctx.add(
                ModelFailed,
                step=self._ctx.state.steps,
                model=self._ctx.model.name,
                error=error_info(failed, "the best-effort answer timed out"),
                transient=False,
                attempt=1,
                will_retry=False,
                latency_s=self._ctx.monotonic() - t0,
                final=True,
            )
        if batch := await self._ctx.journal.commit():
            yield batch

    async def end_quietly(
        self, status: RunStatus, reason: str, *, error: BaseException | None = None
    ) -> None:
        """Record the end of a run from an exception path (nothing may be yielded here).

        A run that has not started (no ``run_started``) has nothing to end. If the store
        refuses the ending, the outcome says so (``_end_unstored``); any other failure here
        propagates.
        """
        st = self._ctx.state
        if st.finished is not None or st.started_at is None:
            return
        if self._ctx.journal.has_pending:
            # what this path found uncommitted may never reach the store: first try it alone
            try:
                await self._ctx.journal.commit()
            except StoreError as exc:
                self.end_unstored(exc)
                return
        if status == "cancelled":
            self._ctx.interrupts.reason = self._ctx.interrupts.reason or reason
            self.record_cancel()
        else:
            self.close_pending(f"not executed: the run failed ({reason})", "run_ended")
            info = ErrorInfo(type=type(error).__name__ if error else "Error", message=reason)
            self._ctx.add(
                RunFinished,
                status=status,
                answer=st.last_text or None,
                error=info,
                usage=st.usage,
                steps=st.steps,
                tool_calls=st.tool_calls,
            )
        try:
            await self._ctx.journal.commit()
        except StoreError as exc:
            self.end_unstored(exc)
            return
        self.finish_outcome()

    def end_unstored(self, exc: StoreError) -> None:
        """End the run ``failed`` in this process only: its store refused what came last.

        The log goes back to what the store holds, as after a crash at that commit (the
        events the store refused are dropped; a call whose result was not stored is handled
        by the crash rules on resume), and the outcome ends with a ``run_finished`` that
        exists in memory only. It never reports more than the store holds.
        """
        journal = self._ctx.journal
        dropped = journal.rollback()
        self._ctx.refold()
        stored = journal.committed
        lost = f"; {len(dropped)} later events could not be stored" if dropped else ""
        if isinstance(exc, StaleLease):
            what = (
                f"{exc}. This process stopped; the run's log is stored up to seq {stored - 1}"
                f"{lost}, and the process that took the run over continues it (`tether show "
                f"{self._ctx.run_id}`)"
            )
        else:
            what = (
                f"{exc}. The run's log is stored up to seq {stored - 1}{lost}. Resume it with "
                f"`tether resume {self._ctx.run_id}` once the store works again (what was running "
                "is then treated as after a crash)"
            )
        self._ctx.interrupts.reason = None
        st = self._ctx.state
        self._ctx.add(
            RunFinished,
            status="failed",
            answer=st.last_text or None,
            error=ErrorInfo(type=type(exc).__name__, message=what),
            usage=st.usage,
            steps=st.steps,
            tool_calls=st.tool_calls,
        )
        self.finish_outcome()

    async def release(self) -> None:
        """Give the run's lease back; a store that cannot is reported, not raised."""
        lease, store = self._ctx.lease, self._ctx.store
        if lease is None or store is None:
            return
        try:
            await store.release(lease)
        except StoreError as exc:
            note = (
                f"the run's lease could not be released ({exc}); another process can take the "
                "run once this one exits or the lease lapses"
            )
            _log.warning("tether: %s", note)
            if self._ctx.outcome is not None:
                self._ctx.outcome = replace(
                    self._ctx.outcome, warnings=(*self._ctx.outcome.warnings, note)
                )

    def record_cancel(self) -> None:
        """Record the run's end as ``cancelled`` (calls without a result get one first)."""
        if self._ctx.state.finished is not None:
            return
        reason = self._ctx.interrupts.reason or "cancelled"
        self.close_pending(
            f"not executed: {reason}", "cancelled", interrupted=f"interrupted: {reason}"
        )
        st = self._ctx.state
        self._ctx.add(
            RunFinished,
            status="cancelled",
            answer=st.last_text or None,
            error=ErrorInfo(type="Cancelled", message=reason),
            usage=st.usage,
            steps=st.steps,
            tool_calls=st.tool_calls,
        )

    def finish_outcome(self) -> None:
        """Build the run's outcome from its ``run_finished`` (the fold's last word)."""
        st = self._ctx.state
        fin = st.finished
        assert fin is not None
        assert st.started_at is not None
        pending: tuple[PendingCall, ...] = ()
        if fin.status == "waiting_for_approval":
            events = self._ctx.journal.events
            decided = {e.call_id for e in events if e.kind == "approval_given"}
            why = {e.call_id: e for e in events if isinstance(e, PolicyDecided)}
            pending = tuple(
                PendingCall(
                    call_id=e.call_id,
                    tool=e.tool,
                    arguments=dict(e.arguments),
                    run_id=self._ctx.run_id,
                    arguments_hash=e.arguments_hash,
                    rule=why[e.call_id].rule if e.call_id in why else "",
                    reason=why[e.call_id].reason if e.call_id in why else "",
                    note=_secret_note(self._ctx.run_id, e.call_id, e.arguments),
                )
                for e in events
                if isinstance(e, ApprovalRequested)
                and e.call_id not in decided
                and e.call_id in st.pending
            )
        if fin.status == "finished" and self._ctx.output is None and fin.output is not None:
            self._ctx.output = self._ctx.spec.output.load(fin.output)  # a run that had ended before
        elif (
            fin.status == "finished"
            and self._ctx.output is not None
            # (its ``redacted`` event goes right before it: the log is not searched)
            and was_redacted(
                self._ctx.journal.events[max(0, fin.seq - 1) : fin.seq], fin.seq, "output"
            )
        ):
            # the output held a secret: the caller gets what the log holds, never more
            try:
                self._ctx.output = self._ctx.spec.output.load(fin.output)
            except Exception:  # the redacted output no longer fits its type
                self._ctx.output = None
        self._ctx.outcome = RunOutcome(
            run_id=self._ctx.run_id,
            status=fin.status,
            output=self._ctx.output if fin.status == "finished" else None,
            answer=fin.answer,
            usage=fin.usage,
            steps=fin.steps,
            tool_calls=fin.tool_calls,
            events=tuple(self._ctx.journal.events),
            started_at=st.started_at,
            finished_at=fin.at,
            error=fin.error,
            limit=fin.limit,
            question=fin.question,
            pending=pending,
            warnings=self._warnings(fin.usage),
        )

    def _warnings(self, usage: Usage) -> tuple[str, ...]:
        warnings: list[str] = list(self._ctx.journal.warnings)
        max_cost = self._ctx.spec.limits.max_cost
        if max_cost is not None and usage.cost is None:
            unpriced = sorted(
                {
                    e.model
                    for e in self._ctx.journal.events
                    if isinstance(e, ModelResponded) and e.usage.cost is None
                }
            )
            who = (
                "a model"
                if not unpriced
                else f"model {unpriced[0]!r}"
                if len(unpriced) == 1
                else f"models {', '.join(map(repr, unpriced))}"
            )
            warnings.append(
                f"max_cost ({max_cost:g} USD) was not enforced: this run's cost is unknown, "
                f"because {who} reported no cost (pass price=... to its adapter, or set "
                "Usage.cost in your own model's responses)"
            )
        defaulted = sorted(self._ctx.state.default_denied)
        if defaulted:
            warnings.append(
                f"the default policy denied calls to {', '.join(defaulted)}: tools that are "
                "unannotated, destructive or open-world are denied unless allowed. Annotate "
                "them (@tool(read_only=True, open_world=False)) or allow them: "
                "Agent(policy=RulePolicy(None, allow([...])))"
            )
        return tuple(warnings)


def _secret_note(run_id: str, call_id: str, arguments: JsonObject) -> str:
    """What an approver must know of a pending call whose arguments hold a secret."""
    if not has_redaction(arguments):
        return ""
    if vault.holds(run_id, call_id):
        return (
            "its arguments hold a secret, shown redacted and never stored: this process keeps "
            "it in memory for the approval. Approve it from this process, or give the "
            "arguments in full (Approval.approve(pending, arguments={...})); if this process "
            "ends first, the approved call does not run and says so"
        )
    return secret_gone(call_id)
