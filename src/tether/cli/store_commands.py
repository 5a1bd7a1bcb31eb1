"""``tether runs / show / export / import / prune / abandon / cancel``: the runs kept in a run store.

The store is the SQLite file given by ``--db``, else ``$TETHER_DB``, else
``./.tether/tether.db``. A run is named by its id or by any prefix of it that only one
stored run has. These commands are merged into the main ``tether`` app. A store that fails
(damaged, locked, read-only, full, not a store) is one ``error:`` line and exit code 2.
"""

from __future__ import annotations

import asyncio
import getpass
import os
from collections.abc import Awaitable, Callable
from contextlib import aclosing
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Annotated, BinaryIO, TypeVar, cast, get_args

import typer
from rich.cells import cell_len
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from tether.cli.failures import fail
from tether.cli.render import describe
from tether.codec import read_jsonl, verify_chain
from tether.errors import StoreUnavailable, TetherError, UserError
from tether.events import Event
from tether.outcome import RunStatus
from tether.stores.base import RunIndexStatus, RunInfo, RunNotFound, RunQuery, RunStore
from tether.stores.retention import parse_age, prune
from tether.stores.sqlite import SqliteStore, default_store_path
from tether.stores.stale import Abandoned, StaleRun, abandon_run, stale_runs
from tether.stores.transfer import decode_jsonl_log, export_pages, import_events
from tether.stores.waiting import CancelledWaiting, cancel_waiting_run

__all__ = [
    "BusyTimeoutOption",
    "DbOption",
    "looks_like_a_path",
    "open_store",
    "read_run",
    "resolve_run_id",
    "store_app",
    "with_store",
]

T = TypeVar("T")

store_app = typer.Typer()
"""The commands of this module; ``tether.cli.app`` merges them into ``tether``."""
out = Console()
err = Console(stderr=True)

_ALL = 1 << 62
"""A ``RunQuery.limit`` that lists every run."""
_STATUSES: tuple[str, ...] = ("running", *get_args(RunStatus))
_STATUS_COLORS = {"running": "cyan", "finished": "green", "cancelled": "yellow"}

DbOption = Annotated[
    Path | None,
    typer.Option(
        "--db",
        help="The run store's SQLite file (default: $TETHER_DB, else .tether/tether.db).",
        dir_okay=False,
    ),
]


BusyTimeoutOption = Annotated[
    float | None,
    typer.Option(
        "--busy-timeout",
        envvar="TETHER_BUSY_TIMEOUT",
        min=0,
        show_default=False,
        help="Seconds to wait while another process holds the store locked, then fail "
        "(default: $TETHER_BUSY_TIMEOUT, else 30).",
    ),
]


def open_store(
    db: Path | None = None, *, create: bool = False, busy_timeout: float | None = None
) -> SqliteStore:
    """Open the SQLite run store at ``db`` (default: ``default_store_path()``).

    Nothing is read until the store is used: a file that is damaged, locked, read-only or
    not a store fails then, with a ``StoreError`` that names it.

    Args:
        db: The store's file, as given by ``--db``.
        create: Create the store if it does not exist yet (otherwise that is an error).
        busy_timeout: Seconds to wait for another process's lock (default: the store's).

    Raises:
        StoreUnavailable: a regular file is in the way of the store's path.
        UserError: the store does not exist (and ``create`` is false).
    """
    path = _existing_store(db)
    if path is None:
        if not create:
            shown = _store_path(db)
            raise UserError(
                f"no run store at {shown}: pass --db PATH or set $TETHER_DB to the store's file"
            )
        path = _store_path(db)
    if busy_timeout is None:
        return SqliteStore(path)
    return SqliteStore(path, busy_timeout=busy_timeout)


async def resolve_run_id(store: RunStore, ref: str) -> str:
    """The id of the one stored run whose id is ``ref`` or begins with it.

    Raises:
        RunNotFound: no stored run matches.
        UserError: several runs begin with ``ref``.
    """
    if not ref:
        raise RunNotFound(ref)
    try:
        return (await store.info(ref)).run_id
    except RunNotFound:
        pass
    matches = [r.run_id for r in await store.runs(RunQuery(limit=_ALL)) if r.run_id.startswith(ref)]
    if not matches:
        raise RunNotFound(ref)
    if len(matches) > 1:
        shown = ", ".join(sorted(matches)[:5]) + (", …" if len(matches) > 5 else "")
        raise UserError(
            f"{len(matches)} runs have ids beginning with {ref!r} ({shown}): give more of the id"
        )
    return matches[0]


def _store_path(db: Path | None) -> Path:
    return db if db is not None else default_store_path()


def _existing_store(db: Path | None) -> Path | None:
    """The store's path if something is there; ``None`` if it does not exist yet.

    Raises:
        StoreUnavailable: a regular file is where a directory of the path should be, so the
            store can neither be there nor be created.
    """
    path = _store_path(db)
    blocker = next((p for p in path.parents if p.is_file()), None)
    if blocker is not None:
        raise StoreUnavailable(
            f"there is no run store at {path} and none can be created: {blocker} is a file, "
            "not a directory. Point --db or $TETHER_DB at a path inside a directory"
        )
    return path if path.exists() else None


def with_store(
    db: Path | None,
    action: Callable[[SqliteStore], Awaitable[T]],
    *,
    create: bool = False,
    busy_timeout: float | None = None,
) -> T:
    """Open the store, run ``action`` on it, close it; errors exit 2 with ``error: …``."""

    async def go() -> T:
        store = open_store(db, create=create, busy_timeout=busy_timeout)
        try:
            return await action(store)
        finally:
            await store.close()

    try:
        return asyncio.run(go())
    except TetherError as exc:
        raise fail(exc) from None


def _age(delta: timedelta) -> str:
    seconds = max(0, int(delta.total_seconds()))
    for unit, size in (("d", 86_400), ("h", 3_600), ("m", 60)):
        if seconds >= size:
            return f"{seconds // size}{unit}"
    return f"{seconds}s"


@store_app.command("runs")
def _runs(
    status: Annotated[
        str | None, typer.Option(help=f"Only runs with this status: {', '.join(_STATUSES)}.")
    ] = None,
    agent: Annotated[str | None, typer.Option(help="Only this agent's runs.")] = None,
    limit: Annotated[int, typer.Option(min=1, help="At most this many runs.")] = 50,
    stale: Annotated[
        bool,
        typer.Option(
            "--stale",
            help="Only runs left running that nobody runs (their process died): with their "
            "owner, why, and when their last event was.",
        ),
    ] = False,
    db: DbOption = None,
    busy_timeout: BusyTimeoutOption = None,
) -> None:
    """List stored runs, newest first: id, agent, status, steps, tokens, age."""
    if status is not None and status not in _STATUSES:
        raise fail(UserError(f"unknown status {status!r}: use one of {', '.join(_STATUSES)}"))
    if stale and status not in (None, "running"):
        raise fail(UserError(f"--stale lists running runs: it cannot go with --status {status}"))
    try:
        path = _existing_store(db)
    except TetherError as exc:
        raise fail(exc) from None
    if path is None:
        err.print(f"no runs: no store at {escape(str(_store_path(db)))} yet")
        return
    if stale:
        found = with_store(
            db, lambda store: stale_runs(store, agent=agent), busy_timeout=busy_timeout
        )
        _print_stale(found[:limit])
        return
    query = RunQuery(status=cast(RunIndexStatus | None, status), agent=agent, limit=limit)
    rows = with_store(db, lambda store: store.runs(query), busy_timeout=busy_timeout)
    if not rows:
        err.print("no runs match")
        return
    if not out.file.isatty():
        # For scripts: whole values, one run a line, tab-separated, no header, no colour.
        for row in rows:
            typer.echo("\t".join(_plain_fields(row)), file=out.file)
        return
    table = _table(rows, datetime.now(UTC))
    out.print(table, crop=False)


_WHY = {
    "owner_gone": "its owner is gone",
    "lease_expired": "its lease lapsed",
    "no_owner": "nobody owns it",
}


def _print_stale(found: list[StaleRun]) -> None:
    """The stale runs (a table, or tab-separated whole values for scripts), then what to do."""
    if not found:
        err.print("no stale runs: every running run has a live owner")
        return
    now = datetime.now(UTC)
    if not out.file.isatty():
        # id, agent, owner (- for none), why, when the last event was recorded
        for run in found:
            last = run.info.updated_at.astimezone(UTC).isoformat(timespec="seconds")
            agent = " ".join(run.info.agent.split())
            fields = (run.info.run_id, agent, run.owner or "-", run.reason, last)
            typer.echo("\t".join(fields), file=out.file)
    else:
        table = Table("id", "agent", "owner", "why", "last event", box=None, pad_edge=False)
        for run in found:
            table.add_row(
                run.info.run_id,
                escape(run.info.agent),
                escape(run.owner or "-"),
                _WHY[run.reason],
                f"{_age(now - run.info.updated_at)} ago",
            )
        table.columns[0].no_wrap = True
        out.print(table, crop=False)
    ref = found[0].info.run_id if len(found) == 1 else "RUN"
    err.print(
        f"{len(found)} run{'' if len(found) == 1 else 's'} stopped without an ending: continue "
        f"with `tether resume {ref}`, or end for good (failed) with `tether abandon {ref} "
        "--reason TEXT`",
        soft_wrap=True,
    )


def _plain_fields(row: RunInfo) -> tuple[str, ...]:
    tokens = row.usage.input_tokens + row.usage.output_tokens
    created = row.created_at.astimezone(UTC).isoformat(timespec="seconds")
    agent = " ".join(row.agent.split())  # a tab or newline in a name would split the row
    return (row.run_id, agent, row.status, str(row.steps), str(tokens), created)


_GIVE_WAY = ("agent", "status")
"""The columns that a narrow terminal shortens; ids and numbers are never cut."""
_SHORTEST = 5
"""How narrow a column that gives way may become."""


def _table(rows: list[RunInfo], now: datetime) -> Table:
    table = Table("id", "agent", "status", "steps", "tokens", "age", box=None, pad_edge=False)
    for row in rows:
        color = _STATUS_COLORS.get(row.status, "red")
        tokens = row.usage.input_tokens + row.usage.output_tokens
        table.add_row(
            escape(row.run_id),
            escape(row.agent),
            f"[{color}]{row.status}[/]",
            str(row.steps),
            str(tokens),
            _age(now - row.created_at),
        )
    for col in table.columns[3:]:
        col.justify = "right"
    for col in table.columns:
        if col.header in _GIVE_WAY:
            col.overflow, col.min_width = "ellipsis", _SHORTEST
        else:  # plain text cells, no markup: their length is their width
            col.no_wrap = True
            col.min_width = max(cell_len(str(c)) for c in (col.header, *col.cells))
    narrowest = sum(c.min_width or 0 for c in table.columns) + 2 * (len(table.columns) - 1)
    if out.width < narrowest:
        table.width = narrowest  # wider than the terminal: it wraps the lines, ids stay whole
    return table


def looks_like_a_path(ref: str) -> bool:
    """Whether ``ref`` names a file (a ``.jsonl`` name, or a path), not a run id."""
    separators = ("/", os.sep, os.altsep or "/")
    return ref.endswith(".jsonl") or any(s in ref for s in separators)


async def _read_run(store: RunStore, ref: str) -> list[Event]:
    run_id = await resolve_run_id(store, ref)
    events = await store.read(run_id)
    verify_chain(events, run_id=run_id)
    return events


def read_run(run: str, db: Path | None, busy_timeout: float | None) -> list[Event]:
    """A run's events, its chain verified: from the file ``run`` if it is one, else the store.

    What ``show`` and ``replay`` read: a JSONL log by any name, or a run id (or a unique
    prefix of one) in the store at ``db``. A store that fails exits 2 (``with_store``).

    Raises:
        UserError: ``run`` is a directory, or a path to no file.
        TetherError: the log cannot be read, or its chain is broken.
    """
    path = Path(run)
    if path.is_file():
        return read_jsonl(path)
    if path.exists():
        raise UserError(f"{run} is not a file: give a run id or a run's JSONL log")
    if looks_like_a_path(run):
        raise UserError(f"the file {run} does not exist (and it is not a run id)")
    return with_store(db, lambda store: _read_run(store, run), busy_timeout=busy_timeout)


@store_app.command("show")
def _show(
    run: Annotated[
        str,
        typer.Argument(help="A run id (or a unique prefix of one), or a run's JSONL log file."),
    ],
    db: DbOption = None,
    busy_timeout: BusyTimeoutOption = None,
) -> None:
    """Print a run's log readably, from the store or a JSONL file (the chain is verified)."""
    try:
        events = read_run(run, db, busy_timeout)
    except TetherError as exc:
        raise fail(exc) from None
    for event in events:
        out.print(f"[dim]{event.seq:>3}[/] {describe(event)}", soft_wrap=True)


async def _export(store: RunStore, ref: str, stdout: BinaryIO) -> None:
    """Write the run's log a page at a time (all of it is checked before the first)."""
    async with aclosing(export_pages(store, await resolve_run_id(store, ref))) as pages:
        async for page in pages:
            await asyncio.to_thread(stdout.write, page)
    await asyncio.to_thread(stdout.flush)


@store_app.command("export")
def _export_command(
    run: Annotated[str, typer.Argument(help="A run id, or a unique prefix of one.")],
    db: DbOption = None,
    busy_timeout: BusyTimeoutOption = None,
) -> None:
    """Write a stored run's log to stdout as JSONL (`tether export RUN > run.jsonl`).

    Events stored with an audit key's MAC carry it on their line (`tether import` keeps it).
    """
    stdout = typer.get_binary_stream("stdout")
    with_store(db, lambda store: _export(store, run, stdout), busy_timeout=busy_timeout)


@store_app.command("import")
def _import_command(
    file: Annotated[str, typer.Argument(help="A run's JSONL log (`-` reads stdin).")],
    db: DbOption = None,
    busy_timeout: BusyTimeoutOption = None,
) -> None:
    """Import a run's JSONL log into the store (verified first); prints the run id.

    Importing a run that is already stored, identical, does nothing. The events' MACs (an
    audit key's, see `tether audit`) are kept as the log carries them; none are made.
    """
    path = Path(file)
    if file != "-" and not path.is_file():
        problem = "is not a file" if path.exists() else "does not exist"
        raise fail(UserError(f"the file {file} {problem}: give a run's JSONL log, or - for stdin"))
    try:
        if file == "-":
            log = decode_jsonl_log(typer.get_binary_stream("stdin"), name="stdin")
        else:
            with path.open("rb") as fh:
                log = decode_jsonl_log(fh, name=file)
    except TetherError as exc:
        raise fail(exc) from None
    # Only a log that decodes and verifies opens (or creates) the store.
    run_id = with_store(
        db,
        lambda store: import_events(store, log.events, macs=log.macs),
        create=True,
        busy_timeout=busy_timeout,
    )
    typer.echo(run_id)


@store_app.command("prune")
def _prune(
    older_than: Annotated[
        str | None,
        typer.Option(help="Delete runs created longer ago than this: 30d, 12h, 90m, 45s, 2w."),
    ] = None,
    keep_last: Annotated[
        int | None, typer.Option(min=0, help="Delete all but each agent's newest N runs.")
    ] = None,
    agent: Annotated[str | None, typer.Option(help="Only prune this agent's runs.")] = None,
    db: DbOption = None,
    dry_run: Annotated[
        bool, typer.Option("--dry-run", help="Only list the runs that would be deleted.")
    ] = False,
    busy_timeout: BusyTimeoutOption = None,
) -> None:
    """Delete old runs; runs still running are never deleted. Prints the ids deleted.

    A run left running by a process that died is listed by `tether runs --stale`: resume it,
    or end it with `tether abandon`, and it can be pruned.
    """
    try:
        if older_than is None and keep_last is None:
            raise UserError("say what to prune: give --older-than AGE and/or --keep-last N")
        age = None if older_than is None else parse_age(older_than)
        path = _existing_store(db)
    except TetherError as exc:
        raise fail(exc) from None
    if path is None:
        err.print(f"nothing to prune: no store at {escape(str(_store_path(db)))}")
        return
    deleted = with_store(
        db,
        lambda store: prune(
            store, older_than=age, keep_last=keep_last, agent=agent, dry_run=dry_run
        ),
        busy_timeout=busy_timeout,
    )
    for run_id in deleted:
        typer.echo(run_id)
    verb = "would delete" if dry_run else "deleted"
    err.print(f"{verb} {len(deleted)} run{'' if len(deleted) == 1 else 's'}")


def _user() -> str:
    """The name of the user running this command (for the log), or ``""`` if unknown."""
    try:
        return getpass.getuser()
    except (OSError, KeyError):  # no login name in the environment nor the password database
        return ""


E = TypeVar("E", Abandoned, CancelledWaiting)


def _end(
    ending: Callable[..., Awaitable[E]],
    ref: str,
    reason: str,
    by: str | None,
    db: Path | None,
    busy_timeout: float | None,
) -> E:
    """``ending`` (``abandon_run``, ``cancel_waiting_run``) of the run ``ref`` names."""
    who = _user() if by is None else by

    async def end(store: RunStore) -> E:
        return await ending(store, await resolve_run_id(store, ref), reason=reason, by=who)

    return with_store(db, end, busy_timeout=busy_timeout)


def _say_ended(done: Abandoned | CancelledWaiting, said: str) -> None:
    err.print(f"{said}. See its log with `tether show {done.run_id}`", soft_wrap=True)
    for warning in done.warnings:
        err.print(f"[yellow]warning:[/] {escape(warning)}", soft_wrap=True)


@store_app.command("abandon")
def _abandon_command(
    run: Annotated[str, typer.Argument(help="A run id, or a unique prefix of one.")],
    reason: Annotated[str, typer.Option(help="Why it is ended (recorded in its log).")] = "",
    by: Annotated[
        str | None, typer.Option(help="Who ends it (recorded; default: this user's name).")
    ] = None,
    db: DbOption = None,
    busy_timeout: BusyTimeoutOption = None,
) -> None:
    """End, for good, a run left running by a process that died: it fails, as "Abandoned".

    Its log gets what a crash recovery would record for the calls left without a result
    (not executed; or, for a call that may have run, an unknown outcome), then its ending.
    Refused while its owner is alive, and for a run that has ended. `tether runs --stale`
    lists the runs it applies to; `tether resume RUN` continues one instead.
    """
    done = _end(abandon_run, run, reason, by, db, busy_timeout)
    calls = done.closed_calls
    closed = (
        f"; {calls} call{'' if calls == 1 else 's'} left without a result closed" if calls else ""
    )
    _say_ended(done, f"abandoned {done.run_id}: it ended failed (Abandoned){closed}")


@store_app.command("cancel")
def _cancel_command(
    run: Annotated[str, typer.Argument(help="A run id, or a unique prefix of one.")],
    reason: Annotated[str, typer.Option(help="Why it is cancelled (recorded in its log).")] = "",
    by: Annotated[
        str | None, typer.Option(help="Who cancels it (recorded; default: this user's name).")
    ] = None,
    db: DbOption = None,
    busy_timeout: BusyTimeoutOption = None,
) -> None:
    """End, for good, a run that waits for the user's answer or for approvals: cancelled.

    Each call waiting for a decision gets a result saying it was not executed, then the run
    ends "cancelled", naming who cancelled it and why. Refused for a run that does not wait
    (a running one is cancelled by its own process: Ctrl-C; one left by a dead process is
    ended with `tether abandon`).
    """
    done = _end(cancel_waiting_run, run, reason, by, db, busy_timeout)
    calls = done.closed_calls
    closed = f"; {calls} waiting call{'' if calls == 1 else 's'} not executed" if calls else ""
    _say_ended(done, f"cancelled {done.run_id}{closed}")
