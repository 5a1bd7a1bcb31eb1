"""Which model requests carry the agent's own instructions alone (what a prompt cache keeps)."""

from __future__ import annotations

from tests.support import add
from tether import Agent, ModelRequest, ModelResponse
from tether.memory import InProcessMemory, MemoryRecord
from tether.testing import ScriptedModel, call, finish
from tether.thinking import Thinking


class Recording(ScriptedModel):
    """A scripted model that keeps every request it was sent."""

    def __init__(self, *args: object, **kwargs: object) -> None:
        super().__init__(*args, **kwargs)  # pyright: ignore[reportArgumentType]
        self.seen: list[ModelRequest] = []

    async def request(self, request: ModelRequest) -> ModelResponse:
        self.seen.append(request)
        return await super().request(request)


async def test_an_agents_own_turns_share_its_instructions() -> None:
    model = Recording([call("add", a=1, b=2), finish("3")])

    outcome = await Agent(model=model, tools=[add]).run("add 1 and 2")
    assert outcome.status == "finished"
    assert len(model.seen) == 2
    assert all(r.shared_instructions for r in model.seen)


async def test_a_plan_or_a_recalled_memory_makes_them_run_specific() -> None:
    memory = InProcessMemory()
    await memory.put(MemoryRecord(namespace="agent:a", text="the answer is 42", id="m"))
    model = Recording(
        [
            call("make_plan", steps=[{"step": "answer", "tools": []}], success_criteria=["42"],
                 complexity="low"),
            finish("42"),
        ]
    )  # fmt: skip
    agent = Agent(name="a", model=model, memory=memory, thinking=Thinking(plan=True, reflect=False))
    outcome = await agent.run("what is the answer")
    assert outcome.status == "finished"
    assert model.seen
    assert not any(r.shared_instructions for r in model.seen)
    acting = [r for r in model.seen if r.purpose is None]
    assert acting
    assert "42" in acting[0].instructions
