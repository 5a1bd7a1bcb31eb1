"""A run's state is a fold over its events; it is derived, never stored beside the log.

``fold(events)`` gives a frozen ``RunState``. ``StateBuilder`` is the same fold done one
event at a time, which is how the loop keeps its view current without re-reading the log.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime

import orjson

from tether._internal.frozen import frozen
from tether.content import TextBlock
from tether.eventdispatch import EventHandler
from tether.events import (
    GENESIS_HASH,
    ApprovalGiven,
    ApprovalRequested,
    BudgetWarning,
    ContextCompacted,
    Event,
    KnowledgeRetrieved,
    LimitReached,
    MemoryRecalled,
    MemoryWritten,
    ModelFailed,
    ModelResponded,
    PlanMade,
    PlanRevised,
    PolicyDecided,
    Redacted,
    Reflected,
    RetryPrompted,
    Routed,
    RunFinished,
    RunResumed,
    RunStarted,
    SessionContinued,
    ToolCallFinished,
    ToolCallRequested,
    ToolCallUnknown,
    UserReplied,
)
from tether.jsontypes import JsonObject
from tether.limits import Limits
from tether.memory.config import lesson_view, recalled_view
from tether.messages import (
    CONTROL_TOOLS,
    SEARCH_KNOWLEDGE,
    AssistantMessage,
    Message,
    ToolCall,
    ToolResultMessage,
    UserMessage,
)
from tether.phases import phase_of
from tether.thinking.base import plan_text
from tether.usage import Usage

__all__ = [
    "CORRECTABLE_ERRORS",
    "MAY_PASS_LATER",
    "RunState",
    "StateBuilder",
    "failure_key",
    "fold",
    "goal_text",
    "limit_prompt",
]

CORRECTABLE_ERRORS = frozenset(
    {"invalid_arguments", "invalid_output", "unknown_tool", "model_retry", "repeated_failure"}
)
"""``ToolCallFinished.error_type`` values that count against ``max_retries``."""


MAY_PASS_LATER = frozenset({"rate_limit"})
"""Policy rules whose denial of a call may not hold the next time it is asked for (the
repeated-denial count leaves them out)."""


def failure_key(tool: str, arguments: JsonObject) -> str:
    """What identifies a call for counting its failures: its tool and exact arguments."""
    return f"{tool}\0{orjson.dumps(arguments, option=orjson.OPT_SORT_KEYS).decode()}"


def limit_prompt(limit: str) -> str:
    """What the model is told when a limit stops the run and a best-effort answer is wanted."""
    return (
        f"The run has reached its limit ({limit}) and no more tools can be called. "
        "Reply now, in plain text and without calling any tool, with the best answer you "
        "can give from what you have found so far, and say what is missing."
    )


@frozen
class RunState:
    """The state of a run after some prefix of its log."""

    run_id: str
    """The run's id."""
    goal: str
    """The task."""
    agent: str
    """The agent's name."""
    limits: Limits
    """The run's limits."""
    started_at: datetime | None
    """When it started."""
    messages: tuple[Message, ...]
    """The conversation the model sees next (instructions travel separately)."""
    pending_calls: tuple[ToolCall, ...]
    """Calls of the last model turn that have no result yet."""
    usage: Usage
    """Tokens and cost so far."""
    steps: int
    """Model turns taken."""
    tool_calls: int
    """Tool calls allowed to execute so far."""
    retries: int
    """Consecutive correctable failures (invalid arguments, invalid output, ...)."""
    model_failures: int
    """Consecutive failed model requests."""
    last_text: str
    """The model's latest non-empty text."""
    finished: RunFinished | None
    """The final event, once the run ended."""
    last_seq: int
    """The ``seq`` of the last event (-1 for an empty log)."""
    last_hash: str
    """The ``hash`` of the last event (``GENESIS_HASH`` for an empty log)."""


def goal_text(goal: str, context: JsonObject | None) -> str:
    """The first message a model reads: the goal, then the context given with it (as JSON)."""
    if context is None:
        return goal
    block = orjson.dumps(context, option=orjson.OPT_INDENT_2 | orjson.OPT_SORT_KEYS).decode()
    return f"{goal}\n\nContext given with the task:\n<context>\n{block}\n</context>"


_NO_LIMITS = Limits()  # frozen: one shared default until run_started sets the real ones


def _strings() -> set[str]:
    """An empty set of strings (``set[str]()`` costs eight times as much: a state per run)."""
    return set()


@dataclass(kw_only=True, slots=True, eq=False)
class StateBuilder(EventHandler[None]):
    """The fold of a run's events, one event at a time (``apply``)."""

    run_id: str = ""
    goal: str = ""
    agent: str = ""
    model: str = ""
    limits: Limits = _NO_LIMITS
    started_at: datetime | None = None
    messages: list[Message] = field(default_factory=lambda: [])
    pending: dict[str, ToolCall] = field(default_factory=lambda: {})
    call_ids: set[str] = field(default_factory=_strings)
    input_tokens: int = 0
    output_tokens: int = 0
    requests: int = 0
    cost: float | None = 0.0
    steps: int = 0
    tool_calls: int = 0
    retries: int = 0
    tool_retries: dict[str, int] = field(default_factory=lambda: {})
    """Correctable failures in a row, by tool (a tool's success resets its own count)."""
    model_failures: int = 0
    last_text: str = ""
    cut_off: bool = False
    """Whether the last turn's answer stopped at the model's output limit."""
    finished: RunFinished | None = None
    limit_reached: LimitReached | None = None
    last: Event | None = None
    default_denied: set[str] = field(default_factory=_strings)
    """Tools the policy's defaults denied (the outcome warns about them)."""
    denied: dict[str, int] = field(default_factory=lambda: {})
    """How often each exact call (``failure_key``) was denied."""
    plan: PlanMade | PlanRevised | None = None
    """The plan in force (``tether.thinking``)."""
    plan_view: str = ""
    """The plan as the acting model reads it after its instructions ("" without one)."""
    session: SessionContinued | None = None
    """The conversation the run continues (``None``: it is in no session)."""
    earlier: int = 0
    """How many messages, from the first, are the session's earlier turns."""
    compacted: int = 0
    """How many model turns compaction condensed out of ``messages``."""
    recalled: MemoryRecalled | None = None
    """What long-term memory gave the run at its start (``None``: not searched)."""
    memory_view: str = ""
    """The recalled records as the model reads them after its instructions."""
    recalled_ids: set[str] = field(default_factory=_strings)
    """The records the run was given by memory (none is given twice)."""
    searched_after: set[str] = field(default_factory=_strings)
    """The failed calls memory was searched for (``Remember(recall_on_failure=True)``)."""
    tool_notes: dict[str, str] = field(default_factory=lambda: {})
    """Recalled lessons about tools (reflexion), by tool, shown with the goal."""
    citable: dict[str, str] = field(default_factory=lambda: {})
    """The passages the run's knowledge searches graded relevant, by citation label (``K1``)."""
    questions: set[str] = field(default_factory=_strings)
    """The questions ``search_knowledge`` searched for, case folded (one
    ``knowledge_retrieved`` each: the same question is not searched twice)."""
    written: set[str] = field(default_factory=_strings)
    """The ids of the memory records the run has written (``memory_written``)."""
    asked: set[str] = field(default_factory=_strings)
    """The thinking purposes the model was asked for at least once (``plan``, ``route``)."""
    replans: int = 0
    """Plan revisions so far."""
    reflections: int = 0
    """Answers checked so far."""
    reflection: Reflected | None = None
    """The last check of an answer."""
    failed: list[Reflected] = field(default_factory=lambda: [])
    """The reflections on failed tool calls (``Remember(reflexion=True)``), in order."""
    failures: dict[str, int] = field(default_factory=lambda: {})
    """How often each exact call failed (``failure_key``)."""
    worked: dict[str, JsonObject] = field(default_factory=lambda: {})
    """For a failed call (by id): the arguments of its tool's next call that succeeded."""
    routed: Routed | None = None
    """The router's decision."""
    phase_steps: dict[str, int] = field(default_factory=lambda: {})
    """Model requests made per phase, answered or failed (``Limits``' phase limits)."""
    phase_seconds: dict[str, float] = field(default_factory=lambda: {})
    """Seconds of model requests per phase."""
    skipped_for: set[str] = field(default_factory=_strings)
    """The limits a ``budget_warning`` said skip thinking requests from then on: a phase's
    (``"plan.max_steps"``) and ``context_window``."""

    @property
    def usage(self) -> Usage:
        """Tokens and cost so far (``requests`` counts recorded model responses)."""
        return Usage(
            input_tokens=self.input_tokens,
            output_tokens=self.output_tokens,
            requests=self.requests,
            cost=self.cost,
        )

    def refold(self, events: Sequence[Event]) -> None:
        """Fold ``events`` again from the start, in place (after the log was rolled back)."""
        self.__init__()  # every field back to its default: the same object, an empty fold
        for event in events:
            self.apply(event)

    def apply(self, event: Event) -> None:
        """Fold one event into the state."""
        self.last = event
        if self.finished is not None and event.kind != "run_finished":
            self.finished = None  # a waiting run was resumed
        self._table[type(event)](self, event)

    # -- one method per kind of event (tether.eventdispatch) --------------------------------

    def on_tool_call_requested(self, event: ToolCallRequested) -> None:
        """The call is pending since the model's turn: nothing to add."""

    def on_policy_decided(self, event: PolicyDecided) -> None:
        """Count calls allowed to run; remember tools the defaults denied."""
        if event.decision == "allow":
            if event.tool not in CONTROL_TOOLS or event.tool == SEARCH_KNOWLEDGE:
                self.tool_calls += 1
        elif event.decision == "deny":
            if event.rule.startswith("default:"):
                self.default_denied.add(event.tool)
            call = self.pending.get(event.call_id)
            if call is not None and event.rule not in MAY_PASS_LATER:
                key = failure_key(call.name, call.arguments)
                if "[REDACTED:" not in key:  # another secret looks the same: not counted
                    self.denied[key] = self.denied.get(key, 0) + 1

    def on_tool_call_finished(self, event: ToolCallFinished) -> None:
        """The result, as the model reads it next."""
        call = self.pending.pop(event.call_id, None)
        if not event.is_error:
            if self.failed and call is not None:  # what worked after a failure of its tool
                for failure in self.failed:
                    if failure.tool == event.tool and failure.call_id not in self.worked:
                        self.worked[failure.call_id] = call.arguments
            self.retries = 0
            if self.tool_retries:
                self.tool_retries.pop(event.tool, None)
        elif event.error_type in CORRECTABLE_ERRORS:
            self.retries += 1
            self.tool_retries[event.tool] = self.tool_retries.get(event.tool, 0) + 1
        self.messages.append(
            ToolResultMessage(
                call_id=event.call_id,
                name=event.tool if call is None else call.name,
                content=event.content,
                is_error=event.is_error,
                synthetic=event.synthetic,
            )
        )

    def on_model_responded(self, event: ModelResponded) -> None:
        """Usage, the turn's text and its calls (now pending); a thinking stage's: usage."""
        usage = event.usage
        self.requests += 1
        self.input_tokens += usage.input_tokens
        self.output_tokens += usage.output_tokens
        if self.cost is not None:
            self.cost = None if usage.cost is None else self.cost + usage.cost
        purpose = event.purpose
        self._phase_used(
            "think"
            if purpose is None and not event.final
            else phase_of("model_responded", event.final, purpose),
            event.latency_s,
        )
        if event.purpose is not None:  # not a turn of the conversation
            self.asked.add(event.purpose)
            return
        self.model_failures = 0
        self.cut_off = event.cut_off is True
        if not event.final:
            self.steps = event.step
        if event.text:
            self.last_text = event.text
        self.messages.append(
            AssistantMessage(
                text=event.text, tool_calls=event.tool_calls, reasoning=event.reasoning
            )
        )
        calls = event.tool_calls
        if len(calls) == 1:
            self.pending = {calls[0].id: calls[0]}
            self.call_ids.add(calls[0].id)
        else:
            self.pending = {call.id: call for call in calls}
            self.call_ids.update(self.pending)

    def on_run_started(self, event: RunStarted) -> None:
        """Who runs what, and the goal as the first message."""
        self.run_id = event.run_id
        self.goal = event.goal
        self.agent = event.agent
        self.model = event.model
        self.limits = event.limits
        self.started_at = event.at
        self.messages.append(UserMessage(text=goal_text(event.goal, event.context)))

    def on_model_failed(self, event: ModelFailed) -> None:
        """One more failed request in a row (a thinking stage's is skipped, not retried)."""
        self._phase_used(
            phase_of("model_failed", bool(event.final), event.purpose), event.latency_s or 0.0
        )
        if event.purpose is not None:
            self.asked.add(event.purpose)
            return
        self.model_failures += 1

    def on_retry_prompted(self, event: RetryPrompted) -> None:
        """The correction the model reads."""
        self.retries += 1
        self.messages.append(UserMessage(text=event.text))

    def on_tool_call_unknown(self, event: ToolCallUnknown) -> None:
        """A call whose outcome is unknown, answered as an error."""
        self.pending.pop(event.call_id, None)
        self.messages.append(
            ToolResultMessage(
                call_id=event.call_id,
                name=event.tool,
                content=(TextBlock(text=event.reason),),
                is_error=True,
                synthetic=True,
            )
        )

    def on_limit_reached(self, event: LimitReached) -> None:
        """The limit, and the request for a final answer if the run asks for one."""
        self.limit_reached = event
        if event.ask_for_answer:
            self.messages.append(UserMessage(text=limit_prompt(event.limit)))

    def on_run_finished(self, event: RunFinished) -> None:
        """The end."""
        self.finished = event

    def on_approval_given(self, event: ApprovalGiven) -> None:
        """An approved call runs; edited arguments count when the policy allows them."""
        call = self.pending.get(event.call_id)
        if (
            event.approved
            and event.arguments is None
            and call is not None
            and call.name not in CONTROL_TOOLS
        ):
            self.tool_calls += 1

    # recorded facts that do not change what the model sees (yet)

    def on_run_resumed(self, event: RunResumed) -> None:
        """Nothing to fold."""

    def on_user_replied(self, event: UserReplied) -> None:
        """Nothing to fold (the answer arrives as the ``ask_user`` result)."""

    def on_redacted(self, event: Redacted) -> None:
        """Nothing to fold."""

    def on_approval_requested(self, event: ApprovalRequested) -> None:
        """Nothing to fold."""

    def on_plan_made(self, event: PlanMade) -> None:
        """The plan in force, and how the model reads it."""
        self.plan = event
        self.plan_view = plan_text(event.steps, event.success_criteria, event.step_tools)

    def on_plan_revised(self, event: PlanRevised) -> None:
        """The new plan in force."""
        self.plan = event
        self.plan_view = plan_text(event.steps, event.success_criteria, event.step_tools)
        self.replans = event.revision

    def on_reflected(self, event: Reflected) -> None:
        """The last check (a rejection reaches the model as ``finish_task``'s result)."""
        if event.tool is not None:  # a failed call's reflection
            self.failed.append(event)
            key = failure_key(event.tool, event.arguments or {})
            self.failures[key] = self.failures.get(key, 0) + 1
            return
        self.reflection = event
        self.reflections = event.attempt

    def on_routed(self, event: Routed) -> None:
        """The router's decision."""
        self.routed = event

    def on_session_continued(self, event: SessionContinued) -> None:
        """The session's earlier turns, as the conversation before the goal."""
        self.session = event
        earlier: list[Message] = []
        for goal, answer in zip(event.goals, event.answers, strict=False):
            earlier += [UserMessage(text=goal), AssistantMessage(text=answer)]
        self.messages[0:0] = earlier  # before the goal, the run's first message
        self.earlier = len(earlier)

    def on_memory_recalled(self, event: MemoryRecalled) -> None:
        """What was recalled, as the model reads it after its instructions."""
        if event.call_id is not None:
            return  # a ``recall`` call's: that call's result, not the view
        self.recalled_ids.update(event.records)
        if event.after_call is not None:  # on a failed call: after its result
            self.searched_after.add(event.after_call)
            if event.texts:
                self.messages.append(UserMessage(text=recalled_view(event.texts)))
            return
        self.tool_notes = lesson_view(event.notes)
        self.recalled = event
        texts = event.texts
        if event.notes:  # a lesson is shown with the goal, not twice
            texts = tuple(t for t, n in zip(texts, event.notes, strict=False) if not n)
        self.memory_view = recalled_view(texts)

    def on_memory_written(self, event: MemoryWritten) -> None:
        """The records the run has written (a resumed run never writes one twice)."""
        self.written.add(event.record_id)

    def on_knowledge_retrieved(self, event: KnowledgeRetrieved) -> None:
        """The passages that may be cited, by label (the call's result follows)."""
        self.questions.add(event.question.casefold())
        self.citable.update(zip(event.labels, event.relevant, strict=False))

    def on_context_compacted(self, event: ContextCompacted) -> None:
        """The condensed span's messages become the one message that replaced them."""
        start, end = event.start, event.end
        if start is None or end is None or not 0 <= start <= end <= len(self.messages):
            return  # no span recorded: the conversation stays as it was
        self.compacted += sum(isinstance(m, AssistantMessage) for m in self.messages[start:end])
        self.messages[start:end] = [UserMessage(text=event.summary)]

    def on_budget_warning(self, event: BudgetWarning) -> None:
        """A limit that skips thinking requests is remembered (warned about once)."""
        if "." in event.limit or event.limit == "context_window":
            self.skipped_for.add(event.limit)

    def _phase_used(self, phase: str, seconds: float) -> None:
        self.phase_steps[phase] = self.phase_steps.get(phase, 0) + 1
        self.phase_seconds[phase] = self.phase_seconds.get(phase, 0.0) + seconds

    def snapshot(self) -> RunState:
        """A frozen copy of the state."""
        return RunState(
            run_id=self.run_id,
            goal=self.goal,
            agent=self.agent,
            limits=self.limits,
            started_at=self.started_at,
            messages=tuple(self.messages),
            pending_calls=tuple(self.pending.values()),
            usage=self.usage,
            steps=self.steps,
            tool_calls=self.tool_calls,
            retries=self.retries,
            model_failures=self.model_failures,
            last_text=self.last_text,
            finished=self.finished,
            last_seq=-1 if self.last is None else self.last.seq,
            last_hash=GENESIS_HASH if self.last is None else self.last.hash,
        )


def fold(events: Iterable[Event]) -> RunState:
    """The state of a run after ``events``."""
    builder = StateBuilder()
    for event in events:
        builder.apply(event)
    return builder.snapshot()
