"""A process that runs (or resumes) an agent whose side effect needs approval, for kill -9 tests.

``python -m tests.durability.approval_worker DB RUN_ID start`` runs until the run waits for
approval, prints ``waiting``, then hangs until it is killed. ``... resume CALL_ID`` approves
the call; the tool writes a marker and then the process kills itself with SIGKILL while the
call is in flight.
"""

from __future__ import annotations

import asyncio
import os
import signal
import sys
from pathlib import Path

from tether import Agent, tool
from tether.events import ApprovalRequested
from tether.messages import ToolCall, ToolResultMessage
from tether.models.base import ModelRequest, ModelResponse
from tether.policy import RulePolicy, require_approval
from tether.policy.approvals import Approval
from tether.stores import SqliteStore
from tether.testing import FunctionModel


def pay_then_finish(request: ModelRequest) -> ModelResponse:
    """Asks to pay once; once a result of that call is in the history, finishes."""
    results = [m for m in request.messages if isinstance(m, ToolResultMessage)]
    if results:
        text = " ".join(b.text for m in results for b in m.content if b.kind == "text")
        return ModelResponse(
            tool_calls=(ToolCall(id="f", name="finish_task", arguments={"answer": text}),)
        )
    return ModelResponse(tool_calls=(ToolCall(id="c1", name="pay", arguments={"amount": 500}),))


def build(db: Path, marker: Path, *, die_in_tool: bool) -> Agent:
    @tool(open_world=False, blocking=False)
    def pay(amount: int) -> str:
        """Pays an invoice (a side effect with no idempotency key).

        Args:
            amount: Cents.
        """
        with marker.open("a") as fh:
            fh.write(f"paid {amount}\n")
        if die_in_tool:
            os.kill(os.getpid(), signal.SIGKILL)
        return f"paid {amount}"

    return Agent(
        name="payer",
        model=FunctionModel(pay_then_finish),
        tools=[pay],
        policy=RulePolicy(None, require_approval("pay", reason="payments need a human")),
        store=SqliteStore(db),
    )


async def main() -> None:
    db, run_id, mode = Path(sys.argv[1]), sys.argv[2], sys.argv[3]
    marker = db.with_suffix(".effects")
    if mode == "start":
        agent = build(db, marker, die_in_tool=False)
        outcome = await agent.run("pay the invoice", run_id=run_id)
        print(outcome.status, flush=True)
        await asyncio.Event().wait()  # the test kills this process with SIGKILL
    agent = build(db, marker, die_in_tool=True)
    assert agent.store is not None
    requested = [
        e
        for e in await agent.store.read(run_id)
        if isinstance(e, ApprovalRequested) and e.call_id == sys.argv[4]
    ]
    approval = Approval(
        call_id=sys.argv[4], run_id=run_id, arguments_hash=requested[0].arguments_hash
    )
    await agent.resume(run_id, approvals=[approval])


if __name__ == "__main__":
    asyncio.run(main())
