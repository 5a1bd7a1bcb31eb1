"""Each request is sized before it is sent: one that cannot fit is refused, not sent."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests.support import add
from tether import Agent, Limits, ModelRequest, tool
from tether.content import TextBlock
from tether.events import BudgetWarning, LimitReached, ModelResponded
from tether.messages import AssistantMessage, Message, ToolCall, ToolResultMessage, UserMessage
from tether.models.base import Model, ModelResponse
from tether.models.tokens import estimate_tokens, request_chars
from tether.run.window import RequestSize
from tether.testing import ScriptedModel, call, finish
from tether.thinking import Thinking
from tether.usage import Usage


@tool(read_only=True, open_world=False)
def read_big() -> str:
    """Read a large document."""
    return "lorem ipsum " * 400  # ~4,800 characters: ~1,600 tokens by the estimate


async def test_a_request_beyond_the_window_is_refused_before_it_is_sent() -> None:
    model = ScriptedModel([call("read_big"), finish("done")], context_window=1200)
    # (compaction would condense the huge result: the window check is what is shown here)
    outcome = await Agent(model=model, tools=[read_big], compaction=None).run("read it")
    assert outcome.status == "budget_exhausted"
    assert outcome.limit == "context_window"
    assert len(model.requests) == 1  # the second would not fit: never sent
    assert outcome.error is not None
    assert outcome.error.type == "RequestTooLarge"
    assert "context window holds 1200" in outcome.error.message
    assert "LocalModel(context=...)" in outcome.error.message
    reached = next(e for e in outcome.events if isinstance(e, LimitReached))
    assert reached.maximum == 1200
    assert reached.used > 1200
    assert not reached.ask_for_answer  # a best-effort answer would not fit either


async def test_a_request_that_fits_is_sent() -> None:
    model = ScriptedModel([call("read_big"), finish("done")], context_window=8192)
    outcome = await Agent(model=model, tools=[read_big]).run("read it")
    assert outcome.status == "finished"


async def test_the_size_rests_on_the_models_last_report() -> None:
    # the model says its first request held 7,950 tokens: the next one, a little larger,
    # leaves no room in 8,192 for an answer
    model = ScriptedModel(
        [call("add", a=1, b=2), finish("3")],
        usage=Usage(input_tokens=7950, output_tokens=5),
        context_window=8192,
    )
    outcome = await Agent(model=model, tools=[add]).run("1+2")
    assert outcome.limit == "context_window"
    assert len(model.requests) == 1
    reached = next(e for e in outcome.events if isinstance(e, LimitReached))
    assert 7950 + 256 < reached.used < 7950 + 256 + 100


class Counting(Model):
    """A scripted model that counts its own tokens: ``sizes[purpose]`` per request."""

    real = False

    def __init__(self, script: list[Any], sizes: dict[str | None, int], window: int) -> None:
        self.inner = ScriptedModel(script, context_window=window)
        self.sizes = sizes
        self.counted: list[str | None] = []

    @property
    def name(self) -> str:
        return "counting"

    @property
    def profile(self) -> Any:
        return self.inner.profile

    async def count_tokens(self, request: ModelRequest) -> int | None:
        self.counted.append(request.purpose)
        return self.sizes.get(request.purpose)

    async def request(self, request: ModelRequest) -> ModelResponse:
        return await self.inner.request(request)


async def test_the_models_own_count_is_used_when_it_has_one() -> None:
    model = Counting([finish("done")], {None: 5000}, window=4096)
    outcome = await Agent(model=model).run("hi")
    assert outcome.limit == "context_window"
    assert model.counted == [None]
    reached = next(e for e in outcome.events if isinstance(e, LimitReached))
    assert reached.used == 5000 + 256


async def test_a_thinking_request_that_cannot_fit_is_skipped_with_a_warning() -> None:
    model = Counting([finish("5")], {"plan": 9000, None: 100}, window=4096)
    agent = Agent(model=model, thinking=Thinking(plan=True, reflect=False))
    outcome = await agent.run("2+3")
    assert outcome.status == "finished"
    assert outcome.output == "5"
    warnings = [(e.limit, e.maximum) for e in outcome.events if isinstance(e, BudgetWarning)]
    assert warnings == [("context_window", 4096.0)]
    assert not any(isinstance(e, ModelResponded) and e.purpose == "plan" for e in outcome.events)


async def test_nothing_is_sized_without_a_window_or_a_token_limit() -> None:
    model = Counting([finish("done")], {None: 10**9}, window=0)
    model.inner = ScriptedModel([finish("done")])  # no window declared
    outcome = await Agent(model=model).run("hi")
    assert outcome.status == "finished"
    assert model.counted == []


async def test_max_tokens_is_checked_on_a_count_it_can_trust() -> None:
    # the model's own count says 900: with 1,000 tokens for the whole run it is sent; a
    # count of 1,000 leaves nothing for the answer, and is not
    model = Counting([finish("done")], {None: 900}, window=100_000)
    limits = Limits(max_tokens=1000)
    outcome = await Agent(model=model, limits=limits).run("hi")
    assert outcome.status == "finished"  # 900 < 1000: it fits
    model = Counting([finish("done")], {None: 1000}, window=100_000)
    outcome = await Agent(model=model, limits=limits).run("hi")
    assert outcome.limit == "max_tokens"
    assert outcome.error is not None
    assert "1000 left of Limits.max_tokens=1000" in outcome.error.message


_messages = st.lists(
    st.one_of(
        st.builds(UserMessage, text=st.text(max_size=40)),
        st.builds(
            AssistantMessage,
            text=st.text(max_size=20),
            tool_calls=st.lists(
                st.builds(
                    ToolCall,
                    id=st.just("c"),
                    name=st.sampled_from(["add", "read"]),
                    arguments=st.dictionaries(st.sampled_from("ab"), st.integers()),
                ),
                max_size=2,
            ).map(tuple),
        ),
        st.builds(
            ToolResultMessage,
            call_id=st.just("c"),
            name=st.just("add"),
            content=st.text(max_size=30).map(lambda t: (TextBlock(text=t),)),
        ),
    ),
    max_size=12,
)


@given(_messages, st.integers(min_value=0, max_value=12), _messages)
def test_counting_a_growing_conversation_matches_counting_it_whole(
    first: list[Message], cut: int, other: list[Message]
) -> None:
    """The sizer counts earlier messages once; whatever it is shown, the sum is the whole's."""
    agent = Agent(model=ScriptedModel([], context_window=10), tools=[add])
    spec = agent.spec

    class Ctx:
        model = agent.model
        state = None

    sizer = RequestSize(Ctx(), 10)  # type: ignore[arg-type]
    for messages in (first[:cut], first, other, first):
        request = ModelRequest(
            instructions=spec.instructions, messages=tuple(messages), tools=spec.definitions
        )
        assert sizer.chars(request) == request_chars(request)


def test_the_estimate_is_three_characters_a_token_rounded_up_never_negative() -> None:
    assert estimate_tokens(0) == 0
    assert estimate_tokens(-5) == 0
    assert estimate_tokens(3) == 2
    assert estimate_tokens(3000) == 1001


async def test_a_counter_that_fails_is_not_used_and_the_run_goes_on(
    caplog: pytest.LogCaptureFixture,
) -> None:
    class Failing(Counting):
        async def count_tokens(self, request: ModelRequest) -> int | None:
            raise RuntimeError("tokenizer gone")

    model = Failing([finish("done")], {}, window=100_000)
    outcome = await Agent(model=model).run("hi")
    assert outcome.status == "finished"
    assert "could not count a request's tokens" in caplog.text


async def test_a_run_stopped_by_its_window_replays() -> None:
    from tether.replay import replay

    script = [call("add", a=1, b=2), finish("3")]
    usage = Usage(input_tokens=7950, output_tokens=5)
    model = ScriptedModel(script, usage=usage, context_window=8192)
    outcome = await Agent(model=model, tools=[add]).run("1+2")
    assert outcome.limit == "context_window"
    report = await replay(outcome.events, agent=Agent(model=ScriptedModel([]), tools=[add]))
    assert report.ok, report.divergence


async def test_a_run_whose_model_counted_replays_its_refusal() -> None:
    from tether.replay import replay

    model = Counting([finish("5")], {"plan": 9000, None: 100}, window=4096)
    agent = Agent(model=model, thinking=Thinking(plan=True, reflect=False))
    outcome = await agent.run("2+3")
    assert any(isinstance(e, BudgetWarning) for e in outcome.events)
    report = await replay(outcome.events, agent=agent)
    assert report.ok, report.divergence
    over = Counting([finish("done")], {None: 5000}, window=4096)
    refused = await Agent(model=over).run("hi")
    assert refused.limit == "context_window"
    report = await replay(refused.events, agent=Agent(model=over))
    assert report.ok, report.divergence
