"""Processes for the lease tests: one owns a run through a long tool call, another tries it.

``python -m tests.durability.lease_worker run DB RUN_ID DIR async|blocking TTL`` runs an agent
whose tool prints ``in tool``, then waits (awaiting, or blocking the event loop) until the
file ``DIR/go`` exists; it prints the outcome's status. ``... resume DB RUN_ID DIR`` tries
to resume the run and prints ``held`` (refused: the owner lives) or the status it reached.
Leases last 2 s here, so a heartbeat every 0.67 s is what keeps one.
"""

from __future__ import annotations

import asyncio
import sys
import time
from pathlib import Path

from tether import Agent, Limits, RulePolicy, allow, tool
from tether.errors import LeaseHeld
from tether.stores import SqliteStore
from tether.testing import ScriptedModel, call, finish

TTL = 2.0


def build(db: Path, folder: Path, how: str, ttl: float | None) -> Agent:
    go = folder / "go"

    @tool(open_world=False, timeout=120)
    async def slow_effect(n: int) -> str:
        """A side effect that takes long (no idempotency key: it must never run twice).

        Args:
            n: Which effect.
        """
        with (folder / "effects").open("a") as fh:
            fh.write(f"effect {n}\n")
        print("in tool", flush=True)
        while not go.exists():
            if how == "blocking":
                time.sleep(0.1)  # noqa: ASYNC251 - blocks the loop on purpose
            else:
                await asyncio.sleep(0.1)
        return f"effect {n} done"

    script = [call("slow_effect", n=1), finish("done")]
    return Agent(
        name="leaser",
        model=ScriptedModel(script),
        tools=[slow_effect],
        limits=Limits(tool_timeout=120, max_seconds=300),
        policy=RulePolicy(None, allow(["slow_effect"], reason="the test's own effect")),
        store=SqliteStore(db) if ttl is None else SqliteStore(db, lease_ttl=ttl),
    )


async def main() -> None:
    mode, db, run_id, folder = sys.argv[1], Path(sys.argv[2]), sys.argv[3], Path(sys.argv[4])
    how = sys.argv[5] if len(sys.argv) > 5 else "async"
    ttl = sys.argv[6] if len(sys.argv) > 6 else str(TTL)
    agent = build(db, folder, how, None if ttl == "default" else float(ttl))
    assert agent.store is not None
    try:
        if mode == "run":
            outcome = await agent.run("do it", run_id=run_id)
        else:
            try:
                outcome = await agent.resume(run_id)
            except LeaseHeld:
                print("held", flush=True)
                return
        print(outcome.status, flush=True)
        if outcome.error is not None:
            print(outcome.error.message, flush=True)
    finally:
        await agent.store.close()


if __name__ == "__main__":
    asyncio.run(main())
