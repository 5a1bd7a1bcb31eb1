"""What the parts of a run share: its state, and the signals they pass to each other.

``AgentRun`` (``tether.loop``) is assembled from parts, one concept a module: the turn
(``loop``), a turn's tool calls (``toolcalls``), ending a run (``endings``) and continuing a
stored one (``recovery``). This base declares the state they share, set once by
``AgentRun.__init__``, and the few helpers all of them use.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import replace
from typing import TYPE_CHECKING, Any, Generic

import orjson
from typing_extensions import TypeVar

from tether._internal.clock import Clock
from tether.content import ToolResult
from tether.events import (
    Event,
    ModelResponded,
)
from tether.messages import ToolCall
from tether.models.base import (
    Model,
    ModelRequest,
    ModelResponse,
    ToolChoice,
)
from tether.outcome import ErrorInfo, RunOutcome, RunStatus
from tether.policy.approvals import Approval
from tether.policy.base import PolicyContext, PolicyDecision
from tether.policy.redaction import Redactor
from tether.run.interrupts import Interrupts
from tether.run.journal import Journal
from tether.run.loopmonitor import Call
from tether.run.unfinished import refuse
from tether.state import StateBuilder
from tether.stores.base import (
    Lease,
    RunStore,
)
from tether.tools.base import Tool, ToolContext, ToolDefinition

if TYPE_CHECKING:
    from tether.spec import AgentSpec

__all__ = [
    "Cancelled",
    "OutputT",
    "Planned",
    "Retry",
    "RunBase",
    "Stop",
    "ToolRunner",
    "unique_ids",
]

OutputT = TypeVar("OutputT", default=str)
T = TypeVar("T")

ToolRunner = Callable[
    [Tool, ToolCall, ToolContext, Mapping[str, Any], "float | None"],
    Awaitable[tuple[ToolResult, "str | None"]],
]
"""Runs one validated call and returns its result and error type (replay swaps it)."""


class Planned:
    """What happens to one tool call of a turn (class-level defaults: cheap to create)."""

    tool: Tool | None = None
    arguments: Mapping[str, Any] | None = None
    synthetic: ToolResult | None = None
    error_type: str | None = None
    output: object = None
    finish: bool = False
    question: str | None = None
    awaiting_approval: bool = False
    stop_reason: str | None = None

    def __init__(self, call: ToolCall) -> None:
        self.call = call


class Stop:
    """The run stops here: with which status, and why (a limit, an error)."""

    __slots__ = ("ask_for_answer", "error", "limit", "maximum", "status", "used")

    def __init__(
        self,
        status: RunStatus,
        limit: str | None = None,
        used: float = 0.0,
        maximum: float = 0.0,
        ask_for_answer: bool = False,
        error: ErrorInfo | None = None,
    ) -> None:
        self.status = status
        self.limit = limit
        self.used = used
        self.maximum = maximum
        self.ask_for_answer = ask_for_answer
        self.error = error

    def __repr__(self) -> str:
        return (
            f"Stop({self.status!r}, limit={self.limit!r}, used={self.used!r}, "
            f"maximum={self.maximum!r}, ask_for_answer={self.ask_for_answer!r}, "
            f"error={self.error!r})"
        )


class Retry:
    """Ask the model again after ``delay`` seconds."""

    __slots__ = ("delay",)

    def __init__(self, delay: float) -> None:
        self.delay = delay


class Cancelled(Exception):
    """The run is cancelled (``cancel()``, Ctrl-C): unwind to ``_drive``, which ends it."""


def unique_ids(calls: tuple[ToolCall, ...], step: int, used: set[str]) -> tuple[ToolCall, ...]:
    """Calls with empty ids, or ids used earlier in the run, renamed.

    Each result must answer exactly one call, and some models reuse ``call_0`` every turn.
    """
    seen = set(used)
    fixed: list[ToolCall] = []
    changed = False
    for index, call in enumerate(calls):
        if not call.id or call.id in seen:
            changed = True
            base = f"{call.id or 'call'}_{step}_{index}"
            new_id, n = base, 1
            while new_id in seen:
                n += 1
                new_id = f"{base}_{n}"
            call = replace(call, id=new_id)
        seen.add(call.id)
        fixed.append(call)
    return tuple(fixed) if changed else calls


def _secret_like(redactor: Redactor, text: str) -> bool:
    """Whether the redactor would change ``text`` (probed first: ids are on the hot path)."""
    return redactor.might_match(text.encode()) and redactor.redact_text(text) != text


def _unencodable(call: ToolCall) -> ToolCall:
    """``call`` with its arguments dropped if JSON tools (orjson) cannot encode them."""
    try:
        orjson.dumps(call.arguments)
    except TypeError as exc:
        return replace(
            call,
            arguments={},
            parse_error=f"the arguments cannot be stored as JSON ({exc}); send smaller values",
        )
    return call


class RunBase(Generic[OutputT]):
    """The state of one run that its parts share (see the module docstring)."""

    run_id: str
    goal: str
    _spec: AgentSpec[OutputT]
    _model: Model
    _clock: Clock
    _state: StateBuilder
    _journal: Journal
    _add: Callable[..., Event]
    _agent_ref: str | None
    _tags: tuple[str, ...]
    _parent_run_id: str | None
    _tool_runner: ToolRunner
    _output: OutputT | None
    _outcome: RunOutcome[OutputT] | None
    _interrupts: Interrupts
    _t0: float
    _deadline: float | None
    _monotonic: Callable[[], float]
    _warned_steps: bool
    _warn_steps_at: float
    _runnable: int
    _in_flight: set[str]
    _basis: str
    _store: RunStore | None
    _owner: str
    _lease: Lease | None
    _resume: bool
    _existing: bool
    _fatal: ErrorInfo | None
    _watch: Call
    _answer_redacted: bool
    _answer: str | None
    _max_recoveries: int
    _policy_run: PolicyContext | None
    _approvals: tuple[Approval, ...]
    _decided: list[Planned] | None
    _caps: dict[str, asyncio.Semaphore | None]
    _checks_results: bool
    _loaded: int

    if TYPE_CHECKING:  # defined by the parts; declared here so each part may call them

        async def _bounded(self, awaitable: Awaitable[T], timeout: float | None) -> T: ...

        async def _call_model(
            self, request: ModelRequest, *, final: bool, now: float
        ) -> ModelResponse: ...

        def _request(
            self, tool_choice: ToolChoice = "auto", *, final: bool = False
        ) -> ModelRequest: ...

        def _request_digest(self, request: ModelRequest) -> str: ...

        async def _run_one(
            self, item: Planned, *, child: bool = False
        ) -> tuple[ToolResult, str | None, float]: ...

        def _record_result(
            self,
            item: Planned,
            result: ToolResult,
            error_type: str | None,
            duration: float,
            *,
            synthetic: bool = False,
        ) -> None: ...

        def _close_pending(
            self, reason: str, error_type: str, *, interrupted: str | None = None
        ) -> None: ...

        def _finish_outcome(self) -> None: ...

        def _time_stop(self) -> Stop: ...

        def _no_tool_call(self) -> Stop | None: ...

        def _policy_context(self) -> PolicyContext: ...

        def _decide(
            self,
            call: ToolCall,
            validated: Mapping[str, Any] | None,
            definition: ToolDefinition,
        ) -> PolicyDecision: ...

    def _record_response(
        self,
        request: ModelRequest,
        response: ModelResponse,
        step: int,
        t0: float,
        *,
        final: bool = False,
    ) -> ModelResponse:
        """Record a model's answer as ``model_responded``.

        Calls with missing or reused ids get unique ones first: every result must answer
        exactly one call.
        """
        calls = response.tool_calls
        seen = self._state.call_ids
        redactor = self._journal.redactor
        if redactor is not None:
            for c in calls:  # a secret's shortest form has 3 characters
                if len(c.id) >= 3 and _secret_like(redactor, c.id):
                    # an id is copied into many events as a key: one that looks like a secret
                    # is replaced, not redacted (a redacted id would not match its result)
                    calls = tuple(
                        replace(c, id="") if _secret_like(redactor, c.id) else c for c in calls
                    )
                    break
        if len(calls) > 1 or (calls and (not calls[0].id or calls[0].id in seen)):
            calls = unique_ids(calls, step, seen)
        digest = self._request_digest(request)
        latency = self._monotonic() - t0
        for attempt in (1, 2):
            try:
                self._add(
                    ModelResponded,
                    step=step,
                    model=self._model.name,
                    request_digest=digest,
                    text=response.text,
                    reasoning=response.reasoning,
                    tool_calls=calls,
                    usage=response.usage,
                    latency_s=latency,
                    final=final,
                )
                break
            except TypeError:  # JSON cannot hold it (an integer beyond 64 bits): a call error
                if attempt == 2:
                    raise
                calls = tuple(_unencodable(c) for c in calls)
        self._answer_redacted = self._journal.last_redacted
        if calls is not response.tool_calls:
            response = replace(response, tool_calls=calls)
        return response

    def _refuse(self, call: ToolCall, text: str, error_type: str) -> None:
        """Answer ``call`` with an error tether writes itself (the tool did not run)."""
        refuse(self._add, call, text, error_type)

    def _elapsed(self) -> float:
        return self._monotonic() - self._t0

    def _remaining(self) -> float | None:
        deadline = self._deadline
        return None if deadline is None else max(0.0, deadline - self._monotonic())

    def _check_cancel(self) -> None:
        if self._interrupts.reason is not None:
            raise Cancelled
