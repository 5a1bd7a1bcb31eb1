"""What secrets look like: the patterns a ``Redactor`` runs, and the probe that skips them.

Each pattern is linear in the text it searches (no nested quantifier over the same
characters; a scan that may fail stops at its own start's characters, or is bounded), as a
test checks against 100 kB built to make each one backtrack. The probe is one search of an
event's JSON (lower-cased) for words one of which every match contains: it must never be
stricter than the patterns, as a property test checks.
"""

from __future__ import annotations

import importlib
import re
from collections.abc import Sequence
from functools import cache
from typing import Any

from tether.policy.readings import INVISIBLE_RANGES

__all__ = [
    "PERSONAL_PATTERNS",
    "PERSONAL_PROBE",
    "SECRET_LIST",
    "SECRET_PATTERNS",
    "SECRET_WORDS",
    "SECRET_WORD_BITS",
    "accept",
    "list_items",
    "looks_like_token",
    "secret_probe",
    "secret_words_in",
    "token_name",
]

_GUARD = r"(?![\[{]?\[REDACTED)"  # a value that is a marker (in a list or not) is done
_NAMES = (
    r"password|passwd|pwd(?!\s*[=:]\s*[\"']?[/~])|secret|api[_-]?key|access[_-]?token"
    r"|auth[_-]?token|passphrase"
)
# a command's argument, in a shell line or a JSON or Python list ("-p", "x")
_ARG = rf"(?!-){_GUARD}(?:\"([^\"\n]++)\"|'([^'\n]++)'|([^\s\"'|;&,]+))"
_SEP = r"(?:[ \t]+|[\"'],[ \t]*)"  # between a flag and its value
_FILL = r"(?=[\s\"',])[^\n|;&]{0,200}?[\s\"',]"  # the same command's other arguments
_PORTS = r"(?![\d.:]+(?:/[a-z]+)?(?:[\s\"',]|$))"  # "-p 8080:80" in a docker line naming mysql

SECRET_LIST = (
    # whole; a scan ends at the next bracket, so an unclosed one costs no more than the
    # text up to it
    rf"(?i)(?:{_NAMES})s?[\"']?\s*[=:]\s*"
    rf"(?:(?!\[REDACTED)\[{_GUARD}([^\[\]]++)\]|\{{{_GUARD}([^{{}}]++)\}})"
)
"""A list or an object under a secret's name (``"api_keys": ["k1", "k2"]``): each item is a
secret."""

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
    ("gitlab_token", r"(?<![A-Za-z0-9])gl(?:pat|dt|rt|ptt)-[A-Za-z0-9_-]{20,}"),
    ("slack_token", r"(?<![A-Za-z0-9])xox[abprse]-[A-Za-z0-9-]{10,}"),
    ("google_api_key", r"(?<![A-Za-z0-9])AIza[0-9A-Za-z_-]{35}"),
    ("stripe_key", r"(?<![A-Za-z0-9])[rs]k_(?:live|test)_[0-9A-Za-z]{16,}"),
    ("huggingface_token", r"(?<![A-Za-z0-9])hf_[A-Za-z0-9]{30,}"),
    ("npm_token", r"(?<![A-Za-z0-9])npm_[A-Za-z0-9]{36}(?![A-Za-z0-9])"),
    ("pypi_token", r"(?<![A-Za-z0-9])pypi-AgEIcHlwaS5vcmc[A-Za-z0-9_-]{40,}"),
    ("digitalocean_token", r"(?<![A-Za-z0-9])do[opr]_v1_[a-f0-9]{64}"),
    # a JWT's header is short: bounded, "eyJ-" * n no longer scans the rest from every "eyJ"
    ("jwt", r"(?<![A-Za-z0-9])eyJ[A-Za-z0-9_-]{8,1024}\.eyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}"),
    ("bearer_token", r"(?i)(?<=bearer )[A-Za-z0-9._~+/-]{16,}=*"),
    (
        "basic_auth",
        r"(?i)authorization[\"']?\s*[=:]\s*[\"']?basic\s+(?!\[REDACTED)([A-Za-z0-9+/]{4,}=*)",
    ),
    (
        "authorization",
        # any other scheme (Token, Bot, ApiKey...); with none, a value with a digit in it
        r"(?i)(?<![A-Za-z0-9_-])(?:proxy-)?authorization[\"']?[ \t]*[=:][ \t]*[\"']?"
        r"(?:(?:token|bot|bearer|digest|negotiate|ntlm|oauth|api-?key|key|ssws|geniekey"
        r"|splunk|sso-key|jwt|dpop|mac|hawk|sharedkey|sharedaccesssignature|aws4-hmac-sha256"
        rf"|aws)[ \t]+{_GUARD}([^\s\"',;]{{4,}})|{_GUARD}([^\s\"',;]{{8,}}))",
    ),
    # a Cookie or Set-Cookie header's value, whole (a cookie's name has no ":" in it)
    (
        "cookie",
        rf"(?i)(?<![A-Za-z0-9_-])(?:set-)?cookie[\"']?[ \t]*:[ \t]*[\"']?{_GUARD}"
        r"([^\s=;\"',:]+=[^\r\n\"']*)",
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
    ("password", SECRET_LIST),
    (
        "password",
        # the name may go on (SECRET_ACCESS_KEY=, password_hash: ...), then a ":" needs a
        # space or a quote after it (my_secret_module:attr is a reference); PWD=/path is a
        # directory, not a password
        rf"(?i)(?:{_NAMES})(?:s?[\"']?\s*[=:]|[_-][A-Za-z0-9_-]{{0,100}}[\"']?\s*(?:=|:(?=[\s\"'])))\s*"
        # a quoted value of any length (possessive: linear, never backtracks); an unclosed
        # one is a prompt ("Enter password: "), and a text cut in one loses the cut word
        rf"(?:\"(?!\[REDACTED)([^\"\n]++)\"|'(?!\[REDACTED)([^'\n]++)'"
        rf"|{_GUARD}([^\s\"'&,;]{{4,}}))",
    ),
    (
        "token",
        # a name ending in "token" (refresh_token, GITLAB_TOKEN, accessToken, --auth-token);
        # ``accept`` reads the name and the value: not a page token, not a word or a count
        rf"(?i)token(?:[\"']?\s*[=:]\s*|{_SEP})(?:\"{_GUARD}([^\"\n]++)\"|'{_GUARD}([^'\n]++)'"
        rf"|{_GUARD}([^\s\"'&,;)\]}}]+))",
    ),
    (
        "password",
        # a command-line flag and its value: --password S3cret, -storepass x, "--secret", "x"
        r"(?i)(?<![A-Za-z0-9_-])--?(?:[a-z0-9]+-){0,4}(?:password|passwd|passphrase|secret"
        r"|secret-?key|secret-access-key|api-?key|(?:src|dest)?(?:store|key)pass)"
        rf"{_SEP}{_ARG}",
    ),
    (
        "password",
        # a password given to a client in its own flag (-pS3cret to mysql, -a to redis-cli,
        # -w to ldapsearch, -P to sqlcmd, user:password to curl -u, pass: to openssl)
        r"(?<![\w.-])(?:(?:mysql(?:dump|admin|import|show|check|slap|binlog|pump|sh)?"
        rf"|mariadb(?:-(?:dump|admin|import|show|check))?)(?:\.exe)?{_FILL}-p{_PORTS}"
        rf"|(?:mongo(?:sh|dump|restore|export|import|stat|top|files)?|(?:docker|podman"
        rf"|nerdctl|buildah|skopeo|oras|helm[ \t]+registry)[ \t]+login){_FILL}-p{_SEP}?{_PORTS}"
        r"|sshpass(?>(?:[\s\"',]+-(?:[fdP][\s\"',]*[^\s\"',-][^\s\"',]*|[ev])){0,6})[\s\"',]+-p"
        rf"{_SEP}?|redis-cli(?:\.exe)?{_FILL}-a{_SEP}?|ldap(?:search|add|modify|delete|passwd"
        rf"|whoami|compare|modrdn|exop|url){_FILL}-w{_SEP}?|(?:sqlcmd|bcp|osql)(?:\.exe)?"
        rf"{_FILL}-P{_SEP}?|curl(?:\.exe)?{_FILL}(?:-u|--user|-U|--proxy-user)"
        r"(?:[ \t=]+|[\"'],[ \t]*[\"']?)?[\"']?[^\s:\"',]*:(?=[^\s\"'])"
        rf"|-pass(?:in|out)?{_SEP}[\"']?pass:){_ARG}",
    ),
)
"""Secrets redacted by default: ``(kind, regex)``; a regex with groups redacts only the group
that matched (the value, not the name before it). A prefix must not follow an ASCII letter
or digit ("task-..." is not an OpenAI key), but may follow anything else."""

_NAME_WORDS = (
    *("password", "passwd", "pwd", "secret", "api_key", "api-key", "apikey", "passphrase"),
    *("access_token", "access-token", "accesstoken", "auth_token", "auth-token", "authtoken"),
)
SECRET_WORDS: tuple[tuple[str, ...], ...] = (
    ("private key",),
    ("sk-ant-",),
    ("sk-",),
    ("akia", "asia"),
    ("ghp_", "gho_", "ghu_", "ghs_", "ghr_", "github_pat_"),
    ("glpat-", "gldt-", "glrt-", "glptt-"),
    ("xox",),
    ("aiza",),
    ("k_live_", "k_test_"),
    ("hf_",),
    ("npm_",),
    ("pypi-",),
    ("_v1_",),
    ("eyj",),
    ("bearer ",),
    ("authorization",),
    ("authorization",),
    ("cookie",),
    ("://",),
    _NAME_WORDS,
    _NAME_WORDS,
    ("token",),
    ("password", "passwd", "passphrase", "secret", "api-key", "apikey", "storepass", "keypass"),
    (
        *("mysql", "mariadb", "mongo", "sshpass", "login", "redis-cli", "ldap", "sqlcmd"),
        *("bcp", "osql", "curl", "-pass"),
    ),
)
"""For each of ``SECRET_PATTERNS``, lower-case literals one of which each of its matches
holds: a text without any of them (lower-cased) is not searched with it."""
_WORDS = sorted({word for words in SECRET_WORDS for word in words})
SECRET_WORD_BITS = tuple(sum(1 << _WORDS.index(w) for w in words) for words in SECRET_WORDS)
"""For each of ``SECRET_PATTERNS``, a bit for each of its words (see ``secret_words_in``)."""


@cache
def _word_set() -> Any:
    re2: Any = importlib.import_module("re2")  # a set of literals, all found in one pass
    options = re2.Options()
    options.log_errors = False
    words = re2.Set.SearchSet(options)
    for word in _WORDS:
        words.Add(re2.escape(word))
    words.Compile()
    return words


def secret_words_in(text: str) -> int:
    """A bit for each of the patterns' words ``text`` holds, in any case; all, if unsure.

    One pass of RE2 over the text for all of them, overlapping ones too (a match of
    ``SECRET_PATTERNS[i]`` holds a word of ``SECRET_WORD_BITS[i]``).
    """
    try:
        found: list[int] | None = _word_set().Match(text.lower())  # None: no word
    except UnicodeEncodeError:  # a lone surrogate (RE2 reads UTF-8): every pattern runs
        return -1
    bits = 0
    for index in found or ():
        bits |= 1 << index
    return bits


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
    "glpat-",
    "gldt-",
    "glrt-",
    "glptt-",
    "xox",
    "aiza",
    "k_live_",
    "k_test_",
    "hf_",
    "npm_",
    "pypi-",
    "_v1_",
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
    "passphrase",
    "storepass",
    "keypass",
    "authorization",
    "cookie",
    # a name ending in "token", then what may follow it: a quote or a space as JSON escapes
    # them ('"' and "\n" are '\\"' and '\\n'), or an escape a reading undoes
    *(f"token{after}" for after in ("\\", "'", " ", "=", ":", "%")),
    "sql",  # mysql, mysqldump, sqlcmd, osql
    "mariadb",
    "mongo",
    "sshpass",
    "login",
    "redis-cli",
    "ldap",
    "bcp",
    "curl",
    "-pass",
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
    if kind == "token":
        return _token(match)
    if kind == "authorization" and match.lastindex == 2:  # no scheme: "Authorization: 1a2b..."
        return any(c.isdigit() for c in match.group(2))
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


_NOT_SECRET = frozenset(
    {
        # pagination and resumption: an API hands them out to be passed back
        *("next", "page", "continuation", "continue", "pagination", "cursor", "sync"),
        *("start", "starting", "resume", "idempotency", "cancellation", "stop", "end"),
        # a tokenizer's and a model's own
        *("eos", "bos", "pad", "unk", "sep", "cls", "mask", "special", "max", "min", "num"),
        *("total", "input", "output", "prompt", "completion", "cached", "reasoning"),
        *("first", "last", "prev", "previous", "new"),
    }
)
"""The last word of a name ending in "token" whose value is no secret (``nextPageToken``)."""
_WORD = re.compile(r"[A-Z]?[a-z0-9]+|[A-Z]+(?![a-z])")
_NAME_CHARS = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_.-")


def token_name(name: str) -> bool:
    """Whether ``name`` (ending in "token", any case) names a secret.

    ``token``, ``refresh_token``, ``GITLAB_TOKEN``, ``X-Vault-Token``, ``accessToken`` do;
    ``next_token``, ``nextPageToken``, ``eos_token``, and a word that only ends in the
    letters (``stoken``) do not.
    """
    if name[-5:].lower() != "token":
        return False
    head = name[:-5]
    if (
        head[-1:].isascii()
        and head[-1:].isalnum()
        and not (name[-5] == "T" and not head[-1].isupper())
    ):
        return False  # glued on, not camelCase: another word
    words = _WORD.findall(head)
    return not words or words[-1].lower() not in _NOT_SECRET


def looks_like_token(value: str) -> bool:
    """Whether a value under a token's name is a credential, not a word or a count.

    At least 16 characters, no space, and letters mixed with digits or of both cases (a
    model's log probabilities name each ``"token": " world"``).
    """
    if len(value) < 16 or any(c.isspace() for c in value):
        return False
    digit = any(c.isdigit() for c in value)
    upper = any(c.isupper() for c in value)
    lower = any(c.islower() for c in value)
    return (digit and (upper or lower)) or (upper and lower)


def _token(match: re.Match[str]) -> bool:
    text, start = match.string, match.start()
    at = start
    while at > 0 and start - at < 100 and text[at - 1] in _NAME_CHARS:
        at -= 1
    head = text[at:start]
    if not token_name(head.lstrip("-") + text[start : start + 5]):
        return False
    group = match.lastindex or 0
    value = match.group(group)
    if head.startswith("-"):  # a flag: --token VALUE, --auth-token=VALUE
        return len(value) >= 3 and not value.startswith("-")
    between = text[start + 5 : match.start(group)]
    return ("=" in between or ":" in between) and looks_like_token(value)


_LIST_ITEM = re.compile(r"\"([^\"\n]*)\"|'([^'\n]*)'|([^\s,\"']+)")
_OBJECT_VALUE = re.compile(r":\s*(?:\"([^\"\n]*)\"|'([^'\n]*)'|([^\s,\"']+))")


def list_items(match: re.Match[str]) -> list[str]:
    """The items of a list, or the values of an object, that ``SECRET_LIST`` matched."""
    group = match.lastindex or 0
    inner = match.group(group)
    regex = _OBJECT_VALUE if match.string[match.start(group) - 1] == "{" else _LIST_ITEM
    return [next(g for g in m.groups() if g is not None) for m in regex.finditer(inner)]
