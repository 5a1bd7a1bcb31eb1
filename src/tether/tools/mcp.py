"""Tools from MCP servers, through the official ``mcp`` SDK (``pip install "tether[mcp]"``).

```python
async with McpServer.stdio("time", "mcp-server-time") as server:
    agent = Agent(tools=await server.tools())
    outcome = await agent.run("What time is it in Tokyo?")
```

Each tool arrives through ``Tool.from_schema`` with ``origin="mcp:NAME"``: the policy
believes its annotations only where they make it look riskier, and its output is untrusted
unless your own ``Trust`` says otherwise. A call whose tool the server changed since it was
listed (it announced a new list, and this tool's description or schema differs, or it is
gone) is not made: the model gets an error saying so. A server that dies or breaks the
protocol mid-call gives the call an error result, never a hung run (each call also has the
tool's timeout).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import hashlib
import time
import weakref
from collections.abc import AsyncGenerator, Awaitable, Callable, Mapping, Sequence
from contextlib import AbstractAsyncContextManager
from types import TracebackType
from typing import Any, cast

import orjson

from tether.content import TextBlock, ToolResult
from tether.errors import ConfigError, TetherError
from tether.jsontypes import JsonObject, JsonValue
from tether.messages import CONTROL_TOOLS
from tether.tools.base import Tool, ToolAnnotations, ToolContext

__all__ = ["MAX_RESULT_CHARS", "Elicit", "McpServer", "McpUnavailable"]

Elicit = Callable[[str, JsonObject], Awaitable[JsonObject | None]]
"""Answers a form an MCP server asks for mid-call: its message and JSON Schema in, the
filled fields out (the schema's defaults fill what is left out), or ``None`` to decline.
Without one, tether does not offer elicitation (an unattended run has no one to ask): a
server that asks anyway gets an error, and so does the call."""

_MAX_TOOLS = 1000
_MAX_PAGES = 100
_IDLE_PING_S = 2.0
"""A held session idle this long is pinged before a call: a server that died meanwhile is
started again, and the call made on the new session (the old one never received it)."""
MAX_RESULT_CHARS = 100_000
"""A result's text past this many characters is cut (and said to be)."""


class McpUnavailable(TetherError):
    """The MCP server could not be started or reached, or it left the session."""


_AMBIGUOUS = "ambiguous"
"""The digest of a name the server lists for two different tools: it matches no listing."""


def _digest(tool: Any) -> str:
    hints = tool.annotations
    listed = {
        "description": tool.description or "",
        "schema": tool.input_schema,
        "annotations": None if hints is None else hints.model_dump(mode="json"),
    }
    return hashlib.sha256(orjson.dumps(listed, option=orjson.OPT_SORT_KEYS)).hexdigest()


def _digests(listed: Sequence[Any], unreadable: Sequence[tuple[str, str]]) -> dict[str, str]:
    """Each listed name's digest; ``_AMBIGUOUS`` for a name that stands for two tools.

    Two listings of one name that differ (or one that the SDK could not read) leave it
    to the server which of them a call by that name runs; an identical repeat does not.
    """
    found: dict[str, str] = {}
    for tool in listed:
        digest = _digest(tool)
        if found.setdefault(tool.name, digest) != digest:
            found[tool.name] = _AMBIGUOUS
    for name, _ in unreadable:
        if name in found:
            found[name] = _AMBIGUOUS
    return found


class McpServer:
    """One MCP server, connected for as long as ``async with`` lasts."""

    def __init__(
        self,
        name: str,
        transport: Callable[[], AbstractAsyncContextManager[Any]],
        *,
        timeout: float = 60.0,
        elicit: Elicit | None = None,
    ) -> None:
        if (
            not name
            or not name.replace("-", "").replace("_", "").isascii()
            or not name.replace("-", "").replace("_", "").isalnum()
        ):
            raise ConfigError(f"an MCP server's name is letters, digits, '-' or '_', not {name!r}")
        self.name = name
        self._transport = transport  # opens a new connection each time it is called
        self._timeout = timeout
        self._elicit = elicit
        self._stack: contextlib.AsyncExitStack | None = None
        self._session: Any = None
        self._listed: dict[str, str] = {}  # tool name -> digest of what was listed
        self._current: dict[str, str] = {}  # the same, as the server lists it now
        self._list_changed = False
        self._lazy = False  # sessions opened by the calls themselves (tools_now)
        # tools_now: each event loop's background session (its task, the session), and the
        # lock its first calls open it under
        self._held: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, tuple[Any, Any]] = (
            weakref.WeakKeyDictionary()
        )
        self._opening: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, asyncio.Lock] = (
            weakref.WeakKeyDictionary()
        )
        self._used: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, float] = (
            weakref.WeakKeyDictionary()
        )  # when each loop's session last answered a call (monotonic)
        self._in_flight: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, int] = (
            weakref.WeakKeyDictionary()
        )  # calls each loop's session is carrying now
        self.skipped: list[str] = []
        """Tools the server listed that tether could not take, and why."""

    @classmethod
    def stdio(
        cls,
        name: str,
        command: str,
        *args: str,
        env: Mapping[str, str] | None = None,
        cwd: str | None = None,
        timeout: float = 60.0,
        elicit: Elicit | None = None,
    ) -> McpServer:
        """A server this process starts and talks to over stdin/stdout."""
        from mcp import StdioServerParameters
        from mcp.client.stdio import stdio_client

        params = StdioServerParameters(
            command=command, args=list(args), env=None if env is None else dict(env), cwd=cwd
        )
        return cls(name, lambda: stdio_client(params), timeout=timeout, elicit=elicit)

    @classmethod
    def http(
        cls,
        name: str,
        url: str,
        *,
        headers: Mapping[str, str] | None = None,
        auth: Any = None,
        timeout: float = 60.0,
        elicit: Elicit | None = None,
    ) -> McpServer:
        """A server reached over streamable HTTP at ``url``.

        ``headers`` go with every request (an API key, say); ``auth`` is any ``httpx2.Auth``,
        such as the SDK's ``mcp.client.auth.OAuthClientProvider`` for servers behind OAuth.
        """
        return cls(name, lambda: _http(url, headers, auth, timeout), timeout=timeout, elicit=elicit)

    async def __aenter__(self) -> McpServer:
        stack = contextlib.AsyncExitStack()
        self._session = await self._connect(stack)
        self._stack = stack
        return self

    async def _connect(self, stack: contextlib.AsyncExitStack) -> Any:
        """A session, initialized, whose resources ``stack`` closes (or ``McpUnavailable``)."""
        from mcp import ClientSession

        from tether.tools._mcplisting import ListingDispatcher

        try:
            streams = await stack.enter_async_context(self._transport())
            dispatcher = ListingDispatcher(streams[0], streams[1])
            session = ClientSession(
                read_timeout_seconds=self._timeout,
                message_handler=self._on_message,
                elicitation_callback=None if self._elicit is None else self._on_elicit,
                dispatcher=dispatcher,
            )
            dispatcher.protocol_version = lambda: session.protocol_version
            await stack.enter_async_context(session)
            await session.initialize()
        except BaseException as exc:
            with contextlib.suppress(BaseException):
                await stack.aclose()
            task = asyncio.current_task()
            if isinstance(exc, asyncio.CancelledError) and task is not None and task.cancelling():
                raise  # the caller is being cancelled: not the server's failure
            if not isinstance(exc, Exception | asyncio.CancelledError):
                raise  # KeyboardInterrupt, SystemExit
            raise McpUnavailable(
                f"MCP server {self.name!r} did not start a session: {type(exc).__name__}: {exc}"
            ) from None
        return session

    async def __aexit__(
        self,
        kind: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        stack, self._stack, self._session = self._stack, None, None
        if stack is not None:
            with contextlib.suppress(Exception):  # a dead server has nothing left to close
                await stack.aclose()

    def tools_now(self, *, prefix: str = "", only: Sequence[str] | None = None) -> list[Tool]:
        """The server's tools, listed now; each call opens the session it needs.

        For code that builds an agent before any event loop runs (an agent file, a module
        ``tether serve`` loads): a short session lists the tools here, and the first call
        opens one in the background of the event loop that makes it, kept until that loop
        ends. A tool the server changed in between is refused as after a new list; a
        session that fails is dropped, and the next call opens another.
        """

        async def listing() -> list[Tool]:
            async with self:
                return await self.tools(prefix=prefix, only=only)

        with concurrent.futures.ThreadPoolExecutor(1) as pool:  # whether or not a loop runs
            made = pool.submit(asyncio.run, listing()).result()
        self._lazy = True
        return made

    async def _live_session(self) -> Any:
        """This event loop's held session, known to answer if it sat idle for a while.

        Pinged only when no call is in flight on it (a busy server may answer late, and a
        call it is carrying out must never be cut off); dropped only when the ping fails
        outright, not when it is slow.
        """
        loop = asyncio.get_running_loop()
        session = await self._held_session()
        now = time.monotonic()
        idle = now - self._used.get(loop, now)
        if idle >= _IDLE_PING_S and not self._in_flight.get(loop):
            try:
                await asyncio.wait_for(session.send_ping(), 5)
            except TimeoutError:
                pass  # slow, not dead: the call goes on this session
            except Exception:  # it died while idle: nothing was sent to it, so start again
                self._drop(loop, session)
                session = await self._held_session()
        return session

    def _drop(self, loop: asyncio.AbstractEventLoop, session: Any) -> None:
        held = self._held.get(loop)
        if held is not None and held[1] is session:
            del self._held[loop]
            held[0].cancel()

    async def _held_session(self) -> Any:
        """This event loop's session (each loop has its own), opened if need be."""
        loop = asyncio.get_running_loop()
        lock = self._opening.get(loop)
        if lock is None:
            lock = self._opening[loop] = asyncio.Lock()
        async with lock:
            held = self._held.get(loop)
            if held is not None and not held[0].done():
                return held[1]
            ready: asyncio.Future[Any] = loop.create_future()
            task = loop.create_task(self._hold(ready), name=f"mcp session {self.name}")
            try:
                session = await asyncio.wait_for(asyncio.shield(ready), self._timeout + 5)
            except BaseException:
                task.cancel()
                raise
            self._held[loop] = (task, session)
            self._list_changed = True  # a new session: compare its tools with the listing
            return session

    async def _hold(self, ready: asyncio.Future[Any]) -> None:
        stack = contextlib.AsyncExitStack()
        try:
            session = await self._connect(stack)
        except McpUnavailable as exc:
            ready.set_exception(exc)
            return
        ready.set_result(session)
        try:
            await asyncio.Event().wait()  # until the loop ends or the session is dropped
        finally:
            with contextlib.suppress(Exception):  # a dead server has nothing left to close
                await stack.aclose()

    async def _drop_if_dead(self, session: Any) -> None:
        """After a failed call, end the session unless the server still answers a ping.

        A slow tool that timed out leaves the session (and the other calls on it) alone; a
        dead server's session ends, and the next call starts the server again.
        """
        loop = asyncio.get_running_loop()
        try:
            await asyncio.wait_for(session.send_ping(), 5)
            return
        except TimeoutError:
            if self._in_flight.get(loop):
                return  # hung or only busy: not while it may be carrying out other calls
        except Exception:
            pass
        self._drop(loop, session)

    async def _on_message(self, message: Any) -> None:
        from mcp import types

        notice = getattr(message, "root", message)
        if isinstance(notice, types.ToolListChangedNotification):
            self._list_changed = True

    async def _on_elicit(self, context: Any, params: Any) -> Any:
        """A form the server asks the user to fill in mid-call, through ``elicit``."""
        from mcp import types

        schema: Any = getattr(params, "requested_schema", None)
        if self._elicit is None or not isinstance(schema, dict):
            return types.ElicitResult(action="decline")  # a URL to open: not for a run
        try:
            reply = await self._elicit(str(params.message), cast(JsonObject, schema))
        except Exception:
            return types.ElicitResult(action="cancel")
        if reply is None:
            return types.ElicitResult(action="decline")
        filled: dict[str, Any] = dict(reply)
        properties = cast(dict[str, Any], cast(JsonObject, schema).get("properties") or {})
        for key, field in properties.items():  # SEP-1034: a default stands for an omitted field
            if key not in filled and isinstance(field, dict) and "default" in field:
                filled[key] = field["default"]
        return types.ElicitResult(action="accept", content=filled)

    async def _list(self, session: Any = None) -> tuple[list[Any], list[tuple[str, str]]]:
        """Every tool the server lists, and each one the SDK could not read, with why.

        At most ``_MAX_TOOLS``, over at most ``_MAX_PAGES``; the unreadable are not in the first.
        """
        from mcp import types

        from tether.tools._mcplisting import unreadable_tools

        session = session or self._session
        if session is None:
            raise McpUnavailable(f"MCP server {self.name!r} is not connected: use `async with`")
        found: list[Any] = []
        seen: set[str] = set()
        cursor: str | None = None
        with unreadable_tools() as unreadable:
            try:
                for _ in range(_MAX_PAGES):
                    params = None if cursor is None else types.PaginatedRequestParams(cursor=cursor)
                    page = await session.list_tools(params=params)
                    found.extend(page.tools)
                    cursor = page.next_cursor
                    if not cursor or cursor in seen or len(found) >= _MAX_TOOLS:
                        break
                    seen.add(cursor)
            except Exception as exc:  # a timeout, a dead server, a page the SDK cannot read
                raise McpUnavailable(
                    f"MCP server {self.name!r} did not list its tools: {type(exc).__name__}: {exc}"
                ) from None
        return found[:_MAX_TOOLS], unreadable

    async def tools(self, *, prefix: str = "", only: Sequence[str] | None = None) -> list[Tool]:
        """The server's tools as tether tools (``prefix`` before each name, ``only`` these).

        A tool tether cannot take is left out, and named in ``skipped`` with why; the
        server's other tools are taken as usual. Those are: a tool the ``mcp`` SDK cannot
        read (an input schema that is not an object, say), an invalid name, a schema that
        refers to what it does not hold, a name (with ``prefix``) of one of tether's own
        control tools (``finish_task``, ``ask_user``, ``search_knowledge``), and a name the
        server lists for two different tools: a call by that name runs whichever the server
        picks, so neither is taken (a repeat identical to the first is taken once).
        A name in ``only`` the server does not list is an error.
        """
        listed, unreadable = await self._list()
        self._list_changed = False
        self._current = _digests(listed, unreadable)
        missing = sorted(set(only or ()) - set(self._current) - {n for n, _ in unreadable})
        if missing:
            raise ConfigError(f"MCP server {self.name!r} lists no tools {missing}")
        self.skipped.extend(f"{n}: {why}" for n, why in unreadable if only is None or n in only)
        made: list[Tool] = []
        seen: set[str] = set()
        for tool in listed:
            if only is not None and tool.name not in only:
                continue
            refused = self._refused(tool, prefix, seen)
            seen.add(tool.name)
            if refused is not None:
                self.skipped.append(f"{tool.name}: {refused}")
                continue
            try:
                made.append(self._tool(tool, prefix))
            except ConfigError as exc:
                self.skipped.append(f"{tool.name}: {exc}")
                continue
            self._listed[tool.name] = self._current[tool.name]
        return made

    def _refused(self, tool: Any, prefix: str, seen: set[str]) -> str | None:
        """Why a listed tool is not taken, for a reason of its name, or ``None``."""
        name = str(tool.name)
        if self._current[name] == _AMBIGUOUS:
            if name in seen:
                return "listed again (see above)"
            return (
                "the server lists different tools under this name: a call by the name runs "
                "whichever one the server picks, so none of them is taken"
            )
        if name in seen:
            return "listed again, identically: the first listing is taken"
        reserved = f"{prefix}{name}"
        if reserved in CONTROL_TOOLS:
            return (
                f"{reserved!r} is the name of one of tether's control tools: list the server "
                "with a prefix (tools(prefix=...)) to take this tool"
            )
        return None

    def _tool(self, tool: Any, prefix: str) -> Tool:
        hints = tool.annotations
        annotations = ToolAnnotations(
            read_only=None if hints is None else hints.read_only_hint,
            destructive=None if hints is None else hints.destructive_hint,
            idempotent=None if hints is None else hints.idempotent_hint,
            open_world=None if hints is None else hints.open_world_hint,
        )
        remote = str(tool.name)

        async def call(ctx: ToolContext, arguments: Mapping[str, Any]) -> ToolResult:
            return await self._call(remote, dict(arguments))

        return Tool.from_schema(
            name=f"{prefix}{remote}",
            description=tool.description or f"{remote} (from the MCP server {self.name})",
            input_schema=cast(JsonObject, tool.input_schema),
            handler=call,
            title=tool.title,
            annotations=annotations,
            timeout=self._timeout,
            origin=f"mcp:{self.name}",
        )

    async def _call(self, name: str, arguments: dict[str, Any]) -> ToolResult:
        if not self._lazy:
            return await self._call_on(name, arguments)
        loop = asyncio.get_running_loop()
        try:
            return await self._call_on(name, arguments)
        finally:
            self._used[loop] = time.monotonic()

    async def _call_on(self, name: str, arguments: dict[str, Any]) -> ToolResult:
        session = self._session
        if self._lazy:
            try:
                session = await self._live_session()
            except Exception as exc:
                return ToolResult.error(
                    f"the MCP server {self.name!r} did not start a session: "
                    f"{type(exc).__name__}: {exc}; the call was not made"
                )
        if session is None:
            return ToolResult.error(f"the MCP server {self.name!r} is not connected")
        try:
            if self._list_changed:  # the server announced a new list: see what it is now
                self._current = _digests(*await self._list(session))
                self._list_changed = False
        except McpUnavailable as exc:
            if self._lazy:
                await self._drop_if_dead(session)
            return ToolResult.error(f"{exc}; the call was not made")
        if self._current.get(name) != self._listed.get(name):
            gone = "removed" if name not in self._current else "changed"
            return ToolResult.error(
                f"the MCP server {self.name!r} {gone} the tool {name!r} since it was listed; "
                "the call was not made (the agent must list its tools again)"
            )
        loop = asyncio.get_running_loop()
        self._in_flight[loop] = self._in_flight.get(loop, 0) + 1
        try:
            try:
                result = await session.call_tool(
                    name, arguments, read_timeout_seconds=self._timeout
                )
            finally:
                self._in_flight[loop] -= 1
        except Exception as exc:  # the server died, closed the pipe or broke the protocol
            if self._lazy:
                await self._drop_if_dead(session)
            return ToolResult.error(
                f"the MCP server {self.name!r} failed during the call: {type(exc).__name__}: {exc}"
            )
        return _result(result)


@contextlib.asynccontextmanager
async def _http(
    url: str, headers: Mapping[str, str] | None, auth: Any, timeout: float
) -> AsyncGenerator[Any]:
    import httpx2
    from mcp.client.streamable_http import streamable_http_client

    limits = httpx2.Timeout(timeout, read=max(timeout, 300.0))  # a stream may stay open
    async with (
        httpx2.AsyncClient(headers=dict(headers or {}), auth=auth, timeout=limits) as client,
        streamable_http_client(url, http_client=client) as streams,
    ):
        yield streams


def _result(result: Any) -> ToolResult:
    blocks: list[TextBlock] = []
    room = MAX_RESULT_CHARS
    items = list(getattr(result, "content", None) or ())
    for index, item in enumerate(items):
        text = getattr(item, "text", None)
        if not isinstance(text, str):
            text = f"[{getattr(item, 'type', 'content')} content left out]"
        if len(text) > room:  # the rest of the result is left out with it (many small
            # blocks past the cap each grew by the notice: 20,000 of them made 1.6 MB)
            left = len(items) - index - 1
            more = f"; {left} more block{'s' * (left != 1)} left out" if left else ""
            cut = f"[cut: the result is over {MAX_RESULT_CHARS} characters{more}]"
            blocks.append(TextBlock(text=f"{text[:room]}\n{cut}"))
            break
        room -= len(text)
        blocks.append(TextBlock(text=text))
    structured = cast(JsonValue, getattr(result, "structured_content", None))
    if structured is not None and len(orjson.dumps(structured)) > MAX_RESULT_CHARS:
        structured = None  # its text is in the content, cut
    return ToolResult(
        content=tuple(blocks),
        structured=structured,
        is_error=bool(getattr(result, "is_error", False)),
    )
