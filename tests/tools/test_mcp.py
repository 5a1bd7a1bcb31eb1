"""MCP servers as tool sources: a real reference server from PyPI, and a fixture server that
dies mid-call and changes its tools."""

from __future__ import annotations

import asyncio
import sys
import time
from pathlib import Path
from subprocess import DEVNULL
from typing import cast

import pytest
from inline_snapshot import snapshot

from tests.support import free_port, wait_listening
from tether import Agent
from tether.content import content_text
from tether.errors import ConfigError
from tether.events import PolicyDecided, ToolCallFinished
from tether.jsontypes import JsonObject
from tether.messages import ToolCall
from tether.outcome import RunOutcome
from tether.policy import RulePolicy, Rules, allow
from tether.testing import ScriptedModel, call, finish
from tether.tools.mcp import Elicit, McpServer, McpUnavailable

FIXTURE = str(Path(__file__).with_name("mcp_fixture_server.py"))
RAW = str(Path(__file__).with_name("mcp_raw_server.py"))


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


async def _odd(*groups: str, prefix: str = "") -> tuple[list[str], list[str], list[str]]:
    """The tools taken from the raw server listing these groups, those skipped, the answers."""
    async with McpServer.stdio("raw", sys.executable, RAW, *groups, timeout=20) as server:
        tools = await server.tools(prefix=prefix)
        agent = Agent(
            model=ScriptedModel(
                [call(f"{prefix}echo", text="hi"), call(f"{prefix}noop"), finish("ok")]
            ),
            tools=tools,
            policy=RulePolicy(Rules(rules=(allow("*"),))),
        )
        outcome = await agent.run("echo, then nothing")
    answered = [content_text(r.content) for r in results(outcome) if not r.is_error]
    return [t.name for t in tools], server.skipped, answered


async def test_a_tool_the_sdk_cannot_read_is_skipped_and_the_servers_other_tools_work() -> None:
    """One tool whose input schema is a string (or that has no name) failed the whole list."""
    taken, skipped, answered = await _odd("unreadable")
    assert taken == ["echo", "noop"]
    assert skipped == snapshot(
        [
            "spelled: the MCP SDK cannot read it (inputSchema.type: Input should be 'object')",
            "<the page's tool #4, unnamed>: the MCP SDK cannot read it (name: Field required)",
        ]
    )
    assert answered == ["echo: hi", "called noop"]


async def test_a_name_listed_for_two_different_tools_is_skipped_a_repeat_is_taken_once() -> None:
    """A call by a name the server lists twice, differently, runs whichever it picks."""
    taken, skipped, answered = await _odd("twins", "repeat")
    assert taken == ["echo", "noop"]
    assert skipped == snapshot(
        [
            "twin: the server lists different tools under this name: a call by the name runs whichever one the server picks, so none of them is taken",
            "twin: listed again (see above)",
            "echo: listed again, identically: the first listing is taken",
        ]
    )
    assert answered == ["echo: hi", "called noop"]


async def test_a_tool_named_like_a_control_tool_is_skipped_unless_a_prefix_renames_it() -> None:
    taken, skipped, answered = await _odd("reserved")
    assert taken == ["echo", "noop"]
    assert skipped == snapshot(
        [
            "finish_task: 'finish_task' is the name of one of tether's control tools: list the server with a prefix (tools(prefix=...)) to take this tool",
            "ask_user: 'ask_user' is the name of one of tether's control tools: list the server with a prefix (tools(prefix=...)) to take this tool",
        ]
    )
    assert answered == ["echo: hi", "called noop"]
    taken, skipped, _ = await _odd("reserved", prefix="raw_")
    assert taken == ["raw_echo", "raw_noop", "raw_finish_task", "raw_ask_user"]
    assert skipped == []


async def test_a_schema_whose_ref_points_at_nothing_is_skipped_when_listed() -> None:
    """Found when the tools are listed, not when the model first calls this one."""
    taken, skipped, answered = await _odd("dangling")
    assert taken == ["echo", "noop"]
    assert skipped == snapshot(
        [
            "pointer: tool 'pointer': invalid input_schema: the schema refers to what it does not hold (#/$defs/Missing): define each target (in '$defs', say) or drop the reference"
        ]
    )
    assert answered == ["echo: hi", "called noop"]


async def test_only_may_name_a_tool_that_is_skipped() -> None:
    """It is listed: skipped, with why, not 'lists no tools'."""
    async with McpServer.stdio("raw", sys.executable, RAW, "unreadable", timeout=20) as server:
        assert [t.name for t in await server.tools(only=["echo", "spelled"])] == ["echo"]
        assert [s.split(":")[0] for s in server.skipped] == ["spelled"]


async def test_a_server_that_cannot_start_or_is_not_entered_says_so() -> None:
    with pytest.raises(McpUnavailable, match="did not start a session"):
        async with McpServer.stdio("nope", sys.executable, "-c", "raise SystemExit(2)", timeout=5):
            pass
    with pytest.raises(McpUnavailable, match="use `async with`"):
        await McpServer.stdio("idle", sys.executable, FIXTURE).tools()


async def test_a_server_over_streamable_http_on_loopback() -> None:
    port = free_port()
    proc = await asyncio.create_subprocess_exec(
        sys.executable, FIXTURE, str(port), stdout=DEVNULL, stderr=DEVNULL
    )
    try:
        wait_listening(port, lambda: proc.returncode is None, seconds=30)
        url = f"http://127.0.0.1:{port}/mcp"
        async with McpServer.http("fixture", url, headers={"X-Team": "blue"}) as server:
            tools = {t.name: t for t in await server.tools()}
            agent = Agent(
                model=ScriptedModel([call("echo", text="over http"), call("team"), finish("ok")]),
                tools=[tools["echo"], tools["team"]],
                policy=RulePolicy(Rules(rules=(allow("echo"), allow("team")))),
            )
            outcome = await agent.run("echo over http")
        echoed, team = results(outcome)
        assert "echo: over http" in str(echoed.content)
        assert "blue" in str(team.content)  # the headers went with every request
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


async def _ask(elicit: Elicit | None) -> str:
    server = McpServer.stdio("fixture", sys.executable, FIXTURE, timeout=20, elicit=elicit)
    async with server:
        agent = Agent(
            model=ScriptedModel([call("ask"), finish("done")]),
            tools=await server.tools(only=["ask"]),
            policy=RulePolicy(Rules(rules=(allow("ask"),))),
        )
        outcome = await agent.run("plan a trip")
    [result] = results(outcome)
    return str(result.content)


async def test_without_a_handler_the_client_does_not_offer_elicitation() -> None:
    """An unattended run has no one to ask: the server is told so, and the call is an error."""
    assert "Elicitation not supported" in await _ask(None)


async def test_a_handler_fills_the_form_and_the_schemas_defaults_fill_the_rest() -> None:
    asked: list[tuple[str, JsonObject]] = []

    async def elicit(message: str, schema: JsonObject) -> JsonObject | None:
        asked.append((message, schema))
        return {"city": "Oslo"}

    assert "Oslo for 3 days" in await _ask(elicit)
    [(message, schema)] = asked
    assert message == "Where to?"
    assert "city" in cast(JsonObject, schema["properties"])

    async def declines(message: str, schema: JsonObject) -> JsonObject | None:
        return None

    async def breaks(message: str, schema: JsonObject) -> JsonObject | None:
        raise RuntimeError("the UI crashed")

    assert "(decline)" in await _ask(declines)
    assert "(cancel)" in await _ask(breaks)


async def test_a_server_that_died_while_idle_is_started_again_before_the_next_call() -> None:
    server = McpServer.stdio("fixture", sys.executable, FIXTURE, timeout=20)
    tools = await asyncio.to_thread(server.tools_now, only=["echo", "die_later"])
    policy = RulePolicy(Rules(rules=(allow("*"),)))
    first = Agent(
        model=ScriptedModel([call("echo", text="one"), call("die_later"), finish("ok")]),
        tools=tools,
        policy=policy,
    )
    assert (await first.run("echo, then let the server go")).status == "finished"
    await asyncio.sleep(2.5)  # the server exits 0.3 s after its answer; the session idles
    second = Agent(
        model=ScriptedModel([call("echo", text="two"), finish("ok")]), tools=tools, policy=policy
    )
    outcome = await second.run("echo again")
    [echoed] = results(outcome)
    assert not echoed.is_error, echoed.content
    assert "echo: two" in str(echoed.content)


async def test_a_ping_never_cuts_off_a_call_in_flight() -> None:
    server = McpServer.stdio("fixture", sys.executable, FIXTURE, timeout=30)
    tools = await asyncio.to_thread(server.tools_now, only=["echo", "hold"])
    policy = RulePolicy(Rules(rules=(allow("*"),)))

    def agent(step: ToolCall) -> Agent[str]:
        return Agent(model=ScriptedModel([step, finish("ok")]), tools=tools, policy=policy)

    await agent(call("echo", text="warm")).run("open the session")
    await asyncio.sleep(2.5)  # idle: the next call would ping first
    holding = asyncio.create_task(agent(call("hold", seconds=9)).run("hold the server"))
    await asyncio.sleep(3.0)  # the server answers nothing while it holds (not even a ping)
    echoed = await agent(call("echo", text="after")).run("echo meanwhile")
    held = await holding
    [first] = results(held)
    [second] = results(echoed)
    assert not first.is_error, first.content  # not cut off by the second call's ping
    assert "held 9" in str(first.content)
    assert not second.is_error, second.content


def test_a_result_of_many_blocks_stays_within_the_cap() -> None:
    # past the cap every further block still came, each with the notice: 20,001 blocks of
    # one huge and 20,000 tiny ones made 1.6 MB
    from types import SimpleNamespace

    from tether.tools.mcp import _result  # pyright: ignore[reportPrivateUsage]

    blocks = [
        SimpleNamespace(text="x" * 200_000),
        *(SimpleNamespace(text="y") for _ in range(20_000)),
    ]
    result = _result(SimpleNamespace(content=blocks, structured_content=None, is_error=False))
    assert len(result.content) == 1
    text = content_text(result.content)
    assert len(text) < 100_200
    assert text.endswith("[cut: the result is over 100000 characters; 20000 more blocks left out]")
