"""``tether serve``: the HTTP API over the run store (``pip install "tether[server]"``)."""

from __future__ import annotations

from tether.server.app import create_app
from tether.server.keys import SCOPES, ApiKey, ApiKeys, KeyRefused, Scope

__all__ = ["SCOPES", "ApiKey", "ApiKeys", "KeyRefused", "Scope", "create_app"]
