"""``Agent(knowledge=...)``: ``search_knowledge`` retrieves, grades and rewrites inside the run,
every request and verdict in the log; answers cite only what was graded relevant."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path

import pytest

from tests.support import assert_protocol_valid
from tether import Agent, Tool
from tether.content import content_text
from tether.errors import ConfigError, StoreError
from tether.events import (
    Event,
    KnowledgeRetrieved,
    ModelResponded,
    ToolCallFinished,
)
from tether.knowledge import DISCLAIMER, Document, Knowledge, KnowledgeBase, Passage, cited_labels
from tether.memory import InProcessMemory
from tether.messages import SEARCH_KNOWLEDGE, UserMessage
from tether.models.base import ModelRequest
from tether.replay import replay
from tether.state import StateBuilder
from tether.stores import SqliteStore
from tether.testing import FunctionModel, ScriptStep, call, finish

RELEASE = "The tether runtime was first released in March 2026."
DOCS = [
    Document(
        source="tether.md",
        text=f"# History\n\n{RELEASE} It writes every decision to an event log first.",
    ),
    Document(source="cats.md", text="# Cats\n\nCats sleep for most of the day, and purr."),
]


async def knowledge_base() -> KnowledgeBase:
    kb = KnowledgeBase(InProcessMemory())
    await kb.add_all(DOCS)
    return kb


def of(events: Sequence[Event], cls: type[Event]) -> list[Event]:
    return [e for e in events if isinstance(e, cls)]


def agent_model(
    answers: Sequence[ScriptStep], *, relevant: Callable[[str], bool] = lambda t: "tether" in t
) -> FunctionModel:
    """The acting turns play ``answers`` in order; a grading request gets a verdict.

    The grader calls a passage relevant when ``relevant(passage)``, quoting RELEASE.
    """
    turns = iter(answers)

    def respond(request: ModelRequest) -> ScriptStep:
        if request.purpose == "grade":
            last = request.messages[-1]
            assert isinstance(last, UserMessage)
            passage = last.text.partition("Passage:")[2]
            if relevant(passage):
                return call("verdict", evidence=RELEASE, relevant=True, confidence=0.9)
            return call("verdict", evidence="", relevant=False, confidence=0.8)
        if request.purpose == "rewrite":
            return call("search", query="tether release date")
        return next(turns)

    return FunctionModel(respond)


async def test_a_search_is_graded_in_the_run_and_its_passage_cited() -> None:
    kb = await knowledge_base()
    model = agent_model(
        [
            call(SEARCH_KNOWLEDGE, question="When was tether first released?"),
            finish("In March 2026 [K1]."),
        ]
    )
    outcome = await Agent(model=model, knowledge=kb).run("When was tether first released?")
    assert outcome.status == "finished"
    assert outcome.output == "In March 2026 [K1]."
    (retrieved,) = of(outcome.events, KnowledgeRetrieved)
    assert isinstance(retrieved, KnowledgeRetrieved)
    assert retrieved.labels == ("K1",)
    (passage,) = [p for p in retrieved.passages if p.id == retrieved.relevant[0]]
    assert passage.source == "tether.md"
    assert RELEASE in passage.text
    assert retrieved.rounds[0].query == "When was tether first released?"
    graded = [e for e in outcome.events if isinstance(e, ModelResponded) and e.purpose == "grade"]
    assert len(graded) == len(retrieved.rounds[0].verdicts) >= 1
    # the grading came before the event, the call's result after it
    result = next(
        e for e in outcome.events if isinstance(e, ToolCallFinished) and e.tool == SEARCH_KNOWLEDGE
    )
    assert graded[-1].seq < retrieved.seq < result.seq
    assert not result.is_error
    assert result.untrusted
    text = content_text(result.content)
    assert "[K1] tether.md / History" in text
    assert RELEASE in text
    assert_protocol_valid(outcome.events)
    state = StateBuilder()
    for event in outcome.events:
        state.apply(event)
    assert state.citable == {"K1": passage.id}


async def test_an_answer_citing_what_was_not_found_relevant_is_sent_back() -> None:
    kb = await knowledge_base()
    model = agent_model(
        [
            call(SEARCH_KNOWLEDGE, question="When was tether first released?"),
            finish("In March 2026 [K1, K2]."),
            finish("It came out in 2026."),  # cites nothing: sent back too
            finish("In March 2026 [K1]."),
        ]
    )
    outcome = await Agent(model=model, knowledge=kb).run("When was tether first released?")
    assert outcome.status == "finished"
    assert outcome.output == "In March 2026 [K1]."
    refused = [
        content_text(e.content)
        for e in outcome.events
        if isinstance(e, ToolCallFinished) and e.tool == "finish_task" and e.is_error
    ]
    assert len(refused) == 2
    assert "[K2] is not a passage" in refused[0]
    assert "those are: K1" in refused[0]
    assert "cite the passages" in refused[1]
    assert refused[1].endswith(
        'For example: finish_task(answer="It came out in 2026.", citations=["K1"])'
    )


async def test_when_nothing_relevant_is_found_the_answer_must_say_so() -> None:
    kb = await knowledge_base()
    model = agent_model(
        [
            call(SEARCH_KNOWLEDGE, question="Who founded tether?"),
            finish("It was founded by Ada Lovelace."),  # a guess: sent back
            finish(f"{DISCLAIMER} I could not find who founded it."),
        ],
        relevant=lambda _: False,
    )
    outcome = await Agent(model=model, knowledge=kb).run("Who founded tether?")
    assert outcome.status == "finished"
    assert str(outcome.output).startswith(DISCLAIMER)
    (retrieved,) = of(outcome.events, KnowledgeRetrieved)
    assert isinstance(retrieved, KnowledgeRetrieved)
    assert retrieved.relevant == ()
    assert retrieved.labels == ()
    # most passages missed: the question was rewritten (at most twice, never the same query)
    queries = [r.query for r in retrieved.rounds]
    assert queries == ["Who founded tether?", "tether release date"]
    rewrites = [
        e for e in outcome.events if isinstance(e, ModelResponded) and e.purpose == "rewrite"
    ]
    assert len(rewrites) == 2  # the second rewrite repeated a query: the search stopped
    result = next(
        e for e in outcome.events if isinstance(e, ToolCallFinished) and e.tool == SEARCH_KNOWLEDGE
    )
    assert "Nothing in the knowledge base answers this" in content_text(result.content)
    assert DISCLAIMER in content_text(result.content)
    refused = next(
        e for e in outcome.events if isinstance(e, ToolCallFinished) and e.tool == "finish_task"
    )
    assert refused.is_error
    assert "must not guess" in content_text(refused.content)


async def test_a_run_that_never_searched_is_not_checked() -> None:
    kb = await knowledge_base()
    outcome = await Agent(model=agent_model([finish("hello")]), knowledge=kb).run("say hello")
    assert outcome.status == "finished"
    assert outcome.output == "hello"


class Broken:
    async def search(self, query: str, *, limit: int = 5) -> list[Passage]:
        raise StoreError("the knowledge store is down: start it, then try again")


async def test_a_failing_knowledge_base_is_the_calls_error_and_replays() -> None:
    model = agent_model(
        [call(SEARCH_KNOWLEDGE, question="anything at all"), finish(f"{DISCLAIMER}")]
    )
    agent = Agent(model=model, knowledge=Knowledge(base=Broken()))
    outcome = await agent.run("anything")
    assert outcome.status == "finished"
    (retrieved,) = of(outcome.events, KnowledgeRetrieved)
    assert isinstance(retrieved, KnowledgeRetrieved)
    assert retrieved.warning is not None
    assert "the knowledge store is down" in retrieved.warning
    result = next(
        e for e in outcome.events if isinstance(e, ToolCallFinished) and e.tool == SEARCH_KNOWLEDGE
    )
    assert result.is_error
    assert result.error_type == "knowledge_unavailable"
    report = await replay(outcome.events, agent=agent)
    assert report.divergence is None
    assert report.ok


async def test_a_replay_reads_the_searches_from_the_log_not_the_knowledge_base() -> None:
    kb = await knowledge_base()
    script = [
        call(SEARCH_KNOWLEDGE, question="When was tether first released?"),
        finish("In March 2026 [K1]."),
    ]
    agent = Agent(model=agent_model(script), knowledge=kb)
    outcome = await agent.run("When was tether first released?")
    await kb.remove("tether.md")  # the base changed since
    now = await kb.search("tether released", limit=4)
    assert all(p.source != "tether.md" for p in now)
    report = await replay(outcome.events, agent=agent)
    assert report.divergence is None
    assert report.ok


async def test_a_crash_during_grading_searches_again_on_resume(tmp_path: Path) -> None:
    kb = await knowledge_base()
    script = [
        call(SEARCH_KNOWLEDGE, question="When was tether first released?"),
        finish("In March 2026 [K1]."),
    ]
    outcome = await Agent(model=agent_model(script), knowledge=kb).run("When?")
    first_grade = next(
        i
        for i, e in enumerate(outcome.events)
        if isinstance(e, ModelResponded) and e.purpose == "grade"
    )
    store = SqliteStore(tmp_path / "runs.db")
    try:
        await store.append(outcome.run_id, list(outcome.events[:first_grade]))
        agent = Agent(model=agent_model(script[1:]), knowledge=kb, store=store)
        resumed = await agent.resume(outcome.run_id)
        assert resumed.status == "finished"
        assert resumed.output == "In March 2026 [K1]."
        assert len(of(resumed.events, KnowledgeRetrieved)) == 1
        assert_protocol_valid(resumed.events)
    finally:
        await store.close()


async def test_a_structured_answer_is_checked_too() -> None:
    from pydantic import BaseModel

    class Answer(BaseModel):
        text: str

    kb = await knowledge_base()
    model = agent_model(
        [
            call(SEARCH_KNOWLEDGE, query="When was tether first released?"),  # ``query`` works
            finish(text="March 2026 [K3]"),
            finish(text="March 2026 [K1]"),
        ]
    )
    outcome = await Agent(model=model, knowledge=kb, output_type=Answer).run("When?")
    assert outcome.status == "finished"
    assert outcome.output == Answer(text="March 2026 [K1]")


def test_citation_labels_are_read_from_brackets_only() -> None:
    assert cited_labels("A [K1] and [K2, K3] and [K1]; K4 alone and [see K05]") == [
        "K1",
        "K2",
        "K3",
        "K5",
    ]
    assert cited_labels("no citations, KK1 [X1]") == []


async def test_configuration_is_checked() -> None:
    kb = await knowledge_base()
    with pytest.raises(ConfigError, match="knowledge takes a KnowledgeBase"):
        Agent(knowledge="docs/")  # pyright: ignore[reportArgumentType]
    with pytest.raises(ConfigError, match="1 to 20 passages"):
        Knowledge(base=kb, limit=0)
    with pytest.raises(ConfigError, match="disclaimer"):
        Knowledge(base=kb, disclaimer=" ")
    with pytest.raises(ConfigError, match="reserved"):
        Agent(tools=[_search_knowledge_tool()])
    plain = Agent(model="scripted:none", knowledge=kb)
    assert SEARCH_KNOWLEDGE in plain.spec.tool_names
    assert plain.spec.digest != Agent(model="scripted:none").spec.digest
    assert SEARCH_KNOWLEDGE not in Agent(model="scripted:none").spec.tool_names


def _search_knowledge_tool() -> Tool:
    from tether import tool

    @tool(read_only=True)
    def search_knowledge(question: str) -> str:
        """A user's own tool that takes the reserved name."""
        return question

    return search_knowledge


async def test_a_text_answer_names_its_passages_in_citations() -> None:
    kb = await knowledge_base()
    model = agent_model(
        [
            call(SEARCH_KNOWLEDGE, question="When was tether first released?"),
            finish("In March 2026.", citations=["K2"]),  # not found relevant: sent back
            finish("In March 2026.", citations=["K1"]),
        ]
    )
    agent = Agent(model=model, knowledge=kb)
    definition = agent.spec.finish_definition.input_schema
    assert definition["required"] == ["answer", "citations"]
    outcome = await agent.run("When was tether first released?")
    assert outcome.status == "finished"
    assert outcome.output == "In March 2026. [K1]"  # the labels, appended to the text
    refused = next(
        e for e in outcome.events if isinstance(e, ToolCallFinished) and e.tool == "finish_task"
    )
    assert "[K2] is not a passage" in content_text(refused.content)


def test_cited_output_validation() -> None:
    from tether.errors import ModelRetry
    from tether.tools.output import OutputSpec

    spec = OutputSpec[str].for_type(str).citing()
    assert spec.validate({"answer": "x [K1, K2]", "citations": ["K2", "K3"]}) == "x [K1, K2] [K3]"
    assert spec.validate({"answer": "x"}) == "x"  # citations may be left out
    with pytest.raises(ModelRetry, match="labels like K1"):
        spec.validate({"answer": "x", "citations": ["leave.md"]})
    with pytest.raises(ModelRetry, match="takes 'answer'"):
        spec.validate({"answer": "x", "sources": []})


async def test_a_secret_in_a_document_never_reaches_the_log_and_the_run_replays() -> None:
    secret = "sk-proj-" + "a1B2c3D4e5F6g7H8i9J0" * 2
    kb = KnowledgeBase(InProcessMemory())
    await kb.add(
        Document(source="keys.md", text=f"{RELEASE} The tether deploy key is {secret} for now.")
    )
    script = [
        call(SEARCH_KNOWLEDGE, question="When was tether first released?"),
        finish("In March 2026.", citations=["K1"]),
    ]
    agent = Agent(model=agent_model(script), knowledge=kb)
    outcome = await agent.run("When was tether first released?")
    assert outcome.status == "finished"
    from tether.codec import encode_event

    assert all(secret.encode() not in encode_event(e) for e in outcome.events)
    (retrieved,) = of(outcome.events, KnowledgeRetrieved)
    assert isinstance(retrieved, KnowledgeRetrieved)
    assert retrieved.labels == ("K1",)  # the passage itself is still cited
    report = await replay(outcome.events, agent=agent)
    assert report.divergence is None


MORE = [
    Document(source="alpha.md", text="Alpha: the tether runtime was first released in March 2026."),
    Document(source="beta.md", text="Beta: the tether runtime logs every decision first."),
    Document(source="gamma.md", text="Gamma: the tether runtime replays any recorded run."),
]


async def test_labels_stay_one_per_passage_across_searches() -> None:
    kb = KnowledgeBase(InProcessMemory())
    await kb.add_all(MORE)
    wanted = iter([{"Alpha"}, {"Alpha", "Beta"}, {"Gamma"}])
    current: set[str] = set()

    def turn(question: str) -> ScriptStep:
        nonlocal current
        current = next(wanted)
        return call(SEARCH_KNOWLEDGE, question=question)

    answers = iter(
        [
            lambda: turn("When was tether released?"),
            lambda: turn("What does tether log?"),
            lambda: turn("What does tether replay?"),
            lambda: finish(
                "Released in March 2026, logs first, replays.", citations=["K1", "K2", "K3"]
            ),
        ]
    )

    def respond(request: ModelRequest) -> ScriptStep:
        if request.purpose == "grade":
            last = request.messages[-1]
            assert isinstance(last, UserMessage)
            passage = last.text.partition("Passage:")[2].strip()
            name = passage.split(":")[0]
            if name in current:
                return call("verdict", evidence=passage, relevant=True, confidence=0.9)
            return call("verdict", evidence="", relevant=False, confidence=0.9)
        if request.purpose == "rewrite":
            return call("search", query="tether")
        return next(answers)()

    outcome = await Agent(model=FunctionModel(respond), knowledge=kb).run("Tell me about tether")
    assert outcome.status == "finished"
    retrieved = [e for e in outcome.events if isinstance(e, KnowledgeRetrieved)]
    sources = {p.id: p.source for e in retrieved for p in e.passages}
    named = [
        {label: sources[pid] for label, pid in zip(e.labels, e.relevant, strict=True)}
        for e in retrieved
    ]
    assert named == [
        {"K1": "alpha.md"},
        {"K1": "alpha.md", "K2": "beta.md"},
        {"K3": "gamma.md"},
    ]


async def test_a_label_is_never_taken_unsearched_nor_in_a_plain_reply() -> None:
    kb = await knowledge_base()
    model = agent_model(
        [finish("It weighs 3 kg [K7]."), "It weighs 3 kg [K1].", finish("I do not know.")]
    )
    outcome = await Agent(model=model, knowledge=kb).run("What does it weigh?")
    assert outcome.status == "finished"
    assert outcome.output == "I do not know."
    refused = next(
        e for e in outcome.events if isinstance(e, ToolCallFinished) and e.tool == "finish_task"
    )
    assert "none: search first" in content_text(refused.content)
    prompted = [e for e in outcome.events if e.kind == "retry_prompted"]
    assert len(prompted) == 1
    assert "[K1] is not a passage" in prompted[0].text  # pyright: ignore[reportAttributeAccessIssue]


class FailsSecond:
    """A knowledge base that answers once, then is down."""

    def __init__(self, base: KnowledgeBase) -> None:
        self.base = base
        self.searches = 0

    async def search(self, query: str, *, limit: int = 5) -> list[Passage]:
        self.searches += 1
        if self.searches > 1:
            raise StoreError("the knowledge store went down: start it, then try again")
        return await self.base.search(query, limit=limit)


async def test_a_search_that_fails_midway_keeps_its_rounds_and_replays() -> None:
    kb = await knowledge_base()
    model = agent_model(
        [call(SEARCH_KNOWLEDGE, question="Who founded tether?"), finish(DISCLAIMER)],
        relevant=lambda _: False,
    )
    agent = Agent(model=model, knowledge=Knowledge(base=FailsSecond(kb)))
    outcome = await agent.run("Who founded tether?")
    assert outcome.status == "finished"
    (retrieved,) = of(outcome.events, KnowledgeRetrieved)
    assert isinstance(retrieved, KnowledgeRetrieved)
    assert len(retrieved.rounds) == 1  # the round done before the failure is kept
    assert retrieved.warning is not None
    assert "went down" in retrieved.warning
    report = await replay(outcome.events, agent=agent)
    assert report.divergence is None


async def test_passages_that_could_not_be_graded_are_not_called_missing() -> None:
    from tether import Limits

    kb = await knowledge_base()
    model = agent_model(
        [call(SEARCH_KNOWLEDGE, question="When was tether released?"), finish(DISCLAIMER)]
    )
    agent = Agent(model=model, knowledge=kb, limits=Limits(max_tokens=10))
    outcome = await agent.run("When was tether released?")
    (retrieved,) = of(outcome.events, KnowledgeRetrieved)
    assert isinstance(retrieved, KnowledgeRetrieved)
    assert retrieved.warning is not None
    assert "could not be graded" in retrieved.warning
    assert not [e for e in outcome.events if isinstance(e, ModelResponded) and e.purpose == "grade"]
    result = next(
        e for e in outcome.events if isinstance(e, ToolCallFinished) and e.tool == SEARCH_KNOWLEDGE
    )
    assert content_text(result.content).startswith("Nothing found could be confirmed")


async def test_searches_count_as_tool_calls_and_are_not_repeated() -> None:
    from tether import Limits

    kb = await knowledge_base()
    question = "When was tether first released?"
    model = agent_model(
        [
            call(SEARCH_KNOWLEDGE, question=question),
            call(SEARCH_KNOWLEDGE, question=question.upper()),
            [call(SEARCH_KNOWLEDGE, question="a"), call(SEARCH_KNOWLEDGE, question="b b")],
            finish("In March 2026.", citations=["K1"]),
        ]
    )
    agent = Agent(model=model, knowledge=kb, limits=Limits(max_tool_calls=2))
    outcome = await agent.run(question)
    results = [
        e for e in outcome.events if isinstance(e, ToolCallFinished) and e.tool == SEARCH_KNOWLEDGE
    ]
    assert [r.error_type for r in results][:2] == [None, "repeated_search"]
    assert "limit" in [r.error_type for r in results]
    assert outcome.limit == "max_tool_calls"


async def test_a_recovered_answer_is_checked_before_it_is_taken(tmp_path: Path) -> None:
    kb = await knowledge_base()
    script = [
        call(SEARCH_KNOWLEDGE, question="When was tether first released?"),
        finish("In 1999 [K9]."),
    ]
    outcome = await Agent(model=agent_model([*script, finish("-")]), knowledge=kb).run("When?")
    first_finish = next(
        i
        for i, e in enumerate(outcome.events)
        if isinstance(e, ToolCallFinished) and e.tool == "finish_task"
    )
    store = SqliteStore(tmp_path / "runs.db")
    try:
        await store.append(outcome.run_id, list(outcome.events[:first_finish]))  # crashed
        agent = Agent(
            model=agent_model([finish("In March 2026.", citations=["K1"])]),
            knowledge=kb,
            store=store,
        )
        resumed = await agent.resume(outcome.run_id)
        assert resumed.status == "finished"
        assert resumed.output == "In March 2026. [K1]"
        refused = [
            e
            for e in resumed.events
            if isinstance(e, ToolCallFinished) and e.tool == "finish_task" and e.is_error
        ]
        assert len(refused) == 1
        assert "[K9] is not a passage" in content_text(refused[0].content)
        assert_protocol_valid(resumed.events)
    finally:
        await store.close()


@pytest.mark.parametrize(
    ("best_effort", "kept"),
    [("Best effort: 99 days [K9] [K1]", False), ("Best effort: March 2026 [K1]", True)],
)
async def test_a_best_effort_answer_at_a_limit_is_checked_like_any_other(
    best_effort: str, kept: bool
) -> None:
    # one citing a passage no search found relevant ([K9]) was the outcome's answer
    from tether import Limits, tool

    @tool(read_only=True, open_world=False)
    def noop() -> str:
        """Do nothing."""
        return "nothing"

    kb = await knowledge_base()
    model = agent_model(
        [call(SEARCH_KNOWLEDGE, question="When was tether released?"), call("noop"), best_effort]
    )
    agent = Agent(model=model, knowledge=kb, tools=[noop], limits=Limits(max_steps=2))
    outcome = await agent.run("When was tether first released?")
    assert outcome.status == "budget_exhausted"
    assert outcome.answer == (best_effort if kept else None)
    assert any(isinstance(e, ModelResponded) and e.text == best_effort for e in outcome.events)
