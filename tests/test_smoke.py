from tether.examples.demo import DEMO_GOAL, demo_agent


async def test_demo_agent_finishes_with_both_tool_results() -> None:
    outcome = await demo_agent.run(DEMO_GOAL)
    assert outcome.status == "finished"
    assert outcome.tool_calls == 2
    assert outcome.answer is not None
    assert "397.8" in outcome.answer
