"""The embedded model searches a knowledge base inside a run, and cites what was graded relevant.

Real pieces throughout: the 1.5B model acts, grades and answers; the knowledge base is a
``KnowledgeBase`` over a real SQLite memory file with the embedded MiniLM embedder.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tether import Agent, Limits
from tether.events import KnowledgeRetrieved, ModelResponded
from tether.knowledge import Document, KnowledgeBase, cited_labels
from tether.memory import SqliteMemory
from tether.memory.minilm import MiniLMEmbedder
from tether.models.local import LocalModel
from tether.replay import replay

pytestmark = [pytest.mark.real_model, pytest.mark.timeout(900)]

HANDBOOK = [
    Document(
        source="leave.md",
        text="# Leave\n\nEvery employee of Norbury Tools gets 27 days of paid leave a year. "
        "Unused days carry over until the end of March.",
    ),
    Document(
        source="expenses.md",
        text="# Expenses\n\nReceipts must be filed within 30 days of purchase. Taxis are "
        "refunded only after 22:00.",
    ),
    Document(
        source="security.md",
        text="# Security\n\nLaptops lock after 5 minutes idle. Badges are renewed every year.",
    ),
]


async def test_the_model_searches_grades_and_cites(local_model: LocalModel, tmp_path: Path) -> None:
    memory = SqliteMemory(tmp_path / "knowledge.db", embedder=MiniLMEmbedder())
    try:
        kb = KnowledgeBase(memory)
        await kb.add_all(HANDBOOK)
        agent = Agent(
            name="handbook",
            instructions=(
                "You answer questions about the company handbook. Always call "
                "search_knowledge first, then answer in one sentence and cite the passage "
                "you used, like [K1]."
            ),
            model=local_model,
            knowledge=kb,
            limits=Limits(max_steps=6, max_seconds=600),
        )
        outcome = await agent.run("How many days of paid leave does an employee get a year?")
        assert outcome.status == "finished", (outcome.status, outcome.error, outcome.answer)
        retrieved = [e for e in outcome.events if isinstance(e, KnowledgeRetrieved)]
        assert retrieved, "the model never searched"
        graded = [
            e for e in outcome.events if isinstance(e, ModelResponded) and e.purpose == "grade"
        ]
        assert len(graded) >= 1
        answer = str(outcome.output)
        assert "27" in answer
        labels = cited_labels(answer)
        assert labels, answer  # the check sends back an answer that cites nothing
        sources = {p.id: p.source for e in retrieved for p in e.passages}
        cited = {
            sources[passage]
            for e in retrieved
            for label, passage in zip(e.labels, e.relevant, strict=True)
            if label in labels
        }
        assert cited == {"leave.md"}
        report = await replay(outcome.events, agent=agent)
        assert report.divergence is None
        assert report.ok
    finally:
        await memory.close()
