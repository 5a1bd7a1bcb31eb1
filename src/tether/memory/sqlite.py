"""Memory in a SQLite file: FTS5 for keywords, float32 vectors searched with numpy.

The records live in ``memory_records`` with an FTS5 index beside it, so the memory can
share the file of a ``SqliteStore`` (the run store's tables are others) or have its own.

Vectors are stored as float32 blobs. Nearest-vector search is exact: each namespace's
vectors are held as one normalized numpy matrix, rebuilt when the namespace changed (every
write counts one in ``memory_versions``, whichever process made it), and a query is one
matrix product. Why not
the ``sqlite-vec`` extension: loading an extension needs ``sqlite3`` built with
``enable_load_extension``, which many Pythons (pyenv's default build, this project's CI) are
not; and its vec0 scan is exact too, so numpy gives the same answers on every Python.
"""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from pathlib import Path
from typing import TypeVar

from tether.errors import (
    StoreError,
    StoreUnavailable,
)
from tether.memory.base import (
    Memory,
    MemoryQuery,
    MemoryRecord,
    MemorySearch,
    moment,
)
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
from tether.memory.sqlitefile import SCHEMA, foreign_tables, sqlite_error
from tether.memory.sqlitequery import filters, passing_rows
from tether.memory.vectors import VectorMatrix, nearest_rows

__all__ = ["SqliteMemory"]

T = TypeVar("T")


_NEWEST_SCAN = 20_000
"""How many matches of only common words a search pages through for its namespace."""


_COLUMNS = "rowid, " + COLUMNS


class SqliteMemory(Memory):
    """Long-term memory in one SQLite file (its own, or a run store's).

    ``embedder``: what gives records and queries their vectors (none: keyword search only,
    with a warning). ``caps``: the most records a namespace keeps. Vector search needs
    ``numpy`` (``pip install "tether[memory]"``).
    """

    def __init__(
        self,
        path: str | Path,
        *,
        embedder: Embedder | None = None,
        caps: Mapping[str, int] | None = None,
        busy_timeout: float = 30.0,
    ) -> None:
        self.path = Path(path)
        self.embedder = embedder
        self.caps = caps_of(caps)
        self._busy_timeout = busy_timeout
        self._thread = ThreadPoolExecutor(max_workers=1, thread_name_prefix="tether-memory")
        self._db: sqlite3.Connection | None = None
        self._matrices: dict[tuple[str, str, int], tuple[int, VectorMatrix]] = {}
        self._vectors_held: dict[str, tuple[int, frozenset[Vectors]]] = {}
        self._df: dict[str, tuple[int, int]] = {}  # term -> (records it is in, rows then)
        self._closed = False

    # -- the file's thread -----------------------------------------------------------------

    async def _run(self, work: Callable[[sqlite3.Connection], T], doing: str) -> T:
        if self._closed:
            raise StoreError(f"the memory {self.path} is closed")

        def call() -> T:
            db = self._db if self._db is not None else self._open()
            try:
                return work(db)
            except sqlite3.Error as exc:
                if db.in_transaction:
                    db.rollback()
                raise sqlite_error(exc, self.path, doing) from None
            except BaseException:  # never leave the file locked, or half a write visible
                if db.in_transaction:
                    db.rollback()
                raise

        return await asyncio.get_running_loop().run_in_executor(self._thread, call)

    def _open(self) -> sqlite3.Connection:
        if str(self.path) != ":memory:":
            try:
                self.path.parent.mkdir(parents=True, exist_ok=True)
            except OSError as exc:
                raise StoreUnavailable(
                    f"cannot create the directory of the memory {self.path}: "
                    f"{exc.strerror or exc}. Check the path, or pass another one"
                ) from None
        try:
            db = sqlite3.connect(
                self.path,
                isolation_level=None,
                timeout=self._busy_timeout,
                check_same_thread=False,
            )
        except sqlite3.Error as exc:
            raise sqlite_error(exc, self.path, "opening it") from None
        try:
            db.execute("PRAGMA journal_mode=WAL")
            foreign = foreign_tables(db)
            if foreign is None:
                db.executescript(SCHEMA)
        except sqlite3.Error as exc:
            db.close()
            raise sqlite_error(exc, self.path, "opening it") from None
        if foreign is not None:
            db.close()
            raise StoreUnavailable(
                f"the memory {self.path} holds tables that tether's memory did not make "
                f"({foreign}): another program's, or another version's; nothing was changed. "
                "Give SqliteMemory a file of its own, or rename those tables"
            )
        self._db = db
        return db

    async def close(self) -> None:
        """Close the file and stop its thread."""
        if self._closed:
            return
        self._closed = True

        def shut() -> None:
            if self._db is not None:
                self._db.close()
                self._db = None

        await asyncio.get_running_loop().run_in_executor(self._thread, shut)
        self._thread.shutdown(wait=False)

    # -- the port ---------------------------------------------------------------------------

    async def upsert(self, records: Sequence[MemoryRecord]) -> list[str]:
        """Store records (see ``Memory.upsert``)."""
        ready = await embedded(records, self.embedder)
        now = datetime.now(UTC).timestamp()

        def write(db: sqlite3.Connection) -> list[str]:
            db.execute("BEGIN IMMEDIATE")
            statement = upsert_sql("memory_records", "?")
            for r in ready:
                db.execute(statement, row_values(r, now))
            for namespace in sorted({r.namespace for r in ready}):
                self._cap(db, namespace, now)
                _bump(db, namespace)
            db.execute("COMMIT")
            return [r.id for r in ready]

        return await self._run(write, "storing memory records")

    async def get(self, namespace: str, ids: Sequence[str]) -> list[MemoryRecord]:
        """The live records with these ids (see ``Memory.get``)."""
        wanted = list(dict.fromkeys(ids))
        now = datetime.now(UTC).timestamp()

        def read(db: sqlite3.Connection) -> list[MemoryRecord]:
            found: dict[str, MemoryRecord] = {}
            for start in range(0, len(wanted), 500):
                chunk = wanted[start : start + 500]
                marks = ",".join("?" * len(chunk))
                rows = db.execute(
                    f"SELECT {_COLUMNS} FROM memory_records WHERE namespace = ? AND id IN "
                    f"({marks}) AND (expires IS NULL OR expires > ?)",
                    (namespace, *chunk, now),
                )
                for row in rows:
                    record = record_from_row(row)
                    found[record.id] = record
            return [found[i] for i in wanted if i in found]

        return await self._run(read, "reading memory records")

    async def delete(self, namespace: str, ids: Sequence[str]) -> int:
        """Delete records (see ``Memory.delete``)."""
        wanted = list(dict.fromkeys(ids))

        def remove(db: sqlite3.Connection) -> int:
            db.execute("BEGIN IMMEDIATE")
            gone = 0
            for start in range(0, len(wanted), 500):
                chunk = wanted[start : start + 500]
                marks = ",".join("?" * len(chunk))
                gone += db.execute(
                    f"DELETE FROM memory_records WHERE namespace = ? AND id IN ({marks})",
                    (namespace, *chunk),
                ).rowcount
            _bump(db, namespace)
            db.execute("COMMIT")
            return gone

        return await self._run(remove, "deleting memory records")

    async def search(self, query: MemoryQuery) -> MemorySearch:
        """Rank by FTS5's BM25 and by cosine, fused (see ``Memory.search``)."""
        probed = await probe_of(query, self.embedder)
        now = datetime.now(UTC).timestamp()
        doing = "searching memory"
        inputs: tuple[VectorMatrix, list[int] | None] | None = None
        if probed.vector is not None:
            model, dims = probed.model, len(probed.vector)
            inputs, held = await self._run(
                lambda db: self._vector_inputs(db, query, model, dims, now), doing
            )
            probed = other_vectors(probed, held, query.namespace)
        mode, warning, probe, _, pool = probed

        async def keyword() -> list[MemoryRecord]:
            if mode == "vector":
                return []
            return await self._run(lambda db: self._keyword(db, query, now, pool), doing)

        if probe is None:
            return MemorySearch(
                hits=tuple(fuse(await keyword(), [], query.limit)), mode=mode, warning=warning
            )
        take = pool * (4 if query.metadata else 1)

        async def nearest() -> list[int]:
            if inputs is None:
                return []
            matrix, allowed = inputs  # the product runs beside the keyword query (2 threads)
            return await asyncio.to_thread(
                nearest_rows, matrix, probe, now, query.min_similarity, take, allowed
            )

        by_keyword, chosen = await asyncio.gather(keyword(), nearest())
        by_vector = (
            await self._run(lambda db: self._by_rowid(db, chosen, query, now, pool), doing)
            if chosen
            else []
        )
        return MemorySearch(
            hits=tuple(fuse(by_keyword, by_vector, query.limit)), mode=mode, warning=warning
        )

    async def namespaces(self) -> list[str]:
        """The namespaces that hold records, sorted."""
        return await self._run(
            lambda db: [
                n for (n,) in db.execute("SELECT DISTINCT namespace FROM memory_records ORDER BY 1")
            ],
            "listing memory namespaces",
        )

    async def forget(self, *, now: datetime | None = None) -> int:
        """Delete expired records and enforce caps (see ``Memory.forget``)."""
        at = moment(now).timestamp()

        def sweep(db: sqlite3.Connection) -> int:
            db.execute("BEGIN IMMEDIATE")
            touched = {
                n
                for (n,) in db.execute(
                    "SELECT DISTINCT namespace FROM memory_records WHERE expires IS NOT NULL "
                    "AND expires <= ?",
                    (at,),
                )
            }
            gone = db.execute(
                "DELETE FROM memory_records WHERE expires IS NOT NULL AND expires <= ?", (at,)
            ).rowcount
            for namespace in self.caps:
                dropped = self._cap(db, namespace, at)
                if dropped:
                    touched.add(namespace)
                gone += dropped
            for namespace in sorted(touched):
                _bump(db, namespace)
            db.execute("COMMIT")
            return gone

        return await self._run(sweep, "forgetting expired memory records")

    # -- on the file's thread ---------------------------------------------------------------

    def _cap(self, db: sqlite3.Connection, namespace: str, now: float) -> int:
        """Enforce the namespace's cap on its live records (the expired go first, uncounted)."""
        cap = self.caps.get(namespace)
        if cap is None:
            return 0
        expired = db.execute(
            "DELETE FROM memory_records WHERE namespace = ? AND expires IS NOT NULL AND "
            "expires <= ?",
            (namespace, now),
        ).rowcount
        (count,) = db.execute(
            "SELECT count(*) FROM memory_records WHERE namespace = ?", (namespace,)
        ).fetchone()
        if count <= cap:
            return expired
        rows = db.execute(
            "SELECT id, importance, created FROM memory_records WHERE namespace = ?",
            (namespace,),
        ).fetchall()
        dropped = evictions(rows, cap)
        db.executemany(
            "DELETE FROM memory_records WHERE namespace = ? AND id = ?",
            [(namespace, i) for i in dropped],
        )
        return expired + len(dropped)

    def _keyword(
        self, db: sqlite3.Connection, query: MemoryQuery, now: float, pool: int
    ) -> list[MemoryRecord]:
        terms, recent = self._terms(db, words(query.text))
        if not terms:
            return []
        match = " OR ".join('"' + t.replace('"', '""') + '"' for t in terms)
        where, params = filters(query, now, "+r.")
        take = pool * 4 if query.metadata else pool
        if recent:
            return self._newest(db, match, query, now, pool)
        rows = db.execute(
            f"SELECT {', '.join('r.' + c.strip() for c in _COLUMNS.split(','))} "
            "FROM memory_fts JOIN memory_records r ON r.rowid = memory_fts.rowid "
            f"WHERE memory_fts MATCH ? AND {where} ORDER BY bm25(memory_fts) LIMIT ?",
            (match, *params, take),
        )
        found = [record_from_row(row) for row in rows]
        at = datetime.fromtimestamp(now, UTC)
        return [r for r in found if query.admits(r, at)][:pool]

    def _terms(self, db: sqlite3.Connection, given: list[str]) -> tuple[list[str], bool]:
        """The query's terms worth ranking by, and whether they are all too common to rank.

        BM25 ranks every record that matches any term, so a common word ("the", "is") makes
        it rank most of the table. Terms are taken rarest first while the records they match
        stay within ``MATCH_BUDGET`` (the rarest always); a common word adds little to BM25
        anyway. When even the rarest matches more than that, the words say little, and the
        newest matching records come first (``True``). A term's records are counted up to
        ``MATCH_BUDGET + 1`` (so counting is bounded too), and the count is remembered until
        the table grows by a tenth.
        """
        terms = list(dict.fromkeys(given))[:64]
        if not terms:
            return [], False
        (total,) = db.execute("SELECT max(rowid) FROM memory_records").fetchone()
        total = int(total or 0)
        counts: list[tuple[int, str]] = []
        for term in terms:
            cached = self._df.get(term)
            if cached is None or abs(total - cached[1]) > max(cached[1] // 10, 100):
                (count,) = db.execute(
                    "SELECT count(*) FROM (SELECT 1 FROM memory_fts WHERE memory_fts MATCH ? "
                    "LIMIT ?)",
                    ('"' + term.replace('"', '""') + '"', MATCH_BUDGET + 1),
                ).fetchone()
                cached = (int(count), total)
                if len(self._df) > 50_000:
                    self._df.clear()
                self._df[term] = cached
            counts.append((cached[0], term))
        return budgeted(counts)

    def _newest(
        self, db: sqlite3.Connection, match: str, query: MemoryQuery, now: float, pool: int
    ) -> list[MemoryRecord]:
        """The newest matching records of the query's namespace that pass its filters.

        The index walks its matches newest first, a page at a time, each page filtered by
        the namespace and the rest; it stops at ``pool`` records or ``_NEWEST_SCAN`` matches.
        """
        found: list[MemoryRecord] = []
        below: int | None = None
        scanned = 0
        where, params = filters(query, now, "+")
        taken: set[int] = set()
        while len(found) < pool and scanned < _NEWEST_SCAN:
            page = [
                rowid
                for (rowid,) in db.execute(
                    "SELECT rowid FROM memory_fts WHERE memory_fts MATCH ? AND rowid < ? "
                    "ORDER BY rowid DESC LIMIT 500",
                    (match, below if below is not None else 2**62),
                )
            ]
            if not page:
                break
            scanned += len(page)
            below = page[-1]
            passing = passing_rows(db, page, where, params)
            chosen = [rowid for rowid in page if rowid in passing][: pool - len(found)]
            if chosen:
                taken.update(chosen)
                found.extend(self._by_rowid(db, chosen, query, now, pool - len(found)))
        if len(found) < pool and scanned >= _NEWEST_SCAN:  # other namespaces' matches filled
            found.extend(self._own_newest(db, match, query, now, pool - len(found), taken))
        return found

    def _own_newest(
        self,
        db: sqlite3.Connection,
        match: str,
        query: MemoryQuery,
        now: float,
        need: int,
        taken: set[int],
    ) -> list[MemoryRecord]:
        """The namespace's own newest matches, found by joining the matches to its records.

        For a small namespace in a table whose other namespaces match the same words by the
        thousand: ``_newest``'s walk of the matches gives up before it reaches any of its.
        """
        where, params = filters(query, now, "+")
        rows = [  # one pass over the matches, each looked up by rowid (25,000: ~6 ms)
            rowid
            for (rowid,) in db.execute(
                "SELECT f.rowid FROM memory_fts f JOIN memory_records r ON r.rowid = f.rowid "
                "WHERE memory_fts MATCH ? AND r.namespace = ? ORDER BY f.rowid DESC LIMIT ?",
                (match, query.namespace, 4 * need + len(taken)),
            )
            if rowid not in taken
        ]
        passing = passing_rows(db, rows, where, params) if rows else set[int]()
        chosen = [r for r in rows if r in passing][:need]
        return self._by_rowid(db, chosen, query, now, need) if chosen else []

    def _vector_inputs(
        self, db: sqlite3.Connection, query: MemoryQuery, model: str, dims: int, now: float
    ) -> tuple[tuple[VectorMatrix, list[int] | None] | None, frozenset[Vectors]]:
        """The namespace's vectors, the rows the filters allow (``None``: all), and ``_held``."""
        row = db.execute(
            "SELECT version FROM memory_versions WHERE namespace = ?", (query.namespace,)
        ).fetchone()
        version = 0 if row is None else int(row[0])
        held = self._held(db, query.namespace, version)
        matrix = self._matrix(db, query.namespace, model, dims, version)
        if matrix is None:
            return None, held
        allowed: list[int] | None = None
        if query.kinds or query.metadata or query.after or query.before:
            where, params = filters(query, now, "")
            rows = db.execute(f"SELECT rowid FROM memory_records WHERE {where}", params)
            allowed = [rowid for (rowid,) in rows]
        return (matrix, allowed), held

    def _held(self, db: sqlite3.Connection, namespace: str, version: int) -> frozenset[Vectors]:
        """Which embedders' vectors the namespace's records hold, as of ``version``.

        Read from the index on ``(namespace, embedding_model, dims)`` alone, once a version.
        """
        cached = self._vectors_held.get(namespace)
        if cached is not None and cached[0] == version:
            return cached[1]
        held = frozenset(
            (model, dims)
            for model, dims in db.execute(
                "SELECT DISTINCT embedding_model, dims FROM memory_records WHERE namespace = ?",
                (namespace,),
            )
        )
        if len(self._vectors_held) > 1024:
            self._vectors_held.clear()
        self._vectors_held[namespace] = (version, held)
        return held

    def _by_rowid(
        self, db: sqlite3.Connection, chosen: list[int], query: MemoryQuery, now: float, pool: int
    ) -> list[MemoryRecord]:
        """The records of ``chosen`` rows, in that order, that pass the query's filters."""
        by_rowid: dict[int, MemoryRecord] = {}
        for start in range(0, len(chosen), 500):
            chunk = chosen[start : start + 500]
            marks = ",".join("?" * len(chunk))
            rows = db.execute(
                f"SELECT {_COLUMNS} FROM memory_records WHERE rowid IN ({marks})", chunk
            )
            by_rowid.update((row[0], record_from_row(row)) for row in rows)
        at = datetime.fromtimestamp(now, UTC)
        ordered = [by_rowid[i] for i in chosen if i in by_rowid]
        return [r for r in ordered if query.admits(r, at)][:pool]

    def _matrix(
        self, db: sqlite3.Connection, namespace: str, model: str, dims: int, version: int
    ) -> VectorMatrix | None:
        key = (namespace, model, dims)
        cached = self._matrices.get(key)
        if cached is not None and cached[0] == version:
            return cached[1]
        rows = db.execute(
            "SELECT rowid, embedding, expires FROM memory_records WHERE namespace = ? AND "
            "embedding_model = ? AND dims = ?",
            (namespace, model, dims),
        ).fetchall()
        matrix = VectorMatrix.of(rows, dims)
        if matrix is None:
            self._matrices.pop(key, None)
            return None
        if len(self._matrices) > 64:
            self._matrices.clear()
        self._matrices[key] = (version, matrix)
        return matrix


def _bump(db: sqlite3.Connection, namespace: str) -> None:
    """Count a write to ``namespace`` (every process's vector matrix of it is then stale)."""
    db.execute(
        "INSERT INTO memory_versions (namespace, version) VALUES (?, 1) "
        "ON CONFLICT (namespace) DO UPDATE SET version = version + 1",
        (namespace,),
    )
