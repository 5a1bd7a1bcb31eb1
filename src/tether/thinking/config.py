"""``Thinking``: which thinking stages a run uses (router, planner, reflector), and bounds."""

from __future__ import annotations

from dataclasses import dataclass, field

from tether.errors import ConfigError
from tether.jsontypes import JsonObject
from tether.thinking.base import Planner, Reflector, Router
from tether.thinking.cache import PlanCache
from tether.thinking.model import ModelPlanner, ModelReflector, ModelRouter

__all__ = ["Thinking"]


@dataclass(frozen=True, kw_only=True)
class Thinking:
    """Which thinking stages a run uses, and their bounds.

    ``True`` uses the default stage, which asks the agent's own model in a constrained step
    (``tether.thinking.model``); pass your own ``Planner``, ``Reflector`` or ``Router`` to
    replace it, ``False`` to turn it off. A stage that is off costs nothing.
    """

    plan: bool | Planner = True
    """Plan before acting (``plan_made``), and revise the plan when a step fails or an
    answer is rejected (``plan_revised``)."""
    reflect: bool | Reflector = True
    """Check each answer against the plan's success criteria before ``finish_task`` takes
    it (``reflected``); a rejected answer sends the run back to acting with the reasons."""
    route: bool | Router = False
    """Decide per goal whether to answer at once (one model call, no tools) or to run the
    loop (``routed``). Needs a text output type."""
    max_replans: int = 2
    """How many times a run may revise its plan."""
    plan_cache: PlanCache | None = None
    """Reuse plans that worked (``PlanCache(store)``): a run whose goal, agent, model and
    tools match an earlier run that finished with its first plan takes that plan without a
    model request (``plan_made`` says ``hit`` or ``miss``). Needs the planner."""
    max_reflections: int = 2
    """How many answers a run may have checked: when the last allowed check fails too, the
    run ends ``budget_exhausted`` (limit ``max_reflections``) with that answer and the unmet
    criteria, never loops."""
    planner: Planner | None = field(init=False, repr=False, compare=False)
    """The planner in use (``None``: off)."""
    reflector: Reflector | None = field(init=False, repr=False, compare=False)
    """The reflector in use (``None``: off)."""
    router: Router | None = field(init=False, repr=False, compare=False)
    """The router in use (``None``: off)."""

    def __post_init__(self) -> None:
        for name in ("max_replans", "max_reflections"):
            value: object = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 0:
                raise ConfigError(
                    f"Thinking({name}=...) takes a whole number 0 or more, not {value!r}"
                )
        stages = (
            ("plan", "planner", Planner, ModelPlanner),
            ("reflect", "reflector", Reflector, ModelReflector),
            ("route", "router", Router, ModelRouter),
        )
        for option, attribute, port, default in stages:
            given: object = getattr(self, option)
            if isinstance(given, bool):
                stage = default() if given else None
            elif isinstance(given, port):
                stage = given
            else:
                raise ConfigError(
                    f"Thinking({option}=...) takes True, False or a {port.__name__}, "
                    f"not {type(given).__name__}"
                )
            object.__setattr__(self, attribute, stage)
        if self.plan_cache is not None:
            if not isinstance(self.plan_cache, PlanCache):  # pyright: ignore[reportUnnecessaryIsInstance] - user input
                raise ConfigError(
                    "Thinking(plan_cache=...) takes a PlanCache (PlanCache(store)), not "
                    f"{type(self.plan_cache).__name__}"
                )
            if self.planner is None:
                raise ConfigError("Thinking(plan_cache=...) needs the planner: plan=True")

    @property
    def on(self) -> bool:
        """Whether any stage is on."""
        return self.planner is not None or self.reflector is not None or self.router is not None

    def describe(self) -> JsonObject:
        """What ``run_started`` records: each stage in use by name, and the bounds."""
        return {
            "router": None if self.router is None else self.router.name,
            "planner": None if self.planner is None else self.planner.name,
            "reflector": None if self.reflector is None else self.reflector.name,
            "max_replans": self.max_replans,
            "max_reflections": self.max_reflections,
            **({} if self.plan_cache is None else {"plan_cache": True}),
        }
