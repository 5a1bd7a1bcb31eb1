"""How a run ends: a limit, finishing, waiting, failing or being cancelled.

Every exit is one ``run_finished`` after a protocol-valid history; a limit first asks for
a best-effort answer where the budget allows.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from dataclasses import replace
from typing import cast

from tether.errors import StaleLease, StoreError
from tether.events import (
    ApprovalRequested,
    Event,
    LimitReached,
    ModelFailed,
    ModelResponded,
    PolicyDecided,
    RunFinished,
)
from tether.jsontypes import JsonObject
from tether.messages import ASK_USER
from tether.outcome import ErrorInfo, PendingCall, RunOutcome, RunStatus
from tether.run import vault
from tether.run.approving import has_redaction, secret_gone, was_redacted
from tether.run.base import Cancelled, OutputT, RunBase, Stop
from tether.state import StateBuilder
from tether.usage import Usage

__all__ = ["Endings", "error_info"]

_log = logging.getLogger("tether")


class Endings(RunBase[OutputT]):
    """Writing a run's end."""

    def _time_stop(self) -> Stop:
        limits = self._spec.limits
        return Stop("budget_exhausted", "max_seconds", self._elapsed(), limits.max_seconds or 0.0)

    # -- one turn's tool calls ----------------------------------------------------------

    def _close_pending(
        self, reason: str, error_type: str, *, interrupted: str | None = None
    ) -> None:
        """Give every call still without a result a synthetic one (protocol validity).

        A call that had started gets ``interrupted`` instead: it may have had some effect.
        """
        for call in list(self._state.pending.values()):
            text = reason
            if interrupted is not None and call.id in self._in_flight:
                text = f"{interrupted} while the tool was running; it may have had partial effects"
            self._refuse(call, text, error_type)

    async def _stop(self, stop: Stop) -> AsyncIterator[list[Event]]:
        st = self._state
        answer: str | None = None
        question: str | None = None
        if stop.status == "budget_exhausted":
            async for batch in self._best_effort(stop):
                yield batch
            answer = st.last_text or None
        elif stop.status == "finished":
            answer = self._spec.output.as_text(cast(OutputT, self._output))
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
        if stop.status in ("finished", "failed", "policy_denied"):
            self._close_pending(f"not executed: the run ended ({stop.status})", "run_ended")
        self._add(
            RunFinished,
            status=stop.status,
            output=self._spec.output.dump(cast(OutputT, self._output))
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
        if batch := await self._journal.commit():
            yield batch
        self._finish_outcome()

    async def _best_effort(self, stop: Stop) -> AsyncIterator[list[Event]]:
        """Record the limit and, where budget allows, ask once for a tool-free answer."""
        assert stop.limit is not None
        self._close_pending(f"not executed: the run reached its limit ({stop.limit})", "limit")
        remaining = self._remaining()
        ask = (
            stop.ask_for_answer
            and self._state.steps > 0  # nothing was done: there is nothing to summarise
            and (remaining is None or remaining > 0)
        )
        self._add(
            LimitReached,
            limit=stop.limit,
            used=float(stop.used),
            maximum=float(stop.maximum),
            ask_for_answer=ask,
        )
        if batch := await self._journal.commit():
            yield batch
        if not ask:
            return
        request = self._request(final=True)
        t0 = self._monotonic()
        try:
            response = await self._call_model(request, final=True, now=t0)
        except Cancelled:
            raise
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            self._add(
                ModelFailed,
                step=self._state.steps,
                model=self._model.name,
                error=error_info(exc, "the best-effort answer timed out"),
                transient=False,
                attempt=1,
                will_retry=False,
            )
        else:
            self._record_response(request, response, self._state.steps, t0, final=True)
            self._close_pending("not executed: the run is over; answer without tools", "run_ended")
        if batch := await self._journal.commit():
            yield batch

    async def _end_quietly(
        self, status: RunStatus, reason: str, *, error: BaseException | None = None
    ) -> None:
        """Record the end of a run from an exception path (nothing may be yielded here).

        A run that has not started (no ``run_started``) has nothing to end. If the store
        refuses the ending, the outcome says so (``_end_unstored``); any other failure here
        propagates.
        """
        st = self._state
        if st.finished is not None or st.started_at is None:
            return
        if self._journal.has_pending:
            # what this path found uncommitted may never reach the store: first try it alone
            try:
                await self._journal.commit()
            except StoreError as exc:
                self._end_unstored(exc)
                return
        if status == "cancelled":
            self._interrupts.reason = self._interrupts.reason or reason
            self._record_cancel()
        else:
            self._close_pending(f"not executed: the run failed ({reason})", "run_ended")
            info = ErrorInfo(type=type(error).__name__ if error else "Error", message=reason)
            self._add(
                RunFinished,
                status=status,
                answer=st.last_text or None,
                error=info,
                usage=st.usage,
                steps=st.steps,
                tool_calls=st.tool_calls,
            )
        try:
            await self._journal.commit()
        except StoreError as exc:
            self._end_unstored(exc)
            return
        self._finish_outcome()

    def _end_unstored(self, exc: StoreError) -> None:
        """End the run ``failed`` in this process only: its store refused what came last.

        The log goes back to what the store holds, as after a crash at that commit (the
        events the store refused are dropped; a call whose result was not stored is handled
        by the crash rules on resume), and the outcome ends with a ``run_finished`` that
        exists in memory only. It never reports more than the store holds.
        """
        journal = self._journal
        dropped = journal.rollback()
        self._refold()
        stored = journal.committed
        lost = f"; {len(dropped)} later events could not be stored" if dropped else ""
        if isinstance(exc, StaleLease):
            what = (
                f"{exc}. This process stopped; the run's log is stored up to seq {stored - 1}"
                f"{lost}, and the process that took the run over continues it (`tether show "
                f"{self.run_id}`)"
            )
        else:
            what = (
                f"{exc}. The run's log is stored up to seq {stored - 1}{lost}. Resume it with "
                f"`tether resume {self.run_id}` once the store works again (what was running "
                "is then treated as after a crash)"
            )
        self._interrupts.reason = None
        st = self._state
        self._add(
            RunFinished,
            status="failed",
            answer=st.last_text or None,
            error=ErrorInfo(type=type(exc).__name__, message=what),
            usage=st.usage,
            steps=st.steps,
            tool_calls=st.tool_calls,
        )
        self._finish_outcome()

    def _refold(self) -> None:
        """Fold the state again from the journal's events (after a rollback)."""
        state = StateBuilder()
        for event in self._journal.events:
            state.apply(event)
        self._state = state
        self._journal.on_event = state.apply

    async def _release(self) -> None:
        """Give the run's lease back; a store that cannot is reported, not raised."""
        lease, store = self._lease, self._store
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
            if self._outcome is not None:
                self._outcome = replace(self._outcome, warnings=(*self._outcome.warnings, note))

    def _record_cancel(self) -> None:
        if self._state.finished is not None:
            return
        reason = self._interrupts.reason or "cancelled"
        self._close_pending(
            f"not executed: {reason}", "cancelled", interrupted=f"interrupted: {reason}"
        )
        st = self._state
        self._add(
            RunFinished,
            status="cancelled",
            answer=st.last_text or None,
            error=ErrorInfo(type="Cancelled", message=reason),
            usage=st.usage,
            steps=st.steps,
            tool_calls=st.tool_calls,
        )

    def _finish_outcome(self) -> None:
        st = self._state
        fin = st.finished
        assert fin is not None
        assert st.started_at is not None
        pending: tuple[PendingCall, ...] = ()
        if fin.status == "waiting_for_approval":
            events = self._journal.events
            decided = {e.call_id for e in events if e.kind == "approval_given"}
            why = {e.call_id: e for e in events if isinstance(e, PolicyDecided)}
            pending = tuple(
                PendingCall(
                    call_id=e.call_id,
                    tool=e.tool,
                    arguments=dict(e.arguments),
                    run_id=self.run_id,
                    arguments_hash=e.arguments_hash,
                    rule=why[e.call_id].rule if e.call_id in why else "",
                    reason=why[e.call_id].reason if e.call_id in why else "",
                    note=_secret_note(self.run_id, e.call_id, e.arguments),
                )
                for e in events
                if isinstance(e, ApprovalRequested)
                and e.call_id not in decided
                and e.call_id in st.pending
            )
        if fin.status == "finished" and self._output is None and fin.output is not None:
            self._output = self._spec.output.load(fin.output)  # a run that had ended before
        elif (
            fin.status == "finished"
            and self._output is not None
            and was_redacted(self._journal.events, fin.seq, "output")
        ):
            # the output held a secret: the caller gets what the log holds, never more
            try:
                self._output = self._spec.output.load(fin.output)
            except Exception:  # the redacted output no longer fits its type
                self._output = None
        self._outcome = RunOutcome(
            run_id=self.run_id,
            status=fin.status,
            output=self._output if fin.status == "finished" else None,
            answer=fin.answer,
            usage=fin.usage,
            steps=fin.steps,
            tool_calls=fin.tool_calls,
            events=tuple(self._journal.events),
            started_at=st.started_at,
            finished_at=fin.at,
            error=fin.error,
            limit=fin.limit,
            question=fin.question,
            pending=pending,
            warnings=self._warnings(fin.usage),
        )

    def _warnings(self, usage: Usage) -> tuple[str, ...]:
        warnings: list[str] = list(self._journal.warnings)
        max_cost = self._spec.limits.max_cost
        if max_cost is not None and usage.cost is None:
            unpriced = sorted(
                {
                    e.model
                    for e in self._journal.events
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
        defaulted = sorted(self._state.default_denied)
        if defaulted:
            warnings.append(
                f"the default policy denied calls to {', '.join(defaulted)}: tools that are "
                "unannotated, destructive or open-world are denied unless allowed. Annotate "
                "them (@tool(read_only=True, open_world=False)) or allow them: "
                "Agent(policy=RulePolicy(None, allow([...])))"
            )
        return tuple(warnings)


def error_info(exc: BaseException, timeout_message: str) -> ErrorInfo:
    """What the log says of a failure (a bare ``TimeoutError`` gets ``timeout_message``)."""
    if isinstance(exc, TimeoutError) and not str(exc):
        return ErrorInfo(type="TimeoutError", message=timeout_message)
    return ErrorInfo(type=type(exc).__name__, message=str(exc) or type(exc).__name__)


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
