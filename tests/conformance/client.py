"""The MCP client under the official conformance suite: tether's own MCP client in an agent run.

The suite starts a scenario's server and runs ``python client.py URL``. This connects with
``McpServer.http``, lists the tools, and runs an agent whose (scripted) model calls each
listed tool once, so every call goes through tether's policy gate and event log as a real
run's would. Exit 0 when the run finished; 1 otherwise (the suite's checks decide).
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from typing import Any, cast
from urllib.parse import parse_qs, urlsplit

import httpx2
from mcp.client.auth import AuthorizationCodeResult, OAuthClientProvider
from mcp.client.auth.extensions.client_credentials import (
    ClientCredentialsOAuthProvider,
    PrivateKeyJWTOAuthProvider,
    SignedJWTParameters,
)
from mcp.shared.auth import OAuthClientInformationFull, OAuthClientMetadata, OAuthToken
from pydantic import AnyUrl

from tether import Agent
from tether.jsontypes import JsonObject
from tether.messages import ToolCall
from tether.policy import AllowAll
from tether.testing import ScriptedModel, finish
from tether.tools.base import Tool
from tether.tools.mcp import McpServer


def _example(schema: Any) -> Any:
    """A value the schema accepts: what the scenario's tool needs to be called."""
    if not isinstance(schema, dict):
        return None
    schema = cast(dict[str, Any], schema)
    kind = schema.get("type")
    if kind in ("number", "integer"):
        return 2
    if kind == "boolean":
        return True
    if kind == "string":
        return "conformance"
    if kind == "array":
        return []
    if kind == "object":
        required = cast(list[str], schema.get("required", []))
        properties = cast(dict[str, Any], schema.get("properties", {}))
        return {name: _example(properties.get(name, {})) for name in required}
    return None


def _calls(tools: list[Tool]) -> list[ToolCall]:
    return [
        ToolCall(id="", name=t.name, arguments=_example(t.definition.input_schema) or {})
        for t in tools
    ]


class _Memory:
    """Tokens and client registration for one run of the script (a TokenStorage)."""

    def __init__(self, client: OAuthClientInformationFull | None = None) -> None:
        self.tokens: OAuthToken | None = None
        self.client = client

    async def get_tokens(self) -> OAuthToken | None:
        return self.tokens

    async def set_tokens(self, tokens: OAuthToken) -> None:
        self.tokens = tokens

    async def get_client_info(self) -> OAuthClientInformationFull | None:
        return self.client

    async def set_client_info(self, client_info: OAuthClientInformationFull) -> None:
        self.client = client_info


_METADATA_URL = "https://conformance-test.local/client-metadata.json"  # what the suite expects


def _oauth(url: str, scenario: str, context: dict[str, Any]) -> OAuthClientProvider:
    if scenario == "auth/client-credentials-basic":  # a machine client: no user, no redirect
        return ClientCredentialsOAuthProvider(
            server_url=url,
            storage=_Memory(),
            client_id=context["client_id"],
            client_secret=context["client_secret"],
        )
    if scenario == "auth/client-credentials-jwt":
        signing = SignedJWTParameters(
            issuer=context["client_id"],
            subject=context["client_id"],
            signing_key=context["private_key_pem"],
            signing_algorithm=context.get("signing_algorithm", "ES256"),
        )
        return PrivateKeyJWTOAuthProvider(
            server_url=url,
            storage=_Memory(),
            client_id=context["client_id"],
            assertion_provider=signing.create_assertion_provider(),
        )
    asked: list[str] = []

    async def redirect(authorization_url: str) -> None:
        asked.append(authorization_url)

    async def callback() -> AuthorizationCodeResult:
        async with httpx2.AsyncClient() as client:
            reply = await client.get(asked[-1], follow_redirects=False)
        query = parse_qs(urlsplit(reply.headers["location"]).query)
        return AuthorizationCodeResult(
            code=query["code"][0],
            state=query.get("state", [None])[0],
            iss=query.get("iss", [None])[0],
        )

    redirect_uri = "http://localhost:3030/callback"
    registered = None
    if "client_id" in context:  # the scenario registered this client beforehand
        registered = OAuthClientInformationFull(
            client_id=context["client_id"],
            client_secret=context.get("client_secret"),
            redirect_uris=[AnyUrl(redirect_uri)],
            token_endpoint_auth_method="client_secret_basic"
            if "client_secret" in context
            else None,
        )
    metadata = OAuthClientMetadata(
        client_name="tether conformance client",
        redirect_uris=[AnyUrl(redirect_uri)],
        grant_types=["authorization_code", "refresh_token"],
        response_types=["code"],
    )
    return OAuthClientProvider(
        server_url=url,
        client_metadata=metadata,
        storage=_Memory(registered),
        redirect_handler=redirect,
        callback_handler=callback,
        client_metadata_url=_METADATA_URL,  # used where the server takes metadata documents
    )


async def _accept(message: str, schema: JsonObject) -> JsonObject:
    """The user accepts what the form proposes (tether fills in the schema's defaults)."""
    return {}


async def main(url: str) -> int:
    scenario = os.environ.get("MCP_CONFORMANCE_SCENARIO", "")
    context = json.loads(os.environ.get("MCP_CONFORMANCE_CONTEXT") or "{}")
    auth = _oauth(url, scenario, context)
    server = McpServer.http("conformance", url, timeout=20, auth=auth, elicit=_accept)
    async with server:
        tools = await server.tools()
        script = [*_calls(tools), finish(f"called {len(tools)} tools")]
        agent = Agent(
            name=f"conformance-{scenario.replace('/', '-')}" if scenario else "conformance",
            model=ScriptedModel(script),
            tools=tools,
            policy=AllowAll(),  # the suite's own servers: nothing here to guard
        )
        outcome = await agent.run("call each tool of the scenario's server once")
    print(outcome.status, outcome.answer, file=sys.stderr)
    return 0 if outcome.success else 1


if __name__ == "__main__":
    sys.exit(asyncio.run(main(sys.argv[-1])))
