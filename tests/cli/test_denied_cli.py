"""A call the policy denied is shown by ``tether run``, and its exit code says so."""

from __future__ import annotations

import json
from dataclasses import replace

from typer.testing import CliRunner

from tether import Agent, tool
from tether.cli.app import app
from tether.policy import ArgCondition, RulePolicy, allow, deny
from tether.testing import ScriptedModel, call, finish


@tool
def mystery(x: int) -> int:
    """Declares nothing about itself: from outside, the default policy denies it.

    Args:
        x: A number.
    """
    return x


OUTSIDE = replace(mystery, definition=replace(mystery.definition, origin="mcp:test"))
AGENT = Agent(
    name="denied",
    model=ScriptedModel([call("mystery", x=1), finish("could not")]),
    tools=[OUTSIDE],
)
MADE_UP = Agent(
    name="made-up",
    model=ScriptedModel([call("mystery", x=1), call("mystery", x=2), finish("done")]),
    tools=[OUTSIDE],
    policy=RulePolicy(
        deny("mystery", when=[ArgCondition(path="x", op="eq", value=1)]), allow("mystery")
    ),
)
OWN = Agent(
    name="own",
    model=ScriptedModel([call("mystery", x=1), finish("1")]),
    tools=[mystery],
)
REF = "tests.cli.test_denied_cli:AGENT"


def test_a_denied_call_is_shown_with_its_rule_and_in_the_json() -> None:
    ran = CliRunner().invoke(app, ["run", "go", "--agent", REF, "--no-store", "--no-log"])
    assert ran.exit_code == 3, ran.output  # finished, but its answer lacks the denied call
    assert "the answer was given without 1 call(s) the policy denied" in ran.stderr
    (line,) = [x for x in ran.stderr.splitlines() if x.startswith("denied by policy")]
    assert "mystery" in line
    assert "default:unannotated" in line
    ran = CliRunner().invoke(app, ["run", "go", "--agent", REF, "--no-store", "--no-log", "--json"])
    denied = json.loads(ran.stdout)["denied"]
    assert [(d["tool"], d["rule"]) for d in denied] == [("mystery", "default:unannotated")]
    assert json.loads(ran.stdout)["unresolved_denials"] == [denied[0]["call_id"]]
    assert ran.exit_code == 3


def test_the_developers_own_tool_runs_and_exits_zero() -> None:
    ran = CliRunner().invoke(
        app, ["run", "go", "--agent", "tests.cli.test_denied_cli:OWN", "--no-store", "--no-log"]
    )
    assert ran.exit_code == 0, ran.output
    assert "denied by policy" not in ran.stderr


def test_a_denial_a_later_call_made_up_for_exits_zero() -> None:
    """mystery(x=1) is denied, mystery(x=2) runs: the answer does not lack the tool."""
    ran = CliRunner().invoke(
        app,
        ["run", "go", "--agent", "tests.cli.test_denied_cli:MADE_UP", "--no-store", "--no-log"],
    )
    assert ran.exit_code == 0, ran.output
    assert len([x for x in ran.stderr.splitlines() if x.startswith("denied by policy")]) == 1
