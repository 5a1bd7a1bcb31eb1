"""``tether packs``: the packs installed here, their agents and tool sets."""

from __future__ import annotations

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

__all__ = ["pack_app"]

pack_app = typer.Typer()
"""The commands of this module; ``tether.cli.app`` merges them into ``tether``."""
out = Console()
err = Console(stderr=True)


@pack_app.command("packs")
def _packs() -> None:
    """List installed packs: their agents (`--agent pack:PACK/AGENT`) and tool sets."""
    from tether.packs import installed_packs

    found = installed_packs()
    rows: list[tuple[str, ...]] = []
    for item in found:
        if item.pack is None:
            err.print(f"[red]pack {escape(item.name)} ({escape(item.distribution)}) did not load:[/] "
                      f"{escape(item.problem)}")  # fmt: skip
            continue
        agents = ", ".join(f"pack:{item.name}/{a}" for a in sorted(item.pack.agents)) or "-"
        tools = ", ".join(f"{item.name}/{t}" for t in sorted(item.pack.tools)) or "-"
        rows.append((item.name, f"{item.distribution} {item.version}", agents, tools,
                     item.pack.description))  # fmt: skip
    if not out.is_terminal:  # piped: whole fields, tab-separated, for scripts
        for row in rows:
            typer.echo("\t".join(row))
        return
    if not rows:
        out.print(
            "no packs are installed (a package declares one under the tether.packs entry point)"
        )
        return
    table = Table("pack", "from", "agents", "tool sets", "what for")
    for row in rows:
        table.add_row(*(escape(field) for field in row))
    out.print(table)
