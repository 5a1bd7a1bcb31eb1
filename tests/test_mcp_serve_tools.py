"""``tether mcp serve --tools``: an agent's own tools as MCP tools, each call a logged run."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from mcp import Client, StdioServerParameters, types
from mcp.client.stdio import stdio_client

from tests.test_mcp_serve import AGENT
from tether import Agent, Limits, directcall, tool
from tether.content import TextBlock
from tether.errors import ConfigError, RunExists
from tether.events import ToolCallFinished
from tether.limits import PhaseLimits
from tether.mcpresults import tool_result
from tether.mcpserve import MAX_GOAL_CHARS, mcp_server
from tether.memory import InProcessMemory
from tether.memory.config import Remember
from tether.models.direct import DirectModel, direct_goal
from tether.outcome import RunOutcome
from tether.policy import RulePolicy, Rules, deny, require_approval
from tether.stores.sqlite import SqliteStore
from tether.testing import ScriptedModel, finish
from tether.tools.base import Tool, ToolAnnotations
from tether.usage import Usage

paid: list[float] = []


@tool(destructive=True, open_world=False)
def pay(amount: float, to: str) -> str:
    """Pays someone.

    Args:
        amount: How much.
        to: Whom.
    """
    paid.append(amount)
    return f"paid {amount} to {to}"


@tool(read_only=True, open_world=False)
def lookup(key: str) -> dict[str, Any]:
    """Looks a key up.

    Args:
        key: The key.
    """
    if key == "boom":
        raise ValueError("no such key: boom")
    return {"key": key, "value": len(key)}


@tool(read_only=True, open_world=False)
def secret(name: str) -> str:
    """Returns a credential.

    Args:
        name: Which one.
    """
    return "token sk-ant-api03-" + "A" * 40


@tool
def unannotated(x: int) -> int:
    """Does something unknown.

    Args:
        x: A number.
    """
    return x


def bank(**kw: Any) -> Agent[str]:
    policy = RulePolicy(Rules(rules=(require_approval("pay"), deny("unannotated"))))
    return Agent(
        name="bank",
        model=ScriptedModel([finish("never used")]),
        tools=[pay, lookup, secret, unannotated],
        policy=policy,
        **kw,
    )


def _text(result: types.CallToolResult) -> str:
    return "".join(c.text for c in result.content if isinstance(c, types.TextContent))


def _run_id(result: types.CallToolResult) -> str:
    assert result.meta is not None, result
    return str(result.meta["tether/run_id"])


async def test_tools_are_listed_with_their_schema_and_annotations(tmp_path: Path) -> None:
    store = SqliteStore(tmp_path / "t.db")
    async with Client(mcp_server([bank()], store, expose_tools=True)) as client:
        listed = {t.name: t for t in (await client.list_tools()).tools}
    assert set(listed) == {"bank", "bank.pay", "bank.lookup", "bank.secret", "bank.unannotated"}
    assert listed["bank.pay"].input_schema["required"] == ["amount", "to"]
    assert listed["bank.pay"].input_schema["properties"]["amount"]["type"] == "number"
    assert listed["bank.pay"].annotations is not None
    assert listed["bank.pay"].annotations.destructive_hint is True
    assert listed["bank.lookup"].annotations is not None
    assert listed["bank.lookup"].annotations.read_only_hint is True
    assert "Pays someone" in (listed["bank.pay"].description or "")
    async with Client(mcp_server([bank()], store)) as client:  # not asked for: agents only
        assert [t.name for t in (await client.list_tools()).tools] == ["bank"]
    await store.close()


async def test_a_call_is_a_run_with_the_tools_result(tmp_path: Path) -> None:
    store = SqliteStore(tmp_path / "t.db")
    async with Client(mcp_server([bank()], store, expose_tools=True)) as client:
        result = await client.call_tool("bank.lookup", {"key": "abc"})
    assert not result.is_error, _text(result)
    assert result.structured_content == {"key": "abc", "value": 3}
    run_id = _run_id(result)
    info = await store.info(run_id)
    assert info.status == "finished"
    assert "via:mcp" in info.tags
    events = await store.read(run_id)
    kinds = [e.kind for e in events]
    calls = [e for e in events if e.kind == "tool_call_requested"]
    assert [c.tool for c in calls] == ["lookup", "finish_task"]  # type: ignore[attr-defined]
    assert "policy_decided" in kinds
    started = events[0]
    assert started.kind == "run_started"
    assert started.agent == "bank.lookup"  # type: ignore[attr-defined]
    assert started.model == "direct:lookup"  # type: ignore[attr-defined]
    await store.close()


async def test_the_agents_policy_decides_each_call(tmp_path: Path) -> None:
    store = SqliteStore(tmp_path / "t.db")
    async with Client(mcp_server([bank()], store, expose_tools=True)) as client:
        denied = await client.call_tool("bank.unannotated", {"x": 1})
        held = await client.call_tool("bank.pay", {"amount": 5, "to": "bob"})  # no elicitation
    assert denied.is_error
    assert "denied" in _text(denied).lower(), _text(denied)
    assert paid == []
    assert held.structured_content is not None
    assert held.structured_content["status"] == "waiting_for_approval"
    assert (await store.info(held.structured_content["run_id"])).status == "waiting_for_approval"
    await store.close()


@pytest.mark.parametrize("mode", ["auto", "legacy"])
async def test_a_held_call_is_approved_through_elicitation(tmp_path: Path, mode: str) -> None:
    paid.clear()
    store = SqliteStore(tmp_path / "t.db")
    asked: list[str] = []

    async def answer(context: Any, params: types.ElicitRequestParams) -> types.ElicitResult:
        asked.append(params.message)
        return types.ElicitResult(action="accept", content={"approve": True})

    server = mcp_server([bank()], store, expose_tools=True)
    async with Client(server, elicitation_callback=answer, mode=mode) as client:
        result = await client.call_tool("bank.pay", {"amount": 7.5, "to": "carol"})
    assert _text(result) == "paid 7.5 to carol", result
    assert not result.is_error
    assert paid == [7.5]
    assert len(asked) == 1
    assert "carol" in asked[0]
    await store.close()


async def test_bad_arguments_and_failing_tools_are_tool_errors(tmp_path: Path) -> None:
    store = SqliteStore(tmp_path / "t.db")
    async with Client(mcp_server([bank()], store, expose_tools=True)) as client:
        wrong = await client.call_tool("bank.lookup", {"key": 5, "extra": True})
        failing = await client.call_tool("bank.lookup", {"key": "boom"})
    assert wrong.is_error
    assert "key" in _text(wrong)
    assert failing.is_error
    assert "no such key" in _text(failing)
    for result in (wrong, failing):  # a run that recorded what happened, and ended
        assert (await store.info(_run_id(result))).status == "finished"
    await store.close()


async def test_a_secret_in_the_result_reaches_the_client_redacted(tmp_path: Path) -> None:
    store = SqliteStore(tmp_path / "t.db")
    async with Client(mcp_server([bank()], store, expose_tools=True)) as client:
        result = await client.call_tool("bank.secret", {"name": "prod"})
    assert "sk-ant-api03" not in _text(result)
    assert "sk-ant-api03" not in str(result.model_dump())
    await store.close()


async def test_memory_tools_are_not_exposed_and_names_may_not_clash(tmp_path: Path) -> None:
    store = SqliteStore(tmp_path / "t.db")
    remembering = bank(memory=Remember(memory=InProcessMemory(), tools=True))
    async with Client(mcp_server([remembering], store, expose_tools=True)) as client:
        names = {t.name for t in (await client.list_tools()).tools}
    assert not {n for n in names if n.endswith((".remember", ".recall"))}
    clash = Agent(name="bank.pay", model=ScriptedModel([finish("x")]))
    with pytest.raises(ConfigError, match=r"bank\.pay"):
        mcp_server([bank(), clash], store, expose_tools=True)
    await store.close()


async def test_the_direct_model_calls_only_with_arguments_it_was_given() -> None:
    model = DirectModel("lookup")
    agent = Agent(name="d", model=model, tools=[lookup])
    key = "sk-ant-api03-" + "C" * 40
    outcome = await agent.run(direct_goal("lookup", {"key": key}))  # never read from the goal
    assert outcome.status == "failed"
    assert outcome.error is not None
    assert "call the tool again" in outcome.error.message
    model.give("r1", {"key": "xy"})
    good = await agent.run(direct_goal("lookup", {"key": "xy"}), run_id="r1")
    assert good.status == "finished"
    assert good.answer == '{"key":"xy","value":2}'


async def test_tether_mcp_serve_tools_over_stdio(tmp_path: Path) -> None:
    (tmp_path / "served.py").write_text(AGENT)  # its model is never asked: a call has none
    db = tmp_path / "t.db"
    command = ["-m", "tether", "mcp", "serve", "--agent", "served:agent", "--tools", "--db"]
    params = StdioServerParameters(
        command=sys.executable,
        args=[*command, str(db)],
        env={**os.environ, "PYTHONPATH": str(tmp_path)},
        cwd=str(tmp_path),
    )
    async with Client(stdio_client(params)) as client:
        assert {t.name for t in (await client.list_tools()).tools} == {"looker", "looker.look"}
        result = await client.call_tool("looker.look", {"what": "the sea"})
    assert _text(result) == "saw the sea"
    shown = subprocess.run(  # noqa: ASYNC221 - the server has ended
        [sys.executable, "-m", "tether", "show", _run_id(result), "--db", str(db)],
        capture_output=True, text=True, timeout=60, check=False, cwd=tmp_path,
    )  # fmt: skip
    assert shown.returncode == 0, shown.stderr
    assert "look" in shown.stdout
    assert "finished" in shown.stdout


async def test_a_secret_argument_reaches_the_tool_whole_and_the_log_redacted(
    tmp_path: Path,
) -> None:
    store = SqliteStore(tmp_path / "t.db")
    key = "sk-ant-api03-" + "B" * 40
    async with Client(mcp_server([bank()], store, expose_tools=True)) as client:
        result = await client.call_tool("bank.lookup", {"key": key})
        surrogate = await client.call_tool("bank.lookup", {"key": "\ud800"})
    assert not result.is_error, _text(result)
    assert result.structured_content is not None
    assert result.structured_content["value"] == len(key)  # not len("[REDACTED:...]")
    assert key not in str(result.model_dump())
    await store.close()
    for stored in (p for p in tmp_path.rglob("*") if p.is_file()):  # the db, WAL, pending
        assert key.encode() not in stored.read_bytes(), stored
    assert surrogate.is_error
    assert "not valid JSON text" in _text(surrogate)


# What an adversarial review found, each kept from coming back


async def test_arguments_are_held_only_while_their_call_runs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = SqliteStore(tmp_path / "t.db")
    models: list[DirectModel] = []

    def recording(tool: str) -> DirectModel:
        made = DirectModel(tool)
        models.append(made)
        return made

    monkeypatch.setattr(directcall, "DirectModel", recording)
    server = mcp_server([bank()], store, expose_tools=True, max_active_runs=1)
    huge = "x" * (MAX_GOAL_CHARS + 10)
    async with Client(server) as client:
        assert (await client.call_tool("bank.lookup", {"key": huge})).is_error  # refused
        assert not (await client.call_tool("bank.lookup", {"key": "a"})).is_error  # done
        held = await client.call_tool("bank.pay", {"amount": 1, "to": "x"})  # waits
        assert held.structured_content is not None
        assert held.structured_content["status"] == "waiting_for_approval"
        assert (await client.call_tool("bank.unannotated", {"x": 1})).is_error  # denied
    assert all(not m._given for m in models)  # pyright: ignore[reportPrivateUsage]
    await store.close()


BANK = bank(
    output_type=int,  # what the agent answers; a direct run answers with the call's result
    memory=Remember(memory=InProcessMemory()),
)


async def test_a_waiting_direct_run_is_continued_by_tether_approve(tmp_path: Path) -> None:
    paid.clear()
    db = tmp_path / "t.db"
    store = SqliteStore(db)
    refs = {"bank": "tests.test_mcp_serve_tools:BANK"}
    async with Client(mcp_server([BANK], store, expose_tools=True, agent_refs=refs)) as client:
        held = await client.call_tool("bank.pay", {"amount": 3, "to": "dan"})
    await store.close()
    run_id = _run_id(held)
    root = Path(__file__).resolve().parent.parent
    approved = subprocess.run(  # noqa: ASYNC221 - the server has ended
        [sys.executable, "-m", "tether", "approve", run_id, "direct", "--db", str(db),
         "--agent", refs["bank"]],
        capture_output=True, text=True, timeout=120, check=False, cwd=root,
    )  # fmt: skip
    assert approved.returncode == 0, approved.stderr
    store = SqliteStore(db)
    info = await store.info(run_id)
    assert info.status == "finished"
    events = await store.read(run_id)
    assert events[0].agent_ref == refs["bank"]  # type: ignore[attr-defined]
    finished = [e for e in events if e.kind == "tool_call_finished" and e.tool == "pay"]  # type: ignore[attr-defined]
    assert len(finished) == 1
    assert "paid 3" in str(finished[0].content)  # type: ignore[attr-defined]
    assert events[-1].status == "finished"  # type: ignore[attr-defined]
    assert not [e for e in events if e.kind == "memory_written"]  # not the agent's memory
    await store.close()


async def test_served_annotations_are_those_the_policy_believes(tmp_path: Path) -> None:
    async def handler(context: Any, arguments: Any) -> str:
        return "removed"

    outside = Tool.from_schema(
        name="rm",
        description="Removes a file (it says it only reads).",
        input_schema={"type": "object", "properties": {}},
        handler=handler,
        annotations=ToolAnnotations(read_only=True, destructive=False),
        origin="mcp:files",
    )
    agent = Agent(name="files", model=ScriptedModel([finish("x")]), tools=[outside])
    store = SqliteStore(tmp_path / "t.db")
    async with Client(mcp_server([agent], store, expose_tools=True)) as client:
        listed = {t.name: t for t in (await client.list_tools()).tools}
    hints = listed["files.rm"].annotations
    assert hints is not None
    assert hints.read_only_hint is not True
    assert hints.destructive_hint is not False
    await store.close()


@tool(read_only=True, open_world=False)
def recall(topic: str) -> str:
    """Recalls a topic (the developer's own tool, not memory's).

    Args:
        topic: Which.
    """
    return f"recalled {topic}"


async def test_no_tool_is_served_whose_call_the_limits_cannot_finish(tmp_path: Path) -> None:
    store = SqliteStore(tmp_path / "t.db")
    no_calls = Agent(
        name="none",
        model=ScriptedModel([finish("x")]),
        tools=[lookup],
        limits=Limits(max_tool_calls=0),
    )
    one_step = Agent(
        name="tight",
        model=ScriptedModel([finish("x")]),
        tools=[lookup],
        limits=Limits(think=PhaseLimits(max_steps=1)),
    )
    plain = Agent(name="plain", model=ScriptedModel([finish("x")]), tools=[recall])
    async with Client(mcp_server([no_calls, one_step, plain], store, expose_tools=True)) as c:
        names = {t.name for t in (await c.list_tools()).tools}
    assert names == {"none", "tight", "plain", "plain.recall"}  # recall: not memory's here
    await store.close()


def test_a_run_that_ends_badly_after_its_call_is_an_error() -> None:
    finished = ToolCallFinished(
        run_id="r", seq=3, at=datetime.now(UTC), prev_hash="0" * 64, call_id="direct",
        tool="lookup", content=(TextBlock(text="found"),),
    )  # fmt: skip
    outcome = RunOutcome[Any](
        run_id="r", status="budget_exhausted", output=None, answer=None, usage=Usage(),
        steps=2, tool_calls=1, events=(), started_at=datetime.now(UTC),
        finished_at=datetime.now(UTC), limit="think.max_steps",
    )  # fmt: skip
    result = tool_result(outcome, finished)
    assert result is not None
    assert result.is_error
    assert "found" in _text(result)
    assert "budget_exhausted" in _text(result)
    assert tool_result(outcome, None) is None  # no result: the run's own answer


@tool(read_only=True, open_world=False)
def big(n: int) -> str:
    """Returns n characters.

    Args:
        n: How many.
    """
    return "y" * n


async def test_a_big_result_is_stored_whole_once(tmp_path: Path) -> None:
    store = SqliteStore(tmp_path / "t.db")
    agent = Agent(name="b", model=ScriptedModel([finish("x")]), tools=[big])
    async with Client(mcp_server([agent], store, expose_tools=True)) as client:
        result = await client.call_tool("b.big", {"n": 200_000})
    assert len(_text(result)) == 200_000
    events = await store.read(_run_id(result))
    whole = [e for e in events if "y" * 200_000 in str(e)]
    assert [e.kind for e in whole] == ["tool_call_finished"]
    await store.close()


async def test_a_retry_with_the_run_id_is_the_same_run_and_one_call(tmp_path: Path) -> None:
    paid.clear()
    store = SqliteStore(tmp_path / "t.db")
    open_bank = Agent(name="open", model=ScriptedModel([finish("x")]), tools=[pay])
    async with Client(mcp_server([open_bank], store, expose_tools=True)) as client:
        meta: Any = {"tether/run_id": "pay-once-1"}
        first = await client.call_tool("open.pay", {"amount": 9, "to": "ed"}, meta=meta)
        again = await client.call_tool("open.pay", {"amount": 9, "to": "ed"}, meta=meta)
        other = await client.call_tool("open.pay", {"amount": 8, "to": "ed"}, meta=meta)
        bad: Any = {"tether/run_id": "../x"}
        path = await client.call_tool("open.pay", {"amount": 9, "to": "ed"}, meta=bad)
    assert _run_id(first) == _run_id(again) == "pay-once-1"
    assert _text(first) == _text(again) == "paid 9.0 to ed"
    assert not again.is_error
    assert paid == [9.0]  # called once
    assert other.is_error  # the same id with other arguments is another call: refused
    assert path.is_error
    await store.close()


async def test_with_keys_a_tool_call_without_a_key_is_refused_before_any_run(
    tmp_path: Path,
) -> None:
    from tether.server.keys import ApiKeys

    paid.clear()
    store = SqliteStore(tmp_path / "t.db")
    server = mcp_server([bank()], store, expose_tools=True, keys=ApiKeys(store))
    async with Client(server) as client:  # in memory: no HTTP headers, so no key
        refused = await client.call_tool("bank.lookup", {"key": "abc"})
    assert refused.is_error
    assert "key" in _text(refused).lower()
    assert await store.runs() == []
    await store.close()


calls_made: list[str] = []


@tool(read_only=True, open_world=False)
async def slow(tag: str) -> str:
    """Takes a while.

    Args:
        tag: A label.
    """
    calls_made.append(tag)
    await asyncio.sleep(0.5)
    return f"done {tag}"


async def test_two_calls_with_one_run_id_at_once_call_the_tool_once(tmp_path: Path) -> None:
    calls_made.clear()
    store = SqliteStore(tmp_path / "t.db")
    agent = Agent(name="s", model=ScriptedModel([finish("x")]), tools=[slow])
    server = mcp_server([agent], store, expose_tools=True)
    meta: Any = {"tether/run_id": "slow-1"}
    async with Client(server) as client:
        first, second = await asyncio.gather(
            client.call_tool("s.slow", {"tag": "a"}, meta=meta),
            client.call_tool("s.slow", {"tag": "a"}, meta=meta),
        )
    assert calls_made == ["a"]
    done = [r for r in (first, second) if not r.is_error]
    assert done, (_text(first), _text(second))
    assert all(_text(r) == "done a" for r in done)
    for refused in (r for r in (first, second) if r.is_error):
        assert "is executing now" in _text(refused), _text(refused)
        assert f":{os.getpid()}:" not in _text(refused)  # no host or pid
    assert (await store.info("slow-1")).status == "finished"
    await store.close()


@tool(read_only=True, open_world=False)
def balance(api_key: str) -> str:
    """The balance the key's account holds.

    Args:
        api_key: The account's key.
    """
    calls_made.append(api_key[-4:])
    return f"balance of ...{api_key[-4:]}: 1000"


async def test_a_retry_whose_input_holds_a_secret_is_refused(tmp_path: Path) -> None:
    calls_made.clear()
    store = SqliteStore(tmp_path / "t.db")
    agent = Agent(name="a", model=ScriptedModel([finish("x")]), tools=[balance])
    meta: Any = {"tether/run_id": "retry-1"}
    first_key, other_key = "sk-ant-api03-" + "A" * 40, "sk-ant-api03-" + "B" * 40
    async with Client(mcp_server([agent], store, expose_tools=True)) as client:
        first = await client.call_tool("a.balance", {"api_key": first_key}, meta=meta)
        other = await client.call_tool("a.balance", {"api_key": other_key}, meta=meta)
        for bad in (12345, "", "\ud800", "x" * 5_000):
            odd: Any = {"tether/run_id": bad}
            refused = await client.call_tool("a.balance", {"api_key": "plain"}, meta=odd)
            assert refused.is_error, bad
            assert "Error executing tool" not in _text(refused)  # said why, no crash
    assert not first.is_error
    assert other.is_error  # redacted, the two keys look alike in the log: never A's answer
    assert "holds a secret" in _text(other)
    assert "AAAA" not in _text(other)
    assert calls_made == ["AAAA"]
    await store.close()


async def test_a_run_id_of_another_tenant_is_refused_under_the_lease(tmp_path: Path) -> None:
    store = SqliteStore(tmp_path / "t.db")
    agent = Agent(name="a", model=ScriptedModel([finish("mine")]))
    await agent.run("same goal", run_id="shared-1", store=store, tags=["tenant:a"])
    with pytest.raises(RunExists, match="another caller") as refused:
        await agent.run("same goal", run_id="shared-1", store=store, tags=["tenant:b"])
    assert "same goal" not in str(refused.value)  # nothing of the other tenant's run
    await store.close()
