"""The runs index row of a run, as a fold of its events (both backends use it)."""

from __future__ import annotations

from collections.abc import Sequence

from tether.events import Event, ModelResponded, RunFinished, RunStarted
from tether.stores.base import RunInfo
from tether.usage import Usage

__all__ = ["index_row"]


def index_row(row: RunInfo | None, events: Sequence[Event]) -> RunInfo | None:
    """``row`` updated by newly appended ``events`` (``None`` until ``run_started``)."""
    for event in events:
        if isinstance(event, RunStarted):
            row = RunInfo(
                run_id=event.run_id,
                agent=event.agent,
                goal=event.goal,
                status="running",
                created_at=event.at,
                updated_at=event.at,
                usage=Usage(cost=0.0),  # no model request yet: nothing spent
                steps=0,
                events=1,
                parent_run_id=event.parent_run_id,
                tags=event.tags,
            )
            continue
        if row is None:
            continue
        status = row.status
        usage = row.usage
        steps = row.steps
        if isinstance(event, RunFinished):
            status = event.status
        elif status in ("waiting_for_user", "waiting_for_approval"):
            status = "running"  # resumed
        if isinstance(event, ModelResponded):
            usage = usage + Usage(
                input_tokens=event.usage.input_tokens,
                output_tokens=event.usage.output_tokens,
                requests=1,
                cost=event.usage.cost,
            )
            if not event.final:
                steps = event.step
        row = RunInfo(
            run_id=row.run_id,
            agent=row.agent,
            goal=row.goal,
            status=status,
            created_at=row.created_at,
            updated_at=event.at,
            usage=usage,
            steps=steps,
            events=row.events + 1,
            parent_run_id=row.parent_run_id,
            tags=row.tags,
        )
    return row
