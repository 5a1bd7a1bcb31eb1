"""Every event says which phase of the run it belongs to (``EventBase.phase``)."""

from __future__ import annotations

from typing import get_args

from tests.support import add
from tether import Agent, Limits
from tether.events import EVENT_TYPES, Phase
from tether.testing import ScriptedModel, call, finish


def test_every_kind_of_event_has_a_phase() -> None:
    from tether.phases import _PHASES  # pyright: ignore[reportPrivateUsage]

    assert set(_PHASES) == set(EVENT_TYPES)  # a new kind cannot be left without one
    assert set(_PHASES.values()) == set(get_args(Phase))
    for cls in EVENT_TYPES.values():
        assert "phase" not in cls.__dataclass_fields__  # read from the kind, never stored


async def test_a_runs_events_go_start_think_act_respond() -> None:
    model = ScriptedModel([call("add", a=1, b=2), finish("3")])
    outcome = await Agent(name="p", model=model, tools=[add]).run("add")
    assert [(e.kind, e.phase) for e in outcome.events] == [
        ("run_started", "start"),
        ("model_responded", "think"),
        ("tool_call_requested", "act"),
        ("policy_decided", "act"),
        ("tool_call_finished", "act"),
        ("model_responded", "think"),
        ("tool_call_requested", "act"),
        ("policy_decided", "act"),
        ("tool_call_finished", "act"),
        ("run_finished", "respond"),
    ]


async def test_the_best_effort_answer_after_a_limit_is_the_response() -> None:
    model = ScriptedModel([call("add", a=1, b=2), call("add", a=3, b=4), "It is 3 and 7."])
    outcome = await Agent(name="l", model=model, tools=[add], limits=Limits(max_steps=2)).run("add")
    assert outcome.status == "budget_exhausted"
    final = [e for e in outcome.events if e.kind == "model_responded"][-1]
    assert final.phase == "respond"
    assert [e.phase for e in outcome.events if e.kind == "limit_reached"] == ["respond"]


async def test_the_cli_status_line_shows_the_phase() -> None:
    from tether.cli.driving import _Status  # pyright: ignore[reportPrivateUsage]

    model = ScriptedModel([call("add", a=1, b=2), finish("3")])
    outcome = await Agent(name="s", model=model, tools=[add]).run("add")
    status = _Status(max_steps=25)
    lines = [status.update(e) for e in outcome.events]
    assert lines[0] == "step 0/25 · start: thinking · 0 tokens"
    assert lines[2].startswith("step 1/25 · act: tool add")
    # after the turn's last result the model is asked again: the line says so (it said
    # "tool call finished" for as long as the model took)
    finished_at = [e.kind for e in outcome.events].index("tool_call_finished")
    assert lines[finished_at] == "step 1/25 · act: model thinking · 0 tokens"
    assert lines[-1].startswith("step 2/25 · respond: finished")
