"""How the command line reports a failure: one ``error:`` line on stderr, and exit code 2.

Every command catches ``TetherError`` (a store that is damaged, locked, read-only, full or
missing included) and reports it with ``fail``. A run that started and then ended
``failed`` because its store failed is reported the same way (``store_failure``): the
store, not the run, is what needs fixing.
"""

from __future__ import annotations

from typing import Any

import typer
from rich.console import Console
from rich.markup import escape

import tether.errors
from tether.errors import StoreError, TetherError
from tether.outcome import RunOutcome

__all__ = ["fail", "store_failure"]

err = Console(stderr=True)


def fail(exc: TetherError | str) -> typer.Exit:
    """Print ``error: <message>`` as one line (never wrapped to the terminal); exit code 2.

    Use as ``raise fail(exc) from None``.
    """
    err.print(f"[red]error:[/] {escape(str(exc))}", soft_wrap=True)
    return typer.Exit(2)


def store_failure(outcome: RunOutcome[Any]) -> str | None:
    """The message of a run that ended ``failed`` because its store failed, else ``None``.

    The outcome names the error by its class (``outcome.error.type``); a store error is one
    of ``tether.errors``' subclasses of ``StoreError``.
    """
    error = outcome.error
    if outcome.status != "failed" or error is None:
        return None
    cls: object = getattr(tether.errors, error.type, None)
    if isinstance(cls, type) and issubclass(cls, StoreError):
        return error.message
    return None
