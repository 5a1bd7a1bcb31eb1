"""A call the policy denied is shown by ``tether run``, whatever the run's status."""

from __future__ import annotations

import json

from typer.testing import CliRunner

from tether import Agent, tool
from tether.cli.app import app
from tether.testing import ScriptedModel, call, finish


@tool
def mystery(x: int) -> int:
    """Declares nothing about itself: the default policy denies it.

    Args:
        x: A number.
    """
    return x


AGENT = Agent(
    name="denied",
    model=ScriptedModel([call("mystery", x=1), finish("could not")]),
    tools=[mystery],
)
REF = "tests.cli.test_denied_cli:AGENT"


def test_a_denied_call_is_shown_with_its_rule_and_in_the_json() -> None:
    ran = CliRunner().invoke(app, ["run", "go", "--agent", REF, "--no-store", "--no-log"])
    assert ran.exit_code == 0, ran.output  # the run itself finished
    (line,) = [x for x in ran.stderr.splitlines() if x.startswith("denied by policy")]
    assert "mystery" in line
    assert "default:unannotated" in line
    ran = CliRunner().invoke(app, ["run", "go", "--agent", REF, "--no-store", "--no-log", "--json"])
    denied = json.loads(ran.stdout)["denied"]
    assert [(d["tool"], d["rule"]) for d in denied] == [("mystery", "default:unannotated")]
