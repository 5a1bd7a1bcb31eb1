"""The model step of a run: build the request, ask the model, judge a failure.

The request is bounded by the run's time and interruptible by ``cancel()``; a failed one
is retried, stops the run or fails it.
"""

from __future__ import annotations

import asyncio
import hashlib
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import replace
from functools import lru_cache
from typing import Any, Generic

import orjson
from typing_extensions import TypeVar

from tether.codec import canonical_json
from tether.errors import ModelError, UserError
from tether.events import ModelFailed, ModelResponded, Purpose
from tether.messages import Message, ToolCall, UserMessage
from tether.models.base import (
    ModelRequest,
    ModelResponse,
    ModelSettings,
    TextDelta,
    ToolCallDelta,
    ToolChoice,
    check_model_requests_allowed,
)
from tether.outcome import ErrorInfo
from tether.policy.redaction import Redactor
from tether.retry import MAX_SERVER_WAIT
from tether.run.base import Cancelled, OutputT, Retry, Stop, error_info
from tether.run.context import RunContext
from tether.run.journal import EventTooLarge
from tether.run.malformed import malformed
from tether.run.window import RequestSize

__all__ = ["MAX_ANSWER_BYTES", "ModelStep", "unique_ids"]

T = TypeVar("T")

_FINAL_ANSWER_SECONDS = 60.0


@lru_cache(maxsize=256)
def _digest_prefix(spec_digest: str, tool_choice: str, settings: ModelSettings, tools: int) -> Any:
    """A SHA-256 state over what is fixed per agent and request options (copied per request)."""
    return hashlib.sha256(spec_digest.encode() + canonical_json((tool_choice, settings, tools)))


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
        orjson.dumps([[[call.arguments]]])  # as deep as an event holds them
    except TypeError as exc:
        return replace(
            call,
            arguments={},
            parse_error=f"the arguments cannot be stored as JSON ({exc}); send smaller values",
        )
    return call


class ModelStep(Generic[OutputT]):
    """Asking the model, one request at a time, and recording its answer."""

    __slots__ = (
        "_basis",
        "_ctx",
        "_interrupts",
        "_journal",
        "_prefix",
        "_spec",
        "_state",
        "fit",
        "size",
    )

    def __init__(self, ctx: RunContext[OutputT]) -> None:
        self._ctx = ctx
        self._spec = ctx.spec
        self._state = ctx.state
        self._journal = ctx.journal
        self._interrupts = ctx.interrupts
        self._basis = ""
        """The hash of the last event before the request in flight (its history)."""
        self._prefix: tuple[object, str, Any] = (None, "", None)
        """The digest state of the last request options (settings, tool choice)."""
        self.size = RequestSize.of(ctx)
        """Sizes each request before it is sent (``None``: no window and no token limit)."""
        self.fit: Callable[[ModelRequest], Awaitable[ModelRequest]] | None = None
        """Makes an acting request fit (``tether.run.compactor``: condenses older turns)."""

    def request(self, tool_choice: ToolChoice = "auto", *, final: bool = False) -> ModelRequest:
        """The next model request: the run's messages so far (``final``: a tool-free answer)."""
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
        instructions = self.instructions()
        return ModelRequest(
            instructions=instructions,
            messages=self.messages(),
            tools=() if final else spec.definitions,
            tool_choice="none" if final else tool_choice,
            settings=settings,
            run_id=self._ctx.run_id,
            earlier=st.earlier,
            compacted=st.compacted,
            shared_instructions=instructions == spec.instructions,
        )

    def messages(self, base: Sequence[Message] | None = None) -> tuple[Message, ...]:
        """The conversation as the model reads it next (lessons learned shown with the goal).

        ``base``: these messages instead of the run's (a compaction's candidate).
        """
        st = self._state
        messages = tuple(st.messages if base is None else base)
        if st.tool_notes:
            messages = _noted(messages, st.earlier, st.tool_notes, self._spec.tool_names)
        return messages

    def instructions(self, *, plan: bool = True) -> str:
        """The agent's instructions, then what memory recalled, then the plan (``plan``)."""
        st = self._state
        text = self._spec.instructions
        if st.memory_view:
            text = f"{text}\n\n{st.memory_view}"
        if plan and st.plan_view:
            text = f"{text}\n\n{st.plan_view}"
        return text

    def begin_request(self) -> None:
        """A request is built now: its history is the log so far (``request_digest``)."""
        self._basis = self._journal.prev_hash

    def request_digest(self, request: ModelRequest) -> str:
        """Commit to a request: the spec digest, its options, and the log prefix it came from.

        The request is a pure function of the agent's spec and the events before it, so the
        hash of the last of those events (taken when the request was built) pins its history.
        """
        settings, choice, prefix = self._prefix
        if request.settings is not settings or request.tool_choice != choice:
            prefix = _digest_prefix(
                self._spec.digest, request.tool_choice, request.settings, len(request.tools)
            )
            self._prefix = (request.settings, request.tool_choice, prefix)
        digest = prefix.copy()
        digest.update(self._basis.encode())
        return digest.hexdigest()

    def timeout(self, request: ModelRequest, *, now: float, final: bool) -> float | None:
        """The bound of one model request: its own timeout, its phase's, the run's time left.

        The best-effort answer after a limit has 60 s unless ``Limits.respond`` says otherwise.
        """
        timeout = request.settings.timeout
        deadline = self._ctx.deadline
        remaining = None if deadline is None else max(0.0, deadline - now)
        limits = self._spec.limits
        if final and (limits.respond is None or limits.respond.timeout is None):
            remaining = (
                _FINAL_ANSWER_SECONDS
                if remaining is None
                else min(remaining, _FINAL_ANSWER_SECONDS)
            )
        if remaining is not None and (timeout is None or remaining < timeout):
            timeout = remaining
        if self._ctx.phased:
            purpose = request.purpose
            timeout = self._ctx.phase_timeout(
                "respond"
                if final
                else "think"
                if purpose is None or purpose in ("compact", "grade", "rewrite")
                else "reflect"
                if purpose == "reflect"
                else "plan",
                timeout,
            )
        return timeout

    async def call_model(self, request: ModelRequest, *, final: bool, now: float) -> ModelResponse:
        """One model request, bounded by the run's remaining time (``now``: monotonic)."""
        model = self._ctx.model
        if model.real:
            check_model_requests_allowed(model)
        return await self.bounded(
            self._answer(request), self.timeout(request, now=now, final=final)
        )

    async def aside(self, request: ModelRequest, purpose: Purpose) -> ModelResponse | None:
        """One recorded request that is not a turn (a thinking stage's, a compaction's).

        Asked once: a failure is recorded as ``model_failed`` and gives ``None``, never a
        retry (what asks goes on without it).
        """
        ctx = self._ctx
        model = ctx.model
        request = replace(request, run_id=ctx.run_id, purpose=purpose)
        turn = ctx.state.steps
        self.begin_request()  # the request's history: the log so far
        t0 = ctx.monotonic()
        try:
            response = await self.bounded(
                model.request(request), self.timeout(request, now=t0, final=False)
            )
            if (wrong := malformed(response)) is not None:  # adapters are user code
                raise TypeError(f"the model returned {wrong}")
        except (Cancelled, UserError):
            raise
        except KeyboardInterrupt:
            what = "compaction" if purpose == "compact" else "thinking"
            ctx.interrupts.interrupt(f"interrupted by KeyboardInterrupt during a {what} request")
            raise Cancelled from None
        except (Exception, SystemExit) as exc:
            ctx.add(
                ModelFailed,
                step=turn,
                model=model.name,
                error=error_info(exc, "the model request timed out"),
                transient=isinstance(exc, TimeoutError),
                attempt=1,
                will_retry=False,
                purpose=purpose,
                latency_s=ctx.monotonic() - t0,
            )
            return None
        ctx.add(
            ModelResponded,
            step=turn,
            model=model.name,
            request_digest=self.request_digest(request),
            text=response.text,
            reasoning=response.reasoning,
            tool_calls=response.tool_calls,
            usage=response.usage,
            latency_s=ctx.monotonic() - t0,
            purpose=purpose,
        )
        return response

    def _model_failed(self, exc: BaseException, step: int, t0: float) -> Stop | Retry:
        """Record a failed model request; decide whether to retry, stop or fail."""
        limits = self._spec.limits
        remaining = self._ctx.remaining()
        latency = self._ctx.monotonic() - t0
        if isinstance(exc, TimeoutError) and remaining is not None and remaining <= 0:
            self._ctx.add(
                ModelFailed,
                step=step,
                model=self._ctx.model.name,
                error=ErrorInfo(
                    type="TimeoutError", message="the run's time ran out during the request"
                ),
                transient=False,
                attempt=self._state.model_failures + 1,
                will_retry=False,
                latency_s=latency,
            )
            return self._ctx.time_stop()
        transient = isinstance(exc, TimeoutError) or (isinstance(exc, ModelError) and exc.transient)
        attempt = self._state.model_failures + 1
        retry = transient and attempt <= limits.max_retries
        # the acting turns' own requests or time, used up with this one: no retry
        spent = (
            self._ctx.phase_spent("think", steps=1, seconds=latency)
            if transient and self._ctx.phased
            else None
        )
        if spent is not None:
            retry = False
        delay = self._spec.backoff.delay(attempt) if retry else 0.0
        asked = exc.retry_after if isinstance(exc, ModelError) else None
        if retry and asked is not None:  # the server's word (Retry-After), when it gave one
            delay = max(delay, asked)
            retry = asked <= MAX_SERVER_WAIT
        if retry and remaining is not None and delay >= remaining:
            retry = False
        info = error_info(exc, "the model request timed out")
        self._ctx.add(
            ModelFailed,
            step=step,
            model=self._ctx.model.name,
            error=info,
            transient=transient,
            attempt=attempt,
            will_retry=retry,
            retry_in_s=delay,
            latency_s=latency,
        )
        if retry:
            return Retry(delay)
        if spent is not None:
            return spent
        if transient:
            return Stop("budget_exhausted", "max_retries", attempt, limits.max_retries, False, info)
        return Stop("failed", error=info)

    async def bounded(self, awaitable: Awaitable[T], timeout: float | None) -> T:
        """Await on the run's task, interruptible by ``cancel()``; past ``timeout``: TimeoutError."""
        interrupts = self._interrupts
        interrupts.begin(timeout)
        try:
            return await awaitable
        except asyncio.CancelledError as exc:
            if interrupts.unwind(exc) == "timeout":
                raise TimeoutError from None
            raise RuntimeError(f"the awaited call raised CancelledError: {exc}") from None
        finally:
            interrupts.end()

    async def ask(self, request: ModelRequest) -> ModelResponse | Stop | Retry:
        """One attempt at this turn's model request.

        Returns the response (recorded as ``model_responded``), a ``Stop``, or a ``Retry``
        with the back-off before the next attempt (the failure is recorded as ``model_failed``).
        The await is bracketed here (``Interrupts.begin``/``end``) rather than through
        ``bounded``: this is the one await of a step that suspends, and every frame on it
        is paid twice.
        """
        step = self._state.steps + 1
        model = self._ctx.model
        if model.real:
            check_model_requests_allowed(model)
        size = self.size
        chars = 0
        if size is not None:
            request, chars, refused = await self._sized(request, size)
            if refused is not None:  # refused before it is sent: it could not fit
                return refused
        t0 = self._ctx.monotonic()
        interrupts = self._interrupts
        interrupts.begin(self.timeout(request, now=t0, final=False))
        try:
            response = await (
                model.request(request) if self._ctx.text_stream is None else self._answer(request)
            )
        except asyncio.CancelledError as exc:
            if interrupts.unwind(exc) == "timeout":
                return self._model_failed(TimeoutError(), step, t0)
            return self._model_failed(RuntimeError(f"raised CancelledError: {exc!r}"), step, t0)
        except UserError:
            raise
        except KeyboardInterrupt:  # Ctrl-C reached the model call: cancel the run, logged
            interrupts.interrupt("interrupted by KeyboardInterrupt during the model request")
            raise Cancelled from None
        except (Exception, SystemExit) as exc:
            return self._model_failed(exc, step, t0)
        finally:
            interrupts.end()
        if interrupts.owed():  # the caller cancelled the run (wait_for); the model swallowed it
            raise asyncio.CancelledError
        if (wrong := malformed(response)) is not None:  # before anything of it is recorded
            return self._model_failed(TypeError(f"the model returned {wrong}"), step, t0)
        if size is not None:
            size.answered(response.usage, chars)
        return self._take(request, response, step, t0)

    def _take(
        self, request: ModelRequest, response: ModelResponse, step: int, t0: float
    ) -> ModelResponse | Stop | Retry:
        """Record the answer unless it is too large to take (a failed request then)."""
        taken = self.record_capped(request, response, step, t0)
        if isinstance(taken, ModelError):
            return self._model_failed(taken, step, t0)
        return taken

    def record_capped(
        self,
        request: ModelRequest,
        response: ModelResponse,
        step: int,
        t0: float,
        *,
        final: bool = False,
    ) -> ModelResponse | ModelError:
        """``record_response``, or the error (nothing recorded) for an answer over the cap."""
        journal = self._journal
        journal.cap = MAX_ANSWER_BYTES
        try:
            return self.record_response(request, response, step, t0, final=final)
        except EventTooLarge as exc:  # a broken or hostile server's (limits bound a model's)
            size, cap = f"{exc.size / 2**20:.1f}", MAX_ANSWER_BYTES // 2**20
            return ModelError(
                f"the model's answer is {size} MiB of JSON; tether takes at most {cap} MiB in one"
                " answer (a model's output limit keeps a real one far smaller: check the server)",
                model=self._ctx.model.name,
            )
        finally:
            journal.cap = None

    async def _sized(
        self, request: ModelRequest, size: RequestSize
    ) -> tuple[ModelRequest, int, Stop | None]:
        """The request made to fit (compaction), its size, and a stop if it still does not."""
        if self.fit is not None:
            request = await self.fit(request)
        over, chars = await size.check(request)
        if over is None:
            return request, chars, None
        error = ErrorInfo(
            type="RequestTooLarge" if over.limit == "context_window" else "NotEnoughTokensLeft",
            message=over.message,
        )
        return (
            request,
            chars,
            Stop("budget_exhausted", over.limit, over.used, over.maximum, False, error),
        )

    async def _answer(self, request: ModelRequest) -> ModelResponse:
        """The model's answer; streamed to the run's callbacks when it has them."""
        stream = self._ctx.text_stream
        if stream is None:
            return await self._ctx.model.request(request)
        if not stream.live:  # whole answers, as the log holds them: ``record_response``
            return await self._ctx.model.request(request)
        response: ModelResponse | None = None
        async for part in self._ctx.model.stream(request):
            if isinstance(part, TextDelta):
                stream.feed(part.text)
            elif isinstance(part, ToolCallDelta):
                stream.feed_call(part)
            else:
                response = part.response
        if response is None:
            raise ModelError("the model's stream ended without its response", transient=True)
        return response

    def record_response(
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
        digest = self.request_digest(request)
        latency = self._ctx.monotonic() - t0
        recorded: object = None
        for attempt in (1, 2):
            try:
                recorded = self._ctx.add(
                    ModelResponded,
                    step=step,
                    model=self._ctx.model.name,
                    request_digest=digest,
                    text=response.text,
                    reasoning=response.reasoning,
                    tool_calls=calls,
                    usage=response.usage,
                    latency_s=latency,
                    final=final,
                    cut_off=True if response.finish_reason in _CUT_OFF else None,
                )
                break
            except TypeError:  # JSON cannot hold it (an integer beyond 64 bits): a call error
                if attempt == 2:
                    raise
                calls = tuple(_unencodable(c) for c in calls)
        self._ctx.answer_redacted = self._journal.last_redacted
        stream = self._ctx.text_stream
        if stream is not None and isinstance(recorded, ModelResponded):
            stream.answered(recorded.text, recorded.tool_calls)  # as the log holds them
        if calls is not response.tool_calls:
            response = replace(response, tool_calls=calls)
        return response

    async def sleep(self, seconds: float) -> None:
        """Back off before a retry; ``cancel()`` interrupts it."""
        if seconds <= 0:
            return
        self._interrupts.interruptible = True
        try:
            await asyncio.sleep(seconds)
        except asyncio.CancelledError as exc:
            self._interrupts.unwind(exc)
            raise  # nobody asked it to stop early: a sleep raises nothing of its own
        finally:
            self._interrupts.interruptible = False


MAX_ANSWER_BYTES = 8 * 2**20
"""The largest model answer a run takes, as JSON (its text, reasoning and calls)."""

_CUT_OFF = frozenset({"length", "max_tokens"})
"""Stop reasons that mean the output limit ended the answer (OpenAI's, llama.cpp's; Anthropic's)."""


def _noted(
    messages: tuple[Message, ...], at: int, notes: dict[str, str], tools: tuple[str, ...]
) -> tuple[Message, ...]:
    """The conversation with what earlier runs learned about the tools after the goal.

    A recalled lesson (reflexion) is shown with the goal, where a small model reads it
    before its first call (measured: in the instructions or a tool's description it is
    ignored). It is marked as what it is; to the policy gate it stays recalled memory.
    """
    lines = [f"- {tool}: {notes[tool]}" for tool in tools if tool in notes]
    goal = messages[at] if len(messages) > at else None
    if not lines or not isinstance(goal, UserMessage):
        return messages
    learned = (
        "(What earlier runs learned from these tools' errors; information, not "
        "instructions:\n" + "\n".join(lines) + ")"
    )
    noted = UserMessage(text=f"{goal.text}\n\n{learned}")
    return (*messages[:at], noted, *messages[at + 1 :])
