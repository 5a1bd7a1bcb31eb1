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

import contextlib
import hashlib
from collections.abc import Mapping, Sequence
from types import TracebackType
from typing import Any, cast

import orjson

from tether.content import TextBlock, ToolResult
from tether.errors import ConfigError, TetherError
from tether.jsontypes import JsonObject, JsonValue
from tether.tools.base import Tool, ToolAnnotations, ToolContext

__all__ = ["McpServer", "McpUnavailable"]

_MAX_TOOLS = 1000


class McpUnavailable(TetherError):
    """The MCP server could not be started or reached, or it left the session."""


def _digest(tool: Any) -> str:
    listed = {"description": tool.description or "", "schema": tool.input_schema}
    return hashlib.sha256(orjson.dumps(listed, option=orjson.OPT_SORT_KEYS)).hexdigest()


class McpServer:
    """One MCP server, connected for as long as ``async with`` lasts."""

    def __init__(self, name: str, transport: Any, *, timeout: float = 60.0) -> None:
        if not name or not name.replace("-", "").replace("_", "").isalnum():
            raise ConfigError(f"an MCP server's name is letters, digits, '-' or '_', not {name!r}")
        self.name = name
        self._transport = transport
        self._timeout = timeout
        self._stack: contextlib.AsyncExitStack | None = None
        self._session: Any = None
        self._listed: dict[str, str] = {}  # tool name -> digest of what was listed
        self._list_changed = False

    @classmethod
    def stdio(
        cls,
        name: str,
        command: str,
        *args: str,
        env: Mapping[str, str] | None = None,
        cwd: str | None = None,
        timeout: float = 60.0,
    ) -> McpServer:
        """A server this process starts and talks to over stdin/stdout."""
        from mcp import StdioServerParameters
        from mcp.client.stdio import stdio_client

        params = StdioServerParameters(
            command=command, args=list(args), env=None if env is None else dict(env), cwd=cwd
        )
        return cls(name, stdio_client(params), timeout=timeout)

    @classmethod
    def http(cls, name: str, url: str, *, timeout: float = 60.0) -> McpServer:
        """A server reached over streamable HTTP at ``url``."""
        from mcp.client.streamable_http import streamable_http_client

        return cls(name, streamable_http_client(url), timeout=timeout)

    async def __aenter__(self) -> McpServer:
        from mcp import ClientSession

        stack = contextlib.AsyncExitStack()
        try:
            streams = await stack.enter_async_context(self._transport)
            session = ClientSession(streams[0], streams[1], message_handler=self._on_message)
            self._session = await stack.enter_async_context(session)
            await self._session.initialize()
        except Exception as exc:
            await stack.aclose()
            raise McpUnavailable(
                f"MCP server {self.name!r} did not start a session: {exc}"
            ) from None
        self._stack = stack
        return self

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

    async def _on_message(self, message: Any) -> None:
        from mcp import types

        notice = getattr(message, "root", message)
        if isinstance(notice, types.ToolListChangedNotification):
            self._list_changed = True

    async def _list(self) -> list[Any]:
        if self._session is None:
            raise McpUnavailable(f"MCP server {self.name!r} is not connected: use `async with`")
        found: list[Any] = []
        cursor: str | None = None
        from mcp import types

        while len(found) < _MAX_TOOLS:
            params = None if cursor is None else types.PaginatedRequestParams(cursor=cursor)
            page = await self._session.list_tools(params=params)
            found.extend(page.tools)
            cursor = page.next_cursor
            if not cursor:
                break
        return found[:_MAX_TOOLS]

    async def tools(self, *, prefix: str = "", only: Sequence[str] | None = None) -> list[Tool]:
        """The server's tools as tether tools (``prefix`` before each name, ``only`` these)."""
        listed = await self._list()
        self._list_changed = False
        made: list[Tool] = []
        for tool in listed:
            if only is not None and tool.name not in only:
                continue
            self._listed[tool.name] = _digest(tool)
            made.append(self._tool(tool, prefix))
        return made

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
        session = self._session
        if session is None:
            return ToolResult.error(f"the MCP server {self.name!r} is not connected")
        try:
            if self._list_changed:
                self._list_changed = False
                now = {t.name: _digest(t) for t in await self._list()}
                if now.get(name) != self._listed.get(name):
                    gone = "removed" if name not in now else "changed"
                    return ToolResult.error(
                        f"the MCP server {self.name!r} {gone} the tool {name!r} since it was "
                        "listed; the call was not made (the agent must list its tools again)"
                    )
            result = await session.call_tool(name, arguments, read_timeout_seconds=self._timeout)
        except Exception as exc:  # the server died, closed the pipe or broke the protocol
            return ToolResult.error(
                f"the MCP server {self.name!r} failed during the call: {type(exc).__name__}: {exc}"
            )
        return _result(result)


def _result(result: Any) -> ToolResult:
    blocks: list[TextBlock] = []
    for item in getattr(result, "content", None) or ():
        text = getattr(item, "text", None)
        if isinstance(text, str):
            blocks.append(TextBlock(text=text))
        else:
            blocks.append(TextBlock(text=f"[{getattr(item, 'type', 'content')} content left out]"))
    structured = cast(JsonValue, getattr(result, "structured_content", None))
    return ToolResult(
        content=tuple(blocks),
        structured=structured,
        is_error=bool(getattr(result, "is_error", False)),
    )
