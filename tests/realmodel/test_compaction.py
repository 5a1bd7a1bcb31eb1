"""A long task that overflows the embedded model's 8k window finishes with compaction.

Eight pages of about a thousand tokens each, read one per call: the conversation grows past
the window. Without compaction the run is refused before its ninth request; with it, the
older pages are condensed (the record of the calls keeps what bears on the goal, the model
writes a summary) and the run answers from them.
"""

from __future__ import annotations

import pytest

from tether import Agent, Compaction, Limits, tool
from tether.events import ContextCompacted, ModelResponded
from tether.models.local import LocalModel

pytestmark = [pytest.mark.real_model, pytest.mark.timeout(1500)]

WORDS = ("AMBER", "BISON", "CEDAR", "DELTA", "EMBER", "FJORD", "GARNET", "HAZEL")
_SENTENCES = (
    "The ledger of the northern warehouse lists crates of rope, lamp oil and salted fish.",
    "Clerks copied each delivery twice, once for the harbour master and once for the guild.",
    "Most entries record the weather, the tide and the names of the porters on duty.",
    "Several pages mention disputes about the weight of grain sacks and the price of salt.",
)
GOAL = (
    "The archive has 8 pages. Read every page, 1 to 8, with read_page (one page per call), "
    "then finish with the code word of each page, in page order."
)


def page(n: int) -> str:
    """About 4,200 characters (~1,080 tokens), the code word in the middle."""
    body = " ".join(_SENTENCES[(n + i) % 4] for i in range(50))
    cut = body.rfind(". ", 0, len(body) // 2) + 2
    return f"Page {n} of 8. {body[:cut]}The code word of page {n} is {WORDS[n - 1]}. {body[cut:]}"


@tool(read_only=True, open_world=False)
def read_page(n: int) -> str:
    """Read page n (1 to 8) of the archive."""
    if not 1 <= n <= 8:
        raise ValueError("pages are numbered 1 to 8")
    return page(n)


def _agent(model: LocalModel, compaction: Compaction | None) -> Agent[str]:
    return Agent(
        model=model,
        tools=[read_page],
        compaction=compaction,
        limits=Limits(max_steps=20, max_seconds=1200),
    )


async def test_without_compaction_the_task_overflows_the_window(
    local_model_8k: LocalModel,
) -> None:
    outcome = await _agent(local_model_8k, None).run(GOAL)
    assert outcome.status == "budget_exhausted", outcome.error
    assert outcome.limit == "context_window"
    assert local_model_8k.profile.context_window == 8192


async def test_with_compaction_the_same_task_finishes(local_model_8k: LocalModel) -> None:
    outcome = await _agent(local_model_8k, Compaction()).run(GOAL)
    assert outcome.status == "finished", outcome.error
    compacted = [e for e in outcome.events if isinstance(e, ContextCompacted)]
    assert compacted
    for event in compacted:
        assert event.tokens_before >= 0.8 * 8192
        assert event.tokens_after <= 0.8 * event.tokens_before  # at least 20% smaller
    read = [
        int(str(c.arguments.get("n")))
        for e in outcome.events
        if isinstance(e, ModelResponded) and e.purpose is None
        for c in e.tool_calls
        if c.name == "read_page"
    ]
    assert sorted(set(read)) == list(range(1, 9))  # it went on past the compaction
    answer = str(outcome.output).upper()
    found = [w for w in WORDS if w in answer]
    # the grounding held: what the condensed pages said is still known (measured: all 8)
    assert len(found) >= 6, (answer, compacted[0].summary)
