"""An MCP server's tool list, read tool by tool: one the SDK cannot read costs only itself.

The ``mcp`` SDK checks a ``tools/list`` page as a whole against the protocol: one tool whose
input schema is not an object (or that breaks the protocol another way) fails the page, and
with it every tool of the server. ``ListingDispatcher`` sits under the SDK's session and
takes each such tool out of the page before the session checks it; what it took out, and
why, is collected by ``unreadable_tools()`` around the listing.
"""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Callable, Generator, Mapping
from typing import Any, cast

from mcp.shared.dispatcher import CallOptions
from mcp.shared.jsonrpc_dispatcher import JSONRPCDispatcher
from mcp.types import RequestId, methods
from pydantic import ValidationError

__all__ = ["ListingDispatcher", "unreadable_tools"]

_FALLBACK_VERSION = "2025-11-25"
"""The version the SDK checks results against before a session has negotiated one."""

_LEFT_OUT: contextvars.ContextVar[list[tuple[str, str]] | None] = contextvars.ContextVar(
    "tether_mcp_left_out", default=None
)


@contextlib.contextmanager
def unreadable_tools() -> Generator[list[tuple[str, str]]]:
    """Collects the tools that the listings made in this block left out: ``(name, why)``.

    The listing's request is sent from the caller's own task, so a context variable finds
    the caller's list, also when several tasks list on one session at once.
    """
    left_out: list[tuple[str, str]] = []
    token = _LEFT_OUT.set(left_out)
    try:
        yield left_out
    finally:
        _LEFT_OUT.reset(token)


class ListingDispatcher(JSONRPCDispatcher[Any]):
    """The SDK's JSON-RPC dispatcher, with ``tools/list`` pages sifted tool by tool."""

    def __init__(self, read_stream: Any, write_stream: Any) -> None:
        super().__init__(read_stream, write_stream)
        self.protocol_version: Callable[[], str | None] = lambda: None
        """The session's negotiated version (set once the session exists)."""

    async def send_raw_request(
        self,
        method: str,
        params: Mapping[str, Any] | None,
        opts: CallOptions | None = None,
        *,
        _related_request_id: RequestId | None = None,
    ) -> dict[str, Any]:
        """Send a request; a ``tools/list`` page comes back without the unreadable tools."""
        raw = await super().send_raw_request(
            method, params, opts, _related_request_id=_related_request_id
        )
        if method != "tools/list":
            return raw
        kept, left_out = _sift(raw, self.protocol_version() or _FALLBACK_VERSION)
        sink = _LEFT_OUT.get()
        if sink is not None:
            sink.extend(left_out)
        return kept


def _sift(raw: dict[str, Any], version: str) -> tuple[dict[str, Any], list[tuple[str, str]]]:
    """``raw`` without the tools that fail the SDK's check, and each of those with why.

    A page that fails for a reason of its own (not one of its tools) is left whole: the
    SDK's error then says what is wrong with it, as before.
    """
    tools: object = raw.get("tools")
    if not isinstance(tools, list) or _fails(raw, version) is None:
        return raw, []
    if _fails({**raw, "tools": []}, version) is not None:
        return raw, []
    kept: list[object] = []
    left_out: list[tuple[str, str]] = []
    for index, tool in enumerate(cast(list[object], tools)):
        error = _fails({**raw, "tools": [tool]}, version)
        if error is None:
            kept.append(tool)
        else:
            left_out.append((_name(tool, index), error))
    return {**raw, "tools": kept}, left_out


def _fails(page: dict[str, Any], version: str) -> str | None:
    """Why the SDK refuses ``page`` as a ``tools/list`` result at ``version``, if it does."""
    try:
        methods.validate_server_result("tools/list", version, page)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(part) for part in first["loc"][2:])  # past ("tools", index)
        return f"the MCP SDK cannot read it ({where or 'the tool'}: {first['msg']})"
    except (KeyError, ValueError):  # a version or method the SDK does not check: nor do we
        return None
    return None


def _name(tool: object, index: int) -> str:
    name = cast(dict[str, object], tool).get("name") if isinstance(tool, dict) else None
    return name if isinstance(name, str) else f"<the page's tool #{index + 1}, unnamed>"
