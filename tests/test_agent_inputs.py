"""An Agent's settings and a run's inputs of the wrong kind are errors that name them.

They used to fail at the first run, deep inside (``AttributeError: 'NoneType' object has no
attribute 'phased'``, ``'str' object has no attribute 'acquire'``).
"""

from __future__ import annotations

from typing import Any

import pytest

from tether import Agent
from tether.errors import ConfigError, UserError
from tether.stores import MemoryStore
from tether.testing import ScriptedModel, finish


@pytest.mark.parametrize(
    ("settings", "says"),
    [
        ({"tools": [42]}, "Agent(tools=...) takes @tool functions, plain functions and Tool"),
        ({"tools": "calculator"}, "Agent(tools=...) takes a list of tools, not str"),
        ({"instructions": None}, "Agent(instructions=...) takes a string"),
        ({"limits": None}, "Agent(limits=...) takes a Limits(...), not NoneType"),
        ({"policy": "deny"}, "Agent(policy=...) takes a Policy"),
        ({"store": "runs.db"}, "Agent(store=...) takes a run store"),
        ({"model": 42}, "Agent(model=...) takes a Model, a name"),
        ({"name": 7}, "Agent(name=...) takes a string, not int"),
        ({"can_ask_user": "yes"}, "Agent(can_ask_user=...) takes True or False"),
        ({"max_recoveries": -1}, "Agent(max_recoveries=...) takes a whole number >= 0"),
    ],
)
def test_a_setting_of_the_wrong_kind_is_a_config_error_naming_it(
    settings: dict[str, Any], says: str
) -> None:
    with pytest.raises(ConfigError) as raised:
        Agent(**settings)
    assert says in str(raised.value)


async def test_a_goal_that_is_not_text_is_a_user_error() -> None:
    with pytest.raises(UserError, match="the goal must be a non-empty string, not None"):
        await Agent(model=ScriptedModel([finish("x")])).run(None)  # type: ignore[arg-type]  # pyright: ignore[reportArgumentType]


@pytest.mark.parametrize("approvals", [None, "yes", [{"call_id": "c1"}]])
async def test_approvals_that_are_not_a_list_of_approvals_are_a_user_error(
    approvals: object,
) -> None:
    agent = Agent(model=ScriptedModel([finish("x")]), store=MemoryStore())
    with pytest.raises(UserError, match=r"approvals takes a list of Approval\(...\)"):
        await agent.resume("r1", approvals=approvals)  # type: ignore[arg-type]  # pyright: ignore[reportArgumentType]
