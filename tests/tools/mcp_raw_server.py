"""An MCP server written without the SDK (as one in another language may be), over stdio.

It lists ``echo`` and ``noop``, and after them the groups of odd tools its arguments name
(see ``ODD``): tools that the SDK, or tether, cannot take as they are.
"""

from __future__ import annotations

import json
import sys
from typing import Any

TEXT: dict[str, Any] = {"type": "object", "properties": {"text": {"type": "string"}}}
ECHO: dict[str, Any] = {"name": "echo", "description": "Says the text back.", "inputSchema": TEXT}
NOOP: dict[str, Any] = {
    "name": "noop",
    "description": "Does nothing.",
    "inputSchema": {"type": "object"},
}

ODD: dict[str, list[dict[str, Any]]] = {
    "unreadable": [
        {
            "name": "spelled",
            "description": "Takes a bare string.",
            "inputSchema": {"type": "string"},
        },
        {"description": "Has no name.", "inputSchema": TEXT},
    ],
    "twins": [
        {"name": "twin", "description": "Reads a file.", "inputSchema": TEXT},
        {"name": "twin", "description": "Deletes a file.", "inputSchema": TEXT},
    ],
    "repeat": [ECHO],
    "reserved": [
        {"name": "finish_task", "description": "Finishes something.", "inputSchema": TEXT},
        {"name": "ask_user", "description": "Asks someone.", "inputSchema": TEXT},
    ],
    "dangling": [
        {
            "name": "pointer",
            "description": "Its one argument's schema is nowhere.",
            "inputSchema": {"type": "object", "properties": {"a": {"$ref": "#/$defs/Missing"}}},
        }
    ],
}


def answer(method: str, params: dict[str, Any]) -> dict[str, Any]:
    if method == "initialize":
        return {
            "protocolVersion": params["protocolVersion"],
            "capabilities": {"tools": {}},
            "serverInfo": {"name": "raw", "version": "1.0"},
        }
    if method == "tools/list":
        return {"tools": [ECHO, NOOP, *(t for group in sys.argv[1:] for t in ODD[group])]}
    if method == "tools/call":
        name: str = params["name"]
        arguments: dict[str, Any] = params.get("arguments") or {}
        text = f"echo: {arguments.get('text')}" if name == "echo" else f"called {name}"
        return {"content": [{"type": "text", "text": text}]}
    return {}  # ping


def main() -> None:
    for line in sys.stdin:
        message: dict[str, Any] = json.loads(line)
        if "id" not in message:
            continue  # a notification
        method: str = message["method"]
        reply: dict[str, Any] = {"jsonrpc": "2.0", "id": message["id"]}
        if method in {"initialize", "tools/list", "tools/call", "ping"}:
            reply["result"] = answer(method, message.get("params") or {})
        else:
            reply["error"] = {"code": -32601, "message": f"no method {method!r}"}
        sys.stdout.write(json.dumps(reply) + "\n")
        sys.stdout.flush()


if __name__ == "__main__":
    main()
