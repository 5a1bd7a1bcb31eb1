"""Crash harness: SIGKILL an agent at named points, resume it in a fresh process, check the world.

The world is a counting service on loopback (a thread of this process, so it outlives the
agents). Its tools: ``effect`` (side-effecting, no key: must never run twice), ``keyed``
(side-effecting, sends the call's idempotency key; the world deduplicates by it) and
``peek`` (read-only). Each run's agent runs in a subprocess on a real SQLite file and is
killed at one point:

- ``before_intent``  / ``after_intent``: around the commit of a turn's intents
- ``in_tool``        : inside a side-effecting tool, after its effect, before it returns
- ``before_result``  / ``after_result``: around the commit of a tool result
- ``in_model``       : during a model call
- ``in_outcome``     : halfway through writing the commit of ``run_finished`` (a torn write)

A fresh process then resumes the run (again until it reaches a terminal state). Oracles:
every run is terminal; no call of ``effect`` took effect twice; every ``keyed`` call the log
shows as done took effect exactly once; ``tool_call_unknown`` events equal the crashes that
left a side-effecting call without a key in flight; nothing the killed process had
committed is missing afterwards.

    python bench/crash.py --runs 50 [--seed 1]      # one JSON line
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import random
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

from tether import Agent, ModelRequest, ModelResponse, ToolCall, ToolContext, tool
from tether.events import (
    Event,
    PolicyDecided,
    ToolCallFinished,
    ToolCallRequested,
    ToolCallUnknown,
)
from tether.models.function import FunctionModel
from tether.outcome import TERMINAL_STATUSES
from tether.policy import RulePolicy, allow
from tether.stores import RunNotFound
from tether.stores._pendinglog import PendingLog
from tether.stores.sqlite import SqliteStore

KILL_POINTS = (
    "before_intent",
    "after_intent",
    "in_tool",
    "before_result",
    "after_result",
    "in_model",
    "in_outcome",
)

# The scripted plan every run follows: (tool, n) per turn; a list is one turn of parallel calls.
PLAN: list[list[tuple[str, int]]] = [
    [("effect", 1)],
    [("keyed", 2)],
    [("peek", 3)],
    [("effect", 4), ("keyed", 5)],
]


# -- the world -----------------------------------------------------------------------------


class World:
    """Counts effects per call and deduplicates keyed effects (a thread-safe TCP service)."""

    def __init__(self) -> None:
        self.effects: Counter[str] = Counter()
        self.keys: Counter[str] = Counter()
        self.lock = threading.Lock()
        self.server = socket.create_server(("127.0.0.1", 0))
        self.port = self.server.getsockname()[1]
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while True:
            conn, _ = self.server.accept()
            threading.Thread(target=self._handle, args=(conn,), daemon=True).start()

    def _handle(self, conn: socket.socket) -> None:
        with contextlib.suppress(OSError):  # an agent killed mid-conversation: the point
            self._converse(conn)

    def _converse(self, conn: socket.socket) -> None:
        with conn, conn.makefile("rwb") as stream:
            for line in stream:
                msg = json.loads(line)
                with self.lock:
                    if msg["op"] == "effect":
                        self.effects[msg["call"]] += 1
                    elif msg["op"] == "keyed":
                        self.keys[msg["key"]] += 1  # attempts; the effect happens once per key
                stream.write(b"ok\n")
                stream.flush()


def world_call(port: int, message: dict[str, Any]) -> None:
    with socket.create_connection(("127.0.0.1", port)) as conn, conn.makefile("rwb") as stream:
        stream.write(json.dumps(message).encode() + b"\n")
        stream.flush()
        stream.readline()


# -- the agent process -------------------------------------------------------------------------


def agent_main(args: argparse.Namespace) -> None:  # noqa: C901 - the whole scripted world
    """Run (or resume) one run; die by SIGKILL at the chosen point."""

    kill_point: str = args.kill_point
    kill_at: int = args.kill_at
    seen: Counter[str] = Counter()
    committed_log = Path(args.committed)

    def die_if(point: str) -> None:
        if point == kill_point:
            seen[point] += 1
            if seen[point] == kill_at:
                os.kill(os.getpid(), signal.SIGKILL)

    class KillingStore(SqliteStore):
        async def append(self, run_id: str, events: Any, *, lease: Any = None) -> None:
            events = list(events)
            intents = any(isinstance(e, ToolCallRequested) for e in events)
            results = any(
                isinstance(e, ToolCallFinished) and e.tool != "finish_task" for e in events
            )
            if intents:
                die_if("before_intent")
            if results:
                die_if("before_result")
            await super().append(run_id, events, lease=lease)
            with committed_log.open("a") as fh:  # noqa: ASYNC230 - must be durable before going on
                fh.write("".join(f"{e.seq} {e.hash}\n" for e in events))
                fh.flush()
                os.fsync(fh.fileno())
            if intents:
                die_if("after_intent")
            if results:
                die_if("after_result")

        def __init__(self, path: Path) -> None:
            super().__init__(path)
            assert self.pending_dir is not None
            self._log = TearingLog(self.pending_dir)

    class TearingLog(PendingLog):
        def write(self, data: bytes) -> tuple[int, int]:
            if kill_point == "in_outcome" and b'"kind":"run_finished"' in data:
                seen["in_outcome"] += 1
                if seen["in_outcome"] == kill_at:
                    super().write(data[: len(data) // 2])  # the process dies mid-write
                    os.kill(os.getpid(), signal.SIGKILL)
            return super().write(data)

    port = args.port

    @tool(open_world=False)
    def effect(n: int, ctx: ToolContext) -> str:
        """A side effect with no idempotency key.

        Args:
            n: Which effect.
        """
        world_call(port, {"op": "effect", "call": f"{ctx.run_id}:{ctx.call_id}"})
        die_if("in_tool")
        return f"effect {n} done"

    @tool(open_world=False, idempotent=False, idempotency_key=True)
    def keyed(n: int, ctx: ToolContext) -> str:
        """A side effect the world deduplicates by idempotency key.

        Args:
            n: Which effect.
        """
        world_call(port, {"op": "keyed", "key": ctx.idempotency_key})
        die_if("in_tool")
        return f"keyed {n} done"

    @tool(read_only=True, open_world=False)
    def peek(n: int) -> str:
        """Reads without changing anything.

        Args:
            n: What to read.
        """
        return f"peeked {n}"

    def decide(request: ModelRequest) -> ModelResponse:
        die_if("in_model")
        turn = sum(1 for m in request.messages if m.kind == "assistant")
        if turn < len(PLAN):
            calls = tuple(
                ToolCall(id=f"t{turn}c{i}", name=name, arguments={"n": n})
                for i, (name, n) in enumerate(PLAN[turn])
            )
            return ModelResponse(tool_calls=calls)
        return ModelResponse(
            tool_calls=(
                ToolCall(id=f"t{turn}f", name="finish_task", arguments={"answer": "all done"}),
            )
        )

    store = KillingStore(args.db)
    agent = Agent(
        name="crashy",
        model=FunctionModel(decide),
        tools=[effect, keyed, peek],
        store=store,
        policy=RulePolicy(None, allow(["effect", "keyed"], reason="the harness's own effects")),
    )

    async def go() -> None:
        if args.resume:
            outcome = await agent.resume(args.run_id)
        else:
            outcome = await agent.run("do the plan", run_id=args.run_id)
        print(outcome.status)

    asyncio.run(go())


# -- the harness ----------------------------------------------------------------------------


def run_once(
    world: World, db: Path, run_id: str, point: str, at: int, workdir: Path
) -> dict[str, Any]:
    """One run: start, kill at (point, at), resume until terminal; return what was observed."""
    committed = workdir / f"{run_id}.committed"
    base = [
        sys.executable,
        __file__,
        "--agent",
        "--db",
        str(db),
        "--port",
        str(world.port),
        "--run-id",
        run_id,
        "--committed",
        str(committed),
    ]
    env = {**os.environ, "OMP_WAIT_POLICY": "PASSIVE"}
    first = subprocess.run(
        [*base, "--kill-point", point, "--kill-at", str(at)],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    crashed = first.returncode == -signal.SIGKILL
    if first.returncode not in (0, -signal.SIGKILL):
        raise RuntimeError(f"agent process failed: {first.stderr[-2000:]}")
    expected_unknown = unknown_in_flight(db, run_id) if crashed else 0
    attempts = 0
    status = first.stdout.strip()
    while crashed and attempts < 3:
        attempts += 1
        again = subprocess.run(
            [*base, "--resume", "--kill-point", "none", "--kill-at", "0"],
            capture_output=True,
            text=True,
            env=env,
            timeout=120,
        )
        if again.returncode != 0:
            raise RuntimeError(f"resume failed: {again.stderr[-2000:]}")
        status = again.stdout.strip()
        crashed = False
    return {
        "crashed": first.returncode != 0,
        "status": status,
        "expected_unknown": expected_unknown,
        "committed": committed,
    }


def stored(db: Path, run_id: str) -> list[Event]:
    """The run's events as the store gives them to whoever opens it next (as a resume would)."""

    async def read() -> list[Event]:
        store = SqliteStore(db)
        try:
            return await store.read(run_id)
        except RunNotFound:
            return []
        finally:
            await store.close()

    return asyncio.run(read())


def unknown_in_flight(db: Path, run_id: str) -> int:
    """Side-effecting calls without a key that the log shows allowed and unanswered."""
    events = stored(db, run_id)
    answered = {e.call_id for e in events if isinstance(e, ToolCallFinished | ToolCallUnknown)}
    return sum(
        1
        for e in events
        if isinstance(e, PolicyDecided)
        and e.decision == "allow"
        and e.tool == "effect"
        and e.call_id not in answered
    )


def check(world: World, db: Path, runs: list[tuple[str, dict[str, Any]]]) -> dict[str, Any]:
    terminal = duplicate = unknown = expected_unknown = lost = keyed_wrong = crashes = 0
    for run_id, seen in runs:
        events = stored(db, run_id)
        final = events[-1] if events else None
        if (
            final is not None
            and final.kind == "run_finished"
            and getattr(final, "status", "") in TERMINAL_STATUSES
        ):
            terminal += 1
        crashes += int(seen["crashed"])
        unknown += sum(1 for e in events if isinstance(e, ToolCallUnknown))
        expected_unknown += seen["expected_unknown"]
        by_seq = {e.seq: e.hash for e in events}
        committed: Path = seen["committed"]
        if committed.exists():
            for line in committed.read_text().splitlines():
                seq, digest = line.split()
                if by_seq.get(int(seq)) != digest:
                    lost += 1
        for key, count in world.effects.items():
            if key.startswith(run_id + ":") and count > 1:
                duplicate += count - 1
        done_keyed = [
            e.call_id
            for e in events
            if isinstance(e, ToolCallFinished) and e.tool == "keyed" and not e.is_error
        ]
        for call_id in done_keyed:
            if world.keys.get(f"{run_id}:{call_id}", 0) < 1:
                keyed_wrong += 1
    return {
        "runs": len(runs),
        "terminal": terminal,
        "crashes": crashes,
        "duplicate_effects": duplicate,
        "unknown_outcomes": unknown,
        "expected_unknown": expected_unknown,
        "keyed_effects_missing": keyed_wrong,
        "keyed_effects_deduplicated": sum(c - 1 for c in world.keys.values() if c > 1),
        "lost_events": lost,
    }


def harness(runs: int, seed: int) -> dict[str, Any]:
    rng = random.Random(seed)
    world = World()
    with tempfile.TemporaryDirectory() as tmp:
        workdir = Path(tmp)
        db = workdir / "crash.db"
        observed: list[tuple[str, dict[str, Any]]] = []
        started = time.perf_counter()
        for index in range(runs):
            # Cycle through the points so every one is hit; vary which occurrence dies.
            point = (
                KILL_POINTS[index % len(KILL_POINTS)]
                if index < len(KILL_POINTS)
                else rng.choice(KILL_POINTS)
            )
            at = rng.randint(1, 3)
            run_id = f"crash-{seed}-{index}"
            observed.append((run_id, run_once(world, db, run_id, point, at, workdir)))
        result = check(world, db, observed)
        result["seconds"] = round(time.perf_counter() - started, 1)
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description="Crash harness for durable runs.")
    parser.add_argument("--runs", type=int, default=50)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--agent", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--resume", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--db", help=argparse.SUPPRESS)
    parser.add_argument("--port", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--run-id", help=argparse.SUPPRESS)
    parser.add_argument("--kill-point", default="none", help=argparse.SUPPRESS)
    parser.add_argument("--kill-at", type=int, default=0, help=argparse.SUPPRESS)
    parser.add_argument("--committed", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.agent:
        agent_main(args)
        return
    print(json.dumps({"bench": "crash", "seed": args.seed, **harness(args.runs, args.seed)}))


if __name__ == "__main__":
    main()
