"""``http_get`` and ``http_post``: HTTP for a model, defended against server-side request forgery.

Every hop (the first request and each redirect, followed here rather than by httpx) is
vetted after DNS resolution by ``_netguard``, and the connection is pinned to the vetted
address: the URL is rewritten to the IP while the ``Host`` header and the TLS server name
(httpcore's ``sni_hostname`` extension, which also drives certificate verification) keep
the original host name. No environment proxies, no cookies carried between hops.
"""

from __future__ import annotations

import asyncio
import codecs
import ipaddress
import zlib
from collections.abc import AsyncIterator, Mapping, Sequence
from http import HTTPStatus
from http.cookiejar import CookieJar, DefaultCookiePolicy
from typing import TYPE_CHECKING, Any

import orjson

from tether.content import ToolResult
from tether.errors import ConfigError, MissingExtraError, ModelRetry
from tether.jsontypes import JsonValue
from tether.tools.base import Tool
from tether.tools.builtin._mark import builtin
from tether.tools.builtin._netguard import NetGuard, Refused, Resolver
from tether.tools.function import tool

if TYPE_CHECKING:
    import httpx

__all__ = ["http_tools"]

_SAFE_HEADERS = frozenset(
    {
        "accept",
        "accept-language",
        "cache-control",
        "content-type",
        "if-match",
        "if-modified-since",
        "if-none-match",
        "if-unmodified-since",
        "range",
    }
)
# Never settable: pinning relies on Host; the rest would let a model smuggle framing.
_NEVER = frozenset(
    {"host", "content-length", "transfer-encoding", "connection", "te", "upgrade", "trailer"}
)
# Credentials do not follow a redirect to another origin (as browsers and httpx do).
_CREDENTIALS = frozenset({"authorization", "cookie", "proxy-authorization"})
_REDIRECTS = frozenset({301, 302, 303, 307, 308})
_RETRY_STATUSES = frozenset({502, 503, 504})
_SHOWN_HEADERS = ("content-type", "content-length", "location")
_TEXT_TYPES = frozenset(
    {
        "application/json",
        "application/xml",
        "application/javascript",
        "application/ecmascript",
        "application/x-www-form-urlencoded",
        "application/x-ndjson",
        "application/yaml",
        "application/x-yaml",
        "application/graphql",
    }
)
_BACKOFF = 0.25


def http_tools(
    *,
    allow_hosts: Sequence[str] = (),
    allow_private: Sequence[str] = (),
    timeout: float = 15.0,
    max_response_bytes: int = 1_000_000,
    max_request_bytes: int = 100_000,
    max_redirects: int = 5,
    retries: int = 2,
    user_agent: str = "tether",
    resolver: Resolver | None = None,
    allow_headers: Sequence[str] = (),
) -> list[Tool]:
    """The ``http_get`` and ``http_post`` tools, configured.

    Args:
        allow_hosts: If non-empty, the only hosts that may be fetched (``api.example.com``
            or ``*.example.com`` for its subdomains), on every redirect hop too.
        allow_private: Private, loopback or link-local destinations that may be reached
            anyway: addresses, CIDR ranges or host names, with an optional port
            (``127.0.0.1:8080``, ``10.0.0.0/8``, ``[::1]:8080``, ``db.internal``). A cloud
            metadata address is reachable only if listed as that exact address.
        timeout: Seconds for a whole call: every hop, retry and byte of the body.
        max_response_bytes: Bytes of (decoded) body read before the rest is cut off.
        max_request_bytes: Largest POST body accepted from the model.
        max_redirects: Redirects followed before giving up.
        retries: Extra attempts of a GET after a connection error or a 502, 503 or 504.
        user_agent: The ``User-Agent`` header sent.
        resolver: Resolves ``(host, port)`` to addresses; the C library's by default.
        allow_headers: Header names the model may set beyond the safe default set (for
            example ``authorization``). ``Host`` and framing headers are never settable.

    Raises:
        MissingExtraError: httpx is not installed.
        ConfigError: a limit or an allowlist entry is invalid.
    """
    try:
        import httpx
    except ImportError:
        raise MissingExtraError("http", "httpx") from None
    if timeout <= 0 or max_response_bytes <= 0 or max_request_bytes <= 0:
        raise ConfigError("timeout, max_response_bytes and max_request_bytes must be positive")
    if max_redirects < 0 or retries < 0:
        raise ConfigError("max_redirects and retries must be zero or more")
    extra = {h.strip().lower() for h in allow_headers}
    if extra & _NEVER:
        raise ConfigError(f"headers {sorted(extra & _NEVER)} cannot be allowed: tether sets them")
    fetcher = _Fetcher(
        guard=NetGuard.create(
            allow_hosts=allow_hosts, allow_private=allow_private, resolver=resolver
        ),
        timeout=timeout,
        timeouts=httpx.Timeout(timeout, connect=min(timeout, 10.0)),
        max_response_bytes=max_response_bytes,
        max_redirects=max_redirects,
        retries=retries,
        user_agent=user_agent,
        allowed_headers=_SAFE_HEADERS | extra,
    )

    async def http_get(url: str, headers: dict[str, str] | None = None) -> ToolResult:
        """Fetch a URL with HTTP GET and return the status, headers and body text.

        Error statuses such as 404 are returned as results. Binary bodies are summarised.

        Args:
            url: An http or https URL, e.g. ``https://example.com/page``.
            headers: Optional request headers, e.g. ``{"Accept": "application/json"}``.
        """
        return await fetcher.fetch("GET", url, headers or {}, None)

    async def http_post(
        url: str,
        body: str | None = None,
        json: JsonValue = None,
        headers: dict[str, str] | None = None,
    ) -> ToolResult:
        """Send an HTTP POST and return the status, headers and body text.

        Give either ``body`` (text) or ``json`` (sent as application/json), not both.

        Args:
            url: An http or https URL.
            body: The request body as text.
            json: The request body as a JSON value.
            headers: Optional request headers, e.g. ``{"Content-Type": "text/csv"}``.
        """
        if body is not None and json is not None:
            raise ModelRetry("give either body or json, not both")
        if json is not None:
            payload, content_type = orjson.dumps(json), "application/json"
        else:
            payload, content_type = (body or "").encode(), "text/plain; charset=utf-8"
        if len(payload) > max_request_bytes:
            raise ModelRetry(
                f"the request body is {len(payload):,} bytes; the limit is "
                f"{max_request_bytes:,}: send less"
            )
        sent = dict(headers or {})
        if not any(k.lower() == "content-type" for k in sent):
            sent["Content-Type"] = content_type
        return await fetcher.fetch("POST", url, sent, payload)

    margin = timeout + 5  # the call's own deadline fires first, with a clearer message
    return [
        builtin(t)
        for t in (
            tool(name="http_get", read_only=True, idempotent=True, open_world=True, timeout=margin)(
                http_get
            ),
            tool(
                name="http_post",
                read_only=False,
                destructive=None,
                idempotent=False,
                open_world=True,
                timeout=margin,
            )(http_post),
        )
    ]


def _parse_url(text: str) -> httpx.URL:
    import httpx

    try:
        url = httpx.URL(text.strip())
    except (httpx.InvalidURL, TypeError) as exc:
        raise ModelRetry(f"{text!r} is not a valid URL ({exc}): give a full http(s) URL") from None
    problem = _url_problem(url)
    if problem:
        raise ModelRetry(f"{text!r} {problem}")
    return url


def _url_problem(url: httpx.URL) -> str | None:
    """What makes ``url`` unusable, in words; checked on the first URL and every redirect."""
    if url.scheme not in ("http", "https"):
        return f"has scheme {url.scheme or 'none'!r}: only http and https URLs can be fetched"
    if url.userinfo:
        return (
            "contains credentials (user:password@): URLs with userinfo are refused because "
            "they hide the real host; remove them"
        )
    if not url.raw_host:
        return "has no host"
    return None


def _host_of(url: httpx.URL) -> str:
    """Lowercase ASCII host, IDNA-encoded, without brackets or a trailing dot."""
    return url.raw_host.decode("ascii").lower().removesuffix(".")


def _port_of(url: httpx.URL) -> int:
    return url.port or (443 if url.scheme == "https" else 80)


class _Fetcher:
    """One configuration of the tools; each call opens its own short-lived client."""

    def __init__(
        self,
        *,
        guard: NetGuard,
        timeout: float,
        timeouts: httpx.Timeout,
        max_response_bytes: int,
        max_redirects: int,
        retries: int,
        user_agent: str,
        allowed_headers: frozenset[str],
    ) -> None:
        self.guard = guard
        self.timeout = timeout
        self.timeouts = timeouts
        self.max_response_bytes = max_response_bytes
        self.max_redirects = max_redirects
        self.retries = retries
        self.user_agent = user_agent
        self.allowed_headers = allowed_headers

    def _headers(self, given: Mapping[str, str]) -> dict[str, str]:
        headers: dict[str, str] = {}
        for name, value in given.items():
            key = name.strip().lower()
            if key not in self.allowed_headers:
                raise ModelRetry(
                    f"header {name!r} cannot be set; allowed: "
                    f"{', '.join(sorted(self.allowed_headers))}"
                )
            if any(c in value for c in "\r\n\0"):
                raise ModelRetry(f"header {name!r} contains a line break or NUL: remove it")
            headers[key] = value
        return headers

    async def fetch(
        self, method: str, url_text: str, headers: Mapping[str, str], body: bytes | None
    ) -> ToolResult:
        """Run one call; refusals and network failures become error results."""
        url = _parse_url(url_text)
        sent = self._headers(headers)
        try:
            async with asyncio.timeout(self.timeout):
                return await self._follow(method, url, sent, body)
        except TimeoutError:
            return ToolResult.error(
                f"{method} {url} did not complete within {self.timeout:g}s (connect, "
                "response and body together); the server is slow or unreachable"
            )
        except Refused as refused:
            return ToolResult.error(refused.message)

    async def _follow(
        self, method: str, url: httpx.URL, headers: dict[str, str], body: bytes | None
    ) -> ToolResult:
        import httpx

        seen: set[tuple[str, str]] = set()
        first = url
        jar = CookieJar(policy=DefaultCookiePolicy(allowed_domains=[]))
        async with httpx.AsyncClient(
            trust_env=False,  # an environment proxy would resolve the name itself
            follow_redirects=False,
            timeout=self.timeouts,
            cookies=jar,
            limits=httpx.Limits(max_keepalive_connections=0),
        ) as client:
            for hop in range(self.max_redirects + 1):
                seen.add((method, str(url)))
                try:
                    response = await self._send(client, method, url, headers, body)
                except httpx.TransportError as exc:
                    return ToolResult.error(_network_failure(method, url, exc))
                except OSError as exc:  # name resolution
                    return ToolResult.error(
                        f"{method} {url} failed: could not resolve {_host_of(url)!r} ({exc})"
                    )
                location = response.headers.get("location")
                if response.status_code not in _REDIRECTS or location is None:
                    try:
                        return await self._read(response, url, hop)
                    except httpx.TransportError as exc:
                        return ToolResult.error(_network_failure(method, url, exc))
                    finally:
                        await response.aclose()
                await response.aclose()
                target = _redirect_target(url, location)
                if hop == self.max_redirects:
                    return ToolResult.error(
                        f"{first}: too many redirects (more than {self.max_redirects}); "
                        f"the last pointed to {target}"
                    )
                if (target.scheme, _host_of(target), _port_of(target)) != (
                    url.scheme,
                    _host_of(url),
                    _port_of(url),
                ):
                    headers = {k: v for k, v in headers.items() if k not in _CREDENTIALS}
                if response.status_code in (301, 302, 303) and method == "POST":
                    method, body = "GET", None  # as browsers do
                    headers = {k: v for k, v in headers.items() if k != "content-type"}
                if (method, str(target)) in seen:
                    return ToolResult.error(f"{first}: redirect loop back to {target}")
                url = target
        raise AssertionError("unreachable: the loop returns on its last hop")

    async def _send(
        self,
        client: httpx.AsyncClient,
        method: str,
        url: httpx.URL,
        headers: dict[str, str],
        body: bytes | None,
    ) -> httpx.Response:
        import httpx

        host, port = _host_of(url), _port_of(url)
        address = await self.guard.vet(host, port)
        pinned = url.copy_with(host=str(address))
        extensions: dict[str, Any] = {}
        if url.scheme == "https" and not _is_ip(host):
            extensions["sni_hostname"] = host  # TLS name and certificate check use the real host
        request = client.build_request(
            method,
            pinned,
            headers={
                **headers,
                "host": url.netloc.decode("ascii"),
                "user-agent": self.user_agent,
                "accept-encoding": "gzip, deflate",
            },
            content=body,
            extensions=extensions,
        )
        attempts = 1 + (self.retries if method == "GET" else 0)
        for attempt in range(attempts):
            last = attempt == attempts - 1
            try:
                response = await client.send(request, stream=True)
            except (httpx.ConnectError, httpx.ConnectTimeout, httpx.RemoteProtocolError):
                if last:
                    raise
            else:
                if last or response.status_code not in _RETRY_STATUSES:
                    return response
                await response.aclose()
            await asyncio.sleep(_BACKOFF * 2**attempt)
        raise AssertionError("unreachable: the last attempt returns or raises")

    async def _read(self, response: httpx.Response, url: httpx.URL, hops: int) -> ToolResult:
        limit = self.max_response_bytes
        data, truncated, note = await _read_capped(response, limit)
        content_type = response.headers.get("content-type", "")
        shown = {k: response.headers[k] for k in _SHOWN_HEADERS if k in response.headers}
        try:
            reason = HTTPStatus(response.status_code).phrase
        except ValueError:
            reason = ""
        lines = [f"HTTP {response.status_code} {reason}".rstrip(), f"URL: {url}"]
        lines += [f"{k}: {v}" for k, v in shown.items()]
        text = _as_text(data, content_type, response.charset_encoding)
        if text is None:
            kind = content_type.split(";")[0].strip() or "unknown type"
            more = " or more" if truncated else ""
            text = f"[binary content: {kind}, {len(data):,} bytes{more}; not shown]"
        elif truncated:
            lines.append(f"(body truncated: only the first {limit:,} bytes were read)")
        if note:
            lines.append(f"({note})")
        structured: dict[str, JsonValue] = {
            "status": response.status_code,
            "url": str(url),
            "headers": dict(shown),
            "truncated": truncated,
            "redirects": hops,
        }
        return ToolResult.text("\n".join([*lines, "", text]), structured=structured)


async def _read_capped(response: httpx.Response, limit: int) -> tuple[bytes, bool, str]:
    """Up to ``limit`` decoded bytes, whether more existed, and a note on decoding trouble."""
    encoding = response.headers.get("content-encoding", "").strip().lower()
    decoder = None
    if encoding in ("gzip", "x-gzip", "deflate"):
        decoder = zlib.decompressobj(32 + zlib.MAX_WBITS)  # gzip or zlib header
    elif encoding not in ("", "identity"):
        return b"", False, f"body in unsupported content-encoding {encoding!r} not read"
    out = bytearray()
    wire = 0
    chunks: AsyncIterator[bytes] = response.aiter_raw()
    async for chunk in chunks:
        wire += len(chunk)
        if decoder is None:
            out += chunk
        else:
            try:
                # max_length bounds memory: a small compressed chunk may inflate a thousandfold
                out += decoder.decompress(chunk, limit + 1 - len(out))
            except zlib.error:
                return bytes(out[:limit]), False, f"{encoding} body is corrupt; decoding stopped"
        # the wire cap catches compressed streams that keep sending without producing output
        if len(out) > limit or wire > 4 * limit:
            return bytes(out[:limit]), True, ""
    return bytes(out), False, ""


_NOT_PAGE_CHARSETS = frozenset(
    {"punycode", "idna", "unicode-escape", "raw-unicode-escape", "utf-7", "undefined"}
)
"""Text codecs no web page is written in, some slow to decode: read as UTF-8 instead."""


def _as_text(data: bytes, content_type: str, charset: str | None) -> str | None:
    """The body as text, or ``None`` if it is binary."""
    media = content_type.split(";")[0].strip().lower()
    textual = (
        media.startswith("text/")
        or media in _TEXT_TYPES
        or media.endswith(("+json", "+xml"))
        or (not media and b"\0" not in data[:4096])
    )
    if not textual:
        return None
    name = charset or "utf-8"
    try:
        codec = codecs.lookup(name)
    except LookupError:
        codec = codecs.lookup("utf-8")
    # a page names its charset: only a text encoding of a web page is taken (rot13 is not
    # one; punycode decodes in quadratic time, on the event loop, past any deadline)
    if not codec._is_text_encoding or codec.name in _NOT_PAGE_CHARSETS:  # pyright: ignore[reportPrivateUsage]
        codec = codecs.lookup("utf-8")
    return data.decode(codec.name, errors="replace")


def _redirect_target(url: httpx.URL, location: str) -> httpx.URL:
    import httpx

    try:
        target = url.join(location)
    except (httpx.InvalidURL, ValueError) as exc:
        raise Refused(f"refused: {url} redirected to an invalid URL {location!r} ({exc})") from None
    problem = _url_problem(target)
    if problem:
        raise Refused(f"refused: {url} redirected to {location!r}, which {problem}")
    return target


def _network_failure(method: str, url: httpx.URL, exc: Exception) -> str:
    detail = str(exc) or type(exc).__name__
    return f"{method} {url} failed: {type(exc).__name__}: {detail}"


def _is_ip(host: str) -> bool:
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return False
    return True
