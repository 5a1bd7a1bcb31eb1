"""``PlanCache``: plans that worked, reused for the same goal, agent, model and tools.

A plan is remembered only when the run it was made for finished without revising it (a
plan that failed is never served again). It is found again by the goal's signature (the
goal with its case and spacing normalized, and the run's context), the agent's instructions,
the model and the planner; the tools' digest is kept with it, so a plan made for other tools
(one added, removed or changed) is a miss, and is dropped. A hit costs no model request:
``plan_made`` says ``cache="hit"`` and which run made the plan; a miss says ``"miss"``.
"""

from __future__ import annotations

import hashlib
import logging
from typing import cast

import orjson

from tether.errors import InvalidEntry, StoreError
from tether.jsontypes import JsonObject, JsonValue
from tether.stores.kv import KeyValueStore
from tether.thinking.base import COMPLEXITIES, Plan
from tether.tools.base import ToolDefinition

__all__ = ["PlanCache", "goal_signature", "tools_digest"]

_log = logging.getLogger("tether")


def goal_signature(goal: str, context: JsonValue = None) -> str:
    """The goal as plans are cached by: case-folded, spacing collapsed, end punctuation off."""
    text = " ".join(goal.casefold().split()).rstrip(" .!?")
    if context is None:
        return text
    return f"{text}\n{orjson.dumps(context, option=orjson.OPT_SORT_KEYS).decode()}"


def tools_digest(tools: tuple[ToolDefinition, ...]) -> str:
    """SHA-256 of the tools' names, descriptions and schemas, in name order."""
    listed = sorted(
        ({"name": t.name, "description": t.description, "schema": t.input_schema} for t in tools),
        key=lambda t: cast(str, t["name"]),
    )
    return hashlib.sha256(orjson.dumps(listed, option=orjson.OPT_SORT_KEYS)).hexdigest()


def _strings(value: object) -> tuple[str, ...] | None:
    if not isinstance(value, list):
        return None
    items = cast(list[object], value)
    if not all(isinstance(s, str) for s in items):
        return None
    return tuple(cast(list[str], items))


class PlanCache:
    """Plans that worked, in a key-value store.

    A ``SqliteStore`` shares them across processes, a ``MemoryStore`` within one. A store that fails is a miss (logged), never a failed run.
    """

    def __init__(self, store: KeyValueStore, *, namespace: str = "tether.plans") -> None:
        self.store = store
        self.namespace = namespace

    @staticmethod
    def key(*, signature: str, instructions: str, model: str, planner: str) -> str:
        """The entry's key: SHA-256 of what a plan is reused for, tools apart."""
        raw = orjson.dumps([signature, instructions, model, planner])
        return hashlib.sha256(raw).hexdigest()

    async def get(self, key: str, tools: str) -> tuple[Plan, str] | None:
        """The plan under ``key`` and the run that made it; ``None`` on a miss.

        An entry made with other tools than those of digest ``tools`` is a miss, and dropped.
        """
        try:
            entry = await self.store.kv_get(self.namespace, key)
            if entry is None:
                return None
            found = _decode(entry.value)
            if found is None or found[2] != tools:
                await self.store.kv_delete(self.namespace, key)  # stale or unreadable
                return None
        except (StoreError, InvalidEntry) as exc:
            _log.warning("the plan cache could not be read (%s): planning anew", exc)
            return None
        return found[0], found[1]

    async def forget(self, key: str) -> None:
        """Drop the plan under ``key`` (a run that took it did not finish)."""
        try:
            await self.store.kv_delete(self.namespace, key)
        except (StoreError, InvalidEntry) as exc:
            _log.warning("the plan cache could not be written (%s)", exc)

    async def put(self, key: str, tools: str, plan: Plan, run_id: str) -> None:
        """Remember ``plan`` (made by ``run_id`` with the tools of digest ``tools``)."""
        value: JsonObject = {
            "steps": list(plan.steps),
            "success_criteria": list(plan.success_criteria),
            "step_tools": [list(t) for t in plan.step_tools],
            "complexity": plan.complexity,
            "tools": tools,
            "run_id": run_id,
        }
        try:
            await self.store.kv_set(self.namespace, key, value)
        except (StoreError, InvalidEntry) as exc:
            _log.warning("the plan cache could not be written (%s)", exc)


def _decode(value: JsonValue) -> tuple[Plan, str, str] | None:
    """A stored entry as (plan, run id, tools digest); ``None`` if it is not one."""
    if not isinstance(value, dict):
        return None
    steps = _strings(value.get("steps"))
    criteria = _strings(value.get("success_criteria"))
    raw_tools: object = value.get("step_tools")
    step_tools = (
        [_strings(t) for t in cast(list[object], raw_tools)]
        if isinstance(raw_tools, list)
        else None
    )
    complexity = value.get("complexity")
    run_id, tools = value.get("run_id"), value.get("tools")
    if (
        not steps
        or criteria is None
        or step_tools is None
        or any(t is None for t in step_tools)
        or not isinstance(run_id, str)
        or not isinstance(tools, str)
    ):
        return None
    plan = Plan(
        steps=steps,
        success_criteria=criteria,
        step_tools=tuple(cast(list[tuple[str, ...]], step_tools)),
        complexity=complexity if complexity in COMPLEXITIES else None,
    )
    return plan, run_id, tools
