"""The audit key: an HMAC-SHA256 key that makes a run's log tamper-evident against outsiders.

An event's ``hash`` (``tether.codec``) is unkeyed: anyone who edits a log can compute the
hashes again (``codec.seal``), and the edited log is one valid chain. With an audit key,
every writer also stores a MAC per event, beside the log and never inside an event::

    mac = KEY_ID ":" hex(HMAC-SHA256(key, "tether.audit.v1" NUL event.hash))

Since ``event.hash`` covers every field of the event and the hash of the one before it, the
MAC of an event vouches for the whole log up to it: ``tether audit`` with the key can say
"verified through seq N". ``KEY_ID`` (16 hex digits, also an HMAC under the key) tells a
MAC made with another key from an edited event; it reveals nothing about the key.

The key is read from a file named by ``$TETHER_AUDIT_KEY_FILE`` (preferred: the key stays
out of the environment of every process and its children), or taken from
``$TETHER_AUDIT_KEY``; setting both is an error. Trailing whitespace (the newline an editor
adds) is not part of the key, and it must be at least ``MIN_KEY_BYTES`` long. It is never
written anywhere by tether: keep it where the log's writers can read it and its editors
cannot (``head -c 32 /dev/urandom | base64 > audit.key`` makes one).
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Literal, TypeAlias

from tether.errors import AuditKeyError

__all__ = [
    "ENV_KEY",
    "ENV_KEY_FILE",
    "MIN_KEY_BYTES",
    "AuditKey",
    "AuditKeySetting",
    "MacCheck",
    "audit_key_from_env",
    "resolve_audit_key",
]

ENV_KEY_FILE = "TETHER_AUDIT_KEY_FILE"
"""The environment variable naming the file that holds the audit key."""
ENV_KEY = "TETHER_AUDIT_KEY"
"""The environment variable holding the audit key itself (UTF-8)."""
MIN_KEY_BYTES = 16
"""The shortest key accepted: 16 bytes (128 bits, if they are random)."""

_MAC_DOMAIN = b"tether.audit.v1\x00"
_KEY_ID_DOMAIN = b"tether.audit.key-id.v1"

MacCheck: TypeAlias = Literal["ok", "missing", "other_key", "mismatch"]
"""What checking one event's MAC found."""


class AuditKey:
    """An HMAC-SHA256 key for the MACs of a run's events; its ``repr`` shows only its id.

    Args:
        secret: The key's bytes (at least ``MIN_KEY_BYTES``).
        source: Where it came from, for error messages (never the key).

    Raises:
        AuditKeyError: the key is shorter than ``MIN_KEY_BYTES``.
    """

    __slots__ = ("_base", "key_id", "source")

    def __init__(self, secret: bytes, *, source: str = "the audit key") -> None:
        if len(secret) < MIN_KEY_BYTES:
            raise AuditKeyError(
                f"{source} is {len(secret)} bytes long; an audit key needs at least "
                f"{MIN_KEY_BYTES} (make one with `head -c 32 /dev/urandom | base64 > FILE`)"
            )
        import hmac  # only keyed logs need it: not loaded by ``import tether``

        self._base = hmac.new(secret, _MAC_DOMAIN, hashlib.sha256)
        self.key_id = hmac.new(secret, _KEY_ID_DOMAIN, hashlib.sha256).hexdigest()[:16]
        """A public name for the key (16 hex digits): which key made a MAC."""
        self.source = source
        """Where the key was read from (a file's path or an environment variable)."""

    def __repr__(self) -> str:
        return f"AuditKey(key_id={self.key_id!r}, source={self.source!r})"

    @classmethod
    def from_file(cls, path: str | os.PathLike[str]) -> AuditKey:
        """The key held in a file (trailing whitespace is not part of it).

        Raises:
            AuditKeyError: the file cannot be read, or holds a key that is too short.
        """
        where = Path(path)
        try:
            secret = where.read_bytes().rstrip()
        except OSError as exc:
            raise AuditKeyError(
                f"cannot read the audit key file {where}: {exc.strerror or exc}. Check the path "
                f"(--key-file or ${ENV_KEY_FILE}) and that this user may read it"
            ) from None
        return cls(secret, source=f"the audit key file {where}")

    def mac(self, event_hash: str) -> str:
        """The MAC of the event whose hash is ``event_hash``: ``KEY_ID:HEX``."""
        h = self._base.copy()
        h.update(event_hash.encode("ascii"))
        return f"{self.key_id}:{h.hexdigest()}"

    def check(self, event_hash: str, mac: str | None) -> MacCheck:
        """Whether ``mac`` is this key's MAC of the event whose hash is ``event_hash``."""
        if mac is None:
            return "missing"
        key_id, _, _ = mac.partition(":")
        if key_id != self.key_id:
            return "other_key"
        from hmac import compare_digest

        return "ok" if compare_digest(mac, self.mac(event_hash)) else "mismatch"


AuditKeySetting: TypeAlias = AuditKey | Literal["env"] | None
"""How a writer is given its key: a key, ``"env"`` (read the environment), or ``None``."""


def audit_key_from_env(environ: Mapping[str, str] | None = None) -> AuditKey | None:
    """The key ``$TETHER_AUDIT_KEY_FILE`` or ``$TETHER_AUDIT_KEY`` gives; ``None`` if neither.

    Raises:
        AuditKeyError: both are set, the file cannot be read, or the key is too short.
    """
    env = os.environ if environ is None else environ
    path = env.get(ENV_KEY_FILE) or None
    value = env.get(ENV_KEY) or None
    if path is not None and value is not None:
        raise AuditKeyError(
            f"both ${ENV_KEY_FILE} and ${ENV_KEY} are set: set one (the file is better: the "
            "key then stays out of the environment of every process started from here)"
        )
    if path is not None:
        return AuditKey.from_file(path)
    if value is not None:
        # the bytes the variable was set to (not UTF-8 ones come back as they were set)
        return AuditKey(os.fsencode(value), source=f"${ENV_KEY}")
    return None


def resolve_audit_key(setting: AuditKeySetting) -> AuditKey | None:
    """The key a writer was given: itself, the environment's (``"env"``), or none.

    Raises:
        AuditKeyError: ``"env"`` and the environment's key cannot be used.
    """
    if isinstance(setting, str):
        return audit_key_from_env()
    return setting
