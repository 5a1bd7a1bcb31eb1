"""The default thinking stages: each asks the agent's own model, in a constrained step.

Each stage offers the model one tool and requires that it call it (``make_plan``,
``verdict``, ``route``): a model that can call tools can plan, check and route, and a
constrained local model is held to the tool's schema. A reply that is not a usable call is
no plan, no verdict (the answer is taken) or the agentic route: thinking never blocks a run.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import cast

import orjson

from tether.jsontypes import JsonObject
from tether.messages import AssistantMessage, Message, ToolResultMessage, UserMessage
from tether.models.base import ModelRequest, ModelResponse, ModelSettings
from tether.thinking.base import (
    COMPLEXITIES,
    Ask,
    Plan,
    Planner,
    Reflector,
    Route,
    Router,
    ThinkingContext,
    Verdict,
    plan_text,
)
from tether.tools.base import ToolDefinition

__all__ = [
    "ModelPlanner",
    "ModelReflector",
    "ModelRouter",
    "answered_only",
    "call_arguments",
    "required_call",
]

_MAX_STEPS = 8
_MAX_CRITERIA = 4


def _settings(cap: int) -> ModelSettings:
    return ModelSettings(max_output_tokens=cap, temperature=0.0)


def _tool_lines(tools: tuple[ToolDefinition, ...]) -> str:
    if not tools:
        return "(none: the agent can only reason and answer)"
    return "\n".join(
        f"- {t.name}: {t.description.splitlines()[0] if t.description else ''}" for t in tools
    )


def call_arguments(response: ModelResponse, name: str) -> Mapping[str, object] | None:
    """The arguments of the response's call of ``name``, or JSON it wrote as text."""
    for call in response.tool_calls:
        if call.name == name and call.parse_error is None:
            return call.arguments
    text = response.text.strip()
    if text.startswith("{"):
        try:
            value: object = orjson.loads(text)
        except orjson.JSONDecodeError:
            return None
        if isinstance(value, dict):
            return cast(Mapping[str, object], value)
    return None


async def required_call(
    ask: Ask,
    instructions: str,
    messages: tuple[Message, ...],
    definition: ToolDefinition,
    cap: int,
) -> Mapping[str, object] | None:
    """Ask the model to call ``definition`` (and only it); its arguments, or ``None``."""
    request = ModelRequest(
        instructions=instructions,
        messages=messages,
        tools=(definition,),
        tool_choice="required",
        settings=_settings(cap),
    )
    response = await ask(request)
    return None if response is None else call_arguments(response, definition.name)


def _strings(value: object, limit: int) -> tuple[str, ...]:
    if not isinstance(value, list):
        return ()
    items = cast(list[object], value)
    return tuple(s.strip() for s in items if isinstance(s, str) and s.strip())[:limit]


def answered_only(messages: tuple[Message, ...]) -> tuple[Message, ...]:
    """``messages`` without the calls that have no result yet (a valid history to send).

    While ``finish_task`` is checked, its call has no result: a provider refuses a history
    with an unanswered call, so the call is left out (and its turn, if nothing else is left).
    """
    answered = {m.call_id for m in messages if isinstance(m, ToolResultMessage)}
    out: list[Message] = []
    for message in messages:
        if isinstance(message, AssistantMessage) and message.tool_calls:
            calls = tuple(c for c in message.tool_calls if c.id in answered)
            if len(calls) != len(message.tool_calls):
                if not calls and not message.text:
                    continue
                message = replace(message, tool_calls=calls)
        out.append(message)
    return tuple(out)


def _plan_definition(tools: tuple[ToolDefinition, ...]) -> ToolDefinition:
    step: JsonObject = {
        "type": "object",
        "properties": {
            "step": {"type": "string", "description": "What to do, in a short sentence."},
        },
        "required": ["step"],
        "additionalProperties": False,
    }
    if tools:
        step["properties"] = {
            **cast(JsonObject, step["properties"]),
            "tools": {
                "type": "array",
                "items": {"type": "string", "enum": [t.name for t in tools]},
                "description": "The tools this step calls (empty when it only reasons).",
            },
        }
        step["required"] = ["step", "tools"]
    return ToolDefinition(
        name="make_plan",
        description="Record the plan: its steps in order, and how to know the task is done.",
        input_schema={
            "type": "object",
            "properties": {
                "steps": {"type": "array", "items": step, "minItems": 1, "maxItems": _MAX_STEPS},
                "success_criteria": {
                    "type": "array",
                    "items": {"type": "string"},
                    "minItems": 1,
                    "maxItems": _MAX_CRITERIA,
                    "description": "What a finished answer must satisfy, each checkable.",
                },
                "complexity": {"type": "string", "enum": list(COMPLEXITIES)},
            },
            "required": ["steps", "success_criteria", "complexity"],
            "additionalProperties": False,
        },
    )


_PLAN_GUIDE = """\
You plan how an agent will do the user's task; you do not do it yourself.
The agent can call these tools:
{tools}
It ends by calling finish_task with the result.

Write a short plan: 1 to 6 concrete steps in order, each naming the tools it calls (none for \
a step that only reasons), and 1 to 3 success criteria a finished answer must meet, each \
checkable from the answer and the tool results. Say how complex the task is. Call make_plan.{revise}

The agent's own instructions, for context:
{instructions}"""


class ModelPlanner(Planner):
    """Asks the run's model for a plan (``make_plan``), and for a new one when it must change."""

    def __init__(self, *, max_output_tokens: int = 700) -> None:
        self._cap = max_output_tokens

    async def plan(self, context: ThinkingContext) -> Plan | None:
        """The model's plan for the task."""
        return await self._ask(context, "")

    async def revise(self, context: ThinkingContext, reason: str) -> Plan | None:
        """The model's new plan, with the current one and why it must change in view."""
        current = (
            ""
            if context.plan is None
            else plan_text(context.plan.steps, context.plan.success_criteria)
        )
        note = (
            f"\n\nThe plan so far:\n{current}\nIt must change because: {reason}\n"
            "Plan what remains, using what the conversation shows has happened."
        )
        return await self._ask(context, note)

    async def _ask(self, context: ThinkingContext, revise: str) -> Plan | None:
        definition = _plan_definition(context.tools)
        guide = _PLAN_GUIDE.format(
            tools=_tool_lines(context.tools), revise=revise, instructions=context.instructions
        )
        arguments = await required_call(
            context.ask, guide, answered_only(context.messages), definition, self._cap
        )
        if arguments is None:
            return None
        known = {t.name for t in context.tools}
        steps: list[str] = []
        step_tools: list[tuple[str, ...]] = []
        raw_steps: object = arguments.get("steps")
        for raw in (
            cast(list[object], raw_steps)[:_MAX_STEPS] if isinstance(raw_steps, list) else []
        ):
            if isinstance(raw, str) and raw.strip():
                steps.append(raw.strip())
                step_tools.append(())
            elif isinstance(raw, dict):
                item = cast(dict[str, object], raw)
                text = item.get("step")
                if isinstance(text, str) and text.strip():
                    steps.append(text.strip())
                    step_tools.append(
                        tuple(t for t in _strings(item.get("tools"), 8) if t in known)
                    )
        if not steps:
            return None
        complexity = arguments.get("complexity")
        return Plan(
            steps=tuple(steps),
            success_criteria=_strings(arguments.get("success_criteria"), _MAX_CRITERIA),
            step_tools=tuple(step_tools) if any(step_tools) else (),
            complexity=complexity if complexity in COMPLEXITIES else None,
        )


_VERDICT = ToolDefinition(
    name="verdict",
    description="Record whether the proposed answer meets every criterion.",
    input_schema={
        "type": "object",
        "properties": {
            "reasons": {
                "type": "string",
                "description": "What the answer gets right or wrong, checked against the "
                "task and the tool results.",
            },
            "unmet": {
                "type": "array",
                "items": {"type": "string"},
                "description": "The criteria the answer does not meet (empty when none).",
            },
            "passed": {"type": "boolean", "description": "True when every criterion is met."},
        },
        "required": ["reasons", "unmet", "passed"],
        "additionalProperties": False,
    },
)

_REFLECT_GUIDE = """\
You check an agent's proposed final answer before it is accepted. Judge only from the task, \
the conversation and the tool results in it. The answer passes when it meets every \
criterion. Reject it for facts the tool results contradict and for parts of the task left \
undone, never for style. Call verdict."""


class ModelReflector(Reflector):
    """Asks the run's model whether an answer meets the criteria (``verdict``)."""

    def __init__(self, *, max_output_tokens: int = 400) -> None:
        self._cap = max_output_tokens

    async def check(
        self, context: ThinkingContext, answer: str, criteria: tuple[str, ...]
    ) -> Verdict | None:
        """The model's verdict on ``answer``."""
        listed = "\n".join(f"- {c}" for c in criteria)
        question = UserMessage(
            text=f"Proposed final answer:\n<answer>\n{answer}\n</answer>\n\n"
            f"Criteria:\n{listed}\n\nDoes the answer meet every criterion? Call verdict."
        )
        messages = (*answered_only(context.messages), question)
        arguments = await required_call(context.ask, _REFLECT_GUIDE, messages, _VERDICT, self._cap)
        if arguments is None or not isinstance(arguments.get("passed"), bool):
            return None
        reasons = arguments.get("reasons")
        unmet = _strings(arguments.get("unmet"), 8)
        passed = bool(arguments["passed"])
        return Verdict(
            passed=passed,
            reasons=reasons.strip() if isinstance(reasons, str) else "",
            unmet=() if passed else unmet,
        )


_DIRECT = ToolDefinition(
    name="answer_directly",
    description="Answer the request now, completely, from general knowledge: only when no "
    "other tool is needed.",
    input_schema={
        "type": "object",
        "properties": {"answer": {"type": "string", "description": "The complete answer."}},
        "required": ["answer"],
        "additionalProperties": False,
    },
)

_ROUTE_GUIDE = """\
Decide how to handle the user's request. If it needs any of the agent's tools (a file, data, \
a price, a lookup, current information, a calculation), call the tool its first step needs. \
Call answer_directly only when the request can be answered completely and correctly right \
now from general knowledge, with the complete answer."""


class ModelRouter(Router):
    """Asks the run's model whether the goal needs the loop, answering it if it does not.

    The model sees the agent's tools and ``answer_directly``: reaching for one of the tools
    is the agentic route (the call itself is not run; the loop makes its own), so the
    decision is the model's ordinary tool choice, which small models make far better than a
    yes/no about their own knowledge.
    """

    def __init__(self, *, max_output_tokens: int = 700) -> None:
        self._cap = max_output_tokens

    async def route(self, context: ThinkingContext) -> Route | None:
        """The model's route (a direct one carries the answer)."""
        request = ModelRequest(
            instructions=f"{_ROUTE_GUIDE}\n\nThe agent's own instructions, for context:\n"
            f"{context.instructions}",
            messages=answered_only(context.messages),
            tools=(*context.tools, _DIRECT),
            tool_choice="required",
            settings=_settings(self._cap),
        )
        response = await context.ask(request)
        if response is None:
            return None
        known = {t.name for t in context.tools}
        for call in response.tool_calls:
            if call.name in known:
                return Route(direct=False, reason=f"it needs {call.name}")
        arguments = call_arguments(response, _DIRECT.name)
        if arguments is None:
            return None
        answer = arguments.get("answer")
        if not isinstance(answer, str) or not answer.strip():
            return Route(direct=False, reason="no direct answer came")
        return Route(direct=True, reason="answered from general knowledge", answer=answer.strip())
