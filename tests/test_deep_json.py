"""JSON nested deeply: what the log takes, it reads back; what it cannot take is refused.

orjson writes up to 254 levels; pydantic's strict JSON reader stops at about 200. A run
whose context, arguments or result sat in between was stored with a 202, then could never
be read again: ``audit`` called it tampered, ``show`` failed, a waiting run could not be
approved.
"""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest

from tether import Agent, tool
from tether.codec import decode_line, read_jsonl, verify_chain
from tether.errors import LogError, UserError
from tether.jsontypes import JsonValue
from tether.policy.approvals import Approval
from tether.policy.audit import audit_encoded
from tether.stores import SqliteStore
from tether.testing import ScriptedModel, call, finish


def nest(depth: int) -> JsonValue:
    value: JsonValue = 1
    for _ in range(depth):
        value = {"a": value}
    return value


@tool(read_only=True, open_world=False)
def echo(v: dict[str, JsonValue]) -> dict[str, JsonValue]:
    """Echo a value."""
    return v


@pytest.mark.parametrize("depth", [199, 230, 249])
async def test_a_run_holding_deep_json_reads_back_from_its_log_and_store(
    tmp_path: Path, depth: int
) -> None:
    store = SqliteStore(tmp_path / "runs.db")
    agent = Agent(
        model=ScriptedModel([call("echo", v=nest(depth)), finish("done")]),
        tools=[echo],
        store=store,
        log_dir=tmp_path,
    )
    outcome = await agent.run("echo it", context={"c": nest(depth)})
    assert outcome.status == "finished", outcome.error
    (log,) = tmp_path.glob("*.jsonl")
    assert read_jsonl(log) == list(outcome.events)
    stored = await store.read(outcome.run_id)
    assert stored == list(outcome.events)
    verify_chain(stored)
    report = audit_encoded(await store.read_encoded(outcome.run_id))
    assert report.ok, report.problem
    await store.close()


async def test_deeper_than_the_log_holds_is_refused_or_answered() -> None:
    with pytest.raises(UserError, match="cannot be stored as JSON"):
        await Agent(model=ScriptedModel([finish("x")])).run("g", context={"c": nest(252)})
    with pytest.raises(UserError, match="cannot be stored as JSON"):
        Approval(call_id="c1", arguments={"v": nest(252)})
    # a model's call that deep is answered with an error it can read, not a failed run
    model = ScriptedModel([call("echo", v=nest(253)), finish("gave up")])
    outcome = await Agent(model=model, tools=[echo]).run("echo it")
    assert outcome.status == "finished", outcome.error
    result = next(e for e in outcome.events if e.kind == "tool_call_finished")
    assert getattr(result, "is_error", False)


async def test_a_deep_line_reads_as_the_strict_reader_would_and_audit_wants_it_canonical() -> None:
    outcome = await Agent(model=ScriptedModel([finish("x")])).run("g", context={"c": nest(230)})
    line = orjson.dumps(outcome.events[0])
    assert decode_line(line)[0] == outcome.events[0]
    reordered = line.replace(b'"goal":"g",', b"", 1)[:-1] + b',"goal":"g"}'
    with pytest.raises(LogError, match="does not fit its schema"):
        decode_line(reordered)  # not what the strict reader would make of it: refused


async def test_audit_fails_a_line_with_a_key_twice(tmp_path: Path) -> None:
    # the hash covers the decoded values (the last "status" wins in orjson); a reader that
    # takes the first (SQLite's json_extract) saw a forged status in an audited log
    outcome = await Agent(model=ScriptedModel([finish("x")])).run("g")
    lines = [orjson.dumps(e) for e in outcome.events]
    assert audit_encoded(lines).ok
    forged = lines[-1].replace(b'"status":', b'"status":"failed","status":', 1)
    report = audit_encoded([*lines[:-1], forged])
    assert not report.ok
    assert report.bad_seq == len(lines) - 1
    assert "not written as tether writes it" in (report.problem or "")
