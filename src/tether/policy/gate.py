"""``RulePolicy``: the policy gate that evaluates ``Rules`` (see ``tether.policy.rules``).

It is deterministic: a decision depends on the rules, the call, the tool's annotations and
the run's log (and, for ``scope="process"`` rate limits, on this process's earlier calls).
What it derives from a run's log (calls made, untrusted sources seen) is folded
incrementally and checked against the hash chain, so a long run costs O(new events) per
decision, and a resumed run rebuilds the same facts from its stored log.
"""

from __future__ import annotations

import time
from collections import OrderedDict, deque
from collections.abc import Sequence
from dataclasses import replace
from datetime import datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING

import orjson

from tether.content import ToolResult
from tether.events import (
    ApprovalGiven,
    Decision,
    Event,
    MemoryRecalled,
    PolicyDecided,
    RunStarted,
    SessionContinued,
    ToolCallFinished,
    ToolCallRequested,
    UserReplied,
)
from tether.messages import CONTROL_TOOLS, ToolCall
from tether.policy.base import Policy, PolicyContext, PolicyDecision
from tether.policy.results import filter_result, result_size, truncate
from tether.policy.rules import (
    RateLimit,
    Rule,
    Rules,
    matches_any,
)
from tether.tools.base import ToolAnnotations, ToolDefinition

if TYPE_CHECKING:
    from tether.policy.dataflow import Sources

__all__ = ["RulePolicy", "effective_annotations"]

_OUTSIDE = ToolAnnotations(untrusted_output=True)  # from outside, and nobody vouched for it
_CONTROL = PolicyDecision(decision="allow", rule="control_tool", reason="tether's own control tool")
_SAFE = PolicyDecision(
    decision="allow",
    rule="default:safe",
    reason="read-only or declared harmless, and closed-world: allowed by default",
)
_MAX_COUNTED = 65_536  # calls whose process-wide places can still be given back
_MAX_RUNS = 1024  # runs whose derived facts are kept (a run rebuilds them from its log)
_MAX_TEXTS = 32  # runs whose sources' texts stay read (the others read them again if needed)
_STRICTNESS: dict[Decision, int] = {"allow": 0, "needs_approval": 1, "deny": 2}


def _outside(base: bool | None, claim: bool | None, danger: bool) -> bool | None:
    """One hint of an outside tool: the baseline, changed only by a claim of ``danger``.

    Silence (``None``) from outside is no claim: the baseline stands. An unknown baseline
    stays unknown (the worst case).
    """
    if base is None or claim is None:
        return base
    return claim if claim is danger else base


def effective_annotations(
    tool: ToolDefinition, trust: Sequence[tuple[tuple[str, ...], ToolAnnotations]] = ()
) -> ToolAnnotations:
    """The annotations the policy believes: the developer's ``Trust``, else the tool's own.

    A definition from outside (``origin`` set) is believed only where it makes the tool
    look riskier: its claims of safety are ignored.
    """
    base: ToolAnnotations | None = None
    for tools, hints in trust:
        if matches_any(tool.name, tools):
            base = hints
            break
    if tool.origin is None:
        return base if base is not None else tool.annotations
    if base is None:
        return _OUTSIDE  # the worst case already: no outside claim makes it worse
    claimed = tool.annotations
    untrusted = True if base.untrusted_output is None else base.untrusted_output
    return ToolAnnotations(
        read_only=_outside(base.read_only, claimed.read_only, danger=False),
        destructive=_outside(base.destructive, claimed.destructive, danger=True),
        idempotent=_outside(base.idempotent, claimed.idempotent, danger=False),
        open_world=_outside(base.open_world, claimed.open_world, danger=True),
        untrusted_output=_outside(untrusted, claimed.untrusted_output, danger=True),
        sensitive=base.sensitive if base.sensitive is not None else claimed.sensitive,
    )


class _Facts:
    """What a policy derives from one run's log, folded incrementally."""

    __slots__ = ("calls", "counted", "last_hash", "seen", "sources", "tainted", "tool_of")

    def __init__(self) -> None:
        from tether.policy.dataflow import Sources  # first needed by a run's first decision

        self.seen = 0
        self.sources = Sources()  # what the model has read, trusted or not
        self.counted: dict[str, datetime] = {}  # call id -> when it was counted
        self.last_hash = ""
        self.tainted: dict[str, None] = {}  # tools whose untrusted output is in the context
        self.calls: dict[str, list[datetime]] = {}  # tool -> when each allowed call was decided
        self.tool_of: dict[str, str] = {}  # call id -> tool


class RulePolicy(Policy):
    """The policy gate over ``Rules``; ``RulePolicy()`` is tether's safe default.

    The default runs the developer's own tools and tether's read-only, closed-world ones,
    and denies built-in or outside tools that are destructive, open-world or unannotated;
    once untrusted output is in the context, a side effect (or an open-world call) whose
    target came from that output, not from the user or a trusted source, needs approval.
    """

    def __init__(self, rules: Rules | Rule | None = None, *more: Rule) -> None:
        if isinstance(rules, Rule):  # RulePolicy(deny("x"), allow("y"))
            rules, more = None, (rules, *more)
        base = rules or Rules()
        if more:
            base = base + Rules(rules=more)
        self.rules = base
        self._deny = [r for r in base.rules if r.decision == "deny"]
        self._approve = [r for r in base.rules if r.decision == "needs_approval"]
        self._allow = [r for r in base.rules if r.decision == "allow"]
        self._arg_filters = [f for f in base.filters if f.on in ("arguments", "both")]
        self._result_filters = [f for f in base.filters if f.on in ("results", "both")]
        self._trust = [(t.tools, t.annotations) for t in base.trust]
        self._process_limits = any(r.scope == "process" for r in base.rate_limits)
        self._annotations: dict[str, tuple[ToolDefinition, ToolAnnotations, PolicyDecision]] = {}
        self._facts: OrderedDict[str, _Facts] = OrderedDict()
        self._texts: OrderedDict[str, Sources] = OrderedDict()
        self._windows: dict[tuple[int, str], deque[float]] = {}
        # (run, call) -> when it took its places, and in which windows
        self._process_counted: OrderedDict[tuple[str, str], tuple[float, list[tuple[int, str]]]] = (
            OrderedDict()
        )

    @classmethod
    def from_toml(cls, path: str | Path) -> RulePolicy:
        """A policy from a TOML file (see ``tether.policy.config``)."""
        from tether.policy.config import load_rules

        return cls(load_rules(path))

    def __repr__(self) -> str:
        return f"RulePolicy({self.rules!r})"

    # -- what a tool is ----------------------------------------------------------------

    def _untrusted_result(self, event: ToolCallFinished, tool: ToolDefinition | None) -> bool:
        """Whether a result counts as untrusted: the tool's word on it, else its declaration.

        A result may always say it is untrusted. It may say it is trusted only for a tool
        defined in this program (no ``origin``) whose trust the developer's ``Trust`` does
        not state: an outside tool's claim of safety is never believed.
        """
        if tool is None or event.untrusted is True:
            return True
        if event.untrusted is False and tool.origin is None:
            stated = next((h for tools, h in self._trust if matches_any(tool.name, tools)), None)
            if stated is None or stated.untrusted_output is None:
                return False
        return self.annotations(tool).is_untrusted_output

    def annotations(self, tool: ToolDefinition) -> ToolAnnotations:
        """The annotations this policy believes for ``tool``."""
        return self._believed(tool)[1]

    def _believed(
        self, tool: ToolDefinition
    ) -> tuple[ToolDefinition, ToolAnnotations, PolicyDecision]:
        """The tool, its believed annotations and its risk default (cached per definition)."""
        cached = self._annotations.get(tool.name)
        if cached is not None and cached[0] is tool:
            return cached
        believed = effective_annotations(tool, self._trust)
        entry = (tool, believed, self._by_risk(tool, believed))
        self._annotations[tool.name] = entry
        return entry

    # -- deciding ----------------------------------------------------------------------

    def decide(self, call: ToolCall, tool: ToolDefinition, run: PolicyContext) -> PolicyDecision:
        """Decide on one call (the order is in ``tether.policy.rules``)."""
        name = call.name
        if name in CONTROL_TOOLS:
            return _CONTROL
        decision = self._decide(call, tool, run)
        if self._process_limits and decision.decision != "deny":
            self._count_process_call(name, (run.run_id, call.id))  # a waiting call keeps its place
        return decision

    def _decide(  # noqa: C901 - the documented order, one step after the other
        self, call: ToolCall, tool: ToolDefinition, run: PolicyContext
    ) -> PolicyDecision:
        name, arguments = call.name, call.arguments
        rules = self.rules
        text: str | None = None
        cap = rules.sizes.max_argument_bytes
        if cap is not None or self._arg_filters:
            raw = orjson.dumps(arguments)
            if cap is not None and len(raw) > cap:
                return PolicyDecision(
                    decision="deny",
                    rule="max_argument_bytes",
                    reason=f"the arguments are {len(raw)} bytes; the policy allows {cap}",
                )
            if self._arg_filters:
                text = raw.decode()
        for flt in self._arg_filters:
            if text is not None and matches_any(name, flt.tools):
                found = flt.first_match(text)
                if found is not None:
                    return PolicyDecision(
                        decision=flt.decision,
                        rule=flt.label,
                        reason=flt.reason or f"the arguments contain {found}",
                    )
        for rule in self._deny:
            if rule.matches(name, arguments):
                return PolicyDecision(decision="deny", rule=rule.label, reason=rule.reason)
        if rules.rate_limits:
            limited = self._rate_limited(name, run, call.id)
            if limited is not None:
                return limited
        for rule in self._approve:
            if rule.matches(name, arguments):
                return PolicyDecision(
                    decision="needs_approval", rule=rule.label, reason=rule.reason
                )
        _, believed, by_risk = self._believed(tool)
        tainted, traced = self._provenance(call, tool, believed, run)
        decision = self._settle(call, tainted, by_risk)
        if traced and decision.decision == "allow":  # say where what it acts on came from
            decision = replace(decision, reason=f"{decision.reason}; data flow: {traced}")
        return decision

    def _read(self, run_id: str, sources: Sources) -> None:
        """Keep the texts read for the runs traced last; forget those of older runs."""
        texts = self._texts
        texts[run_id] = sources
        texts.move_to_end(run_id)
        if len(texts) > _MAX_TEXTS:
            texts.popitem(last=False)[1].forget()

    def _settle(
        self, call: ToolCall, tainted: PolicyDecision | None, by_risk: PolicyDecision
    ) -> PolicyDecision:
        """Steps 7-9: an allow rule, else the risk default; provenance only tightens them."""
        name, arguments = call.name, call.arguments
        for rule in self._allow:
            if rule.matches(name, arguments):
                if tainted is not None:
                    return tainted
                return PolicyDecision(decision="allow", rule=rule.label, reason=rule.reason)
        if tainted is not None and (_STRICTNESS[by_risk.decision] <= _STRICTNESS[tainted.decision]):
            return tainted  # provenance tightens the risk default, never loosens it
        return by_risk

    def _provenance(
        self, call: ToolCall, tool: ToolDefinition, believed: ToolAnnotations, run: PolicyContext
    ) -> tuple[PolicyDecision | None, str]:
        """The provenance rule's decision on ``call`` if it holds it, and what it traced."""
        provenance = self.rules.provenance
        if not provenance.enabled or matches_any(call.name, provenance.allow):
            return None, ""
        if believed.is_read_only and (provenance.mode == "coarse" or not believed.is_open_world):
            return None, ""
        facts = self.facts(run)
        if not facts.tainted:
            return None, ""
        traced = ""
        if provenance.mode == "dataflow":
            from tether.policy.dataflow import untraced

            why, traced = untraced(
                call.name,
                call.arguments,
                tool.input_schema,
                believed.sensitive,
                facts.sources,
                run.events,
            )
            self._read(run.run_id, facts.sources)
        else:
            why = (
                f"output of {', '.join(facts.tainted)} (untrusted) is in the context and "
                f"{call.name} is not read-only: a human must confirm this call was asked for "
                "by the user, not by that output"
            )
        if why is None:
            return None, traced
        return PolicyDecision(decision=provenance.decision, rule="provenance", reason=why), ""

    def _by_risk(self, tool: ToolDefinition, believed: ToolAnnotations) -> PolicyDecision:
        risk, name = self.rules.risk, tool.name
        if risk.own != "by_risk" and tool.origin is None and not tool.builtin:
            if risk.own == "allow" and believed.is_read_only and not believed.is_open_world:
                return _SAFE  # the same words as for any harmless tool
            return _OWN[risk.own]
        destructive, open_world = believed.is_destructive, believed.is_open_world
        unannotated = (
            believed.read_only is None
            and believed.destructive is None
            and believed.idempotent is None
            and believed.open_world is None
        )
        if (
            not unannotated
            and destructive
            and open_world
            and _STRICTNESS[risk.open_world] > _STRICTNESS[risk.destructive]
        ):
            destructive = False  # both apply: the stricter default decides
        if unannotated:
            return PolicyDecision(
                decision=risk.unannotated,
                rule="default:unannotated",
                reason=(
                    f"{name} declares no annotations, so it counts as destructive and "
                    "open-world. Annotate the tool (e.g. @tool(read_only=True, "
                    f"open_world=False)) or allow it in the policy (allow('{name}'))"
                ),
            )
        if destructive:
            return PolicyDecision(
                decision=risk.destructive,
                rule="default:destructive",
                reason=(
                    f"{name} may change or destroy data (not declared read_only=True or "
                    f"destructive=False); allow it in the policy (allow('{name}')) or "
                    "require approval for it"
                ),
            )
        if open_world:
            return PolicyDecision(
                decision=risk.open_world,
                rule="default:open_world",
                reason=(
                    f"{name} reaches systems outside the agent's control (not declared "
                    f"open_world=False); allow it in the policy (allow('{name}'))"
                ),
            )
        return _SAFE

    # -- rate limits -------------------------------------------------------------------

    def _rate_limited(self, name: str, run: PolicyContext, call_id: str) -> PolicyDecision | None:
        """The first rate limit ``call_id`` would exceed.

        Its own earlier place is not counted: edited arguments after an approval are the same
        call asked again.
        """
        facts: _Facts | None = None
        for index, limit in enumerate(self.rules.rate_limits):
            if not matches_any(name, limit.tools):
                continue
            if limit.scope == "process":
                used = self._process_calls(index, limit, name)
                if (run.run_id, call_id) in self._process_counted:
                    used -= 1
            else:
                facts = facts or self.facts(run)
                used = _run_calls(facts, limit, name, run.events)
                if call_id in facts.counted:
                    used -= 1
            if used >= limit.max_calls:
                window = f" per {limit.per_seconds:g}s" if limit.per_seconds is not None else ""
                whose = "this run" if limit.scope == "run" else "this process"
                what = name if limit.each_tool else f"tools matching {', '.join(limit.tools)}"
                return PolicyDecision(
                    decision="deny",
                    rule="rate_limit",
                    reason=(
                        f"rate limit: {what} may be called {limit.max_calls} times{window} in "
                        f"{whose}, and that is used up"
                    ),
                )
        return None

    def _process_calls(self, index: int, limit: RateLimit, name: str) -> int:
        key = (index, name if limit.each_tool else "")
        window = self._windows.get(key)
        if window is None:
            return 0
        if limit.per_seconds is not None:
            horizon = time.monotonic() - limit.per_seconds
            while window and window[0] < horizon:
                window.popleft()
        return len(window)

    def _count_process_call(self, name: str, call: tuple[str, str]) -> None:
        if call in self._process_counted:
            return  # counted once per call, also when edited arguments are decided again
        now = time.monotonic()
        keys: list[tuple[int, str]] = []
        for index, limit in enumerate(self.rules.rate_limits):
            if limit.scope == "process" and matches_any(name, limit.tools):
                key = (index, name if limit.each_tool else "")
                self._windows.setdefault(key, deque()).append(now)
                keys.append(key)
        self._process_counted[call] = (now, keys)
        if len(self._process_counted) > _MAX_COUNTED:
            self._process_counted.popitem(last=False)  # long decided: no longer releasable

    def _release_process_call(self, call: tuple[str, str]) -> None:
        """Give back the place of a call that did not run (a human or a recheck denied it)."""
        counted = self._process_counted.pop(call, None)
        if counted is None:
            return
        at, keys = counted
        for key in keys:
            window = self._windows.get(key)
            if window is not None and at in window:
                window.remove(at)

    # -- results -----------------------------------------------------------------------

    def check_result(
        self, call: ToolCall, tool: ToolDefinition, result: ToolResult, run: PolicyContext
    ) -> ToolResult | None:
        """Apply result filters and the result size cap."""
        name = call.name
        changed: ToolResult | None = None
        for flt in self._result_filters:
            if matches_any(name, flt.tools):
                current = result if changed is None else changed
                updated = filter_result(flt, current)
                if updated is not None:
                    changed = updated
                    if updated.is_error:
                        return updated
        sizes = self.rules.sizes
        cap = sizes.max_result_bytes
        if cap is not None:
            current = result if changed is None else changed
            size = result_size(current, cap)
            if size > cap:
                if sizes.large_results == "error":
                    return ToolResult.error(
                        f"the result of {name} was {size} bytes; the policy allows {cap}. "
                        "Ask for less (a narrower query, a range, a smaller page)"
                    )
                return truncate(current, cap, size)
        return changed

    def concurrency(self, tool: str) -> int | None:
        """The lowest cap of the ``Concurrency`` rules matching ``tool``."""
        caps = [c.max for c in self.rules.concurrency if matches_any(tool, c.tools)]
        return min(caps) if caps else None

    def observe(self, run: PolicyContext) -> None:
        """Fold the run's new events now (a human's denial gives back its call's places)."""
        self.facts(run)

    # -- facts folded from the log -------------------------------------------------------

    def facts(self, run: PolicyContext) -> _Facts:
        """The facts of ``run``'s log, brought up to date."""
        events = run.events
        cache = self._facts
        facts = cache.get(run.run_id)
        if facts is not None:
            seen = facts.seen
            if seen > len(events) or (seen and events[seen - 1].hash != facts.last_hash):
                facts = None  # another log under the same id: start over
            else:
                cache.move_to_end(run.run_id)
        if facts is None:
            facts = _Facts()
            cache[run.run_id] = facts
            if len(cache) > _MAX_RUNS:
                cache.popitem(last=False)
        if facts.seen < len(events):
            self._fold(facts, events, run)
        return facts

    def _release(self, facts: _Facts, run_id: str, call_id: str) -> None:
        _unused(facts, call_id)
        if self._process_limits:
            self._release_process_call((run_id, call_id))

    def _fold(self, facts: _Facts, events: Sequence[Event], run: PolicyContext) -> None:
        if facts.seen == 0:
            from tether.policy.dataflow import described

            tools = run.tools
            facts.sources.add(lambda: described(tools), -1, "the tools' descriptions", trusted=True)
        for index in range(facts.seen, len(events)):
            event = events[index]
            match event:
                case ToolCallRequested():
                    facts.tool_of[event.call_id] = event.tool
                case PolicyDecided() if (
                    event.decision != "deny"
                    and event.tool not in CONTROL_TOOLS
                    and event.call_id not in facts.counted
                ):
                    # a call waiting for approval keeps its place: it runs if approved
                    facts.counted[event.call_id] = event.at
                    facts.calls.setdefault(event.tool, []).append(event.at)
                case ApprovalGiven() if not event.approved:
                    self._release(facts, run.run_id, event.call_id)  # denied: it never ran
                case PolicyDecided() if event.decision == "deny":
                    self._release(facts, run.run_id, event.call_id)  # e.g. edited, then denied
                case _:
                    self._source(facts, event, index, run)
        facts.seen = len(events)
        facts.last_hash = events[-1].hash

    def _source(self, facts: _Facts, event: Event, index: int, run: PolicyContext) -> None:
        """Record what the model read from ``event``, and whether that is trusted."""
        match event:
            case ApprovalGiven() if event.arguments is not None:
                facts.sources.add(
                    index, event.seq, "arguments a human gave", trusted=True, user=True
                )
            case ToolCallFinished() if not event.synthetic:
                untrusted = self._untrusted_result(event, run.tools.get(event.tool))
                if untrusted:
                    facts.tainted[event.tool] = None
                facts.sources.add(index, event.seq, event.tool, trusted=not untrusted)
            case RunStarted():
                facts.sources.add(index, event.seq, "the goal and instructions", trusted=True)
                goal = event.goal
                facts.sources.add(lambda: goal, event.seq, "the goal", trusted=True, user=True)
            case UserReplied():
                facts.sources.add(index, event.seq, "the user's reply", trusted=True, user=True)
            case MemoryRecalled() if event.texts:
                # earlier runs wrote it, and they may have read anything: never trusted
                facts.tainted["recalled memory"] = None
                facts.sources.add(index, event.seq, "recalled memory", trusted=False)
            case SessionContinued() if event.run_ids:
                # the user's earlier words are the user's; the earlier answers are models'
                # words, and those runs may have read anything: never trusted
                goals, answers = "\n".join(event.goals), "\n".join(event.answers)
                facts.sources.add(
                    lambda: goals, event.seq, "the user's earlier turns", trusted=True, user=True
                )
                facts.tainted["earlier answers in the session"] = None
                facts.sources.add(
                    lambda: answers, event.seq, "earlier answers in the session", trusted=False
                )
            case _:
                pass


_OWN: dict[Decision, PolicyDecision] = {
    decision: PolicyDecision(
        decision=decision,
        rule="default:own",
        reason=(
            "the developer's own tool (defined in this program): "
            f"{'allowed' if decision == 'allow' else decision} by default"
        ),
    )
    for decision in ("allow", "needs_approval", "deny")
}


def _unused(facts: _Facts, call_id: str) -> None:
    """Remove a counted call's place from the run's count."""
    at = facts.counted.pop(call_id, None)
    tool = facts.tool_of.get(call_id)
    if at is not None and tool is not None and at in facts.calls.get(tool, ()):
        facts.calls[tool].remove(at)


def _run_calls(facts: _Facts, limit: RateLimit, name: str, events: Sequence[Event]) -> int:
    tools = [name] if limit.each_tool else [t for t in facts.calls if matches_any(t, limit.tools)]
    if limit.per_seconds is None:
        return sum(len(facts.calls.get(t, ())) for t in tools)
    if not events:
        return 0
    horizon = events[-1].at - timedelta(seconds=limit.per_seconds)
    return sum(1 for t in tools for at in facts.calls.get(t, ()) if at > horizon)
