"""The task every real-model test runs: two tools, then a validated typed answer."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from pydantic import BaseModel, Field

from tether import Agent, Limits
from tether.events import ToolCallFinished, ToolCallRequested
from tether.models.base import Model
from tether.outcome import RunOutcome
from tether.tools.builtin import calculate, days_until

GOAL = "What is 17% of 2,340, and how many days until 2027-01-01?"

INSTRUCTIONS = (
    "You are a precise assistant. Use `calculate` for every arithmetic step and `days_until` "
    "for anything about dates; never compute in your head."
)


class Answer(BaseModel):
    """The typed output the agent must produce."""

    percentage: float = Field(description="17% of 2,340, as calculated")
    days: int = Field(description="Whole days until 2027-01-01, as days_until reported")


def agent(model: Model) -> Agent[Answer]:
    """The agent under test: calculator and date tools, a typed answer, bounded."""
    return Agent(
        name="real-model-e2e",
        instructions=INSTRUCTIONS,
        model=model,
        tools=[calculate, days_until],
        output_type=Answer,
        limits=Limits(max_steps=8, max_seconds=600),
    )


def check(outcome: RunOutcome[Answer]) -> None:
    """Finished, both tools called with sane arguments, and the typed answer is right."""
    assert outcome.status == "finished", (outcome.status, outcome.error, outcome.answer)
    requested = [e for e in outcome.events if isinstance(e, ToolCallRequested)]
    used = {e.tool for e in requested}
    assert {"calculate", "days_until"} <= used, [(e.tool, e.arguments) for e in requested]
    finished = [e for e in outcome.events if isinstance(e, ToolCallFinished) and not e.is_error]
    assert {e.tool for e in finished} >= {"calculate", "days_until"}
    output = outcome.output
    assert isinstance(output, Answer)
    assert output.percentage == pytest.approx(397.8)
    today = datetime.now(UTC).date()
    assert output.days == (datetime(2027, 1, 1, tzinfo=UTC).date() - today).days
