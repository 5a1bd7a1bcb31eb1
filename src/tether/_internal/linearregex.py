"""Regular expressions that run in linear time, for patterns written by anyone (RE2).

Python's ``re`` backtracks: ``^(a+)+$`` against 26 characters takes seconds, against 40
longer than anyone waits, and no timeout can stop it (it holds the event loop). RE2
(``google-re2``) matches in time linear in the text, whatever the pattern, and refuses
what it cannot run that way (backreferences, lookaround). Every regex tether runs that a
user, a policy file or a model wrote goes through ``compile_linear``.
"""

from __future__ import annotations

import importlib
from functools import lru_cache
from typing import Any, Protocol, cast

__all__ = ["LinearPattern", "compile_linear"]


class LinearPattern(Protocol):
    """A compiled RE2 pattern: the part of ``re.Pattern`` tether uses."""

    @property
    def pattern(self) -> str: ...

    def search(self, text: str) -> object | None: ...

    def sub(self, repl: str, text: str) -> str: ...


@lru_cache(maxsize=512)
def compile_linear(pattern: str, *, ignore_case: bool = False) -> LinearPattern:
    """``pattern`` compiled by RE2 (Python-style syntax, inline flags such as ``(?i)``).

    Raises:
        ValueError: RE2 cannot run the pattern; the message says why and what RE2 lacks.
    """
    re2: Any = importlib.import_module("re2")  # google-re2; loaded on first use (import time)
    options = re2.Options()
    options.log_errors = False  # the error is raised here, not printed to stderr
    options.case_sensitive = not ignore_case
    try:
        return cast(LinearPattern, re2.compile(pattern, options))
    except re2.error as exc:
        why = exc.args[0] if exc.args else exc
        if isinstance(why, bytes):
            why = why.decode(errors="replace")
        raise ValueError(
            f"{pattern!r} is not a regex RE2 can run ({why}). Patterns run on RE2, in linear "
            "time: it has no backreferences (\\1) and no lookaround ((?=...), (?!...), "
            "(?<=...)); rewrite the pattern without them"
        ) from None
