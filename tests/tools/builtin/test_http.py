"""``http_get`` / ``http_post``: SSRF defence, pinning, redirects, limits and results.

No test sends traffic off loopback: servers listen on 127.0.0.1/::1, names are resolved by
injected resolvers, and a ``ConnectSpy`` blocks (and records) any other connect or lookup.
"""

from __future__ import annotations

import ipaddress
import shutil
import ssl
import subprocess
import sys
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests.corpora._loopback import ConnectSpy, FakeResolver, RecordingServer
from tests.corpora.http import PUBLIC_IP, call, run_corpus
from tether.content import ToolResult, content_text
from tether.errors import ConfigError, MissingExtraError
from tether.jsontypes import JsonValue
from tether.tools.builtin._netguard import (
    NetGuard,
    PrivateAllowance,
    Refused,
    forbidden_reason,
    system_resolver,
)
from tether.tools.builtin.http import http_tools


@pytest.fixture
def spy() -> Iterator[ConnectSpy]:
    with ConnectSpy() as installed:
        yield installed


@pytest.fixture
async def server() -> AsyncIterator[RecordingServer]:
    async with RecordingServer() as started:
        yield started


# -- the corpus ----------------------------------------------------------------------------


async def test_corpus_every_attack_refused_every_legitimate_use_works(tmp_path: Path) -> None:
    results = await run_corpus(tmp_path)
    failures = [f"{r.name}: {r.detail}" for r in results if not r.ok]
    assert failures == []
    assert sum(r.attack for r in results) >= 25
    assert sum(not r.attack for r in results) >= 8
    assert not any(r.escaped for r in results)
    assert {r.area for r in results} == {"http"}


# -- addresses -----------------------------------------------------------------------------

FORBIDDEN = [
    "0.0.0.0",
    "10.1.2.3",
    "100.64.0.1",
    "100.100.100.200",
    "127.0.0.1",
    "127.255.255.254",
    "169.254.169.254",
    "169.254.1.1",
    "172.31.255.255",
    "192.0.0.192",  # is_global in 3.11
    "192.0.0.9",  # is_global in 3.11
    "192.0.2.1",
    "192.88.99.1",  # is_global in 3.11
    "192.168.0.1",
    "198.18.0.1",
    "224.0.0.1",  # is_global in 3.11
    "239.255.255.250",
    "240.0.0.1",
    "255.255.255.255",
    "::",
    "::1",
    "::ffff:127.0.0.1",
    "::ffff:8.8.8.8",  # mapped: refused outright
    "::127.0.0.1",  # compatible, is_global in 3.11
    "::ffff:0:7f00:1",  # translated
    "64:ff9b::7f00:1",  # NAT64, is_global in 3.11
    "64:ff9b::a9fe:a9fe",  # NAT64 of the metadata address
    "64:ff9b:1::1",
    "2002:7f00:1::",  # 6to4 of loopback, is_global in 3.11
    "2002:a9fe:a9fe::",  # 6to4 of metadata
    "2001:0:4136:e378:8000:63bf:80ff:fffe",  # Teredo, client 127.0.0.1
    "2001:db8::1",
    "3fff::1",  # documentation (RFC 9637), is_global in 3.11
    "fc00::1",
    "fd00:ec2::254",
    "fe80::1",
    "fec0::1",  # site-local, is_global in 3.11
    "ff02::1",  # multicast, is_global in 3.11
    "100::1",
]
PUBLIC = ["8.8.8.8", "1.1.1.1", PUBLIC_IP, "2001:4860:4860::8888", "2606:4700:4700::1111"]


@pytest.mark.parametrize("address", FORBIDDEN)
def test_forbidden_addresses_have_a_reason(address: str) -> None:
    assert forbidden_reason(ipaddress.ip_address(address)) is not None


@pytest.mark.parametrize("address", PUBLIC)
def test_public_addresses_pass(address: str) -> None:
    assert forbidden_reason(ipaddress.ip_address(address)) is None


def test_metadata_and_loopback_are_named_in_the_reason() -> None:
    assert forbidden_reason(ipaddress.ip_address("169.254.169.254")) == "a cloud metadata address"
    reason = forbidden_reason(ipaddress.ip_address("::ffff:127.0.0.1"))
    assert reason is not None
    assert "127.0.0.1" in reason
    assert "loopback" in reason


@given(st.ip_addresses())
def test_never_more_lenient_than_is_global(
    address: ipaddress.IPv4Address | ipaddress.IPv6Address,
) -> None:
    if forbidden_reason(address) is None:
        assert address.is_global
        assert not address.is_multicast


@given(st.ip_addresses(v=4))
def test_ipv4_embedded_in_ipv6_gets_at_least_the_ipv4_verdict(v4: ipaddress.IPv4Address) -> None:
    n = int(v4)
    wrapped = [
        ipaddress.IPv6Address(0xFFFF << 32 | n),  # mapped
        ipaddress.IPv6Address((0x64FF9B << 96) | n),  # NAT64
        ipaddress.IPv6Address((0x2002 << 112) | (n << 80)),  # 6to4
        ipaddress.IPv6Address((0x20010000 << 96) | (n ^ 0xFFFFFFFF)),  # Teredo client
    ]
    if forbidden_reason(v4) is not None:
        for v6 in wrapped:
            assert forbidden_reason(v6) is not None, v6


NUMERIC_LOOPBACK = ["2130706433", "0177.0.0.1", "0x7f000001", "0x7f.0.0.1", "127.1", "127.0.1"]


@pytest.mark.parametrize("host", NUMERIC_LOOPBACK)
async def test_numeric_forms_refused_outright_and_after_resolution(
    host: str, spy: ConnectSpy
) -> None:
    with pytest.raises(Refused, match="non-canonical"):
        NetGuard.create().check_host(host, 80)
    # second layer: the C library parses these as loopback (numerically; the spy forbids DNS)
    answers = await system_resolver(host, 80)
    assert answers == ["127.0.0.1"]
    assert forbidden_reason(ipaddress.ip_address(answers[0])) == "a loopback address"
    assert spy.lookups == []


async def test_any_forbidden_answer_refuses_the_name() -> None:
    resolver = FakeResolver({"mixed.test": [[PUBLIC_IP, "10.0.0.7"]]})
    guard = NetGuard.create(resolver=resolver)
    with pytest.raises(Refused, match=r"'mixed.test' resolves to 10\.0\.0\.7"):
        await guard.vet("mixed.test", 443)


@pytest.mark.parametrize(
    ("host", "message"),
    [
        ("localhost", "local or internal"),
        ("foo.localhost", "local or internal"),
        ("metadata.google.internal", "local or internal"),
        ("metadata", "local or internal"),
        ("printer.local", "local or internal"),
        ("ex%41mple.com", "not a valid host name"),
        ("%31%32%37.0.0.1", "refused"),
        ("fe80::1%25eth0", "scoped"),
    ],
)
def test_internal_and_malformed_names_refused_before_resolution(host: str, message: str) -> None:
    with pytest.raises(Refused, match=message):
        NetGuard.create().check_host(host, 80)


def test_allow_hosts_globs_match_subdomains_only() -> None:
    guard = NetGuard.create(allow_hosts=["*.example.com", "api.other.org"])
    assert guard.check_host("a.example.com", 443) is None
    assert guard.check_host("a.b.example.com", 443) is None
    assert guard.check_host("api.other.org", 443) is None
    for host in ("example.com", "badexample.com", "other.org", "example.com.evil.net"):
        with pytest.raises(Refused, match="allow_hosts"):
            guard.check_host(host, 443)


def test_private_allowances_parse_and_match() -> None:
    loop8080 = PrivateAllowance.parse("127.0.0.1:8080")
    assert loop8080.permits("x", ipaddress.ip_address("127.0.0.1"), 8080)
    assert not loop8080.permits("x", ipaddress.ip_address("127.0.0.1"), 8081)
    assert not loop8080.permits("x", ipaddress.ip_address("127.0.0.2"), 8080)
    v6 = PrivateAllowance.parse("[::1]:9000")
    assert v6.permits("x", ipaddress.ip_address("::1"), 9000)
    ten = PrivateAllowance.parse("10.0.0.0/8")
    assert ten.permits("x", ipaddress.ip_address("10.9.8.7"), 1)
    named = PrivateAllowance.parse("DB.Internal.:5432")
    assert named.permits("db.internal", ipaddress.ip_address("10.0.0.5"), 5432)
    assert not named.permits("other.internal", ipaddress.ip_address("10.0.0.5"), 5432)
    # a metadata address is unlocked only by naming it exactly
    metadata = ipaddress.ip_address("169.254.169.254")
    assert not PrivateAllowance.parse("169.254.0.0/16").permits("x", metadata, 80)
    assert not PrivateAllowance.parse("0.0.0.0/0").permits("x", metadata, 80)
    assert PrivateAllowance.parse("169.254.169.254").permits("x", metadata, 80)


@pytest.mark.parametrize(
    "entry", ["10.0.0.0/33", "127.0.0.1:0", "127.0.0.1:http", "a b", "x:99999"]
)
def test_bad_allow_private_entries_are_config_errors(entry: str) -> None:
    with pytest.raises(ConfigError, match="allow_private"):
        http_tools(allow_private=[entry])


def test_bad_configuration_is_refused() -> None:
    with pytest.raises(ConfigError):
        http_tools(allow_headers=["Host"])
    with pytest.raises(ConfigError):
        http_tools(timeout=0)
    with pytest.raises(ConfigError):
        http_tools(allow_hosts=["ex*ample.com"])
    with pytest.raises(ConfigError):
        http_tools(allow_private="127.0.0.1")


def test_missing_httpx_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "httpx", None)
    with pytest.raises(MissingExtraError, match=r"tether\[http\]"):
        http_tools()


def test_annotations_are_honest() -> None:
    get, post = http_tools()
    assert (get.name, post.name) == ("http_get", "http_post")
    g, p = get.annotations, post.annotations
    assert (g.read_only, g.idempotent, g.open_world) == (True, True, True)
    assert (p.read_only, p.destructive, p.idempotent, p.open_world) == (False, None, False, True)
    assert get.safe_to_retry
    assert not post.safe_to_retry


# -- pinning -------------------------------------------------------------------------------


async def test_connection_goes_to_the_vetted_address_not_a_second_lookup(spy: ConnectSpy) -> None:
    resolver = FakeResolver({"rebind.test": [[PUBLIC_IP], ["127.0.0.1"]]})
    get, _ = http_tools(resolver=resolver, retries=0, timeout=2)
    result = await call(get, {"url": "http://rebind.test:8080/"})
    assert result.is_error  # the spy refused the public connect: nothing left the machine
    assert resolver.calls == ["rebind.test"]
    assert spy.connects == [(PUBLIC_IP, 8080)]
    assert spy.lookups == []  # httpx never resolved the name itself


async def test_pinned_request_keeps_the_host_header(
    server: RecordingServer, spy: ConnectSpy
) -> None:
    resolver = FakeResolver({"named.test": [["127.0.0.1"]]})
    get, _ = http_tools(resolver=resolver, allow_private=[f"127.0.0.1:{server.port}"])
    result = await call(get, {"url": f"http://named.test:{server.port}/hello"})
    assert not result.is_error, content_text(result.content)
    assert server.requests[-1].headers["host"] == f"named.test:{server.port}"
    assert server.requests[-1].headers["user-agent"] == "tether"
    assert spy.connects == [("127.0.0.1", server.port)]


def _self_signed(directory: Path, name: str) -> tuple[Path, Path]:
    openssl = shutil.which("openssl")
    if openssl is None:
        pytest.skip("openssl is needed to make a test certificate")
    cert, key = directory / "cert.pem", directory / "key.pem"
    subprocess.run(
        [openssl, "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
         "-nodes", "-keyout", str(key), "-out", str(cert), "-days", "1", "-subj", f"/CN={name}",
         "-addext", f"subjectAltName=DNS:{name}"],
        check=True,
        capture_output=True,
    )  # fmt: skip
    return cert, key


async def test_tls_uses_the_host_name_for_sni_and_verification(
    tmp_path: Path, spy: ConnectSpy, monkeypatch: pytest.MonkeyPatch
) -> None:
    import asyncio

    import certifi

    cert, key = _self_signed(tmp_path, "secure.test")
    monkeypatch.setattr(certifi, "where", lambda: str(cert))
    seen_sni: list[str | None] = []
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(cert, key)

    def on_sni(sock: ssl.SSLObject | ssl.SSLSocket, name: str | None, ctx: ssl.SSLContext) -> None:
        seen_sni.append(name)

    context.sni_callback = on_sni
    async with RecordingServer() as plain:  # for its request handler
        tls = await asyncio.start_server(plain._serve, "127.0.0.1", 0, ssl=context)  # pyright: ignore[reportPrivateUsage]
        port = tls.sockets[0].getsockname()[1]
        try:
            resolver = FakeResolver({"secure.test": [["127.0.0.1"]], "other.test": [["127.0.0.1"]]})
            get, _ = http_tools(resolver=resolver, allow_private=[f"127.0.0.1:{port}"], timeout=5)
            good = await call(get, {"url": f"https://secure.test:{port}/hello"})
            assert not good.is_error, content_text(good.content)
            assert "hello from the test server" in content_text(good.content)
            assert seen_sni[0] == "secure.test"
            assert plain.requests[-1].headers["host"] == f"secure.test:{port}"
            # same address, another name: the certificate does not match, so it must fail
            bad = await call(get, {"url": f"https://other.test:{port}/hello"})
            assert bad.is_error
            assert "certificate" in content_text(bad.content).lower()
            assert len(plain.requests) == 1
        finally:
            tls.close()
            await tls.wait_closed()


# -- behaviour -----------------------------------------------------------------------------


def _field(result: ToolResult, key: str) -> JsonValue:
    assert isinstance(result.structured, dict)
    return result.structured[key]


async def test_post_is_not_retried_and_5xx_is_a_normal_result(
    server: RecordingServer, spy: ConnectSpy
) -> None:
    get, post = http_tools(allow_private=[f"127.0.0.1:{server.port}"], retries=2)
    result = await call(post, {"url": f"{server.base}/flaky?key=post", "body": "once"})
    assert not result.is_error
    assert _field(result, "status") == 503
    assert [r.method for r in server.requests] == ["POST"]
    result = await call(get, {"url": f"{server.base}/flaky?key=get"})
    assert "recovered" in content_text(result.content)
    assert len(server.requests) == 3


async def test_credentials_dropped_on_cross_origin_redirect(spy: ConnectSpy) -> None:
    async with RecordingServer() as a, RecordingServer() as b:
        get, _ = http_tools(
            allow_private=[f"127.0.0.1:{a.port}", f"127.0.0.1:{b.port}"],
            allow_headers=["authorization"],
        )
        headers: dict[str, JsonValue] = {"Authorization": "Bearer s3cret"}
        same = f"{a.base}/redirect?to=/echo"
        other = f"{a.base}/redirect?to={b.base}/echo"
        assert not (await call(get, {"url": same, "headers": headers})).is_error
        assert a.requests[-1].headers.get("authorization") == "Bearer s3cret"
        assert not (await call(get, {"url": other, "headers": headers})).is_error
        assert "authorization" not in b.requests[-1].headers


async def test_request_body_limits_and_shapes(server: RecordingServer, spy: ConnectSpy) -> None:
    _, post = http_tools(allow_private=[f"127.0.0.1:{server.port}"], max_request_bytes=10)
    too_big = await call(post, {"url": f"{server.base}/echo", "body": "x" * 11})
    assert too_big.is_error
    assert "limit is 10" in content_text(too_big.content)
    both = await call(post, {"url": f"{server.base}/echo", "body": "a", "json": {"b": 1}})
    assert both.is_error
    assert "not both" in content_text(both.content)
    assert server.requests == []


async def test_gzip_is_decoded_and_size_capped(server: RecordingServer, spy: ConnectSpy) -> None:
    get, _ = http_tools(allow_private=[f"127.0.0.1:{server.port}"], max_response_bytes=5000)
    small = await call(get, {"url": f"{server.base}/gzip"})
    assert content_text(small.content).endswith("zipped text ✓")
    bomb = await call(get, {"url": f"{server.base}/gzip-bomb"})
    assert _field(bomb, "truncated") is True
    body = content_text(bomb.content).split("\n\n", 1)[1]
    assert len(body) == 5000


@pytest.mark.parametrize("charset", ["punycode", "rot13", "idna", "utf-7", "no-such-charset"])
def test_a_page_that_names_a_charset_no_page_uses_is_read_as_utf8(charset: str) -> None:
    # punycode decoded 300 KB in 30 s on the event loop (past every deadline); rot13 failed
    from tether.tools.builtin.http import _as_text  # pyright: ignore[reportPrivateUsage]

    body = b"a-" + b"b" * 300_000
    assert _as_text(body, "text/plain", charset) == body.decode()
    assert _as_text("café".encode("latin-1"), "text/plain", "latin-1") == "café"
