"""Memory in PostgreSQL (shared by many workers): ``tsvector`` keywords, float32 vectors.

One table holds the records (``<table>``), with a generated ``tsvector`` column under a GIN
index; a second (``<table>_versions``) counts each namespace's writes. Vectors are stored
as float32 ``bytea`` (the ``pgvector`` extension is not in Debian bookworm's packages), and
nearest-vector search is exact: each process holds a namespace's vectors as one normalized
numpy matrix, rebuilt when the namespace's version moved (a write by any worker), and a
query is one matrix product. ``bench/memory.py`` measures how far that stays fast.
"""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, LiteralString, cast

from tether.errors import (
    ConfigError,
    InvalidEntry,
    MissingExtraError,
    StoreBusy,
    StoreError,
    StoreUnavailable,
)
from tether.memory.base import Memory, MemoryQuery, MemoryRecord, MemorySearch, moment
from tether.memory.embedder import Embedder
from tether.memory.ranking import (
    MATCH_BUDGET,
    Vectors,
    budgeted,
    caps_of,
    embedded,
    evictions,
    fuse,
    other_vectors,
    words,
)
from tether.memory.ranking import probe as probe_of
from tether.memory.rows import COLUMNS, record_from_row, row_values, upsert_sql
from tether.memory.vectors import VectorMatrix, nearest_rows

if TYPE_CHECKING:
    import psycopg

__all__ = ["PostgresMemory"]

_TABLE = re.compile(r"[a-z_][a-z0-9_]{0,50}")

_COLUMNS = "rid, " + COLUMNS


class PostgresMemory(Memory):
    """Long-term memory in a PostgreSQL database, shared by every process that opens it.

    ``conninfo``: a libpq connection string or URL. ``table``: the records' table (made if
    missing). ``statement_timeout``: the seconds a statement may take, waiting for locks
    included, before it fails (``StoreBusy``). ``embedder`` and ``caps`` as for every backend. Needs ``psycopg``
    (``pip install "tether[postgres]"``) and, for vector search, ``numpy`` (``tether[memory]``).
    """

    def __init__(
        self,
        conninfo: str,
        *,
        table: str = "tether_memory",
        embedder: Embedder | None = None,
        caps: Mapping[str, int] | None = None,
        connect_timeout: int = 10,
        statement_timeout: float = 30.0,
    ) -> None:
        if not _TABLE.fullmatch(table):
            raise ConfigError(
                f"PostgresMemory(table={table!r}): use lowercase letters, digits and _"
            )
        self.conninfo = conninfo
        self.table = table
        self.embedder = embedder
        self.caps = caps_of(caps)
        if not 0 < statement_timeout <= 2_000_000:  # PostgreSQL's own limit is 2**31 ms
            raise ConfigError(
                f"PostgresMemory(statement_timeout={statement_timeout!r}): use seconds, more "
                "than 0 and at most 2,000,000"
            )
        self._timeout = connect_timeout
        self._statement_timeout = statement_timeout
        self._conn: psycopg.AsyncConnection[Any] | None = None
        self._lock = asyncio.Lock()
        self._matrices: dict[tuple[str, str, int], tuple[int, VectorMatrix]] = {}
        self._vectors_held: dict[str, tuple[int, frozenset[Vectors]]] = {}
        self._closed = False

    async def _connection(self) -> psycopg.AsyncConnection[Any]:
        if self._closed:
            raise StoreError(f"the memory in table {self.table} is closed")
        if self._conn is not None and not self._conn.closed:
            return self._conn
        try:
            import psycopg
        except ImportError:
            raise MissingExtraError("postgres", "psycopg") from None
        try:
            conn = await psycopg.AsyncConnection.connect(
                self.conninfo, autocommit=True, connect_timeout=self._timeout
            )
        except psycopg.Error as exc:
            raise StoreUnavailable(
                f"cannot connect to the memory's PostgreSQL ({_first_line(exc)}): check that "
                "the server runs and that the connection string is right"
            ) from None
        try:
            # a lock another session holds (a migration, a VACUUM FULL, an open transaction)
            # would make a search wait for ever, and the run with it
            await _exec(
                conn,
                f"SET statement_timeout = {max(1, round(self._statement_timeout * 1000))}",
            )
            await self._create(conn)
        except psycopg.errors.QueryCanceled:
            await conn.close()
            raise self._busy("making its tables") from None
        except psycopg.Error as exc:
            await conn.close()
            raise StoreUnavailable(
                f"cannot create the memory's tables {self.table} in PostgreSQL "
                f"({_first_line(exc)}): check that this user may create tables there"
            ) from None
        self._conn = conn
        return conn

    async def _create(self, conn: psycopg.AsyncConnection[Any]) -> None:
        t = self.table
        async with conn.transaction():
            await _exec(conn, "SELECT pg_advisory_xact_lock(hashtext(%s))", (t,))
            await _exec(
                conn,
                f"CREATE TABLE IF NOT EXISTS {t} ("
                "rid BIGSERIAL PRIMARY KEY, namespace TEXT NOT NULL, id TEXT NOT NULL, "
                "text TEXT NOT NULL, kind TEXT NOT NULL, metadata JSONB NOT NULL, "
                "embedding BYTEA, embedding_model TEXT, dims INTEGER, "
                "created DOUBLE PRECISION NOT NULL, expires DOUBLE PRECISION, "
                "importance DOUBLE PRECISION NOT NULL, run_id TEXT, event_seq BIGINT, "
                "tsv TSVECTOR GENERATED ALWAYS AS (to_tsvector('english', text)) STORED, "
                "UNIQUE (namespace, id))",
            )
            await _widen_event_seq(conn, t)
            await _exec(conn, f"CREATE INDEX IF NOT EXISTS {t}_tsv ON {t} USING GIN (tsv)")
            await _exec(
                conn,
                f"CREATE INDEX IF NOT EXISTS {t}_vectors ON {t} (namespace, embedding_model, dims)",
            )
            await _exec(
                conn,
                f"CREATE TABLE IF NOT EXISTS {t}_versions ("
                "namespace TEXT PRIMARY KEY, version BIGINT NOT NULL)",
            )

    async def _do(self, doing: str, work: Any) -> Any:
        import psycopg

        async with self._lock:
            retried = False
            while True:
                conn = await self._connection()
                try:
                    return await work(conn)
                except psycopg.errors.QueryCanceled:
                    raise self._busy(doing) from None
                except psycopg.errors.ProgramLimitExceeded as exc:  # what SQLite and Redis keep
                    raise InvalidEntry(
                        f"the memory's PostgreSQL cannot hold what was given while {doing} "
                        f"({_first_line(exc)}): keep a record's id under 1,000 characters and "
                        "split a text of megabytes into several records (KnowledgeBase chunks "
                        "a document); nothing of this write was stored"
                    ) from None
                except psycopg.Error as exc:
                    if not conn.broken:
                        raise StoreError(
                            f"the memory's PostgreSQL failed while {doing}: {_first_line(exc)}"
                        ) from None
                    # the server ended the session (a restart, a failover, an idle session
                    # killed): the work is done once more on a new connection. A write is an
                    # upsert, as harmless twice; a delete that had committed counts 0 again
                    await conn.close()
                    self._conn = None
                    if retried:
                        raise StoreUnavailable(
                            f"the memory's PostgreSQL closed the connection while {doing}, "
                            f"twice ({_first_line(exc)}): check that the server runs and "
                            "accepts this user's sessions"
                        ) from None
                    retried = True

    def _busy(self, doing: str) -> StoreBusy:
        return StoreBusy(
            f"the memory's PostgreSQL took longer than {self._statement_timeout:g} s while "
            f"{doing} (statement_timeout), most likely waiting for a lock another session "
            f"holds on {self.table}: end that session's transaction, or give "
            "PostgresMemory(statement_timeout=...) more seconds"
        )

    async def close(self) -> None:
        """Close the connection."""
        self._closed = True
        async with self._lock:
            if self._conn is not None:
                await self._conn.close()
                self._conn = None

    async def upsert(self, records: Sequence[MemoryRecord]) -> list[str]:
        """Store records (see ``Memory.upsert``)."""
        ready = await embedded(records, self.embedder)
        now = datetime.now(UTC).timestamp()
        t = self.table

        async def write(conn: psycopg.AsyncConnection[Any]) -> list[str]:
            async with conn.transaction():
                statement = upsert_sql(t, "%s", metadata_cast="::jsonb")
                for r in ready:
                    await _exec(conn, statement, row_values(r, now))
                for namespace in sorted({r.namespace for r in ready}):
                    await self._cap(conn, namespace, now)
                    await self._bump(conn, namespace)
            return [r.id for r in ready]

        return await self._do("storing memory records", write)

    async def get(self, namespace: str, ids: Sequence[str]) -> list[MemoryRecord]:
        """The live records with these ids (see ``Memory.get``)."""
        wanted = list(dict.fromkeys(ids))
        now = datetime.now(UTC).timestamp()

        async def read(conn: psycopg.AsyncConnection[Any]) -> list[MemoryRecord]:
            cursor = await _exec(
                conn,
                f"SELECT {_COLUMNS} FROM {self.table} WHERE namespace = %s AND id = ANY(%s) "
                "AND (expires IS NULL OR expires > %s)",
                (namespace, wanted, now),
            )
            found = {r.id: r for r in map(record_from_row, await cursor.fetchall())}
            return [found[i] for i in wanted if i in found]

        return await self._do("reading memory records", read)

    async def delete(self, namespace: str, ids: Sequence[str]) -> int:
        """Delete records (see ``Memory.delete``)."""
        wanted = list(dict.fromkeys(ids))

        async def remove(conn: psycopg.AsyncConnection[Any]) -> int:
            async with conn.transaction():
                cursor = await _exec(
                    conn,
                    f"DELETE FROM {self.table} WHERE namespace = %s AND id = ANY(%s)",
                    (namespace, wanted),
                )
                await self._bump(conn, namespace)
                return cursor.rowcount

        return await self._do("deleting memory records", remove)

    async def search(self, query: MemoryQuery) -> MemorySearch:
        """Rank by ``ts_rank_cd`` and by cosine, fused (see ``Memory.search``)."""
        probed = await probe_of(query, self.embedder)
        now = datetime.now(UTC).timestamp()

        async def find(conn: psycopg.AsyncConnection[Any]) -> MemorySearch:
            version = 0
            if probed.vector is not None:
                version = await self._version(conn, query.namespace)
                held = await self._held(conn, query.namespace, version)
                mode, warning, probe, model, pool = other_vectors(probed, held, query.namespace)
            else:
                mode, warning, probe, model, pool = probed
            keyword = await self._keyword(conn, query, now, pool) if mode != "vector" else []
            vector = (
                await self._nearest(conn, query, (probe, model, version), now, pool)
                if probe is not None
                else []
            )
            return MemorySearch(
                hits=tuple(fuse(keyword, vector, query.limit)), mode=mode, warning=warning
            )

        return await self._do("searching memory", find)

    async def namespaces(self) -> list[str]:
        """The namespaces that hold records, sorted."""

        async def listing(conn: psycopg.AsyncConnection[Any]) -> list[str]:
            cursor = await _exec(conn, f"SELECT DISTINCT namespace FROM {self.table}")
            return sorted(n for (n,) in await cursor.fetchall())

        return await self._do("listing memory namespaces", listing)

    async def forget(self, *, now: datetime | None = None) -> int:
        """Delete expired records and enforce caps (see ``Memory.forget``)."""
        at = moment(now).timestamp()

        async def sweep(conn: psycopg.AsyncConnection[Any]) -> int:
            async with conn.transaction():
                cursor = await _exec(
                    conn,
                    f"DELETE FROM {self.table} WHERE expires IS NOT NULL AND expires <= %s "
                    "RETURNING namespace",
                    (at,),
                )
                touched = {n for (n,) in await cursor.fetchall()}
                gone = cursor.rowcount
                for namespace in self.caps:
                    dropped = await self._cap(conn, namespace, at)
                    if dropped:
                        touched.add(namespace)
                    gone += dropped
                for namespace in sorted(touched):
                    await self._bump(conn, namespace)
                return gone

        return await self._do("forgetting expired memory records", sweep)

    # -- inside a transaction or a search ---------------------------------------------------

    async def _bump(self, conn: psycopg.AsyncConnection[Any], namespace: str) -> None:
        await _exec(
            conn,
            f"INSERT INTO {self.table}_versions (namespace, version) VALUES (%s, 1) "
            f"ON CONFLICT (namespace) DO UPDATE SET version = {self.table}_versions.version + 1",
            (namespace,),
        )

    async def _cap(self, conn: psycopg.AsyncConnection[Any], namespace: str, now: float) -> int:
        """Enforce the namespace's cap on its live records (the expired go first, uncounted)."""
        cap = self.caps.get(namespace)
        if cap is None:
            return 0
        cursor = await _exec(
            conn,
            f"DELETE FROM {self.table} WHERE namespace = %s AND expires IS NOT NULL "
            "AND expires <= %s",
            (namespace, now),
        )
        expired = cursor.rowcount
        cursor = await _exec(
            conn,
            f"SELECT id, importance, created FROM {self.table} WHERE namespace = %s",
            (namespace,),
        )
        rows = await cursor.fetchall()
        if len(rows) <= cap:
            return expired
        dropped = evictions(rows, cap)
        await _exec(
            conn,
            f"DELETE FROM {self.table} WHERE namespace = %s AND id = ANY(%s)",
            (namespace, dropped),
        )
        return expired + len(dropped)

    async def _keyword(
        self, conn: psycopg.AsyncConnection[Any], query: MemoryQuery, now: float, pool: int
    ) -> list[MemoryRecord]:
        terms, recent = await self._terms(conn, words(query.text))
        if not terms:
            return []
        tsquery = " || ".join(["plainto_tsquery('english', %s)"] * len(terms))
        where, params = _filters(query, now)
        order = "rid DESC" if recent else "ts_rank_cd(tsv, q.q) DESC, rid"
        cursor = await _exec(
            conn,
            f"WITH q AS (SELECT ({tsquery}) AS q) SELECT {_COLUMNS} FROM {self.table}, q "
            f"WHERE tsv @@ q.q AND {where} ORDER BY {order} LIMIT %s",
            (*terms, *params, pool * 4 if query.metadata else pool),
        )
        at = datetime.fromtimestamp(now, UTC)
        found = [record_from_row(row) for row in await cursor.fetchall()]
        return [r for r in found if query.admits(r, at)][:pool]

    async def _terms(
        self, conn: psycopg.AsyncConnection[Any], given: list[str]
    ) -> tuple[list[str], bool]:
        """The query's terms worth ranking by, rarest first within ``MATCH_BUDGET`` matches.

        As ``SqliteMemory._terms``: ``ts_rank_cd`` ranks every record that matches any term,
        so common words are dropped while a rarer one is left; when even the rarest matches
        more than the budget, the newest matches come first (``True``). A term's matches are
        counted up to ``MATCH_BUDGET + 1`` through the GIN index.
        """
        terms = list(dict.fromkeys(given))[:64]
        counts: list[tuple[int, str]] = []
        for term in terms:
            cursor = await _exec(
                conn,
                f"SELECT count(*) FROM (SELECT 1 FROM {self.table} "
                "WHERE tsv @@ plainto_tsquery('english', %s) LIMIT %s) AS m",
                (term, MATCH_BUDGET + 1),
            )
            row = await cursor.fetchone()
            count = 0 if row is None else int(row[0])
            if count:  # 0: a stop word, or no record has it
                counts.append((count, term))
        return budgeted(counts)

    async def _nearest(
        self,
        conn: psycopg.AsyncConnection[Any],
        query: MemoryQuery,
        vector: tuple[list[float], str, int],
        now: float,
        pool: int,
    ) -> list[MemoryRecord]:
        """The records nearest ``vector``: the query's, its embedder's name, the version."""
        probe, model, version = vector
        matrix = await self._matrix(conn, query.namespace, model, len(probe), version)
        if matrix is None:
            return []
        allowed: list[int] | None = None
        if query.kinds or query.metadata or query.after or query.before:
            where, params = _filters(query, now)
            cursor = await _exec(conn, f"SELECT rid FROM {self.table} WHERE {where}", params)
            allowed = [rid for (rid,) in await cursor.fetchall()]
        take = pool * (4 if query.metadata else 1)
        chosen = await asyncio.to_thread(  # not on the event loop: tens of ms at 100k
            nearest_rows, matrix, probe, now, query.min_similarity, take, allowed
        )
        if not chosen:
            return []
        cursor = await _exec(
            conn, f"SELECT {_COLUMNS} FROM {self.table} WHERE rid = ANY(%s)", (chosen,)
        )
        by_rid = {row[0]: record_from_row(row) for row in await cursor.fetchall()}
        at = datetime.fromtimestamp(now, UTC)
        ordered = [by_rid[i] for i in chosen if i in by_rid]
        return [r for r in ordered if query.admits(r, at)][:pool]

    async def _version(self, conn: psycopg.AsyncConnection[Any], namespace: str) -> int:
        """How many writes the namespace has had (its cached vectors hold as long)."""
        cursor = await _exec(
            conn, f"SELECT version FROM {self.table}_versions WHERE namespace = %s", (namespace,)
        )
        row = await cursor.fetchone()
        return 0 if row is None else int(row[0])

    async def _held(
        self, conn: psycopg.AsyncConnection[Any], namespace: str, version: int
    ) -> frozenset[Vectors]:
        """Which embedders' vectors the namespace's records hold, read once a version."""
        cached = self._vectors_held.get(namespace)
        if cached is not None and cached[0] == version:
            return cached[1]
        cursor = await _exec(
            conn,
            f"SELECT DISTINCT embedding_model, dims FROM {self.table} WHERE namespace = %s",
            (namespace,),
        )
        held = frozenset((model, dims) for model, dims in await cursor.fetchall())
        if len(self._vectors_held) > 1024:
            self._vectors_held.clear()
        self._vectors_held[namespace] = (version, held)
        return held

    async def _matrix(
        self,
        conn: psycopg.AsyncConnection[Any],
        namespace: str,
        model: str,
        dims: int,
        version: int,
    ) -> VectorMatrix | None:
        key = (namespace, model, dims)
        cached = self._matrices.get(key)
        if cached is not None and cached[0] == version:
            return cached[1]
        cursor = await _exec(
            conn,
            f"SELECT rid, embedding, expires FROM {self.table} WHERE namespace = %s AND "
            "embedding_model = %s AND dims = %s",
            (namespace, model, dims),
        )
        matrix = await asyncio.to_thread(VectorMatrix.of, await cursor.fetchall(), dims)
        if matrix is None:
            self._matrices.pop(key, None)
            return None
        if len(self._matrices) > 64:
            self._matrices.clear()
        self._matrices[key] = (version, matrix)
        return matrix


def _filters(query: MemoryQuery, now: float) -> tuple[str, list[Any]]:
    """A WHERE clause for the query's filters (metadata by containment; all re-checked)."""
    where = ["namespace = %s", "(expires IS NULL OR expires > %s)"]
    params: list[Any] = [query.namespace, now]
    if query.kinds:
        where.append("kind = ANY(%s)")
        params.append(list(query.kinds))
    if query.after is not None:
        where.append("created >= %s")
        params.append(query.after.timestamp())
    if query.before is not None:
        where.append("created < %s")
        params.append(query.before.timestamp())
    if query.metadata:
        where.append("metadata @> %s::jsonb")
        params.append(json.dumps(query.metadata))
    return " AND ".join(where), params


async def _widen_event_seq(conn: psycopg.AsyncConnection[Any], table: str) -> None:
    """A table made before ``event_seq`` was ``BIGINT`` gets it (an event's number past 2**31)."""
    found = await _exec(
        conn,
        "SELECT atttypid::regtype::text FROM pg_attribute "
        "WHERE attrelid = to_regclass(%s) AND attname = 'event_seq'",
        (table,),
    )
    row = await found.fetchone()
    if row is not None and row[0] == "integer":
        await _exec(conn, f"ALTER TABLE {table} ALTER COLUMN event_seq TYPE BIGINT")


async def _exec(
    conn: psycopg.AsyncConnection[Any], query: str, params: Sequence[Any] | None = None
) -> psycopg.AsyncCursor[Any]:
    """``conn.execute``: the query's only non-literal part is the table's checked name."""
    return await conn.execute(cast(LiteralString, query), params)


def _first_line(exc: BaseException) -> str:
    return (str(exc).strip().splitlines() or [type(exc).__name__])[0]
