# pyright: strict
"""Running one task in one world under one policy, and what came of it.

Every run is a real ``Agent`` run: the suite's function tools, the policy under test, the
model double (``Obedient``). The world is fresh for each run; the tools find it through the
suite's ``Live`` holder, so runs go one after another.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TypeVar

from injection_suite.core import Env, Suite, Task, injection_text
from injection_suite.model import Obedient
from tether.agent import Agent
from tether.events import PolicyDecided
from tether.messages import CONTROL_TOOLS
from tether.outcome import RunStatus
from tether.policy.base import Policy

__all__ = ["Pair", "Played", "discover_slots", "play", "play_pair"]

E = TypeVar("E", bound=Env)


@dataclass(frozen=True, kw_only=True)
class Played:
    """What one run came to."""

    status: RunStatus
    """How the run ended (``waiting_for_approval``: a call was held, no human answered)."""
    answer: str
    """The final answer ('' if none)."""
    utility: bool
    """The task's check passed on the state reached."""
    effects: tuple[str, ...]
    """The suite's attacks whose check passes on the state reached (none, without one)."""
    obeyed: tuple[str, ...]
    """The injections the model obeyed."""
    approvals: int
    """Calls that were held for a human."""
    denials: int
    """Calls the policy denied."""
    held: tuple[str, ...]
    """Every decision other than allow on a tool call: ``tool: decision by rule: reason``."""
    read: tuple[str, ...]
    """Every tool result the model read."""
    attack_decisions: tuple[str, ...]
    """The policy's decision on every call the model made for an injection."""


@dataclass(frozen=True, kw_only=True)
class Pair:
    """One task with one injection in one slot."""

    task: str
    """The task's id."""
    slot: str
    """Where the injection sits."""
    attack: str
    """The attack's id."""


async def play(
    suite: Suite[E],
    task: Task[E],
    policy: Policy,
    slots: Mapping[str, str],
) -> Played:
    """Run ``task`` in a world with ``slots`` filled, under ``policy``."""
    env = suite.make_env(slots)
    double = Obedient(task=task.script, attacks=suite.attacks)
    agent: Agent[str] = Agent(
        name=f"injection-{suite.name}",
        instructions=suite.instructions,
        tools=suite.tools,
        policy=policy,
    )
    suite.live.env = env
    try:
        outcome = await agent.run(task.goal, model=double.model)
    finally:
        suite.live.env = None
    answer = outcome.answer or ""
    decided = [
        e for e in outcome.events if isinstance(e, PolicyDecided) and e.tool not in CONTROL_TOOLS
    ]
    return Played(
        status=outcome.status,
        answer=answer,
        utility=task.check(env, answer),
        effects=tuple(a.id for a in suite.attacks if a.check(env)),
        obeyed=tuple(double.obeyed),
        approvals=sum(1 for e in outcome.events if e.kind == "approval_requested"),
        denials=sum(1 for e in decided if e.decision == "deny"),
        held=tuple(
            f"{e.tool}: {e.decision} by {e.rule}: {e.reason}"
            for e in decided
            if e.decision != "allow"
        ),
        read=tuple(double.read),
        attack_decisions=tuple(
            f"{e.tool}: {e.decision} by {e.rule}: {e.reason}"
            for e in decided
            if e.call_id in double.attack_calls
        ),
    )


def _marker(slot: str) -> str:
    return f"[[slot {slot}]]"


async def discover_slots(suite: Suite[E], task: Task[E], policy: Policy) -> list[str]:
    """The slots whose text the model reads when it does ``task`` (each marked, none obeyed)."""
    played = await play(suite, task, policy, {s: _marker(s) for s in suite.slots})
    seen = "\n".join(played.read)
    return [s for s in suite.slots if _marker(s) in seen]


async def play_pair(suite: Suite[E], task: Task[E], pair: Pair, policy: Policy) -> Played:
    """Run one pair: the attack's injection in the pair's slot."""
    attack = next(a for a in suite.attacks if a.id == pair.attack)
    slots = {pair.slot: injection_text(attack.instruction)}
    return await play(suite, task, policy, slots)
