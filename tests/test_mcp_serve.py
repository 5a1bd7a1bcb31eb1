"""``tether mcp serve``: agents as MCP tools, progress as notifications, approvals as elicitation."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from mcp import Client, StdioServerParameters, types
from mcp.client.stdio import stdio_client
from mcp.shared.exceptions import MCPError

from tether import Agent, mcpserve, tool
from tether.errors import ConfigError
from tether.mcpserve import MAX_GOAL_CHARS, mcp_server
from tether.messages import ToolCall
from tether.policy import RulePolicy, Rules, require_approval
from tether.stores.sqlite import SqliteStore
from tether.testing import ScriptedModel, call, finish

wired: list[float] = []


@tool(destructive=True, open_world=False)
def wire(amount: float) -> str:
    """Wires money.

    Args:
        amount: How much.
    """
    wired.append(amount)
    return f"wired {amount}"


@tool(read_only=True, open_world=False)
def look(what: str) -> str:
    """Looks at something.

    Args:
        what: What to look at.
    """
    return f"saw {what}"


def wiring() -> Agent[str]:
    script = [call("wire", amount=12.5), finish("wired it")]
    policy = RulePolicy(Rules(rules=(require_approval("wire"),)))
    return Agent(name="wiring", model=ScriptedModel(script), tools=[wire], policy=policy)


def looking() -> Agent[str]:
    script = [call("look", what="the sky"), call("look", what="the sea"), finish("blue")]
    return Agent(name="looking", model=ScriptedModel(script), tools=[look])


def asking() -> Agent[str]:
    script = [ToolCall(id="", name="ask_user", arguments={"question": "Which city?"}), finish("ok")]
    return Agent(name="asking", model=ScriptedModel(script), can_ask_user=True)


def _text(result: types.CallToolResult) -> str:
    return "".join(c.text for c in result.content if isinstance(c, types.TextContent))


def _elicit(reply: types.ElicitResult, asked: list[str]) -> Any:
    async def answer(context: Any, params: types.ElicitRequestParams) -> types.ElicitResult:
        asked.append(params.message)
        return reply

    return answer


async def test_an_agent_is_a_tool_and_its_events_arrive_as_progress(tmp_path: Path) -> None:
    store = SqliteStore(tmp_path / "t.db")
    server = mcp_server([looking(), wiring()], store)
    seen: list[tuple[float, str | None]] = []

    async def progress(progress: float, total: float | None, message: str | None) -> None:
        seen.append((progress, message))

    async with Client(server) as client:
        listed = {t.name: t for t in (await client.list_tools()).tools}
        assert set(listed) == {"looking", "wiring"}
        assert listed["looking"].input_schema["required"] == ["goal"]
        assert listed["looking"].annotations is not None
        assert listed["looking"].annotations.destructive_hint is False  # its tools only read
        assert listed["wiring"].annotations is not None
        assert listed["wiring"].annotations.destructive_hint is True
        result = await client.call_tool("looking", {"goal": "what colour?"}, None, progress)
    assert not result.is_error
    assert _text(result) == "blue"
    summary = result.structured_content
    assert summary is not None
    assert summary["status"] == "finished"
    stored = await store.read(summary["run_id"])
    assert [d for d, _ in seen] == [e.seq + 1 for e in stored]  # every committed event, in order
    assert any(m and "tool call requested: look" in m for _, m in seen)
    assert "via:mcp" in (await store.info(summary["run_id"])).tags
    await store.close()


MODES = pytest.mark.parametrize("mode", ["auto", "legacy"])  # asked in the result / mid-call


@MODES
async def test_a_held_call_is_approved_through_elicitation(tmp_path: Path, mode: str) -> None:
    wired.clear()
    store = SqliteStore(tmp_path / "t.db")
    asked: list[str] = []
    reply = types.ElicitResult(action="accept", content={"approve": True, "reason": "fine"})
    async with Client(
        mcp_server([wiring()], store), elicitation_callback=_elicit(reply, asked), mode=mode
    ) as c:
        result = await c.call_tool("wiring", {"goal": "pay the bill"})
    assert _text(result) == "wired it", _text(result)
    assert wired == [12.5]
    assert len(asked) == 1
    assert "wire" in asked[0]
    assert "12.5" in asked[0]
    events = await store.read(result.structured_content["run_id"])  # type: ignore[index]
    decided = [e for e in events if e.kind == "approval_given"]
    assert len(decided) == 1
    assert decided[0].approved
    assert decided[0].by == "mcp client"
    await store.close()


@MODES
@pytest.mark.parametrize("action", ["decline", "deny"])
async def test_a_declined_elicitation_denies_the_call(
    tmp_path: Path, action: str, mode: str
) -> None:
    wired.clear()
    store = SqliteStore(tmp_path / "t.db")
    reply = (
        types.ElicitResult(action="decline")
        if action == "decline"
        else types.ElicitResult(action="accept", content={"approve": False, "reason": "no way"})
    )
    async with Client(
        mcp_server([wiring()], store), elicitation_callback=_elicit(reply, []), mode=mode
    ) as c:
        result = await c.call_tool("wiring", {"goal": "pay the bill"})
    assert wired == []
    run_id = result.structured_content["run_id"]  # type: ignore[index]
    decided = [e for e in await store.read(run_id) if e.kind == "approval_given"]
    assert len(decided) == 1
    assert not decided[0].approved
    assert decided[0].reason == ("the user declined" if action == "decline" else "no way")
    await store.close()


async def test_without_elicitation_the_run_waits_and_says_how_to_go_on(tmp_path: Path) -> None:
    wired.clear()
    store = SqliteStore(tmp_path / "t.db")
    async with Client(mcp_server([wiring()], store)) as client:
        result = await client.call_tool("wiring", {"goal": "pay the bill"})
    assert not result.is_error
    assert wired == []
    summary = result.structured_content
    assert summary is not None
    assert summary["status"] == "waiting_for_approval"
    assert f"tether approve {summary['run_id']}" in _text(result)
    assert summary["pending"][0]["tool"] == "wire"
    await store.close()


@MODES
async def test_a_cancelled_elicitation_leaves_the_call_waiting(tmp_path: Path, mode: str) -> None:
    wired.clear()
    store = SqliteStore(tmp_path / "t.db")
    reply = types.ElicitResult(action="cancel")
    async with Client(
        mcp_server([wiring()], store), elicitation_callback=_elicit(reply, []), mode=mode
    ) as c:
        result = await c.call_tool("wiring", {"goal": "pay the bill"})
    assert result.structured_content is not None, _text(result)
    assert result.structured_content["status"] == "waiting_for_approval"
    assert wired == []
    await store.close()


@MODES
async def test_the_agents_question_is_elicited_and_answered(tmp_path: Path, mode: str) -> None:
    store = SqliteStore(tmp_path / "t.db")
    asked: list[str] = []
    reply = types.ElicitResult(action="accept", content={"answer": "Oslo"})
    async with Client(
        mcp_server([asking()], store), elicitation_callback=_elicit(reply, asked), mode=mode
    ) as c:
        result = await c.call_tool("asking", {"goal": "weather?"})
    assert _text(result) == "ok"
    assert asked == ["The agent asks: Which city?"]
    events = await store.read(result.structured_content["run_id"])  # type: ignore[index]
    assert any(e.kind == "user_replied" and e.text == "Oslo" for e in events)
    await store.close()


async def test_a_run_id_makes_a_retried_call_the_same_run(tmp_path: Path) -> None:
    store = SqliteStore(tmp_path / "t.db")
    async with Client(mcp_server([looking()], store)) as client:
        first = await client.call_tool("looking", {"goal": "colour?", "run_id": "r-1"})
        again = await client.call_tool("looking", {"goal": "colour?", "run_id": "r-1"})
        other = await client.call_tool("looking", {"goal": "something else", "run_id": "r-1"})
    assert first.structured_content == again.structured_content
    assert [r.run_id for r in await store.runs()] == ["r-1"]
    assert other.is_error
    assert "r-1" in _text(other)
    await store.close()


async def test_bad_input_is_a_tool_error(tmp_path: Path) -> None:
    store = SqliteStore(tmp_path / "t.db")
    async with Client(mcp_server([looking()], store)) as client:
        empty = await client.call_tool("looking", {"goal": "  "})
        missing = await client.call_tool("looking", {})
        wrong = await client.call_tool("looking", {"goal": ["a"]})
    assert empty.is_error
    assert "goal is empty" in _text(empty)
    assert missing.is_error
    assert wrong.is_error
    assert await store.runs() == []
    await store.close()


def test_names_an_mcp_tool_cannot_have_are_refused(tmp_path: Path) -> None:
    store = SqliteStore(tmp_path / "t.db")
    with pytest.raises(ConfigError, match="cannot be an MCP tool"):
        mcp_server([Agent(name="two words", model=ScriptedModel([finish("x")]))], store)
    with pytest.raises(ConfigError, match="two MCP tools would be named"):
        mcp_server([looking(), looking()], store)


AGENT = '''
from tether import Agent, tool
from tether.testing import ScriptedModel, call, finish

@tool(read_only=True, open_world=False)
def look(what: str) -> str:
    """Looks.

    Args:
        what: What.
    """
    return "saw " + what

agent = Agent(name="looker", model=ScriptedModel([call("look", what="x"), finish("seen")]),
              tools=[look])
'''


async def test_tether_mcp_serve_over_stdio(tmp_path: Path) -> None:
    (tmp_path / "served.py").write_text(AGENT)
    db = tmp_path / "t.db"
    params = StdioServerParameters(
        command=sys.executable,
        args=["-m", "tether", "mcp", "serve", "--agent", "served:agent", "--db", str(db)],
        env={**os.environ, "PYTHONPATH": str(tmp_path)},
        cwd=str(tmp_path),
    )
    async with Client(stdio_client(params)) as client:
        assert [t.name for t in (await client.list_tools()).tools] == ["looker"]
        result = await client.call_tool("looker", {"goal": "look"})
    assert _text(result) == "seen"
    shown = subprocess.run(  # noqa: ASYNC221 - the server has ended
        [sys.executable, "-m", "tether", "runs", "--db", str(db)],
        capture_output=True, text=True, timeout=60, check=False, cwd=tmp_path,
    )  # fmt: skip
    assert shown.returncode == 0
    assert "looker" in shown.stdout


# What an adversarial review found, each kept from coming back


@tool(read_only=True, open_world=False)
async def nap(seconds: float) -> str:
    """Sleeps.

    Args:
        seconds: How long.
    """
    await asyncio.sleep(seconds)
    return "rested"


async def test_a_client_that_gives_up_on_a_call_leaves_the_server_serving(tmp_path: Path) -> None:
    store = SqliteStore(tmp_path / "t.db")
    sleepy = Agent(
        name="sleepy", model=ScriptedModel([call("nap", seconds=30), finish("x")]), tools=[nap]
    )
    async with Client(mcp_server([sleepy, looking()], store), mode="legacy") as client:
        with pytest.raises(MCPError, match="timed out"):
            await client.call_tool(
                "sleepy", {"goal": "nap", "run_id": "nap-1"}, read_timeout_seconds=1
            )
        listed = await client.list_tools()  # the server is alive: cancellation ended one call
        assert {t.name for t in listed.tools} == {"sleepy", "looking"}
        again = await client.call_tool("looking", {"goal": "colour?"})
    assert _text(again) == "blue"
    for _ in range(50):  # the cancelled run ends cancelled, in the store
        if (await store.info("nap-1")).status != "running":
            break
        await asyncio.sleep(0.1)
    assert (await store.info("nap-1")).status == "cancelled"
    await store.close()


async def test_a_run_not_started_over_mcp_cannot_be_taken_over_by_its_id(tmp_path: Path) -> None:
    wired.clear()
    store = SqliteStore(tmp_path / "t.db")
    waiting = await wiring().run("pay", run_id="ops-1", store=store, tags=["tenant:acme"])
    assert waiting.status == "waiting_for_approval"
    reply = types.ElicitResult(action="accept", content={"approve": True})
    async with Client(mcp_server([wiring()], store), elicitation_callback=_elicit(reply, [])) as c:
        result = await c.call_tool("wiring", {"goal": "pay", "run_id": "ops-1"})
    assert result.is_error
    assert "taken by a run this caller did not start" in _text(result)
    assert wired == []
    await store.close()


async def test_an_answer_to_an_earlier_question_does_not_answer_a_later_one(tmp_path: Path) -> None:
    store = SqliteStore(tmp_path / "t.db")
    script = [
        ToolCall(id="", name="ask_user", arguments={"question": "Which city?"}),
        ToolCall(id="", name="ask_user", arguments={"question": "Delete all files?"}),
        finish("done"),
    ]
    twice = Agent(name="twice", model=ScriptedModel(script), can_ask_user=True)
    reply = types.ElicitResult(action="cancel")
    async with Client(mcp_server([twice], store), elicitation_callback=_elicit(reply, [])) as c:
        args = {"goal": "go", "run_id": "q-1"}
        first = await c.session.call_tool("twice", args, allow_input_required=True)
        assert isinstance(first, types.InputRequiredResult)
        city: types.InputResponses = {
            "answer": types.ElicitResult(action="accept", content={"answer": "Oslo"})
        }
        second = await c.session.call_tool(
            "twice", args, allow_input_required=True, input_responses=city,
            request_state=first.request_state,
        )  # fmt: skip
        assert isinstance(second, types.InputRequiredResult)
        yes: types.InputResponses = {
            "answer": types.ElicitResult(action="accept", content={"answer": "yes"})
        }
        replayed = await c.session.call_tool(
            "twice", args, allow_input_required=True, input_responses=yes,
            request_state=first.request_state,
        )  # fmt: skip
    assert isinstance(replayed, types.CallToolResult)
    assert replayed.is_error
    assert "do not match what the run asks now" in _text(replayed)
    replies = [e.text for e in await store.read("q-1") if e.kind == "user_replied"]
    assert replies == ["Oslo"]
    await store.close()


async def test_a_client_that_never_answers_frees_its_slot(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(mcpserve, "ELICIT_TIMEOUT", 0.5)
    store = SqliteStore(tmp_path / "t.db")

    async def silent(context: Any, params: types.ElicitRequestParams) -> types.ElicitResult:
        await asyncio.sleep(60)
        raise AssertionError("not reached")

    server = mcp_server([wiring()], store, max_active_runs=1)
    async with Client(server, elicitation_callback=silent, mode="legacy") as client:
        first = await client.call_tool("wiring", {"goal": "pay"})
        assert first.structured_content is not None
        assert first.structured_content["status"] == "waiting_for_approval"
        second = await client.call_tool("wiring", {"goal": "pay again"})  # the slot is free
        assert not second.is_error
    await store.close()


@pytest.mark.parametrize(
    ("arguments", "says"),
    [
        ({"goal": "x", "run_id": "../escape"}, "a run id is 1-200 letters"),
        ({"goal": "x", "run_id": "a\nb"}, "a run id is 1-200 letters"),
        ({"goal": "x" * (MAX_GOAL_CHARS + 1)}, "over the 100000 a call may give"),
        ({"goal": "bad \ud800 text"}, "not valid text"),
    ],
)
async def test_a_bad_run_id_or_goal_is_refused_and_nothing_is_stored(
    tmp_path: Path, arguments: dict[str, str], says: str
) -> None:
    store = SqliteStore(tmp_path / "t.db")
    async with Client(mcp_server([looking()], store)) as client:
        result = await client.call_tool("looking", arguments)
    assert result.is_error
    assert says in _text(result)
    assert await store.runs() == []
    await store.close()


KEYED_AGENTS = """
from tether import Agent, tool
from tether.policy import RulePolicy, Rules, require_approval
from tether.testing import ScriptedModel, call, finish

@tool(destructive=True, open_world=False)
def wire(amount: float) -> str:
    '''Wires money.

    Args:
        amount: How much.
    '''
    return "wired"

def wiring():
    policy = RulePolicy(Rules(rules=(require_approval("wire"),)))
    return Agent(name="wiring", model=ScriptedModel([call("wire", amount=5), finish("paid")]),
                 tools=[wire], policy=policy)
"""


async def test_over_http_with_keys_each_tenant_has_its_own_runs(tmp_path: Path) -> None:
    from tests.support import free_port, wait_listening
    from tether.tools.mcp import McpServer, McpUnavailable

    (tmp_path / "keyed.py").write_text(KEYED_AGENTS)
    db = tmp_path / "t.db"
    env = {**os.environ, "PYTHONPATH": str(tmp_path)}

    def cli(*args: str) -> str:
        done = subprocess.run(
            [sys.executable, "-m", "tether", *args, "--db", str(db)],
            capture_output=True, text=True, timeout=60, check=True, cwd=tmp_path, env=env,
        )  # fmt: skip
        return done.stdout.strip()

    acme = cli("keys", "create", "--tenant", "acme", "--scope", "run")
    other = cli("keys", "create", "--tenant", "other", "--scope", "run")
    port = free_port()
    log = (tmp_path / "serve.log").open("wb")
    server = subprocess.Popen(  # noqa: ASYNC220 - a server process for the whole test
        [sys.executable, "-m", "tether", "mcp", "serve", "--http", "--port", str(port),
         "--require-key", "--agent", "keyed:wiring", "--db", str(db)],
        cwd=tmp_path, env=env, stdout=subprocess.DEVNULL, stderr=log,
    )  # fmt: skip
    url = f"http://127.0.0.1:{port}/mcp"
    try:
        wait_listening(port, lambda: server.poll() is None)
        with pytest.raises(McpUnavailable):  # no key: not even a session
            async with McpServer.http("tether", url, timeout=10):
                pass
        bad = {"Authorization": "Bearer tether_0000000000000000_" + "x" * 43}
        with pytest.raises(McpUnavailable):
            async with McpServer.http("tether", url, headers=bad, timeout=10):
                pass
        mine = McpServer.http("tether", url, headers={"Authorization": f"Bearer {acme}"})
        async with mine:
            [tool_] = await mine.tools()
            assert tool_.name == "wiring"
            first = await mine._call("wiring", {"goal": "pay", "run_id": "pay-1"})  # pyright: ignore[reportPrivateUsage]
        assert "waits for approval" in str(first.content)  # a run key may not approve
        theirs = McpServer.http("tether", url, headers={"X-API-Key": other})
        async with theirs:
            await theirs.tools()
            taken = await theirs._call("wiring", {"goal": "pay", "run_id": "pay-1"})  # pyright: ignore[reportPrivateUsage]
        assert taken.is_error
        assert "taken by a run this caller did not start" in str(taken.content)
    finally:
        server.terminate()
        server.wait(10)
        log.close()
    shown = cli("runs")
    assert "pay-1" in shown or "wiring" in shown
