"""Loopback test doubles for the HTTP tools: a recording server, a connect spy, a resolver.

``RecordingServer`` is a tiny HTTP/1.1 server on 127.0.0.1 (or ::1) that records every
request; ``ConnectSpy`` records every ``connect`` and blocks any to a non-loopback address
(and any DNS lookup) before a packet leaves; ``FakeResolver`` answers name lookups from a
table. Together they let the corpus and the tests run without traffic off the machine.
"""

from __future__ import annotations

import asyncio
import contextlib
import gzip
import ipaddress
import socket
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any, Self
from urllib.parse import parse_qs, urlsplit

import orjson

__all__ = ["ConnectSpy", "FakeResolver", "LoopbackServer", "Received", "RecordingServer", "send"]

_BIG = 50_000_000  # bytes /big sends and the gzip bomb inflates to


# -- recording servers ---------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class Received:
    """One request a server received."""

    method: str
    """The request method."""
    target: str
    """The request target (path and query)."""
    headers: Mapping[str, str]
    """Headers, names lowercase."""
    body: bytes
    """The body."""


_gzip_bomb: bytes | None = None


def _bomb() -> bytes:
    global _gzip_bomb
    if _gzip_bomb is None:
        _gzip_bomb = gzip.compress(b"\0" * _BIG, compresslevel=9)
    return _gzip_bomb


@dataclass(kw_only=True)
class LoopbackServer:
    """A tiny HTTP/1.1 server on a loopback address: it starts, stops, reads each request and
    hands it to ``_answer`` (subclasses answer)."""

    host: str = "127.0.0.1"
    """The address to listen on."""
    port: int = 0
    """The port, once started."""
    _server: asyncio.Server | None = None
    _tasks: set[asyncio.Task[Any]] = field(default_factory=lambda: set())

    async def __aenter__(self) -> Self:
        self._server = await asyncio.start_server(self._serve, self.host, 0)
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    async def __aexit__(
        self, et: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        assert self._server is not None
        self._server.close()
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        await self._server.wait_closed()

    @property
    def base(self) -> str:
        """``http://host:port``."""
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}"

    async def _answer(self, req: Received, writer: asyncio.StreamWriter) -> None:
        raise NotImplementedError

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._tasks.add(task)
        try:
            received = await _read_request(reader)
            if received is not None:
                await self._answer(received, writer)
        except (ConnectionError, ValueError, asyncio.IncompleteReadError):
            pass  # a malformed or dropped request
        except asyncio.CancelledError:
            pass  # only __aexit__ cancels these tasks; a cancelled one would be logged as an error
        finally:
            self._tasks.discard(task)
            writer.close()
            with contextlib.suppress(Exception):
                await writer.wait_closed()


@dataclass(kw_only=True)
class RecordingServer(LoopbackServer):
    """Records each request and answers the routes the HTTP corpus needs."""

    requests: list[Received] = field(default_factory=lambda: [])
    """Every request received, in order."""
    _flaky: dict[str, int] = field(default_factory=lambda: {})

    async def _answer(self, req: Received, writer: asyncio.StreamWriter) -> None:
        self.requests.append(req)
        await self._respond(req, writer)

    async def _respond(self, req: Received, writer: asyncio.StreamWriter) -> None:  # noqa: C901 - one branch per route
        url = urlsplit(req.target)
        query = {k: v[0] for k, v in parse_qs(url.query).items()}
        match url.path:
            case "/hello":
                await send(writer, 200, b"hello from the test server", "text/plain")
            case "/echo":
                body = orjson.dumps(
                    {
                        "method": req.method,
                        "headers": dict(req.headers),
                        "body": req.body.decode("utf-8", "replace"),
                    }
                )
                await send(writer, 200, body, "application/json")
            case "/redirect":
                status = int(query.get("status", "302"))
                await send(writer, status, b"", "text/plain", {"Location": query["to"]})
            case "/loop":
                await send(writer, 302, b"", "text/plain", {"Location": "/loop"})
            case "/chain":
                n = int(query.get("n", "0"))
                if n > 0:
                    await send(writer, 302, b"", "text/plain", {"Location": f"/chain?n={n - 1}"})
                else:
                    await send(writer, 200, b"end of chain", "text/plain")
            case "/post-redirect":
                await send(writer, 303, b"", "text/plain", {"Location": "/echo"})
            case "/big":
                writer.write(_head(200, "text/plain", {"Content-Length": str(_BIG)}))
                chunk = b"x" * 65536
                for _ in range(_BIG // len(chunk)):
                    writer.write(chunk)
                    await writer.drain()
            case "/gzip":
                body = gzip.compress("zipped text ✓".encode())
                await send(
                    writer, 200, body, "text/plain; charset=utf-8", {"Content-Encoding": "gzip"}
                )
            case "/gzip-bomb":
                await send(writer, 200, _bomb(), "text/plain", {"Content-Encoding": "gzip"})
            case "/slow":
                await asyncio.sleep(60)
            case "/trickle":
                writer.write(_head(200, "text/plain", {"Content-Length": "100000"}))
                for _ in range(100_000):
                    writer.write(b"x")
                    await writer.drain()
                    await asyncio.sleep(0.1)
            case "/flaky":
                key = query.get("key", "")
                self._flaky[key] = self._flaky.get(key, 0) + 1
                if self._flaky[key] == 1:
                    await send(writer, 503, b"try again", "text/plain")
                else:
                    await send(writer, 200, b"recovered", "text/plain")
            case "/latin1":
                await send(
                    writer, 200, "café crème".encode("latin-1"), "text/plain; charset=iso-8859-1"
                )
            case "/binary":
                await send(writer, 200, b"\x89PNG\r\n\x1a\n" + bytes(range(256)) * 8, "image/png")
            case _:
                await send(writer, 404, b"no such page", "text/plain")


async def _read_request(reader: asyncio.StreamReader) -> Received | None:
    head = await reader.readuntil(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    parts = lines[0].split(" ")
    if len(parts) != 3:
        return None
    headers: dict[str, str] = {}
    for line in lines[1:]:
        if ":" in line:
            name, _, value = line.partition(":")
            headers[name.strip().lower()] = value.strip()
    length = int(headers.get("content-length", "0"))
    body = await reader.readexactly(length) if length else b""
    return Received(method=parts[0], target=parts[1], headers=headers, body=body)


def _head(status: int, content_type: str, extra: Mapping[str, str] | None = None) -> bytes:
    lines = [f"HTTP/1.1 {status} X", f"Content-Type: {content_type}", "Connection: close"]
    lines += [f"{k}: {v}" for k, v in (extra or {}).items()]
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")


async def send(
    writer: asyncio.StreamWriter,
    status: int,
    body: bytes,
    content_type: str,
    extra: Mapping[str, str] | None = None,
) -> None:
    writer.write(_head(status, content_type, {**(extra or {}), "Content-Length": str(len(body))}))
    writer.write(body)
    await writer.drain()


# -- the spy and the resolver --------------------------------------------------------------


def _loopback(host: str) -> bool:
    try:
        address = ipaddress.ip_address(host.split("%")[0])
    except ValueError:
        return False
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        address = address.ipv4_mapped
    return address.is_loopback


def _numeric(host: object) -> bool:
    if host is None:
        return True
    if isinstance(host, bytes):
        host = host.decode("ascii", "replace")
    if not isinstance(host, str):
        return False
    try:
        ipaddress.ip_address(host.split("%")[0])
    except ValueError:
        try:
            socket.inet_aton(host)  # what the C library parses as a number, without DNS
        except OSError:
            return False
    return True


class ConnectSpy:
    """Records every TCP connect and name lookup; blocks any that could leave the machine.

    While installed, ``socket.socket.connect``/``connect_ex`` to a non-loopback address raise
    ``ConnectionRefusedError`` without touching the network, and ``socket.getaddrinfo`` of a
    non-numeric name (other than ``localhost``) raises ``gaierror`` without asking DNS.
    """

    def __init__(self) -> None:
        self.connects: list[tuple[str, int]] = []
        self.lookups: list[str] = []
        self._saved: list[tuple[object, str, object]] = []

    def __enter__(self) -> ConnectSpy:
        real_connect = socket.socket.connect
        real_connect_ex = socket.socket.connect_ex
        real_getaddrinfo = socket.getaddrinfo
        spy = self

        def guard(address: Any) -> None:
            if isinstance(address, tuple) and len(address) >= 2:  # pyright: ignore[reportUnknownArgumentType]
                host, port = str(address[0]), int(address[1])  # pyright: ignore[reportUnknownArgumentType]
                spy.connects.append((host, port))
                if not _loopback(host):
                    raise ConnectionRefusedError(f"test spy blocked a connect to {host}:{port}")

        def connect(self: socket.socket, address: Any) -> None:
            guard(address)
            real_connect(self, address)

        def connect_ex(self: socket.socket, address: Any) -> int:
            guard(address)
            return real_connect_ex(self, address)

        def getaddrinfo(host: Any, *args: Any, **kwargs: Any) -> Any:
            if not (_numeric(host) or str(host).lower().rstrip(".") == "localhost"):
                spy.lookups.append(str(host))
                raise socket.gaierror(socket.EAI_NONAME, f"test spy refused to resolve {host!r}")
            return real_getaddrinfo(host, *args, **kwargs)

        for owner, name, value in (
            (socket.socket, "connect", connect),
            (socket.socket, "connect_ex", connect_ex),
            (socket, "getaddrinfo", getaddrinfo),
        ):
            self._saved.append((owner, name, getattr(owner, name)))
            setattr(owner, name, value)
        return self

    def __exit__(
        self, et: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        for owner, name, value in reversed(self._saved):
            setattr(owner, name, value)
        self._saved.clear()


class FakeResolver:
    """An injected resolver: fixed answers per name (a list of answers per call), recorded."""

    def __init__(self, answers: Mapping[str, list[list[str]]]) -> None:
        self.answers = answers
        self.calls: list[str] = []

    async def __call__(self, host: str, port: int) -> list[str]:
        seq = self.answers.get(host)
        n = sum(1 for h in self.calls if h == host)
        self.calls.append(host)
        if seq is None:
            raise socket.gaierror(socket.EAI_NONAME, f"no such test name {host!r}")
        return seq[min(n, len(seq) - 1)]
