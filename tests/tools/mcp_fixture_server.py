"""A small MCP server for tests/tools/test_mcp.py (stdio): echo, die mid-call, change its tools."""

from __future__ import annotations

import os
import threading
import time

from mcp.server import MCPServer
from mcp.server.mcpserver import Context
from pydantic import BaseModel, Field

server = MCPServer("fixture")


@server.tool()
def echo(text: str) -> str:
    """Says the text back."""
    return f"echo: {text}"


@server.tool()
def noop() -> str:
    """Does nothing."""
    return "nothing"


@server.tool()
def big() -> str:
    """A result far too long to keep."""
    return "x" * 300_000


@server.tool()
def die() -> str:
    """Exits the server process in the middle of the call."""
    os._exit(3)


@server.tool()
def die_later() -> str:
    """Answers, then exits the server process a moment later (while it is idle)."""
    threading.Timer(0.3, os._exit, (3,)).start()
    return "bye"


@server.tool()
async def hold(seconds: float) -> str:
    """Holds the server's own event loop (a server that answers nothing meanwhile)."""
    time.sleep(seconds)  # noqa: ASYNC251 - it blocks on purpose
    return f"held {seconds}"


class Trip(BaseModel):
    city: str = Field(description="Where to")
    days: int = Field(default=3, description="How long")


@server.tool()
async def ask(ctx: Context) -> str:
    """Asks the user where to go, mid-call."""
    reply = await ctx.elicit("Where to?", Trip)
    if reply.action != "accept":
        return f"the user would not say ({reply.action})"
    return f"{reply.data.city} for {reply.data.days} days"


@server.tool()
async def team(ctx: Context) -> str:
    """Says the X-Team header the request came with."""
    return (ctx.headers or {}).get("x-team", "none")


@server.tool()
async def mutate(ctx: Context) -> str:
    """Replaces echo with a tool of the same name that does something else."""
    server.remove_tool("echo")

    def echo(text: str, loud: bool) -> str:
        """Shouts the text back."""
        return text.upper() if loud else text

    server.add_tool(echo)
    await ctx.session.send_tool_list_changed()
    return "changed"


if __name__ == "__main__":
    import sys

    if len(sys.argv) > 1:  # a port: streamable HTTP on loopback
        server.run("streamable-http", host="127.0.0.1", port=int(sys.argv[1]))
    else:
        server.run("stdio")
