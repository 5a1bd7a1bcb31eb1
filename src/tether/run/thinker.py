"""The thinking stages in the run: route and plan at the start, revise, check answers.

Each stage's model request is recorded as ``model_responded`` (or ``model_failed``) with the
stage's ``purpose``: it counts in the run's usage, never as a turn of the conversation, and
is asked once (a failed one is skipped, not retried: thinking never blocks a run). What a
stage decides is an event of its own. The fold remembers which stages were asked, so a
resumed run never plans or routes twice.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from dataclasses import replace
from typing import Generic, Literal, TypeVar, cast

from tether.content import ToolResult, content_text
from tether.events import (
    BudgetWarning,
    PlanMade,
    PlanRevised,
    Purpose,
    Reflected,
    Routed,
)
from tether.messages import (
    CONTROL_TOOLS,
    SEARCH_KNOWLEDGE,
    Message,
    ToolResultMessage,
    UserMessage,
)
from tether.models.base import ModelRequest, ModelResponse, check_model_requests_allowed
from tether.outcome import ErrorInfo
from tether.run.base import OutputT, Planned, Stop
from tether.run.context import RunContext
from tether.run.modelstep import ModelStep
from tether.thinking.base import DEFAULT_CRITERIA, Plan, ThinkingContext
from tether.thinking.cache import goal_signature, tools_digest
from tether.thinking.config import Thinking
from tether.tools.base import ToolDefinition

T = TypeVar("T")

__all__ = ["Thinker"]


class Thinker(Generic[OutputT]):
    """The run's thinking stages (only made when ``Thinking`` has one on)."""

    __slots__ = ("_ctx", "_step", "thinking")

    def __init__(
        self, ctx: RunContext[OutputT], step: ModelStep[OutputT], thinking: Thinking
    ) -> None:
        self._ctx = ctx
        self._step = step
        self.thinking = thinking

    # -- asking the model, recorded -----------------------------------------------------------

    def _affordable(self, phase: Literal["plan", "reflect"]) -> bool:
        """Whether the run's and the phase's limits leave room for a thinking request.

        A phase whose own limit is used up is skipped from then on, with one
        ``budget_warning`` that says which limit.
        """
        ctx, st = self._ctx, self._ctx.state
        limits = ctx.spec.limits
        remaining = ctx.remaining()
        if remaining is not None and remaining <= 0:
            return False
        if ctx.phased and (spent := ctx.phase_spent(phase)) is not None:
            assert spent.limit is not None
            self._skipped(spent.limit, spent.used, spent.maximum)
            return False
        if (
            limits.max_tokens is not None
            and st.input_tokens + st.output_tokens >= limits.max_tokens
        ):
            return False
        return not (
            limits.max_cost is not None and st.cost is not None and st.cost >= limits.max_cost
        )

    def _skipped(self, limit: str, used: float, maximum: float) -> None:
        """A thinking request is skipped for ``limit``: one ``budget_warning`` says so."""
        if limit not in self._ctx.state.skipped_for:
            self._ctx.add(BudgetWarning, limit=limit, used=float(used), maximum=float(maximum))

    def _context(self, purpose: Purpose) -> ThinkingContext:
        """What a stage is given; its ``ask`` records requests under ``purpose``."""
        ctx, st = self._ctx, self._ctx.state
        plan = st.plan

        async def ask(request: ModelRequest) -> ModelResponse | None:
            return await self._ask(request, purpose)

        first = st.messages[st.earlier] if len(st.messages) > st.earlier else None
        return ThinkingContext(
            goal=first.text if isinstance(first, UserMessage) else st.goal,
            instructions=self._step.instructions(plan=False),
            messages=tuple(st.messages),
            tools=_planned_tools(ctx.spec.definitions),
            plan=None if plan is None else Plan.of(plan),
            ask=ask,
        )

    async def _ask(self, request: ModelRequest, purpose: Purpose) -> ModelResponse | None:
        """One recorded thinking request; ``None`` when it failed (recorded, not retried)."""
        ctx, step = self._ctx, self._step
        model = ctx.model
        if model.real:
            check_model_requests_allowed(model)
        request = replace(request, run_id=ctx.run_id, purpose=purpose)
        if ctx.phased and not self._affordable("reflect" if purpose == "reflect" else "plan"):
            return None  # a stage that asks again may not pass its phase's limits either
        if step.size is not None:
            over, _ = await step.size.check(request)
            if over is not None:  # it could not fit: skipped before it is sent
                self._skipped(over.limit, over.used, over.maximum)
                return None
        return await step.aside(request, purpose)

    async def _within(self, stage: str, asked: Awaitable[T], own: object) -> T | None:
        """A stage's answer within the run's time (``None``: it gave none in time).

        tether's own stages ask the model, whose requests are bounded already; a planner,
        router or reflector of the caller's own (``own``) is bounded here, or one that never
        answered held the run past ``max_seconds``. The run goes on without the stage.
        """
        if type(own).__module__.startswith("tether."):
            return await asked
        try:
            async with asyncio.timeout(self._ctx.remaining()):  # on this task: cancel() holds
                return await asked
        except TimeoutError:
            self._ctx.journal.warnings.append(
                f"thinking: the {stage} stage gave no answer within the run's time; the run "
                "went on without it"
            )
            return None

    # -- the stages ----------------------------------------------------------------------------

    async def begin(self) -> Stop | None:
        """Before the first turn: route, then plan (each once per run, resumed or not)."""
        st = self._ctx.state
        if st.steps > 0:
            return None  # the run is acting already
        router = self.thinking.router
        asked = router is not None and st.routed is None and "route" not in st.asked
        if router is not None and asked and self._affordable("plan"):
            route = await self._within("route", router.route(self._context("route")), router)
            if route is not None and route.direct and route.answer:
                self._ctx.add(Routed, route="direct", reason=route.reason)
                self._ctx.output = cast(OutputT, route.answer)
                return Stop("finished")
            reason = "the router gave no decision" if route is None else route.reason
            self._ctx.add(Routed, route="agentic", reason=reason)
        planner = self.thinking.planner
        if planner is None or st.plan is not None or "plan" in st.asked:
            return None
        cache = self.thinking.plan_cache
        if cache is not None:
            key, tools = self._cache_key()
            cached = await cache.get(key, tools)
            if cached is not None:
                plan, source = cached
                self._made(plan, "hit", source)
                return None
        if self._affordable("plan"):
            plan = await self._within("plan", planner.plan(self._context("plan")), planner)
            if plan is not None:
                self._made(plan, None if cache is None else "miss", None)
        return None

    def _made(self, plan: Plan, cache: Literal["hit", "miss"] | None, source: str | None) -> None:
        self._ctx.add(
            PlanMade,
            steps=plan.steps,
            success_criteria=plan.success_criteria,
            step_tools=plan.step_tools,
            complexity=plan.complexity,
            cache=cache,
            cached_from=source,
        )

    def _cache_key(self) -> tuple[str, str]:
        """The plan cache's key for this run, and its tools' digest."""
        ctx = self._ctx
        planner = self.thinking.planner
        assert self.thinking.plan_cache is not None
        assert planner is not None
        key = self.thinking.plan_cache.key(
            signature=goal_signature(ctx.goal, ctx.goal_context),
            instructions=ctx.spec.instructions,
            model=ctx.model.name,
            planner=planner.name,
        )
        tools = tools_digest(_planned_tools(ctx.spec.definitions))
        return key, tools

    async def ended(self) -> None:
        """After the run ended: the plan cache learns from it.

        A first plan the run finished with is remembered; a cached plan it did not finish
        with is forgotten.
        """
        cache = self.thinking.plan_cache
        st = self._ctx.state
        plan = st.plan
        if cache is None or not isinstance(plan, PlanMade) or st.finished is None:
            return
        finished = st.finished.status == "finished"
        key, tools = self._cache_key()
        if plan.cache == "hit" and not finished:
            await cache.forget(key)
        elif plan.cache == "miss" and finished:
            await cache.put(key, tools, Plan.of(plan), self._ctx.run_id)

    async def after_turn(self, planned: list[Planned]) -> None:
        """After a turn that goes on: revise the plan if a step failed or an answer was rejected."""
        planner = self.thinking.planner
        st = self._ctx.state
        if planner is None or st.plan is None or st.replans >= self.thinking.max_replans:
            return
        reason = _why_replan(planned, st.messages)
        if reason is None or not self._affordable("plan"):
            return
        plan = await self._within("plan", planner.revise(self._context("plan"), reason), planner)
        if plan is not None:
            self._ctx.add(
                PlanRevised,
                steps=plan.steps,
                reason=reason,
                success_criteria=plan.success_criteria,
                step_tools=plan.step_tools,
                revision=st.replans + 1,
            )

    async def check(self, item: Planned) -> None:
        """Check ``finish_task``'s answer before it is taken; a rejection sends it back.

        The check that uses up ``max_reflections`` and fails ends the run
        ``budget_exhausted`` with the answer and the unmet criteria (``item.stop``).
        """
        reflector = self.thinking.reflector
        ctx, st = self._ctx, self._ctx.state
        maximum = self.thinking.max_reflections
        if reflector is None or st.reflections >= maximum or not self._affordable("reflect"):
            return
        answer = ctx.spec.output.as_text(cast(OutputT, item.output))
        plan = st.plan
        criteria = (
            plan.success_criteria
            if plan is not None and plan.success_criteria
            else DEFAULT_CRITERIA
        )
        verdict = await self._within(
            "reflect", reflector.check(self._context("reflect"), answer, criteria), reflector
        )
        if verdict is None:
            return  # it could not be checked: the answer is taken
        attempt = st.reflections + 1
        ctx.add(
            Reflected,
            call_id=item.call.id,
            answer=answer,
            passed=verdict.passed,
            reasons=verdict.reasons,
            unmet=verdict.unmet,
            attempt=attempt,
        )
        if verdict.passed:
            return
        unmet = "; ".join(verdict.unmet) or "see the reasons"
        item.finish = False
        item.error_type = "not_accepted"
        if attempt >= maximum:
            item.synthetic = ToolResult.error(
                f"finish_task not accepted: {verdict.reasons} Unmet: {unmet}. The run ends here "
                f"({maximum} answers were checked)."
            )
            item.stop = Stop(
                "budget_exhausted",
                "max_reflections",
                attempt,
                maximum,
                False,
                ErrorInfo(
                    type="CriteriaNotMet",
                    message=f"the last answer did not pass its check: {unmet}",
                ),
            )
        else:
            item.synthetic = ToolResult.error(
                f"finish_task not accepted: the answer does not meet the success criteria. "
                f"{verdict.reasons} Unmet: {unmet}. Fix this (call tools if you need to), then "
                "call finish_task again."
            )


def _planned_tools(definitions: tuple[ToolDefinition, ...]) -> tuple[ToolDefinition, ...]:
    """The tools a plan may use: the agent's own, and ``search_knowledge`` when offered."""
    return tuple(
        d for d in definitions if d.name not in CONTROL_TOOLS or d.name == SEARCH_KNOWLEDGE
    )


def _why_replan(planned: list[Planned], messages: list[Message]) -> str | None:
    """Why the plan should change after this turn: a tool failed, or an answer was rejected."""
    results = {m.call_id: m for m in messages[-len(planned) :] if isinstance(m, ToolResultMessage)}
    for item in planned:
        if item.error_type == "not_accepted":
            return "the answer was rejected by its check"
        result = results.get(item.call.id)
        if item.tool is not None and result is not None and result.is_error:
            text = content_text(result.content)
            return f"the step calling {item.call.name} failed: {text[:300]}"
    return None
