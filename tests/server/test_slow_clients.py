"""Slow clients cannot hold a server: a request head and a body each have a deadline.

Before, a connection that sent its headers (or its body) a byte at a time was never timed
out: 20,000 of them held every file descriptor of ``tether serve`` and it stopped answering.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Any

import pytest
import uvicorn
from starlette.types import Message, Receive, Scope, Send

from tests.support import free_port
from tether.cli import serving
from tether.server import app as server_app


async def _hello(scope: Scope, receive: Receive, send: Send) -> None:
    assert scope["type"] == "http"
    await send({"type": "http.response.start", "status": 200, "headers": []})
    if scope["path"] == "/slow":  # a stream longer than the head deadline
        for _ in range(4):
            await send({"type": "http.response.body", "body": b"tick ", "more_body": True})
            await asyncio.sleep(0.3)
    await send({"type": "http.response.body", "body": b"hello"})


@pytest.fixture
async def port(monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[int]:
    monkeypatch.setattr(serving, "HEAD_SECONDS", 0.5)
    chosen = free_port()
    options: dict[str, Any] = {**serving.serving(), "log_level": "error"}
    server = uvicorn.Server(uvicorn.Config(_hello, host="127.0.0.1", port=chosen, **options))
    task = asyncio.create_task(server.serve())
    while not server.started:  # noqa: ASYNC110 - uvicorn offers no event to wait on
        await asyncio.sleep(0.02)
    yield chosen
    server.should_exit = True
    await task


async def test_a_connection_that_sends_no_whole_head_is_closed(port: int) -> None:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(b"GET / HTTP/1.1\r\nHost: x\r\n")  # the blank line that ends a head: never
    await writer.drain()
    assert await asyncio.wait_for(reader.read(), timeout=5) == b""  # closed by the server
    writer.close()
    await writer.wait_closed()
    reader, writer = await asyncio.open_connection("127.0.0.1", port)  # others are served
    writer.write(b"GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
    answer = await asyncio.wait_for(reader.read(), timeout=5)
    assert answer.startswith(b"HTTP/1.1 200")
    assert b"hello" in answer
    writer.close()
    await writer.wait_closed()


async def test_a_body_that_does_not_arrive_in_time_is_refused_408(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(server_app, "BODY_SECONDS", 0.3)
    sent: list[Message] = []

    async def trickle() -> Message:
        await asyncio.sleep(0.2)
        return {"type": "http.request", "body": b"{", "more_body": True}

    async def send(message: Message) -> None:
        sent.append(message)

    scope: Scope = {"type": "http", "method": "POST", "path": "/v1/runs", "headers": []}
    await asyncio.wait_for(server_app._read_body(scope, trickle, send), timeout=5)  # pyright: ignore[reportPrivateUsage]
    assert sent[0]["status"] == 408
    assert (b"connection", b"close") in sent[0]["headers"]  # the socket is let go too
    assert b"did not arrive within 0.3 s" in sent[1]["body"]


async def test_a_kept_alive_connection_must_send_its_next_head_in_time_too(port: int) -> None:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")  # answered, and kept alive
    await writer.drain()
    assert (await asyncio.wait_for(reader.readuntil(b"hello"), timeout=5)).endswith(b"hello")
    closed = False
    for _ in range(30):  # then a second head, a byte every 0.1 s: uvicorn waited forever
        try:
            writer.write(b"G")
            await writer.drain()
        except ConnectionError:
            closed = True
            break
        if reader.at_eof():
            closed = True
            break
        await asyncio.sleep(0.1)
    assert closed or await asyncio.wait_for(reader.read(), timeout=5) == b""
    writer.close()
    with contextlib.suppress(ConnectionError):
        await writer.wait_closed()


async def test_a_pipelined_request_being_answered_is_not_cut(port: int) -> None:
    # the second request started inside the first one's completion: the timer took it for a
    # head that never came and closed the connection mid-stream
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(b"GET / HTTP/1.1\r\nHost: x\r\n\r\nGET /slow HTTP/1.1\r\nHost: x\r\n\r\n")
    await writer.drain()
    got = b""
    while got.count(b"hello") < 2:
        chunk = await asyncio.wait_for(reader.read(65536), timeout=5)
        assert chunk, f"closed mid-stream after {got!r}"
        got += chunk
    writer.close()
    with contextlib.suppress(ConnectionError):
        await writer.wait_closed()
