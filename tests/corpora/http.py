"""The HTTP tools' corpus: SSRF attacks that must be refused, and uses that must work.

Everything runs on loopback. Servers on 127.0.0.1 (and ::1) record every request; a
``ConnectSpy`` records every ``connect`` and blocks any to a non-loopback address before a
packet leaves, and refuses name lookups other than numeric ones, so no case can send
traffic off the machine (or ask DNS) even if the tools were broken. An attack escaped if a
forbidden server received a request or a connect to a forbidden address was attempted.
"""

from __future__ import annotations

import contextlib
import socket
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests.corpora import CaseResult
from tests.corpora._loopback import ConnectSpy, FakeResolver, RecordingServer
from tether.content import ToolResult, content_text
from tether.errors import ModelRetry
from tether.jsontypes import JsonObject
from tether.tools.base import Tool, ToolContext
from tether.tools.builtin.http import http_tools

__all__ = ["PUBLIC_IP", "call", "run_corpus"]

PUBLIC_IP = "93.184.216.34"
"""A public address resolvers may answer with; the spy blocks any connect to it."""

_CTX = ToolContext(run_id="corpus", call_id="call", tool="http")


async def call(tool: Tool, arguments: JsonObject) -> ToolResult:
    """Validate and run a call as the loop does: ``ModelRetry`` becomes an error result."""
    try:
        return await tool.handler(_CTX, tool.validator(arguments))
    except ModelRetry as exc:
        return ToolResult.error(exc.message)


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
        # past the timeout by more than a busy machine's delay (the bomb is compressed on the
        # loop, too): cut off late, or not at all (/slow answers after 60 s, /trickle never)
        return f"took {elapsed:.1f}s" if elapsed > w.timeout + 10 else ""

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
