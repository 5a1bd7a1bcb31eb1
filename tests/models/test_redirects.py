"""The API adapters follow no redirect: the prompt goes to ``base_url`` or nowhere.

Real HTTP servers on the loopback, and the adapters' own HTTP clients (the ones the SDKs
would make): a base URL that answers 307/308 with another address must not send the
request, with the prompt and the API key, on to that address.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from tether._internal.redirects import refused_redirect
from tether.errors import ModelError
from tether.memory import OpenAIEmbedder
from tether.messages import UserMessage
from tether.models.anthropic import AnthropicModel
from tether.models.base import Model, ModelRequest
from tether.models.openai import OpenAIModel

REQUEST = ModelRequest(instructions="", messages=(UserMessage(text="the secret plan"),), tools=())


@dataclass
class Server:
    """A loopback HTTP server that answers every POST or GET with ``status`` (and ``location``)."""

    status: int = 404
    location: str | None = None
    seen: list[str] = field(default_factory=list[str])
    """The paths of the requests that reached it."""
    http: ThreadingHTTPServer | None = None

    @property
    def origin(self) -> str:
        assert self.http is not None
        return f"http://127.0.0.1:{self.http.server_address[1]}"

    def start(self) -> None:
        server = self

        class Handler(BaseHTTPRequestHandler):
            def _answer(self) -> None:
                length = int(self.headers.get("content-length") or 0)
                self.rfile.read(length)
                server.seen.append(self.path)
                body = b'{"error": {"message": "not here", "type": "not_found_error"}}'
                self.send_response(server.status)
                if server.location is not None:
                    self.send_header("location", server.location)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            do_POST = do_GET = _answer

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self.http = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        # A short poll: shutdown() waits for it
        threading.Thread(target=self.http.serve_forever, args=(0.05,), daemon=True).start()

    def stop(self) -> None:
        assert self.http is not None
        self.http.shutdown()
        self.http.server_close()


@pytest.fixture
def servers() -> Iterator[tuple[Server, Server]]:
    """The base URL's server, and another origin (another port) it may redirect to."""
    first, other = Server(), Server()
    first.start()
    other.start()
    try:
        yield first, other
    finally:
        first.stop()
        other.stop()


def adapter(kind: str, base_url: str) -> Model:
    if kind == "openai":
        return OpenAIModel("m", base_url=f"{base_url}/v1", api_key="sk-test")
    return AnthropicModel("claude-haiku-4-5", base_url=base_url, api_key="sk-ant-test")


async def ask(model: Model, streaming: bool) -> None:
    async with model:
        if streaming:
            async for _ in model.stream(REQUEST):
                pass
        else:
            await model.request(REQUEST)


@pytest.mark.parametrize("status", [307, 308])
@pytest.mark.parametrize("streaming", [False, True], ids=["request", "stream"])
@pytest.mark.parametrize("kind", ["openai", "anthropic"])
async def test_a_redirect_to_another_origin_is_refused_and_names_the_base_url_to_set(
    servers: tuple[Server, Server], kind: str, streaming: bool, status: int
) -> None:
    first, other = servers
    path = "/v1/chat/completions" if kind == "openai" else "/v1/messages"
    first.status, first.location = status, f"{other.origin}{path}"
    with pytest.raises(ModelError) as info:
        await ask(adapter(kind, first.origin), streaming)
    assert other.seen == []  # the prompt never left for the other host
    assert first.seen == [path]
    error = info.value
    assert not error.transient
    assert error.status_code == status
    message = str(error)
    assert f"redirect to {other.origin}{path}" in message
    expected = f"{other.origin}/v1" if kind == "openai" else other.origin
    assert f"set base_url to {expected}" in message


@pytest.mark.parametrize("kind", ["openai", "anthropic"])
async def test_a_redirect_is_named_without_its_query_fragment_or_password(
    servers: tuple[Server, Server], kind: str
) -> None:
    first, other = servers
    path = "/v1/chat/completions" if kind == "openai" else "/v1/messages"
    signed = "X-Amz-Signature=c2lnbmVk&token=tok-Zq81"
    first.status = 307
    first.location = other.origin.replace("//", "//ann-Uq3:pw-Hk29@") + f"{path}?{signed}#key=k-Rr7"
    with pytest.raises(ModelError) as info:
        await ask(adapter(kind, first.origin), streaming=False)
    assert other.seen == []
    message = str(info.value)
    for secret in ("c2lnbmVk", "tok-Zq81", "k-Rr7", "pw-Hk29", "ann-Uq3", "?", "#"):
        assert secret not in message
    assert (
        f"redirect to {other.origin}{path} (another scheme or port; its user name and password, "
        "query string and fragment left out)"
    ) in message
    expected = f"{other.origin}/v1" if kind == "openai" else other.origin
    assert message.endswith(f"set base_url to {expected}")


async def test_a_redirect_on_the_same_origin_is_not_followed_either(
    servers: tuple[Server, Server],
) -> None:
    first, _ = servers
    first.status, first.location = 307, "/v2/chat/completions"
    with pytest.raises(ModelError) as info:
        await ask(adapter("openai", first.origin), streaming=False)
    assert first.seen == ["/v1/chat/completions"]
    message = str(info.value)
    assert f"redirect to {first.origin}/v2/chat/completions (the same host)" in message
    assert f"set base_url to {first.origin}/v2" in message


async def test_the_openai_embedder_follows_no_redirect_either(
    servers: tuple[Server, Server],
) -> None:
    first, other = servers
    first.status, first.location = 308, f"{other.origin}/v1/embeddings"
    embedder = OpenAIEmbedder("e", base_url=f"{first.origin}/v1", api_key="sk-test")
    try:
        with pytest.raises(ModelError) as info:
            await embedder.embed(["what memory holds"])
    finally:
        await embedder.aclose()
    assert other.seen == []
    assert not info.value.transient
    assert str(info.value).startswith("the embedder openai:e: ")
    assert f"set base_url to {other.origin}/v1" in str(info.value)


def test_a_redirect_to_an_address_that_is_not_a_url_is_still_a_model_error() -> None:
    error = refused_redirect(
        "m",
        status=307,
        url="http://127.0.0.1:9/v1/chat/completions",
        location="http://[tok-Zq81/v1",
        base_url="http://127.0.0.1:9/v1",
    )
    assert error.status_code == 307
    assert str(error) == (
        "m: http://127.0.0.1:9 answered HTTP 307 with a redirect to an address that is not a "
        "URL; it was not followed; check base_url"
    )


def test_a_redirect_is_named_without_its_path_parameters() -> None:
    # before: ``;sig=...`` stayed in the path the message showed
    from tether._internal.redirects import refused_redirect

    error = refused_redirect(
        "m",
        status=307,
        url="https://api.example.com/v1/chat/completions",
        location="https://api.example.com/v2/chat/completions;sig=Sg-91xq",
        base_url="https://api.example.com/v1",
    )
    assert "Sg-91xq" not in str(error)
    assert "path parameters left out" in str(error)
