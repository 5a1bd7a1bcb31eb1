"""Loop overhead against a hand-written asyncio loop doing the same work, in one process.

The peer workload: one async no-op tool ``add(a, b)``; a scripted model that calls it K=10
times and then finishes; zero model latency, the model awaiting ``asyncio.sleep(0)`` once per
turn. tether runs it with its full machinery (events, hash chain, fold, validation, policy);
the raw loop keeps an OpenAI-style message list and calls the tool directly.

Prints one JSON line: tether_us_per_step, raw_us_per_step, ratio, concurrent_runs,
concurrent_wall_s, raw_concurrent_wall_s, concurrent_ratio, peak_rss_mib, import_ms (the
package compiled first, as an installation has it) and import_uncompiled_ms (every module
compiled from source, as on a machine that never wrote bytecode).
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from tether import Agent, Limits, ModelRequest, ModelResponse, ToolCall, tool
from tether.models.base import Model
from tether.stores import MemoryStore, RunStore, SqliteStore

K = 10
STEPS = K + 1  # K tool turns + the finishing turn


@tool(read_only=True, open_world=False)  # allowed by the default policy, which is measured
async def add(a: int, b: int) -> int:
    """Add two integers.

    Args:
        a: The first.
        b: The second.
    """
    return a + b


class PeerModel(Model):
    """Calls add K times, then finish_task; one ``sleep(0)`` per turn, like a network await."""

    real = False

    @property
    def name(self) -> str:
        return "peer-workload"

    async def request(self, request: ModelRequest) -> ModelResponse:
        await asyncio.sleep(0)
        turn = (len(request.messages) - 1) // 2  # goal, then (assistant, tool result) pairs
        if turn < K:
            return ModelResponse(
                tool_calls=(ToolCall(id=f"c{turn}", name="add", arguments={"a": turn, "b": 1}),)
            )
        return ModelResponse(
            tool_calls=(ToolCall(id=f"c{turn}", name="finish_task", arguments={"answer": "done"}),)
        )


async def raw_add(a: int, b: int) -> int:
    return a + b


async def raw_run() -> list[dict[str, Any]]:
    """The same work without a framework: a message list, a model await, a tool call."""
    messages: list[dict[str, Any]] = [{"role": "user", "content": "add"}]
    for turn in range(STEPS):
        await asyncio.sleep(0)
        if turn < K:
            call = {"id": f"c{turn}", "name": "add", "arguments": {"a": turn, "b": 1}}
            messages.append({"role": "assistant", "tool_calls": [call]})
            result = await raw_add(**call["arguments"])
            messages.append({"role": "tool", "tool_call_id": call["id"], "content": str(result)})
        else:
            messages.append({"role": "assistant", "content": "done"})
    return messages


def median_us_per_step(samples: list[float]) -> float:
    return statistics.median(samples) / STEPS * 1e6


async def measure(agent: Agent, runs: int, concurrent: int) -> dict[str, float]:
    for _ in range(20):  # warm up both
        await agent.run("add")
        await raw_run()
    tether_s: list[float] = []
    raw_s: list[float] = []
    for _ in range(runs):  # interleave so that machine noise hits both alike
        t = time.perf_counter()
        outcome = await agent.run("add")
        tether_s.append(time.perf_counter() - t)
        assert outcome.status == "finished", outcome
        assert outcome.tool_calls == K, outcome
        t = time.perf_counter()
        await raw_run()
        raw_s.append(time.perf_counter() - t)
    tether_walls: list[float] = []
    raw_walls: list[float] = []
    for _ in range(3):  # alternate, each after a collection: the noise of one hits both
        gc.collect()
        t = time.perf_counter()
        outcomes = await asyncio.gather(*(agent.run("add") for _ in range(concurrent)))
        tether_walls.append(time.perf_counter() - t)
        assert all(o.status == "finished" for o in outcomes)
        del outcomes
        gc.collect()
        t = time.perf_counter()
        await asyncio.gather(*(raw_run() for _ in range(concurrent)))
        raw_walls.append(time.perf_counter() - t)
    concurrent_wall = statistics.median(tether_walls)
    raw_concurrent_wall = statistics.median(raw_walls)
    return {
        "tether_us_per_step": round(median_us_per_step(tether_s), 2),
        "raw_us_per_step": round(median_us_per_step(raw_s), 2),
        "concurrent_wall_s": round(concurrent_wall, 3),
        "raw_concurrent_wall_s": round(raw_concurrent_wall, 4),
        "concurrent_ratio": round(concurrent_wall / raw_concurrent_wall, 2),
    }


def import_ms(repeats: int = 7, *, compiled: bool = True) -> float:
    """Median wall time of ``import tether`` in a fresh interpreter.

    ``compiled``: the package's bytecode is written first (``compileall``, which writes it
    even where ``PYTHONDONTWRITEBYTECODE`` is set), as a normal installation has it (pip
    compiles what it installs). Otherwise tether's own modules are compiled from source on
    every import (a copy without bytecode, which is never written), as an editable install
    has them on a machine with ``PYTHONDONTWRITEBYTECODE`` set; its dependencies are compiled.
    """
    import compileall
    import shutil
    import tempfile

    import tether

    package = Path(tether.__file__).parent
    code = "import time; t=time.perf_counter(); import tether; print(time.perf_counter()-t)"
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    with tempfile.TemporaryDirectory() as copy:
        if compiled:
            compileall.compile_dir(package, quiet=1)
        else:
            shutil.copytree(package, Path(copy) / "tether", ignore=shutil.ignore_patterns("*.pyc"))
            env["PYTHONDONTWRITEBYTECODE"] = "1"
            env["PYTHONPATH"] = copy

        def once() -> float:
            done = subprocess.run(
                [sys.executable, "-c", code], capture_output=True, text=True, check=True, env=env
            )
            return float(done.stdout)

        once()
        return round(statistics.median(once() for _ in range(repeats)) * 1000, 1)


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--runs", type=int, default=300, help="sequential runs (>= 200)")
    parser.add_argument("--concurrent", type=int, default=1000, help="concurrent runs")
    parser.add_argument("--log-dir", action="store_true", help="also write each run's JSONL log")
    parser.add_argument(
        "--store",
        choices=["none", "memory", "sqlite"],
        default="none",
        help="commit every run to a store (sqlite: a real file in a temporary directory)",
    )
    args = parser.parse_args()
    limits = Limits()  # the defaults, as a user would have them
    with tempfile.TemporaryDirectory() as tmp:
        store: RunStore | None = None
        if args.store == "memory":
            store = MemoryStore()
        elif args.store == "sqlite":
            store = SqliteStore(Path(tmp) / "bench.db")
        agent = Agent(
            name="overhead",
            model=PeerModel(),
            tools=[add],
            limits=limits,
            log_dir=Path(tmp) if args.log_dir else None,
            store=store,
        )
        result = asyncio.run(measure(agent, args.runs, args.concurrent))
        if store is not None:
            asyncio.run(store.close())
    peak_rss_mib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(
        json.dumps(
            {
                "bench": "overhead",
                "store": args.store,
                "jsonl_logs": args.log_dir,
                "steps_per_run": STEPS,
                "runs": args.runs,
                **result,
                "ratio": round(result["tether_us_per_step"] / result["raw_us_per_step"], 2),
                "concurrent_runs": args.concurrent,
                "peak_rss_mib": round(peak_rss_mib, 1),
                "import_ms": import_ms(),
                "import_uncompiled_ms": import_ms(compiled=False),
            }
        )
    )


if __name__ == "__main__":
    main()
