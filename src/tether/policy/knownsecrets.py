"""Secrets a run already knows: their encoded forms, and one search for all of them.

A secret found once is redacted wherever the run meets it again, also encoded: a tool that
URL-encodes it into a query string, or base64-encodes it (``user:password`` in a Basic
header, a Kubernetes secret, a data URL). ``encoded_forms`` gives the forms to look for: the
URL-encoded ones, and the part of a base64 text that the secret alone decides, at each of
the three offsets it can start at. ``KnownSecrets`` finds them all with one RE2 alternation
(longest first): linear in the text, whatever their number and whatever a tool built to
make the search slow; a base64 form found inside a longer base64 text redacts that whole
text.

A ``KnownSecrets`` belongs to one run (its journal holds it), with the regexes built for its
secrets: they live as long as the run and are dropped at its end (``forget``). They used to
be kept by the ``Redactor``, which an agent's runs share: one run's secrets stayed in memory
after it ended, for as long as the agent did.
"""

from __future__ import annotations

import base64
import importlib
import re
from collections.abc import Iterable, Iterator, Mapping
from typing import Any, Protocol, cast
from urllib.parse import quote, quote_plus

__all__ = ["BASE64", "KnownSecrets", "base_kind", "encoded_forms", "run_scoped"]

BASE64 = "+base64"
"""What a known secret's kind ends in when the value is the secret's base64 form."""

_BASE64_MIN = 8
"""Characters a base64 form needs to be searched for (shorter ones match random base64)."""
_BASE64_RUN = re.compile(r"[A-Za-z0-9+/_-]*")
_MARKER = re.compile(r"\[REDACTED:[^\]]*\]")
_TAIL = 32
"""Secrets fewer than this at the end of a run's are searched for with one regex (rebuilt as
they change: a small one)."""
_MAX_PARTS = 64
"""Regexes kept for the parts of a run's secrets (the tails its earlier secrets left)."""
_MAX_PART = 1024
"""Secrets in one regex at most."""


def base_kind(kind: str) -> str:
    """The kind a marker names: ``password`` for the base64 form of a password."""
    return kind[: -len(BASE64)] if kind.endswith(BASE64) else kind


def encoded_forms(secret: str) -> dict[str, str]:
    """The forms ``secret`` takes when encoded, each with the suffix its kind gets.

    URL-encoded (as ``quote``, ``quote_plus`` and JavaScript's ``encodeURIComponent`` write
    it), and base64 (standard and URL-safe): the characters that ``secret`` alone decides
    when it starts at byte 0, 1 or 2 of a 3-byte group, so that it is found inside the base64
    of a longer text (``user:password``).
    """
    forms: dict[str, str] = {}
    for form in (quote(secret, safe=""), quote(secret), quote_plus(secret)):
        if form != secret:
            forms[form] = ""
    data = secret.encode()
    for offset in range(3):
        encoded = base64.b64encode(bytes(offset) + data).decode()
        decided = encoded[-(-8 * offset // 6) : 8 * (offset + len(data)) // 6]
        if len(decided) >= _BASE64_MIN:
            forms[decided] = BASE64
            forms[decided.translate(_URLSAFE)] = BASE64
    return forms


_URLSAFE = str.maketrans("+/", "-_")
_BASE64_CHARS = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/_-")


class _Match(Protocol):
    def span(self) -> tuple[int, int]: ...


class _Alternation(Protocol):
    def finditer(self, text: str) -> Iterator[_Match]: ...


class KnownSecrets(Mapping[str, str]):
    """The secrets one run knows (secret -> kind), and the search for them in a text.

    A run's known secrets only grow, each new one after the others: a regex is built for
    each part of them, a power of two in size from the first (at most 1,024: RE2's memory
    for one stays small), and one for the last few together, so that a new secret rebuilds
    only the last part (each rebuild would cost as much as all of them). The regexes are
    this run's own (and those of the ``joined`` views it makes), dropped by ``forget``.

    Args:
        kinds: The secrets known so far, by kind.
    """

    __slots__ = ("_kinds", "_parts", "_secrets")

    def __init__(self, kinds: Mapping[str, str] | None = None) -> None:
        self._kinds: dict[str, str] = {} if kinds is None else dict(kinds)
        self._secrets: tuple[str, ...] | None = None  # the keys, in order (made when needed)
        self._parts: dict[tuple[str, ...], _Alternation] = {}

    def __getitem__(self, secret: str) -> str:
        return self._kinds[secret]

    def __iter__(self) -> Iterator[str]:
        return iter(self._kinds)

    def __len__(self) -> int:
        return len(self._kinds)

    def __contains__(self, secret: object) -> bool:
        return secret in self._kinds

    def __repr__(self) -> str:
        return f"KnownSecrets({len(self._kinds)} secrets)"  # never the secrets

    def learn(self, values: Iterable[tuple[str, str]]) -> None:
        """Add ``(secret, kind)`` pairs; a secret known already keeps its kind."""
        kinds = self._kinds
        before = len(kinds)
        for secret, kind in values:
            kinds.setdefault(secret, kind)
        if len(kinds) != before:
            self._secrets = None

    def joined(self, values: Mapping[str, str]) -> KnownSecrets:
        """These secrets and ``values`` (whose kinds win), sharing this run's regexes."""
        joined = KnownSecrets({**self._kinds, **values})
        joined._parts = self._parts  # the same run: its parts are these, and more
        return joined

    def forget(self) -> None:
        """Drop the secrets and their regexes: the run is over."""
        self._kinds.clear()
        self._parts.clear()
        self._secrets = None

    def _regexes(self) -> list[_Alternation]:
        secrets = self._secrets
        if secrets is None:
            secrets = self._secrets = tuple(self._kinds)
        if len(self._parts) > _MAX_PARTS:  # stale tails: rebuilt as needed
            self._parts.clear()
        out: list[_Alternation] = []
        start = 0
        while start < len(secrets):
            rest = len(secrets) - start
            size = min(1 << (rest.bit_length() - 1), _MAX_PART) if rest >= _TAIL else rest
            part = secrets[start : start + size]
            regex = self._parts.get(part)
            if regex is None:
                regex = self._parts[part] = _alternation(part)
            out.append(regex)
            start += size
        return out

    def spans(self, text: str) -> list[tuple[int, int, str]]:
        """``(start, end, kind)`` of each known secret in ``text``, leftmost and longest first.

        A base64 form is widened to the base64 text around it (its neighbours hold bits of
        the secret); a secret inside a ``[REDACTED:...]`` marker is not one.
        """
        known = self._kinds
        found: list[tuple[int, int]] = []
        try:
            for regex in self._regexes():
                found.extend(match.span() for match in regex.finditer(text))
        except UnicodeEncodeError:  # a lone surrogate (RE2 reads UTF-8): one search each
            found = [
                (at, at + len(secret)) for secret in known for at in _occurrences(text, secret)
            ]
        if not found:
            return []
        found.sort(key=lambda span: (span[0], -span[1]))
        markers = [m.span() for m in _MARKER.finditer(text)] if "[REDACTED:" in text else []
        out: list[tuple[int, int, str]] = []
        next_marker = 0
        for start, end in found:
            while next_marker < len(markers) and markers[next_marker][1] <= start:
                next_marker += 1
            if next_marker < len(markers) and markers[next_marker][0] < end:
                continue  # in a marker
            if out and start < out[-1][1]:
                continue  # inside a longer one
            kind = known[text[start:end]]
            if kind.endswith(BASE64):
                start = _run_start(text, start)
                run = _BASE64_RUN.match(text, end)
                end = run.end() if run is not None else end
                while end < len(text) and text[end] == "=":
                    end += 1
                if out and start < out[-1][1]:  # the run began in the one before: one marker
                    out[-1] = (out[-1][0], end, out[-1][2])
                    continue
            out.append((start, end, kind))
        return out


def run_scoped(known: Mapping[str, str] | None) -> KnownSecrets | None:
    """``known`` as a ``KnownSecrets`` (itself if it is one; ``None`` if there are none).

    A plain mapping gets regexes of its own, dropped with it when the call that made it ends.
    """
    if not known:
        return None
    return known if isinstance(known, KnownSecrets) else KnownSecrets(known)


def _occurrences(text: str, secret: str) -> Iterator[int]:
    at = text.find(secret)
    while at >= 0:
        yield at
        at = text.find(secret, at + 1)


def _run_start(text: str, start: int) -> int:
    """Where the run of base64 characters that ``start`` is in begins."""
    while start > 0 and text[start - 1] in _BASE64_CHARS:
        start -= 1
    return start


def _alternation(secrets: tuple[str, ...]) -> _Alternation:
    """One RE2 regex for ``secrets``, longest first (RE2 takes the first that matches)."""
    re2: Any = importlib.import_module("re2")
    options = re2.Options()
    options.log_errors = False
    words = sorted((s for s in secrets if _encodable(s)), key=len, reverse=True)
    pattern = "|".join(map(re2.escape, words))
    # not ``re2.compile``: it keeps what it compiles in a process-wide cache (128 patterns),
    # where a run's secrets would outlive the run
    uncached = getattr(re2, "_Regexp", None)
    if isinstance(uncached, type):
        return cast(_Alternation, uncached(pattern, options))
    compiled = re2.compile(pattern, options)  # another version of the binding: then purge
    re2.purge()
    return cast(_Alternation, compiled)


def _encodable(secret: str) -> bool:
    try:
        secret.encode()
    except UnicodeEncodeError:  # a lone surrogate: found by the patterns only
        return False
    return True
