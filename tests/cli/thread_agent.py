"""An agent whose tool sleeps in a worker thread (``tether run --agent`` loads it).

The tool touches ``$TETHER_TEST_STARTED`` when it starts, so a test knows when to press Ctrl-C.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

from tether import Agent, RulePolicy, allow, tool
from tether.testing import ScriptedModel, call, finish


@tool(open_world=False)
def nap(seconds: int) -> str:
    """Sleeps in a worker thread, which nothing can stop.

    Args:
        seconds: How long.
    """
    Path(os.environ["TETHER_TEST_STARTED"]).touch()
    time.sleep(seconds)
    return "rested"


agent = Agent(
    name="napper",
    model=ScriptedModel([call("nap", seconds=60), finish("done")]),
    tools=[nap],
    policy=RulePolicy(None, allow(["nap"], reason="the test's own tool")),
)
