"""What each endpoint of the HTTP API does, over one store, its keys and the runs here."""

from __future__ import annotations

import asyncio
import hashlib
import logging
from collections.abc import AsyncGenerator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Annotated, Any, cast

from fastapi import Depends, Request
from fastapi.responses import Response, StreamingResponse
from fastapi.security import APIKeyHeader, HTTPAuthorizationCredentials, HTTPBearer

from tether.agent import Agent
from tether.auditkey import audit_key_from_env
from tether.errors import RunNotFound, TetherError, UserError
from tether.events import ApprovalGiven, ApprovalRequested
from tether.jsontypes import JsonObject, JsonValue
from tether.policy.approvals import Approval
from tether.policy.audit import audit_stored
from tether.server.bodies import Answer, Decisions, StartRun
from tether.server.cursors import decode_cursor, encode_cursor
from tether.server.keys import ApiKey, ApiKeys, KeyRefused, Scope
from tether.server.runs import ServerRuns, TooBusy, run_json
from tether.server.sse import PAGE, event_stream
from tether.stores.base import RunIndexStatus, RunPosition, RunQuery, RunStore
from tether.stores.sqlite import SqliteStore
from tether.stores.stale import stale_runs
from tether.stores.waiting import cancel_waiting_run

__all__ = [
    "TENANT_TAG",
    "Approver",
    "Conflict",
    "Endpoints",
    "Forbidden",
    "Reader",
    "Runner",
    "idempotent_run_id",
]

TENANT_TAG = "tenant:"
_log = logging.getLogger("tether.server")
_bearer = HTTPBearer(auto_error=False, description="Authorization: Bearer tether_...")
_header = APIKeyHeader(name="X-API-Key", auto_error=False, description="Or X-API-Key.")


class Forbidden(TetherError):
    """The key is valid but its scopes do not cover the request: HTTP 403."""


class Conflict(TetherError):
    """The run is not in a state that allows the request (it is executing, or ended): 409."""


def _scoped(scope: Scope) -> Callable[..., Awaitable[ApiKey]]:
    """A dependency: the request's key, if it is live and may do ``scope``."""

    async def check(
        request: Request,
        bearer: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)],
        header: Annotated[str | None, Depends(_header)],
    ) -> ApiKey:
        for name in ("Authorization", "X-API-Key"):  # a proxy's and the client's, say
            if len(set(request.headers.getlist(name))) > 1:  # the first was taken, silently
                raise KeyRefused(f"two different keys (two {name} headers): send one")
        given = None if bearer is None else bearer.credentials
        if header is not None and given is not None and header != given:
            raise KeyRefused("two different keys (Authorization and X-API-Key): send one")
        token = header if header is not None else given
        if token is None and request.headers.get("authorization"):
            raise KeyRefused("use 'Authorization: Bearer tether_...'")
        api: Endpoints = request.app.state.api
        key = await api.keys.verify(token)
        if not key.allows(scope):
            raise Forbidden(f"this key may not {scope}: it has {', '.join(key.scopes)}")
        return key

    return check


Reader = Annotated[ApiKey, Depends(_scoped("read"))]
Runner = Annotated[ApiKey, Depends(_scoped("run"))]
Approver = Annotated[ApiKey, Depends(_scoped("approve"))]


def idempotent_run_id(tenant: str, key: str) -> str:
    """The run id an ``Idempotency-Key`` names, for one tenant."""
    h = hashlib.sha256(f"{tenant}\0{key}".encode()).hexdigest()[:32]
    return f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"


class Endpoints:
    """The endpoints, over one store, its keys and the runs executing here."""

    def __init__(
        self, agents: dict[str, Agent[Any]], store: RunStore, keys: ApiKeys, runs: ServerRuns
    ) -> None:
        self.agents, self.store, self.keys, self.runs = agents, store, keys, runs
        self.resuming: asyncio.Task[None] | None = None
        """Stale runs past the limit, resumed as slots free (cancelled at shutdown)."""

    async def owned(self, run_id: str, key: ApiKey) -> JsonObject:
        """The run as the API shows it, if it is the key's tenant's (else ``RunNotFound``)."""
        info = await self.store.info(run_id)
        if f"{TENANT_TAG}{key.tenant}" not in info.tags:
            raise RunNotFound(run_id)
        return run_json(info, TENANT_TAG)

    def _agent(self, name: str | None) -> Agent[Any]:
        if name is None and len(self.agents) > 1:
            raise UserError(f"say which agent: one of {', '.join(sorted(self.agents))}")
        chosen = name or next(iter(self.agents))
        agent = self.agents.get(chosen)
        if agent is None:
            raise UserError(f"no agent named {chosen!r}: one of {', '.join(sorted(self.agents))}")
        return agent

    async def _stopped(self, run_id: str, key: ApiKey, wanted: str) -> JsonObject:
        """The run, if it is not executing here and its status is ``wanted`` (else 409)."""
        info = await self.owned(run_id, key)
        if self.runs.is_active(run_id):
            raise Conflict("the run is executing in this server: wait until it stops")
        if info["status"] != wanted:
            raise Conflict(f"the run is {info['status']}, not {wanted}")
        return info

    @asynccontextmanager
    async def _raced(self, run_id: str, key: ApiKey, wanted: str) -> AsyncGenerator[None]:
        """A continuation refused because another process continued the run first: 409."""
        try:
            yield
        except UserError:
            status = (await self.owned(run_id, key))["status"]
            if status != wanted:
                raise Conflict(
                    f"the run is {status}, not {wanted}: another request continued it first"
                ) from None
            raise

    async def start_run(
        self, body: StartRun, key: ApiKey, idempotency_key: str | None
    ) -> JsonObject:
        """Start a run (``Idempotency-Key``: the same key returns the same run)."""
        agent = self._agent(body.agent)
        if any(t.startswith(TENANT_TAG) for t in body.tags):
            raise UserError(f"tags beginning with {TENANT_TAG!r} are the server's")
        run_id = None if idempotency_key is None else idempotent_run_id(key.tenant, idempotency_key)
        started = await self.runs.start(
            agent,
            body.goal,
            run_id=run_id,
            context=body.context,
            tags=(f"{TENANT_TAG}{key.tenant}", *body.tags),
        )
        return await self.owned(started, key)

    async def list_runs(
        self,
        key: ApiKey,
        status: RunIndexStatus | None,
        agent: str | None,
        limit: int,
        cursor: str | None = None,
    ) -> JsonObject:
        """The tenant's runs, newest first, ``limit`` a page; ``next_cursor`` opens the next.

        ``next_cursor`` is ``None`` on the last page.
        """
        tag = f"{TENANT_TAG}{key.tenant}"
        after = None if cursor is None else decode_cursor(cursor)
        query = RunQuery(status=status, agent=agent, limit=limit + 1, tag=tag, after=after)
        found = await self.store.runs(query)  # one more than the page: is there a next?
        page = found[:limit]
        mine: list[JsonValue] = [run_json(r, TENANT_TAG) for r in page]
        more = len(found) > limit
        return {
            "runs": mine,
            "next_cursor": encode_cursor(RunPosition.of(page[-1])) if more else None,
        }

    async def get_run(self, run_id: str, key: Reader) -> JsonObject:
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

    async def run_events(self, run_id: str, key: ApiKey, after: int) -> StreamingResponse:
        """The run's events as Server-Sent Events, from after seq ``after``."""
        await self.owned(run_id, key)
        return StreamingResponse(
            event_stream(self.store, self.runs, run_id, after, lambda: self.keys.live(key.key_id)),
            media_type="text/event-stream",
            headers={"Cache-Control": "no-store", "X-Accel-Buffering": "no"},
        )

    async def run_log(self, run_id: str, key: Reader) -> Response:
        """The run's log as stored, one event per line (what ``tether audit`` verifies).

        Sent a page at a time as it is read (``sse.PAGE`` events), never held whole; the
        first page is read before the answer begins, so a run gone meanwhile is a 404.
        """
        await self.owned(run_id, key)
        pages = self.store.read_encoded_pages(run_id, limit=PAGE)
        try:
            first = await anext(pages)
        except StopAsyncIteration:  # a store's run with no event: an empty log
            first = []

        async def lines() -> AsyncGenerator[bytes]:
            try:
                yield b"".join(line + b"\n" for line in first)
                async for page in pages:
                    yield b"".join(line + b"\n" for line in page)
            finally:
                await pages.aclose()

        return StreamingResponse(lines(), media_type="application/jsonl")

    async def answer_run(self, run_id: str, body: Answer, key: Runner) -> JsonObject:
        """Answer the question a waiting run asked; it goes on here."""
        info = await self._stopped(run_id, key, "waiting_for_user")
        async with self._raced(run_id, key, "waiting_for_user"):
            await self.runs.resume(self._agent(str(info["agent"])), run_id, answer=body.text)
        return await self.owned(run_id, key)

    async def cancel_run(self, run_id: str, key: Runner) -> JsonObject:
        """Cancel a run executing in this server, or waiting for a human (it ends ``cancelled``).

        A waiting run is ended through its log under its lease (``cancel_waiting_run``),
        recorded ``by`` the key's id.
        """
        info = await self.owned(run_id, key)
        waiting = info["status"] in ("waiting_for_user", "waiting_for_approval")
        if not self.runs.is_active(run_id) and waiting:
            async with self._raced(run_id, key, str(info["status"])):
                done = await cancel_waiting_run(
                    self.store,
                    run_id,
                    reason="cancelled through the API",
                    by=f"API key {key.key_id}",
                )
            for warning in done.warnings:
                _log.warning("run %s: %s", run_id, warning)
            return await self.owned(run_id, key)
        if not self.runs.is_active(run_id):
            raise Conflict("the run is not executing in this server: nothing to cancel")
        await self.runs.cancel(run_id)
        return await self.owned(run_id, key)

    async def decide(self, run_id: str, body: Decisions, key: Approver) -> JsonObject:
        """Approve or deny calls the run waits for (each bound to its arguments' hash)."""
        info = await self._stopped(run_id, key, "waiting_for_approval")
        waiting = await self._waiting(run_id)
        unknown = [d.call_id for d in body.decisions if d.call_id not in waiting]
        if unknown:
            raise Conflict(
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
        async with self._raced(run_id, key, "waiting_for_approval"):
            await self.runs.resume(self._agent(str(info["agent"])), run_id, approvals=approvals)
        return await self.owned(run_id, key)

    async def resume_run(self, run_id: str, key: Runner) -> JsonObject:
        """Continue a run whose process died (its log is repaired first, nothing repeated)."""
        info = await self._stopped(run_id, key, "running")
        await self.runs.resume(self._agent(str(info["agent"])), run_id)
        return await self.owned(run_id, key)

    async def audit_run(self, run_id: str, key: Reader) -> JsonObject:
        """Verify the run's hash chain (and its MACs, with the server's audit key).

        The log and its MACs are read ``sse.PAGE`` events at a time, never held whole.
        """
        info = await self.owned(run_id, key)
        report = await audit_stored(
            self.store,
            run_id,
            expected_events=cast(int, info["events"]),
            key=audit_key_from_env(),
            entries=False,  # not in the answer
            page=PAGE,
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

    async def resume_stale(self) -> list[str]:
        """Continue the runs this API started whose process died (a server killed mid-run).

        Only runs of agents served here; each is resumed by the crash rules (its log
        repaired, no completed call repeated). One that cannot be is left as it is, logged.
        """
        if not isinstance(self.store, SqliteStore):
            return []
        resumed: list[str] = []
        later: list[tuple[Agent[Any], str]] = []
        for stale in await stale_runs(self.store):
            info = stale.info
            agent = self.agents.get(info.agent)
            if agent is None or not any(t.startswith(TENANT_TAG) for t in info.tags):
                continue
            try:
                await self.runs.resume(agent, info.run_id)
            except TooBusy:  # more than max_active_runs were in flight: as slots free
                later.append((agent, info.run_id))
                continue
            except TetherError as exc:
                _log.warning("run %s was not resumed: %s", info.run_id, exc)
                continue
            resumed.append(info.run_id)
        if later:
            self.resuming = asyncio.create_task(self._resume_later(later))
        return resumed

    async def _resume_later(self, later: list[tuple[Agent[Any], str]]) -> None:
        """Resume each run as a slot frees (the server's limit holds all along)."""
        for agent, run_id in later:
            while True:
                try:
                    await self.runs.resume(agent, run_id)
                except TooBusy:
                    await asyncio.sleep(0.2)
                    continue
                except Exception as exc:  # a store error, say: the next run is tried still
                    _log.warning("run %s was not resumed: %s: %s", run_id, type(exc).__name__, exc)
                break

    async def _waiting(self, run_id: str) -> dict[str, ApprovalRequested]:
        """The calls the run waits for a human to decide, in the order they were asked.

        Folded from the log ``sse.PAGE`` events at a time: only the calls still waiting at
        each point are held, never the run.
        """
        requested: dict[str, ApprovalRequested] = {}
        after = -1
        while True:
            page = await self.store.read_page(run_id, after_seq=after, limit=PAGE)
            for event in page:
                if isinstance(event, ApprovalRequested):
                    requested[event.call_id] = event
                elif isinstance(event, ApprovalGiven):
                    requested.pop(event.call_id, None)
            if len(page) < PAGE:
                return requested
            after = page[-1].seq
