"""Replay a recorded run: the same agent, the recorded model responses and tool results.

The replayed run must produce the same event sequence as the recording, apart from what
differs by nature between two runs (run id, times, hashes, latencies). The first event that
differs is reported as the divergence.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from datetime import datetime
from pathlib import Path
from typing import Any, cast

from tether._internal.configfiles import import_ref
from tether._internal.frozen import frozen
from tether.agent import Agent
from tether.codec import event_to_dict, verify_chain
from tether.content import JsonObject, JsonValue, ToolResult
from tether.errors import ConfigError, StoreError, TetherError, UserError
from tether.events import (
    BudgetWarning,
    ContextCompacted,
    Event,
    KnowledgeRetrieved,
    MemoryRecalled,
    PlanMade,
    RunResumed,
    RunStarted,
    SessionContinued,
    ToolCallFinished,
)
from tether.knowledgeevents import Passage
from tether.memory.base import (
    Memory,
    MemoryHit,
    MemoryQuery,
    MemoryRecord,
    MemorySearch,
    SearchMode,
)
from tether.memory.config import MEMORY_TOOLS, REMEMBER, Remember
from tether.messages import ToolCall
from tether.models.replay import ReplayModel
from tether.run.consulting import FAILED
from tether.run.sessions import namespace_of
from tether.run.toolexec import run_tool
from tether.stores.memory import MemoryStore
from tether.thinking import Plan, PlanCache, Thinking
from tether.tools.base import Tool, ToolContext

__all__ = [
    "VOLATILE_FIELDS",
    "ReplayReport",
    "first_divergence",
    "load_agent",
    "replay",
    "trusted_ref",
]

VOLATILE_FIELDS = frozenset(
    {"run_id", "at", "prev_hash", "hash", "latency_s", "duration_s", "request_digest", "retry_in_s"}
)
"""Fields that differ between any two runs and are not compared."""


@frozen
class ReplayReport:
    """What a replay found."""

    recorded: tuple[Event, ...]
    """The recording."""
    replayed: tuple[Event, ...]
    """The replayed run's events."""
    divergence: str | None
    """The first difference, in words; ``None`` when the runs match."""
    index: int | None
    """The position of the first differing event."""

    @property
    def ok(self) -> bool:
        """Whether the replay reproduced the recording."""
        return self.divergence is None


def trusted_ref(ref: str) -> bool:
    """Whether a log may name the agent ``ref`` for tether to load it without being told to.

    A log is data: whoever can write one (or hand one to ``tether import``) can name any
    module, function or file, and importing a module runs its code. So of what a log names
    only tether's own examples (``tether.examples``, not any of tether's callables) and
    installed packs (``pack:PACK/AGENT``, installed by the user) are loaded; any other agent
    is one the user names themselves (``--agent``).
    """
    if ref.startswith("pack:"):
        return True
    module, colon, _ = ref.partition(":")
    return bool(colon) and module.startswith("tether.examples.") and not ref.endswith(".toml")


def load_agent(ref: str, *, recorded: bool = False) -> Agent[Any]:
    """Import an agent from ``module:attribute``, read a TOML file's, or ask a pack for one.

    A callable attribute is called; a ``.toml`` path is read by ``tether.agentfile``;
    ``pack:PACK/AGENT`` is made by an installed pack (``tether packs``). ``recorded``: the
    ref comes from a log, so it is refused, before anything is imported, called or read,
    unless ``trusted_ref`` trusts it.
    """
    if recorded and not trusted_ref(ref):
        raise _untrusted(ref)
    if ref.startswith("pack:"):
        from tether.packs import agent_from_pack

        return agent_from_pack(ref.removeprefix("pack:"))
    if ref.endswith(".toml"):
        from tether.agentfile import load_agent_file

        return load_agent_file(ref)
    value = import_ref(ref, "agent", beside=Path.cwd())
    if not isinstance(value, Agent) and callable(value):
        try:
            value = value()
        except TetherError:
            raise
        except (Exception, SystemExit) as exc:  # the user's factory: say whose failure it is
            raise ConfigError(
                f"calling {ref!r} to make the agent failed: {type(exc).__name__}: {exc}"
            ) from exc
    if not isinstance(value, Agent):
        raise ConfigError(f"{ref!r} is a {type(value).__name__}, not an Agent")
    return cast(Agent[Any], value)


def _untrusted(ref: str) -> ConfigError:
    return ConfigError(
        f"the log names the agent {ref!r}, which would have to be imported (or read) to make "
        "it; a log's words are not run as code (whoever can write a log can name any module "
        "or function), so of what a log names only tether's examples and installed packs are "
        f"loaded: if {ref!r} is your agent, pass it yourself: `--agent {ref}` (in Python, "
        "the Agent itself)"
    )


def _normalized(event: Event, volatile: set[str]) -> dict[str, JsonValue]:
    return {
        k: v
        for k, v in event_to_dict(event).items()
        if k not in VOLATILE_FIELDS and k not in volatile
    }


def _by_nature(event: Event) -> bool:
    """Whether ``event`` differs between two runs by nature (left out of the comparison)."""
    return event.kind == "redacted" or (
        isinstance(event, BudgetWarning)
        and (event.limit == "max_seconds" or event.limit.endswith(".max_seconds"))
    )


def first_divergence(
    recorded: Sequence[Event], replayed: Sequence[Event]
) -> tuple[int, str] | None:
    """The first event where two runs differ (volatile fields aside), described.

    ``redacted`` events are left out of the comparison: a replay runs on the recorded,
    already redacted data, so it finds nothing to redact (and its ``seq`` shifts by them).
    So are warnings about the run's time (``budget_warning`` of ``max_seconds``, and of a
    phase's ``max_seconds``): a replay takes its own time.
    """
    if any(_by_nature(e) for e in (*recorded, *replayed)):
        recorded = [e for e in recorded if not _by_nature(e)]
        replayed = [e for e in replayed if not _by_nature(e)]
        volatile = {"seq"}
    else:
        volatile = set[str]()
    for index, (want, got) in enumerate(zip(recorded, replayed, strict=False)):
        a, b = _normalized(want, volatile), _normalized(got, volatile)
        if a != b:
            if want.kind != got.kind:
                return index, f"event {index}: recorded {want.kind!r}, replayed {got.kind!r}"
            field = next(k for k in (*a, *b) if a.get(k) != b.get(k))
            return index, (
                f"event {index} ({want.kind}): {field} was {a.get(field)!r} in the recording, "
                f"{b.get(field)!r} in the replay"
            )
    if len(recorded) != len(replayed):
        index = min(len(recorded), len(replayed))
        return index, f"the recording has {len(recorded)} events, the replay {len(replayed)}"
    return None


class _RecordedTools:
    """Serves recorded tool results instead of running tools.

    The memory tools (``Remember(tools=True)``) run for real, on the recorded memory: what
    they recall is the recording's, and what they record (``memory_*``) is made again.
    """

    def __init__(self, events: Sequence[Event], live: frozenset[str] = frozenset()) -> None:
        self._live = live
        self._results = {
            e.call_id: e for e in events if isinstance(e, ToolCallFinished) and not e.synthetic
        }
        self.divergence: str | None = None
        """Set when the replay ran a call the recording never ran."""

    async def __call__(
        self,
        tool: Tool,
        call: ToolCall,
        ctx: ToolContext,
        arguments: Mapping[str, Any],
        timeout: float | None,
    ) -> tuple[ToolResult, str | None]:
        recorded = self._results.get(call.id)
        live = call.name in self._live and recorded is not None and recorded.tool == call.name
        if live and not (recorded is not None and recorded.is_error and call.name == REMEMBER):
            return await run_tool(tool, call, ctx, arguments, timeout)
        if recorded is None or recorded.tool != call.name:
            message = f"the replay ran {call.name!r} (call {call.id!r}); the recording did not"
            self.divergence = self.divergence or message
            return ToolResult.error(f"replay divergence: {message}"), "replay_divergence"
        result = ToolResult(
            content=recorded.content,
            structured=recorded.structured,
            is_error=recorded.is_error,
            untrusted=recorded.untrusted,
        )
        return result, recorded.error_type


async def _recorded_session(
    events: Sequence[Event], store: MemoryStore, namespace: str
) -> str | None:
    """The session the recording continued, its earlier turns put in ``store`` as they were.

    A recording that left its oldest turns out gets one more, older turn too large to keep,
    so that the replay leaves it out the same way.
    """
    continued = next((e for e in events if isinstance(e, SessionContinued)), None)
    if continued is None:
        return None
    turns = list(zip(continued.run_ids, continued.goals, continued.answers, strict=False))
    if not continued.complete:
        turns.insert(0, ("left-out", "", "x" * 10**7))
    for age, (run_id, goal, answer) in enumerate(reversed(turns)):  # newest first
        key = f"{continued.session}/{age:017d}:{run_id}"
        await store.kv_set(namespace, key, {"run_id": run_id, "goal": goal, "answer": answer})
    return continued.session


class _RecordedPlans(PlanCache):
    """The recording's plan-cache hits, served in order; nothing is written.

    A replay takes the plans the run took, whatever a cache holds today.
    """

    def __init__(self, events: Sequence[Event]) -> None:
        super().__init__(MemoryStore())
        self._hits = [
            (Plan.of(e), e.cached_from or "")
            for e in events
            if isinstance(e, PlanMade) and e.cache == "hit"
        ]

    async def get(self, key: str, tools: str) -> tuple[Plan, str] | None:
        return self._hits.pop(0) if self._hits else None

    async def put(self, key: str, tools: str, plan: Plan, run_id: str) -> None:
        return None

    async def forget(self, key: str) -> None:
        return None


_SEARCH_FAILED = ("memory search failed, the run goes on without it: ", "memory search failed: ")


def _failed_search(recalled: MemoryRecalled) -> str | None:
    """Why the recorded search failed (``None``: it did not)."""
    warning = recalled.warning
    if recalled.records or warning is None:
        return None
    return next((warning[len(p) :] for p in _SEARCH_FAILED if warning.startswith(p)), None)


def _lesson(note: str) -> JsonObject:
    """The metadata of a recalled record whose reflexion lesson is ``note`` ("": none)."""
    tool, _, text = note.partition("\0")
    return {"reflection": True, "tool": tool, "note": text} if text else {}


class _RecordedMemory(Memory):
    """The recording's recalls, served in order; nothing is written.

    A replay reads what the run recalled, whatever the memory holds today.
    """

    def __init__(self, events: Sequence[Event]) -> None:
        self._recalls = [e for e in events if isinstance(e, MemoryRecalled)]

    async def search(self, query: MemoryQuery) -> MemorySearch:
        if not self._recalls:
            return MemorySearch(hits=(), mode=query.mode)
        recalled = self._recalls.pop(0)
        cause = _failed_search(recalled)
        if cause is not None:  # the search failed: it fails again, with the same words
            raise StoreError(cause)
        notes = recalled.notes or ("",) * len(recalled.texts)
        hits = tuple(
            MemoryHit(
                record=MemoryRecord(
                    namespace=recalled.namespace, text=text, id=i, metadata=_lesson(note)
                ),
                score=0,
            )
            for i, text, note in zip(recalled.records, recalled.texts, notes, strict=False)
        )
        mode = cast(SearchMode, recalled.mode)
        return MemorySearch(hits=hits, mode=mode, warning=recalled.warning)

    async def upsert(self, records: Sequence[MemoryRecord]) -> list[str]:
        return [r.id for r in records]

    async def get(self, namespace: str, ids: Sequence[str]) -> list[MemoryRecord]:
        return []

    async def delete(self, namespace: str, ids: Sequence[str]) -> int:
        return 0

    async def namespaces(self) -> list[str]:
        return []

    async def forget(self, *, now: datetime | None = None) -> int:
        return 0


class _RecordedKnowledge:
    """The recording's knowledge searches, served in order (a replay never reads the base).

    A search that failed fails again with the same words.
    """

    def __init__(self, events: Sequence[Event]) -> None:
        self._searches: list[list[Passage] | str] = []
        for event in events:
            if not isinstance(event, KnowledgeRetrieved):
                continue
            found = {p.id: p for p in event.passages}
            for round_ in event.rounds:
                self._searches.append([found[v.passage] for v in round_.verdicts])
            warning = event.warning
            if warning is not None and warning.startswith(FAILED):
                self._searches.append(warning[len(FAILED) :])

    async def search(self, query: str, *, limit: int = 5) -> list[Passage]:
        if not self._searches:
            return []
        found = self._searches.pop(0)
        if isinstance(found, str):
            raise StoreError(found)
        return found


async def replay(events: Sequence[Event], *, agent: Agent[Any] | None = None) -> ReplayReport:
    """Re-run a recorded run and compare the new log with the recording.

    Args:
        events: The recorded run (its chain is verified first).
        agent: The agent to replay; by default the one named by the recording's ``agent_ref``,
            if ``trusted_ref`` trusts it.

    Raises:
        BrokenChain: the recording was tampered with.
        ConfigError: no agent was given and the recording does not say how to import it,
            or names one that is not trusted.
    """
    verify_chain(events)
    if not events or not isinstance(events[0], RunStarted):
        raise ConfigError("a recording must start with a run_started event")
    started = events[0]
    resumed = next((e for e in events if isinstance(e, RunResumed)), None)
    if resumed is not None:  # what a resume did (repairs, answers) is not re-run: say so
        raise UserError(
            f"the run was resumed (at seq {resumed.seq}, after {resumed.reason}): replay "
            "re-runs a run that went from its start to its end in one go, and cannot re-run a "
            "resumed one yet. `tether audit` and `tether show` read its log"
        )
    if agent is None:
        if started.agent_ref is None:
            raise ConfigError(
                "the recording does not say which agent ran it (no agent_ref): pass the agent, "
                "or `--agent package.module:attribute` on the command line"
            )
        agent = load_agent(started.agent_ref, recorded=True)
    if agent.limits != started.limits:  # the recorded run's limits (e.g. `run --max-steps`)
        agent = dataclasses.replace(agent, limits=started.limits)
    if agent.compaction is not None and not any(isinstance(e, ContextCompacted) for e in events):
        # a recording that never compacted (or was made before compaction): neither does
        # its replay, where it refused a request as too large
        agent = dataclasses.replace(agent, compaction=None)
    thinking = agent.thinking
    if isinstance(thinking, Thinking) and thinking.plan_cache is not None:
        recorded = dataclasses.replace(thinking, plan_cache=_RecordedPlans(events))
        agent = dataclasses.replace(agent, thinking=recorded)
    if agent.memory is not None:
        remember = agent.memory if isinstance(agent.memory, Remember) else None
        recorded_memory = _RecordedMemory(events)
        agent = dataclasses.replace(
            agent,
            memory=Remember(memory=recorded_memory)
            if remember is None
            else dataclasses.replace(remember, memory=recorded_memory),
        )
    knowledge = agent.spec.knowledge
    if knowledge is not None:
        recorded_knowledge = _RecordedKnowledge(events)
        agent = dataclasses.replace(
            agent, knowledge=dataclasses.replace(knowledge, base=recorded_knowledge)
        )
    remembering = agent.memory if isinstance(agent.memory, Remember) else None
    live = frozenset(MEMORY_TOOLS if remembering is not None and remembering.tools else ())
    tools = _RecordedTools(events, live)
    store = MemoryStore()  # the replay's own: nothing of it reaches the agent's store
    session = await _recorded_session(events, store, namespace_of(agent.name))
    run = agent.stream(
        started.goal,
        context=started.context,
        model=ReplayModel(events),
        tags=started.tags,
        parent_run_id=started.parent_run_id,
        agent_ref=started.agent_ref,
        tool_runner=tools,
        store=store,
        session=session,
    )
    await run.consume()
    replayed = run.outcome.events
    found = first_divergence(events, replayed)
    if tools.divergence is not None and found is not None:
        found = (found[0], f"{found[1]} ({tools.divergence})")
    return ReplayReport(
        recorded=tuple(events),
        replayed=replayed,
        divergence=None if found is None else found[1],
        index=None if found is None else found[0],
    )
