"""The SQL text as the tokeniser sees it: statements, and the keyword each starts with.

Only literals, quoted identifiers, comments and ``;`` are recognised, which is all that is
needed to count statements and read their first keyword; the database parses the rest.
"""

from __future__ import annotations

import re
from typing import Literal

__all__ = ["Backend", "first_keyword", "split_statements"]

Backend = Literal["sqlite", "postgres"]

_DOLLAR_TAG = re.compile(r"\$(?:[A-Za-z_\u0080-\uffff][A-Za-z0-9_\u0080-\uffff]*)?\$")


def _ident_char(ch: str) -> bool:
    return ch.isalnum() or ch in "_$" or ord(ch) > 127


def _skip_comment(sql: str, i: int, nested: bool) -> int:
    """The index after the comment starting at ``i`` (``--`` or ``/*``)."""
    if sql.startswith("--", i):
        end = sql.find("\n", i)
        return len(sql) if end < 0 else end + 1
    depth, j = 1, i + 2
    while j < len(sql):
        if sql.startswith("*/", j):
            depth -= 1
            j += 2
            if depth == 0:
                return j
        elif nested and sql.startswith("/*", j):  # PostgreSQL nests block comments
            depth += 1
            j += 2
        else:
            j += 1
    raise ValueError("unterminated /* comment")


def _skip_quoted(sql: str, i: int, close: str, backslashes: bool = False) -> int:
    """The index after the quoted text opening at ``i`` (a doubled ``close`` is escaped)."""
    j = i + 1
    while j < len(sql):
        ch = sql[j]
        if backslashes and ch == "\\":
            j += 2
        elif ch == close:
            if close != "]" and sql.startswith(close, j + 1):
                j += 2
            else:
                return j + 1
        else:
            j += 1
    raise ValueError(f"unterminated {sql[i]}…{close} literal or identifier")


def split_statements(sql: str, backend: Backend) -> list[str]:
    """The statements in ``sql``, split on ``;`` outside literals, identifiers and comments.

    Statements holding only comments or whitespace are dropped. ``backend`` picks the
    dialect: PostgreSQL's ``E'…'`` escapes, dollar quoting and nested comments; SQLite's
    backquoted and bracketed identifiers.

    Raises:
        ValueError: a literal, quoted identifier or comment is not closed.
    """
    pg = backend == "postgres"
    statements: list[str] = []
    start = i = 0
    seen = False  # the current statement has more than whitespace and comments
    while i < len(sql):
        ch = sql[i]
        if ch == "'":
            escapes = pg and i > 0 and sql[i - 1] in "eE" and (i < 2 or not _ident_char(sql[i - 2]))
            i = _skip_quoted(sql, i, "'", escapes)
        elif ch == '"' or (not pg and ch == "`"):
            i = _skip_quoted(sql, i, ch)
        elif ch == "[" and not pg:
            i = _skip_quoted(sql, i, "]")
        elif sql.startswith(("--", "/*"), i):
            i = _skip_comment(sql, i, nested=pg)
            continue
        elif pg and ch == "$" and (i == 0 or not _ident_char(sql[i - 1])):
            tag = _DOLLAR_TAG.match(sql, i)
            if tag is None:
                i += 1  # $1, a parameter
            else:
                end = sql.find(tag.group(), tag.end())
                if end < 0:
                    raise ValueError(f"unterminated {tag.group()} quoted string")
                i = end + len(tag.group())
        elif ch == ";":
            if seen:
                statements.append(sql[start:i].strip())
            start, seen, i = i + 1, False, i + 1
            continue
        else:
            i += 1
            seen = seen or not ch.isspace()
            continue
        seen = True
    if seen:
        statements.append(sql[start:].strip())
    return statements


def first_keyword(statement: str, backend: Backend) -> str:
    """The first word of ``statement``, upper-cased, after comments and ``(``; ``""`` if none."""
    i = 0
    while i < len(statement):
        if statement[i].isspace() or statement[i] == "(":
            i += 1
        elif statement.startswith(("--", "/*"), i):
            i = _skip_comment(statement, i, nested=backend == "postgres")
        else:
            break
    word = re.match(r"[A-Za-z]+", statement[i:])
    return word.group().upper() if word else ""
