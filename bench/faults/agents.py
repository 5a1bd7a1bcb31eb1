"""The agents of the fault cases; ``tether run --agent bench.faults.agents:NAME`` loads them.

Each NAME is a factory (the CLI calls it) that reads its knobs from the environment, so a
``tether resume`` in another process rebuilds the same agent. Every tool is allowed by the
agent's policy; the models are scripted (no real model).

- ``steady``: ``$BENCH_FAULTS_STEPS`` calls of ``tick`` (an awaited pause of
  ``$BENCH_FAULTS_STEP_SECONDS``), then finishes.
- ``filler``: two ticks, ``fill_disk`` (which lowers the process's file-size limit to one
  byte when ``$BENCH_FAULTS_FILL`` is ``1``), a tick, then finishes.
- ``slow``: one ``slow_effect`` (a side effect, counted in ``$BENCH_FAULTS_EFFECTS``, that
  takes ``$BENCH_FAULTS_TOOL_SECONDS``).
- ``swallower``: a tool that swallows every cancellation (``tool_timeout=1, max_seconds=3``).
- ``blocker``: an ``async`` tool that calls ``time.sleep(4)`` (``tool_timeout=1``).
- ``hog``: an ``async`` tool that calls ``time.sleep(3600)`` (``tool_timeout=1, max_seconds=2``).
- ``crashy``: a plan of side effects with no key (``effect``), keyed ones (``keyed``) and
  reads (``peek``), one turn of two parallel calls; each effect is counted in
  ``$BENCH_FAULTS_EFFECTS``.
- ``gated``: waits for a human's approval of ``effect``.
"""

from __future__ import annotations

import asyncio
import os
import resource
import time

from tether import Agent, Limits, RulePolicy, ToolContext, allow, require_approval, tool
from tether.testing import ScriptedModel, call, finish

STEPS = "BENCH_FAULTS_STEPS"
STEP_SECONDS = "BENCH_FAULTS_STEP_SECONDS"
MAX_SECONDS = "BENCH_FAULTS_MAX_SECONDS"
TOOL_SECONDS = "BENCH_FAULTS_TOOL_SECONDS"
EFFECTS = "BENCH_FAULTS_EFFECTS"
FILL = "BENCH_FAULTS_FILL"

CRASHY_PAUSE = 0.15
"""Seconds each of ``crashy``'s tools takes after its effect (room for a kill to land)."""


def _number(name: str, default: float) -> float:
    return float(os.environ.get(name) or default)


def record_effect(line: str) -> None:
    """Count an effect in ``$BENCH_FAULTS_EFFECTS`` (one ``write``: survives a ``kill -9``)."""
    path = os.environ.get(EFFECTS)
    if not path:
        return
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, (line + "\n").encode())
    finally:
        os.close(fd)


# -- tools ---------------------------------------------------------------------------------


@tool(read_only=True, open_world=False)
async def tick(n: int) -> str:
    """A step of work that changes nothing.

    Args:
        n: Which step.
    """
    await asyncio.sleep(_number(STEP_SECONDS, 0.2))
    return f"tick {n}"


@tool(read_only=True, idempotent=True, open_world=False)
def fill_disk() -> str:
    """Looks at the disk (and, where the bench asks for it, fills it up)."""
    if os.environ.get(FILL) == "1":
        hard = resource.getrlimit(resource.RLIMIT_FSIZE)[1]
        resource.setrlimit(resource.RLIMIT_FSIZE, (1, hard))
    return "the disk is full now"


@tool(open_world=False)
async def effect(n: int, ctx: ToolContext) -> str:
    """A side effect with no idempotency key (it must never run twice).

    Args:
        n: Which effect.
    """
    record_effect(f"effect {ctx.run_id} {ctx.call_id}")
    await asyncio.sleep(CRASHY_PAUSE)
    return f"effect {n} done"


@tool(open_world=False, idempotent=False, idempotency_key=True)
async def keyed(n: int, ctx: ToolContext) -> str:
    """A side effect the world deduplicates by the call's idempotency key.

    Args:
        n: Which effect.
    """
    record_effect(f"keyed {ctx.idempotency_key}")
    await asyncio.sleep(CRASHY_PAUSE)
    return f"keyed {n} done"


@tool(read_only=True, open_world=False)
async def peek(n: int) -> str:
    """Reads without changing anything.

    Args:
        n: What to read.
    """
    await asyncio.sleep(CRASHY_PAUSE)
    return f"peeked {n}"


@tool(open_world=False)
async def stubborn(n: int) -> str:
    """Ignores every cancellation (the fault under test).

    Args:
        n: Which call.
    """
    while True:
        try:  # noqa: SIM105 - written as such tools are: the fault under test
            await asyncio.sleep(10)
        except asyncio.CancelledError:
            pass


@tool(open_world=False)
async def blocking(n: int) -> str:
    """Calls blocking code from async code for 4 s.

    Args:
        n: Which call.
    """
    time.sleep(4)  # noqa: ASYNC251 - the fault under test
    return "late"


@tool(open_world=False)
async def hog(n: int) -> str:
    """Blocks the event loop for an hour.

    Args:
        n: Which call.
    """
    time.sleep(3600)  # noqa: ASYNC251 - the fault under test
    return "never"


def _allow(*names: str) -> RulePolicy:
    return RulePolicy(None, allow(list(names), reason="the bench's own tools"))


# -- agents ----------------------------------------------------------------------------------


def steady() -> Agent:
    steps = int(_number(STEPS, 3))
    return Agent(
        name="steady",
        model=ScriptedModel([*(call("tick", n=i) for i in range(steps)), finish("done")]),
        tools=[tick],
        limits=Limits(
            max_steps=steps + 5,
            max_tool_calls=steps + 5,
            max_seconds=_number(MAX_SECONDS, 150),
            tool_timeout=30,
        ),
        policy=_allow("tick"),
    )


def filler() -> Agent:
    script = [call("tick", n=1), call("tick", n=2), call("fill_disk"), call("tick", n=3)]
    return Agent(
        name="filler",
        model=ScriptedModel([*script, finish("done")]),
        tools=[tick, fill_disk],
        limits=Limits(max_seconds=60, tool_timeout=30),
        policy=_allow("tick", "fill_disk"),
    )


def slow() -> Agent:
    seconds = _number(TOOL_SECONDS, 45)

    @tool(open_world=False, timeout=seconds + 60)
    async def slow_effect(n: int, ctx: ToolContext) -> str:
        """A side effect that takes long (no idempotency key: it must never run twice).

        Args:
            n: Which effect.
        """
        record_effect(f"effect {ctx.run_id} {ctx.call_id}")
        await asyncio.sleep(seconds)
        return f"effect {n} done"

    return Agent(
        name="slow",
        model=ScriptedModel([call("slow_effect", n=1), finish("done")]),
        tools=[slow_effect],
        limits=Limits(tool_timeout=seconds + 60, max_seconds=seconds + 60),
        policy=_allow("slow_effect"),
    )


def swallower() -> Agent:
    return Agent(
        name="swallower",
        model=ScriptedModel([call("stubborn", n=1), finish("done")]),
        tools=[stubborn],
        limits=Limits(tool_timeout=1, max_seconds=3),
        policy=_allow("stubborn"),
    )


def blocker() -> Agent:
    return Agent(
        name="blocker",
        model=ScriptedModel([call("blocking", n=1), finish("done")]),
        tools=[blocking],
        limits=Limits(tool_timeout=1, max_seconds=10),
        policy=_allow("blocking"),
    )


def hogger() -> Agent:
    return Agent(
        name="hog",
        model=ScriptedModel([call("hog", n=1), finish("done")]),
        tools=[hog],
        limits=Limits(tool_timeout=1, max_seconds=2),
        policy=_allow("hog"),
    )


CRASHY_PLAN = [
    call("effect", n=1),
    call("keyed", n=2),
    call("peek", n=3),
    [call("effect", n=4), call("keyed", n=5)],
    call("effect", n=6),
    call("peek", n=7),
    finish("all done"),
]


def crashy() -> Agent:
    return Agent(
        name="crashy",
        model=ScriptedModel(CRASHY_PLAN),
        tools=[effect, keyed, peek],
        limits=Limits(max_seconds=60, tool_timeout=30),
        policy=_allow("effect", "keyed"),
    )


def gated() -> Agent:
    return Agent(
        name="gated",
        model=ScriptedModel([call("effect", n=1), finish("done")]),
        tools=[effect],
        policy=RulePolicy(None, require_approval("effect", reason="a human decides")),
    )


AGENTS = {
    "steady": steady,
    "filler": filler,
    "slow": slow,
    "swallower": swallower,
    "blocker": blocker,
    "hog": hogger,
    "crashy": crashy,
    "gated": gated,
}
"""Every agent by the name the bench uses (``--agent bench.faults.agents:<factory>``)."""


def ref(name: str) -> str:
    """The ``--agent`` reference of the agent the bench calls ``name``."""
    return f"{__name__}:{AGENTS[name].__name__}"
