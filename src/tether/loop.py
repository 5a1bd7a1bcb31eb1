"""The loop: decide the next events from the log so far, commit them, repeat.

One turn: check the limits -> ask the model -> record its answer -> for each tool call record
the intent, validate, ask the policy -> commit (the intent is durable before anything runs)
-> run the allowed calls (in parallel up to a cap) -> record each result in call order ->
stop on ``finish_task``, a question for the user, pending approvals, or a limit.

Every exit is a ``run_finished`` event; nothing in the limit, cancel or failure paths raises
out of the run. The history sent to the model is always protocol-valid: every tool call the
model made gets exactly one result, synthetic when the tool did not run.
"""

from __future__ import annotations

import asyncio
import hashlib
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from functools import lru_cache
from typing import TYPE_CHECKING, Any, Generic, Literal, cast

from typing_extensions import TypeVar

from tether._internal.clock import Clock, monotonic_of
from tether._internal.journal import EventSink, Journal, StoreSink
from tether._internal.watchdog import Watchdog
from tether.codec import canonical_json
from tether.content import TextBlock, ToolResult
from tether.errors import ApprovalRequired, ConfigError, ModelError, ModelRetry, UserError
from tether.events import (
    ApprovalRequested,
    BudgetWarning,
    Event,
    LimitReached,
    ModelFailed,
    ModelResponded,
    PolicyDecided,
    RetryPrompted,
    RunFinished,
    RunResumed,
    RunStarted,
    ToolCallFinished,
    ToolCallRequested,
    ToolCallUnknown,
    UserReplied,
)
from tether.messages import ASK_USER, FINISH_TASK, ToolCall
from tether.models.base import (
    Model,
    ModelRequest,
    ModelResponse,
    ModelSettings,
    ToolChoice,
    check_model_requests_allowed,
)
from tether.outcome import ErrorInfo, PendingCall, RunOutcome, RunStatus
from tether.policy.base import PolicyDecision
from tether.state import StateBuilder
from tether.stores.base import (
    Lease,
    LeaseHeld,
    RunNotFound,
    RunStore,
    StaleLease,
    StoreConflict,
    default_owner,
)
from tether.tools.base import Tool, ToolContext

if TYPE_CHECKING:
    from tether.agent import Agent

__all__ = ["AgentRun", "ToolRunner", "run_tool", "tool_error"]

OutputT = TypeVar("OutputT", default=str)
T = TypeVar("T")

ToolRunner = Callable[
    [Tool, ToolCall, ToolContext, Mapping[str, Any], "float | None"],
    Awaitable[tuple[ToolResult, "str | None"]],
]
"""Runs one validated call and returns its result and error type (replay swaps it)."""

_FINAL_ANSWER_SECONDS = 60.0
_WARN_AT = 0.8


def tool_error(tool: Tool, exc: Exception, timeout: float | None) -> tuple[ToolResult, str]:
    """The result the model sees when a tool raised ``exc`` (a timeout included)."""
    match exc:
        case ModelRetry():
            return ToolResult.error(exc.message), "model_retry"
        case TimeoutError() if timeout is not None:
            return _timed_out(tool.name, timeout), "timeout"
        case ApprovalRequired():
            return ToolResult.error(
                f"{tool.name} needs approval: {exc.reason}"
            ), "approval_required"
        case _:
            return ToolResult.error(f"{tool.name} failed: {type(exc).__name__}: {exc}"), "exception"


async def run_tool(
    tool: Tool,
    call: ToolCall,
    ctx: ToolContext,
    arguments: Mapping[str, Any],
    timeout: float | None,
) -> tuple[ToolResult, str | None]:
    """Run one call, turning every failure into an error result the model can read."""
    try:
        if timeout is None:
            result = await tool.handler(ctx, arguments)
        else:
            async with asyncio.timeout(timeout) as scope:
                try:
                    result = await tool.handler(ctx, arguments)
                except TimeoutError as exc:
                    if scope.expired():
                        raise
                    return tool_error(tool, exc, None)
    except Exception as exc:
        return tool_error(tool, exc, timeout)
    except asyncio.CancelledError as exc:
        task = asyncio.current_task()
        if task is not None and task.cancelling() > 0:
            raise  # really cancelled
        return tool_error(tool, RuntimeError(f"raised CancelledError: {exc!r}"), None)
    return result, ("tool_error" if result.is_error else None)


_NO_CONTEXT = ToolContext(run_id="", call_id="", tool="")
"""Passed to handlers that declared they do not read their context."""


@lru_cache(maxsize=256)
def _digest_prefix(spec_digest: str, tool_choice: str, settings: ModelSettings, tools: int) -> Any:
    """A SHA-256 state over what is fixed per agent and request options (copied per request)."""
    return hashlib.sha256(spec_digest.encode() + canonical_json((tool_choice, settings, tools)))


def _unique_ids(calls: tuple[ToolCall, ...], step: int, used: set[str]) -> tuple[ToolCall, ...]:
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


def _timed_out(name: str, timeout: float) -> ToolResult:
    return ToolResult.error(f"{name} did not finish within {timeout:g}s and was cancelled")


class _Planned:
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


@dataclass(frozen=True, slots=True)
class _Stop:
    status: RunStatus
    limit: str | None = None
    used: float = 0.0
    maximum: float = 0.0
    ask_for_answer: bool = False
    error: ErrorInfo | None = None


@dataclass(frozen=True, slots=True)
class _Retry:
    delay: float


class _Cancelled(Exception):
    pass


class AgentRun(Generic[OutputT]):
    """One run of an agent: iterate it for the events, then read ``outcome``.

    ``async for event in run`` drives the run; each event is yielded after it is committed.
    ``cancel()`` ends the run with ``cancelled`` (an in-flight model or tool call is
    interrupted). If the task iterating the run is cancelled by someone else, the run records
    ``cancelled`` and the ``CancelledError`` propagates, as asyncio expects.
    """

    def __init__(
        self,
        agent: Agent[OutputT],
        goal: str,
        *,
        run_id: str,
        model: Model,
        clock: Clock,
        sinks: Sequence[EventSink] = (),
        agent_ref: str | None = None,
        tags: Sequence[str] = (),
        parent_run_id: str | None = None,
        tool_runner: ToolRunner = run_tool,
        store: RunStore | None = None,
        owner: str | None = None,
        resume: bool = False,
        answer: str | None = None,
        max_recoveries: int = 3,
    ) -> None:
        self.run_id = run_id
        self.goal = goal
        self._agent = agent
        self._spec = agent.spec
        self._model = model
        self._clock = clock
        self._state = StateBuilder()
        self._journal = Journal(run_id, clock=clock, sinks=sinks, on_event=self._state.apply)
        self._add = self._journal.add
        self._agent_ref = agent_ref
        self._tags = tuple(tags)
        self._parent_run_id = parent_run_id
        self._tool_runner = tool_runner
        self._output: OutputT | None = None
        self._outcome: RunOutcome[OutputT] | None = None
        self._cancel_reason: str | None = None
        self._task: asyncio.Task[Any] | None = None
        self._interruptible = False
        self._cancel_requests = 0
        self._watchdog: Watchdog | None = None
        self._t0 = 0.0
        self._deadline: float | None = None
        self._monotonic = monotonic_of(clock)
        self._warned_steps = False
        self._warn_steps_at = _WARN_AT * self._spec.limits.max_steps
        self._runnable = 0
        self._in_flight: set[str] = set()
        self._basis = ""
        self._store = store
        self._owner = owner or default_owner()
        self._lease: Lease | None = None
        self._resume = resume
        self._answer = answer
        self._max_recoveries = max_recoveries
        self._gen = self._drive()

    # -- public surface ------------------------------------------------------------------

    def __aiter__(self) -> AsyncIterator[Event]:
        return self._gen

    @property
    def events(self) -> tuple[Event, ...]:
        """The events recorded so far."""
        return tuple(self._journal.events)

    @property
    def done(self) -> bool:
        """Whether the run has ended (its outcome is available)."""
        return self._outcome is not None

    @property
    def outcome(self) -> RunOutcome[OutputT]:
        """The run's outcome; available once iteration has ended."""
        if self._outcome is None:
            raise RuntimeError("the run has not ended: iterate it to the end first")
        return self._outcome

    def cancel(self, reason: str = "cancelled by the caller") -> None:
        """End the run with ``cancelled``; interrupts an in-flight model or tool call."""
        if self._outcome is not None or self._cancel_reason is not None:
            return
        self._cancel_reason = reason
        task = self._task
        if (
            self._interruptible
            and task is not None
            and not task.done()
            and asyncio.current_task() is not task  # from inside the run: the flag suffices
        ):
            self._cancel_requests += 1
            task.cancel()

    async def aclose(self) -> None:
        """Stop early: the run ends ``cancelled`` (call this after breaking out of the loop)."""
        await self._gen.aclose()

    async def __aenter__(self) -> AgentRun[OutputT]:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        """Leaving ``async with agent.stream(goal) as run:`` early ends the run ``cancelled``."""
        await self._gen.aclose()

    # -- the loop ------------------------------------------------------------------------

    async def _drive(self) -> AsyncGenerator[Event]:  # noqa: C901 - the loop, read top to bottom
        task = asyncio.current_task()
        assert task is not None, "a run must be iterated inside a task"
        self._task = task
        self._watchdog = Watchdog(task)
        journal = self._journal
        try:
            try:
                stop: _Stop | None = None
                if self._store is not None:
                    # The lease first: it fences off any other process from this run's log.
                    self._lease = await self._store.acquire(self.run_id, self._owner)
                    if self._resume:
                        journal.load(await self._store.read(self.run_id))
                    journal.add_sink(StoreSink(self._store, self.run_id, self._lease))
                if self._resume:
                    stop = await self._recover()
                    if stop is None and self._state.finished is not None:
                        self._finish_outcome()  # it had ended already: nothing to do
                        return
                else:
                    self._start()
                for event in await journal.commit():
                    yield event
                fast = journal.in_memory  # no sinks: committing is handing events over
                while True:
                    if stop is None:
                        stop = self._check_limits()
                    if stop is None:
                        request = self._request()
                        answer = await self._ask_model(request)
                        while isinstance(answer, _Retry):  # the failure is visible, then back off
                            for event in await journal.commit():
                                yield event
                            await self._sleep(answer.delay)
                            answer = await self._ask_model(request)
                        if isinstance(answer, _Stop):
                            stop = answer
                        else:
                            planned = self._plan(answer)
                            for event in journal.take() if fast else await journal.commit():
                                yield event
                            if self._cancel_reason is not None:  # stop before any tool runs
                                raise _Cancelled
                            if self._runnable <= 1:
                                await self._execute_inline(planned)
                                for event in journal.take() if fast else await journal.commit():
                                    yield event
                            else:
                                async for event in self._execute_parallel(planned):
                                    yield event
                            stop = self._after_turn(planned)
                    if stop is not None:
                        async for event in self._stop(stop):
                            yield event
                        return
            except _Cancelled:
                pass
            except asyncio.CancelledError:
                # The task's owner cancelled it: record that, then let it propagate.
                await self._end_quietly("cancelled", "the task running the agent was cancelled")
                raise
            except GeneratorExit:
                # The consumer stopped reading (``break``, ``aclose()``): record it, no yield.
                await self._end_quietly("cancelled", "the consumer stopped reading the run")
                raise
            except (UserError, StaleLease, LeaseHeld, RunNotFound, StoreConflict):
                raise  # the caller's mistake, or the store refuses: nothing can be recorded
            except Exception as exc:  # a bug: end the run as failed rather than vanish
                await self._end_quietly("failed", f"{type(exc).__name__}: {exc}", error=exc)
                return
            self._record_cancel()
            for event in await journal.commit():
                yield event
            self._finish_outcome()
        finally:
            self._watchdog.close()
            await journal.close()
            if self._lease is not None and self._store is not None:
                await self._store.release(self._lease)

    async def _recover(self) -> _Stop | None:  # noqa: C901 - one pass over what a stop leaves
        """Continue a stored run: answer what it waited for, or repair what a crash left.

        A crash leaves calls whose intent is recorded and whose result is not. A call that
        never passed the policy never ran, and gets a result saying so. One that did may have
        run: it runs again only if that cannot repeat its effect (read-only, idempotent, or
        deduplicated by its idempotency key, which is the same on every attempt); otherwise
        it is recorded as ``tool_call_unknown`` and the model is told so.
        """
        st, spec = self._state, self._spec
        events = self._journal.events
        if not events or not isinstance(events[0], RunStarted):
            raise ConfigError(f"run {self.run_id!r} has no run_started event to resume from")
        self._restart_clock(events)
        finished = st.finished
        if finished is not None:
            if finished.status == "waiting_for_user":
                if self._answer is None:
                    raise UserError(
                        f"run {self.run_id!r} waits for the user's answer to "
                        f"{finished.question!r}: resume it with answer=..."
                    )
                self._add(RunResumed, reason="answer", attempt=1, owner=self._owner)
                self._add(UserReplied, text=self._answer)
                for call in list(st.pending.values()):
                    text = self._answer if call.name == ASK_USER else "not executed: the run paused"
                    self._add(
                        ToolCallFinished,
                        call_id=call.id,
                        tool=call.name,
                        content=(TextBlock(text=text),),
                        synthetic=call.name != ASK_USER,
                        is_error=call.name != ASK_USER,
                        error_type=None if call.name == ASK_USER else "run_ended",
                    )
                return None
            if finished.status == "waiting_for_approval":
                raise UserError(
                    f"run {self.run_id!r} waits for approvals; approving calls is not supported "
                    "yet (it arrives with the policy gate)"
                )
            return None  # ended for good: the outcome is in the log
        attempt = 1 + sum(
            1 for e in reversed(events) if isinstance(e, RunResumed) and e.reason == "crash"
        )
        self._add(RunResumed, reason="crash", attempt=attempt, owner=self._owner)
        if attempt > self._max_recoveries:
            message = (
                f"gave up after {attempt - 1} recovery attempts; the log shows where it stopped"
            )
            return _Stop("failed", error=ErrorInfo(type="RecoveryFailed", message=message))
        decided = {e.call_id: e for e in events if isinstance(e, PolicyDecided)}
        stop: _Stop | None = None
        for call in list(st.pending.values()):
            decision = decided.get(call.id)
            if decision is None:  # never passed the policy, so it never ran
                self._add(
                    ToolCallFinished,
                    call_id=call.id,
                    tool=call.name,
                    content=(
                        TextBlock(
                            text="not executed: the run stopped before this call started; call it again if it is still needed"
                        ),
                    ),
                    is_error=True,
                    error_type="interrupted",
                    synthetic=True,
                )
                continue
            if decision.decision != "allow":
                continue  # a denial already has its result; an approval request waits
            if call.name == FINISH_TASK:
                self._output = spec.output.validate(call.arguments)
                self._add(
                    ToolCallFinished,
                    call_id=call.id,
                    tool=call.name,
                    content=(TextBlock(text="done"),),
                )
                stop = _Stop("finished")
                continue
            if call.name == ASK_USER:
                stop = _Stop("waiting_for_user")
                continue
            tool = spec.registry.get(call.name)
            if tool is not None and tool.safe_to_retry:
                item = _Planned(call)
                item.tool = tool
                item.arguments = tool.validator(call.arguments)
                result, error_type, duration = await self._run_one(item)
                self._record_result(item, result, error_type, duration)
                continue
            self._add(
                ToolCallUnknown,
                call_id=call.id,
                tool=call.name,
                reason=(
                    f"the run stopped while {call.name} was running; it may or may not have taken "
                    "effect. Do not assume either: check before calling it again"
                ),
            )
        if stop is None:
            stop = self._finished_before_crash()
        return stop

    def _finished_before_crash(self) -> _Stop | None:
        """A run whose last turn's ``finish_task`` succeeded but whose outcome was not written."""
        for event in reversed(self._journal.events):
            if (
                isinstance(event, ToolCallFinished)
                and event.tool == FINISH_TASK
                and not event.is_error
            ):
                call = next(
                    c
                    for e in self._journal.events
                    if isinstance(e, ModelResponded)
                    for c in e.tool_calls
                    if c.id == event.call_id
                )
                self._output = self._spec.output.validate(call.arguments)
                return _Stop("finished")
            if isinstance(event, ModelResponded):
                return None
        return None

    def _restart_clock(self, events: Sequence[Event]) -> None:
        """Resume the run's time budget where it stopped (waiting time not counted)."""
        used = (events[-1].at - events[0].at).total_seconds()
        self._t0 = self._monotonic() - used
        max_seconds = self._spec.limits.max_seconds
        if max_seconds is not None:
            self._deadline = self._t0 + max_seconds
        self._warned_steps = any(
            isinstance(e, BudgetWarning) and e.limit == "max_steps" for e in events
        )

    def _start(self) -> None:
        spec = self._spec
        self._t0 = self._monotonic()
        if spec.limits.max_seconds is not None:
            self._deadline = self._t0 + spec.limits.max_seconds
        self._add(
            RunStarted,
            goal=self.goal,
            agent=spec.name,
            agent_ref=self._agent_ref,
            spec_digest=spec.digest,
            instructions=spec.instructions,
            model=self._model.name,
            tools=spec.tool_names,
            output_schema=spec.output.schema,
            limits=spec.limits,
            parent_run_id=self._parent_run_id,
            tags=self._tags,
        )

    def _elapsed(self) -> float:
        return self._monotonic() - self._t0

    def _remaining(self) -> float | None:
        deadline = self._deadline
        return None if deadline is None else max(0.0, deadline - self._monotonic())

    def _check_cancel(self) -> None:
        if self._cancel_reason is not None:
            raise _Cancelled

    def _check_limits(self) -> _Stop | None:
        """Before a model call: is any limit reached?"""
        self._check_cancel()
        limits, st = self._spec.limits, self._state
        if st.retries > limits.max_retries:
            return _Stop("budget_exhausted", "max_retries", st.retries, limits.max_retries, True)
        remaining = self._remaining()
        if remaining is not None and remaining <= 0:
            assert limits.max_seconds is not None
            return _Stop("budget_exhausted", "max_seconds", self._elapsed(), limits.max_seconds)
        if limits.max_tokens is not None:
            tokens = st.input_tokens + st.output_tokens
            if tokens >= limits.max_tokens:
                return _Stop("budget_exhausted", "max_tokens", tokens, limits.max_tokens)
        if limits.max_cost is not None and st.cost is not None and st.cost >= limits.max_cost:
            return _Stop("budget_exhausted", "max_cost", st.cost, limits.max_cost)
        if st.steps >= limits.max_steps:
            return _Stop("budget_exhausted", "max_steps", st.steps, limits.max_steps, True)
        if st.steps + 1 >= self._warn_steps_at and not self._warned_steps:
            self._warned_steps = True
            self._add(
                BudgetWarning,
                limit="max_steps",
                used=float(st.steps),
                maximum=float(limits.max_steps),
            )
        return None

    def _request(self, tool_choice: ToolChoice = "auto", *, final: bool = False) -> ModelRequest:
        spec, st = self._spec, self._state
        settings = spec.model_settings
        limits = spec.limits
        self._basis = self._journal.prev_hash
        if final:
            cap = limits.answer_max_tokens
            if settings.max_output_tokens is not None:
                cap = min(cap, settings.max_output_tokens)
            settings = replace(settings, max_output_tokens=cap)
        if limits.max_tokens is not None:
            left = max(1, limits.max_tokens - st.input_tokens - st.output_tokens)
            if settings.max_output_tokens is None or settings.max_output_tokens > left:
                settings = replace(settings, max_output_tokens=left)
        return ModelRequest(
            instructions=spec.instructions,
            messages=tuple(st.messages),
            tools=() if final else spec.definitions,
            tool_choice="none" if final else tool_choice,
            settings=settings,
        )

    def _request_digest(self, request: ModelRequest) -> str:
        """Commit to a request: the spec digest, its options, and the log prefix it came from.

        The request is a pure function of the agent's spec and the events before it, so the
        hash of the last of those events (taken when the request was built) pins its history.
        """
        digest = _digest_prefix(
            self._spec.digest, request.tool_choice, request.settings, len(request.tools)
        ).copy()
        digest.update(self._basis.encode())
        return digest.hexdigest()

    def _model_timeout(self, request: ModelRequest, *, now: float, final: bool) -> float | None:
        """The bound of one model request: its own timeout, the run's remaining time."""
        timeout = request.settings.timeout
        deadline = self._deadline
        remaining = None if deadline is None else max(0.0, deadline - now)
        if final:
            remaining = (
                _FINAL_ANSWER_SECONDS
                if remaining is None
                else min(remaining, _FINAL_ANSWER_SECONDS)
            )
        if remaining is not None and (timeout is None or remaining < timeout):
            timeout = remaining
        return timeout

    async def _call_model(self, request: ModelRequest, *, final: bool, now: float) -> ModelResponse:
        """One model request, bounded by the run's remaining time (``now``: monotonic)."""
        model = self._model
        if model.real:
            check_model_requests_allowed(model)
        return await self._bounded(
            model.request(request), self._model_timeout(request, now=now, final=final)
        )

    def _settle(self) -> Literal["timeout", "cancel", "tool", "external"]:
        """Classify a CancelledError just raised by one of the run's awaits.

        ``timeout``: the watchdog's deadline; ``cancel``: ``cancel()``; both are withdrawn
        from the task. ``tool``: nobody cancelled the task: the awaited code raised it itself.
        ``external``: the task's owner cancelled it (perhaps as well): it must propagate,
        the rule ``asyncio.timeout`` follows.
        """
        task = self._task
        watchdog = self._watchdog
        assert task is not None
        assert watchdog is not None
        own = self._cancel_requests + (1 if watchdog.expired else 0)
        pending = task.cancelling()
        if pending == 0:
            return "tool"
        for _ in range(min(own, pending)):  # withdraw ours, so an outer timeout counts right
            task.uncancel()
        self._cancel_requests = 0
        expired = watchdog.expired
        watchdog.expired = False
        if own == 0 or pending > own:
            return "external"
        if self._cancel_reason is not None:
            return "cancel"
        return "timeout" if expired else "external"

    def _model_failed(self, exc: Exception, step: int) -> _Stop | _Retry:
        """Record a failed model request; decide whether to retry, stop or fail."""
        limits = self._spec.limits
        remaining = self._remaining()
        if isinstance(exc, TimeoutError) and remaining is not None and remaining <= 0:
            self._add(
                ModelFailed,
                step=step,
                model=self._model.name,
                error=ErrorInfo(
                    type="TimeoutError", message="the run's time ran out during the request"
                ),
                transient=False,
                attempt=self._state.model_failures + 1,
                will_retry=False,
            )
            return self._time_stop()
        transient = isinstance(exc, TimeoutError) or (isinstance(exc, ModelError) and exc.transient)
        attempt = self._state.model_failures + 1
        retry = transient and attempt <= limits.max_retries
        delay = self._spec.backoff.delay(attempt) if retry else 0.0
        if retry and remaining is not None and delay >= remaining:
            retry = False
        info = _error_info(exc, "the model request timed out")
        self._add(
            ModelFailed,
            step=step,
            model=self._model.name,
            error=info,
            transient=transient,
            attempt=attempt,
            will_retry=retry,
            retry_in_s=delay,
        )
        if retry:
            return _Retry(delay)
        if transient:
            return _Stop(
                "budget_exhausted", "max_retries", attempt, limits.max_retries, False, info
            )
        return _Stop("failed", error=info)

    async def _bounded(self, awaitable: Awaitable[T], timeout: float | None) -> T:
        """Await on the run's task, interruptible by ``cancel()``; past ``timeout``: TimeoutError."""
        watchdog = self._watchdog
        assert watchdog is not None
        watchdog.arm(timeout)
        self._interruptible = True
        try:
            return await awaitable
        except asyncio.CancelledError as exc:
            match self._settle():
                case "timeout":
                    raise TimeoutError from None
                case "cancel":
                    raise _Cancelled from None
                case "tool":
                    raise RuntimeError(f"the awaited call raised CancelledError: {exc}") from None
                case "external":
                    raise
        finally:
            self._interruptible = False
            watchdog.disarm()

    async def _ask_model(self, request: ModelRequest) -> ModelResponse | _Stop | _Retry:
        """One attempt at this turn's model request.

        Returns the response (recorded as ``model_responded``), a ``_Stop``, or a ``_Retry``
        with the back-off before the next attempt (the failure is recorded as ``model_failed``).
        The await is bounded by the watchdog here rather than through ``_bounded``: this is
        the one await of a step that suspends, and every frame on it is paid twice.
        """
        step = self._state.steps + 1
        t0 = self._monotonic()
        model = self._model
        if model.real:
            check_model_requests_allowed(model)
        watchdog = self._watchdog
        assert watchdog is not None
        watchdog.arm(self._model_timeout(request, now=t0, final=False))
        self._interruptible = True
        try:
            response = await model.request(request)
        except asyncio.CancelledError as exc:
            match self._settle():
                case "timeout":
                    return self._model_failed(TimeoutError(), step)
                case "cancel":
                    raise _Cancelled from None
                case "tool":
                    return self._model_failed(RuntimeError(f"raised CancelledError: {exc!r}"), step)
                case "external":
                    raise
        except UserError:
            raise
        except Exception as exc:
            return self._model_failed(exc, step)
        finally:
            self._interruptible = False
            watchdog.disarm()
        if not isinstance(response, ModelResponse):  # pyright: ignore[reportUnnecessaryIsInstance] - adapters are user code
            return self._model_failed(
                TypeError(f"the model returned {type(response).__name__}, not a ModelResponse"),
                step,
            )
        calls = response.tool_calls
        seen = self._state.call_ids
        if len(calls) > 1 or (calls and (not calls[0].id or calls[0].id in seen)):
            calls = _unique_ids(calls, step, seen)
            if calls is not response.tool_calls:
                response = replace(response, tool_calls=calls)
        self._add(
            ModelResponded,
            step=step,
            model=self._model.name,
            request_digest=self._request_digest(request),
            text=response.text,
            reasoning=response.reasoning,
            tool_calls=calls,
            usage=response.usage,
            latency_s=self._monotonic() - t0,
        )
        return response

    async def _sleep(self, seconds: float) -> None:
        if seconds <= 0:
            return
        self._interruptible = True
        try:
            await asyncio.sleep(seconds)
        except asyncio.CancelledError:
            if self._settle() == "cancel":
                raise _Cancelled from None
            raise
        finally:
            self._interruptible = False

    def _time_stop(self) -> _Stop:
        limits = self._spec.limits
        return _Stop("budget_exhausted", "max_seconds", self._elapsed(), limits.max_seconds or 0.0)

    # -- one turn's tool calls ----------------------------------------------------------

    def _plan(self, response: ModelResponse) -> list[_Planned]:  # noqa: C901 - a flat decision table
        """Record intent and decide, for every call of the turn, what happens to it."""
        add, spec = self._add, self._spec
        calls = response.tool_calls
        if not calls:
            self._runnable = 0
            return []
        reason = response.text or None
        for call in calls:
            add(
                ToolCallRequested,
                call_id=call.id,
                tool=call.name,
                arguments=call.arguments,
                reason=reason,
            )
        budget = spec.limits.max_tool_calls - self._state.tool_calls
        runnable = 0
        planned: list[_Planned] = []
        finishing = False
        for call in calls:
            item = _Planned(call)
            planned.append(item)
            name = call.name
            if finishing:  # finish_task ends the turn: what comes after it does not run
                item.synthetic = ToolResult.error("not executed: finish_task came before this call")
                item.error_type = "after_finish"
                continue
            if call.parse_error is not None:
                item.synthetic = ToolResult.error(
                    f"the arguments are not a JSON object: {call.parse_error}"
                )
                item.error_type = "invalid_arguments"
                continue
            if name == FINISH_TASK:
                definition = spec.finish_definition
                try:
                    item.output = spec.output.validate(call.arguments)
                except ModelRetry as exc:
                    item.synthetic, item.error_type = (
                        ToolResult.error(exc.message),
                        "invalid_output",
                    )
                    continue
                except Exception as exc:  # an output type's own validator failed
                    message = f"invalid output: {type(exc).__name__}: {exc}"
                    item.synthetic, item.error_type = ToolResult.error(message), "invalid_output"
                    continue
                item.finish = True
            elif name == ASK_USER and spec.can_ask_user:
                assert spec.ask_user is not None
                definition = spec.ask_user
                question = call.arguments.get("question")
                if not isinstance(question, str) or not question:
                    item.synthetic = ToolResult.error(
                        "invalid arguments: 'question' must be a non-empty string"
                    )
                    item.error_type = "invalid_arguments"
                    continue
                item.question = question
            else:
                tool = spec.registry.get(name)
                if tool is None:
                    item.synthetic = ToolResult.error(
                        f"there is no tool named {name!r}; the tools are: {', '.join(spec.tool_names)}"
                    )
                    item.error_type = "unknown_tool"
                    continue
                try:
                    item.arguments = tool.validator(call.arguments)
                except ModelRetry as exc:
                    item.synthetic, item.error_type = (
                        ToolResult.error(exc.message),
                        "invalid_arguments",
                    )
                    continue
                except Exception as exc:  # a broken validator is the tool's fault, not the run's
                    item.synthetic, item.error_type = tool_error(tool, exc, None)
                    continue
                if budget <= 0:
                    item.synthetic = ToolResult.error(
                        f"not executed: the run's limit of {spec.limits.max_tool_calls} tool calls is reached"
                    )
                    item.error_type = "limit"
                    continue
                definition = tool.definition
                item.tool = tool
            try:
                decision = spec.policy.decide(call, definition, self._journal.events)
            except Exception as exc:  # a policy that cannot decide denies: fail closed
                decision = PolicyDecision(
                    decision="deny",
                    rule="policy_error",
                    reason=f"the policy failed ({type(exc).__name__}: {exc}); the call is denied",
                    stop_run=True,
                )
            add(
                PolicyDecided,
                call_id=call.id,
                tool=name,
                decision=decision.decision,
                rule=decision.rule,
                reason=decision.reason,
            )
            if decision.decision == "allow":
                if item.tool is not None:
                    budget -= 1
                    runnable += 1
                finishing = finishing or item.finish
            elif decision.decision == "deny":
                item.tool, item.finish, item.question = None, False, None
                item.synthetic = ToolResult.error(
                    f"denied by policy ({decision.rule}): {decision.reason}"
                )
                item.error_type = "denied"
                if decision.stop_run:
                    item.stop_reason = f"{decision.rule}: {decision.reason}"
            else:
                item.tool, item.finish, item.question = None, False, None
                item.awaiting_approval = True
                add(
                    ApprovalRequested,
                    call_id=call.id,
                    tool=name,
                    arguments=call.arguments,
                    arguments_hash=hashlib.sha256(canonical_json(call.arguments)).hexdigest(),
                )
        self._runnable = runnable
        return planned

    async def _execute_inline(self, planned: list[_Planned]) -> None:
        """Record every result of a turn with at most one call to run (the common case)."""
        for item in planned:
            if item.tool is not None:
                result, error_type, duration = await self._run_one(item)
                self._record_result(item, result, error_type, duration)
            else:
                self._record_planned(item, planned)

    async def _execute_parallel(self, planned: list[_Planned]) -> AsyncIterator[Event]:
        """Run the allowed calls concurrently (capped) and commit each result in call order."""
        semaphore = asyncio.Semaphore(self._spec.limits.max_parallel_tools)

        async def guarded(item: _Planned) -> tuple[ToolResult, str | None, float]:
            async with semaphore:
                return await self._run_one(item, child=True)

        tasks = {id(p): asyncio.ensure_future(guarded(p)) for p in planned if p.tool is not None}
        try:
            for item in planned:
                task = tasks.get(id(item))
                if task is not None:
                    self._interruptible = True
                    try:
                        result, error_type, duration = await task
                    except asyncio.CancelledError:
                        how = self._settle()
                        self._record_done_siblings(planned, tasks)
                        if how == "cancel":
                            raise _Cancelled from None
                        raise
                    finally:
                        self._interruptible = False
                    self._record_result(item, result, error_type, duration)
                else:
                    self._record_planned(item, planned)
                if self._journal.has_pending:
                    for event in await self._journal.commit():
                        yield event
        finally:
            pending = [t for t in tasks.values() if not t.done()]
            for task in pending:
                task.cancel()
            if pending:
                await asyncio.gather(*pending, return_exceptions=True)

    def _record_done_siblings(
        self,
        planned: list[_Planned],
        tasks: Mapping[int, asyncio.Future[tuple[ToolResult, str | None, float]]],
    ) -> None:
        """On cancellation: keep the real results of calls that did finish.

        They may come out of call order here (an earlier call is still running); a truthful
        log matters more than the order, and each result still answers exactly one call.
        """
        for item in planned:
            if item.call.id not in self._state.pending:
                continue
            task = tasks.get(id(item))
            if task is None or not task.done() or task.cancelled() or task.exception() is not None:
                continue
            result, error_type, duration = task.result()
            self._in_flight.discard(item.call.id)
            self._record_result(item, result, error_type, duration)

    async def _run_one(
        self, item: _Planned, *, child: bool = False
    ) -> tuple[ToolResult, str | None, float]:
        """Run one allowed call; ``child`` when it runs in its own task (parallel calls)."""
        tool = item.tool
        assert tool is not None
        assert item.arguments is not None
        limits = self._spec.limits
        timeout = tool.timeout if tool.timeout is not None else limits.tool_timeout
        t0 = self._monotonic()
        deadline = self._deadline
        if deadline is not None:
            remaining = max(0.0, deadline - t0)
            if timeout is None or remaining < timeout:
                timeout = remaining
        ctx = (
            ToolContext(run_id=self.run_id, call_id=item.call.id, tool=tool.name)
            if tool.takes_context or self._tool_runner is not run_tool
            else _NO_CONTEXT
        )
        self._in_flight.add(item.call.id)
        runner = self._tool_runner
        if child:
            try:
                result, error_type = await runner(tool, item.call, ctx, item.arguments, timeout)
            except Exception as exc:  # a custom runner failed; the run must not
                result, error_type = tool_error(tool, exc, None)
        else:  # on the run's task: bounded by the watchdog (see _ask_model)
            watchdog = self._watchdog
            assert watchdog is not None
            watchdog.arm(timeout)
            self._interruptible = True
            try:
                if runner is run_tool:
                    result = await tool.handler(ctx, item.arguments)
                    error_type = "tool_error" if result.is_error else None
                else:
                    result, error_type = await runner(tool, item.call, ctx, item.arguments, None)
            except asyncio.CancelledError as exc:
                match self._settle():
                    case "timeout":
                        result, error_type = tool_error(tool, TimeoutError(), timeout)
                    case "cancel":
                        raise _Cancelled from None
                    case "tool":
                        result, error_type = tool_error(tool, RuntimeError(repr(exc)), None)
                    case "external":
                        raise
            except Exception as exc:  # the tool, or a custom runner, failed; the run must not
                result, error_type = tool_error(tool, exc, None)
            finally:
                self._interruptible = False
                watchdog.disarm()
        self._in_flight.discard(item.call.id)
        return result, error_type, self._monotonic() - t0

    def _record_result(
        self, item: _Planned, result: ToolResult, error_type: str | None, duration: float
    ) -> None:
        self._add(
            ToolCallFinished,
            call_id=item.call.id,
            tool=item.call.name,
            content=result.content,
            structured=result.structured,
            is_error=result.is_error,
            error_type=error_type,
            duration_s=duration,
        )

    def _record_planned(self, item: _Planned, planned: list[_Planned]) -> None:
        """Results tether writes itself: errors, and the answer to ``finish_task``."""
        if item.synthetic is not None:
            result, error_type = item.synthetic, item.error_type
        elif item.finish and any(p.awaiting_approval for p in planned):
            item.finish = False
            result = ToolResult.error(
                "finish_task not accepted: other calls of this turn await approval"
            )
            error_type = "invalid_output"
        elif item.finish:
            result, error_type = ToolResult(content=(TextBlock(text="done"),)), None
        else:
            return  # ask_user: answered later by the user
        self._add(
            ToolCallFinished,
            call_id=item.call.id,
            tool=item.call.name,
            content=result.content,
            structured=result.structured,
            is_error=result.is_error,
            error_type=error_type,
            synthetic=item.finish is False,
        )

    def _after_turn(self, planned: list[_Planned]) -> _Stop | None:
        """After a turn's results: finished, waiting, or go on?"""
        if not planned:
            return self._no_tool_call()
        waiting = asking = limited = False
        for item in planned:
            if item.stop_reason is not None:
                return _Stop(
                    "policy_denied", error=ErrorInfo(type="PolicyDenied", message=item.stop_reason)
                )
        for item in planned:
            if item.finish:
                self._output = cast(OutputT, item.output)
                return _Stop("finished")
            waiting = waiting or item.awaiting_approval
            asking = asking or item.question is not None
            limited = limited or item.error_type == "limit"
        if waiting:
            return _Stop("waiting_for_approval")
        if asking:
            return _Stop("waiting_for_user")
        if limited:
            maximum = self._spec.limits.max_tool_calls
            return _Stop(
                "budget_exhausted", "max_tool_calls", self._state.tool_calls, maximum, True
            )
        self._check_cancel()
        return None

    def _no_tool_call(self) -> _Stop | None:
        """The model answered without calling a tool."""
        spec, st = self._spec, self._state
        last = st.messages[-1]
        text = last.text if last.kind == "assistant" else ""
        if spec.output.is_text and text.strip():
            self._output = cast(OutputT, text)
            return _Stop("finished")
        why = (
            "Your reply was empty. Call a tool, or call finish_task with the result."
            if not text.strip()
            else "Call finish_task with the result in its arguments; a plain reply does not end the task."
        )
        self._add(RetryPrompted, reason="no_tool_call", text=why)
        return None

    # -- ending ----------------------------------------------------------------------------

    def _close_pending(
        self, reason: str, error_type: str, *, interrupted: str | None = None
    ) -> None:
        """Give every call still without a result a synthetic one (protocol validity).

        A call that had started gets ``interrupted`` instead: it may have had some effect.
        """
        for call in list(self._state.pending.values()):
            text = reason
            if interrupted is not None and call.id in self._in_flight:
                text = f"{interrupted} while the tool was running; it may have had partial effects"
            self._add(
                ToolCallFinished,
                call_id=call.id,
                tool=call.name,
                content=(TextBlock(text=text),),
                is_error=True,
                error_type=error_type,
                synthetic=True,
            )

    async def _stop(self, stop: _Stop) -> AsyncIterator[Event]:
        st = self._state
        answer: str | None = None
        question: str | None = None
        if stop.status == "budget_exhausted":
            async for event in self._best_effort(stop):
                yield event
            answer = st.last_text or None
        elif stop.status == "finished":
            answer = self._spec.output.as_text(cast(OutputT, self._output))
        elif stop.status == "waiting_for_user":
            question = next(
                (
                    str(c.arguments.get("question", ""))
                    for c in st.pending.values()
                    if c.name == ASK_USER
                ),
                None,
            )
            answer = st.last_text or None
        else:
            answer = st.last_text or None
        if stop.status in ("finished", "failed", "policy_denied"):
            self._close_pending(f"not executed: the run ended ({stop.status})", "run_ended")
        self._add(
            RunFinished,
            status=stop.status,
            output=self._spec.output.dump(cast(OutputT, self._output))
            if stop.status == "finished"
            else None,
            answer=answer,
            error=stop.error,
            limit=stop.limit,
            question=question,
            usage=st.usage,
            steps=st.steps,
            tool_calls=st.tool_calls,
        )
        for event in await self._journal.commit():
            yield event
        self._finish_outcome()

    async def _best_effort(self, stop: _Stop) -> AsyncIterator[Event]:
        """Record the limit and, where budget allows, ask once for a tool-free answer."""
        assert stop.limit is not None
        self._close_pending(f"not executed: the run reached its limit ({stop.limit})", "limit")
        remaining = self._remaining()
        ask = (
            stop.ask_for_answer
            and self._state.steps > 0  # nothing was done: there is nothing to summarise
            and (remaining is None or remaining > 0)
        )
        self._add(
            LimitReached,
            limit=stop.limit,
            used=float(stop.used),
            maximum=float(stop.maximum),
            ask_for_answer=ask,
        )
        for event in await self._journal.commit():
            yield event
        if not ask:
            return
        request = self._request(final=True)
        t0 = self._monotonic()
        try:
            response = await self._call_model(request, final=True, now=t0)
        except _Cancelled:
            raise
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            self._add(
                ModelFailed,
                step=self._state.steps,
                model=self._model.name,
                error=_error_info(exc, "the best-effort answer timed out"),
                transient=False,
                attempt=1,
                will_retry=False,
            )
        else:
            self._add(
                ModelResponded,
                step=self._state.steps,
                model=self._model.name,
                request_digest=self._request_digest(request),
                text=response.text,
                reasoning=response.reasoning,
                tool_calls=response.tool_calls,
                usage=response.usage,
                latency_s=self._monotonic() - t0,
                final=True,
            )
            self._close_pending("not executed: the run is over; answer without tools", "run_ended")
        for event in await self._journal.commit():
            yield event

    async def _end_quietly(
        self, status: RunStatus, reason: str, *, error: BaseException | None = None
    ) -> None:
        """Record the end of a run from an exception path (nothing may be yielded here)."""
        if self._state.finished is not None:
            return
        try:
            if status == "cancelled":
                self._cancel_reason = self._cancel_reason or reason
                self._record_cancel()
            else:
                self._close_pending(f"not executed: the run failed ({reason})", "run_ended")
                st = self._state
                info = ErrorInfo(type=type(error).__name__ if error else "Error", message=reason)
                self._add(
                    RunFinished,
                    status=status,
                    answer=st.last_text or None,
                    error=info,
                    usage=st.usage,
                    steps=st.steps,
                    tool_calls=st.tool_calls,
                )
            await self._journal.commit()
            self._finish_outcome()
        except Exception:
            pass

    def _record_cancel(self) -> None:
        if self._state.finished is not None:
            return
        reason = self._cancel_reason or "cancelled"
        self._close_pending(
            f"not executed: {reason}", "cancelled", interrupted=f"interrupted: {reason}"
        )
        st = self._state
        self._add(
            RunFinished,
            status="cancelled",
            answer=st.last_text or None,
            error=ErrorInfo(type="Cancelled", message=reason),
            usage=st.usage,
            steps=st.steps,
            tool_calls=st.tool_calls,
        )

    def _finish_outcome(self) -> None:
        st = self._state
        fin = st.finished
        assert fin is not None
        assert st.started_at is not None
        pending: tuple[PendingCall, ...] = ()
        if fin.status == "waiting_for_approval":
            events = self._journal.events
            approved = {e.call_id for e in events if e.kind == "approval_given"}
            pending = tuple(
                PendingCall(call_id=e.call_id, tool=e.tool, arguments=dict(e.arguments))
                for e in events
                if isinstance(e, ApprovalRequested) and e.call_id not in approved
            )
        if fin.status == "finished" and self._output is None and fin.output is not None:
            self._output = self._spec.output.load(fin.output)  # a run that had ended before
        self._outcome = RunOutcome(
            run_id=self.run_id,
            status=fin.status,
            output=self._output if fin.status == "finished" else None,
            answer=fin.answer,
            usage=fin.usage,
            steps=fin.steps,
            tool_calls=fin.tool_calls,
            events=tuple(self._journal.events),
            started_at=st.started_at,
            finished_at=fin.at,
            error=fin.error,
            limit=fin.limit,
            question=fin.question,
            pending=pending,
        )


def _error_info(exc: BaseException, timeout_message: str) -> ErrorInfo:
    if isinstance(exc, TimeoutError) and not str(exc):
        return ErrorInfo(type="TimeoutError", message=timeout_message)
    return ErrorInfo(type=type(exc).__name__, message=str(exc) or type(exc).__name__)
