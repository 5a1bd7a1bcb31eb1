"""The thinking stages' ports: a planner, a reflector and a router, and what they return.

Each stage is optional and off by default; ``Thinking`` says which are on and bounds them.
A stage gets a ``ThinkingContext``: what the run knows so far, and ``ask``, the one way to
ask a model through the run (the engine records the request's answer as a
``model_responded`` with the stage's ``purpose``, so replay and resume hold across it). What
a stage decides is an event: ``routed``, ``plan_made``, ``plan_revised``, ``reflected``.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Awaitable, Callable

from tether._internal.frozen import frozen
from tether.events import Complexity, PlanMade, PlanRevised
from tether.messages import Message
from tether.models.base import ModelRequest, ModelResponse
from tether.tools.base import ToolDefinition

__all__ = [
    "COMPLEXITIES",
    "DEFAULT_CRITERIA",
    "Ask",
    "Plan",
    "Planner",
    "Reflector",
    "Route",
    "Router",
    "ThinkingContext",
    "Verdict",
    "plan_text",
]

Ask = Callable[[ModelRequest], Awaitable[ModelResponse | None]]
"""Ask the run's model (recorded; ``None``: the request failed, which is recorded too)."""


COMPLEXITIES: tuple[Complexity, ...] = ("low", "medium", "high")
"""The complexity estimates a planner may give."""


@frozen
class Plan:
    """A plan: steps in order, how to know the task is done, the tools each step expects."""

    steps: tuple[str, ...]
    """What to do, in order."""
    success_criteria: tuple[str, ...] = ()
    """What a finished answer must satisfy (the reflector checks them)."""
    step_tools: tuple[tuple[str, ...], ...] = ()
    """The tools each step expects to call (by step; empty: not said)."""
    complexity: Complexity | None = None
    """How hard the task looks."""

    @classmethod
    def of(cls, event: PlanMade | PlanRevised) -> Plan:
        """The plan a ``plan_made`` or ``plan_revised`` event records."""
        return cls(
            steps=event.steps,
            success_criteria=event.success_criteria,
            step_tools=event.step_tools,
            complexity=event.complexity if isinstance(event, PlanMade) else None,
        )


@frozen
class Verdict:
    """A reflector's judgement of an answer."""

    passed: bool
    """Whether the answer meets the success criteria."""
    reasons: str
    """Why, in words (the model reads them when the answer is sent back)."""
    unmet: tuple[str, ...] = ()
    """The criteria it does not meet."""


@frozen
class Route:
    """A router's decision for a goal."""

    direct: bool
    """Answer directly (no tools, no plan) rather than run the agentic loop."""
    reason: str
    """Why, in words."""
    answer: str | None = None
    """The direct answer (required when ``direct``)."""


@frozen
class ThinkingContext:
    """What a thinking stage is given."""

    goal: str
    """The task as the model reads it (the goal, and its context when given)."""
    instructions: str
    """The agent's own instructions."""
    messages: tuple[Message, ...]
    """The conversation so far, as the acting model sees it."""
    tools: tuple[ToolDefinition, ...]
    """The agent's own tools (tether's control tools left out)."""
    plan: Plan | None
    """The plan in force, if any."""
    ask: Ask
    """Ask the run's model: bounded by the run's time, recorded, ``None`` when it failed."""


class Planner(ABC):
    """Makes a plan before the agent acts, and revises it when a step fails."""

    @property
    def name(self) -> str:
        """What the run records as its planner."""
        return type(self).__name__

    @abstractmethod
    async def plan(self, context: ThinkingContext) -> Plan | None:
        """A plan for the task (``None``: act without one)."""

    async def revise(self, context: ThinkingContext, reason: str) -> Plan | None:
        """A new plan after ``reason`` (a failed step, a rejected answer); ``None``: keep it.

        By default the task is planned again, with the current plan and the reason in view.
        """
        return await self.plan(context)


class Reflector(ABC):
    """Checks an answer against the success criteria before ``finish_task`` takes it."""

    @property
    def name(self) -> str:
        """What the run records as its reflector."""
        return type(self).__name__

    @abstractmethod
    async def check(
        self, context: ThinkingContext, answer: str, criteria: tuple[str, ...]
    ) -> Verdict | None:
        """The verdict on ``answer`` (``None``: it could not be checked, and is taken)."""


class Router(ABC):
    """Decides per goal whether to answer directly or to run the agentic loop."""

    @property
    def name(self) -> str:
        """What the run records as its router."""
        return type(self).__name__

    @abstractmethod
    async def route(self, context: ThinkingContext) -> Route | None:
        """How to go on (``None``: the agentic loop)."""


DEFAULT_CRITERIA = ("The answer does everything the task asks, correctly and completely.",)
"""What an answer is checked against when no plan gave criteria."""


def plan_text(
    steps: tuple[str, ...],
    criteria: tuple[str, ...],
    step_tools: tuple[tuple[str, ...], ...] = (),
) -> str:
    """A plan as the acting model reads it after its instructions."""
    lines = ["Your plan for this task (follow it; a step may need more than one tool call):"]
    for index, step in enumerate(steps, 1):
        tools = step_tools[index - 1] if index - 1 < len(step_tools) else ()
        uses = f" (tools: {', '.join(tools)})" if tools else ""
        lines.append(f"{index}. {step}{uses}")
    if criteria:
        lines.append("The task is done when:")
        lines.extend(f"- {criterion}" for criterion in criteria)
    return "\n".join(lines)
