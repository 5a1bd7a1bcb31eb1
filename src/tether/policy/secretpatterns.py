"""What secrets look like: the patterns a ``Redactor`` runs, and the probe that skips them.

The probe is one search of an event's JSON (lower-cased) for words one of which every match
contains: it must never be stricter than the patterns, as a property test checks.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from functools import cache
from typing import Any

from tether.policy.readings import INVISIBLE_RANGES

__all__ = [
    "PERSONAL_PATTERNS",
    "PERSONAL_PROBE",
    "SECRET_PATTERNS",
    "accept",
    "secret_probe",
]

SECRET_PATTERNS: tuple[tuple[str, str], ...] = (
    (
        "private_key",
        r"-----BEGIN (?:[A-Z0-9]+ )*PRIVATE KEY-----(?:[\s\S]*?-----END (?:[A-Z0-9]+ )*PRIVATE KEY-----|[\s\S]*)",
    ),
    ("anthropic_key", r"(?<![A-Za-z0-9])sk-ant-[A-Za-z0-9_-]{20,}"),
    ("openai_key", r"(?<![A-Za-z0-9])sk-(?:proj-|svcacct-|admin-)?[A-Za-z0-9_-]{20,}"),
    ("aws_access_key", r"(?<![A-Za-z0-9])(?:AKIA|ASIA)[0-9A-Z]{16}(?![A-Za-z0-9])"),
    (
        "github_token",
        r"(?<![A-Za-z0-9])(?:gh[pousr]_[A-Za-z0-9]{36,}|github_pat_[A-Za-z0-9_]{22,})",
    ),
    ("slack_token", r"(?<![A-Za-z0-9])xox[abprs]-[A-Za-z0-9-]{10,}"),
    ("google_api_key", r"(?<![A-Za-z0-9])AIza[0-9A-Za-z_-]{35}"),
    ("stripe_key", r"(?<![A-Za-z0-9])[rs]k_(?:live|test)_[0-9A-Za-z]{16,}"),
    # a JWT's header is short: bounded, "eyJ-" * n no longer scans the rest from every "eyJ"
    ("jwt", r"(?<![A-Za-z0-9])eyJ[A-Za-z0-9_-]{8,1024}\.eyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}"),
    ("bearer_token", r"(?i)(?<=bearer )[A-Za-z0-9._~+/-]{16,}=*"),
    (
        "basic_auth",
        r"(?i)authorization[\"']?\s*[=:]\s*[\"']?basic\s+(?!\[REDACTED)([A-Za-z0-9+/]{4,}=*)",
    ),
    # the password of [user]:password@host in any URL (the user and host stay readable); a
    # password may hold "/" and "@": it ends at the first "@" that a host name follows
    (
        "url_password",
        # a password never runs into the next "://": each start's scan ends there, so text
        # built to make it backtrack ('://a:' * 24,000: 15 s, quadratic) takes linear time
        r"(?i)(?<=://)(?:[^/\s:@\"]*):(?!\[REDACTED)((?:(?!://)[^\s\"])+?)"
        r"(?=@[A-Za-z0-9.\[\]-]+(?::[0-9]+)?(?:[/?#\s\"'>),;]|$))",
    ),
    (
        "password",
        # the name may go on (SECRET_ACCESS_KEY=, password_hash: ...), then a ":" needs a
        # space or a quote after it (my_secret_module:attr is a reference); PWD=/path is a
        # directory, not a password
        r"(?i)(?:password|passwd|pwd(?!\s*[=:]\s*[\"']?[/~])|secret|api[_-]?key|access[_-]?token"
        r"|auth[_-]?token)(?:[\"']?\s*[=:]|[_-][A-Za-z0-9_-]{0,100}[\"']?\s*(?:=|:(?=[\s\"'])))\s*"
        # a quoted value of any length (possessive: linear, never backtracks); an unclosed
        # one is a prompt ("Enter password: "), and a text cut in one loses the cut word
        r"(?:\"(?!\[REDACTED)([^\"\n]++)\"|'(?!\[REDACTED)([^'\n]++)'"
        r"|(?!\[REDACTED)([^\s\"'&,;]{4,}))",
    ),
)
"""Secrets redacted by default: ``(kind, regex)``; a regex with groups redacts only the group
that matched (the value, not the name before it). A prefix must not follow an ASCII letter
or digit ("task-..." is not an OpenAI key), but may follow anything else."""

PERSONAL_PATTERNS: tuple[tuple[str, str], ...] = (
    # a local part has at most 64 characters: a long run with no "@" is not scanned from
    # each of its characters to its end (quadratic)
    ("email", r"\b[A-Za-z0-9._%+-]{1,64}@[A-Za-z0-9-]+(?:\.[A-Za-z0-9-]+)*\.[A-Za-z]{2,}\b"),
    ("card_number", r"(?<![\d-])(?:\d[ -]?){12,18}\d(?![\d-])"),
    ("phone", r"(?<![\w+])\+?(?:\d[\s.()-]{0,2}){8,14}\d(?!\w)"),
)
"""Personal data, redacted when ``Redactor(personal=True)``."""

_PROBE_WORDS = (
    "private key",
    "private%",  # "private%20key": a reading undoes it
    "sk-",
    "akia",
    "asia",
    "ghp_",
    "gho_",
    "ghu_",
    "ghs_",
    "ghr_",
    "github_pat_",
    "xox",
    "aiza",
    "k_live_",
    "k_test_",
    "eyj",
    "bearer ",
    "bearer%",
    "://",
    "%3a%2f%2f",  # "://" URL-encoded, wholly or in part
    "%3a/%2f",
    "%3a%2f/",
    "%3a//",
    ":%2f%2f",
    ":/%2f",
    ":%2f/",
    "\\\\/\\\\/",  # "\/\/" (PHP's json_encode), as an event's JSON holds it
    "\\\\u00",  # "\u002d" and the like: an escape may hide any of these words
    *(f"\\\\u{code}" for code in ("034f", "061c", "115f", "1160", "17b", "180", "200", "202")),
    *(f"\\\\u{code}" for code in ("206", "fe0", "feff", "ffa0")),  # invisible, escaped
    "password",
    "passwd",
    "pwd",
    "secret",
    "api_key",
    "api-key",
    "apikey",
    "access_token",
    "access-token",
    "accesstoken",
    "auth_token",
    "auth-token",
    "authtoken",
    "authorization",
)
"""Lower-case literals one of which every match of ``SECRET_PATTERNS`` contains, as an
event's JSON holds it (and as it holds what a ``Reading`` turns into one)."""

# characters by how rarely they appear in an event's JSON: a word is searched for from its
# rarest one (then the rest before it is checked behind), so that few places are tried
_RARE = b"qzjx%\\kvwy_-/bg'fcmuplhdrnotiase:\" ,="


def _probe_regex(words: Sequence[bytes]) -> bytes:
    """One regex for a set of literals: a trie over each word from its rarest character.

    ``password`` is searched for as ``w`` then ``ord``, then ``passw`` behind it: the regex
    engine skips every position whose character starts no branch, and most do.
    """
    rank = {char: index for index, char in enumerate(_RARE)}
    root: dict[int, Any] = {}
    for word in words:
        start = min(range(len(word)), key=lambda i: (rank.get(word[i], len(rank)), i))
        node = root
        for char in word[start:]:
            node = node.setdefault(char, {})
        node.setdefault(-1, set()).add(word[:start])

    def emit(node: dict[int, Any], suffix: bytes) -> bytes:
        branches = [
            re.escape(bytes([c])) + emit(child, suffix + bytes([c]))
            for c, child in sorted(node.items())
            if c >= 0
        ]
        heads: set[bytes] = node.get(-1, set())
        if b"" not in heads and heads:  # the word ends here if what comes before it is there
            behind = [b"(?<=" + re.escape(head + suffix) + b")" for head in sorted(heads)]
            branches.append(behind[0] if len(behind) == 1 else b"(?:" + b"|".join(behind) + b")")
        elif heads:
            branches.append(b"")
        if len(branches) == 1:
            return branches[0]
        return b"(?:" + b"|".join(branches) + b")"

    return emit(root, b"")


def _invisible_words() -> list[bytes]:
    """Each character that shows nothing, in UTF-8: it may split a word (a reading drops it).

    Where all 64 characters under one lead are (the tags), the lead alone.
    """
    words = {chr(c).encode() for first, last in INVISIBLE_RANGES for c in range(first, last + 1)}
    leads: dict[bytes, int] = {}
    for word in words:
        leads[word[:-1]] = leads.get(word[:-1], 0) + 1
    full = {lead for lead, count in leads.items() if len(lead) > 1 and count == 64}
    return sorted({word[:-1] if word[:-1] in full else word for word in words})


@cache
def secret_probe() -> re.Pattern[bytes]:
    """Searched in an event's lower-cased JSON: no match, no secret pattern can match.

    Compiled on first use (a few milliseconds).
    """
    words = [*(word.encode() for word in _PROBE_WORDS), *_invisible_words()]
    return re.compile(_probe_regex(words))


PERSONAL_PROBE = re.compile(rb"@|%40|\d(?:\D{0,4}\d){8}")
"""Every email has an "@" (or "%40"); every phone or card number nine digits at most four
apart."""


def accept(kind: str, match: re.Match[str]) -> bool:
    """Second checks a regex cannot do (so that 16 random digits are not a card)."""
    if kind == "card_number":
        digits = re.sub(r"\D", "", match.group())
        return 13 <= len(digits) <= 19 and _luhn(digits)
    if kind == "phone":
        return 9 <= sum(c.isdigit() for c in match.group()) <= 15
    return True


def _luhn(digits: str) -> bool:
    total, parity = 0, len(digits) % 2
    for index, char in enumerate(digits):
        number = int(char)
        if index % 2 == parity:
            number *= 2
            if number > 9:
                number -= 9
        total += number
    return total % 10 == 0
