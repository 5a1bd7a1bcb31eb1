"""The cursors of ``GET /v1/runs``: where the next page of a listing begins, as opaque text.

A cursor is a run's position in the listing's order (newest first: when it started, then its
id), base64url-encoded. The next page holds the runs after it: a run started meanwhile comes
before it, so paging never repeats nor skips a run. It names a position only: the page it
opens is filtered by the request's key (its tenant) and query as any page is.
"""

from __future__ import annotations

import base64
from datetime import datetime

import orjson

from tether.errors import UserError
from tether.stores.base import RunPosition

__all__ = ["CURSOR_PATTERN", "BadCursor", "decode_cursor", "encode_cursor"]

CURSOR_PATTERN = r"^[A-Za-z0-9_-]{1,400}$"
"""What a cursor looks like (base64url, unpadded)."""


class BadCursor(UserError):
    """A cursor this server did not give: HTTP 422."""


def encode_cursor(position: RunPosition) -> str:
    """The cursor of the page after ``position``."""
    text = orjson.dumps([position.created_at.isoformat(timespec="microseconds"), position.run_id])
    return base64.urlsafe_b64encode(text).rstrip(b"=").decode("ascii")


def decode_cursor(cursor: str) -> RunPosition:
    """The position a cursor names.

    Raises:
        BadCursor: it is not a cursor this server gave.
    """
    try:
        value: object = orjson.loads(base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)))
        match value:
            case [str(moment), str(run_id)] if run_id:
                created_at = datetime.fromisoformat(moment)
            case _:
                raise ValueError("not a [time, run id] pair")
        if created_at.tzinfo is None:
            raise ValueError("a time without its zone")
    except ValueError:  # binascii's and orjson's errors are ValueErrors too
        raise BadCursor(
            "cursor is not one this server gave: pass a next_cursor as it came, or leave "
            "cursor out for the first page"
        ) from None
    return RunPosition(created_at=created_at, run_id=run_id)
