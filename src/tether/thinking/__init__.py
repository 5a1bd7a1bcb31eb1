"""Optional thinking stages of a run: route, plan, reflect (``Agent(thinking=Thinking())``).

Everything a stage decides is an event (``routed``, ``plan_made``, ``plan_revised``,
``reflected``), and each model request a stage makes is a ``model_responded`` with its
``purpose``: replay and resume hold across them. A stage that is off costs nothing.
"""

from __future__ import annotations

from tether.thinking.base import (
    DEFAULT_CRITERIA,
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
from tether.thinking.cache import PlanCache, goal_signature, tools_digest
from tether.thinking.config import Thinking
from tether.thinking.model import ModelPlanner, ModelReflector, ModelRouter, answered_only

__all__ = [
    "DEFAULT_CRITERIA",
    "Ask",
    "ModelPlanner",
    "ModelReflector",
    "ModelRouter",
    "Plan",
    "PlanCache",
    "Planner",
    "Reflector",
    "Route",
    "Router",
    "Thinking",
    "ThinkingContext",
    "Verdict",
    "answered_only",
    "goal_signature",
    "plan_text",
    "tools_digest",
]
