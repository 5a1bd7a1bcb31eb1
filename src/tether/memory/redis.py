"""Memory in Redis: short-term memory and caches shared by processes, without a search module.

What it is for: a session's or a team of workers' working memory that several processes
read and write at once, that expires on its own (``idle_ttl``: a namespace nobody wrote to
for that long is gone, with every record in it), and that is cheap to throw away. Redis 7.0
as it runs here has no search module (RediSearch), so searching reads the namespace's
records and ranks them in this process (BM25 and exact cosine, as ``InProcessMemory``
does); each process keeps the decoded namespace until any process writes to it again.

What it does not promise: durability beyond the server's own persistence settings (with
Redis's defaults a crash can lose the last seconds of writes); fast search over large
namespaces (every search after a write reads the whole namespace: ``bench/memory.py``
measures how far that goes, and SQLite or PostgreSQL are the long-term stores); Redis
Cluster (one server, or a primary with replicas).

Each namespace is five keys that share a hash tag: ``records`` (id → the record as JSON),
``rank`` (id → "created importance"), ``vectors`` (id → float32 bytes), ``expiry`` (a
sorted set of expiry times) and ``version`` (moved by every write). Writes, deletes and a
cap's evictions are Lua scripts, each atomic on the server.
"""

from __future__ import annotations

import asyncio
import json
from array import array
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any, NamedTuple

from tether.content import JsonObject
from tether.errors import ConfigError, MissingExtraError, StoreError, StoreUnavailable
from tether.memory.base import Memory, MemoryKind, MemoryQuery, MemoryRecord, MemorySearch, moment
from tether.memory.embedder import Embedder
from tether.memory.ranking import (
    KeywordIndex,
    Vectors,
    caps_of,
    embedded,
    fuse,
    other_vectors,
    words,
)
from tether.memory.ranking import probe as probe_of
from tether.memory.rows import stored_vector
from tether.memory.vectors import VectorMatrix, nearest_rows

__all__ = ["RedisMemory"]

_SNAPSHOTS = 64
"""How many namespaces' decoded records a process keeps (the least recently searched go)."""

_DROP = """
local function drop(records, rank, vectors, expiry, id)
  redis.call('HDEL', rank, id)
  redis.call('HDEL', vectors, id)
  redis.call('ZREM', expiry, id)
  return redis.call('HDEL', records, id)
end
local function settle(records, rank, vectors, expiry, version, spaces, namespace, ttl)
  -- the server's clock and a counter: never a version seen before, even after the server
  -- lost its last writes (a restart, a failover), when a counter alone would repeat
  local now = redis.call('TIME')
  redis.call('SET', version, now[1] .. '.' .. now[2] .. '.' .. redis.call('INCR', KEYS[7]))
  if redis.call('HLEN', records) == 0 then
    redis.call('DEL', records, rank, vectors, expiry, version)
    redis.call('SREM', spaces, namespace)
  else
    for _, key in ipairs({records, rank, vectors, expiry, version}) do
      if ttl > 0 then redis.call('PEXPIRE', key, ttl) else redis.call('PERSIST', key) end
    end
  end
end
local function trim(records, rank, vectors, expiry, now, cap)
  local gone = 0
  for _, id in ipairs(redis.call('ZRANGEBYSCORE', expiry, '-inf', now)) do
    gone = gone + drop(records, rank, vectors, expiry, id)
  end
  if cap > 0 and redis.call('HLEN', rank) > cap then
    local all = redis.call('HGETALL', rank)
    local rows = {}
    for i = 1, #all, 2 do
      local born, importance = string.match(all[i + 1], '^(%S+) (%S+)$')
      rows[#rows + 1] = {all[i], tonumber(importance), tonumber(born)}
    end
    table.sort(rows, function(a, b)
      if a[2] ~= b[2] then return a[2] > b[2] end
      if a[3] ~= b[3] then return a[3] > b[3] end
      return a[1] < b[1]
    end)
    for i = cap + 1, #rows do gone = gone + drop(records, rank, vectors, expiry, rows[i][1]) end
  end
  return gone
end
"""

_UPSERT = (
    _DROP
    + """
local records, rank, vectors, expiry, version, spaces = unpack(KEYS)
local now, namespace, ttl, cap = tonumber(ARGV[1]), ARGV[2], tonumber(ARGV[3]), tonumber(ARGV[4])
for i = 5, #ARGV, 6 do
  local id, body, born, importance, expires, vector = unpack(ARGV, i, i + 5)
  local old = redis.call('HGET', rank, id)
  if old then
    local until_ = redis.call('ZSCORE', expiry, id)
    if not until_ or tonumber(until_) > now then born = string.match(old, '^(%S+)') end
  end
  redis.call('HSET', records, id, body)
  redis.call('HSET', rank, id, born .. ' ' .. importance)
  if vector == '' then redis.call('HDEL', vectors, id) else redis.call('HSET', vectors, id, vector) end
  if expires == '' then redis.call('ZREM', expiry, id) else redis.call('ZADD', expiry, expires, id) end
end
redis.call('SADD', spaces, namespace)
if cap > 0 and redis.call('HLEN', records) > cap then  -- in the same script: never over it
  trim(records, rank, vectors, expiry, ARGV[1], cap)
end
settle(records, rank, vectors, expiry, version, spaces, namespace, ttl)
return redis.call('HLEN', records)
"""
)

_DELETE = (
    _DROP
    + """
local records, rank, vectors, expiry, version, spaces = unpack(KEYS)
local namespace, ttl = ARGV[1], tonumber(ARGV[2])
local gone = 0
for i = 3, #ARGV do gone = gone + drop(records, rank, vectors, expiry, ARGV[i]) end
if gone > 0 then settle(records, rank, vectors, expiry, version, spaces, namespace, ttl) end
return gone
"""
)

_FORGET = (
    _DROP
    + """
local records, rank, vectors, expiry, version, spaces = unpack(KEYS)
local now, cap, namespace, ttl = ARGV[1], tonumber(ARGV[2]), ARGV[3], tonumber(ARGV[4])
local gone = trim(records, rank, vectors, expiry, now, cap)
if gone > 0 then settle(records, rank, vectors, expiry, version, spaces, namespace, ttl) end
return gone
"""
)


_PRUNE = """
if redis.call('EXISTS', KEYS[1]) == 0 then return redis.call('SREM', KEYS[2], ARGV[1]) end
return 0
"""
"""Drop a namespace's name from the set once its records are gone (expired whole)."""


class _Row(NamedTuple):
    """A stored record as read, its vector still bytes (a record is built for hits only)."""

    id: str
    text: str
    kind: MemoryKind
    metadata: JsonObject
    model: str | None
    run_id: str | None
    event_seq: int | None
    created: datetime
    expires: datetime | None
    importance: float
    blob: bytes

    def record(self, namespace: str) -> MemoryRecord:
        return MemoryRecord(
            namespace=namespace,
            text=self.text,
            id=self.id,
            kind=self.kind,
            metadata=self.metadata,
            embedding=stored_vector(self.blob),
            embedding_model=self.model,
            created=self.created,
            expires=self.expires,
            importance=self.importance,
            run_id=self.run_id,
            event_seq=self.event_seq,
        )


class _Snapshot:
    """One namespace's records as of one version, with its keyword index and vector matrices."""

    __slots__ = ("_keywords", "held", "matrices", "rows", "version")

    def __init__(self, version: bytes | None, rows: list[_Row]) -> None:
        self.version = version
        self.rows = rows
        self._keywords: KeywordIndex | None = None
        self.held: frozenset[Vectors] = frozenset(
            (r.model, len(r.blob) // 4) if r.blob else (None, None) for r in rows
        )
        """Which embedders' vectors the rows hold (another's are never compared)."""
        self.matrices: dict[tuple[str, int], VectorMatrix | None] = {}

    @property
    def keywords(self) -> KeywordIndex:
        """BM25 over the rows' texts (built by the first keyword search of this version)."""
        if self._keywords is None:
            self._keywords = KeywordIndex([r.text for r in self.rows])
        return self._keywords

    def matrix(self, model: str, dims: int) -> VectorMatrix | None:
        """The vectors of ``model`` with ``dims`` dimensions (row ids index ``rows``)."""
        key = (model, dims)
        if key not in self.matrices:
            chosen = [
                (i, r.blob, r.expires.timestamp() if r.expires else None)
                for i, r in enumerate(self.rows)
                if r.model == model and len(r.blob) == 4 * dims
            ]
            self.matrices[key] = VectorMatrix.of(chosen, dims)
        return self.matrices[key]


class RedisMemory(Memory):
    """Short-term memory in a Redis server, shared by every process that opens it.

    ``url``: ``redis://host:port/db`` (``rediss://`` for TLS). ``prefix``: what every key
    starts with. ``idle_ttl``: a namespace no one wrote to for this long is dropped whole
    (``None``: namespaces stay until deleted; records' own ``expires`` hold either way).
    ``embedder`` and ``caps`` as for every backend. Needs ``pip install "tether[redis]"`` and,
    for vector search, ``numpy`` (``tether[memory]``). See the module's notes for what it
    does not promise.
    """

    def __init__(
        self,
        url: str = "redis://127.0.0.1:6379/0",
        *,
        prefix: str = "tether:memory",
        idle_ttl: timedelta | None = None,
        embedder: Embedder | None = None,
        caps: Mapping[str, int] | None = None,
        connect_timeout: float = 10.0,
    ) -> None:
        if not prefix or any(c in prefix for c in "{} \n"):
            raise ConfigError(f"RedisMemory(prefix={prefix!r}): use a non-empty key prefix")
        if idle_ttl is not None and idle_ttl.total_seconds() < 0.001:
            raise ConfigError(f"RedisMemory(idle_ttl={idle_ttl}): use at least a millisecond")
        self.url = url
        self._shown = _without_password(url)
        self.prefix = prefix
        self.idle_ttl = idle_ttl
        self.embedder = embedder
        self.caps = caps_of(caps)
        self._timeout = connect_timeout
        self._client: Any = None
        self._scripts: dict[str, Any] = {}
        self._snapshots: dict[str, _Snapshot] = {}
        self._closed = False

    def _redis(self) -> Any:
        if self._closed:
            raise StoreError(f"the memory in Redis at {self._shown} is closed")
        if self._client is None:
            try:
                import redis.asyncio
            except ImportError:
                raise MissingExtraError("redis", "redis") from None
            try:
                client = redis.asyncio.Redis.from_url(  # pyright: ignore[reportUnknownMemberType] - kwargs untyped
                    self.url,
                    socket_connect_timeout=self._timeout,
                    socket_timeout=max(self._timeout, 30.0),
                )
            except ValueError as exc:
                raise ConfigError(f"RedisMemory({self._shown!r}): {exc}") from None
            self._client = client
            self._scripts = {
                "upsert": client.register_script(_UPSERT),
                "delete": client.register_script(_DELETE),
                "forget": client.register_script(_FORGET),
                "prune": client.register_script(_PRUNE),
            }
        return self._client

    async def _do(self, doing: str, work: Any) -> Any:
        client = self._redis()
        import redis.exceptions

        try:
            return await work(client)
        except (redis.exceptions.ConnectionError, redis.exceptions.TimeoutError) as exc:
            raise StoreUnavailable(
                f"cannot reach the memory's Redis at {self._shown} while {doing} ({exc}): "
                "check that the server runs and that the URL is right"
            ) from None
        except redis.exceptions.RedisError as exc:
            raise StoreError(f"the memory's Redis failed while {doing}: {exc}") from None

    def _keys(self, namespace: str) -> list[str]:
        base = f"{self.prefix}:{{{namespace}}}"
        return [
            f"{base}:records",
            f"{base}:rank",
            f"{base}:vectors",
            f"{base}:expiry",
            f"{base}:version",
            f"{self.prefix}:namespaces",
            f"{self.prefix}:writes",
        ]

    def _ttl_ms(self) -> int:
        return 0 if self.idle_ttl is None else max(1, int(self.idle_ttl.total_seconds() * 1000))

    async def close(self) -> None:
        """Close the connections."""
        self._closed = True
        client, self._client = self._client, None
        if client is not None:
            await client.aclose()

    async def upsert(self, records: Sequence[MemoryRecord]) -> list[str]:
        """Store records (see ``Memory.upsert``): one atomic script per namespace."""
        ready = await embedded(records, self.embedder)
        now = datetime.now(UTC).timestamp()
        spaces: dict[str, list[MemoryRecord]] = {}
        for record in ready:  # the last of two with one id wins, as in the SQL backends
            spaces.setdefault(record.namespace, []).append(record)

        async def write(_client: Any) -> None:
            for namespace, group in spaces.items():
                cap = self.caps.get(namespace) or 0
                args: list[Any] = [repr(now), namespace, self._ttl_ms(), cap]
                for r in group:
                    args += _fields(r, now)
                await self._scripts["upsert"](keys=self._keys(namespace), args=args)

        await self._do("storing memory records", write)
        return [r.id for r in ready]

    async def _forget(self, namespace: str, now: float, cap: int | None) -> int:
        args = [repr(now), cap or 0, namespace, self._ttl_ms()]
        return int(await self._scripts["forget"](keys=self._keys(namespace), args=args))

    async def get(self, namespace: str, ids: Sequence[str]) -> list[MemoryRecord]:
        """The live records with these ids (see ``Memory.get``)."""
        wanted = list(dict.fromkeys(ids))
        if not wanted:
            return []
        records, rank, vectors = self._keys(namespace)[:3]

        async def read(client: Any) -> list[Any]:
            async with client.pipeline(transaction=True) as pipe:
                pipe.hmget(records, wanted)
                pipe.hmget(rank, wanted)
                pipe.hmget(vectors, wanted)
                return await pipe.execute()

        bodies, ranks, blobs = await self._do("reading memory records", read)
        now = datetime.now(UTC)
        found: list[MemoryRecord] = []
        for id_, body, ranked, blob in zip(wanted, bodies, ranks, blobs, strict=True):
            if body is not None and ranked is not None:
                record = _row(id_, body, ranked, blob).record(namespace)
                if not record.expired(now):
                    found.append(record)
        return found

    async def delete(self, namespace: str, ids: Sequence[str]) -> int:
        """Delete records (see ``Memory.delete``)."""
        wanted = list(dict.fromkeys(ids))
        if not wanted:
            return 0

        async def remove(_client: Any) -> int:
            args = [namespace, self._ttl_ms(), *wanted]
            return int(await self._scripts["delete"](keys=self._keys(namespace), args=args))

        return await self._do("deleting memory records", remove)

    async def search(self, query: MemoryQuery) -> MemorySearch:
        """Rank the namespace's records by BM25 and by cosine, fused (see ``Memory.search``)."""
        probed = await probe_of(query, self.embedder)
        snapshot = await self._snapshot(query.namespace)
        mode, warning, probe, model, pool = (
            other_vectors(probed, snapshot.held, query.namespace)
            if probed.vector is not None
            else probed
        )
        now = datetime.now(UTC)

        def rank() -> MemorySearch:
            rows = snapshot.rows
            admitted = [
                i
                for i, r in enumerate(rows)
                if query.passes(r.kind, r.metadata, r.created, r.expires, now)
            ]
            allowed = None if len(admitted) == len(rows) else set(admitted)
            keyword: list[int] = []
            if mode != "vector" and words(query.text):
                keyword = snapshot.keywords.rank(query.text, allowed)[:pool]
            vector: list[int] = []
            matrix = snapshot.matrix(model, len(probe)) if probe is not None else None
            if probe is not None and matrix is not None:
                vector = nearest_rows(
                    matrix, probe, now.timestamp(), query.min_similarity, pool, admitted
                )
            built = {i: rows[i].record(query.namespace) for i in {*keyword, *vector}}
            hits = fuse([built[i] for i in keyword], [built[i] for i in vector], query.limit)
            return MemorySearch(hits=tuple(hits), mode=mode, warning=warning)

        if len(snapshot.rows) > 200:  # ranking thousands of records: off the event loop
            return await asyncio.to_thread(rank)
        return rank()

    async def _snapshot(self, namespace: str) -> _Snapshot:
        """The namespace's records, read again only when a write moved its version."""
        records, rank, vectors, _, version = self._keys(namespace)[:5]
        cached = self._snapshots.get(namespace)

        async def current(client: Any) -> bytes | None:
            return await client.get(version)

        if cached is not None and await self._do("searching memory", current) == cached.version:
            del self._snapshots[namespace]
            self._snapshots[namespace] = cached
            return cached

        async def read(client: Any) -> list[Any]:
            async with client.pipeline(transaction=True) as pipe:
                pipe.get(version)
                pipe.hgetall(records)
                pipe.hgetall(rank)
                pipe.hgetall(vectors)
                return await pipe.execute()

        moved, bodies, ranks, blobs = await self._do("searching memory", read)

        def decode() -> _Snapshot:
            rows = [
                _row(key.decode(), bodies[key], ranks[key], blobs.get(key))
                for key in sorted(bodies)
                if key in ranks
            ]
            return _Snapshot(moved, rows)

        snapshot = await asyncio.to_thread(decode) if len(bodies) > 200 else decode()
        self._snapshots.pop(namespace, None)
        self._snapshots[namespace] = snapshot
        while len(self._snapshots) > _SNAPSHOTS:  # the least recently read go first
            del self._snapshots[next(iter(self._snapshots))]
        return snapshot

    async def namespaces(self) -> list[str]:
        """The namespaces that hold records, sorted (an idle one that expired is gone)."""
        return [name for name, live in await self._names() if live]

    async def _names(self) -> list[tuple[str, bool]]:
        """Every name in the namespaces' set, and whether its records still exist."""
        spaces = self._keys("x")[5]

        async def read(client: Any) -> list[tuple[str, bool]]:
            names = sorted(n.decode() for n in await client.smembers(spaces))
            async with client.pipeline(transaction=False) as pipe:
                for name in names:
                    pipe.exists(self._keys(name)[0])
                alive = await pipe.execute()
            return [(n, bool(live)) for n, live in zip(names, alive, strict=True)]

        return await self._do("listing memory namespaces", read)

    async def forget(self, *, now: datetime | None = None) -> int:
        """Delete expired records and enforce every namespace's cap (see ``Memory.forget``).

        Names of namespaces that expired whole leave the set here, each checked and removed
        in one script (a write meanwhile keeps its name).
        """
        at = moment(now).timestamp()
        names = await self._names()

        async def sweep(_client: Any) -> int:
            gone = 0
            for name, live in names:
                if live:
                    gone += await self._forget(name, at, self.caps.get(name))
                else:
                    keys = self._keys(name)
                    await self._scripts["prune"](keys=[keys[0], keys[5]], args=[name])
            return gone

        return await self._do("forgetting memory records", sweep)


def _without_password(url: str) -> str:
    """``url`` as messages show it: without the password it may hold."""
    from urllib.parse import urlsplit, urlunsplit

    try:
        parts = urlsplit(url)
    except ValueError:
        return "<an unreadable URL>"
    if parts.password is None:
        return url
    host = parts.hostname or ""
    user = f"{parts.username}:***@" if parts.username else ":***@"
    netloc = f"{user}{host}" + (f":{parts.port}" if parts.port else "")
    return urlunsplit(parts._replace(netloc=netloc))


def _fields(record: MemoryRecord, now: float) -> list[Any]:
    """The script's six arguments for ``record``: id, body, created, importance, expires, vector."""
    body = json.dumps(
        [
            record.text,
            record.kind,
            record.metadata,
            record.embedding_model if record.embedding is not None else None,
            record.run_id,
            record.event_seq,
            record.expires.timestamp() if record.expires is not None else None,
        ],
        separators=(",", ":"),
        sort_keys=True,
    )
    created = record.created.timestamp() if record.created is not None else now
    vector = b"" if record.embedding is None else array("f", record.embedding).tobytes()
    expires = "" if record.expires is None else repr(record.expires.timestamp())
    return [record.id, body, repr(float(created)), repr(float(record.importance)), expires, vector]


def _row(id_: str, body: bytes, ranked: bytes, blob: bytes | None) -> _Row:
    """The row stored as ``body`` (JSON), ``ranked`` ("created importance") and ``blob``."""
    text, kind, metadata, model, run_id, event_seq, expires = json.loads(body)
    created, importance = ranked.split()
    return _Row(
        id=id_,
        text=text,
        kind=kind,
        metadata=metadata,
        model=model,
        run_id=run_id,
        event_seq=event_seq,
        created=datetime.fromtimestamp(float(created), UTC),
        expires=None if expires is None else datetime.fromtimestamp(expires, UTC),
        importance=float(importance),
        blob=blob or b"",
    )
