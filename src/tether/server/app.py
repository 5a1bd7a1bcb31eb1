"""The HTTP API of ``tether serve`` (FastAPI): runs, their events live, their logs.

Every surface is a view of the run store: a run started here is an ``Agent`` run committing
to the same store the CLI reads, tagged with its tenant (``tenant:<name>``); its events go
out as Server-Sent Events read from the store, so a client that reconnects with
``Last-Event-ID`` gets exactly the events after the last it saw. A key sees only its
tenant's runs: another tenant's run is ``404``, as if it did not exist.

Endpoints (``/v1``): ``POST /runs`` (``Idempotency-Key``: the same key returns the same
run), ``GET /runs`` (a page; its ``next_cursor`` as ``cursor``: the next), ``GET
/runs/{id}``, ``GET /runs/{id}/events`` (SSE), ``GET /runs/{id}/log`` (JSONL), ``GET
/runs/{id}/audit``, ``POST /runs/{id}/answer``, ``POST /runs/{id}/approvals``, ``POST
/runs/{id}/resume``, ``POST /runs/{id}/cancel``. Errors are
JSON ``{"error": "..."}`` with no stack trace; every status the API answers is in its
OpenAPI schema (``/openapi.json``).
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import hashlib
import logging
import re
from collections.abc import AsyncGenerator, Mapping
from pathlib import Path
from typing import Annotated, Any
from urllib.parse import urlsplit

import anyio
from fastapi import FastAPI, Header, Query, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import HTMLResponse, JSONResponse, Response, StreamingResponse
from fastapi.routing import APIRoute
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from tether.agent import Agent
from tether.errors import LeaseHeld, RunExists, RunNotFound, TetherError, UserError
from tether.jsontypes import JsonObject
from tether.server.bodies import ERRORS, StartRun, start_run_body
from tether.server.cursors import CURSOR_PATTERN, BadCursor
from tether.server.endpoints import Conflict, Endpoints, Forbidden, Reader, Runner
from tether.server.keys import ApiKeys, KeyRefused
from tether.server.runs import Busy, ServerRuns, TooBusy
from tether.stores.base import RunIndexStatus, RunStore
from tether.stores.kv import KeyValueStore

__all__ = ["BODY_SECONDS", "MAX_BODY_BYTES", "Invalid", "create_app"]

MAX_BODY_BYTES = 1_000_000
"""Requests with a larger body are refused with 413."""
BODY_SECONDS = 30.0
"""Seconds a request's body may take to arrive; a slower one is refused with 408."""

_log = logging.getLogger("tether.server")
_SEQ = re.compile(r"^-?[0-9]{1,18}$")
_LAST_EVENT_ID: dict[str, Any] = {  # read by hand: a header FastAPI declares is nullable
    "parameters": [
        {
            "name": "Last-Event-ID",
            "in": "header",
            "required": False,
            "description": "The seq of the last event received: the stream goes on after it.",
            "schema": {"type": "string", "pattern": _SEQ.pattern},
        }
    ]
}
IdempotencyKey = Annotated[
    str | None,
    Header(min_length=1, max_length=200, description="The same key returns the same run."),
]


def create_app(
    agents: Agent[Any] | Mapping[str, Agent[Any]],
    store: RunStore,
    *,
    max_active_runs: int = 64,
    resume_stale: bool = True,
) -> FastAPI:
    """The API over ``store`` (which must also keep key-value entries, as ``SqliteStore``).

    Args:
        agents: The agents clients may start, by name (one ``Agent``: its own name).
        store: Where runs commit and keys are kept.
        max_active_runs: Runs executing at once; past it, starting one is ``429``.
        resume_stale: On start, continue the runs this API had started whose process died
            (a server killed mid-run), by the crash rules.
    """
    if isinstance(agents, Agent):
        agents = {agents.name: agents}
    if not agents:
        raise UserError("create_app needs at least one agent to serve")
    if not isinstance(store, KeyValueStore):
        raise UserError(
            f"the server keeps API keys in the run store: {type(store).__name__} keeps no "
            "key-value entries (use SqliteStore)"
        )
    runs = ServerRuns(store, max_active=max_active_runs)

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncGenerator[None]:
        if resume_stale:
            resumed = await api.resume_stale()
            if resumed:
                _log.warning("resumed %d runs whose process had died", len(resumed))
        yield
        if api.resuming is not None:
            api.resuming.cancel()  # what it has not resumed yet stays for the next start
            with contextlib.suppress(asyncio.CancelledError):
                await api.resuming
        await runs.close()  # runs in flight stop as a crash leaves them: resumed next start

    app = FastAPI(
        lifespan=lifespan,
        title="tether",
        summary="Runs of tether agents: start them, watch their events, read their logs.",
        version="1",
        responses=ERRORS,
        # FastAPI's /docs and /redoc run a CDN's script on this origin, where the trace
        # page keeps a key: none here (the schema is /openapi.json)
        docs_url=None,
        redoc_url=None,
        # /v1/runs/ redirected to the client's own Host header's address, bodiless: a 404
        redirect_slashes=False,
    )
    api = Endpoints(dict(agents), store, ApiKeys(store), runs)
    app.state.api = api
    _answer_errors(app)
    _routes(app, api, start_run_body(list(agents)))
    return app


def _routes(app: FastAPI, api: Endpoints, body: type[StartRun]) -> None:
    async def start_run(
        body: StartRun, key: Runner, idempotency_key: IdempotencyKey = None
    ) -> JsonObject:
        """Start a run (``Idempotency-Key``: the same key returns the same run)."""
        return await api.start_run(body, key, idempotency_key)

    start_run.__annotations__ = {**start_run.__annotations__, "body": body}

    async def list_runs(
        key: Reader,
        status: RunIndexStatus | None = None,
        agent: Annotated[str | None, Query(max_length=200)] = None,
        limit: Annotated[int, Query(ge=1, le=1000)] = 100,
        cursor: Annotated[
            str | None,
            Query(
                pattern=CURSOR_PATTERN,
                description="The next_cursor of the page before (none: the first page).",
            ),
        ] = None,
    ) -> JsonObject:
        """The tenant's runs, newest first, a page at a time (``next_cursor``: the next)."""
        return await api.list_runs(key, status, agent, limit, cursor)

    async def run_events(
        request: Request,
        run_id: str,
        key: Reader,
        after: Annotated[int | None, Query(ge=-1, le=2**62)] = None,
    ) -> StreamingResponse:
        """The run's events as Server-Sent Events, after ``Last-Event-ID`` (or ``after``)."""
        last = request.headers.get("last-event-id")
        if last is not None and not _SEQ.match(last):
            raise Invalid(
                f"Last-Event-ID must be the seq of an event this stream sent, not {last!r}"
            )
        start = int(last) if last is not None else after
        return await api.run_events(run_id, key, -1 if start is None else start)

    post, get = ["POST"], ["GET"]
    sse: dict[int | str, dict[str, Any]] = {
        200: {"content": {"text/event-stream": {}}, "description": "The events, live."}
    }
    jsonl: dict[int | str, dict[str, Any]] = {
        200: {"content": {"application/jsonl": {}}, "description": "One event a line."}
    }
    app.add_api_route("/v1/runs", start_run, methods=post, status_code=202)
    app.add_api_route("/v1/runs", list_runs, methods=get)
    app.add_api_route("/v1/runs/{run_id}", api.get_run, methods=get)
    app.add_api_route(
        "/v1/runs/{run_id}/events",
        run_events,
        methods=get,
        response_class=StreamingResponse,
        responses=sse,
        openapi_extra=_LAST_EVENT_ID,
    )
    app.add_api_route(
        "/v1/runs/{run_id}/log", api.run_log, methods=get, response_class=Response, responses=jsonl
    )
    app.add_api_route("/v1/runs/{run_id}/audit", api.audit_run, methods=get)
    app.add_api_route("/", _page, methods=get, response_class=HTMLResponse, include_in_schema=False)
    for path, endpoint in (
        ("answer", api.answer_run),
        ("approvals", api.decide),
        ("resume", api.resume_run),
        ("cancel", api.cancel_run),
    ):
        app.add_api_route(f"/v1/runs/{{run_id}}/{path}", endpoint, methods=post, status_code=202)


_PAGE = Path(__file__).with_name("page.html")


def _csp(page: bytes) -> str:
    """The page's Content-Security-Policy: its own inline script and style, by their hashes.

    Nothing else runs or loads, and no other site may frame it.
    """

    def hashes(tag: bytes) -> str:
        found = re.findall(rb"<%s>(.*?)</%s>" % (tag, tag), page, flags=re.DOTALL)
        return " ".join(
            f"'sha256-{base64.b64encode(hashlib.sha256(body).digest()).decode()}'" for body in found
        )

    return (
        f"default-src 'none'; script-src {hashes(b'script')}; style-src {hashes(b'style')}; "
        "connect-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'none'"
    )


async def _page() -> HTMLResponse:
    """The trace page: runs, and one run's timeline live (the key is asked on the page)."""
    page = _PAGE.read_bytes()
    return HTMLResponse(
        page,
        headers={
            "Cache-Control": "no-store",
            "Content-Security-Policy": _csp(page),
            "X-Content-Type-Options": "nosniff",
            "Referrer-Policy": "no-referrer",
        },
    )


def _answer_errors(app: FastAPI) -> None:
    """Every error as ``{"error": ...}`` with the right status; never a stack trace."""

    async def invalid(request: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, RequestValidationError)
        problems = [f"{'.'.join(str(p) for p in e['loc'])}: {e['msg']}" for e in exc.errors()[:10]]
        return _error(422, "invalid request: " + "; ".join(problems))

    async def tether_error(request: Request, exc: Exception) -> JSONResponse:
        status, headers = _STATUS.get(type(exc), (400, {}))
        if status == 400 and type(exc) is not UserError:
            # a store that fails, a model or a setting that is missing: not the client's
            # doing, and its message names the server's files and settings: for its log only
            name = type(exc).__name__
            _log.error("%s %s failed: %s: %s", request.method, request.url.path, name, exc)
            return _error(503, _UNAVAILABLE)
        message = "no such run" if isinstance(exc, RunNotFound) else str(exc)
        if isinstance(exc, LeaseHeld):  # its message names the owner's host and pid
            message = "the run is executing in another process"
        return _error(status, message, headers)

    async def http_error(request: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, StarletteHTTPException)
        headers = dict(exc.headers or {})
        if exc.status_code == 405:  # every method the path has, not the first route's
            methods = {
                m
                for r in app.routes
                if isinstance(r, APIRoute) and r.path_regex.match(request.url.path)
                for m in r.methods or ()
            }
            if "GET" in methods:
                methods.add("HEAD")  # the guard answers HEAD with the GET route
            headers["Allow"] = ", ".join(sorted(methods))
        return _error(exc.status_code, str(exc.detail), headers)

    app.add_middleware(_Guard)
    app.add_exception_handler(RequestValidationError, invalid)
    app.add_exception_handler(StarletteHTTPException, http_error)
    app.add_exception_handler(TetherError, tether_error)


def _error(status: int, message: str, headers: Mapping[str, str] | None = None) -> JSONResponse:
    return JSONResponse({"error": message}, status_code=status, headers=dict(headers or {}))


class _Guard:
    """Size limits and the last word on errors, as plain ASGI (no task per streamed chunk).

    A request whose ``Content-Length`` (or, chunked, whose body as read) is over
    ``MAX_BODY_BYTES`` gets 413; a body is read whole before the app sees it (a body's JSON
    is small). An exception the handlers did not answer is logged and answered 500 with
    no detail; once a response has begun there is nothing left to answer with, and the
    server closes the connection.
    """

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        length = next((v for k, v in scope["headers"] if k == b"content-length"), None)
        if length is not None and (not length.isdigit() or int(length) > MAX_BODY_BYTES):
            await _too_large()(scope, receive, send)
            return
        path: str = scope["path"]
        if path.startswith(("http://", "https://")):  # absolute-form (RFC 9112 3.2.2): its path
            target = urlsplit(path)
            scope = {**scope, "path": target.path or "/", "raw_path": (target.path or "/").encode()}
        if scope["method"] == "HEAD":
            await _head(self.app, scope, receive, send)
            return
        if scope["method"] not in ("GET", "OPTIONS"):
            held = await _read_body(scope, receive, send)
            if held is None:
                return

            async def replay() -> Message:
                return held.pop(0) if held else await receive()

            receive = replay
        begun = False

        async def sending(message: Message) -> None:
            nonlocal begun
            begun = True
            await send(message)

        try:
            await self.app(scope, receive, sending)
        except Exception:  # the handlers answer what is expected; nothing leaks
            _log.exception("%s %s failed", scope["method"], scope["path"])
            if begun:
                raise
            await _error(500, "internal error: the server's log has the details")(
                scope, receive, send
            )


async def _head(app: ASGIApp, scope: Scope, receive: Receive, send: Send) -> None:
    """HEAD: what GET would answer, without its body (a live stream ends after its head).

    Answered by the GET route rather than a HEAD route of each (one operation each in the
    OpenAPI schema): every GET is a read with no effect.
    """
    with anyio.CancelScope() as answered:

        async def head_only(message: Message) -> None:
            if message["type"] == "http.response.start":
                await send(message)
                await send({"type": "http.response.body", "body": b"", "more_body": False})
                answered.cancel()  # a stream would go on: the rest is not sent anyway

        await _Guard(app)({**scope, "method": "GET"}, receive, head_only)


async def _read_body(scope: Scope, receive: Receive, send: Send) -> list[Message] | None:
    """A request's body messages, read whole; ``None``: refused (too large, too slow)."""
    held: list[Message] = []
    seen = 0
    try:
        async with asyncio.timeout(BODY_SECONDS):  # a body sent a byte at a time
            while True:
                message = await receive()
                held.append(message)
                if message["type"] != "http.request":
                    return held
                seen += len(message.get("body", b""))
                if seen > MAX_BODY_BYTES:
                    await _too_large()(scope, receive, send)
                    return None
                if not message.get("more_body", False):
                    return held
    except TimeoutError:
        message = f"the request body did not arrive within {BODY_SECONDS:g} s"
        await _error(408, message, {"Connection": "close"})(scope, receive, send)  # the socket too
        return None


def _too_large() -> JSONResponse:
    return _error(413, f"the request body is over {MAX_BODY_BYTES} bytes")


_UNAVAILABLE = (
    "the server cannot do this now (its run store or a model failed): try again later; "
    "the server's log has the details"
)


class Invalid(UserError):
    """A request the schema allows but a rule of its own refuses: HTTP 422."""


_STATUS: dict[type[Exception], tuple[int, dict[str, str]]] = {
    Invalid: (422, {}),
    BadCursor: (422, {}),
    KeyRefused: (401, {"WWW-Authenticate": "Bearer"}),
    Forbidden: (403, {}),
    RunNotFound: (404, {}),
    RunExists: (409, {}),
    Conflict: (409, {}),
    Busy: (409, {}),
    LeaseHeld: (409, {}),
    TooBusy: (429, {"Retry-After": "1"}),
}
