"""API keys for ``tether serve``: hashed at rest, scoped, bound to one tenant.

A key is shown once, when it is made: ``tether_<id>_<secret>``. The store keeps its id,
tenant, scopes, name, when it was made and revoked, and the SHA-256 of its secret (32
random bytes: a hash is as good as a slow one for a secret nobody chose), in the run
store's key-value table (namespace ``tether.api_keys``), so the CLI and the server share
them through the same file.

Scopes: ``read`` (list and read runs, their events and logs, audit), ``run`` (start,
answer, resume, cancel), ``approve`` (decide approvals), ``admin`` (all of them). Every
key belongs to one tenant and sees only that tenant's runs.
"""

from __future__ import annotations

import hashlib
import hmac
import re
import secrets
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Literal, cast, get_args

from tether._internal.frozen import frozen
from tether.errors import TetherError, UserError
from tether.jsontypes import JsonObject, JsonValue
from tether.stores.kv import KeyValueStore

__all__ = ["SCOPES", "ApiKey", "ApiKeys", "KeyRefused", "Scope", "check_tenant"]

Scope = Literal["read", "run", "approve", "admin"]
SCOPES: tuple[Scope, ...] = get_args(Scope)

_NAMESPACE = "tether.api_keys"
_PREFIX = "tether_"
_TOKEN = re.compile(r"^tether_([0-9a-f]{16})_([A-Za-z0-9_-]{43})$")
_MAX_KEYS = 100_000
_TENANT = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")


@frozen
class ApiKey:
    """What the store knows of one key (never its secret)."""

    key_id: str
    """The key's public id (the part after ``tether_``)."""
    tenant: str
    """The tenant whose runs it sees and touches."""
    scopes: tuple[Scope, ...]
    """What it may do."""
    name: str
    """A label for people (who or what holds it)."""
    created_at: datetime
    """When it was made."""
    revoked_at: datetime | None = None
    """When it was revoked (``None``: it is live)."""

    def allows(self, scope: Scope) -> bool:
        """Whether the key may do what ``scope`` covers."""
        return scope in self.scopes or "admin" in self.scopes


class KeyRefused(TetherError):
    """A request's key does not let it in (no key, not a key, unknown, revoked): HTTP 401."""


def check_tenant(tenant: str) -> str:
    """Return ``tenant`` if it is a valid tenant name, else raise ``UserError``."""
    if not _TENANT.match(tenant):
        raise UserError(
            f"invalid tenant {tenant!r}: use 1-64 letters, digits, '_', '.' or '-', "
            "starting with a letter or digit"
        )
    return tenant


def _scopes(given: Sequence[str]) -> tuple[Scope, ...]:
    unknown = [s for s in given if s not in SCOPES]
    if unknown or not given:
        raise UserError(
            f"invalid scopes {', '.join(map(repr, unknown)) or '(none)'}: give one or more of "
            f"{', '.join(SCOPES)}"
        )
    return tuple(dict.fromkeys(cast(Sequence[Scope], given)))


def _digest(secret: str) -> str:
    return hashlib.sha256(secret.encode()).hexdigest()


def _when(text: JsonValue) -> datetime | None:
    return datetime.fromisoformat(text) if isinstance(text, str) else None


class ApiKeys:
    """The API keys kept in a run store's key-value table."""

    def __init__(self, store: KeyValueStore) -> None:
        self._store = store

    async def create(
        self, tenant: str, scopes: Sequence[str], *, name: str = ""
    ) -> tuple[ApiKey, str]:
        """Make a key; returns it and its token (shown this once, never stored)."""
        check_tenant(tenant)
        chosen = _scopes(scopes)
        key_id, secret = secrets.token_hex(8), secrets.token_urlsafe(32)
        now = datetime.now(UTC)
        record: JsonObject = {
            "tenant": tenant,
            "scopes": list(chosen),
            "name": name,
            "created_at": now.isoformat(),
            "revoked_at": None,
            "sha256": _digest(secret),
        }
        await self._store.kv_set(_NAMESPACE, key_id, record)
        key = ApiKey(key_id=key_id, tenant=tenant, scopes=chosen, name=name, created_at=now)
        return key, f"{_PREFIX}{key_id}_{secret}"

    async def list(self, tenant: str | None = None) -> list[ApiKey]:
        """Every key (of ``tenant``), oldest first."""
        found: list[ApiKey] = []
        for key_id in await self._store.kv_list(_NAMESPACE, "", limit=_MAX_KEYS):
            loaded = await self._load(key_id)
            if loaded is not None and (tenant is None or loaded[0].tenant == tenant):
                found.append(loaded[0])
        return sorted(found, key=lambda k: k.created_at)

    async def revoke(self, key_id: str) -> ApiKey:
        """Revoke a key by its id (or its whole token); it is refused from then on."""
        matched = _TOKEN.match(key_id)
        key_id = matched.group(1) if matched else key_id.removeprefix(_PREFIX)
        entry = await self._store.kv_get(_NAMESPACE, key_id) if key_id else None
        if entry is None or not isinstance(entry.value, dict):
            raise UserError(f"no API key with the id {key_id!r}: `tether keys list` shows them")
        record = dict(entry.value)
        if record.get("revoked_at") is None:
            record["revoked_at"] = datetime.now(UTC).isoformat()
            await self._store.kv_set(_NAMESPACE, key_id, record)
        loaded = await self._load(key_id)
        assert loaded is not None
        return loaded[0]

    async def verify(self, token: str | None) -> ApiKey:
        """The live key ``token`` is, or ``KeyRefused`` saying why not."""
        if not token:
            raise KeyRefused(
                "no API key: send it as 'Authorization: Bearer tether_...' or 'X-API-Key'"
            )
        matched = _TOKEN.match(token.strip())
        if matched is None:
            raise KeyRefused("not a tether API key (they look like tether_<16 hex>_<43 chars>)")
        loaded = await self._load(matched.group(1))
        if loaded is None or not hmac.compare_digest(loaded[1], _digest(matched.group(2))):
            raise KeyRefused("unknown API key")
        key = loaded[0]
        if key.revoked_at is not None:
            raise KeyRefused(f"this API key was revoked at {key.revoked_at.isoformat()}")
        return key

    async def live(self, key_id: str) -> bool:
        """Whether the key is still there and not revoked (an open stream asks now and then)."""
        loaded = await self._load(key_id)
        return loaded is not None and loaded[0].revoked_at is None

    async def _load(self, key_id: str) -> tuple[ApiKey, str] | None:
        entry = await self._store.kv_get(_NAMESPACE, key_id)
        if entry is None or not isinstance(entry.value, dict):
            return None
        record = entry.value
        created = _when(record.get("created_at"))
        scopes = record.get("scopes")
        digest = record.get("sha256")
        tenant = record.get("tenant")
        if (
            created is None
            or not isinstance(digest, str)
            or not isinstance(tenant, str)
            or not isinstance(scopes, list)
        ):
            return None  # not a record this module wrote: refused like an unknown key
        key = ApiKey(
            key_id=key_id,
            tenant=tenant,
            scopes=tuple(s for s in SCOPES if s in scopes),
            name=str(record.get("name") or ""),
            created_at=created,
            revoked_at=_when(record.get("revoked_at")),
        )
        return key, digest
