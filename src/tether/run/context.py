"""One run's shared context: what every part of the engine reads and writes about the run.

``AgentRun`` (``tether.loop``) builds one ``RunContext`` and hands it to each of its
collaborators (the model step, the tool stage, approvals, endings, recovery). Each of them
keeps its own state to itself; what they share is here, named, in one place.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Generic

from tether._internal.clock import Clock, monotonic_of
from tether.events import Event
from tether.jsontypes import JsonObject
from tether.limits import PhaseName
from tether.messages import ToolCall
from tether.models.base import Model
from tether.outcome import ErrorInfo, RunOutcome
from tether.policy.approvals import Approval
from tether.run.base import Cancelled, OutputT, Stop, ToolRunner
from tether.run.interrupts import Interrupts
from tether.run.journal import Journal
from tether.run.loopmonitor import Call
from tether.run.textstream import CallCallback, TextCallback, TextStream
from tether.run.unfinished import refuse
from tether.sinks import EventSink
from tether.state import StateBuilder
from tether.stores.base import Lease, RunStore

if TYPE_CHECKING:
    from tether.spec import AgentSpec

__all__ = ["RunContext"]


class RunContext(Generic[OutputT]):
    """The run every collaborator works on: its spec, log, fold, clock and shared progress.

    Fixed for the run: ``run_id``, ``spec``, ``model``, ``monotonic``, ``state``
    (refolded in place, never replaced), ``journal`` and its ``add``, ``interrupts``,
    ``watch``, ``tool_runner``, ``store`` and what the caller asked for (``goal``,
    ``agent_ref``, ``tags``, ``parent_run_id``, ``answer``, ``approvals``,
    ``max_recoveries``). The rest changes as the run goes.
    """

    __slots__ = (
        "add",
        "agent_ref",
        "answer",
        "answer_redacted",
        "approvals",
        "deadline",
        "existing",
        "fatal",
        "goal",
        "goal_context",
        "in_flight",
        "interrupts",
        "journal",
        "lease",
        "loaded",
        "max_recoveries",
        "model",
        "model_choice",
        "monotonic",
        "outcome",
        "output",
        "owner",
        "parent_run_id",
        "phased",
        "resume",
        "run_id",
        "session",
        "spec",
        "state",
        "store",
        "t0",
        "tags",
        "text_stream",
        "tool_runner",
        "warned",
        "watch",
    )

    def __init__(
        self,
        spec: AgentSpec[OutputT],
        goal: str,
        *,
        run_id: str,
        model: Model,
        clock: Clock,
        sinks: Sequence[EventSink] = (),
        goal_context: JsonObject | None = None,
        on_text: TextCallback | None = None,
        on_call: CallCallback | None = None,
        agent_ref: str | None = None,
        tags: Sequence[str] = (),
        parent_run_id: str | None = None,
        tool_runner: ToolRunner,
        store: RunStore | None = None,
        owner: str | None = None,
        resume: bool = False,
        existing: bool = False,
        answer: str | None = None,
        approvals: Sequence[Approval] = (),
        max_recoveries: int = 3,
        session: str | None = None,
        model_choice: JsonObject | None = None,
    ) -> None:
        self.run_id = run_id
        self.session = session
        """The session a new run joins (a resumed run's is in its log)."""
        self.goal = goal
        self.goal_context = goal_context
        """Structured context given with the goal (recorded in ``run_started``)."""
        self.spec = spec
        self.phased = spec.limits.phased
        """Whether this run's limits bound a phase on its own (the agent's, resumed or not)."""
        self.model = model
        self.model_choice = model_choice
        """Why ``model`` was chosen, for an agent that asked for capabilities."""
        self.monotonic: Callable[[], float] = monotonic_of(clock)
        self.state = StateBuilder()
        self.journal = Journal(
            run_id, clock=clock, sinks=sinks, on_event=self.state.apply, redactor=spec.redactor
        )
        self.add: Callable[..., Event] = self.journal.add
        self.text_stream = (
            None
            if on_text is None and on_call is None
            else TextStream(self.journal, on_text, on_call)
        )
        """Where the model's text and calls go as they stream (``None``: nothing streams)."""
        self.agent_ref = agent_ref
        self.tags = tuple(tags)
        self.parent_run_id = parent_run_id
        self.tool_runner = tool_runner
        self.interrupts = Interrupts()
        self.watch = Call(run_id)
        """What the loop monitor sees of the run's own task (the call on it, if any)."""
        self.store = store
        self.owner = owner or ""  # decided when a lease is taken (syscalls: not per run)
        self.lease: Lease | None = None
        self.resume = resume
        """Whether the run continues a stored log (``AgentRun.resuming``, or an id found)."""
        self.existing = existing
        """Whether the caller chose the run's id: a run stored under it is continued."""
        self.answer = answer
        self.approvals = tuple(approvals)
        self.max_recoveries = max_recoveries
        self.output: OutputT | None = None
        """The run's typed output, once ``finish_task`` passed (or a text answer ended it)."""
        self.outcome: RunOutcome[OutputT] | None = None
        self.t0 = 0.0
        """When the run's time budget started (monotonic; moved back on resume)."""
        self.deadline: float | None = None
        """When ``max_seconds`` runs out (monotonic), if it is set."""
        self.warned: dict[str, float] = {}
        """The highest fraction of each limit the run has warned about (``budget_warning``)."""
        self.in_flight: set[str] = set()
        """Calls whose tool is running now (a stop says they may have had partial effects)."""
        self.fatal: ErrorInfo | None = None
        """An error that ends the run after this turn's results (a tool blocked the loop)."""
        self.answer_redacted = True  # until an answer is recorded: nothing was seen yet
        """Whether the redactor changed the model's last answer (its calls are probed again)."""
        self.loaded = 0
        """How many events were stored before this process took the run."""

    def elapsed(self) -> float:
        """Seconds of the run's time budget used so far."""
        return self.monotonic() - self.t0

    def remaining(self) -> float | None:
        """Seconds left before ``max_seconds`` (``None``: no limit)."""
        deadline = self.deadline
        return None if deadline is None else max(0.0, deadline - self.monotonic())

    def affords(self, tokens: int = 0) -> bool:
        """Whether the run's limits leave room for a request of about ``tokens``.

        For a request that is not a turn (a compaction's summary, a knowledge search's
        grading): time left, the ``think`` phase not spent, tokens and cost under their limits.
        """
        limits, st = self.spec.limits, self.state
        remaining = self.remaining()
        if remaining is not None and remaining <= 0:
            return False
        if self.phased and self.phase_spent("think") is not None:
            return False
        if limits.max_tokens is not None and (
            st.input_tokens + st.output_tokens + tokens >= limits.max_tokens
        ):
            return False
        return limits.max_cost is None or st.cost is None or st.cost < limits.max_cost

    def check_cancel(self) -> None:
        """Unwind (``Cancelled``) if the run is being cancelled."""
        if self.interrupts.reason is not None:
            raise Cancelled

    def time_stop(self) -> Stop:
        """The stop for a run whose time ran out."""
        limits = self.spec.limits
        return Stop("budget_exhausted", "max_seconds", self.elapsed(), limits.max_seconds or 0.0)

    def phase_spent(self, phase: PhaseName, *, steps: int = 0, seconds: float = 0.0) -> Stop | None:
        """The stop for ``phase`` if its own ``max_steps`` or ``max_seconds`` is used up.

        ``steps`` and ``seconds``: a request not recorded yet, counted as if it were.
        """
        bounds = self.spec.limits.phase(phase)
        if bounds is None:
            return None
        st = self.state
        if bounds.max_steps is not None:
            used = st.phase_steps.get(phase, 0) + steps
            if used >= bounds.max_steps:
                return Stop("budget_exhausted", f"{phase}.max_steps", used, bounds.max_steps, True)
        if bounds.max_seconds is not None:
            spent = st.phase_seconds.get(phase, 0.0) + seconds
            if spent >= bounds.max_seconds:
                return Stop(
                    "budget_exhausted", f"{phase}.max_seconds", spent, bounds.max_seconds, True
                )
        return None

    def phase_timeout(self, phase: PhaseName, timeout: float | None) -> float | None:
        """``timeout`` bounded by ``phase``'s own: its ``timeout`` and its seconds left."""
        bounds = self.spec.limits.phase(phase)
        if bounds is None:
            return timeout
        for bound in (
            bounds.timeout,
            None
            if bounds.max_seconds is None
            else max(0.0, bounds.max_seconds - self.state.phase_seconds.get(phase, 0.0)),
        ):
            if bound is not None and (timeout is None or bound < timeout):
                timeout = bound
        return timeout

    def refuse(self, call: ToolCall, text: str, error_type: str) -> None:
        """Answer ``call`` with an error tether writes itself (the tool did not run)."""
        refuse(self.add, call, text, error_type)

    def refold(self) -> None:
        """Fold the state again from the journal's events (after a rollback)."""
        self.state.refold(self.journal.events)
