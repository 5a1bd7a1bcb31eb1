"""The HTTP API of ``tether serve`` (FastAPI): runs, their events live, their logs.

Every surface is a view of the run store: a run started here is an ``Agent`` run committing
to the same store the CLI reads, tagged with its tenant (``tenant:<name>``); its events go
out as Server-Sent Events read from the store, so a client that reconnects with
``Last-Event-ID`` gets exactly the events after the last it saw. A key sees only its
tenant's runs: another tenant's run is ``404``, as if it did not exist.

Endpoints (``/v1``): ``POST /runs`` (``Idempotency-Key``: the same key returns the same
run), ``GET /runs``, ``GET /runs/{id}``, ``GET /runs/{id}/events`` (SSE), ``GET
/runs/{id}/log`` (JSONL), ``POST /runs/{id}/answer``, ``POST /runs/{id}/cancel``. Errors
are JSON ``{"error": "..."}`` with no stack trace.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable, Mapping
from typing import Annotated, Any, cast

from fastapi import Depends, FastAPI, Header, Query, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response, StreamingResponse
from pydantic import BaseModel, ConfigDict, Field

from tether.agent import Agent
from tether.auditkey import audit_key_from_env
from tether.errors import RunExists, RunNotFound, TetherError, UserError
from tether.events import ApprovalGiven, ApprovalRequested
from tether.jsontypes import JsonObject, JsonValue
from tether.policy.approvals import Approval
from tether.policy.audit import audit_encoded
from tether.server.keys import ApiKey, ApiKeys, KeyRefused, Scope
from tether.server.runs import ServerRuns, TooBusy, run_json
from tether.server.sse import event_stream
from tether.status import RunStatus
from tether.stores.base import RunQuery, RunStore
from tether.stores.kv import KeyValueStore

__all__ = ["MAX_BODY_BYTES", "Answer", "Decision", "Decisions", "StartRun", "create_app"]

MAX_BODY_BYTES = 1_000_000
"""Requests with a larger body are refused with 413."""

_TENANT_TAG = "tenant:"
_log = logging.getLogger("tether.server")


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)


class StartRun(_Strict):
    """A run to start."""

    goal: str = Field(min_length=1, max_length=100_000, description="The task, in words.")
    agent: str | None = Field(
        default=None, description="The agent's name (optional when the server has one)."
    )
    context: dict[str, Any] | None = Field(
        default=None, description="Structured data the task is about (a JSON object)."
    )
    tags: list[Annotated[str, Field(min_length=1, max_length=200)]] = Field(
        default_factory=list[str], max_length=32, description="Labels recorded with the run."
    )


class Answer(_Strict):
    """The user's answer to a run that asked a question."""

    text: str = Field(min_length=1, max_length=100_000)


class Decision(_Strict):
    """A human's decision on one pending call, bound to the arguments they saw."""

    call_id: str = Field(min_length=1, max_length=200)
    approve: bool = Field(description="Run the call (true) or deny it (false).")
    arguments_hash: str = Field(
        min_length=64, max_length=64, description="The pending call's arguments_hash."
    )
    arguments: dict[str, Any] | None = Field(
        default=None, description="Edited arguments to run with (the policy checks them again)."
    )
    reason: str = Field(default="", max_length=10_000, description="Why (the model reads it).")


class Decisions(_Strict):
    """Decisions on calls a run waits for; calls left out keep waiting."""

    decisions: list[Decision] = Field(min_length=1, max_length=100)
    by: str = Field(default="", max_length=200, description="Who decided (with the key's id).")


def _error(status: int, message: str, headers: Mapping[str, str] | None = None) -> JSONResponse:
    return JSONResponse({"error": message}, status_code=status, headers=dict(headers or {}))


def _idempotent_id(tenant: str, key: str) -> str:
    h = hashlib.sha256(f"{tenant}\0{key}".encode()).hexdigest()[:32]
    return f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"


def create_app(
    agents: Agent[Any] | Mapping[str, Agent[Any]],
    store: RunStore,
    *,
    max_active_runs: int = 64,
) -> FastAPI:
    """The API over ``store`` (which must also keep key-value entries, as ``SqliteStore``).

    Args:
        agents: The agents clients may start, by name (one ``Agent``: its own name).
        store: Where runs commit and keys are kept.
        max_active_runs: Runs executing at once; past it, starting one is ``429``.
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
        yield
        await runs.close()  # runs in flight end cancelled, logged; resume them later

    app = FastAPI(
        lifespan=lifespan,
        title="tether",
        summary="Runs of tether agents: start them, watch their events, read their logs.",
        version="1",
    )
    api = _Api(dict(agents), store, ApiKeys(store), runs)
    app.state.api = api
    _answer_errors(app)
    app.add_api_route("/v1/runs", api.start_run, methods=["POST"], status_code=202)
    app.add_api_route("/v1/runs", api.list_runs, methods=["GET"])
    app.add_api_route("/v1/runs/{run_id}", api.get_run, methods=["GET"])
    app.add_api_route(
        "/v1/runs/{run_id}/events",
        api.run_events,
        methods=["GET"],
        response_class=StreamingResponse,
    )
    app.add_api_route("/v1/runs/{run_id}/log", api.run_log, methods=["GET"])
    app.add_api_route("/v1/runs/{run_id}/answer", api.answer_run, methods=["POST"], status_code=202)
    app.add_api_route("/v1/runs/{run_id}/cancel", api.cancel_run, methods=["POST"], status_code=202)
    app.add_api_route("/v1/runs/{run_id}/approvals", api.decide, methods=["POST"], status_code=202)
    app.add_api_route("/v1/runs/{run_id}/resume", api.resume_run, methods=["POST"], status_code=202)
    app.add_api_route("/v1/runs/{run_id}/audit", api.audit_run, methods=["GET"])
    return app


class _Forbidden(TetherError):
    """The key is valid but its scopes do not cover the request: HTTP 403."""


def _answer_errors(app: FastAPI) -> None:
    """Every error as ``{"error": ...}`` with the right status; never a stack trace."""

    @app.middleware("http")
    async def _guard(
        request: Request, call_next: Callable[[Request], Awaitable[Response]]
    ) -> Response:
        length = request.headers.get("content-length")
        if length is not None and (not length.isdigit() or int(length) > MAX_BODY_BYTES):
            return _error(413, f"the request body is over {MAX_BODY_BYTES} bytes")
        try:
            return await call_next(request)
        except Exception:  # the handlers below answer what is expected; nothing leaks
            _log.exception("%s %s failed", request.method, request.url.path)
            return _error(500, "internal error: the server's log has the details")

    async def invalid(request: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, RequestValidationError)
        problems = [f"{'.'.join(str(p) for p in e['loc'])}: {e['msg']}" for e in exc.errors()[:10]]
        return _error(422, "invalid request: " + "; ".join(problems))

    async def tether_error(request: Request, exc: Exception) -> JSONResponse:
        status, headers = _STATUS.get(type(exc), (400, {}))
        if status == 400 and not isinstance(exc, UserError):
            status = 503  # a store that fails, a model that is missing: not the client's doing
        message = "no such run" if isinstance(exc, RunNotFound) else str(exc)
        return _error(status, message, headers)

    app.add_exception_handler(RequestValidationError, invalid)
    app.add_exception_handler(TetherError, tether_error)


_STATUS: dict[type[Exception], tuple[int, dict[str, str]]] = {
    KeyRefused: (401, {"WWW-Authenticate": "Bearer"}),
    _Forbidden: (403, {}),
    RunNotFound: (404, {}),
    RunExists: (409, {}),
    TooBusy: (429, {"Retry-After": "1"}),
}


def _scoped(scope: Scope) -> Callable[..., Awaitable[ApiKey]]:
    """A dependency: the request's key, if it is live and may do ``scope``."""

    async def check(
        request: Request,
        authorization: Annotated[str | None, Header()] = None,
        x_api_key: Annotated[str | None, Header()] = None,
    ) -> ApiKey:
        token = x_api_key
        if token is None and authorization is not None:
            kind, _, token = authorization.partition(" ")
            if kind.lower() != "bearer":
                raise KeyRefused("use 'Authorization: Bearer tether_...'")
        api: _Api = request.app.state.api
        key = await api.keys.verify(token)
        if not key.allows(scope):
            raise _Forbidden(f"this key may not {scope}: it has {', '.join(key.scopes)}")
        return key

    return check


_Reader = Annotated[ApiKey, Depends(_scoped("read"))]
_Runner = Annotated[ApiKey, Depends(_scoped("run"))]
_Approver = Annotated[ApiKey, Depends(_scoped("approve"))]


class _Api:
    """The endpoints, over one store, its keys and the runs executing here."""

    def __init__(
        self, agents: dict[str, Agent[Any]], store: RunStore, keys: ApiKeys, runs: ServerRuns
    ) -> None:
        self.agents, self.store, self.keys, self.runs = agents, store, keys, runs

    async def owned(self, run_id: str, key: ApiKey) -> JsonObject:
        """The run as the API shows it, if it is the key's tenant's (else ``RunNotFound``)."""
        info = await self.store.info(run_id)
        if f"{_TENANT_TAG}{key.tenant}" not in info.tags:
            raise RunNotFound(run_id)
        return run_json(info, _TENANT_TAG)

    def _agent(self, name: str | None) -> Agent[Any]:
        if name is None and len(self.agents) > 1:
            raise UserError(f"say which agent: one of {', '.join(sorted(self.agents))}")
        chosen = name or next(iter(self.agents))
        agent = self.agents.get(chosen)
        if agent is None:
            raise UserError(f"no agent named {chosen!r}: one of {', '.join(sorted(self.agents))}")
        return agent

    async def start_run(
        self,
        body: StartRun,
        key: _Runner,
        idempotency_key: Annotated[str | None, Header(max_length=200)] = None,
    ) -> JsonObject:
        """Start a run (``Idempotency-Key``: the same key returns the same run)."""
        agent = self._agent(body.agent)
        if any(t.startswith(_TENANT_TAG) for t in body.tags):
            raise UserError(f"tags beginning with {_TENANT_TAG!r} are the server's")
        run_id = None if idempotency_key is None else _idempotent_id(key.tenant, idempotency_key)
        started = await self.runs.start(
            agent,
            body.goal,
            run_id=run_id,
            context=body.context,
            tags=(f"{_TENANT_TAG}{key.tenant}", *body.tags),
        )
        return await self.owned(started, key)

    async def list_runs(
        self,
        key: _Reader,
        status: RunStatus | None = None,
        agent: Annotated[str | None, Query(max_length=200)] = None,
        limit: Annotated[int, Query(ge=1, le=1000)] = 100,
    ) -> JsonObject:
        """The tenant's runs, newest first."""
        tag = f"{_TENANT_TAG}{key.tenant}"
        found = await self.store.runs(RunQuery(status=status, agent=agent, limit=100_000))
        mine: list[JsonValue] = [run_json(r, _TENANT_TAG) for r in found if tag in r.tags]
        return {"runs": mine[:limit]}

    async def get_run(self, run_id: str, key: _Reader) -> JsonObject:
        """One run: status, usage, steps, and the calls it waits for a human to decide."""
        shown = await self.owned(run_id, key)
        if shown["status"] == "waiting_for_approval":
            waiting = await self._waiting(run_id)
            shown["pending"] = [
                {
                    "call_id": r.call_id,
                    "tool": r.tool,
                    "arguments": r.arguments,
                    "arguments_hash": r.arguments_hash,
                }
                for r in waiting.values()
            ]
        return shown

    async def run_events(
        self,
        run_id: str,
        key: _Reader,
        last_event_id: Annotated[str | None, Header()] = None,
        after: Annotated[int | None, Query(ge=-1)] = None,
    ) -> StreamingResponse:
        """The run's events as Server-Sent Events, from after ``Last-Event-ID`` (a seq)."""
        await self.owned(run_id, key)
        start = -1 if after is None else after
        if last_event_id is not None:
            if not last_event_id.strip().lstrip("-").isdigit():
                raise UserError("Last-Event-ID must be the seq of an event this stream sent")
            start = int(last_event_id)
        stream: AsyncIterator[bytes] = event_stream(self.store, self.runs, run_id, start)
        return StreamingResponse(
            stream,
            media_type="text/event-stream",
            headers={"Cache-Control": "no-store", "X-Accel-Buffering": "no"},
        )

    async def run_log(self, run_id: str, key: _Reader) -> Response:
        """The run's log as stored, one event per line (what ``tether audit`` verifies)."""
        await self.owned(run_id, key)
        lines = await self.store.read_encoded(run_id)
        return Response(b"".join(line + b"\n" for line in lines), media_type="application/jsonl")

    async def answer_run(self, run_id: str, body: Answer, key: _Runner) -> JsonObject:
        """Answer the question a waiting run asked; it goes on here."""
        info = await self.owned(run_id, key)
        await self.runs.resume(self._agent(str(info["agent"])), run_id, answer=body.text)
        return await self.owned(run_id, key)

    async def cancel_run(self, run_id: str, key: _Runner) -> JsonObject:
        """Cancel a run executing in this server (it ends ``cancelled``)."""
        await self.owned(run_id, key)
        await self.runs.cancel(run_id)
        return await self.owned(run_id, key)

    async def decide(self, run_id: str, body: Decisions, key: _Approver) -> JsonObject:
        """Approve or deny calls the run waits for (each bound to its arguments' hash)."""
        info = await self.owned(run_id, key)
        if info["status"] != "waiting_for_approval":
            raise UserError(f"the run is {info['status']}: it waits for no approval")
        waiting = await self._waiting(run_id)
        unknown = [d.call_id for d in body.decisions if d.call_id not in waiting]
        if unknown:
            raise UserError(
                f"the run waits for no call {', '.join(map(repr, unknown))}: it waits for "
                f"{', '.join(waiting) or 'none'}"
            )
        who = f"API key {key.key_id}" + (f" ({body.by})" if body.by else "")
        approvals = [
            Approval(
                call_id=d.call_id,
                approved=d.approve,
                run_id=run_id,
                arguments_hash=d.arguments_hash,
                arguments=cast(JsonObject, d.arguments) if d.arguments is not None else None,
                by=who,
                reason=d.reason,
            )
            for d in body.decisions
        ]
        agent = self._agent(str(info["agent"]))
        await self.runs.resume(agent, run_id, approvals=approvals)
        return await self.owned(run_id, key)

    async def resume_run(self, run_id: str, key: _Runner) -> JsonObject:
        """Continue a run whose process died (its log is repaired first, nothing repeated)."""
        info = await self.owned(run_id, key)
        await self.runs.resume(self._agent(str(info["agent"])), run_id)
        return await self.owned(run_id, key)

    async def audit_run(self, run_id: str, key: _Reader) -> JsonObject:
        """Verify the run's hash chain (and its MACs, with the server's audit key)."""
        info = await self.owned(run_id, key)
        lines = await self.store.read_encoded(run_id)
        macs = await self.store.read_macs(run_id)
        report = audit_encoded(
            lines, expected_events=cast(int, info["events"]), key=audit_key_from_env(), macs=macs
        )
        return {
            "run_id": run_id,
            "ok": report.ok,
            "events": report.events,
            "bad_seq": report.bad_seq,
            "problem": report.problem,
            "last_hash": report.last_hash,
            "keyed": report.keyed,
            "verified_through": report.verified_through,
        }

    async def _waiting(self, run_id: str) -> dict[str, ApprovalRequested]:
        requested: dict[str, ApprovalRequested] = {}
        for event in await self.store.read(run_id):
            if isinstance(event, ApprovalRequested):
                requested[event.call_id] = event
            elif isinstance(event, ApprovalGiven):
                requested.pop(event.call_id, None)
        return requested
