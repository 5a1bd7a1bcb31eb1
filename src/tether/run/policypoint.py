"""Where a run consults its policy: every question the engine asks it, in one place.

Before a call (``decide``), for its turn (``slot``: the policy's concurrency cap, shared by
the process's runs), on its result (``check``) and after humans decided (``observe``). A
policy that fails or answers nonsense denies, or withholds: it fails closed.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Mapping
from dataclasses import replace
from typing import Any, cast

from tether._internal.mend import mended
from tether.content import ToolResult
from tether.jsontypes import JsonObject
from tether.messages import ToolCall
from tether.policy.base import Policy, PolicyContext, PolicyDecision
from tether.run.context import RunContext
from tether.run.journal import Journal
from tether.run.toolexec import slot_for
from tether.state import MAY_PASS_LATER, StateBuilder, failure_key
from tether.tools.base import Tool, ToolDefinition

__all__ = ["REPEATED_DENIALS", "PolicyPoint"]

_PLAIN = (str, int, float, bool, type(None))

REPEATED_DENIALS = 3
"""The time the same denied call (tool and arguments) is asked for that ends the run."""


def _same_values(validated: Mapping[str, Any], raw: JsonObject) -> bool:
    """Whether validation returned the very values the model sent (no coercion, no defaults)."""
    if len(validated) != len(raw):
        return False
    for key, value in validated.items():
        sent = raw.get(key, _PLAIN)
        if type(value) is not type(sent) or type(value) not in _PLAIN or value != sent:
            return False
    return True


class PolicyPoint:
    """The run's policy, as the engine consults it (see the module docstring)."""

    __slots__ = (
        "_caps",
        "_context",
        "_journal",
        "_policy",
        "_run_id",
        "_state",
        "_tools",
        "checks_results",
    )

    def __init__(
        self,
        policy: Policy,
        *,
        run_id: str,
        journal: Journal,
        tools: Mapping[str, ToolDefinition],
        state: StateBuilder | None = None,
    ) -> None:
        self._policy = policy
        self._state = state
        """The run's fold (``None``: repeated denials are not counted)."""
        self._run_id = run_id
        self._journal = journal
        self._tools = tools
        self._context: PolicyContext | None = None
        self._caps: dict[str, asyncio.Semaphore | None] = {}
        self.checks_results = type(policy).check_result is not Policy.check_result
        """Whether the policy checks results at all (the default passes every one)."""

    @classmethod
    def of(cls, ctx: RunContext[Any]) -> PolicyPoint:
        """The policy point of the run ``ctx`` holds."""
        return cls(
            ctx.spec.policy,
            run_id=ctx.run_id,
            journal=ctx.journal,
            tools=ctx.spec.tool_map,
            state=ctx.state,
        )

    def decide(
        self, call: ToolCall, validated: Mapping[str, Any] | None, definition: ToolDefinition
    ) -> PolicyDecision:
        """The policy's decision on ``call``, judged on the arguments the tool would get.

        Validation may coerce (``"100"`` to ``100``): the policy sees the validated values, as
        JSON, so a rule cannot be dodged by a type the validator converts. A policy that
        fails, or answers something other than allow, deny or needs_approval, denies.
        """
        judged = call
        if (
            validated is not None
            and validated is not call.arguments
            and not _same_values(validated, call.arguments)
        ):
            from pydantic_core import to_jsonable_python  # loaded by validation already

            judged = replace(call, arguments=cast(JsonObject, to_jsonable_python(validated)))
        try:
            decision = self._policy.decide(judged, definition, self.context())
        except Exception as exc:  # a policy that cannot decide denies: fail closed
            return PolicyDecision(
                decision="deny",
                rule="policy_error",
                reason=f"the policy failed ({type(exc).__name__}: {exc}); the call is denied",
                stop_run=True,
            )
        if decision.decision not in ("allow", "deny", "needs_approval"):
            return PolicyDecision(
                decision="deny",
                rule="policy_error",
                reason=f"the policy answered {decision.decision!r}, which is not a decision",
                stop_run=True,
            )
        if decision.decision == "deny" and not decision.stop_run:
            return self._once_too_often(call, decision)
        return decision

    def _once_too_often(self, call: ToolCall, decision: PolicyDecision) -> PolicyDecision:
        """A denial; the run's end when the model asked for this same call twice before.

        A model that repeats a denied call word for word would otherwise loop to
        ``max_steps``, paying for every turn. Not for a rate limit (it may pass later).
        """
        if decision.rule in MAY_PASS_LATER or self._state is None:
            return decision
        recorded = self._state.pending.get(call.id)  # the call as the log holds it
        if recorded is None:
            return decision
        times = self._state.denied.get(failure_key(recorded.name, recorded.arguments), 0) + 1
        if times < REPEATED_DENIALS:
            return decision
        return replace(
            decision,
            reason=f"{decision.reason} (asked for {times} times with the same arguments, "
            "denied each time: the run ends here)",
            stop_run=True,
        )

    def context(self) -> PolicyContext:
        """What the policy sees of this run (built once: the log list only grows)."""
        context = self._context
        if context is None or context.events is not self._journal.events:
            context = self._context = PolicyContext(
                run_id=self._run_id, events=self._journal.events, tools=self._tools
            )
        return context

    def check(
        self, call: ToolCall, tool: Tool, result: ToolResult, error_type: str | None
    ) -> tuple[ToolResult, str | None]:
        """The policy's check of a result before it is recorded (size caps, filters)."""
        try:
            try:
                replacement = self._policy.check_result(
                    call, tool.definition, result, self.context()
                )
            except (TypeError, UnicodeEncodeError):  # a lone surrogate (a name not in UTF-8)?
                if (escaped := mended(result)) is result:
                    raise
                result = escaped  # its escape, as the log will hold it
                replacement = self._policy.check_result(
                    call, tool.definition, result, self.context()
                )
        except Exception as exc:  # a check that cannot decide withholds: fail closed
            return ToolResult.error(
                f"the result was withheld: the policy's result check failed "
                f"({type(exc).__name__}: {exc})"
            ), "filtered"
        if replacement is None:
            return result, error_type
        if result.untrusted is True and replacement.untrusted is None:
            replacement = replace(replacement, untrusted=True)  # what it said of itself stays
        # a result the policy withheld is "filtered"; a trimmed one keeps its own error type
        withheld = replacement.is_error and not result.is_error
        return replacement, ("filtered" if withheld else error_type)

    def slot(self, tool: str) -> asyncio.Semaphore | None:
        """The policy's concurrency slot for ``tool`` (shared by the process's runs)."""
        caps = self._caps
        if tool not in caps:
            policy = self._policy
            cap = policy.concurrency(tool)
            caps[tool] = None if cap is None else slot_for(policy, tool, cap)
        return caps[tool]

    def observe(self) -> None:
        """Let the policy see the run after humans decided (its bookkeeping never blocks them)."""
        with contextlib.suppress(Exception):
            self._policy.observe(self.context())
