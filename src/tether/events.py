"""The events a run is made of. The log of them is the run; everything else is a view.

Every event is a frozen, keyword-only dataclass with a ``kind`` literal, the ``run_id``, a
gap-free ``seq`` starting at 0, the UTC time ``at``, and a hash chain: ``prev_hash`` is the
previous event's ``hash`` (``GENESIS_HASH`` for the first), and ``hash`` is the SHA-256 of the
JSON array of all the event's other field values, in declaration order (see ``tether.codec``).

Event names are permanent once released.

Events keep their fields in slots: an event takes about 180 bytes instead of 560 with a
``__dict__``, and is one object for the garbage collector instead of two (a process with a
thousand runs in flight holds tens of thousands of them). orjson encodes a slotted dataclass
more slowly, so the journal hands a durable store each event's body ready-made (built from
the values it hashed: ``tether._internal.eventmaker``).
"""

from __future__ import annotations

from dataclasses import field
from typing import Literal, TypeAlias

from tether._internal.frozen import frozen
from tether.content import ContentBlock
from tether.eventbase import GENESIS_HASH, EventBase
from tether.jsontypes import JsonObject, JsonValue
from tether.knowledgeevents import KnowledgeRetrieved, Passage, PassageVerdict, SearchRound
from tether.latefields import LATE, late_fields
from tether.limits import Limits, PhaseLimits
from tether.memoryevents import (
    ContextCompacted,
    MemoryRecalled,
    MemoryWritten,
    SessionContinued,
)
from tether.messages import ToolCall
from tether.phases import Phase
from tether.status import ErrorInfo, RunStatus
from tether.usage import Usage

__all__ = [
    "EVENT_TYPES",
    "GENESIS_HASH",
    "LATE",
    "ApprovalGiven",
    "ApprovalRequested",
    "BudgetWarning",
    "Complexity",
    "ContextCompacted",
    "Decision",
    "Event",
    "EventBase",
    "KnowledgeRetrieved",
    "LimitReached",
    "MemoryRecalled",
    "MemoryWritten",
    "ModelFailed",
    "ModelResponded",
    "Passage",
    "PassageVerdict",
    "Phase",
    "PlanMade",
    "PlanRevised",
    "PolicyDecided",
    "Purpose",
    "Redacted",
    "Reflected",
    "RetryPrompted",
    "Routed",
    "RunFinished",
    "RunResumed",
    "RunStarted",
    "SearchRound",
    "SessionContinued",
    "ToolCallFinished",
    "ToolCallRequested",
    "ToolCallUnknown",
    "UserReplied",
    "late_fields",
]

Decision: TypeAlias = Literal["allow", "deny", "needs_approval"]
"""A policy decision on one tool call."""

Purpose: TypeAlias = Literal["plan", "reflect", "route", "compact", "grade", "rewrite"]
"""What a model request that is not a turn of the conversation is for: a thinking stage's
(``tether.thinking``), a compaction's summary (``tether.compaction``), or a knowledge
search's verdict on a passage (``grade``) or better query (``rewrite``)."""

Complexity: TypeAlias = Literal["low", "medium", "high"]
"""A planner's estimate of how hard a task is."""


@frozen
class RunStarted(EventBase):
    """A run began."""

    kind: Literal["run_started"] = "run_started"
    """Discriminator."""
    goal: str
    """The task, as given."""
    agent: str
    """The agent's name."""
    agent_ref: str | None = None
    """``module:attribute`` that imports the agent, when known (used by ``tether replay``)."""
    spec_digest: str
    """SHA-256 of the agent's spec: instructions, tool definitions, output schema, limits."""
    instructions: str
    """The system instructions the model gets."""
    model: str
    """The model's name."""
    tools: tuple[str, ...]
    """Names of the tools offered to the model, ``finish_task`` included."""
    output_schema: JsonObject
    """JSON Schema of ``finish_task``'s arguments (the agent's output type)."""
    limits: Limits
    """The run's limits."""
    parent_run_id: str | None = None
    """The run that started this one, for sub-agents."""
    tags: tuple[str, ...] = ()
    """Free-form labels."""
    context: JsonObject | None = field(default=None, metadata=LATE)
    """Structured context given with the goal (``agent.run(goal, context=...)``); the model
    reads it with the goal."""
    prompt: JsonObject | None = field(default=None, metadata=LATE)
    """The prompt template the instructions were rendered from: its id, version and the
    rendered text's SHA-256 (``tether.prompts``)."""
    thinking: JsonObject | None = field(default=None, metadata=LATE)
    """The thinking stages that are on (router, planner, reflector) and their bounds
    (``tether.thinking``); ``None`` when none is."""
    model_choice: JsonObject | None = field(default=None, metadata=LATE)
    """For an agent that asked for capabilities instead of a model (``ModelNeeds``): the
    model chosen, why, and why not each one considered before it."""


@frozen
class PlanMade(EventBase):
    """The agent made a plan (``tether.thinking``); the model sees it while it acts."""

    kind: Literal["plan_made"] = "plan_made"
    """Discriminator."""
    steps: tuple[str, ...]
    """The planned steps, in order."""
    success_criteria: tuple[str, ...] = ()
    """How the agent will know it is done (what the reflector checks an answer against)."""
    step_tools: tuple[tuple[str, ...], ...] = ()
    """The tools each step expects to call, by step (empty: not said)."""
    complexity: Complexity | None = None
    """How hard the planner judged the task."""
    cache: Literal["hit", "miss"] | None = None
    """With a plan cache (``Thinking(plan_cache=...)``): ``hit``, the plan of an earlier run
    that finished with it (no model request), or ``miss``; ``None``: no cache."""
    cached_from: str | None = None
    """On a hit: the run that made the plan."""


@frozen
class PlanRevised(EventBase):
    """The agent changed its plan: a step failed, or an answer did not pass its check."""

    kind: Literal["plan_revised"] = "plan_revised"
    """Discriminator."""
    steps: tuple[str, ...]
    """The new steps."""
    reason: str
    """Why the plan changed."""
    success_criteria: tuple[str, ...] = ()
    """The criteria from now on."""
    step_tools: tuple[tuple[str, ...], ...] = ()
    """The tools each new step expects to call."""
    revision: int = 1
    """Which revision this is (1-based; bounded by ``Thinking.max_replans``)."""


@frozen
class Routed(EventBase):
    """The router decided how the run goes on: answered directly, or the agentic loop."""

    kind: Literal["routed"] = "routed"
    """Discriminator."""
    route: Literal["direct", "agentic"]
    """``direct``: the answer came with the decision (no tools, no plan); ``agentic``: the
    loop runs."""
    reason: str
    """Why, in words."""


@frozen
class ModelResponded(EventBase):
    """The model answered a request."""

    kind: Literal["model_responded"] = "model_responded"
    """Discriminator."""
    step: int
    """The model turn (1-based); the best-effort answer after a limit reuses the last step."""
    model: str
    """The model's name."""
    request_digest: str
    """SHA-256 committing to the exact request: the agent's spec digest, the request options
    and the hash of the last event before it (the request is derived from that log prefix)."""
    text: str = ""
    """Visible text."""
    reasoning: str | None = None
    """The model's reasoning, when it exposes it."""
    tool_calls: tuple[ToolCall, ...] = ()
    """The tool calls it asked for, in order."""
    usage: Usage = Usage()
    """Tokens and cost of this request."""
    latency_s: float = 0.0
    """Seconds the request took."""
    final: bool = False
    """True for the tool-free best-effort answer requested after a limit was reached."""
    purpose: Purpose | None = field(default=None, metadata=LATE)
    """What a thinking stage asked for (``plan``, ``reflect``, ``route``): not a turn of the
    conversation, only its usage counts; ``None`` for the agent's own turns."""
    cut_off: bool | None = field(default=None, metadata=LATE)
    """True when the answer stopped at the model's output limit (``max_output_tokens``): its
    text is not all the model meant to say (``None``: it was not, or is not known)."""


@frozen
class ModelFailed(EventBase):
    """A model request failed."""

    kind: Literal["model_failed"] = "model_failed"
    """Discriminator."""
    step: int
    """The model turn the request was for."""
    model: str
    """The model's name."""
    error: ErrorInfo
    """What failed."""
    transient: bool
    """Whether the failure is worth retrying (rate limit, 5xx, timeout)."""
    attempt: int
    """1 for the first attempt."""
    will_retry: bool
    """Whether tether retries (within ``max_retries``)."""
    retry_in_s: float = 0.0
    """The back-off before the retry."""
    purpose: Purpose | None = field(default=None, metadata=LATE)
    """The thinking stage whose request failed (see ``ModelResponded.purpose``)."""
    latency_s: float | None = field(default=None, metadata=LATE)
    """Seconds the request took before it failed (what a phase's ``max_seconds`` counts)."""
    final: bool | None = field(default=None, metadata=LATE)
    """True for the tool-free best-effort answer after a limit (its phase is ``respond``)."""


@frozen
class RetryPrompted(EventBase):
    """tether told the model what to correct (invalid output, a missing tool call)."""

    kind: Literal["retry_prompted"] = "retry_prompted"
    """Discriminator."""
    reason: str
    """Machine-readable reason, e.g. ``no_tool_call``."""
    text: str
    """The message the model gets."""


@frozen
class ToolCallRequested(EventBase):
    """The model asked for a tool call; recorded BEFORE anything runs."""

    kind: Literal["tool_call_requested"] = "tool_call_requested"
    """Discriminator."""
    call_id: str
    """The call's id."""
    tool: str
    """The tool's name."""
    arguments: JsonObject
    """The arguments as the model gave them."""
    reason: str | None = None
    """The model's stated reason (its text in that turn), if any."""


@frozen
class PolicyDecided(EventBase):
    """The policy decided on a tool call."""

    kind: Literal["policy_decided"] = "policy_decided"
    """Discriminator."""
    call_id: str
    """The call's id."""
    tool: str
    """The tool's name."""
    decision: Decision
    """allow, deny or needs_approval."""
    rule: str
    """The rule that decided."""
    reason: str
    """Why, in words."""


@frozen
class ApprovalRequested(EventBase):
    """A tool call waits for a human."""

    kind: Literal["approval_requested"] = "approval_requested"
    """Discriminator."""
    call_id: str
    """The call's id."""
    tool: str
    """The tool's name."""
    arguments: JsonObject
    """The exact arguments an approval binds to."""
    arguments_hash: str
    """SHA-256 of the canonical arguments."""


@frozen
class ApprovalGiven(EventBase):
    """A human decided on a pending call."""

    kind: Literal["approval_given"] = "approval_given"
    """Discriminator."""
    call_id: str
    """The call's id."""
    approved: bool
    """Approved or denied."""
    arguments: JsonObject | None = None
    """Edited arguments, if the human changed them."""
    by: str = ""
    """Who decided."""
    reason: str = ""
    """Why, if given."""


@frozen
class ToolCallFinished(EventBase):
    """A tool call ended (or tether answered it itself: denied, skipped, invalid)."""

    kind: Literal["tool_call_finished"] = "tool_call_finished"
    """Discriminator."""
    call_id: str
    """The call's id."""
    tool: str
    """The tool's name."""
    content: tuple[ContentBlock, ...]
    """The result's content blocks, as the model will see them."""
    structured: JsonValue = None
    """Structured content, if the tool returned any."""
    is_error: bool = False
    """Whether the call failed."""
    error_type: str | None = None
    """For errors: ``invalid_arguments``, ``exception``, ``timeout``, ``denied``, ..."""
    duration_s: float = 0.0
    """Seconds the tool ran."""
    synthetic: bool = False
    """True when the tool did not run and tether wrote the result."""
    untrusted: bool | None = field(default=None, metadata=LATE)
    """What the tool said of this result's trust (``ToolResult.untrusted``); ``None``: nothing,
    its declared ``untrusted_output`` stands."""


@frozen
class ToolCallUnknown(EventBase):
    """A non-idempotent call was in flight when the run crashed; its outcome is unknown."""

    kind: Literal["tool_call_unknown"] = "tool_call_unknown"
    """Discriminator."""
    call_id: str
    """The call's id."""
    tool: str
    """The tool's name."""
    reason: str
    """What the model is told."""


@frozen
class Reflected(EventBase):
    """An answer was checked, or (``tool`` set) a failed tool call was analysed.

    An answer is checked against the success criteria before ``finish_task`` takes it
    (``Thinking``); a failed call is analysed with ``Remember(reflexion=True)``.
    """

    kind: Literal["reflected"] = "reflected"
    """Discriminator."""
    call_id: str
    """The ``finish_task`` call whose answer was checked."""
    answer: str
    """The answer, as text."""
    passed: bool
    """Whether it meets the criteria (if not, the run goes back to acting, or ends)."""
    reasons: str
    """Why, in words."""
    unmet: tuple[str, ...] = ()
    """The criteria it does not meet."""
    attempt: int = 1
    """Which check of the run this is (1-based; bounded by ``Thinking.max_reflections``)."""
    tool: str | None = field(default=None, metadata=LATE)
    """The failed call's tool (``None``: an answer's check)."""
    error_type: str | None = field(default=None, metadata=LATE)
    """How the call failed (``ToolCallFinished.error_type``; ``tool_error``: the tool said so)."""
    arguments: JsonObject | None = field(default=None, metadata=LATE)
    """The failed call's arguments, as the log holds them."""
    fix: str | None = field(default=None, metadata=LATE)
    """What to do instead, in words."""


@frozen
class BudgetWarning(EventBase):
    """A limit is close."""

    kind: Literal["budget_warning"] = "budget_warning"
    """Discriminator."""
    limit: str
    """Which limit."""
    used: float
    """How much is used."""
    maximum: float
    """The limit."""


@frozen
class LimitReached(EventBase):
    """A limit was reached; the run stops after at most one tool-free best-effort answer."""

    kind: Literal["limit_reached"] = "limit_reached"
    """Discriminator."""
    limit: str
    """Which limit (a ``Limits`` field name)."""
    used: float
    """How much was used."""
    maximum: float
    """The limit."""
    ask_for_answer: bool
    """Whether the model is asked for a best-effort answer (not when time or budget is gone)."""


@frozen
class RunResumed(EventBase):
    """The run was taken up again: after a crash, or with the answer it waited for."""

    kind: Literal["run_resumed"] = "run_resumed"
    """Discriminator."""
    reason: Literal["crash", "answer", "approvals"]
    """Why: it had stopped without an outcome, or a human answered."""
    attempt: int
    """For ``crash``: the recovery attempt since the run last stopped cleanly (1-based)."""
    owner: str
    """The process that resumed it."""


@frozen
class UserReplied(EventBase):
    """The user answered a question the agent asked."""

    kind: Literal["user_replied"] = "user_replied"
    """Discriminator."""
    text: str
    """The user's answer."""


@frozen
class Redacted(EventBase):
    """Secrets or personal data were removed from an event before it was recorded."""

    kind: Literal["redacted"] = "redacted"
    """Discriminator."""
    of_seq: int
    """The event that was redacted: the one just before this one (for ``run_finished``,
    which stays the last event, the one just after)."""
    fields: tuple[str, ...]
    """Where: the paths of the fields that changed, e.g. ``tool_calls[0].arguments.key``."""
    kinds: tuple[str, ...]
    """What kinds of data, e.g. ``openai_key``, ``email`` (never the data itself)."""
    count: int
    """How many matches were replaced."""


@frozen
class RunFinished(EventBase):
    """The run ended; this is always the last event of an ended run."""

    kind: Literal["run_finished"] = "run_finished"
    """Discriminator."""
    status: RunStatus
    """How it ended."""
    output: JsonValue = None
    """``finish_task``'s validated arguments (the output), when finished."""
    answer: str | None = None
    """The text answer, or the best-effort answer when not finished."""
    error: ErrorInfo | None = None
    """What went wrong, if anything."""
    limit: str | None = None
    """The limit reached, for ``budget_exhausted``."""
    question: str | None = None
    """The question, for ``waiting_for_user``."""
    usage: Usage = Usage()
    """Tokens and cost over the run."""
    steps: int = 0
    """Model turns taken."""
    tool_calls: int = 0
    """Tool calls executed."""


Event: TypeAlias = (
    RunStarted
    | SessionContinued
    | PlanMade
    | PlanRevised
    | Routed
    | ModelResponded
    | ModelFailed
    | RetryPrompted
    | ToolCallRequested
    | PolicyDecided
    | ApprovalRequested
    | ApprovalGiven
    | ToolCallFinished
    | ToolCallUnknown
    | Reflected
    | MemoryRecalled
    | MemoryWritten
    | KnowledgeRetrieved
    | ContextCompacted
    | BudgetWarning
    | LimitReached
    | RunResumed
    | UserReplied
    | Redacted
    | RunFinished
)
"""Any event."""

EVENT_TYPES: dict[str, type[Event]] = {
    cls.__dataclass_fields__["kind"].default: cls  # pyright: ignore[reportUnknownMemberType]
    for cls in (
        RunStarted,
        SessionContinued,
        PlanMade,
        PlanRevised,
        Routed,
        ModelResponded,
        ModelFailed,
        RetryPrompted,
        ToolCallRequested,
        PolicyDecided,
        ApprovalRequested,
        ApprovalGiven,
        ToolCallFinished,
        ToolCallUnknown,
        Reflected,
        MemoryRecalled,
        MemoryWritten,
        KnowledgeRetrieved,
        ContextCompacted,
        BudgetWarning,
        LimitReached,
        RunResumed,
        UserReplied,
        Redacted,
        RunFinished,
    )
}
"""Each event class by its ``kind``."""

# Decoding a log must refuse fields this version does not know rather than drop them.
_STRICT = {"extra": "forbid"}  # a pydantic ConfigDict, read when a log is decoded
for _cls in (
    *EVENT_TYPES.values(),
    ToolCall,
    Usage,
    Limits,
    PhaseLimits,
    ErrorInfo,
    Passage,
    PassageVerdict,
    SearchRound,
):
    setattr(_cls, "__pydantic_config__", _STRICT)  # noqa: B010 - class attribute read by pydantic
