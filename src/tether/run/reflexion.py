"""Reflexion: a run learns from its failed tool calls, and later runs learn from its lessons.

With ``Remember(reflexion=True)``:

- a failed call the model can learn from (the tool raised or refused its arguments; never a
  policy's denial, a limit, or an error that may hold an outsider's words) is a ``reflected``
  event: the tool, how it failed, its arguments as the log holds them, an analysis (the error,
  as the model read it) and a fix;
- a call that failed twice with the same arguments is not made a third time: the model is told
  to change what the error names or to take another way (``repeated_failure``);
- when the run ends, each distinct failure becomes a lesson in episodic memory, keyed by the
  task's signature, the tool and the error type: what failed, why, and whether a corrected call
  then succeeded, so that later runs of similar tasks recall it with the goal and read it with
  the goal, before they make the same call. Lessons pass the run's redaction and the memory's
  write policy like every record.
"""

from __future__ import annotations

import re
from typing import Generic

import orjson

from tether.content import JsonObject, ToolResult, content_text
from tether.events import Reflected
from tether.memory.base import MemoryRecord
from tether.run.base import OutputT, Planned
from tether.run.context import RunContext
from tether.run.remembering import Rememberer
from tether.state import failure_key

__all__ = ["LEARNABLE", "Reflexion", "lesson_text", "task_signature"]

LEARNABLE = frozenset({"model_retry", "exception", "invalid_arguments", "unknown_tool"})
"""How a call can fail that the model can learn from (a policy's denial or a limit is not)."""

_ERROR_CHARS = 400
_WORD = re.compile(r"[a-z]+")


def task_signature(goal: str) -> str:
    """A goal without its particulars: its first twelve words, lower case, numbers dropped."""
    return " ".join(_WORD.findall(goal.lower())[:12])


def lesson_text(tool: str, goal: str, arguments: str, error: str, fixed: bool) -> str:
    """A lesson as memory keeps it: what the tool refused and why.

    And whether a corrected call then succeeded, never with which values: a model recalling
    them copies them into a task that needs others.
    """
    after = " A corrected call then succeeded." if fixed else " No corrected call succeeded."
    return f"Lesson for {tool} (task: {goal}): refused {arguments}: {error.rstrip('.')}.{after}"


def _json(value: object) -> str:
    return orjson.dumps(value, option=orjson.OPT_SORT_KEYS).decode()


class Reflexion(Generic[OutputT]):
    """The run's reflexion: reflections on failures, the repeat guard, the lessons."""

    __slots__ = ("_ctx", "_rememberer")

    def __init__(self, ctx: RunContext[OutputT], rememberer: Rememberer[OutputT]) -> None:
        self._ctx = ctx
        self._rememberer = rememberer

    def failed(self, item: Planned, result: ToolResult, error_type: str | None) -> None:
        """After a failed call's result is recorded: reflect on it, if it can teach."""
        kind = error_type or "tool_error"
        if error_type is not None and error_type not in LEARNABLE:
            return
        call = item.call
        if call.parse_error is not None or _untrusted(item, result, error_type):
            return  # no arguments to learn from; or words an outsider may have written
        arguments = self._ctx.journal.redacted(dict(call.arguments))
        error = " ".join(content_text(result.content).split())[:_ERROR_CHARS]
        attempt = self._ctx.state.failures.get(failure_key(call.name, arguments), 0) + 1
        self._ctx.add(
            Reflected,
            call_id=call.id,
            answer="",
            passed=False,
            reasons=error,
            attempt=attempt,
            tool=call.name,
            error_type=kind,
            arguments=arguments,
            fix=(
                f"change what the error names before calling {call.name} again; the same "
                "arguments fail the same way"
                if attempt == 1
                else f"take another way: {call.name} failed {attempt} times with these arguments"
            ),
        )

    def repeated(self, name: str, arguments: JsonObject) -> ToolResult | None:
        """The refusal of a call that already failed twice exactly so (``None``: it may run)."""
        failures = self._ctx.state.failures
        if not failures:
            return None
        times = failures.get(failure_key(name, arguments), 0)
        if times < 2:
            return None
        return ToolResult.error(
            f"not executed: {name} already failed {times} times with exactly these arguments. "
            "Do something different: change the arguments as the error said, use another "
            "tool, or finish with what you have."
        )

    def lessons(self) -> list[MemoryRecord]:
        """The run's lessons, one per distinct failure, ready to store (redacted, admitted)."""
        st = self._ctx.state
        if not st.failed:
            return []
        goal = st.goal.strip()
        signature = task_signature(goal)
        seen: set[tuple[str, str]] = set()
        out: list[MemoryRecord] = []
        for reflection in st.failed:
            tool = reflection.tool or ""
            if (tool, reflection.reasons) in seen:
                continue
            seen.add((tool, reflection.reasons))
            worked = st.worked.get(reflection.call_id)
            text = lesson_text(
                tool,
                goal[:300],
                _json(reflection.arguments or {}),
                reflection.reasons,
                worked is not None,
            )
            record = self._rememberer.lesson(
                text,
                metadata={
                    "reflection": True,
                    "tool": tool,
                    "error_type": reflection.error_type or "",
                    "task": signature,
                    "note": reflection.reasons,
                },
            )
            if record is not None:
                out.append(record)
        return out


def _untrusted(item: Planned, result: ToolResult, error_type: str | None) -> bool:
    """Whether the failed call's result may hold an outsider's words (then it teaches nothing).

    A result may say it is untrusted. What a tool of this program raised (``ModelRetry``, an
    exception) or tether said (bad arguments, no such tool) is the program's own words; an
    error result a tool returned, or anything from an outside tool (MCP), counts as its
    declared output does.
    """
    tool = item.tool
    if result.untrusted is True:
        return True
    if tool is None:
        return False
    if error_type in LEARNABLE and tool.definition.origin is None:
        return False
    if result.untrusted is False and tool.definition.origin is None:
        return False
    return tool.annotations.is_untrusted_output
