"""``sql_tool``: parameterized SQL against SQLite or PostgreSQL, read-only unless opted out.

Read-only is enforced by the database, not by reading the SQL. SQLite is opened read-only
(``mode=ro``) with ``PRAGMA query_only`` and an authorizer that denies every write, ATTACH
and DETACH, transaction control, settings PRAGMAs and extension loading; PostgreSQL runs
the statement in a ``READ ONLY`` transaction (with ``default_transaction_read_only`` on)
that is rolled back. On top, the SQL is tokenised to refuse multiple statements, and in
read-only mode statements that do not start like a query (both drivers refuse multiple
statements too: SQLite's ``execute``, and PostgreSQL's extended protocol).

Values always travel as bound parameters. With ``queries=`` the model can only pick one of
the developer's named statements and pass its parameters: the mode to use for writes.

On PostgreSQL a read-only transaction does not stop a superuser's functions that reach
outside the database (``pg_read_file``, ``lo_export``, ``pg_terminate_backend``): connect
as a role that holds only the privileges the agent should have.
"""

from __future__ import annotations

import asyncio
import base64
import importlib
import math
import re
import sqlite3
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from datetime import date, datetime
from datetime import time as time_of_day
from pathlib import Path
from typing import TYPE_CHECKING, Any, LiteralString, cast

import orjson

from tether._internal.daemonthreads import in_daemon_thread
from tether._internal.frozen import frozen
from tether.content import JsonObject
from tether.errors import ConfigError, MissingExtraError, ModelRetry
from tether.jsontypes import JsonValue
from tether.tools.base import Tool, ToolAnnotations, ToolContext
from tether.tools.builtin._mark import builtin
from tether.tools.builtin._sqltext import Backend, first_keyword, split_statements

if TYPE_CHECKING:
    import psycopg

__all__ = ["MAX_CELL_CHARS", "MAX_RESULT_CHARS", "split_statements", "sql_tool"]

MAX_CELL_CHARS = 2_000
"""Longer text in one cell is cut to this many characters (blobs become a summary)."""
MAX_RESULT_CHARS = 100_000
"""Rows stop being added once their JSON passes this many characters."""

_GRACE = 3.0  # seconds past the database's own time limit before the call is abandoned
_INT_RANGE = (-(2**63), 2**64)
_READ_KEYWORDS: dict[Backend, frozenset[str]] = {
    "sqlite": frozenset({"SELECT", "WITH", "VALUES", "EXPLAIN", "PRAGMA"}),
    "postgres": frozenset({"SELECT", "WITH", "VALUES", "TABLE", "SHOW", "EXPLAIN"}),
}
# COPY runs on the server before the driver can refuse it (TO PROGRAM, TO a file); the
# others would end or split the transaction the statement runs in (SQLite's authorizer
# denies them).
_NEVER: dict[Backend, frozenset[str]] = {
    "sqlite": frozenset(),
    "postgres": frozenset(
        {"COPY", "BEGIN", "START", "COMMIT", "END", "ROLLBACK", "ABORT", "SAVEPOINT"}
        | {"RELEASE", "PREPARE"}
    ),
}
_CONNINFO = re.compile(r"^\s*(postgres(ql)?://|[a-z_]+\s*=)", re.IGNORECASE)


# -- which statements may run ------------------------------------------------------------------


def _one_statement(sql: str, backend: Backend, read_only: bool) -> str:
    """``sql`` if it is one statement this tool may run, else a message saying why not."""
    try:
        statements = split_statements(sql, backend)
    except ValueError as exc:
        raise ModelRetry(f"the SQL cannot be read: {exc}") from None
    if len(statements) != 1:
        raise ModelRetry(
            f"send exactly one SQL statement per call, not {len(statements)}: "
            "make one call per statement"
        )
    keyword = first_keyword(statements[0], backend)
    if keyword in _NEVER[backend]:
        raise ModelRetry(f"{keyword} is not supported by this tool")
    if read_only and keyword not in _READ_KEYWORDS[backend]:
        allowed = ", ".join(sorted(_READ_KEYWORDS[backend]))
        raise ModelRetry(
            f"refused: this tool is read-only, and a statement starting with {keyword or '?'} "
            f"is not a query. Statements may start with {allowed}"
        )
    return statements[0]


# -- results as JSON ---------------------------------------------------------------------------


_MAX_VALUE_BYTES = 256 * 2**20
"""The largest string or blob a SQLite query may make or read (256 MiB: a stored value that
large still reads, as ``<N bytes>``); a cell shows far less."""


def _clip(text: str) -> str:
    if len(text) <= MAX_CELL_CHARS:
        return text
    return f"{text[:MAX_CELL_CHARS]}… [{len(text) - MAX_CELL_CHARS} more characters]"


def _cell(value: object) -> JsonValue:
    """A database value as JSON: exact where JSON allows, text (ISO dates) where not."""
    match value:
        case None | bool():
            return value
        case int():
            return value if _INT_RANGE[0] <= value < _INT_RANGE[1] else str(value)
        case float():
            return value if math.isfinite(value) else str(value)
        case str():
            return _clip(value)
        case bytes() | bytearray() | memoryview():
            data = bytes(cast(bytes, value))
            if len(data) * 4 > MAX_CELL_CHARS * 3:  # its base64 would not be shown anyway
                return f"<{len(data)} bytes>"
            return f"base64:{base64.b64encode(data).decode()}"
        case datetime() | date() | time_of_day():
            return value.isoformat()
        case list() | tuple():
            return _clip_json([_cell(v) for v in cast(Sequence[object], value)])
        case dict():
            items = cast(dict[object, object], value).items()
            return _clip_json({str(k): _cell(v) for k, v in items})
        case _:  # Decimal (kept exact), UUID, timedelta, intervals, network addresses
            return _clip(str(value))


def _clip_json(value: JsonValue) -> JsonValue:
    text = orjson.dumps(value).decode()
    return value if len(text) <= MAX_CELL_CHARS else _clip(text)


def _result(
    columns: list[str] | None, rows: Sequence[Sequence[object]], max_rows: int, affected: int
) -> JsonObject:
    if columns is None:
        return {"rows_affected": affected}
    out: list[JsonValue] = []
    size = 0
    truncated = len(rows) > max_rows
    for row in rows[:max_rows]:
        cells: list[JsonValue] = [_cell(v) for v in row]
        size += len(orjson.dumps(cells))
        if size > MAX_RESULT_CHARS and out:
            truncated = True
            break
        out.append(cells)
    result: JsonObject = {
        "columns": list[JsonValue](columns),
        "rows": out,
        "row_count": len(out),
        "truncated": truncated,
    }
    if truncated:
        result["note"] = (
            f"only the first {len(out)} rows are shown: add a LIMIT, aggregate, "
            "or narrow the WHERE clause"
        )
    if affected >= 0:
        result["rows_affected"] = affected  # RETURNING
    return result


# -- running a statement -----------------------------------------------------------------------


@frozen
class _Config:
    database: str
    backend: Backend
    read_only: bool
    max_rows: int
    timeout: float


Params = Sequence[Any] | Mapping[str, Any] | None


def _timed_out(cfg: _Config) -> ModelRetry:
    return ModelRetry(
        f"the query was stopped after {cfg.timeout:g}s, the time limit: make it cheaper "
        "(filter on indexed columns, add a LIMIT, avoid unbounded recursion)"
    )


def _refused_write(message: str) -> ModelRetry:
    return ModelRetry(
        f"refused: {message}. This tool is read-only and the database enforces it: "
        "only queries that read data can run"
    )


_SQLITE_READ = frozenset(
    {sqlite3.SQLITE_SELECT, sqlite3.SQLITE_READ, sqlite3.SQLITE_FUNCTION, sqlite3.SQLITE_RECURSIVE}
)
_SQLITE_WRITE = frozenset(
    getattr(sqlite3, f"SQLITE_{verb}_{temp}{what}")
    for verb in ("CREATE", "DROP")
    for temp in ("", "TEMP_")
    for what in ("INDEX", "TABLE", "TRIGGER", "VIEW")
) | {
    sqlite3.SQLITE_INSERT,
    sqlite3.SQLITE_UPDATE,
    sqlite3.SQLITE_DELETE,
    sqlite3.SQLITE_ALTER_TABLE,
}
# Schema introspection only; every other PRAGMA reads or changes settings of the connection.
_SQLITE_PRAGMAS = frozenset(
    {"table_info", "table_xinfo", "table_list", "index_list", "index_info", "index_xinfo"}
    | {"foreign_key_list"}
)


def _sqlite_authorizer(
    read_only: bool,
) -> Callable[[int, str | None, str | None, str | None, str | None], int]:
    """Allow what a statement of this mode may do, deny everything else (fail closed)."""

    def authorize(
        action: int, arg1: str | None, arg2: str | None, db: str | None, trigger: str | None
    ) -> int:
        if action == sqlite3.SQLITE_FUNCTION and (arg2 or "").lower() == "load_extension":
            return sqlite3.SQLITE_DENY
        if action in _SQLITE_READ or (not read_only and action in _SQLITE_WRITE):
            return sqlite3.SQLITE_OK
        if action == sqlite3.SQLITE_PRAGMA and (arg1 or "").lower() in _SQLITE_PRAGMAS:
            return sqlite3.SQLITE_OK
        return sqlite3.SQLITE_DENY  # ATTACH, DETACH, BEGIN/COMMIT, SAVEPOINT, other PRAGMAs

    return authorize


_SCHEMA_TABLES = 30
_SCHEMA_CHARS = 1500


def _names_missing(message: str) -> bool:
    """Whether the database said a table or column does not exist (a guessed name)."""
    lowered = message.lower()
    return (
        "no such column" in lowered
        or "no such table" in lowered
        or ("column" in lowered and "does not exist" in lowered)
        or ("relation" in lowered and "does not exist" in lowered)
    )


def _schema_hint(tables: list[tuple[str, str]]) -> str:
    """What the model reads after a guessed name: the tables and their columns, bounded."""
    if not tables:
        return ""
    listed = "; ".join(f"{name}({columns})" for name, columns in tables[:_SCHEMA_TABLES])
    if len(listed) > _SCHEMA_CHARS:
        listed = listed[:_SCHEMA_CHARS].rsplit(";", 1)[0] + "; ..."
    elif len(tables) > _SCHEMA_TABLES:
        listed += "; ..."
    return f". The tables and their columns: {listed}. Use these names"


def _sqlite_schema(db: sqlite3.Connection) -> list[tuple[str, str]]:
    """The tables and views with their columns (nothing if the schema cannot be read).

    The statement is tether's own, fixed and reading only, so the model's authorizer (which
    refuses some of the schema's internal reads) is lifted for it.
    """
    try:
        db.set_authorizer(None)
        return [
            (str(name), str(columns or ""))
            for name, columns in db.execute(
                "SELECT m.name, (SELECT group_concat(c.name, ', ') FROM pragma_table_info(m.name)"
                " AS c) FROM sqlite_master AS m WHERE m.type IN ('table', 'view') AND m.name"
                f" NOT LIKE 'sqlite_%' ORDER BY m.name LIMIT {_SCHEMA_TABLES + 1}"
            )
        ]
    except sqlite3.Error:
        return []


def _run_sqlite(cfg: _Config, sql: str, params: Params, stop: threading.Event) -> JsonObject:
    """One statement in one transaction, on a connection of its own (a worker thread)."""
    mode = "ro" if cfg.read_only else "rw"  # rw: a mistyped path is not created
    uri = f"{Path(cfg.database).resolve().as_uri()}?mode={mode}"
    deadline = time.monotonic() + cfg.timeout
    db = sqlite3.connect(uri, uri=True, isolation_level=None, timeout=cfg.timeout)
    try:
        db.setlimit(sqlite3.SQLITE_LIMIT_ATTACHED, 0)
        # no one value past this (randomblob(900000000) took 3 GB): SQLite refuses it
        db.setlimit(sqlite3.SQLITE_LIMIT_LENGTH, _MAX_VALUE_BYTES)
        if cfg.read_only:
            db.execute("PRAGMA query_only = ON")
        db.execute("BEGIN" if cfg.read_only else "BEGIN IMMEDIATE")
        db.set_authorizer(_sqlite_authorizer(cfg.read_only))
        db.set_progress_handler(lambda: int(stop.is_set() or time.monotonic() > deadline), 1000)
        try:
            cursor = db.execute(sql, () if params is None else params)
            columns = None if cursor.description is None else [d[0] for d in cursor.description]
            rows = [] if columns is None else cursor.fetchmany(cfg.max_rows + 1)
            affected = cursor.rowcount
            cursor.close()  # with RETURNING every change is made by the first step
        except (sqlite3.Error, sqlite3.Warning) as exc:
            message = str(exc)
            if message == "interrupted":
                raise _timed_out(cfg) from None
            if cfg.read_only and ("not authorized" in message or "readonly" in message):
                raise _refused_write(message) from None
            if message == "not authorized":
                message += (
                    " (this tool never allows ATTACH, DETACH, transaction control, extension "
                    "loading, or PRAGMAs other than schema introspection)"
                )
            if _names_missing(message):
                message += _schema_hint(_sqlite_schema(db))
            raise ModelRetry(f"the database rejected the query: {message}") from None
        db.set_progress_handler(None, 0)
        db.set_authorizer(None)
        db.execute("ROLLBACK" if cfg.read_only else "COMMIT")
        return _result(columns, rows, cfg.max_rows, affected if columns is None else -1)
    finally:
        db.close()  # an open transaction is rolled back: nothing is left half-written


async def _run_postgres(cfg: _Config, sql: str, params: Params) -> JsonObject:
    import psycopg

    try:
        async with asyncio.timeout(cfg.timeout + _GRACE):
            conn = await psycopg.AsyncConnection.connect(
                cfg.database, autocommit=True, connect_timeout=max(2, math.ceil(cfg.timeout))
            )
            try:
                return await _postgres_statement(conn, cfg, sql, params)
            except psycopg.Error as exc:
                error = _postgres_error(exc, cfg)
                if _names_missing(str(error)):
                    error = ModelRetry(f"{error}{_schema_hint(await _postgres_schema(conn))}")
                raise error from None
            finally:
                await conn.close()  # the server rolls back whatever was open
    except TimeoutError:
        raise _timed_out(cfg) from None


async def _postgres_statement(
    conn: psycopg.AsyncConnection[Any], cfg: _Config, sql: str, params: Params
) -> JsonObject:
    ms = str(max(1, int(cfg.timeout * 1000)))
    # Session settings first: a read-only default (should anything end the transaction),
    # the time limits, and standard strings (the tokeniser reads '\' as a plain character).
    await conn.execute(
        "SELECT set_config('statement_timeout', %s, false), set_config('lock_timeout', %s, false),"
        " set_config('idle_in_transaction_session_timeout', %s, false),"
        " set_config('default_transaction_read_only', %s, false),"
        " set_config('standard_conforming_strings', 'on', false)",
        [ms, ms, ms, "on" if cfg.read_only else "off"],
    )
    await conn.set_read_only(cfg.read_only)
    keyword = first_keyword(sql, "postgres")
    # A query runs in a server-side cursor, so that only the rows shown cross the wire.
    # WITH does not (DECLARE would reject a data-modifying one with a syntax error, where
    # the read-only transaction says what is wrong).
    # psycopg asks for literal SQL to keep values out of it; here the SQL is the model's by
    # design, and its values still travel as parameters.
    statement = cast(LiteralString, sql)
    declared = {"SELECT", "VALUES", "TABLE"}
    async with conn.transaction(force_rollback=cfg.read_only):
        if keyword in declared:
            async with conn.cursor(name="tether_sql") as server:
                await server.execute(statement, params or None)
                rows = await server.fetchmany(cfg.max_rows + 1)
                columns = [d.name for d in server.description or ()]
                return _result(columns, rows, cfg.max_rows, -1)
        if keyword == "WITH" and cfg.read_only:  # rows streamed: only those shown are kept
            async with conn.cursor() as cursor:
                kept: list[Any] = []
                async for row in cursor.stream(statement, params or None):
                    kept.append(row)
                    if len(kept) > cfg.max_rows:
                        break
                columns = [d.name for d in cursor.description or ()]
                return _result(columns, kept, cfg.max_rows, -1)
        async with conn.cursor() as cursor:
            await cursor.execute(statement, params or None, prepare=True)  # one statement only
            description = cursor.description
            columns = None if description is None else [d.name for d in description]
            rows = [] if columns is None else await cursor.fetchmany(cfg.max_rows + 1)
            affected = cursor.rowcount
            if columns is not None and cfg.read_only:
                affected = -1
            return _result(columns, rows, cfg.max_rows, affected)


async def _postgres_schema(conn: psycopg.AsyncConnection[Any]) -> list[tuple[str, str]]:
    """The tables and views on the search path with their columns (nothing on failure)."""
    import psycopg

    try:
        cursor = await conn.execute(
            "SELECT table_name, string_agg(column_name, ', ' ORDER BY ordinal_position)"
            " FROM information_schema.columns WHERE table_schema = ANY(current_schemas(false))"
            " GROUP BY table_name ORDER BY table_name LIMIT 31"  # _SCHEMA_TABLES + 1
        )
        rows = await cursor.fetchall()
    except psycopg.Error:
        return []
    return [(str(name), str(columns or "")) for name, columns in rows]


def _postgres_error(exc: Exception, cfg: _Config) -> ModelRetry:
    import psycopg

    if isinstance(exc, psycopg.errors.QueryCanceled):
        return _timed_out(cfg)
    diag = exc.diag if isinstance(exc, psycopg.Error) else None
    message = (diag.message_primary if diag is not None else None) or str(exc)
    # DECLARE, which read-only queries run in, refuses writes before the transaction does
    if isinstance(exc, psycopg.errors.ReadOnlySqlTransaction) or (
        cfg.read_only and ("data-modifying" in message or "INTO is not allowed" in message)
    ):
        return _refused_write(message)
    if diag is not None:
        message += "".join(f". {part}" for part in (diag.message_detail, diag.message_hint) if part)
    return ModelRetry(f"the database rejected the query: {message}")


# -- the tool ----------------------------------------------------------------------------------

_SCALAR: JsonObject = {"type": ["string", "number", "boolean", "null"]}


def _params_schema(backend: Backend) -> JsonObject:
    value: JsonObject = _SCALAR
    if backend == "postgres":  # lists bind as arrays: WHERE id = ANY(%s)
        value = {"anyOf": [_SCALAR, {"type": "array", "items": _SCALAR}]}
    return {
        "anyOf": [
            {"type": "array", "items": value},
            {"type": "object", "additionalProperties": value},
        ],
        "description": "The values for the placeholders: a list for positional ones, an "
        "object for named ones. Values are bound by the driver, never pasted into the SQL.",
    }


def _placeholders(backend: Backend) -> str:
    if backend == "sqlite":
        return "`?` placeholders with params as a list, or `:name` with params as an object"
    return (
        "`%s` placeholders with params as a list, or `%(name)s` with params as an object "
        "(when passing params, write a literal % as %%)"
    )


def _backend(database: str | Path, backend: Backend | None) -> Backend:
    if backend is not None:
        if backend not in ("sqlite", "postgres"):
            raise ConfigError(f"sql_tool: unknown backend {backend!r}; use 'sqlite' or 'postgres'")
        return backend
    if isinstance(database, str) and _CONNINFO.match(database):
        return "postgres"
    return "sqlite"


def sql_tool(
    database: str | Path,
    *,
    backend: Backend | None = None,
    read_only: bool = True,
    queries: Mapping[str, str] | None = None,
    max_rows: int = 200,
    timeout: float = 10.0,
    name: str = "sql_query",
) -> Tool:
    """A tool that runs one parameterized SQL statement per call and returns rows as JSON.

    Args:
        database: A SQLite file, or a PostgreSQL URL (``postgresql://…``) or conninfo.
        backend: ``"sqlite"`` or ``"postgres"``; guessed from ``database`` by default.
        read_only: Only reads, enforced by the database. ``False`` lets the model change
            data (the tool is then annotated destructive): prefer it with ``queries``.
        queries: Named statements; the model then only picks one by name and passes its
            parameters. The safest mode, and the one to use for writes.
        max_rows: Rows returned at most; the result says when there were more.
        timeout: Seconds a statement may run before the database stops it.
        name: The tool's name.
    """
    kind = _backend(database, backend)
    if max_rows < 1:
        raise ConfigError("sql_tool: max_rows must be at least 1")
    if not timeout > 0:
        raise ConfigError("sql_tool: timeout must be positive")
    if kind == "postgres":
        try:
            importlib.import_module("psycopg")  # fail now, not at the first call
        except ImportError:
            raise MissingExtraError("postgres", "psycopg") from None
    elif str(database) in ("", ":memory:"):
        raise ConfigError("sql_tool: give the path of a SQLite database file")
    cfg = _Config(
        database=str(database),
        backend=kind,
        read_only=read_only,
        max_rows=max_rows,
        timeout=timeout,
    )
    templates = _templates(queries, kind, read_only) if queries is not None else None
    mode = (
        "Read-only: the database refuses any change."
        if read_only
        else "It may change data: changes are committed when the statement succeeds."
    )
    limits = f"At most {max_rows} rows are returned; a statement may run for {timeout:g}s."
    if templates is None:
        query_schema: JsonObject = {"type": "string", "description": "One SQL statement."}
        description = (
            f"Run one SQL statement on a {'SQLite' if kind == 'sqlite' else 'PostgreSQL'} "
            f"database and get the rows as JSON. {mode} Pass values as params, never inside "
            f"the SQL text: use {_placeholders(kind)}. {limits}"
        )
    else:
        query_schema = {
            "type": "string",
            "enum": list[JsonValue](templates),
            "description": "Which query.",
        }
        listing = "\n".join(f"- {key}: {sql}" for key, sql in templates.items())
        description = (
            f"Run one of these named queries, passing the values for its placeholders as "
            f"params ({_placeholders(kind)}). {mode} {limits}\n{listing}"
        )

    async def run(ctx: ToolContext, arguments: Mapping[str, Any]) -> JsonObject:
        text = cast(str, arguments["query"])
        params = cast(Params, arguments.get("params"))
        sql = templates[text] if templates is not None else _one_statement(text, kind, read_only)
        if kind == "postgres":
            return await _run_postgres(cfg, sql, params)
        stop = threading.Event()
        try:
            return await in_daemon_thread(_run_sqlite, cfg, sql, params, stop)
        finally:
            stop.set()  # a cancelled call's worker thread stops at its next progress check

    annotations = (
        ToolAnnotations(read_only=True, idempotent=True, open_world=False)
        if read_only
        else ToolAnnotations(read_only=False, destructive=True, idempotent=False, open_world=False)
    )
    return builtin(
        Tool.from_schema(
            name=name,
            description=description,
            input_schema={
                "type": "object",
                "properties": {"query": query_schema, "params": _params_schema(kind)},
                "required": ["query"],
                "additionalProperties": False,
            },
            handler=run,
            annotations=annotations,
            timeout=timeout + 2 * _GRACE,  # the database's own limit answers first, and clearly
        )
    )


def _templates(queries: Mapping[str, str], backend: Backend, read_only: bool) -> dict[str, str]:
    if not queries:
        raise ConfigError("sql_tool: queries is empty; pass None to let the model write SQL")
    checked: dict[str, str] = {}
    for key, sql in queries.items():
        if not key or not isinstance(sql, str):  # pyright: ignore[reportUnnecessaryIsInstance]
            raise ConfigError(f"sql_tool: query {key!r} needs a name and SQL text")
        try:
            checked[key] = _one_statement(sql, backend, read_only)
        except ModelRetry as exc:
            raise ConfigError(f"sql_tool: query {key!r}: {exc.message}") from None
    return checked
