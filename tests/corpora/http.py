"""The HTTP tools' corpus: SSRF attacks that must be refused, and uses that must work.

Everything runs on loopback. Servers on 127.0.0.1 (and ::1) record every request; a
``ConnectSpy`` records every ``connect`` and blocks any to a non-loopback address before a
packet leaves, and refuses name lookups other than numeric ones, so no case can send
traffic off the machine (or ask DNS) even if the tools were broken. An attack escaped if a
forbidden server received a request or a connect to a forbidden address was attempted.
"""

from __future__ import annotations

import asyncio
import contextlib
import gzip
import ipaddress
import socket
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Any
from urllib.parse import parse_qs, urlsplit

import orjson

from tests.corpora import CaseResult
from tether.content import ToolResult, content_text
from tether.errors import ModelRetry
from tether.jsontypes import JsonObject
from tether.tools.base import Tool, ToolContext
from tether.tools.builtin.http import http_tools

__all__ = [
    "PUBLIC_IP",
    "ConnectSpy",
    "FakeResolver",
    "Received",
    "RecordingServer",
    "call",
    "run_corpus",
]

PUBLIC_IP = "93.184.216.34"
"""A public address resolvers may answer with; the spy blocks any connect to it."""

_CTX = ToolContext(run_id="corpus", call_id="call", tool="http")
_BIG = 50_000_000


async def call(tool: Tool, arguments: JsonObject) -> ToolResult:
    """Validate and run a call as the loop does: ``ModelRetry`` becomes an error result."""
    try:
        return await tool.handler(_CTX, tool.validator(arguments))
    except ModelRetry as exc:
        return ToolResult.error(exc.message)


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
class RecordingServer:
    """A tiny HTTP/1.1 server on a loopback address that records each request."""

    host: str = "127.0.0.1"
    """The address to listen on."""
    requests: list[Received] = field(default_factory=lambda: [])
    """Every request received, in order."""
    port: int = 0
    """The port, once started."""
    _server: asyncio.Server | None = None
    _tasks: set[asyncio.Task[Any]] = field(default_factory=lambda: set())
    _flaky: dict[str, int] = field(default_factory=lambda: {})

    async def __aenter__(self) -> RecordingServer:
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

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._tasks.add(task)
        try:
            received = await _read_request(reader)
            if received is None:
                return
            self.requests.append(received)
            await self._respond(received, writer)
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        except asyncio.CancelledError:
            pass  # only __aexit__ cancels these tasks; a cancelled one would be logged as an error
        finally:
            self._tasks.discard(task)
            writer.close()
            with contextlib.suppress(Exception):
                await writer.wait_closed()

    async def _respond(self, req: Received, writer: asyncio.StreamWriter) -> None:  # noqa: C901 - one branch per route
        url = urlsplit(req.target)
        query = {k: v[0] for k, v in parse_qs(url.query).items()}
        match url.path:
            case "/hello":
                await _send(writer, 200, b"hello from the test server", "text/plain")
            case "/echo":
                body = orjson.dumps(
                    {
                        "method": req.method,
                        "headers": dict(req.headers),
                        "body": req.body.decode("utf-8", "replace"),
                    }
                )
                await _send(writer, 200, body, "application/json")
            case "/redirect":
                status = int(query.get("status", "302"))
                await _send(writer, status, b"", "text/plain", {"Location": query["to"]})
            case "/loop":
                await _send(writer, 302, b"", "text/plain", {"Location": "/loop"})
            case "/chain":
                n = int(query.get("n", "0"))
                if n > 0:
                    await _send(writer, 302, b"", "text/plain", {"Location": f"/chain?n={n - 1}"})
                else:
                    await _send(writer, 200, b"end of chain", "text/plain")
            case "/post-redirect":
                await _send(writer, 303, b"", "text/plain", {"Location": "/echo"})
            case "/big":
                writer.write(_head(200, "text/plain", {"Content-Length": str(_BIG)}))
                chunk = b"x" * 65536
                for _ in range(_BIG // len(chunk)):
                    writer.write(chunk)
                    await writer.drain()
            case "/gzip":
                body = gzip.compress("zipped text ✓".encode())
                await _send(
                    writer, 200, body, "text/plain; charset=utf-8", {"Content-Encoding": "gzip"}
                )
            case "/gzip-bomb":
                await _send(writer, 200, _bomb(), "text/plain", {"Content-Encoding": "gzip"})
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
                    await _send(writer, 503, b"try again", "text/plain")
                else:
                    await _send(writer, 200, b"recovered", "text/plain")
            case "/latin1":
                await _send(
                    writer, 200, "café crème".encode("latin-1"), "text/plain; charset=iso-8859-1"
                )
            case "/binary":
                await _send(writer, 200, b"\x89PNG\r\n\x1a\n" + bytes(range(256)) * 8, "image/png")
            case _:
                await _send(writer, 404, b"no such page", "text/plain")


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


async def _send(
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


# -- the cases -----------------------------------------------------------------------------


@dataclass(kw_only=True)
class _World:
    allowed: RecordingServer
    forbidden: RecordingServer
    forbidden6: RecordingServer | None
    spy: ConnectSpy
    resolver: FakeResolver
    get: Tool
    post: Tool
    strict_get: Tool  # with allow_hosts
    timeout: float
    max_bytes: int

    def forbidden_hits(self) -> int:
        six = len(self.forbidden6.requests) if self.forbidden6 else 0
        bad = [
            c
            for c in self.spy.connects
            if c != ("127.0.0.1", self.allowed.port) and c[0] != PUBLIC_IP
        ]
        return len(self.forbidden.requests) + six + len(bad)


Check = Callable[[ToolResult, float], tuple[bool, str]]
"""For a legitimate case: whether the result is right, and what was wrong."""


async def _attack(
    w: _World,
    name: str,
    tool: Tool,
    arguments: JsonObject,
    *,
    escaped_if: Callable[[ToolResult, float], str] | None = None,
    cut_off_counts: bool = False,
) -> CaseResult:
    """Run an attack; escaped if a forbidden destination saw anything (or ``escaped_if`` says).

    ``cut_off_counts``: a truncated result counts as refused (for oversized responses).
    """
    before = w.forbidden_hits()
    started = time.monotonic()
    result = await call(tool, arguments)
    elapsed = time.monotonic() - started
    hits = w.forbidden_hits() - before
    extra = escaped_if(result, elapsed) if escaped_if else ""
    escaped = hits > 0 or bool(extra)
    text = content_text(result.content)
    detail = "" if not escaped else f"{hits} forbidden hits; {extra}; result: {text[:300]}"
    structured = result.structured
    truncated = isinstance(structured, dict) and structured.get("truncated") is True
    refused = result.is_error or (cut_off_counts and truncated)
    if not refused:
        detail = detail or f"not refused: {text[:300]}"
    return CaseResult(
        area="http", name=name, attack=True, refused=refused, escaped=escaped, detail=detail
    )


async def _legit(
    w: _World, name: str, tool: Tool, arguments: JsonObject, check: Check
) -> CaseResult:
    started = time.monotonic()
    result = await call(tool, arguments)
    good, why = check(result, time.monotonic() - started)
    text = content_text(result.content)
    refused = result.is_error or not good
    detail = "" if not refused else f"{why}; result: {text[:300]}"
    return CaseResult(
        area="http", name=name, attack=False, refused=refused, escaped=False, detail=detail
    )


def _text(result: ToolResult) -> str:
    return content_text(result.content)


def _status(result: ToolResult) -> int | None:
    s = result.structured
    return s.get("status") if isinstance(s, dict) else None  # pyright: ignore[reportReturnType]


def _expect(code: int, needle: str) -> Check:
    def check(result: ToolResult, elapsed: float) -> tuple[bool, str]:
        if _status(result) != code:
            return False, f"status {_status(result)}, wanted {code}"
        if needle not in _text(result):
            return False, f"{needle!r} not in the result"
        return True, ""

    return check


def _attack_specs(w: _World) -> Iterator[tuple[str, Tool, JsonObject]]:
    """Attacks whose only effect would be reaching a forbidden destination."""
    f, a = w.forbidden.port, w.allowed.port
    g = w.get
    yield "loopback, port not allowlisted", g, {"url": f"http://127.0.0.1:{f}/hello"}
    yield "other 127/8 address", g, {"url": f"http://127.0.0.2:{f}/hello"}
    yield "localhost by name", g, {"url": f"http://localhost:{f}/hello"}
    yield "LOCALHOST. uppercase with dot", g, {"url": f"http://LOCALHOST.:{f}/hello"}
    yield "decimal 2130706433", g, {"url": f"http://2130706433:{f}/hello"}
    yield "octal 0177.0.0.1", g, {"url": f"http://0177.0.0.1:{f}/hello"}
    yield "hex 0x7f000001", g, {"url": f"http://0x7f000001:{f}/hello"}
    yield "hex dotted 0x7f.0.0.1", g, {"url": f"http://0x7f.0.0.1:{f}/hello"}
    yield "short 127.1", g, {"url": f"http://127.1:{f}/hello"}
    yield "trailing dot 127.0.0.1.", g, {"url": f"http://127.0.0.1.:{f}/hello"}
    yield "percent-encoded host", g, {"url": f"http://%31%32%37.0.0.1:{f}/hello"}
    yield "IPv4-mapped ::ffff:127.0.0.1", g, {"url": f"http://[::ffff:127.0.0.1]:{f}/hello"}
    yield "IPv4-compatible ::127.0.0.1", g, {"url": f"http://[::127.0.0.1]:{f}/hello"}
    yield "NAT64 64:ff9b::7f00:1", g, {"url": f"http://[64:ff9b::7f00:1]:{f}/hello"}
    yield "6to4 2002:7f00:1::", g, {"url": f"http://[2002:7f00:1::]:{f}/hello"}
    teredo = "2001:0:4136:e378:8000:63bf:80ff:fffe"  # client 127.0.0.1, obfuscated
    yield "Teredo embedding 127.0.0.1", g, {"url": f"http://[{teredo}]:{f}/hello"}
    yield "unspecified 0.0.0.0", g, {"url": f"http://0.0.0.0:{f}/hello"}
    yield "unspecified [::]", g, {"url": f"http://[::]:{f}/hello"}
    if w.forbidden6 is not None:
        yield "IPv6 loopback [::1]", g, {"url": f"{w.forbidden6.base}/hello"}
    yield "AWS metadata 169.254.169.254", g, {"url": "http://169.254.169.254/latest/meta-data/"}
    yield "AWS metadata IPv6", g, {"url": "http://[fd00:ec2::254]/latest/meta-data/"}
    yield "Alibaba metadata", g, {"url": "http://100.100.100.200/latest/meta-data/"}
    yield "Oracle metadata 192.0.0.192", g, {"url": "http://192.0.0.192/opc/v2/instance/"}
    yield "metadata.google.internal", g, {"url": "http://metadata.google.internal/"}
    yield "single-label metadata", g, {"url": "http://metadata/computeMetadata/v1/"}
    yield "RFC 1918 10.0.0.1", g, {"url": "http://10.0.0.1/"}
    yield "RFC 1918 172.16.0.1", g, {"url": "http://172.16.0.1/"}
    yield "RFC 1918 192.168.1.1", g, {"url": "http://192.168.1.1/"}
    yield "CGNAT 100.64.0.1", g, {"url": "http://100.64.0.1/"}
    yield "link-local fe80::1", g, {"url": "http://[fe80::1]/"}
    yield "unique-local fd12::1", g, {"url": "http://[fd12::1]/"}
    yield "site-local fec0::1", g, {"url": "http://[fec0::1]/"}
    yield "multicast 224.0.0.1", g, {"url": "http://224.0.0.1/"}
    yield "broadcast 255.255.255.255", g, {"url": "http://255.255.255.255/"}
    yield "documentation 192.0.2.1", g, {"url": "http://192.0.2.1/"}
    yield "DNS answer is loopback", g, {"url": f"http://loopback.test:{f}/hello"}
    yield "DNS answers public and loopback", g, {"url": f"http://mixed.test:{f}/hello"}
    yield "DNS answer is metadata", g, {"url": "http://meta.test/latest/meta-data/"}
    yield "DNS answer is mapped loopback", g, {"url": f"http://mapped.test:{f}/hello"}
    yield "DNS answer is ::1", g, {"url": f"http://v6loop.test:{f}/hello"}
    yield "userinfo credentials", g, {"url": f"http://user:pass@127.0.0.1:{f}/hello"}
    yield "userinfo hides real host", g, {"url": f"http://127.0.0.1:{a}@127.0.0.1:{f}/hello"}
    yield "ftp scheme", g, {"url": f"ftp://127.0.0.1:{f}/"}
    yield "gopher scheme", g, {"url": f"gopher://127.0.0.1:{f}/_GET"}
    yield "POST to forbidden port", w.post, {"url": f"http://127.0.0.1:{f}/echo", "body": "x"}
    yield "allow_hosts excludes the host", w.strict_get, {"url": f"http://127.0.0.1:{a}/hello"}

    def via(to: str, status: int = 302) -> str:
        return f"http://127.0.0.1:{a}/redirect?status={status}&to={to}"

    yield "redirect to other loopback port", g, {"url": via(f"http://127.0.0.1:{f}/hello")}
    yield "redirect to localhost", g, {"url": via(f"http://localhost:{f}/hello")}
    yield "redirect to decimal loopback", g, {"url": via(f"http://2130706433:{f}/hello")}
    yield "redirect to metadata", g, {"url": via("http://169.254.169.254/latest/meta-data/")}
    six = w.forbidden6.port if w.forbidden6 else f
    yield "redirect to [::1]", g, {"url": via(f"http://[::1]:{six}/hello")}
    yield "redirect to DNS-loopback name", g, {"url": via(f"http://loopback.test:{f}/hello")}
    yield "redirect to 10.0.0.1", g, {"url": via("http://10.0.0.1/")}
    yield (
        "307 POST redirect to forbidden port",
        w.post,
        {"url": via(f"http://127.0.0.1:{f}/echo", 307), "body": "secret"},
    )


async def _cases(w: _World) -> list[CaseResult]:
    out: list[CaseResult] = []
    a = w.allowed.port
    base = w.allowed.base
    out.extend([await _attack(w, name, tool, args) for name, tool, args in _attack_specs(w)])

    # rebinding: the first answer is public, the second loopback; the connection is pinned to
    # the first, so loopback is never reached (the spy blocks the public connect)
    calls = len(w.resolver.calls)

    def rebinding(result: ToolResult, elapsed: float) -> str:
        asked = w.resolver.calls[calls:].count("rebind.test")
        return "" if asked == 1 and "rebind.test" not in w.spy.lookups else f"resolved {asked}x"

    out.append(
        await _attack(
            w,
            "DNS rebinding between check and connect",
            w.get,
            {"url": f"http://rebind.test:{w.forbidden.port}/hello"},
            escaped_if=rebinding,
        )
    )

    # attacks on the allowlisted server itself: measured on what it received
    def more_than(limit: int) -> Callable[[ToolResult, float], str]:
        """Escaped if the allowlisted server gets more than ``limit`` requests from now on."""
        start = len(w.allowed.requests)

        def check(result: ToolResult, elapsed: float) -> str:
            got = len(w.allowed.requests) - start
            return f"{got} requests received" if got > limit else ""

        return check

    out.append(
        await _attack(
            w,
            "userinfo on the allowlisted server",
            w.get,
            {"url": f"http://u:p@127.0.0.1:{a}/hello"},
            escaped_if=more_than(0),
        )
    )
    for header in ("Host", "Authorization", "Cookie", "Proxy-Authorization", "X-Forwarded-For"):
        out.append(
            await _attack(
                w,
                f"model sets {header} header",
                w.get,
                {"url": f"{base}/echo", "headers": {header: "evil"}},
                escaped_if=more_than(0),
            )
        )
    out.append(
        await _attack(
            w,
            "CRLF header injection",
            w.get,
            {"url": f"{base}/echo", "headers": {"Accept": "a\r\nX-Injected: 1"}},
            escaped_if=more_than(0),
        )
    )
    limit = 1 + 5  # max_redirects=5: the first request and five hops

    for name, path in (("redirect loop", "/loop"), ("too many redirect hops", "/chain?n=30")):
        out.append(
            await _attack(
                w,
                name,
                w.get,
                {"url": f"{base}{path}"},
                escaped_if=more_than(limit),
            )
        )
    passwd = Path("/etc/passwd")
    out.append(
        await _attack(
            w,
            "redirect to file://",
            w.get,
            {"url": f"{base}/redirect?to=file://{passwd}"},
            escaped_if=lambda r, t: "file content returned" if "root:" in _text(r) else "",
        )
    )
    out.append(
        await _attack(
            w,
            "file:// scheme",
            w.get,
            {"url": f"file://{passwd}"},
            escaped_if=lambda r, t: "file content returned" if "root:" in _text(r) else "",
        )
    )

    # resource exhaustion: "refused" means the tool cut it off and said so
    def capped(result: ToolResult, elapsed: float) -> str:
        body = _text(result).split("\n\n", 1)[-1]
        if len(body.encode()) > w.max_bytes:
            return f"{len(body):,} bytes returned"
        return f"took {elapsed:.1f}s" if elapsed > w.timeout + 1 else ""

    for name, path in (("50 MB response", "/big"), ("gzip bomb (50 MB of zeros)", "/gzip-bomb")):
        out.append(
            await _attack(
                w, name, w.get, {"url": f"{base}{path}"}, escaped_if=capped, cut_off_counts=True
            )
        )
    for name, path in (("server never answers", "/slow"), ("server trickles bytes", "/trickle")):
        out.append(await _attack(w, name, w.get, {"url": f"{base}{path}"}, escaped_if=capped))

    # legitimate uses: (name, tool, arguments, expected status, text the result must contain)
    g, p = w.get, w.post
    legit: list[tuple[str, Tool, JsonObject, int, str]] = [
        ("GET allowlisted server", g, {"url": f"{base}/hello"}, 200, "hello from the test"),
        ("404 is a normal result", g, {"url": f"{base}/nope"}, 404, "no such page"),
        ("redirect within the server", g, {"url": f"{base}/redirect?to=/hello"}, 200, "hello"),
        ("POST text body", p, {"url": f"{base}/echo", "body": "ping"}, 200, '"body":"ping"'),
        ("POST JSON body", p, {"url": f"{base}/echo", "json": {"a": [1]}}, 200, '{\\"a\\":[1]}'),
        ("POST then 303 becomes GET", p, {"url": f"{base}/post-redirect"}, 200, '"method":"GET"'),
        ("Accept header passes", g, {"url": f"{base}/echo", "headers": {"Accept": "text/csv"}},
         200, '"accept":"text/csv"'),
        ("name resolving to allowlisted address", g, {"url": f"http://allowed.test:{a}/echo"},
         200, f'"host":"allowed.test:{a}"'),
        ("charset decoding (latin-1)", g, {"url": f"{base}/latin1"}, 200, "café crème"),
        ("binary body summarised", g, {"url": f"{base}/binary"}, 200, "image/png, 2,056 bytes"),
        ("gzip body decoded", g, {"url": f"{base}/gzip"}, 200, "zipped text ✓"),
        ("GET retried after 503", g, {"url": f"{base}/flaky?key=corpus"}, 200, "recovered"),
    ]  # fmt: skip
    for name, tool, arguments, code, needle in legit:
        out.append(await _legit(w, name, tool, arguments, _expect(code, needle)))
    return out


def _ipv6_available() -> bool:
    try:
        with socket.socket(socket.AF_INET6) as s:
            s.bind(("::1", 0))
    except OSError:
        return False
    return True


async def run_corpus(workdir: Path) -> list[CaseResult]:
    """Run every case against loopback servers; ``workdir`` is unused (no files are needed)."""
    del workdir
    timeout, max_bytes = 1.5, 200_000
    async with contextlib.AsyncExitStack() as stack:
        allowed = await stack.enter_async_context(RecordingServer())
        forbidden = await stack.enter_async_context(RecordingServer())
        forbidden6 = (
            await stack.enter_async_context(RecordingServer(host="::1"))
            if _ipv6_available()
            else None
        )
        spy = stack.enter_context(ConnectSpy())
        resolver = FakeResolver(
            {
                "loopback.test": [["127.0.0.1"]],
                "mixed.test": [[PUBLIC_IP, "127.0.0.1"]],
                "meta.test": [["169.254.169.254"]],
                "mapped.test": [["::ffff:127.0.0.1"]],
                "v6loop.test": [["::1"]],
                "rebind.test": [[PUBLIC_IP], ["127.0.0.1"]],
                "allowed.test": [["127.0.0.1"]],
            }
        )
        common: dict[str, Any] = {
            "allow_private": [f"127.0.0.1:{allowed.port}"],
            "resolver": resolver,
            "timeout": timeout,
            "max_response_bytes": max_bytes,
            "retries": 1,
        }
        get, post = http_tools(**common)
        strict_get, _ = http_tools(allow_hosts=["allowed.test"], **common)
        world = _World(
            allowed=allowed,
            forbidden=forbidden,
            forbidden6=forbidden6,
            spy=spy,
            resolver=resolver,
            get=get,
            post=post,
            strict_get=strict_get,
            timeout=timeout,
            max_bytes=max_bytes,
        )
        return await _cases(world)
    raise AssertionError("unreachable")
