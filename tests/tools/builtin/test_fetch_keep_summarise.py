"""Seed 004's integration flow: fetch with the HTTP tool, keep it with the KV tool, summarise.

A real loopback HTTP server, the real ``http_get`` and KV tools, a durable SQLite run store
that also holds the KV table; the model is a deterministic plan. The policy allows the fetch
and, explicitly, the KV write after the untrusted page; without that, the write waits for a
human, and the approved write happens exactly once.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import orjson
import pytest

from tether import Agent, Approval, RulePolicy, Rules, allow
from tether.messages import ToolCall, ToolResultMessage
from tether.models.base import ModelRequest, ModelResponse
from tether.policy import Provenance
from tether.stores import SqliteStore
from tether.testing import FunctionModel
from tether.tools.builtin import http_tools, kv_tools

RELEASE = {"project": "x", "version": "2.0", "api_changes": ["Client.get is async", "drop v1"]}


class ReleaseServer:
    """Serves ``/releases/latest`` as JSON on 127.0.0.1 and counts the requests."""

    def __init__(self) -> None:
        self.requests: list[str] = []
        self.port = 0

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        head = await reader.readuntil(b"\r\n\r\n")
        self.requests.append(head.split(b" ")[1].decode())
        body = orjson.dumps(RELEASE)
        writer.write(
            b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: "
            + str(len(body)).encode()
            + b"\r\nConnection: close\r\n\r\n"
            + body
        )
        await writer.drain()
        writer.close()


@pytest.fixture
async def server() -> AsyncIterator[ReleaseServer]:
    releases = ReleaseServer()
    listening = await asyncio.start_server(releases.handle, "127.0.0.1", 0)
    releases.port = listening.sockets[0].getsockname()[1]
    async with listening:
        yield releases


def planner(base: str) -> FunctionModel:
    """Fetch the release, store its API changes, read them back, then summarise."""

    def step(request: ModelRequest) -> ModelResponse:
        done = [m for m in request.messages if isinstance(m, ToolResultMessage)]
        turn = len(done)
        if turn == 0:
            call = ToolCall(
                id="fetch", name="http_get", arguments={"url": f"{base}/releases/latest"}
            )
        elif turn == 1:
            page = "".join(b.text for b in done[0].content if b.kind == "text")
            notes = orjson.loads(page[page.index("{") : page.rindex("}") + 1])
            call = ToolCall(
                id="keep",
                name="kv_set",
                arguments={
                    "key": "x/latest",
                    "value": {"version": notes["version"], "api": notes["api_changes"]},
                },
            )
        elif turn == 2:
            call = ToolCall(id="check", name="kv_get", arguments={"key": "x/latest"})
        else:
            text = "".join(b.text for b in done[-1].content if b.kind == "text")
            call = ToolCall(id="done", name="finish_task", arguments={"answer": f"kept: {text}"})
        return ModelResponse(tool_calls=(call,))

    return FunctionModel(step)


def agent(store: SqliteStore, base: str, port: int, *, allow_kv_after_web: bool) -> Agent:
    provenance = Provenance(allow=("kv_set",)) if allow_kv_after_web else Provenance()
    return Agent(
        name="release-notes",
        model=planner(base),
        tools=[
            *http_tools(allow_private=[f"127.0.0.1:{port}"]),
            *kv_tools(store, namespace="notes"),
        ],
        policy=RulePolicy(Rules(rules=(allow(["http_get", "kv_set"]),), provenance=provenance)),
        store=store,
    )


async def test_fetch_keep_and_summarise_in_one_durable_run(
    tmp_path: Path, server: ReleaseServer
) -> None:
    db = tmp_path / "tether.db"
    base = f"http://127.0.0.1:{server.port}"
    store = SqliteStore(db)
    try:
        outcome = await agent(store, base, server.port, allow_kv_after_web=True).run(
            "Find the latest release notes for project x and keep the API changes"
        )
    finally:
        await store.close()
    assert outcome.status == "finished", outcome.error
    assert outcome.answer is not None
    assert "Client.get is async" in outcome.answer
    assert server.requests == ["/releases/latest"]
    decisions = [(e.tool, e.decision, e.rule) for e in outcome.events if e.kind == "policy_decided"]
    assert decisions == [
        ("http_get", "allow", "allow:http_get,kv_set"),
        ("kv_set", "allow", "allow:http_get,kv_set"),
        ("kv_get", "allow", "default:safe"),
        ("finish_task", "allow", "control_tool"),
    ]
    reopened = SqliteStore(db)  # the KV entry lives in the run store's file
    try:
        entry = await reopened.kv_get("notes", "x/latest")
    finally:
        await reopened.close()
    assert entry is not None
    assert entry.value == {"version": "2.0", "api": ["Client.get is async", "drop v1"]}


async def test_without_the_explicit_allowance_the_write_waits_for_a_human(
    tmp_path: Path, server: ReleaseServer
) -> None:
    db = tmp_path / "tether.db"
    base = f"http://127.0.0.1:{server.port}"
    store = SqliteStore(db)
    try:
        waiting = await agent(store, base, server.port, allow_kv_after_web=False).run(
            "Find the latest release notes for project x and keep the API changes"
        )
        assert waiting.status == "waiting_for_approval"
        assert [(p.tool, p.rule) for p in waiting.pending] == [("kv_set", "provenance")]
        assert await store.kv_get("notes", "x/latest") is None
        done = await agent(store, base, server.port, allow_kv_after_web=False).resume(
            waiting.run_id, approvals=[Approval.approve(waiting.pending[0], by="me")]
        )
        assert done.status == "finished", done.error
        entry = await store.kv_get("notes", "x/latest")
    finally:
        await store.close()
    assert entry is not None
    assert isinstance(entry.value, dict)
    assert entry.value["version"] == "2.0"
    assert server.requests == ["/releases/latest"]  # the resume did not fetch again
