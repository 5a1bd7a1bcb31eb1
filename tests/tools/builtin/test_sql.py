"""``sql_tool`` on SQLite (a temporary file) and on a real PostgreSQL server.

PostgreSQL tests use ``$TETHER_TEST_POSTGRES`` (default: the local test server) and a
schema of their own, dropped afterwards. They are skipped, saying why, if no server answers.
"""

from __future__ import annotations

import asyncio
import os
import sqlite3
import sys
import threading
import uuid
from asyncio.subprocess import PIPE
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any, LiteralString, cast

import psycopg
import pytest
from hypothesis import given
from hypothesis import strategies as st
from psycopg.sql import SQL, Composed, Identifier

from tether.content import JsonObject, JsonValue
from tether.errors import ConfigError, MissingExtraError, ModelRetry
from tether.tools import Tool, ToolContext
from tether.tools.builtin import sql as sqlmod
from tether.tools.builtin.sql import MAX_CELL_CHARS, split_statements, sql_tool

CTX = ToolContext(run_id="run", call_id="call", tool="sql")
PG_URL = os.environ.get("TETHER_TEST_POSTGRES", "postgresql://postgres@127.0.0.1:5432/test")
INJECTION = "x' OR '1'='1'; DROP TABLE items; --"


async def call(t: Tool, arguments: JsonObject) -> dict[str, JsonValue]:
    result = await t.handler(CTX, t.validator(arguments))
    assert not result.is_error
    return cast(dict[str, JsonValue], result.structured)


async def refused(t: Tool, arguments: JsonObject, match: str) -> str:
    with pytest.raises(ModelRetry, match=match) as info:
        await t.handler(CTX, t.validator(arguments))
    return info.value.message


# -- SQLite ------------------------------------------------------------------------------------


@pytest.fixture
def db(tmp_path: Path) -> Path:
    path = tmp_path / "shop.db"
    conn = sqlite3.connect(path)
    conn.execute("CREATE TABLE items (id INTEGER PRIMARY KEY, name TEXT NOT NULL, price REAL)")
    conn.execute("CREATE INDEX items_by_name ON items (name)")
    conn.executemany(
        "INSERT INTO items VALUES (?, ?, ?)", [(i, f"item{i}", i * 1.5) for i in range(1, 11)]
    )
    conn.commit()
    conn.close()
    return path


def snapshot(path: Path) -> list[tuple[Any, ...]]:
    conn = sqlite3.connect(path)
    try:
        tables = conn.execute("SELECT name, sql FROM sqlite_master ORDER BY name").fetchall()
        return [*tables, *conn.execute("SELECT * FROM items ORDER BY id").fetchall()]
    finally:
        conn.close()


async def test_sqlite_reads_with_bound_params(db: Path) -> None:
    t = sql_tool(db)
    got = await call(
        t, {"query": "SELECT id, name FROM items WHERE id <= ? ORDER BY id", "params": [2]}
    )
    assert got == {
        "columns": ["id", "name"],
        "rows": [[1, "item1"], [2, "item2"]],
        "row_count": 2,
        "truncated": False,
    }
    named = await call(
        t, {"query": "SELECT price FROM items WHERE name = :n", "params": {"n": "item4"}}
    )
    assert named["rows"] == [[6.0]]


async def test_sqlite_a_value_too_large_to_show_is_refused_not_built(db: Path) -> None:
    # randomblob(900000000) was made whole (3 GB), base64-encoded, then shown as its size
    t = sql_tool(db)
    await refused(t, {"query": "SELECT randomblob(900000000)"}, "string or blob too big")
    shown = await call(t, {"query": "SELECT randomblob(300000)"})
    assert shown["rows"] == [["<300000 bytes>"]]
    with sqlite3.connect(db) as conn:  # a large value stored already still reads
        conn.execute("CREATE TABLE files (data BLOB)")
        conn.execute("INSERT INTO files VALUES (zeroblob(20000000))")
    stored = await call(t, {"query": "SELECT data, length(data) FROM files"})
    assert stored["rows"] == [["<20000000 bytes>", 20000000]]


async def test_sqlite_an_injection_payload_is_only_data(db: Path) -> None:
    t = sql_tool(db)
    got = await call(t, {"query": "SELECT id FROM items WHERE name = ?", "params": [INJECTION]})
    assert got["rows"] == []
    before = snapshot(db)
    w = sql_tool(db, read_only=False)
    await call(w, {"query": "INSERT INTO items (name) VALUES (?)", "params": [INJECTION]})
    stored = await call(t, {"query": "SELECT name FROM items WHERE id = 11"})
    assert stored["rows"] == [[INJECTION]]
    assert snapshot(db)[: len(before) - 10] == before[: len(before) - 10]  # schema unchanged


@pytest.mark.parametrize(
    "query",
    [
        "SELECT 1; SELECT 2",
        "SELECT 1; DELETE FROM items",
        "SELECT ';'; DELETE FROM items",
        "SELECT 1 /* ; */; DELETE FROM items -- ;",
    ],
)
async def test_sqlite_multiple_statements_are_refused(db: Path, query: str) -> None:
    before = snapshot(db)
    await refused(sql_tool(db, read_only=False), {"query": query}, "exactly one SQL statement")
    assert snapshot(db) == before


async def test_sqlite_the_driver_refuses_multiple_statements_too(db: Path) -> None:
    cfg = sqlmod._Config(  # pyright: ignore[reportPrivateUsage]
        database=str(db), backend="sqlite", read_only=False, max_rows=5, timeout=5
    )
    with pytest.raises(ModelRetry, match="one statement at a time"):
        sqlmod._run_sqlite(cfg, "SELECT 1; DELETE FROM items", None, threading.Event())  # pyright: ignore[reportPrivateUsage]
    assert len(snapshot(db)) == 12  # two schema rows, ten items


WRITES = [
    "INSERT INTO items (name) VALUES ('new')",
    "UPDATE items SET price = 0",
    "DELETE FROM items",
    "DROP TABLE items",
    "CREATE TABLE other (x)",
    "CREATE TEMP TABLE other (x)",
    "ALTER TABLE items ADD COLUMN y",
    "ATTACH DATABASE ':memory:' AS side",
    "PRAGMA user_version = 7",
    "PRAGMA journal_mode = DELETE",
    "WITH x AS (SELECT 1) DELETE FROM items",
    "WITH x AS (SELECT 1) INSERT INTO items (name) SELECT 'w' FROM x",
    "REPLACE INTO items VALUES (1, 'r', 0)",
    "VACUUM INTO 'copy.db'",
    "SELECT load_extension('x')",
    "BEGIN",
    "COMMIT",
    "REINDEX",
]


@pytest.mark.parametrize("query", WRITES)
async def test_sqlite_read_only_refuses_writes(db: Path, query: str) -> None:
    before = snapshot(db)
    await refused(sql_tool(db), {"query": query}, "refused")
    assert snapshot(db) == before


@pytest.mark.parametrize("query", WRITES)
def test_sqlite_the_database_alone_refuses_writes(db: Path, query: str, tmp_path: Path) -> None:
    """Without the keyword check: mode=ro, query_only and the authorizer stop every one."""
    cfg = sqlmod._Config(  # pyright: ignore[reportPrivateUsage]
        database=str(db), backend="sqlite", read_only=True, max_rows=5, timeout=5
    )
    before = snapshot(db)
    with pytest.raises(ModelRetry):
        sqlmod._run_sqlite(cfg, query, None, threading.Event())  # pyright: ignore[reportPrivateUsage]
    assert snapshot(db) == before
    assert not (tmp_path / "copy.db").exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["shop.db"]


async def test_sqlite_schema_introspection_is_allowed(db: Path) -> None:
    t = sql_tool(db)
    info = await call(t, {"query": "PRAGMA table_info(items)"})
    assert [row[1] for row in cast(list[list[JsonValue]], info["rows"])] == ["id", "name", "price"]
    tables = await call(t, {"query": "SELECT name FROM sqlite_master WHERE type = 'table'"})
    assert tables["rows"] == [["items"]]


async def test_sqlite_write_mode_commits_and_is_annotated_destructive(db: Path) -> None:
    w = sql_tool(db, read_only=False)
    assert w.annotations.is_destructive
    assert not w.annotations.is_idempotent
    r = sql_tool(db)
    assert r.annotations.is_read_only
    assert r.annotations.is_idempotent
    assert not r.annotations.is_open_world
    assert await call(
        w, {"query": "UPDATE items SET price = ? WHERE id > ?", "params": [0, 8]}
    ) == {"rows_affected": 2}
    assert (await call(r, {"query": "SELECT count(*) FROM items WHERE price = 0"}))["rows"] == [[2]]


async def test_sqlite_write_mode_still_refuses_attach_and_transaction_control(db: Path) -> None:
    w = sql_tool(db, read_only=False)
    for query in ("ATTACH DATABASE ':memory:' AS side", "COMMIT", "PRAGMA user_version = 3"):
        await refused(w, {"query": query}, "not authorized")


async def test_sqlite_a_failed_write_leaves_nothing_half_written(db: Path) -> None:
    w = sql_tool(db, read_only=False)
    before = snapshot(db)
    # ids 9..13: 9 and 10 would insert fine before 11 hits NOT NULL
    query = (
        "INSERT INTO items SELECT id + 10, CASE WHEN id = 3 THEN NULL ELSE 'n' END, 0 FROM items"
    )
    await refused(w, {"query": query}, "NOT NULL")
    assert snapshot(db) == before


async def test_sqlite_returning_past_the_row_cap_still_commits_every_row(db: Path) -> None:
    w = sql_tool(db, read_only=False, max_rows=3)
    got = await call(w, {"query": "UPDATE items SET price = -1 RETURNING id"})
    assert got["row_count"] == 3
    assert got["truncated"] is True
    check = await call(sql_tool(db), {"query": "SELECT count(*) FROM items WHERE price = -1"})
    assert check["rows"] == [[10]]


async def test_sqlite_row_cap_and_values_become_json(db: Path) -> None:
    t = sql_tool(db, max_rows=4)
    got = await call(t, {"query": "SELECT id FROM items ORDER BY id"})
    assert got["rows"] == [[1], [2], [3], [4]]
    assert got["truncated"] is True
    assert "LIMIT" in cast(str, got["note"])
    values = await call(
        t,
        {
            "query": "SELECT x'00ff', zeroblob(5000), ?, 9223372036854775807, 1e999, NULL",
            "params": ["é" * (MAX_CELL_CHARS + 5)],
        },
    )
    row = cast(list[list[JsonValue]], values["rows"])[0]
    assert row[0] == "base64:AP8="
    assert row[1] == "<5000 bytes>"
    assert row[2] == "é" * MAX_CELL_CHARS + "… [5 more characters]"
    assert row[3:] == [9223372036854775807, "inf", None]


async def test_sqlite_errors_are_retried_with_the_database_message(db: Path) -> None:
    t = sql_tool(db)
    await refused(t, {"query": "SELECT * FROM nope"}, "no such table: nope")
    await refused(t, {"query": "SELECT * FRM items"}, "syntax error")
    await refused(t, {"query": "SELECT ?", "params": [1, 2]}, "bindings")
    await refused(t, {"query": "SELECT 'open"}, "cannot be read")


async def test_sqlite_a_guessed_name_is_answered_with_the_tables_and_columns(db: Path) -> None:
    t = sql_tool(db)
    for query in ("SELECT nme FROM items", "SELECT * FROM products"):
        message = await refused(t, {"query": query}, "no such")
        assert "The tables and their columns: items(id, name, price). Use these names" in message
    syntax = await refused(t, {"query": "SELECT * FRM items"}, "syntax error")
    assert "columns" not in syntax  # only a guessed name gets the schema


def test_the_schema_hint_is_bounded() -> None:
    tables = [(f"table_{i:03}", ", ".join(f"column_{j}" for j in range(20))) for i in range(40)]
    hint = sqlmod._schema_hint(tables)  # pyright: ignore[reportPrivateUsage]
    assert len(hint) < 1700
    assert hint.endswith("; .... Use these names")
    assert sqlmod._schema_hint([]) == ""  # pyright: ignore[reportPrivateUsage]


async def test_sqlite_a_runaway_query_is_stopped_at_the_timeout(db: Path) -> None:
    t = sql_tool(db, timeout=0.3)
    runaway = "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c) SELECT max(x) FROM c"
    await refused(t, {"query": runaway}, r"stopped after 0.3s")
    assert t.timeout is not None
    assert t.timeout > 0.3  # the loop's own timeout comes later than the database's


async def test_sqlite_named_queries_mode(db: Path) -> None:
    t = sql_tool(
        db,
        read_only=False,
        queries={
            "price_of": "SELECT price FROM items WHERE name = ?",
            "rename": "UPDATE items SET name = :new WHERE id = :id",
        },
    )
    schema = cast(dict[str, Any], t.definition.input_schema)
    assert schema["properties"]["query"]["enum"] == ["price_of", "rename"]
    assert "UPDATE items SET name = :new" in t.definition.description
    assert (await call(t, {"query": "price_of", "params": ["item2"]}))["rows"] == [[3.0]]
    await call(t, {"query": "rename", "params": {"new": INJECTION, "id": 1}})
    assert (await call(t, {"query": "price_of", "params": [INJECTION]}))["rows"] == [[1.5]]
    with pytest.raises(ModelRetry, match="is not one of"):
        t.validator({"query": "DELETE FROM items"})


def test_misconfiguration_is_a_config_error(db: Path) -> None:
    with pytest.raises(ConfigError, match="exactly one"):
        sql_tool(db, queries={"two": "SELECT 1; SELECT 2"})
    with pytest.raises(ConfigError, match="read-only"):
        sql_tool(db, queries={"wipe": "DELETE FROM items"})
    with pytest.raises(ConfigError, match="empty"):
        sql_tool(db, queries={})
    with pytest.raises(ConfigError, match="max_rows"):
        sql_tool(db, max_rows=0)
    with pytest.raises(ConfigError, match="timeout"):
        sql_tool(db, timeout=0)
    with pytest.raises(ConfigError, match="path"):
        sql_tool(":memory:")
    with pytest.raises(ConfigError, match="tool name"):
        sql_tool(db, name="bad name")


async def test_a_missing_database_file_is_not_created(tmp_path: Path) -> None:
    for read_only in (True, False):
        t = sql_tool(tmp_path / "typo.db", read_only=read_only)
        with pytest.raises(sqlite3.OperationalError):
            await t.handler(CTX, {"query": "SELECT 1"})
    assert list(tmp_path.iterdir()) == []


def test_postgres_without_psycopg_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "psycopg", None)
    with pytest.raises(MissingExtraError, match=r"tether\[postgres\]"):
        sql_tool("postgresql://localhost/x")


def test_the_backend_is_guessed_from_the_database() -> None:
    guess = sqlmod._backend  # pyright: ignore[reportPrivateUsage]
    assert guess("postgresql://u@h/db", None) == "postgres"
    assert guess("postgres://u@h/db", None) == "postgres"
    assert guess("host=h dbname=db", None) == "postgres"
    assert guess("data/shop.db", None) == "sqlite"
    assert guess(Path("host=h"), None) == "sqlite"
    assert guess("x.db", "postgres") == "postgres"


# -- the tokeniser -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("sql", "backend", "count"),
    [
        ("SELECT 1", "sqlite", 1),
        ("SELECT 1;", "sqlite", 1),
        ("SELECT 1; -- done", "sqlite", 1),
        ("SELECT 1; /* ; */ ;;", "sqlite", 1),
        ("SELECT 'a;''b'", "sqlite", 1),
        ('SELECT "x;""y" FROM t', "sqlite", 1),
        ("SELECT `a;b`, [c;d] FROM t", "sqlite", 1),
        ("SELECT 1; SELECT 2", "sqlite", 2),
        ("SELECT $$a;b$$", "postgres", 1),
        ("SELECT $fn$ ; $x$ ; $fn$", "postgres", 1),
        ("SELECT $1; SELECT $2", "postgres", 2),
        ("SELECT E'\\';' ", "postgres", 1),
        ("SELECT 'a\\'; DELETE FROM t; --'", "postgres", 2),  # standard strings: \ is plain
        ("SELECT /* /* ; */ ; */ 1", "postgres", 1),
        ("SELECT /* /* */ 1; SELECT 2", "sqlite", 2),  # SQLite does not nest comments
        ("SELECT a$b$; SELECT 2", "postgres", 2),  # $ inside an identifier quotes nothing
        ("", "sqlite", 0),
        (" -- only a comment", "postgres", 0),
    ],
)
def test_split_statements(sql: str, backend: sqlmod.Backend, count: int) -> None:
    assert len(split_statements(sql, backend)) == count


@pytest.mark.parametrize(
    "sql", ["SELECT 'open", 'SELECT "open', "SELECT /* open", "SELECT $x$ open"]
)
def test_unterminated_text_is_refused(sql: str) -> None:
    with pytest.raises(ValueError, match="unterminated"):
        split_statements(sql, "postgres")


@given(st.lists(st.text(st.characters(blacklist_characters="'\x00")), min_size=1, max_size=4))
def test_semicolons_inside_literals_never_split(parts: list[str]) -> None:
    literals = ", ".join("'" + p.replace("'", "''") + "'" for p in parts)
    for backend in ("sqlite", "postgres"):
        assert split_statements(f"SELECT {literals}; SELECT 2", backend) == [
            f"SELECT {literals}",
            "SELECT 2",
        ]


@given(st.text(st.characters(blacklist_characters="\x00")))
def test_sqlite_agrees_that_what_we_pass_is_one_statement(sql: str) -> None:
    """Whatever the tokeniser accepts as one statement, SQLite does not run two of."""
    try:
        statements = split_statements(sql, "sqlite")
    except ValueError:
        return
    if len(statements) != 1:
        return
    conn = sqlite3.connect(":memory:")
    message = ""
    try:
        conn.execute(statements[0])
    except (sqlite3.Error, sqlite3.Warning, OverflowError, ValueError) as exc:
        message = str(exc)
    finally:
        conn.close()
    assert "one statement" not in message


# -- PostgreSQL --------------------------------------------------------------------------------


def on(schema: str, text: LiteralString) -> Composed:
    """``text`` with ``{s}`` standing for the test's schema."""
    return SQL(text).format(s=Identifier(schema))


@pytest.fixture
async def pg() -> AsyncIterator[str]:
    """A schema of its own with a table and a sequence; dropped afterwards."""
    try:
        conn = await psycopg.AsyncConnection.connect(PG_URL, autocommit=True, connect_timeout=3)
    except psycopg.OperationalError as exc:
        pytest.skip(f"no PostgreSQL server at {PG_URL}: {exc}")
    schema = f"tether_sql_{uuid.uuid4().hex[:12]}"
    try:
        await conn.execute(on(schema, "CREATE SCHEMA {s}"))
        await conn.execute(
            on(
                schema,
                "CREATE TABLE {s}.items (id int PRIMARY KEY, name text NOT NULL, price numeric,"
                " seen timestamptz DEFAULT '2024-01-02T03:04:05Z', raw bytea DEFAULT '\\x0102',"
                " meta jsonb DEFAULT '{{\"k\": [1]}}')",
            )
        )
        await conn.execute(
            on(
                schema,
                "INSERT INTO {s}.items (id, name, price)"
                " SELECT g, 'item' || g, g * 1.5 FROM generate_series(1, 10) g",
            )
        )
        await conn.execute(on(schema, "CREATE SEQUENCE {s}.counter"))
        yield schema
    finally:
        await conn.execute(on(schema, "DROP SCHEMA IF EXISTS {s} CASCADE"))
        await conn.close()


async def pg_snapshot(schema: str) -> list[tuple[Any, ...]]:
    """The items, the schema's tables and the sequence's state."""
    async with await psycopg.AsyncConnection.connect(PG_URL) as conn:
        rows = await (
            await conn.execute(on(schema, "SELECT * FROM {s}.items ORDER BY id"))
        ).fetchall()
        tables = await (
            await conn.execute(
                "SELECT table_name FROM information_schema.tables WHERE table_schema = %s",
                [schema],
            )
        ).fetchall()
        seq = await (
            await conn.execute(on(schema, "SELECT last_value, is_called FROM {s}.counter"))
        ).fetchall()
        return [*rows, *sorted(tables), *seq]


async def test_postgres_a_guessed_name_is_answered_with_the_tables_and_columns(pg: str) -> None:
    t = sql_tool(f"{PG_URL}?options=-csearch_path%3D{pg}")
    for query in ("SELECT nme FROM items", "SELECT * FROM products"):
        message = await refused(t, {"query": query}, "does not exist")
        assert "items(id, name, price, seen, raw, meta)" in message


async def test_postgres_reads_with_bound_params_and_json_values(pg: str) -> None:
    t = sql_tool(PG_URL)
    got = await call(
        t,
        {
            "query": f"SELECT id, price, seen, raw, meta FROM {pg}.items WHERE id = %s",
            "params": [2],
        },
    )
    assert got["columns"] == ["id", "price", "seen", "raw", "meta"]
    assert got["rows"] == [[2, "3.0", "2024-01-02T03:04:05+00:00", "base64:AQI=", {"k": [1]}]]
    named = await call(
        t, {"query": f"SELECT id FROM {pg}.items WHERE name = %(n)s", "params": {"n": "item3"}}
    )
    assert named["rows"] == [[3]]
    arrays = await call(
        t,
        {"query": f"SELECT id FROM {pg}.items WHERE id = ANY(%s) ORDER BY id", "params": [[1, 4]]},
    )
    assert arrays["rows"] == [[1], [4]]
    literal = await call(t, {"query": f"SELECT count(*) FROM {pg}.items WHERE name LIKE 'item1%'"})
    assert literal["rows"] == [[2]]
    empty = await call(t, {"query": f"SELECT id, name FROM {pg}.items WHERE false"})
    assert empty == {"columns": ["id", "name"], "rows": [], "row_count": 0, "truncated": False}


async def test_postgres_an_injection_payload_is_only_data(pg: str) -> None:
    before = await pg_snapshot(pg)
    t = sql_tool(PG_URL)
    got = await call(
        t, {"query": f"SELECT id FROM {pg}.items WHERE name = %s", "params": [INJECTION]}
    )
    assert got["rows"] == []
    assert await pg_snapshot(pg) == before


async def test_postgres_row_cap(pg: str) -> None:
    got = await call(sql_tool(PG_URL, max_rows=3), {"query": "SELECT generate_series(1, 1000000)"})
    assert got["rows"] == [[1], [2], [3]]
    assert got["truncated"] is True


_WITH_PEAK = """
import asyncio, re, sys
from tether.tools.builtin import sql_tool
from tether.tools.base import ToolContext
t = sql_tool(sys.argv[1])
q = "WITH q AS (SELECT 1) SELECT g, repeat('x', 100) FROM generate_series(1, 3000000) g"
r = asyncio.run(t.handler(ToolContext(run_id="r", call_id="c", tool="s"), t.validator({"query": q})))
assert r.structured["truncated"] is True, r
status = open("/proc/self/status").read()  # this process's own peak (ru_maxrss keeps a parent's)
print(int(re.search(r"VmHWM:\\s+(\\d+) kB", status).group(1)) // 1024)
"""


async def test_postgres_a_with_query_keeps_only_the_rows_shown(pg: str) -> None:
    # a WITH query ran on a client-side cursor: all 3,000,000 rows came over (497 MB)
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-c", _WITH_PEAK, PG_URL, stdout=PIPE, stderr=PIPE
    )
    out, err = await proc.communicate()
    assert proc.returncode == 0, err.decode()
    assert int(out) < 200, f"peak RSS {out.decode().strip()} MiB"  # 52 MiB here


PG_WRITES = [
    "INSERT INTO {s}.items (id, name) VALUES (99, 'x')",
    "UPDATE {s}.items SET price = 0",
    "DELETE FROM {s}.items",
    "DROP TABLE {s}.items",
    "CREATE TABLE {s}.other (x int)",
    "TRUNCATE {s}.items",
    "WITH d AS (DELETE FROM {s}.items RETURNING id) SELECT count(*) FROM d",
    "WITH x AS (SELECT 1) UPDATE {s}.items SET name = 'w'",
    "SELECT * INTO {s}.copy FROM {s}.items",
    "SELECT nextval('{s}.counter')",
    "SELECT setval('{s}.counter', 50)",
    "SET default_transaction_read_only = off",
    "COMMIT",
    "COPY {s}.items TO STDOUT",
]


@pytest.mark.parametrize("query", PG_WRITES)
async def test_postgres_read_only_refuses_writes(pg: str, query: str) -> None:
    before = await pg_snapshot(pg)
    await refused(sql_tool(PG_URL), {"query": query.format(s=pg)}, "refused|not supported")
    assert await pg_snapshot(pg) == before


@pytest.mark.parametrize("query", PG_WRITES[:11])
async def test_postgres_the_database_alone_refuses_writes(pg: str, query: str) -> None:
    """Without the keyword check: the read-only transaction stops every one."""
    cfg = sqlmod._Config(  # pyright: ignore[reportPrivateUsage]
        database=PG_URL, backend="postgres", read_only=True, max_rows=5, timeout=5
    )
    before = await pg_snapshot(pg)
    with pytest.raises(ModelRetry, match="refused"):
        await sqlmod._run_postgres(cfg, query.format(s=pg), None)  # pyright: ignore[reportPrivateUsage]
    assert await pg_snapshot(pg) == before


async def test_postgres_multiple_statements_are_refused_by_us_and_by_the_server(pg: str) -> None:
    before = await pg_snapshot(pg)
    query = f"SELECT 1; DELETE FROM {pg}.items"
    await refused(sql_tool(PG_URL, read_only=False), {"query": query}, "exactly one")
    cfg = sqlmod._Config(  # pyright: ignore[reportPrivateUsage]
        database=PG_URL, backend="postgres", read_only=False, max_rows=5, timeout=5
    )
    with pytest.raises(ModelRetry, match="multiple commands"):
        await sqlmod._run_postgres(cfg, f"DELETE FROM {pg}.items; SELECT 1", None)  # pyright: ignore[reportPrivateUsage]
    assert await pg_snapshot(pg) == before


async def test_postgres_write_mode_commits_or_leaves_nothing(pg: str) -> None:
    w = sql_tool(PG_URL, read_only=False, max_rows=2)
    got = await call(
        w, {"query": f"UPDATE {pg}.items SET price = 0 WHERE id > %s RETURNING id", "params": [6]}
    )
    assert got["rows_affected"] == 4
    assert got["row_count"] == 2
    assert got["truncated"] is True
    r = sql_tool(PG_URL)
    assert (await call(r, {"query": f"SELECT count(*) FROM {pg}.items WHERE price = 0"}))[
        "rows"
    ] == [[4]]
    before = await pg_snapshot(pg)
    failing = f"INSERT INTO {pg}.items (id, name) SELECT id + 100, CASE WHEN id = 5 THEN NULL ELSE 'n' END FROM {pg}.items"
    await refused(w, {"query": failing}, "null value")
    await refused(w, {"query": "COMMIT"}, "not supported")
    assert await pg_snapshot(pg) == before


async def test_postgres_named_queries_mode(pg: str) -> None:
    t = sql_tool(
        PG_URL,
        read_only=False,
        queries={"rename": f"UPDATE {pg}.items SET name = %(new)s WHERE id = %(id)s"},
    )
    assert await call(t, {"query": "rename", "params": {"new": INJECTION, "id": 1}}) == {
        "rows_affected": 1
    }
    check = await call(sql_tool(PG_URL), {"query": f"SELECT name FROM {pg}.items WHERE id = 1"})
    assert check["rows"] == [[INJECTION]]


async def test_postgres_a_slow_query_is_cancelled_at_the_timeout(pg: str) -> None:
    await refused(
        sql_tool(PG_URL, timeout=0.5), {"query": "SELECT pg_sleep(5)"}, "stopped after 0.5s"
    )


async def test_postgres_errors_are_retried_with_the_database_message(pg: str) -> None:
    t = sql_tool(PG_URL)
    await refused(t, {"query": f"SELECT * FROM {pg}.nope"}, "does not exist")
    await refused(t, {"query": "SELECT %s", "params": [1, 2]}, "placeholders")
