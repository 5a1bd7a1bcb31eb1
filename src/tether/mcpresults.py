"""What an MCP call of ``tether mcp serve`` answers: a run's outcome, or one tool call's result.

Every result says which run it was (``_meta["tether/run_id"]``), so the client can read
the whole log (``tether show RUN``, the HTTP API).
"""

from __future__ import annotations

from typing import Any

from mcp import types as mcp_types
from mcp.types import (
    CallToolResult,
    EmbeddedResource,
    ImageContent,
    TextContent,
    TextResourceContents,
)

from tether.content import ContentBlock, ImageBlock, TextBlock
from tether.events import ToolCallFinished
from tether.jsontypes import JsonObject
from tether.outcome import RunOutcome
from tether.status import TERMINAL_STATUSES

__all__ = ["RUN_ID_META", "error_result", "run_result", "tool_result", "waiting_result"]

RUN_ID_META = "tether/run_id"
"""The ``_meta`` key of every result's run id; a call of an agent's tool may send it back
in its request's ``_meta`` to retry that same run (its call is made once)."""


def waiting_result(run_id: str, calls: list[str]) -> CallToolResult:
    """A run that waits for decisions on ``calls`` (none: for an answer), and how to give them."""
    if calls:
        text = (
            f"The run {run_id} waits for approval of {', '.join(calls)}: decide with "
            f"`tether approve {run_id} CALL` (or `--deny`), which continues the run."
        )
        status = "waiting_for_approval"
    else:
        text = f'The run {run_id} waits for an answer: `tether resume {run_id} --answer "..."`.'
        status = "waiting_for_user"
    summary: JsonObject = {"run_id": run_id, "status": status}
    return CallToolResult(
        content=[TextContent(type="text", text=text)],
        structured_content=summary,
        _meta={RUN_ID_META: run_id},
    )


def error_result(text: str) -> CallToolResult:
    """A call refused before any run: ``text`` says why."""
    return CallToolResult(content=[TextContent(type="text", text=text)], is_error=True)


def run_result(outcome: RunOutcome[Any]) -> CallToolResult:
    """An agent's run as it stopped: its answer, or what it waits for, or why it ended."""
    summary: JsonObject = {
        "run_id": outcome.run_id,
        "status": outcome.status,
        "answer": outcome.answer,
        "steps": outcome.steps,
        "tool_calls": outcome.tool_calls,
        "usage": {
            "input_tokens": outcome.usage.input_tokens,
            "output_tokens": outcome.usage.output_tokens,
            "cost": outcome.usage.cost,
        },
    }
    if outcome.status == "finished":
        text = outcome.answer or ""
    elif outcome.status == "waiting_for_approval":
        calls = ", ".join(f"{p.tool} ({p.call_id})" for p in outcome.pending)
        summary["pending"] = [
            {"call_id": p.call_id, "tool": p.tool, "arguments_hash": p.arguments_hash}
            for p in outcome.pending
        ]
        text = (
            f"The run {outcome.run_id} waits for approval of {calls}: decide with "
            f"`tether approve {outcome.run_id} CALL` (or `--deny`), which continues the run."
        )
    elif outcome.status == "waiting_for_user":
        summary["question"] = outcome.question
        text = (
            f"The run {outcome.run_id} asks: {outcome.question}\n"
            f'Answer with `tether resume {outcome.run_id} --answer "..."`.'
        )
    else:
        text = f"The run {outcome.run_id} ended {outcome.status}: {_why(outcome)}".rstrip(": ")
        if outcome.answer:
            text += f"\nIts best answer: {outcome.answer}"
    waiting = outcome.status not in TERMINAL_STATUSES
    return CallToolResult(
        content=[TextContent(type="text", text=text)],
        structured_content=summary,
        is_error=not (outcome.success or waiting),
        _meta={RUN_ID_META: outcome.run_id},
    )


def tool_result(
    outcome: RunOutcome[Any], finished: ToolCallFinished | None
) -> CallToolResult | None:
    """The call's result as the run recorded it (redacted as the log is).

    A run that did not finish after its call (a limit, a failure) adds a line saying so,
    and is an error. ``None`` when the call has no result (the run waits, or ended first).
    """
    if finished is None or outcome.status not in TERMINAL_STATUSES:  # it waits
        return None
    content = [_content(block) for block in finished.content]
    if not outcome.success:
        note = f"(the run {outcome.run_id} ended {outcome.status} after the call: {_why(outcome)})"
        content.append(TextContent(type="text", text=note))
    structured = finished.structured if isinstance(finished.structured, dict) else None
    return CallToolResult(
        content=content,
        structured_content=structured,
        is_error=finished.is_error or not outcome.success,
        _meta={RUN_ID_META: outcome.run_id},
    )


def _why(outcome: RunOutcome[Any]) -> str:
    """Why a run ended as it did: its error, or the limit it reached."""
    return outcome.error.message if outcome.error is not None else outcome.limit or ""


def _content(block: ContentBlock) -> mcp_types.ContentBlock:
    if isinstance(block, TextBlock):
        return TextContent(type="text", text=block.text)
    if isinstance(block, ImageBlock):
        return ImageContent(type="image", data=block.data, mime_type=block.mime_type)
    return EmbeddedResource(
        type="resource",
        resource=TextResourceContents(
            uri=block.uri, mime_type=block.mime_type, text=block.text or ""
        ),
    )
