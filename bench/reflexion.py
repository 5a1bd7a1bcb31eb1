"""Does reflexion memory help? Tools that fail in a learnable way, run again and again.

Each task family has a tool that fails in a way the model can learn from its error: a unit
(a thermostat that takes kelvin), a format (a booking tool that takes ISO dates and 24-hour
times), a precondition (a report that needs an open session first). Each family runs
``--runs`` times in a row on the embedded 1.5B model (``LocalModel``, in-process), with a
different value each time, in two conditions:

- ``with``: ``Remember(reflexion=True, write_outcome=False)`` on one memory shared by the
  runs (``InProcessMemory`` with the embedded embedder): a failed call becomes a
  ``reflected`` event and, at the run's end, a lesson in episodic memory (the failure, and
  whether a corrected call succeeded), recalled by later runs of similar tasks and shown
  with the tool's description; a call that failed twice with the same arguments is not made
  a third time. Only lessons are remembered, so that the figure is reflexion's:
  ``--outcomes`` also remembers each run's task and answer (which the 1.5B model tends to
  copy as a claim of success, measured so);
- ``without``: the same agent with no memory.

Success is decided by the tool's own state (the right value was set), never by a model.
Prints one JSON line: ``runs``, ``families``, per condition the mean failed calls and steps
of each run index (``failed_calls_with``, ``failed_calls_without``, ``steps_with``,
``steps_without``: lists, run 1 first), ``success_with``/``success_without`` (percent), and
``later_failed_with``/``later_failed_without`` (mean failed calls of runs 2..N).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from tether import Agent, Remember, RunOutcome, tool
from tether.errors import ModelRetry
from tether.events import ToolCallFinished
from tether.limits import Limits
from tether.memory import InProcessMemory, MiniLMEmbedder
from tether.models.base import Model
from tether.policy import AllowAll
from tether.tools.base import Tool

INSTRUCTIONS = (
    "You complete tasks with tools. Call one tool at a time and read what it returns. "
    "If you remember lessons from earlier runs, use them. When the task is done, call "
    "finish_task with a one-sentence summary."
)


@dataclass
class World:
    """What the tools changed (checked after the run)."""

    temperature_k: float | None = None
    booked: tuple[str, str] | None = None
    session_open: bool = False
    sent: list[str] = field(default_factory=lambda: [])


def thermostat(world: World) -> list[Tool]:
    @tool
    def set_temperature(value: float) -> str:
        """Set the room's thermostat.

        Args:
            value: The temperature to hold.
        """
        if not 250 <= value <= 350:
            raise ModelRetry(
                f"value {value:g} is out of range: set_temperature takes kelvin (250 to 350); "
                "convert first (kelvin = celsius + 273.15)"
            )
        world.temperature_k = value
        return f"thermostat set to {value:g} K"

    return [set_temperature]


def booking(world: World) -> list[Tool]:
    @tool
    def book_meeting(date: str, time: str) -> str:
        """Book the meeting room.

        Args:
            date: The day of the meeting.
            time: When it starts.
        """
        import re

        if not re.fullmatch(r"\d{4}-\d{2}-\d{2}", date):
            raise ModelRetry(f"date {date!r} is not YYYY-MM-DD (for example 2026-03-03)")
        if not re.fullmatch(r"[0-2]\d:[0-5]\d", time):
            raise ModelRetry(f"time {time!r} is not 24-hour HH:MM (for example 15:00)")
        world.booked = (date, time)
        return f"booked {date} {time}"

    return [book_meeting]


def reporting(world: World) -> list[Tool]:
    @tool
    def open_session() -> str:
        """Open a reporting session."""
        world.session_open = True
        return "session open"

    @tool
    def send_report(name: str) -> str:
        """Send a report by name.

        Args:
            name: The report's name.
        """
        if not world.session_open:
            raise ModelRetry("no open session: call open_session first, then send_report")
        world.sent.append(name)
        return f"sent {name}"

    return [open_session, send_report]


@dataclass
class Family:
    name: str
    tools: Callable[[World], list[Tool]]
    goals: list[str]
    check: Callable[[World, int], bool]


CELSIUS = [21, 19, 23, 18, 22, 20]
DAYS = [("March 3rd 2027", "3pm"), ("April 14th 2027", "10am"), ("May 2nd 2027", "4:30pm")]
DAYS += [("June 9th 2027", "9am"), ("July 21st 2027", "2pm"), ("August 5th 2027", "11am")]
DAY_ISO = ["2027-03-03", "2027-04-14", "2027-05-02", "2027-06-09", "2027-07-21", "2027-08-05"]
REPORTS = ["sales-q1", "costs-q1", "sales-q2", "costs-q2", "hiring", "churn"]

FAMILIES = [
    Family(
        "unit",
        thermostat,
        [f"Set the room temperature to {c} degrees Celsius." for c in CELSIUS],
        lambda w, i: w.temperature_k is not None and abs(w.temperature_k - CELSIUS[i] - 273.15) < 1,
    ),
    Family(
        "format",
        booking,
        [f"Book the meeting room for {d} at {t}." for d, t in DAYS],
        lambda w, i: w.booked is not None and w.booked[0] == DAY_ISO[i],
    ),
    Family(
        "precondition",
        reporting,
        [f"Send the report named {r}." for r in REPORTS],
        lambda w, i: REPORTS[i] in w.sent,
    ),
]


def failed_calls(outcome: RunOutcome[Any]) -> int:
    return sum(
        1
        for e in outcome.events
        if isinstance(e, ToolCallFinished) and e.is_error and e.tool != "finish_task"
    )


async def run_family(
    family: Family, model: Model, runs: int, reflexion: bool, verbose: bool, outcomes: bool
) -> list[tuple[int, int, bool, float]]:
    memory = InProcessMemory(embedder=MiniLMEmbedder()) if reflexion else None
    out: list[tuple[int, int, bool, float]] = []
    for i in range(runs):
        world = World()
        agent = Agent(
            name=f"reflexion-{family.name}",
            instructions=INSTRUCTIONS,
            model=model,
            tools=family.tools(world),
            policy=AllowAll(),
            limits=Limits(max_steps=8, max_retries=4),
            memory=None
            if memory is None
            else Remember(memory=memory, reflexion=True, write_outcome=outcomes),
        )
        start = time.perf_counter()
        outcome = await agent.run(family.goals[i])
        wall = time.perf_counter() - start
        ok = family.check(world, i)
        out.append((failed_calls(outcome), outcome.steps, ok, wall))
        if verbose:
            print(
                f"{family.name} run {i + 1} {'with' if reflexion else 'without'}: "
                f"{outcome.status} ok={ok} failed={out[-1][0]} steps={outcome.steps} "
                f"{wall:.0f}s",
                file=sys.stderr,
            )
    return out


async def main(runs: int, only: list[str], verbose: bool, outcomes: bool) -> dict[str, object]:
    from tether.models.local import LocalModel
    from tether.models.weights import DEFAULT_LOCAL_MODEL, KNOWN_MODELS, assemble

    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    model = LocalModel(assemble(KNOWN_MODELS[DEFAULT_LOCAL_MODEL]), context=8192)
    families = [f for f in FAMILIES if not only or f.name in only]
    line: dict[str, object] = {
        "bench": "reflexion",
        "runs": runs,
        "families": len(families),
        "outcomes_remembered": outcomes,
    }
    for condition in ("with", "without"):
        by_run: list[list[tuple[int, int, bool, float]]] = [[] for _ in range(runs)]
        for family in families:
            for i, result in enumerate(
                await run_family(family, model, runs, condition == "with", verbose, outcomes)
            ):
                by_run[i].append(result)
        line[f"failed_calls_{condition}"] = [
            round(statistics.mean(r[0] for r in results), 2) for results in by_run
        ]
        line[f"steps_{condition}"] = [
            round(statistics.mean(r[1] for r in results), 2) for results in by_run
        ]
        every = [r for results in by_run for r in results]
        line[f"success_{condition}"] = round(100 * sum(r[2] for r in every) / len(every), 1)
        line[f"later_failed_{condition}"] = round(
            statistics.mean(r[0] for results in by_run[1:] for r in results), 2
        )
        line[f"median_wall_s_{condition}"] = round(statistics.median(r[3] for r in every), 1)
    return line


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--runs", type=int, default=4, help="runs of each family in a row")
    parser.add_argument("--only", action="append", default=[], help="a family (repeatable)")
    parser.add_argument("-v", "--verbose", action="store_true", help="each run on stderr")
    parser.add_argument(
        "--outcomes",
        action="store_true",
        help="also remember each run's task and answer (default: lessons only)",
    )
    args = parser.parse_args()
    if not 2 <= args.runs <= len(CELSIUS):
        parser.error(f"--runs is 2 to {len(CELSIUS)}")
    result = asyncio.run(main(args.runs, args.only, args.verbose, args.outcomes))
    result["load"] = os.getloadavg()[0]
    print(json.dumps(result))
