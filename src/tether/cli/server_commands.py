"""``tether serve`` (the HTTP API) and ``tether keys`` (its API keys)."""

from __future__ import annotations

import asyncio
import importlib.util
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, TypeVar, cast

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from tether.cli.failures import fail
from tether.cli.store_commands import DbOption, open_store, with_store
from tether.errors import TetherError, UserError

if TYPE_CHECKING:
    from tether.agent import Agent
    from tether.server.keys import ApiKey, ApiKeys
    from tether.stores.kv import KeyValueStore

__all__ = ["keys_app", "mcp_app", "server_app"]

server_app = typer.Typer()
mcp_app = typer.Typer(name="mcp", help="MCP: serve agents to MCP clients.", no_args_is_help=True)
keys_app = typer.Typer(
    name="keys", help="API keys of `tether serve`: create, list, revoke.", no_args_is_help=True
)
out = Console()
T = TypeVar("T")

_EXTRA = 'the HTTP API needs its extra: pip install "tether[server]"'


def _need_server() -> None:
    if importlib.util.find_spec("fastapi") is None or importlib.util.find_spec("uvicorn") is None:
        raise fail(_EXTRA)


def _with_keys(
    db: Path | None, action: Callable[[ApiKeys], Awaitable[T]], *, create: bool = False
) -> T:
    from tether.server.keys import ApiKeys

    return with_store(db, lambda store: action(ApiKeys(store)), create=create)


@keys_app.command("create")
def _create(
    tenant: Annotated[str, typer.Option(help="The tenant whose runs the key sees.")],
    scope: Annotated[
        list[str],
        typer.Option("--scope", help="read, run, approve or admin (repeatable)."),
    ],
    name: Annotated[str, typer.Option(help="Who or what holds the key.")] = "",
    db: DbOption = None,
) -> None:
    """Make a key; its token is printed once and never stored."""

    async def make(keys: ApiKeys) -> str:
        return (await keys.create(tenant, scope, name=name))[1]

    token = _with_keys(db, make, create=True)
    out.print(token, soft_wrap=True, highlight=False)


@keys_app.command("list")
def _list(
    tenant: Annotated[str | None, typer.Option(help="Only this tenant's keys.")] = None,
    db: DbOption = None,
) -> None:
    """Every key: id, tenant, scopes, name, made, revoked."""

    async def listed(keys: ApiKeys) -> list[ApiKey]:
        return await keys.list(tenant)

    found = _with_keys(db, listed)
    rows = [
        (
            key.key_id,
            key.tenant,
            ",".join(key.scopes),
            key.name,
            key.created_at.isoformat(timespec="seconds"),
            "" if key.revoked_at is None else key.revoked_at.isoformat(timespec="seconds"),
        )
        for key in found
    ]
    if not out.is_terminal:  # piped: whole fields, tab-separated, for scripts
        for row in rows:
            typer.echo("\t".join(row))
        return
    table = Table("id", "tenant", "scopes", "name", "created", "revoked")
    for row in rows:
        table.add_row(*(escape(field) for field in row))
    out.print(table)


@keys_app.command("revoke")
def _revoke(
    key_id: Annotated[str, typer.Argument(help="The key's id (or its whole token).")],
    db: DbOption = None,
) -> None:
    """Revoke a key: every request with it is refused from now on."""

    async def revoke(keys: ApiKeys) -> ApiKey:
        return await keys.revoke(key_id)

    key = _with_keys(db, revoke)
    out.print(f"revoked {key.key_id} (tenant {escape(key.tenant)})")


def _agents(refs: list[str]) -> list[Agent[Any]]:
    return [agent for _, agent in _loaded(refs)]


def _loaded(refs: list[str]) -> list[tuple[str, Agent[Any]]]:
    """Each agent ``refs`` name, with what loads it again (a folder's: its file)."""
    from tether.agentfile import agent_files_in, load_agent_file
    from tether.replay import load_agent

    loaded: list[tuple[str, Agent[Any]]] = []
    for ref in refs:
        if Path(ref).is_dir():
            loaded += [(str(f.resolve()), load_agent_file(f)) for f in agent_files_in(ref)]
        elif ref.endswith(".toml"):
            loaded.append((str(Path(ref).resolve()), load_agent(ref)))
        else:
            loaded.append((ref, load_agent(ref)))
    names = [a.name for _, a in loaded]
    if len(set(names)) != len(names):
        raise UserError(f"two served agents share a name ({', '.join(names)}): rename one")
    return loaded


_AGENT_HELP = (
    "module:attribute of an Agent, an agent's TOML file, a folder of them, or pack:PACK/AGENT "
    "(repeatable)."
)


@server_app.command("serve")
def _serve(
    agent: Annotated[
        list[str],
        typer.Option("--agent", help=_AGENT_HELP),
    ],
    host: Annotated[str, typer.Option(help="Address to bind (loopback by default).")] = (
        "127.0.0.1"
    ),
    port: Annotated[int, typer.Option(min=0, max=65535)] = 8000,
    max_active_runs: Annotated[int, typer.Option(min=1, help="Runs executing at once.")] = 64,
    db: DbOption = None,
) -> None:
    """Serve the HTTP API over the run store (keys: `tether keys create`)."""
    _need_server()
    import uvicorn

    from tether.cli.serving import serving
    from tether.server import create_app

    try:
        agents = _agents(agent)
        store = open_store(db, create=True)
        app = create_app({a.name: a for a in agents}, store, max_active_runs=max_active_runs)
    except TetherError as exc:
        raise fail(exc) from None
    try:
        uvicorn.run(app, host=host, port=port, **serving())
    finally:
        asyncio.run(store.close())


@mcp_app.command("serve")
def _mcp_serve(
    agent: Annotated[list[str], typer.Option("--agent", help=_AGENT_HELP)],
    http: Annotated[
        bool, typer.Option("--http", help="Streamable HTTP on loopback instead of stdio.")
    ] = False,
    port: Annotated[int, typer.Option(min=0, max=65535, help="The --http port.")] = 8001,
    max_active_runs: Annotated[int, typer.Option(min=1, help="Agent calls at once.")] = 16,
    require_key: Annotated[
        bool,
        typer.Option(
            "--require-key",
            help="--http: every request needs a tether API key (`tether keys create`); runs "
            "belong to its tenant, approvals need its approve scope.",
        ),
    ] = False,
    tools: Annotated[
        bool,
        typer.Option(
            "--tools",
            help="Also serve each agent's own tools, as AGENT.TOOL: every call is a run the "
            "agent's policy checks.",
        ),
    ] = False,
    bare_tool_names: Annotated[
        bool,
        typer.Option("--bare-tool-names", help="--tools: name them TOOL, not AGENT.TOOL."),
    ] = False,
    db: DbOption = None,
) -> None:
    """Serve agents to MCP clients: each agent is a tool whose input is the goal.

    stdio by default (what desktop MCP clients start); `--http` listens on 127.0.0.1 only,
    with the SDK's DNS-rebinding protection. Runs land in the run store as any other.
    """
    if importlib.util.find_spec("mcp") is None:
        raise fail('serving MCP needs its extra: pip install "tether[mcp]"')
    from tether.mcpserve import keyed, mcp_server

    if require_key and not http:
        raise fail("--require-key is for --http (over stdio the client starts the server)")
    if require_key:
        _need_server()
    try:
        store = open_store(db, create=True)
        keys = None
        if require_key:
            from tether.server.keys import ApiKeys

            keys = ApiKeys(cast("KeyValueStore", store))
        loaded = _loaded(agent)
        server = mcp_server(
            [a for _, a in loaded],
            store,
            max_active_runs=max_active_runs,
            keys=keys,
            expose_tools=tools or bare_tool_names,
            bare_tool_names=bare_tool_names,
            agent_refs={a.name: ref for ref, a in loaded},
        )
    except TetherError as exc:
        raise fail(exc) from None
    try:
        if http:
            import uvicorn

            from tether.cli.serving import serving

            app = server.streamable_http_app(host="127.0.0.1")
            if keys is not None:
                app = keyed(app, keys)
            uvicorn.run(app, host="127.0.0.1", port=port, **serving())
        else:
            asyncio.run(server.run_stdio_async())
    finally:
        asyncio.run(store.close())
