"""A server's ``Retry-After``: read from its headers, and waited for within the run's time."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from tether import Agent, Limits, ModelRequest
from tether.errors import ModelError
from tether.events import ModelFailed
from tether.retry import Backoff, retry_after
from tether.testing import FunctionModel, ScriptStep, finish


@pytest.mark.parametrize(
    ("headers", "wait"),
    [
        ({"retry-after": "5"}, 5.0),
        ({"retry-after": "0.25"}, 0.25),
        ({"retry-after-ms": "1500", "retry-after": "9"}, 1.5),
        ({"retry-after": "Sun, 29 Nov 2026 12:00:30 GMT"}, 30.0),
        ({"retry-after": "Sun, 29 Nov 2026 11:00:00 GMT"}, None),  # in the past
        ({"retry-after": "soon"}, None),
        ({"retry-after": "nan"}, None),
        ({"retry-after": "-3"}, None),
        ({"retry-after-ms": "x", "retry-after": "2"}, 2.0),
        ({}, None),
    ],
)
def test_what_a_server_asks_to_wait(headers: dict[str, str], wait: float | None) -> None:
    now = datetime(2026, 11, 29, 12, 0, 0, tzinfo=UTC)
    assert retry_after(headers, now=now) == wait


def _rate_limited(wait: float) -> FunctionModel:
    calls: list[int] = []

    def respond(request: ModelRequest) -> ScriptStep:
        calls.append(1)
        if len(calls) == 1:
            raise ModelError("rate limited", transient=True, status_code=429, retry_after=wait)
        return finish("done")

    return FunctionModel(respond)


async def test_the_run_waits_as_long_as_the_server_asks() -> None:
    # the header was dropped: the run retried after its own back-off (0.35 s, 0.76 s...)
    agent = Agent(model=_rate_limited(0.3), backoff=Backoff(initial=0.01, jitter=0.0))
    outcome = await agent.run("hi")
    assert outcome.status == "finished"
    (failed,) = [e for e in outcome.events if isinstance(e, ModelFailed)]
    assert failed.will_retry
    assert failed.retry_in_s == pytest.approx(0.3)
    assert outcome.duration_s >= 0.3


@pytest.mark.parametrize("limits", [Limits(max_seconds=5), Limits()])
async def test_a_wait_past_the_run_time_or_the_cap_is_not_waited(limits: Limits) -> None:
    agent = Agent(model=_rate_limited(3600), limits=limits)
    outcome = await agent.run("hi")
    assert outcome.status == "budget_exhausted"
    (failed,) = [e for e in outcome.events if isinstance(e, ModelFailed)]
    assert not failed.will_retry
    assert outcome.duration_s < 2
