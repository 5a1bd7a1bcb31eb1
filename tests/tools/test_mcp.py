"""MCP servers as tool sources: a real reference server from PyPI, and a fixture server that
dies mid-call and changes its tools."""

from __future__ import annotations

import asyncio
import socket
import sys
import time
from pathlib import Path
from subprocess import DEVNULL

import pytest

from tether import Agent
from tether.errors import ConfigError
from tether.events import PolicyDecided, ToolCallFinished
from tether.outcome import RunOutcome
from tether.policy import RulePolicy, Rules, allow
from tether.testing import ScriptedModel, call, finish
from tether.tools.mcp import McpServer, McpUnavailable

FIXTURE = str(Path(__file__).with_name("mcp_fixture_server.py"))


def results(outcome: RunOutcome[str]) -> list[ToolCallFinished]:
    return [
        e for e in outcome.events if isinstance(e, ToolCallFinished) and e.tool != "finish_task"
    ]


async def test_a_reference_server_from_pypi_answers_through_an_agent_run() -> None:
    server = McpServer.stdio(
        "time", sys.executable, "-m", "mcp_server_time", "--local-timezone", "UTC"
    )
    async with server:
        tools = await server.tools()
        assert {t.name for t in tools} >= {"get_current_time", "convert_time"}
        assert {t.definition.origin for t in tools} == {"mcp:time"}
        script = [call("get_current_time", timezone="Asia/Tokyo"), finish("it is late")]
        agent = Agent(
            model=ScriptedModel(script),
            tools=tools,
            policy=RulePolicy(Rules(rules=(allow("get_current_time"),))),
        )
        outcome = await agent.run("What time is it in Tokyo?")
    assert outcome.status == "finished"
    [result] = results(outcome)
    assert not result.is_error
    assert "Asia/Tokyo" in str(result.content)


async def test_an_outside_servers_claim_of_safety_is_not_believed() -> None:
    """mcp-server-time says its tools are read-only and closed-world; the default policy
    still treats them as an outside tool's (it holds or denies them), and their output as
    untrusted."""
    async with McpServer.stdio("time", sys.executable, "-m", "mcp_server_time") as server:
        tools = await server.tools()
        agent = Agent(
            model=ScriptedModel([call("get_current_time", timezone="UTC"), finish("x")]),
            tools=tools,
        )
        outcome = await agent.run("time?")
    [decided] = [
        e for e in outcome.events if isinstance(e, PolicyDecided) and e.tool == "get_current_time"
    ]
    assert decided.decision != "allow"


async def test_a_server_that_dies_mid_call_gives_a_tool_error_and_the_run_goes_on() -> None:
    async with McpServer.stdio("fixture", sys.executable, FIXTURE, timeout=20) as server:
        tools = await server.tools()
        agent = Agent(
            model=ScriptedModel([call("die"), call("echo", text="still here?"), finish("done")]),
            tools=tools,
            policy=RulePolicy(Rules(rules=(allow("*"),))),
        )
        outcome = await agent.run("try the tools")
    assert outcome.status == "finished"
    died, after = results(outcome)
    assert died.is_error
    assert "the MCP server 'fixture' failed during the call" in str(died.content)
    assert after.is_error  # the server is gone: an error, never a hung call
    assert "failed during the call" in str(after.content)


async def test_a_tool_the_server_changed_since_it_was_listed_is_not_called() -> None:
    async with McpServer.stdio("fixture", sys.executable, FIXTURE, timeout=20) as server:
        tools = await server.tools()
        agent = Agent(
            model=ScriptedModel(
                [
                    call("echo", text="a"),
                    call("mutate"),
                    call("noop"),  # an unchanged tool: runs
                    call("echo", text="b"),  # the changed one: refused,
                    call("echo", text="c"),  # and again: never the replaced tool
                    finish("done"),
                ]
            ),
            tools=tools,
            policy=RulePolicy(Rules(rules=(allow("*"),))),
        )
        outcome = await agent.run("echo twice")
    first, mutated, noop, second, third = results(outcome)
    assert "echo: a" in str(first.content)
    assert "changed" in str(mutated.content)
    assert "nothing" in str(noop.content)
    for refused in (second, third):
        assert refused.is_error
        assert "changed the tool 'echo' since it was listed; the call was not made" in str(
            refused.content
        )


async def test_a_server_that_cannot_start_or_is_not_entered_says_so() -> None:
    with pytest.raises(McpUnavailable, match="did not start a session"):
        async with McpServer.stdio("nope", sys.executable, "-c", "raise SystemExit(2)", timeout=5):
            pass
    with pytest.raises(McpUnavailable, match="use `async with`"):
        await McpServer.stdio("idle", sys.executable, FIXTURE).tools()


async def test_a_server_over_streamable_http_on_loopback() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = int(s.getsockname()[1])
    proc = await asyncio.create_subprocess_exec(
        sys.executable, FIXTURE, str(port), stdout=DEVNULL, stderr=DEVNULL
    )
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                with socket.create_connection(("127.0.0.1", port), timeout=1):
                    break
            except OSError:
                assert time.monotonic() < deadline, "the fixture server did not listen"
                await asyncio.sleep(0.1)
        async with McpServer.http("fixture", f"http://127.0.0.1:{port}/mcp") as server:
            tools = {t.name: t for t in await server.tools()}
            agent = Agent(
                model=ScriptedModel([call("echo", text="over http"), finish("done")]),
                tools=[tools["echo"]],
                policy=RulePolicy(Rules(rules=(allow("echo"),))),
            )
            outcome = await agent.run("echo over http")
        [result] = results(outcome)
        assert "echo: over http" in str(result.content)
    finally:
        proc.terminate()
        await asyncio.wait_for(proc.wait(), 10)


async def test_a_server_that_never_answers_is_unavailable_within_the_timeout() -> None:
    silent = McpServer.stdio(
        "silent", sys.executable, "-c", "import time; time.sleep(60)", timeout=2
    )
    started = time.monotonic()
    with pytest.raises(McpUnavailable, match="did not start a session"):
        async with silent:
            pass
    assert time.monotonic() - started < 20


async def test_a_huge_result_is_cut() -> None:
    async with McpServer.stdio("fixture", sys.executable, FIXTURE, timeout=20) as server:
        [big] = await server.tools(only=["big"])
        agent = Agent(
            model=ScriptedModel([call("big"), finish("done")]),
            tools=[big],
            policy=RulePolicy(Rules(rules=(allow("big"),))),
        )
        outcome = await agent.run("big")
        with pytest.raises(ConfigError, match="lists no tools"):
            await server.tools(only=["nothing_like_it"])
    [result] = results(outcome)
    text = str(result.content)
    assert "[cut: the result is over 100000 characters]" in text
    assert len(text) < 110_000
