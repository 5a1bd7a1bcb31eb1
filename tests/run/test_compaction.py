"""Compaction: a run whose requests outgrow the window condenses its older turns and goes on."""

from __future__ import annotations

import re
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.support import assert_protocol_valid
from tether import Agent, Compaction, ModelRequest, tool
from tether.compaction import ModelSummarizer, Summarizer, SummaryContext
from tether.content import TextBlock
from tether.errors import ConfigError, ModelError
from tether.events import ContextCompacted, ModelFailed, ModelResponded
from tether.messages import AssistantMessage, Message, ToolCall, ToolResultMessage, UserMessage
from tether.models.base import Model, ModelResponse
from tether.replay import replay
from tether.run.compactor import COMPACTED_HEADER, focused, transcript
from tether.state import StateBuilder
from tether.stores.memory import MemoryStore
from tether.testing import ScriptedModel, call, finish

FILLER = "The archive page goes on about nothing in particular. " * 14  # ~770 characters


GOAL = "Read pages 1 to 8 and report the code word of each page"


def page_text(n: int) -> str:
    return f"{FILLER}The code word of page {n} is WORD-{n * 7}. {FILLER}"


@tool(read_only=True, open_world=False)
def read_page(n: int) -> str:
    """Read one page of the archive."""
    return page_text(n)


class Summarizing(Model):
    """A scripted model that answers a compaction's summary request itself.

    It summarises as a careful model would: it copies the code words it reads.
    """

    real = False

    def __init__(self, inner: ScriptedModel, *, fail: bool = False) -> None:
        self.inner = inner
        self.fail = fail
        self.requests: list[ModelRequest] = []
        self.summaries: list[ModelRequest] = []

    @property
    def name(self) -> str:
        return "summarizing"

    @property
    def profile(self) -> Any:
        return self.inner.profile

    async def request(self, request: ModelRequest) -> ModelResponse:
        if request.purpose == "compact":
            self.summaries.append(request)
            if self.fail:
                raise ModelError("the summary model is down")
            words = re.findall(r"WORD-\d+", request.messages[0].text)  # type: ignore[union-attr]
            summary = "Code words found: " + ", ".join(dict.fromkeys(words))
            return ModelResponse(
                tool_calls=(ToolCall(id="s", name="write_summary", arguments={"summary": summary}),)
            )
        self.requests.append(request)
        return await self.inner.request(request)


def pages_script(pages: int) -> list[ToolCall]:
    answer = ", ".join(f"WORD-{n * 7}" for n in range(1, pages + 1))
    return [*(call("read_page", n=n) for n in range(1, pages + 1)), finish(answer)]


def assert_valid_history(messages: tuple[Message, ...]) -> None:
    """Every result follows the call it answers; the goal comes first."""
    assert isinstance(messages[0], UserMessage)
    called: set[str] = set()
    for message in messages:
        if isinstance(message, AssistantMessage):
            called.update(c.id for c in message.tool_calls)
        elif isinstance(message, ToolResultMessage):
            assert message.call_id in called, f"a result without its call: {message.call_id}"


async def test_a_run_that_outgrows_the_window_compacts_and_finishes() -> None:
    model = Summarizing(ScriptedModel(pages_script(8), context_window=2000))
    outcome = await Agent(model=model, tools=[read_page]).run(GOAL)
    assert outcome.status == "finished", outcome.error
    assert_protocol_valid(outcome.events)
    compacted = [e for e in outcome.events if isinstance(e, ContextCompacted)]
    assert compacted
    for event in compacted:
        assert event.tokens_after <= event.tokens_before * 0.8  # at least 20% smaller
        assert event.window == 2000
        assert event.start == 1  # right after the goal
        assert event.summary.startswith(COMPACTED_HEADER)
    summaries = [e for e in outcome.events if isinstance(e, ModelResponded) and e.purpose]
    assert [e.purpose for e in summaries] == ["compact"] * len(compacted)
    for request in model.requests:
        assert_valid_history(request.messages)
        assert request.messages[0] == UserMessage(text=GOAL)
    last = model.requests[-1].messages
    view = last[1]
    assert isinstance(view, UserMessage)
    assert view.text.startswith(COMPACTED_HEADER)
    # the record of every call is kept (from the log), and the summary of what they found
    for n in range(1, 7):
        assert f'read_page({{"n":{n}}}) → ok' in view.text
    assert "WORD-7" in view.text
    assert "WORD-42" in view.text
    # the newest turns are verbatim: the last call and its whole result
    assert isinstance(last[-1], ToolResultMessage)
    assert page_text(8) in last[-1].content[0].text  # type: ignore[union-attr]


async def test_without_compaction_the_same_run_cannot_fit() -> None:
    model = Summarizing(ScriptedModel(pages_script(8), context_window=2000))
    agent = Agent(model=model, tools=[read_page], compaction=None)
    outcome = await agent.run(GOAL)
    assert outcome.status == "budget_exhausted"
    assert outcome.limit == "context_window"
    assert not model.summaries


async def test_a_compacted_run_replays_exactly() -> None:
    model = Summarizing(ScriptedModel(pages_script(8), context_window=2000))
    outcome = await Agent(model=model, tools=[read_page]).run(GOAL)
    assert any(isinstance(e, ContextCompacted) for e in outcome.events)
    report = await replay(outcome.events, agent=Agent(model=ScriptedModel([]), tools=[read_page]))
    assert report.ok, report.divergence


async def test_the_fold_gives_the_compacted_conversation() -> None:
    model = Summarizing(ScriptedModel(pages_script(8), context_window=2000))
    outcome = await Agent(model=model, tools=[read_page]).run(GOAL)
    events = outcome.events
    last = max(
        i for i, e in enumerate(events) if isinstance(e, ModelResponded) and e.purpose is None
    )
    builder = StateBuilder()
    for event in events[:last]:
        builder.apply(event)
    assert tuple(builder.messages) == model.requests[-1].messages


async def test_a_resumed_run_reads_the_compacted_conversation() -> None:
    store = MemoryStore()
    script = [*pages_script(6)[:-1], call("ask_user", question="Which pages next?")]
    model = Summarizing(ScriptedModel(script, context_window=2000))
    agent = Agent(model=model, tools=[read_page], can_ask_user=True, store=store)
    paused = await agent.run("Read pages 1 to 6, then ask me")
    assert paused.status == "waiting_for_user"
    assert any(isinstance(e, ContextCompacted) for e in paused.events)
    resumed_model = Summarizing(ScriptedModel([*script, finish("done")], context_window=2000))
    outcome = await agent.resume(paused.run_id, answer="none", model=resumed_model)
    assert outcome.status == "finished"
    first = resumed_model.requests[0].messages
    assert isinstance(first[1], UserMessage)
    assert first[1].text.startswith(COMPACTED_HEADER)
    assert_valid_history(first)


async def test_a_failed_summary_keeps_the_record_of_the_calls() -> None:
    model = Summarizing(ScriptedModel(pages_script(8), context_window=2000), fail=True)
    outcome = await Agent(model=model, tools=[read_page]).run(GOAL)
    assert outcome.status == "finished"
    failed = [e for e in outcome.events if isinstance(e, ModelFailed)]
    assert failed
    assert all(e.purpose == "compact" and not e.will_retry for e in failed)
    view = next(e for e in outcome.events if isinstance(e, ContextCompacted)).summary
    assert 'read_page({"n":1}) → ok' in view
    assert "Summary:" not in view
    report = await replay(outcome.events, agent=Agent(model=ScriptedModel([]), tools=[read_page]))
    assert report.ok, report.divergence


class Broken(Summarizer):
    async def summarize(self, context: SummaryContext) -> str | None:
        raise ValueError("bug")


async def test_a_summarizer_that_raises_is_a_warning_not_a_failure() -> None:
    model = Summarizing(ScriptedModel(pages_script(8), context_window=2000))
    agent = Agent(model=model, tools=[read_page], compaction=Compaction(summarizer=Broken()))
    outcome = await agent.run(GOAL)
    assert outcome.status == "finished"
    assert any("Broken failed (ValueError: bug)" in w for w in outcome.warnings)


async def test_without_a_summarizer_only_the_record_is_kept_and_no_model_is_asked() -> None:
    model = Summarizing(ScriptedModel(pages_script(8), context_window=2000))
    agent = Agent(model=model, tools=[read_page], compaction=Compaction(summarizer=None))
    outcome = await agent.run(GOAL)
    assert outcome.status == "finished"
    assert not model.summaries
    assert any(isinstance(e, ContextCompacted) for e in outcome.events)


async def test_max_context_tokens_compacts_a_model_without_a_declared_window() -> None:
    model = Summarizing(ScriptedModel(pages_script(6)))
    agent = Agent(model=model, tools=[read_page], compaction=Compaction(max_context_tokens=1200))
    outcome = await agent.run(GOAL)
    compacted = [e for e in outcome.events if isinstance(e, ContextCompacted)]
    assert compacted
    assert all(e.window is None for e in compacted)
    assert all(e.tokens_before >= 1200 for e in compacted)
    report = await replay(
        outcome.events,
        agent=Agent(
            model=ScriptedModel([]),
            tools=[read_page],
            compaction=Compaction(max_context_tokens=1200),
        ),
    )
    assert report.ok, report.divergence


async def test_one_turn_too_large_is_condensed_to_what_bears_on_the_goal() -> None:
    """The newest turn alone passes the window: its call and result are condensed together,
    the result cut to the sentences about the goal, and the run goes on."""

    @tool(read_only=True, open_world=False)
    def read_huge() -> str:
        """Read a huge page."""
        return f"{FILLER * 12}The vault code is 7341. {FILLER * 12}"

    script = ScriptedModel([call("read_huge"), finish("7341")], context_window=2000)
    model = Summarizing(script)
    agent = Agent(model=model, tools=[read_huge], compaction=Compaction(summarizer=None))
    outcome = await agent.run("What is the vault code?")
    assert outcome.status == "finished", (outcome.status, outcome.limit)
    (compacted,) = [e for e in outcome.events if isinstance(e, ContextCompacted)]
    assert compacted.tokens_after < compacted.tokens_before * 0.8
    assert "The vault code is 7341" in compacted.summary
    last = model.requests[-1]
    assert_valid_history(last.messages)
    assert last.messages[-1] == UserMessage(text=compacted.summary)
    report = await replay(outcome.events, agent=agent)
    assert report.ok, report.divergence


async def test_a_goal_too_large_for_the_window_is_still_refused() -> None:
    """Nothing but the goal: there is nothing to condense."""
    model = Summarizing(ScriptedModel([finish("done")], context_window=2000))
    outcome = await Agent(model=model).run("read it " * 2000)
    assert outcome.limit == "context_window"
    assert not any(isinstance(e, ContextCompacted) for e in outcome.events)


@pytest.mark.parametrize(
    ("kwargs", "words"),
    [
        ({"threshold": 1.5}, "threshold"),
        ({"threshold": True}, "threshold"),
        ({"keep_turns": 0}, "keep_turns"),
        ({"summary_tokens": 5}, "summary_tokens"),
        ({"max_context_tokens": 10}, "max_context_tokens"),
        ({"summarizer": "model"}, "Summarizer"),
    ],
)
def test_a_bad_compaction_says_what_it_takes(kwargs: dict[str, Any], words: str) -> None:
    with pytest.raises(ConfigError, match=words):
        Compaction(**kwargs)


def test_an_agent_takes_only_a_compaction() -> None:
    with pytest.raises(ConfigError, match="compaction takes"):
        Agent(model=ScriptedModel([]), compaction=0.8)  # type: ignore[arg-type]


def test_compaction_is_not_in_the_digest() -> None:
    """How a run condenses its context is not what the agent is: a recording made with
    compaction on replays with it off where it never compacted, under the same digest."""
    model = ScriptedModel([])
    assert Agent(model=model).spec.digest == Agent(model=model, compaction=None).spec.digest


def test_the_transcript_fits_its_budget_and_says_what_was_left_out() -> None:
    messages: list[Message] = [
        AssistantMessage(tool_calls=(ToolCall(id="a", name="read_page", arguments={"n": 1}),)),
        ToolResultMessage(call_id="a", name="read_page", content=(TextBlock(text="y" * 5000),)),
        UserMessage(text="short"),
    ]
    text = transcript(messages, 1000)
    assert len(text) <= 1100
    assert "characters left out" in text
    assert "[message] short" in text
    assert 'called read_page({"n":1})' in text


def test_the_default_summarizer_is_the_model() -> None:
    assert isinstance(Compaction().summarizer, ModelSummarizer)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    sizes=st.lists(st.integers(min_value=50, max_value=1400), min_size=2, max_size=9),
    keep=st.integers(min_value=1, max_value=3),
    threshold=st.sampled_from([0.5, 0.7, 0.8, 0.9]),
)
async def test_every_request_keeps_calls_with_their_results(
    sizes: list[int], keep: int, threshold: float
) -> None:
    """Whatever the sizes, a request never holds a result without its call, nor the goal
    anywhere but first; compacted runs replay."""

    @tool(read_only=True, open_world=False)
    def read(n: int) -> str:
        """Read ``n`` characters."""
        return "z" * sizes[n]

    script = [call("read", n=i) for i in range(len(sizes))] + [finish("done")]
    model = Summarizing(ScriptedModel(script, context_window=2400))
    agent = Agent(
        model=model, tools=[read], compaction=Compaction(threshold=threshold, keep_turns=keep)
    )
    outcome = await agent.run("read them all")
    for request in model.requests:
        assert_valid_history(request.messages)
        assert request.messages[0] == UserMessage(text="read them all")
    report = await replay(
        outcome.events,
        agent=agent.__class__(
            model=ScriptedModel([]),
            tools=[read],
            compaction=Compaction(threshold=threshold, keep_turns=keep),
        ),
    )
    assert report.ok, report.divergence


def test_a_shortened_result_keeps_what_bears_on_the_goal() -> None:
    text = page_text(3) * 3
    short = focused(text, 200, GOAL)
    assert len(short) <= 200
    assert "The code word of page 3 is WORD-21." in short
    assert short.count("WORD-21") == 1  # a sentence said again is kept once


class Looping(Summarizer):
    """A small model's failure: the task copied back, one fact, the fact again."""

    async def summarize(self, context: SummaryContext) -> str | None:
        return f"{GOAL}. {GOAL}. Page 1 says WORD-7. Page 1 says WORD-7."


async def test_a_summary_that_loops_or_restates_the_goal_is_cleaned() -> None:
    model = Summarizing(ScriptedModel(pages_script(8), context_window=2000))
    agent = Agent(model=model, tools=[read_page], compaction=Compaction(summarizer=Looping()))
    outcome = await agent.run(GOAL)
    view = next(e for e in outcome.events if isinstance(e, ContextCompacted)).summary
    summary = view.split("Summary:\n", 1)[1]
    assert summary == "Page 1 says WORD-7."


class Stuck(Summarizer):
    """A small model in a loop: the task copied back until its length cap, then a fragment.

    (The embedded model's summary of the real-model compaction test, shortened: with it in
    the view the model finished after 7 of 8 pages; with the record of the calls alone it
    read page 8.)
    """

    async def summarize(self, context: SummaryContext) -> str | None:
        return f"Page 1 says WORD-7. {GOAL}. {GOAL}. {GOAL}. Read每页,"


async def test_a_summary_that_loops_is_not_used_and_the_outcome_says_so() -> None:
    model = Summarizing(ScriptedModel(pages_script(8), context_window=2000))
    agent = Agent(model=model, tools=[read_page], compaction=Compaction(summarizer=Stuck()))
    outcome = await agent.run(GOAL)
    assert outcome.status == "finished", outcome.error
    view = next(e for e in outcome.events if isinstance(e, ContextCompacted)).summary
    assert "Summary:" not in view
    assert "The code word of page 1 is WORD-7." in view  # the record of the calls stays
    assert any("summary repeated itself in a loop" in w for w in outcome.warnings)


def test_a_long_json_result_keeps_its_matching_part() -> None:
    blob = (
        '{"order": 1, "status": "shipped", "code word": "WORD-7", "items": ' + '"x", ' * 200 + "}"
    )
    short = focused(blob, 120, "the code word of the order")
    assert short
    assert len(short) <= 160


def test_many_small_messages_fit_the_transcript() -> None:
    messages: list[Message] = [UserMessage(text=f"note {i} " * 5) for i in range(300)]
    text = transcript(messages, 2000)
    assert len(text) <= 2200
    assert text.startswith("[… ")
    assert "note 299" in text  # the newest are kept


async def test_a_high_threshold_still_compacts_before_the_window_refuses() -> None:
    model = Summarizing(ScriptedModel(pages_script(8), context_window=2000))
    agent = Agent(model=model, tools=[read_page], compaction=Compaction(threshold=0.95))
    outcome = await agent.run(GOAL)
    assert outcome.status == "finished", outcome.error
    assert any(isinstance(e, ContextCompacted) for e in outcome.events)


class Twice(Summarizer):
    """A summarizer that asks the model twice (a draft, then the summary)."""

    async def summarize(self, context: SummaryContext) -> str | None:
        await ModelSummarizer().summarize(context)
        return await ModelSummarizer().summarize(context)


async def test_a_summarizer_that_asks_twice_replays() -> None:
    model = Summarizing(ScriptedModel(pages_script(8), context_window=2000))
    agent = Agent(model=model, tools=[read_page], compaction=Compaction(summarizer=Twice()))
    outcome = await agent.run(GOAL)
    assert outcome.status == "finished"
    report = await replay(
        outcome.events,
        agent=Agent(
            model=ScriptedModel([]), tools=[read_page], compaction=Compaction(summarizer=Twice())
        ),
    )
    assert report.ok, report.divergence
