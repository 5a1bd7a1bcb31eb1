"""The loop: decide the next events from the log so far, commit them, repeat.

One turn: check the limits -> ask the model -> record its answer -> for each tool call record
the intent, validate, ask the policy -> commit (the intent is durable before anything runs)
-> run the allowed calls (in parallel up to a cap) -> record each result in call order ->
stop on ``finish_task``, a question for the user, pending approvals, or a limit.

Every exit is a ``run_finished`` event; nothing in the limit, cancel or failure paths raises
out of the run. The history sent to the model is always protocol-valid: every tool call the
model made gets exactly one result, synthetic when the tool did not run.

``AgentRun`` drives the turn; the work is done by collaborators over one shared
``RunContext`` (``tether.run.context``): the model step, the tool stage, approvals, endings
and recovery.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable, Sequence
from typing import TYPE_CHECKING, Any, Generic

import orjson
from typing_extensions import TypeVar

from tether._internal.clock import Clock
from tether.codec import decode_event, encode_event
from tether.errors import RunExists, RunNotFound, StoreError, UserError
from tether.events import Event, RunStarted
from tether.jsontypes import JsonObject
from tether.models.base import Model, check_model_requests_allowed
from tether.outcome import RunOutcome
from tether.policy.approvals import Approval
from tether.policy.redaction import Redactor
from tether.run.approving import Approving
from tether.run.base import Cancelled, OutputT, Planned, Retry, Stop, ToolRunner
from tether.run.budget import Budget, limit_stop
from tether.run.compactor import Compactor
from tether.run.consulting import Consultant
from tether.run.context import RunContext
from tether.run.endings import Endings
from tether.run.interrupts import drives_a_run
from tether.run.journal import StoreSink
from tether.run.loopmonitor import monitor
from tether.run.modelstep import ModelStep
from tether.run.recovery import Recovery
from tether.run.reflexion import Reflexion
from tether.run.relay import drained, relayed
from tether.run.remembering import Rememberer
from tether.run.sessions import Sessions
from tether.run.textstream import CallCallback, TextCallback
from tether.run.thinker import Thinker
from tether.run.toolcalls import ToolStage
from tether.run.toolexec import run_tool, tool_error
from tether.sinks import EventSink
from tether.stores.base import RunStore, default_owner
from tether.stores.kv import KeyValueStore

if TYPE_CHECKING:
    from tether.spec import AgentSpec

__all__ = ["AgentRun", "ToolRunner", "run_tool", "tool_error"]

_log = logging.getLogger("tether.loop")

_O = TypeVar("_O")

_SPEC_SEEN: dict[str, tuple[Redactor, str, bool]] = {}
"""Whether a spec's instructions, tools and output schema pass a redactor (by spec digest)."""


def _spec_seen(spec: AgentSpec[Any], redactor: Redactor | None, model: str) -> bool:
    """Whether ``redactor`` passes what every ``run_started`` of ``spec`` holds unchanged."""
    if redactor is None:
        return True
    known = _SPEC_SEEN.get(spec.digest)
    if known is not None and known[0] is redactor and known[1] == model:
        return known[2]  # the redactor is held here: its id cannot be another's
    constant = (
        spec.name,
        spec.instructions,
        model,
        spec.tool_names,
        spec.output.schema,
        spec.prompt,
        None if spec.thinking is None else spec.thinking.describe(),
    )
    clean = not redactor.might_match(orjson.dumps(constant))
    if len(_SPEC_SEEN) > 64:
        _SPEC_SEEN.clear()
    _SPEC_SEEN[spec.digest] = (redactor, model, clean)
    return clean


class AgentRun(Generic[OutputT]):
    """One run of an agent: iterate it for the events, then read ``outcome``.

    ``async for event in run`` drives the run; each event is yielded after it is committed.
    ``cancel()`` ends the run with ``cancelled`` (an in-flight model or tool call is
    interrupted). If the task iterating the run is cancelled by someone else, the run records
    ``cancelled`` and the ``CancelledError`` propagates, as asyncio expects.
    """

    @staticmethod
    def start(
        spec: AgentSpec[_O],
        goal: str,
        *,
        run_id: str,
        model: Model,
        clock: Clock,
        sinks: Sequence[EventSink] = (),
        context: JsonObject | None = None,
        on_text: TextCallback | None = None,
        on_call: CallCallback | None = None,
        agent_ref: str | None = None,
        tags: Sequence[str] = (),
        parent_run_id: str | None = None,
        tool_runner: ToolRunner = run_tool,
        store: RunStore | None = None,
        existing: bool = False,
        max_recoveries: int = 3,
        session: str | None = None,
        model_choice: JsonObject | None = None,
    ) -> AgentRun[_O]:
        """A new run of ``spec`` on ``goal``.

        With ``existing`` (the caller chose ``run_id``), a run the store already holds under
        that id is continued from its log, or its stored outcome returned, instead.
        """
        return AgentRun(
            RunContext(
                spec,
                goal,
                run_id=run_id,
                model=model,
                clock=clock,
                sinks=sinks,
                goal_context=context,
                on_text=on_text,
                on_call=on_call,
                agent_ref=agent_ref,
                tags=tags,
                parent_run_id=parent_run_id,
                tool_runner=tool_runner,
                store=store,
                existing=existing,
                max_recoveries=max_recoveries,
                session=session,
                model_choice=model_choice,
            )
        )

    @staticmethod
    def resuming(
        spec: AgentSpec[_O],
        run_id: str,
        *,
        model: Model,
        clock: Clock,
        store: RunStore,
        tool_runner: ToolRunner = run_tool,
        sinks: Sequence[EventSink] = (),
        on_text: TextCallback | None = None,
        on_call: CallCallback | None = None,
        answer: str | None = None,
        approvals: Sequence[Approval] = (),
        max_recoveries: int = 3,
    ) -> AgentRun[_O]:
        """The stored run ``run_id`` of ``spec``, continued.

        A run that crashed is repaired first; one waiting for the user gets ``answer``, one
        waiting for approvals gets ``approvals``.
        """
        return AgentRun(
            RunContext(
                spec,
                "",
                run_id=run_id,
                model=model,
                clock=clock,
                tool_runner=tool_runner,
                store=store,
                sinks=sinks,
                on_text=on_text,
                on_call=on_call,
                resume=True,
                answer=answer,
                approvals=approvals,
                max_recoveries=max_recoveries,
            )
        )

    def __init__(self, ctx: RunContext[OutputT]) -> None:
        """The run of ``ctx`` (use ``start`` or ``resuming``)."""
        self._ctx = ctx
        self.run_id = ctx.run_id
        self.goal = ctx.goal
        self._journal = ctx.journal
        self._step = ModelStep(ctx)
        compactor = Compactor.of(ctx, self._step)
        if compactor is not None:
            self._step.fit = compactor.fit
        self._tools = ToolStage(ctx)
        self._approving = Approving(ctx, self._tools)
        self._endings = Endings(ctx, self._step)
        self._recovery = Recovery(ctx, self._tools, self._approving)
        self._budget = Budget(
            ctx.spec.limits,
            ctx.spec.budget_warnings,
            state=ctx.state,
            warned=ctx.warned,
            add=ctx.add,
            elapsed=ctx.elapsed,
        )
        memory = ctx.spec.memory
        self._rememberer = None if memory is None else Rememberer(ctx, memory)
        self._endings.rememberer = self._rememberer
        store = ctx.store
        self._sessions = (
            Sessions(ctx, store, ctx.session) if isinstance(store, KeyValueStore) else None
        )
        self._endings.sessions = self._sessions
        if self._rememberer is not None and memory is not None and memory.tools:
            self._tools.memory = self._rememberer.access
        if self._rememberer is not None and memory is not None and memory.recall_on_failure:
            self._tools.after_turn_recall = self._rememberer.after_failure
        if self._rememberer is not None and memory is not None and memory.reflexion:
            reflexion = Reflexion(ctx, self._rememberer)
            self._tools.reflexion = self._endings.reflexion = reflexion
        thinking = ctx.spec.thinking
        self._thinker = None if thinking is None else Thinker(ctx, self._step, thinking)
        reflect = (
            self._thinker.check
            if self._thinker is not None and thinking is not None and thinking.reflector
            else None
        )
        self._tools.check_answer = reflect
        if ctx.spec.knowledge is not None:
            consultant = Consultant(ctx, self._step, ctx.spec.knowledge)
            self._tools.consult = consultant.search
            self._tools.check_answer = _checks(consultant.check, reflect)
            self._tools.check_reply = self._endings.check_reply = consultant.reason
            self._tools.check_citations = consultant.check
        self._begins = (
            self._thinker is not None or self._rememberer is not None or ctx.session is not None
        )
        """Whether anything happens before the first turn (memory, thinking)."""
        self._gen = self._drive()

    # -- public surface ------------------------------------------------------------------

    def __aiter__(self) -> AsyncIterator[Event]:
        return self._events()

    async def _events(self) -> AsyncGenerator[Event]:
        """The run's events one by one (the engine commits, and hands over, in batches).

        Each is a copy (made from its encoding, as hooks get theirs): an event's nested values
        (a call's arguments) are the run's own, and code that changed them changed the sealed
        log in memory, and the stored run in a ``MemoryStore``.
        """
        task = asyncio.current_task()  # a tool's agent: in a task of its own (``relayed``)
        batches = relayed(self._gen) if task is not None and drives_a_run(task) else self._gen
        try:
            async for batch in batches:
                for event in batch:
                    yield decode_event(encode_event(event))
        finally:
            await batches.aclose()  # a consumer that stopped reading ends the run

    async def consume(self) -> None:
        """Drive the run to its end, unseen (``Agent.run``); in another run's task, in its own."""
        task = asyncio.current_task()
        if task is not None and drives_a_run(task):  # a tool's agent: its cancellations apart
            return await asyncio.create_task(drained(self._gen))
        async for _ in self._gen:  # (no frame between: every await of a step passes each one)
            pass

    @property
    def events(self) -> tuple[Event, ...]:
        """The events recorded so far."""
        return tuple(self._journal.events)

    @property
    def done(self) -> bool:
        """Whether the run has ended (its outcome is available)."""
        return self._ctx.outcome is not None

    @property
    def outcome(self) -> RunOutcome[OutputT]:
        """The run's outcome; available once iteration has ended."""
        if self._ctx.outcome is None:
            if self._ctx.interrupts.detached:
                raise RuntimeError("the run was detached: it has no outcome here; resume it")
            raise RuntimeError("the run has not ended: iterate it to the end first")
        return self._ctx.outcome

    def cancel(self, reason: str = "cancelled by the caller") -> None:
        """End the run with ``cancelled``; interrupts an in-flight model or tool call."""
        if self._ctx.outcome is not None or self._ctx.interrupts.reason is not None:
            return
        self._ctx.interrupts.request(reason)

    def detach(self, reason: str = "the process is shutting down") -> None:
        """Stop the run here and leave it as a crash would: its log as committed, no ending.

        For a process going away on purpose (a server's graceful shutdown): the lease is
        given back, and ``resume`` continues the run, here or in another process, by the
        crash rules (a call in flight runs again only if that cannot repeat its effect).
        An in-flight model or tool call is interrupted; the run's events end without a
        ``run_finished`` and it has no ``outcome``.
        """
        interrupts = self._ctx.interrupts
        if self._ctx.outcome is not None or interrupts.reason is not None:
            return
        interrupts.detached = True
        interrupts.request(reason)

    async def aclose(self) -> None:
        """Stop early: the run ends ``cancelled`` (call this after breaking out of the loop)."""
        await self._gen.aclose()

    async def __aenter__(self) -> AgentRun[OutputT]:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        """Leaving ``async with agent.stream(goal) as run:`` early ends the run ``cancelled``."""
        await self._gen.aclose()

    # -- the loop ------------------------------------------------------------------------

    async def _begin(self) -> tuple[Stop | None, list[Event]]:
        """Before the first turn: the session's earlier turns, recall, then route and plan.

        The recall is committed before any model reads it; its batch is returned to be
        handed over with the stage's.
        """
        recalled: list[Event] = []
        if self._sessions is not None:
            await self._sessions.begin()
        if self._rememberer is not None:
            await self._rememberer.recall()
        if self._sessions is not None or self._rememberer is not None:
            recalled = await self._journal.commit()
        stop = None if self._thinker is None else await self._thinker.begin()
        return stop, recalled

    async def _drive(self) -> AsyncGenerator[list[Event]]:  # noqa: C901 - the loop, top to bottom
        task = asyncio.current_task()
        assert task is not None, "a run must be iterated inside a task"
        ctx, journal, interrupts = self._ctx, self._journal, self._ctx.interrupts
        step, tools, endings, approving = self._step, self._tools, self._endings, self._approving
        interrupts.bind(task)
        loop = task.get_loop()
        monitor.watch(loop)
        monitor.begin(task, ctx.watch)
        try:
            try:
                stop: Stop | None = None
                if ctx.model.real:  # what can fail is checked before anything is stored
                    check_model_requests_allowed(ctx.model)
                if ctx.store is not None:
                    # The lease first: it fences off any other process from this run's log.
                    ctx.owner = ctx.owner or default_owner()
                    fresh = not ctx.resume and not ctx.existing  # an id made up here
                    ctx.lease = await ctx.store.acquire(self.run_id, ctx.owner, fresh=fresh)
                    if ctx.resume:
                        journal.load(await ctx.store.read(self.run_id))
                    elif ctx.existing:  # started under this id before: continue that run
                        ctx.resume = await self._load_existing()
                    # the store is the commit point: no other sink gets what it refused
                    journal.add_sink(StoreSink(ctx.store, self.run_id, ctx.lease), first=True)
                    journal.remember = True  # the store then need not hash them again
                ctx.loaded = journal.committed
                if ctx.resume and ctx.existing and ctx.state.finished is not None:
                    endings.finish_outcome()  # it ended or waits: what it said is the outcome
                    return
                if ctx.resume:
                    stop = await self._recovery.recover()
                    if self._recovery.committed:  # before a call it ran again
                        yield self._recovery.committed
                    if stop is None and ctx.state.finished is not None:
                        endings.finish_outcome()  # it had ended already: nothing to do
                        return
                else:
                    self._start()
                if batch := await journal.commit():
                    yield batch
                if stop is None and ctx.state.finished is None and self._begins:
                    stop, recalled = await self._begin()  # recall, route, plan: once per run
                    if recalled:
                        yield recalled
                    if batch := await journal.commit():
                        yield batch
                decided = approving.decided
                if decided is not None:  # approvals are committed: now act on them
                    approving.decided = None
                    await tools.execute_inline(decided)
                    if batch := await journal.commit():
                        yield batch
                    stop = approving.after_decided()
                thinker = self._thinker
                fast = journal.in_memory  # no sinks: committing is handing events over
                while True:
                    if stop is None:
                        stop = limit_stop(ctx, self._budget)
                    if stop is None:
                        request = step.request()
                        answer = await step.ask(request)
                        while isinstance(answer, Retry):  # the failure is visible, then back off
                            if batch := await journal.commit():
                                yield batch
                            await step.sleep(answer.delay)
                            answer = await step.ask(request)
                        if isinstance(answer, Stop):
                            stop = answer
                        else:
                            planned = tools.plan(answer)
                            if batch := journal.take() if fast else await journal.commit():
                                yield batch
                            if interrupts.reason is not None:  # stop before any tool runs
                                raise Cancelled
                            if tools.runnable <= 1:
                                await tools.execute_inline(planned)
                                if batch := journal.take() if fast else await journal.commit():
                                    yield batch
                            else:
                                async for batch in tools.execute_parallel(planned):
                                    yield batch
                            if interrupts.interrupted:  # Ctrl-C reached a tool: end the run here
                                raise Cancelled
                            stop = tools.after_turn(planned)
                            if stop is None and thinker is not None:
                                await thinker.after_turn(planned)  # revise the plan?
                                if batch := await journal.commit():
                                    yield batch
                    if stop is not None:
                        async for batch in endings.stop(stop):
                            yield batch
                        if thinker is not None:
                            await thinker.ended()  # the plan cache learns from the end
                        return
            except Cancelled:
                if interrupts.detached:  # left as a crash leaves it: resumed later
                    journal.rollback()
                    return
            except asyncio.CancelledError:
                # The task's owner cancelled it: record that, then let it propagate.
                await endings.end_quietly("cancelled", "the task running the agent was cancelled")
                raise
            except GeneratorExit:
                # The consumer stopped reading (``break``, ``aclose()``): record it, no yield.
                await endings.end_quietly("cancelled", "the consumer stopped reading the run")
                raise
            except StoreError as exc:
                if journal.committed == 0:
                    raise  # nothing of this run was ever stored: there is no run to end
                if journal.committed == ctx.loaded and (ctx.answer is not None or ctx.approvals):
                    # the answer or the decisions were not stored: the run is as it was, and
                    # the same command (approve, resume --answer) is what to repeat
                    raise
                endings.end_unstored(exc)
                return
            except UserError as exc:
                # the calling code must change; a run this process went on with is ended
                # first, as failed (one it did not touch is left as it was)
                if journal.committed > ctx.loaded:
                    await endings.end_quietly("failed", f"{type(exc).__name__}: {exc}", error=exc)
                raise
            except Exception as exc:  # a bug: end the run as failed rather than vanish
                await endings.end_quietly("failed", f"{type(exc).__name__}: {exc}", error=exc)
                if ctx.outcome is None:
                    raise  # it failed before the run existed: there is nothing to end
                if self._thinker is not None:
                    try:  # a cached plan whose run failed is forgotten
                        await self._thinker.ended()
                    except Exception:  # the run has ended: a cache's bug must not change that
                        _log.warning("the plan cache failed after the run", exc_info=True)
                return
            endings.record_cancel()
            try:
                committed = await journal.commit()
            except StoreError as exc:
                endings.end_unstored(exc)
                return
            if committed:
                yield committed
            endings.finish_outcome()
            if interrupts.interrupted:  # the run is ended and logged: now Ctrl-C goes on up
                raise KeyboardInterrupt
        finally:
            monitor.end(task)
            monitor.unwatch(loop)
            interrupts.close()
            await journal.close()
            await endings.release()

    async def _load_existing(self) -> bool:
        """Load the run stored under this id, if any (the caller named the id: it may exist).

        Raises:
            RunExists: a run with another goal or agent is stored under the id.
        """
        assert self._ctx.store is not None
        try:
            stored = await self._ctx.store.read(self.run_id)
        except RunNotFound:
            return False
        started = stored[0]
        if not isinstance(started, RunStarted) or (
            started.goal,
            started.agent,
            started.context,
        ) != (  # the log holds them redacted: so is what they are compared with
            self._journal.redacted(self.goal),
            self._ctx.spec.name,
            self._journal.redacted(self._ctx.goal_context),
        ):
            what = (
                f"agent {started.agent!r} with the goal {started.goal!r}"
                f"{'' if started.context is None else ' and its own context'}"
                if isinstance(started, RunStarted)
                else "a log that does not begin with run_started"
            )
            raise RunExists(
                f"run {self.run_id!r} is stored already, for {what}: a run id names one run. "
                "Use another id, or resume that run (`tether resume`, agent.resume)",
                run_id=self.run_id,
            )
        if not set(self._ctx.tags) <= set(started.tags):  # a tenant's: checked under the lease
            raise RunExists(
                f"run {self.run_id!r} is stored already, for another caller: use another id",
                run_id=self.run_id,
            )
        self._journal.load(stored)
        return True

    def _start(self) -> None:
        spec = self._ctx.spec
        self._ctx.t0 = self._ctx.monotonic()
        if spec.limits.max_seconds is not None:
            self._ctx.deadline = self._ctx.t0 + spec.limits.max_seconds
        journal = self._journal
        # what the agent's spec puts in run_started is probed once per spec, not every run
        seen = (
            self._ctx.goal_context is None  # outside text of any shape: the full probe
            and _spec_seen(spec, journal.redactor, self._ctx.model.name)
            and journal.seen(
                self.goal, self._ctx.agent_ref or "", self._ctx.parent_run_id or "", *self._ctx.tags
            )
        )
        (journal.add_seen if seen else journal.add)(
            RunStarted,
            goal=self.goal,
            agent=spec.name,
            agent_ref=self._ctx.agent_ref,
            spec_digest=spec.digest,
            instructions=spec.instructions,
            model=self._ctx.model.name,
            tools=spec.tool_names,
            output_schema=spec.output.schema,
            limits=spec.limits,
            parent_run_id=self._ctx.parent_run_id,
            tags=self._ctx.tags,
            context=self._ctx.goal_context,
            prompt=spec.prompt,
            thinking=None if spec.thinking is None else spec.thinking.describe(),
            model_choice=self._ctx.model_choice,
        )


def _checks(
    first: Callable[[Planned], None], then: Callable[[Planned], Awaitable[None]] | None
) -> Callable[[Planned], Awaitable[None]]:
    """``finish_task``'s checks: ``first`` (citations), then ``then`` (the reflector).

    ``then`` sees only an answer ``first`` did not send back.
    """

    async def check(item: Planned) -> None:
        first(item)
        if item.finish and then is not None:
            await then(item)

    return check
