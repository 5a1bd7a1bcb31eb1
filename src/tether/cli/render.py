"""One readable line per event, for ``tether show`` and ``tether run --verbose``."""

from __future__ import annotations

from typing import assert_never

import orjson

from tether.content import content_text
from tether.events import (
    ApprovalGiven,
    ApprovalRequested,
    BudgetWarning,
    ContextCompacted,
    Event,
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
    RunFinished,
    RunResumed,
    RunStarted,
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


def _args(arguments: object) -> str:
    return short(orjson.dumps(arguments).decode(), 120)


def describe(event: Event) -> str:  # noqa: C901 - one case per event kind
    """A one-line, human-readable description of an event (Rich markup)."""
    match event:
        case RunStarted():
            return f"[bold]run started[/] agent={event.agent} model={event.model} goal={short(event.goal)!r}"
        case ModelResponded():
            calls = ", ".join(f"{c.name}({_args(c.arguments)})" for c in event.tool_calls)
            said = f" says {short(event.text, 100)!r}" if event.text else ""
            what = f" → {calls}" if calls else ""
            tag = "final answer" if event.final else f"step {event.step}"
            tokens = event.usage.input_tokens + event.usage.output_tokens
            return (
                f"[cyan]model[/] {tag}{said}{what} [dim]({tokens} tok, {event.latency_s:.2f}s)[/]"
            )
        case ModelFailed():
            retry = f", retry in {event.retry_in_s:.1f}s" if event.will_retry else ""
            return f"[red]model failed[/] attempt {event.attempt}: {event.error.type}: {short(event.error.message)}{retry}"
        case RetryPrompted():
            return f"[yellow]correction[/] {short(event.text)}"
        case ToolCallRequested():
            return (
                f"[magenta]call[/] {event.tool}({_args(event.arguments)}) [dim]{event.call_id}[/]"
            )
        case PolicyDecided():
            color = {"allow": "green", "deny": "red", "needs_approval": "yellow"}[event.decision]
            return f"[{color}]policy {event.decision}[/] {event.tool} by {event.rule}: {short(event.reason, 80)}"
        case ApprovalRequested():
            return f"[yellow]approval requested[/] {event.tool}({_args(event.arguments)}) [dim]{event.call_id}[/]"
        case ApprovalGiven():
            verdict = "approved" if event.approved else "denied"
            return f"[yellow]approval[/] {event.call_id} {verdict} by {event.by or '?'} {short(event.reason, 60)}"
        case ToolCallFinished():
            status = "[red]error[/]" if event.is_error else "[green]ok[/]"
            synthetic = " [dim](not run)[/]" if event.synthetic else ""
            return f"{status} {event.tool}: {short(content_text(event.content), 120)}{synthetic} [dim]{event.duration_s:.3f}s[/]"
        case ToolCallUnknown():
            return f"[red]unknown outcome[/] {event.tool} [dim]{event.call_id}[/]: {short(event.reason)}"
        case Reflected():
            return f"reflected on {short(event.failure, 60)}: {short(event.fix, 80)}"
        case PlanMade():
            return f"plan: {'; '.join(event.steps)}"
        case PlanRevised():
            return f"plan revised ({short(event.reason, 60)}): {'; '.join(event.steps)}"
        case MemoryRecalled():
            return f"recalled {len(event.records)} memories for {short(event.query, 60)!r}"
        case MemoryWritten():
            return f"remembered in {event.namespace}: {short(event.text, 80)}"
        case ContextCompacted():
            return f"context compacted {event.tokens_before} → {event.tokens_after} tokens"
        case BudgetWarning():
            return f"[yellow]budget[/] {event.limit}: {event.used:g} of {event.maximum:g} used"
        case LimitReached():
            return f"[yellow]limit reached[/] {event.limit} ({event.used:g}/{event.maximum:g})"
        case RunResumed():
            attempt = f" (recovery attempt {event.attempt})" if event.reason == "crash" else ""
            return f"[bold]run resumed[/] after {event.reason}{attempt} by {event.owner}"
        case UserReplied():
            return f"user replied {short(event.text)!r}"
        case Redacted():
            where = ", ".join(event.fields)
            return (
                f"[magenta]redacted[/] {', '.join(event.kinds)} in event {event.of_seq} ({where})"
            )
        case RunFinished():
            color = (
                "green"
                if event.status == "finished"
                else "yellow"
                if event.status.startswith("waiting")
                else "red"
            )
            extra = f" ({event.limit})" if event.limit else ""
            error = (
                f" — {event.error.type}: {short(event.error.message, 100)}" if event.error else ""
            )
            return f"[bold {color}]run {event.status}[/]{extra}{error} [dim]{event.steps} steps, {event.tool_calls} tool calls[/]"
        case _:
            assert_never(event)
