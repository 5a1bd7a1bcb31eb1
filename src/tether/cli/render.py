"""One readable line per event, for ``tether show`` and ``tether run --verbose``."""

from __future__ import annotations

import orjson
from rich.markup import escape

from tether.content import content_text
from tether.eventdispatch import EventHandler
from tether.events import (
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

__all__ = ["describe", "short"]


def short(text: str, limit: int = 160) -> str:
    """``text`` on one line, cut to ``limit`` characters."""
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"


def _e(value: object) -> str:
    """``value`` as text that Rich prints as it is (a ``[/]`` in it is not markup)."""
    return escape(str(value))


def _s(text: str, limit: int = 160) -> str:
    """``short`` text, escaped for Rich."""
    return escape(short(text, limit))


def _q(text: str, limit: int = 160) -> str:
    """``short`` text in quotes (its ``repr``), escaped for Rich."""
    return escape(repr(short(text, limit)))


def _args(arguments: object) -> str:
    return _s(orjson.dumps(arguments).decode(), 120)


class _Describer(EventHandler[str]):
    """One line per kind of event (tether.eventdispatch: a new kind cannot be missed)."""

    __slots__ = ()

    def on_run_started(self, event: RunStarted) -> str:
        context = "" if event.context is None else f" context={_args(event.context)}"
        return (
            f"[bold]run started[/] agent={_e(event.agent)} model={_e(event.model)} "
            f"goal={_q(event.goal)}{context}"
        )

    def on_model_responded(self, event: ModelResponded) -> str:
        calls = ", ".join(f"{_e(c.name)}({_args(c.arguments)})" for c in event.tool_calls)
        said = f" says {_q(event.text, 100)}" if event.text else ""
        what = f" → {calls}" if calls else ""
        tag = (
            "final answer"
            if event.final
            else f"step {event.step}"
            if event.purpose is None
            else f"{_e(event.purpose)} (step {event.step})"
        )
        tokens = event.usage.input_tokens + event.usage.output_tokens
        return f"[cyan]model[/] {tag}{said}{what} [dim]({tokens} tok, {event.latency_s:.2f}s)[/]"

    def on_model_failed(self, event: ModelFailed) -> str:
        retry = f", retry in {event.retry_in_s:.1f}s" if event.will_retry else ""
        if event.purpose is not None:
            return f"[red]model failed[/] ({_e(event.purpose)}, skipped): {_e(event.error.type)}: {_s(event.error.message)}"
        return f"[red]model failed[/] attempt {event.attempt}: {_e(event.error.type)}: {_s(event.error.message)}{retry}"

    def on_retry_prompted(self, event: RetryPrompted) -> str:
        return f"[yellow]correction[/] {_s(event.text)}"

    def on_tool_call_requested(self, event: ToolCallRequested) -> str:
        return f"[magenta]call[/] {_e(event.tool)}({_args(event.arguments)}) [dim]{_e(event.call_id)}[/]"

    def on_policy_decided(self, event: PolicyDecided) -> str:
        color = {"allow": "green", "deny": "red", "needs_approval": "yellow"}[event.decision]
        return f"[{color}]policy {event.decision}[/] {_e(event.tool)} by {_e(event.rule)}: {_s(event.reason, 80)}"

    def on_approval_requested(self, event: ApprovalRequested) -> str:
        return f"[yellow]approval requested[/] {_e(event.tool)}({_args(event.arguments)}) [dim]{_e(event.call_id)}[/]"

    def on_approval_given(self, event: ApprovalGiven) -> str:
        verdict = "approved" if event.approved else "denied"
        return f"[yellow]approval[/] {_e(event.call_id)} {verdict} by {_e(event.by or '?')} {_s(event.reason, 60)}"

    def on_tool_call_finished(self, event: ToolCallFinished) -> str:
        status = "[red]error[/]" if event.is_error else "[green]ok[/]"
        synthetic = " [dim](not run)[/]" if event.synthetic else ""
        return f"{status} {_e(event.tool)}: {_s(content_text(event.content), 120)}{synthetic} [dim]{event.duration_s:.3f}s[/]"

    def on_tool_call_unknown(self, event: ToolCallUnknown) -> str:
        return f"[red]unknown outcome[/] {_e(event.tool)} [dim]{_e(event.call_id)}[/]: {_s(event.reason)}"

    def on_reflected(self, event: Reflected) -> str:
        if event.tool is not None:
            failed = f"{_e(event.tool)} failed ({_e(event.error_type)}, {event.attempt})"
            return f"[yellow]reflected[/] {failed}: {_s(event.reasons, 90)}"
        if event.passed:
            return f"[green]answer checked[/] ({event.attempt}): {_s(event.reasons, 100)}"
        unmet = f" unmet: {_s('; '.join(event.unmet), 80)}" if event.unmet else ""
        return f"[yellow]answer rejected[/] ({event.attempt}): {_s(event.reasons, 80)}{unmet}"

    def on_plan_made(self, event: PlanMade) -> str:
        steps = "; ".join(f"{i}. {s}" for i, s in enumerate(event.steps, 1))
        level = f" [dim]({_e(event.complexity)})[/]" if event.complexity else ""
        return f"[blue]plan[/]{level} {_s(steps, 200)}"

    def on_plan_revised(self, event: PlanRevised) -> str:
        steps = "; ".join(f"{i}. {s}" for i, s in enumerate(event.steps, 1))
        return (
            f"[blue]plan revised[/] {_e(event.revision)} ({_s(event.reason, 60)}): {_s(steps, 160)}"
        )

    def on_routed(self, event: Routed) -> str:
        return f"[blue]routed[/] {_e(event.route)}: {_s(event.reason, 100)}"

    def on_session_continued(self, event: SessionContinued) -> str:
        turns = len(event.run_ids)
        line = f"session {_e(event.session)}: {turns} earlier turn{'s' * (turns != 1)}"
        line += "" if event.complete else " (the oldest left out)"
        return line if event.warning is None else f"{line}: {_s(event.warning, 100)}"

    def on_memory_recalled(self, event: MemoryRecalled) -> str:
        line = (
            f"recalled {len(event.records)} memories from {_e(event.namespace)} ({_e(event.mode)})"
        )
        return line if event.warning is None else f"{line}: {_s(event.warning, 100)}"

    def on_memory_written(self, event: MemoryWritten) -> str:
        return f"remembered in {_e(event.namespace)}: {_s(event.text, 80)}"

    def on_knowledge_retrieved(self, event: KnowledgeRetrieved) -> str:
        rounds = len(event.rounds)
        cited = ", ".join(event.labels) or "nothing relevant"
        line = (
            f"knowledge: {_s(event.question, 60)}: {_e(cited)} "
            f"({len(event.passages)} found, {rounds} search{'es' * (rounds != 1)})"
        )
        return line if event.warning is None else f"{line}: {_s(event.warning, 100)}"

    def on_context_compacted(self, event: ContextCompacted) -> str:
        return f"context compacted {event.tokens_before} → {event.tokens_after} tokens"

    def on_budget_warning(self, event: BudgetWarning) -> str:
        return f"[yellow]budget[/] {_e(event.limit)}: {event.used:g} of {event.maximum:g} used"

    def on_limit_reached(self, event: LimitReached) -> str:
        return f"[yellow]limit reached[/] {_e(event.limit)} ({event.used:g}/{event.maximum:g})"

    def on_run_resumed(self, event: RunResumed) -> str:
        attempt = f" (recovery attempt {event.attempt})" if event.reason == "crash" else ""
        return f"[bold]run resumed[/] after {_e(event.reason)}{attempt} by {_e(event.owner)}"

    def on_user_replied(self, event: UserReplied) -> str:
        return f"user replied {_q(event.text)}"

    def on_redacted(self, event: Redacted) -> str:
        where = ", ".join(event.fields)
        return f"[magenta]redacted[/] {_e(', '.join(event.kinds))} in event {event.of_seq} ({_e(where)})"

    def on_run_finished(self, event: RunFinished) -> str:
        color = (
            "green"
            if event.status == "finished"
            else "yellow"
            if event.status.startswith("waiting")
            else "red"
        )
        extra = f" ({_e(event.limit)})" if event.limit else ""
        error = f" — {_e(event.error.type)}: {_s(event.error.message, 100)}" if event.error else ""
        return f"[bold {color}]run {event.status}[/]{extra}{error} [dim]{event.steps} steps, {event.tool_calls} tool calls[/]"


_DESCRIBER = _Describer()


def describe(event: Event) -> str:
    """A one-line, human-readable description of an event (Rich markup)."""
    return _DESCRIBER.handle(event)
