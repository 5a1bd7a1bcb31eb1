"""``ReplayModel``: serves the model responses of a recorded log, checking each request.

The request a recorded response answered is not stored, but it is derived: the messages the
model saw at step *n* are ``fold`` of the recorded events before that response. A replayed
request that differs raises ``ReplayDivergence`` naming the first differing message. A
thinking stage's request (``purpose``: plan, reflect, route) builds its own view of the
history: it is checked for its purpose and its place in the order.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from tether.errors import ModelError, ReplayDivergence, UserError
from tether.events import (
    BudgetWarning,
    ContextCompacted,
    Event,
    LimitReached,
    ModelFailed,
    ModelResponded,
    RunFinished,
    RunStarted,
)
from tether.messages import Message
from tether.models.base import Model, ModelProfile, ModelRequest, ModelResponse
from tether.run.window import ANSWER_RESERVE
from tether.state import StateBuilder

__all__ = ["ReplayModel"]


@dataclass(frozen=True, slots=True)
class _Recorded:
    messages: tuple[Message, ...]
    event: ModelResponded | ModelFailed


class ReplayModel(Model):
    """Replays the model attempts of ``events`` in order: responses, and failures as errors.

    One instance replays the recording for one run. Unlike ``ScriptedModel`` it keeps no
    position per run: each request is checked against the recorded history, which another
    run does not have, so another run asking is refused with ``UserError`` (make one
    ``ReplayModel`` per replay).
    """

    real = False
    reusable = False

    def __init__(self, events: Sequence[Event], *, name: str | None = None) -> None:
        builder = StateBuilder()
        recorded: list[_Recorded] = []
        refused: dict[tuple[int, bool], tuple[str, float, int]] = {}
        counts: dict[tuple[int, bool], list[int]] = {}
        window: float | None = None
        summary_at: int | None = None
        for index, event in enumerate(events):
            if isinstance(event, ModelResponded | ModelFailed):
                if event.purpose != "compact":
                    summary_at = None
                elif summary_at is None:  # the count came before the first summary request
                    summary_at = len(recorded)
                recorded.append(_Recorded(tuple(builder.messages), event))
            elif isinstance(event, ContextCompacted):
                # counted before the summary request (if any), then the condensed request
                at = len(recorded) if summary_at is None else summary_at
                counts.setdefault((at, True), []).append(event.tokens_before)
                counts.setdefault((len(recorded), True), []).append(event.tokens_after)
                summary_at = None
                if event.window is not None:
                    window = max(window or 0.0, event.window)
            elif _refused(event, events[index + 1 :]):
                assert isinstance(event, LimitReached | BudgetWarning)
                acting = isinstance(event, LimitReached)
                used = builder.input_tokens + builder.output_tokens
                refused[(len(recorded), acting)] = (event.limit, event.used, used)
                if event.limit == "context_window":
                    window = max(window or 0.0, event.maximum)
            builder.apply(event)
        self._recorded = recorded
        self._refused = refused
        self._counts = counts
        """The counts a compaction was decided on, in the order they were taken."""
        """Requests the recording refused before sending them: by the model requests made
        before, and whether it was an acting turn's."""
        self._profile = ModelProfile(context_window=None if window is None else int(window))
        started = next((e for e in events if isinstance(e, RunStarted)), None)
        self._name = name or (
            recorded[0].event.model
            if recorded
            else started.model
            if started is not None
            else "replay"
        )
        self.served = 0
        """How many recorded responses were served."""
        self._run_id = ""

    @property
    def name(self) -> str:
        """The recorded model's name."""
        return self._name

    @property
    def profile(self) -> ModelProfile:
        """The window of a request the recording refused as too large, if it refused one."""
        return self._profile

    async def count_tokens(self, request: ModelRequest) -> int | None:
        """The size that takes the recorded decision again (refuse, compact), else 0.

        The recording holds the decisions, not the counts (the recorded model may have
        counted with its own tokenizer); a refusal's or a compaction's recorded figures give
        back its size.
        """
        key = (self.served, request.purpose is None)
        queue = self._counts.get(key)
        if queue:
            return queue.pop(0)
        refusal = self._refused.get(key)
        if refusal is None:
            return 0
        limit, used, tokens_before = refusal
        if limit == "context_window":  # used: the request's tokens and its answer's reserve
            cap = request.settings.max_output_tokens
            return int(used) - (ANSWER_RESERVE if cap is None else min(cap, ANSWER_RESERVE))
        return int(used) - tokens_before  # max_tokens: the run's tokens and the request's

    async def request(self, request: ModelRequest) -> ModelResponse:
        """The next recorded response, if the request matches the recording."""
        if request.run_id:
            if not self._run_id:
                self._run_id = request.run_id
            elif request.run_id != self._run_id:
                raise UserError(
                    f"this ReplayModel replays its recording for run {self._run_id!r}, and run "
                    f"{request.run_id!r} asked it too: one instance replays one run, so make "
                    "a new ReplayModel(events) for each replay"
                )
        index = self.served
        if index >= len(self._recorded):
            raise ReplayDivergence(
                f"the replay made model request {index + 1}, but the recording has only "
                f"{len(self._recorded)}",
                index=index,
            )
        expected = self._recorded[index]
        recorded_purpose = expected.event.purpose
        if request.purpose != recorded_purpose:
            raise ReplayDivergence(
                f"model request {index + 1} is for {request.purpose or 'a turn of the run'}; "
                f"the recording's was for {recorded_purpose or 'a turn of the run'}",
                index=index,
                expected=recorded_purpose,
                actual=request.purpose,
            )
        if recorded_purpose is None:  # a thinking stage builds its own view of the history
            _compare(index, expected.messages, request.messages)
        self.served += 1
        event = expected.event
        if isinstance(event, ModelFailed):
            raise ModelError(event.error.message, transient=event.transient, model=self._name)
        return ModelResponse(
            text=event.text,
            tool_calls=event.tool_calls,
            reasoning=event.reasoning,
            usage=event.usage,
            finish_reason="length" if event.cut_off else None,  # recorded again as it was
        )


_REFUSALS = ("RequestTooLarge", "NotEnoughTokensLeft")


def _refused(event: Event, after: Sequence[Event]) -> bool:
    """Whether ``event`` records a request refused before it was sent.

    An acting turn's: the ``limit_reached`` of a run whose end says so. A thinking
    request's: a ``budget_warning`` of the context window.
    """
    if isinstance(event, BudgetWarning):
        return event.limit == "context_window"
    if not isinstance(event, LimitReached):
        return False
    end = next((e for e in after if isinstance(e, RunFinished)), None)
    return end is not None and end.error is not None and end.error.type in _REFUSALS


def _compare(index: int, expected: tuple[Message, ...], actual: tuple[Message, ...]) -> None:
    for position, (want, got) in enumerate(zip(expected, actual, strict=False)):
        if want != got:
            raise ReplayDivergence(
                f"model request {index + 1} differs from the recording at message {position}: "
                f"recorded {want!r}, replayed {got!r}",
                index=index,
                expected=want,
                actual=got,
            )
    if len(expected) != len(actual):
        raise ReplayDivergence(
            f"model request {index + 1} has {len(actual)} messages; the recording had "
            f"{len(expected)}",
            index=index,
            expected=len(expected),
            actual=len(actual),
        )
