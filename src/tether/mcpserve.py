"""``tether mcp serve``: agents as tools of any MCP client (``pip install "tether[mcp]"``).

Each agent is one MCP tool named after it, whose input is the goal (and, optionally, a
``run_id`` that makes a retried call the same run). A call is a tether run in the server's
run store like any other (``tether show RUN`` reads it); while it runs, each committed
event reaches the client as an MCP progress notification (when the client asked for
progress). A call the policy holds for approval, or a question the agent asks the user,
surfaces as MCP elicitation where the client supports it; elsewhere the result says that
the run waits and how to continue it (``tether approve``, ``tether resume --answer``).

```python
server = mcp_server([agent], store)
await server.run_stdio_async()
```
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, cast

import orjson
from mcp.server import MCPServer
from mcp.server.mcpserver import Context
from mcp.server.mcpserver.tools import Tool as McpTool
from mcp.types import (
    CallToolResult,
    ElicitRequest,
    ElicitRequestFormParams,
    ElicitResult,
    InputRequiredResult,
    ToolAnnotations,
)
from mcp_types.version import is_version_at_least
from pydantic import BaseModel, Field

from tether._internal.ids import RUN_ID, new_run_id
from tether.agent import Agent
from tether.errors import ConfigError, LeaseHeld, RunNotFound, TetherError

if TYPE_CHECKING:
    from tether.server.keys import ApiKeys
from tether.directcall import direct_agents
from tether.events import Event, ToolCallFinished
from tether.jsontypes import JsonObject
from tether.loop import AgentRun
from tether.mcpresults import RUN_ID_META, error_result, run_result, tool_result, waiting_result
from tether.mcptools import mcp_tool
from tether.models.direct import DIRECT_CALL_ID, DirectModel, direct_goal
from tether.outcome import PendingCall, RunOutcome
from tether.policy.approvals import Approval
from tether.status import TERMINAL_STATUSES
from tether.stores.base import RunStore

__all__ = [
    "ELICIT_TIMEOUT",
    "MAX_DECISION_ROUNDS",
    "MAX_GOAL_CHARS",
    "RUN_ID_META",
    "keyed",
    "mcp_server",
]

ELICIT_TIMEOUT = 600.0
"""Seconds a client has to answer an approval or a question asked mid-call; then the call
returns, and the run waits for a decision made elsewhere (its slot is free again)."""
MAX_GOAL_CHARS = 100_000
"""The longest goal a call may give."""
_TAG = "via:mcp"  # the tag of every run an MCP call starts

MAX_DECISION_ROUNDS = 20
"""Approval and question rounds one call goes through before it returns the run waiting."""

_INPUT_REQUIRED_VERSION = "2026-07-28"  # from this protocol on, a tool asks in its result
_NAME = re.compile(r"[A-Za-z0-9_.-]{1,128}")
_SHOWN = 2000  # characters of a call's arguments an approval request shows


class _Decision(BaseModel):
    approve: bool = Field(description="Run the call exactly as shown (false: deny it).")
    reason: str = Field(default="", description="Why (a denial's reason is told to the agent).")


class _Answer(BaseModel):
    answer: str = Field(description="Your answer to the agent's question.")


def mcp_server(
    agents: Sequence[Agent[Any]],
    store: RunStore,
    *,
    name: str = "tether",
    max_active_runs: int = 16,
    keys: ApiKeys | None = None,
    expose_tools: bool = False,
    bare_tool_names: bool = False,
    agent_refs: Mapping[str, str] | None = None,
) -> MCPServer:
    """An MCP server whose tools run ``agents`` (one tool each) in ``store``.

    ``expose_tools``: each agent's own tools too, as ``AGENT.TOOL``; a call of one is a run
    of its own (``tether.mcptools``) that the agent's policy checks. ``bare_tool_names``:
    named ``TOOL`` instead (one agent's tools, or agents whose tool names differ).
    ``agent_refs``: what loads each agent, by name (``module:attr``, a file): recorded in
    its runs, so that ``tether approve`` and ``tether resume`` can continue them.

    With ``keys`` (over HTTP): every call needs a tether API key (``Authorization: Bearer``
    or ``X-API-Key``) with the ``run`` scope; its runs belong to the key's tenant, a run id is
    reused only within it, and approvals are asked only of a key with ``approve``.
    """
    if max_active_runs < 1:
        raise ConfigError(f"max_active_runs must be at least 1, not {max_active_runs}")
    active: set[str] = set()  # a token per call executing now
    tools: list[McpTool] = []
    seen: set[str] = set()
    for agent in agents:
        _check_name(agent.name, seen)
        ref = (agent_refs or {}).get(agent.name)
        tools.append(
            McpTool.from_function(
                _handler(_Served(agent, ref), store, active, max_active_runs, keys),
                name=agent.name,
                title=agent.name,
                description=_describe(agent),
                annotations=ToolAnnotations(
                    read_only_hint=False,
                    destructive_hint=not _reads_only(agent),
                    open_world_hint=True,
                ),
                structured_output=False,
            )
        )
        if not expose_tools:
            continue
        for definition, direct, model in direct_agents(agent):
            named = definition.name if bare_tool_names else direct.name
            _check_name(named, seen)
            served = _Served(direct, ref, model)
            call = _handler(served, store, active, max_active_runs, keys)
            tools.append(mcp_tool(definition, named, agent, call))
    return MCPServer(
        name,
        instructions=(
            "Each tool named after an agent runs that tether agent on the goal you give."
            + (
                " A tool named AGENT.TOOL makes one call of that agent's tool, through the "
                "agent's policy."
                if expose_tools
                else ""
            )
        ),
        log_level="WARNING",  # not a line on stderr per request
        tools=tools,
    )


def _check_name(name: str, seen: set[str]) -> None:
    if not _NAME.fullmatch(name):
        raise ConfigError(
            f"{name!r} cannot be an MCP tool's name: it must be 1-128 of letters, digits, "
            "'_', '-' or '.' (rename the agent or the tool)"
        )
    if name in seen:
        raise ConfigError(f"two MCP tools would be named {name!r}: rename an agent or a tool")
    seen.add(name)


def _describe(agent: Agent[Any]) -> str:
    instructions = agent.spec.instructions.strip()
    head = instructions.split("\n\n", 1)[0][:500] if instructions else ""
    tools = ", ".join(agent.spec.tool_names) or "none"
    return (
        f"Runs the tether agent {agent.name!r} on a goal and returns its answer. "
        f"{head} (its tools: {tools}; at most {agent.spec.limits.max_steps} steps)"
    ).strip()


def _reads_only(agent: Agent[Any]) -> bool:
    return all(d.annotations.read_only is True for d in agent.spec.definitions)


def keyed(app: Any, keys: ApiKeys) -> Any:
    """The ASGI ``app`` behind tether API keys: a request without a live key gets ``401``."""
    from tether.server.keys import KeyRefused

    async def guarded(scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "http":
            headers = {
                k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope["headers"]
            }
            try:
                await keys.verify(_token(headers) or None)
            except KeyRefused as exc:
                body = orjson.dumps({"error": str(exc)})
                await send({
                    "type": "http.response.start",
                    "status": 401,
                    "headers": [(b"content-type", b"application/json"),
                                (b"content-length", str(len(body)).encode())],
                })  # fmt: skip
                await send({"type": "http.response.body", "body": body})
                return
        await app(scope, receive, send)

    return guarded


def _token(headers: Mapping[str, str]) -> str:
    return headers.get("x-api-key") or headers.get("authorization", "").removeprefix("Bearer ")


@dataclass(frozen=True)
class _Caller:
    tags: tuple[str, ...] = (_TAG,)
    """The tags of the runs it starts, and that a run it continues must have."""
    may_approve: bool = True


@dataclass(frozen=True)
class _Served:
    """What one MCP tool runs: an agent, or one call of its tool (``direct``)."""

    agent: Agent[Any]
    ref: str | None = None
    """What loads the agent (recorded as the runs' ``agent_ref``)."""
    direct: DirectModel | None = None
    """The model of a tool's direct runs (``None``: an agent's runs)."""


async def _caller(ctx: Context, keys: ApiKeys | None) -> _Caller:
    """Who calls: anyone (no keys), or the tenant of the key the request carries."""
    if keys is None:
        return _Caller()
    from tether.server.keys import KeyRefused

    headers = {k.lower(): v for k, v in (ctx.headers or {}).items()}
    key = await keys.verify(_token(headers) or None)
    if not key.allows("run"):
        raise KeyRefused(f"the key {key.key_id} may not run agents (it needs the run scope)")
    return _Caller((_TAG, f"tenant:{key.tenant}"), key.allows("approve"))


def _handler(
    served: _Served, store: RunStore, active: set[str], limit: int, keys: ApiKeys | None
) -> Any:
    """What answers a call: a run of the agent on the goal, or of one call of its tool."""

    async def call(goal: str, ctx: Context, run_id: str | None, given: JsonObject | None) -> Any:
        if len(active) >= limit:
            return error_result(
                f"the server runs {limit} agent calls at once, its limit: try again"
            )
        token = f"{id(ctx)}:{len(active)}"
        active.add(token)
        try:
            caller = await _caller(ctx, keys)
            return await _drive(served, store, goal, run_id, ctx, caller, given)
        except LeaseHeld:  # its message names the owner's host and pid
            return error_result(
                f"the run {run_id} is executing now (another call of it is in flight, here or "
                "in another process): wait for it, then call again with the same run id"
            )
        except TetherError as exc:  # a run id taken by another goal, a run that cannot resume
            return error_result(str(exc))
        finally:
            active.discard(token)

    direct = served.direct
    if direct is not None:

        async def call_tool(ctx: Context, arguments: dict[str, Any]) -> Any:
            try:
                goal = direct_goal(direct.tool, arguments)
            except orjson.JSONEncodeError:
                return error_result("the arguments are not valid JSON text (a lone surrogate?)")
            meta = ctx.request_context.meta or {}
            retry = meta.get(RUN_ID_META)  # the same run id again: the same run, one call
            if retry is not None and (not isinstance(retry, str) or not retry):
                return error_result(f'_meta["{RUN_ID_META}"] must be the run id of a call')
            return await call(goal, ctx, retry, arguments)

        return call_tool

    async def run_agent(goal: str, ctx: Context, run_id: str | None = None) -> Any:
        return await call(goal, ctx, run_id, None)

    run_agent.__doc__ = _describe(served.agent)
    return run_agent


async def _drive(
    served: _Served,
    store: RunStore,
    goal: str,
    run_id: str | None,
    ctx: Context,
    caller: _Caller,
    given: JsonObject | None,
) -> CallToolResult | InputRequiredResult:
    """Run (or continue) the run a call asks for, asking the client what it must decide."""
    agent = served.agent
    capabilities = ctx.client_capabilities
    can_elicit = capabilities is not None and capabilities.elicitation is not None
    version = ctx.protocol_version
    rounds = version is not None and is_version_at_least(version, _INPUT_REQUIRED_VERSION)
    answering = rounds and bool(ctx.request_state)  # answers to the last round's questions
    if answering:
        run = await _continue(
            agent, store, ctx.request_state or "", ctx.input_responses or {}, caller
        )
        if run is None:
            return error_result(
                "the answers do not match what the run asks now (it has moved on, or they "
                "answer another question): call the tool again"
            )
    else:
        refused = await _refused(agent, goal, run_id, store, caller)
        if refused:
            return error_result(refused)
        run = agent.stream(
            goal, run_id=run_id or new_run_id(), store=store, tags=caller.tags, agent_ref=served.ref
        )
    if isinstance(run, CallToolResult):
        return run
    direct = served.direct
    holder: DirectModel | None = None  # who holds this call's arguments, given here
    fresh = given is not None and not answering  # (a retry in flight has given them already)
    if direct is not None and given is not None and fresh and not direct.holds(run.run_id):
        direct.give(run.run_id, given)  # as given: the log keeps the goal redacted
        holder = direct
    try:
        outcome, finished = await _rounds(served, store, ctx, caller, run, can_elicit, rounds)
    finally:
        if holder is not None:
            holder.forget(run.run_id)
    if isinstance(outcome, InputRequiredResult):
        return outcome
    if direct is not None:  # one call of a tool: its result, as the run recorded it
        if finished is None:  # a retry of a run that had ended: its log has the result
            finished = next(filter(None, map(_direct_result, reversed(outcome.events))), None)
        return tool_result(outcome, finished) or run_result(outcome)
    return run_result(outcome)


async def _rounds(
    served: _Served,
    store: RunStore,
    ctx: Context,
    caller: _Caller,
    run: AgentRun[Any],
    can_elicit: bool,
    rounds: bool,
) -> tuple[RunOutcome[Any] | InputRequiredResult, ToolCallFinished | None]:
    """Drive ``run``, asking the client each decision it waits for (within bounds)."""
    outcome: RunOutcome[Any] | None = None
    progress = _Progress(ctx, served.agent)
    for _ in range(MAX_DECISION_ROUNDS):
        async for event in run:
            await progress(event)
        outcome = run.outcome
        if not can_elicit or outcome.status in TERMINAL_STATUSES:
            break
        if outcome.status == "waiting_for_approval" and not caller.may_approve:
            break  # the key may run, not approve: the calls wait for a key that may
        if rounds:  # 2026-07-28 and later: ask in the result; the client calls again
            events = (await store.info(outcome.run_id)).events
            return _ask_in_result(outcome, events), progress.finished
        asked = await _ask_here(served.agent, store, ctx, outcome)
        if asked is None:
            break  # dismissed, or no answer in time: the run waits for one given elsewhere
        run = asked
    assert outcome is not None
    return outcome, progress.finished


async def _ask_here(
    agent: Agent[Any], store: RunStore, ctx: Context, outcome: RunOutcome[Any]
) -> AgentRun[Any] | None:
    """Ask mid-call (protocols before 2026-07-28); the run resumed with what was decided."""
    if outcome.status == "waiting_for_approval":
        approvals = [d for p in outcome.pending if (d := await _decide(ctx, p)) is not None]
        if not approvals:
            return None
        return agent.resume_stream(outcome.run_id, approvals=approvals, store=store)
    answer = await _ask(ctx, outcome.question or "")
    if answer is None:
        return None
    return agent.resume_stream(outcome.run_id, answer=answer, store=store)


def _direct_result(event: Event) -> ToolCallFinished | None:
    """``event``, if it is the result of a direct run's call."""
    if isinstance(event, ToolCallFinished) and event.call_id == DIRECT_CALL_ID:
        return event
    return None


class _Progress:
    """Each committed event as a progress notification (none once the client stops taking them)."""

    def __init__(self, ctx: Context, agent: Agent[Any]) -> None:
        self._ctx, self._agent, self._broken = ctx, agent, False
        self.finished: ToolCallFinished | None = None
        """The last direct call's result seen (a direct run's answer to the client)."""

    async def __call__(self, event: Event) -> None:
        self.finished = _direct_result(event) or self.finished
        if self._broken:
            return
        try:
            await self._ctx.report_progress(event.seq + 1, None, _progress(event, self._agent))
        except Exception:  # the client went away: the run goes on, in the store
            self._broken = True


_APPROVAL_SCHEMA: JsonObject = {
    "type": "object",
    "properties": {
        "approve": {"type": "boolean", "description": "Run the call as shown (false: deny it)."},
        "reason": {"type": "string", "description": "Why (a denial's reason reaches the agent)."},
    },
    "required": ["approve"],
}
_ANSWER_SCHEMA: JsonObject = {
    "type": "object",
    "properties": {"answer": {"type": "string", "description": "Your answer to the agent."}},
    "required": ["answer"],
}


async def _refused(
    agent: Agent[Any], goal: str, run_id: str | None, store: RunStore, caller: _Caller
) -> str:
    """Why a call may not start (or continue) a run, or ``""``."""
    if not goal.strip():
        return "the goal is empty: say what the agent should do"
    if len(goal) > MAX_GOAL_CHARS:
        return f"the goal is {len(goal)} characters, over the {MAX_GOAL_CHARS} a call may give"
    try:
        goal.encode("utf-8")
    except UnicodeEncodeError:
        return "the goal is not valid text (it holds a lone surrogate): send UTF-8 text"
    if run_id is not None:
        if not RUN_ID.fullmatch(run_id):
            return ""  # not a run id at all: starting the run refuses it, saying what one is
        try:
            info = await store.info(run_id)
        except RunNotFound:
            return ""
        if not set(caller.tags) <= set(info.tags):  # the CLI's, the HTTP API's, a tenant's
            return f"the run id {run_id!r} is taken by a run this caller did not start: use another"
        redactor = agent.spec.redactor
        if redactor is not None and redactor.redact_text(goal) != goal:
            return (  # the log holds it redacted: another secret would look the same there
                f"the run {run_id} exists, and this call's input holds a secret, so it cannot "
                "be told from a call with another one: call without the run id"
            )
    return ""


def _ask_in_result(outcome: RunOutcome[Any], events: int) -> InputRequiredResult:
    """The questions a waiting run has, as an input-required result (the SDK seals the state)."""
    requests: dict[str, Any] = {}
    if outcome.status == "waiting_for_approval":
        for pending in outcome.pending:
            params = ElicitRequestFormParams(
                message=_approval_message(pending),
                requested_schema=cast(Any, _APPROVAL_SCHEMA),
            )
            requests[f"approve:{pending.call_id}"] = ElicitRequest(params=params)
        state: JsonObject = {
            "run_id": outcome.run_id,
            "events": events,
            "calls": {p.call_id: p.arguments_hash for p in outcome.pending},
        }
    else:
        params = ElicitRequestFormParams(
            message=f"The agent asks: {outcome.question or ''}",
            requested_schema=cast(Any, _ANSWER_SCHEMA),
        )
        requests["answer"] = ElicitRequest(params=params)
        state = {"run_id": outcome.run_id, "events": events, "calls": {}}
    return InputRequiredResult(input_requests=requests, request_state=orjson.dumps(state).decode())


async def _continue(
    agent: Agent[Any],
    store: RunStore,
    request_state: str,
    responses: Mapping[str, Any],
    caller: _Caller,
) -> AgentRun[Any] | CallToolResult | None:
    """The run resumed with the client's answers to the last round.

    What the run waits for, if they were all dismissed; ``None`` if they are not answers
    to what was asked.
    """
    try:
        state = orjson.loads(request_state)
        run_id, calls, events = str(state["run_id"]), dict(state["calls"]), int(state["events"])
    except (orjson.JSONDecodeError, KeyError, TypeError, ValueError):
        return None
    try:
        info = await store.info(run_id)
    except RunNotFound:
        return None
    if info.events != events or not set(caller.tags) <= set(info.tags):
        return None  # the run moved on since it asked (or is not this caller's)
    if calls and not caller.may_approve:
        return None
    if not calls:
        reply = responses.get("answer")
        if isinstance(reply, ElicitResult) and reply.action != "accept":
            return waiting_result(run_id, [])
        if not isinstance(reply, ElicitResult):
            return None
        answer = (reply.content or {}).get("answer")
        if not isinstance(answer, str):
            return None
        return agent.resume_stream(run_id, answer=answer, store=store)
    approvals: list[Approval] = []
    for call_id, arguments_hash in calls.items():
        reply = responses.get(f"approve:{call_id}")
        if not isinstance(reply, ElicitResult) or reply.action == "cancel":
            continue
        content = reply.content or {}
        reason = content.get("reason")
        reason = reason if isinstance(reason, str) else ""
        approved = reply.action == "accept" and content.get("approve") is True
        approvals.append(
            Approval(
                call_id=str(call_id),
                approved=approved,
                run_id=run_id,
                arguments_hash=str(arguments_hash),
                by="mcp client",
                reason=reason or ("" if approved else "the user declined"),
            )
        )
    if not approvals:  # every question dismissed: the calls wait for a decision elsewhere
        return waiting_result(run_id, sorted(calls))
    return agent.resume_stream(run_id, approvals=approvals, store=store)


def _progress(event: Event, agent: Agent[Any]) -> str:
    what = event.kind.replace("_", " ")
    tool = getattr(event, "tool", None)
    if isinstance(tool, str):
        what = f"{what}: {tool}"
    return f"{agent.name} · {event.phase} · {what}"


def _approval_message(pending: PendingCall) -> str:
    shown = orjson.dumps(pending.arguments).decode()
    if len(shown) > _SHOWN:
        shown = f"{shown[:_SHOWN]}… ({len(shown)} characters in all)"
    note = f" {pending.note}" if pending.note else ""
    return (
        f"The agent's run {pending.run_id} asks to call {pending.tool} with {shown}. "
        f"The policy holds it ({pending.rule}: {pending.reason}).{note} Approve it?"
    )


async def _decide(ctx: Context, pending: PendingCall) -> Approval | None:
    try:
        reply = await asyncio.wait_for(
            ctx.elicit(_approval_message(pending), _Decision), ELICIT_TIMEOUT
        )
    except Exception:  # the client failed to ask, or no one answered: decide elsewhere
        return None
    if reply.action == "cancel":
        return None
    if reply.action == "accept" and reply.data.approve:
        return Approval.approve(pending, by="mcp client", reason=reply.data.reason)
    reason = reply.data.reason if reply.action == "accept" else ""
    return Approval.deny(pending, by="mcp client", reason=reason or "the user declined")


async def _ask(ctx: Context, question: str) -> str | None:
    try:
        reply = await asyncio.wait_for(
            ctx.elicit(f"The agent asks: {question}", _Answer), ELICIT_TIMEOUT
        )
    except Exception:  # no answer in time: the run waits for one given elsewhere
        return None
    return reply.data.answer if reply.action == "accept" else None
