"""Redaction: secrets (and, when enabled, personal data) never reach the log.

Every event passes the run's ``Redactor`` before it is sealed, so nothing written from it —
the store, a JSONL log or export, the console, a trace — ever holds the secret; what the
model sees next is folded from the same redacted events. Each redaction is recorded as a
``redacted`` event naming the event, the fields and the kinds of data (never the data).

The check is cheap when there is nothing to find: one regex search over the JSON the
journal encodes anyway for the hash; only a hit walks the event's fields. What the patterns
are, and the probe, are in ``secretpatterns``; a text's reading with its escapes undone, in
``readings``; the search for the secrets a run already knows, in ``knownsecrets``.
"""

from __future__ import annotations

import re
from bisect import bisect_right
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import fields, is_dataclass, replace
from typing import Any, cast

from tether.errors import ConfigError
from tether.policy.knownsecrets import KnownSecrets, base_kind, encoded_forms, run_scoped
from tether.policy.readings import read, visible
from tether.policy.secretpatterns import (
    PERSONAL_PATTERNS,
    PERSONAL_PROBE,
    SECRET_LIST,
    SECRET_PATTERNS,
    SECRET_WORD_BITS,
    accept,
    list_items,
    looks_like_token,
    secret_probe,
    secret_words_in,
    token_name,
)

__all__ = ["PERSONAL_PATTERNS", "SECRET_PATTERNS", "Redaction", "Redactor"]

ECHO_MIN = 6
"""Characters a secret needs to be redacted wherever it appears again in the run (it is
found once by a pattern, then echoed where no pattern sees it); shorter ones ("admin",
"test") would blank out ordinary words."""
_SECRET_GROUP = re.compile(
    r"(?i)(?:password|passwd|pwd|secret|api[_-]?key|access[_-]?token|auth[_-]?token"
    r"|passphrase)s?$",
    re.ASCII,
)
"""A key whose object value holds secrets only (``secrets``, ``api_keys``): it goes whole."""

_SECRET_KEY = re.compile(
    r"(?i)password|passwd|pwd|secret|api[_-]?key|access[_-]?token|auth[_-]?token|passphrase"
    r"|^authorization$",
    re.ASCII,
)
"""An object key whose string value is a secret, whatever the value looks like."""


class Redaction:
    """What one event's redaction found: the fields (paths) and the kinds, never the data.

    ``values`` holds the secrets themselves, by kind, for the run to redact wherever they
    appear again (a tool echoing a password it was given), and the forms they take encoded
    (URL-encoded; base64, whose kinds end in ``+base64``); it is never written anywhere.
    """

    __slots__ = ("count", "fields", "kinds", "values")

    def __init__(self) -> None:
        self.fields: list[str] = []
        self.kinds: dict[str, None] = {}
        self.count = 0
        self.values: dict[str, str] = {}


class Redactor:
    """Finds secrets (and optionally personal data) in text and replaces them with markers.

    Args:
        secrets: Redact ``SECRET_PATTERNS`` (API keys, tokens, private keys, URL passwords).
        personal: Also redact ``PERSONAL_PATTERNS`` (emails, card numbers, phone numbers).
        patterns: More ``(kind, regex)`` pairs; a regex with a group redacts only group 1.
        callables: Functions ``text -> text`` that return the text with their own redactions
            (a changed result counts as kind ``custom:<function name>``).
    """

    def __init__(
        self,
        *,
        secrets: bool = True,
        personal: bool = False,
        patterns: Sequence[tuple[str, str]] = (),
        callables: Sequence[Callable[[str], str]] = (),
    ) -> None:
        builtin = [*(SECRET_PATTERNS if secrets else ()), *(PERSONAL_PATTERNS if personal else ())]
        chosen = [*builtin, *patterns]
        bits = SECRET_WORD_BITS if secrets else ()
        compiled: list[tuple[str, re.Pattern[str], int]] = []
        for index, (kind, pattern) in enumerate(chosen):
            # ASCII for the built-in ones: what the byte probe sees (no Unicode case folding,
            # no non-ASCII digits), so the probe is never stricter than they are
            flags = re.ASCII if index < len(builtin) else 0
            try:
                # the bits of the words each of its matches holds (0: none known, always run)
                compiled.append(
                    (kind, re.compile(pattern, flags), bits[index] if index < len(bits) else 0)
                )
            except re.error as exc:
                raise ConfigError(
                    f"redaction pattern {kind!r} is not a valid regex: {exc}"
                ) from None
        self._patterns = tuple(compiled)
        self._callables = tuple(callables)
        # Whether an event needs a look is decided on its JSON bytes, which the journal
        # encodes anyway. Every built-in secret contains one of a few literals that JSON
        # never escapes (or a character that shows nothing, or an escape that a reading
        # undoes), so one scan for them settles the common case; a hit walks the
        # decoded strings, where the real patterns run. Personal data is probed loosely
        # (an "@", or nine digits close together, JSON escapes between them allowed);
        # patterns and callables of the caller's own cannot be probed: they make every
        # event a walk.
        self._secrets = secrets
        self._probe = secret_probe() if secrets else None
        self._personal_probe = PERSONAL_PROBE if personal else None
        self._always = bool(patterns or callables)
        self.active = bool(chosen or callables)
        # No state of a run's: a redactor is shared by an agent's runs, and the secrets one
        # run learns (and the regexes that find them) are that run's (``KnownSecrets``)

    def __repr__(self) -> str:
        kinds = ", ".join(k for k, _, _ in self._patterns)
        return f"Redactor({kinds}; {len(self._callables)} callables)"

    def might_match(self, encoded: bytes) -> bool:
        """Whether ``encoded`` (an event's JSON) may hold something to redact.

        Never stricter than the patterns: a ``False`` means nothing in it would be redacted.
        """
        if self._always:
            return True
        probe = self._probe
        if probe is not None and probe.search(encoded.lower()) is not None:
            return True
        personal = self._personal_probe
        return personal is not None and personal.search(encoded) is not None

    def redact_text(
        self, text: str, found: Redaction | None = None, known: Mapping[str, str] | None = None
    ) -> str:
        """``text`` with every match, and every ``known`` secret, replaced by ``[REDACTED:kind]``.

        ``known`` maps secrets found earlier in the run to their kinds: once a value is known
        to be a secret, it is one wherever it appears (in words no pattern would match). A
        run passes its ``KnownSecrets``, whose regexes it keeps; for another mapping they are
        built for this call.
        """
        known = run_scoped(known)
        present = secret_words_in(text) if self._secrets else 0
        for kind, regex, bits in self._patterns:
            if bits and not bits & present:
                continue  # none of the words each of its matches holds: no match
            text = regex.sub(lambda m, k=kind: self._replace(m, k, found), text)
        if self._secrets:  # then what only shows escaped, URL-encoded or with invisible
            # characters in it (after the patterns: a value the reading would end early, at
            # a decoded "%20", is taken whole as it stands first)
            text = self._redact_reading(text, found, known)
        if known:
            text = self._redact_known(text, found, known)
        for function in self._callables:
            changed = function(text)
            if changed != text:
                if found is not None:
                    found.kinds[f"custom:{getattr(function, '__name__', 'callable')}"] = None
                    found.count += 1
                text = changed
        return text

    def _redact_known(self, text: str, found: Redaction | None, known: KnownSecrets) -> str:
        """``text`` with the ``known`` secrets in it redacted (one pass, longest first)."""
        spans = known.spans(text)
        if not spans:
            return text
        seen: set[str] = set()
        for start, end, kind in spans:
            if found is not None and text[start:end] not in seen:  # once per secret
                seen.add(text[start:end])
                found.kinds[base_kind(kind)] = None
                found.count += 1
        return _splice(text, [(start, end, base_kind(kind)) for start, end, kind in spans])

    def _redact_reading(
        self, text: str, found: Redaction | None, known: KnownSecrets | None
    ) -> str:
        r"""``text`` with the secrets its reading shows redacted where they stand.

        Escapes undone (``{\"password\": \"...\"}``, ``\u002d``, ``password%3D...``) and
        invisible characters dropped (``pass\u200bword=``), a secret is matched in the
        reading and redacted in ``text``.
        """
        reading = read(text)
        if reading is None:
            return text
        spans = self._reading_spans(reading.plain, found, known)
        if not spans:
            return text
        for *_, kind in spans:
            if found is not None:
                found.kinds[kind] = None
                found.count += 1
        spans = sorted((*reading.span(start, end), kind) for start, end, kind in spans)
        if found is not None:  # as they stand too: echoed so, no reading changes them
            for start, end, kind in spans:
                _learn(found, text[start:end], kind)
        return _splice(text, spans)

    def _reading_spans(
        self, plain: str, found: Redaction | None, known: KnownSecrets | None
    ) -> list[tuple[int, int, str]]:
        """What to redact in ``plain``, as the patterns would one after the other."""
        spans: list[tuple[int, int, str]] = []
        taken = _Spans()
        present = secret_words_in(plain)
        for kind, regex, bits in self._patterns:
            if bits and not bits & present:
                continue
            for match in regex.finditer(plain):
                hit = self._hit(match, kind, None)
                if hit is not None and taken.add(*hit):
                    self._hit(match, kind, found)  # noted only if redacted
                    spans.append((*hit, kind))
        if known:
            for start, end, kind in known.spans(plain):
                if taken.add(start, end):
                    spans.append((start, end, base_kind(kind)))
        return spans

    def _hit(
        self, match: re.Match[str], kind: str, found: Redaction | None
    ) -> tuple[int, int] | None:
        """The span of ``match`` to redact (its group, if it has one), noting the secret."""
        if not accept(kind, match):
            return None
        group = match.lastindex or 0  # a pattern with groups redacts only the one that matched
        value = match.group(group)
        if group and value.startswith("[REDACTED:"):
            return None
        if found is not None:
            if group and match.re.pattern == SECRET_LIST:
                for item in list_items(match):
                    _learn(found, item, kind)
            _learn(found, value, kind)
        return match.span(group)

    def _replace(self, match: re.Match[str], kind: str, found: Redaction | None) -> str:
        hit = self._hit(match, kind, found)
        if hit is None:
            return match.group(0)
        if found is not None:
            found.kinds[kind] = None
            found.count += 1
        offset = match.start()
        whole = match.group(0)
        return f"{whole[: hit[0] - offset]}[REDACTED:{kind}]{whole[hit[1] - offset :]}"

    def redact_event_fields(
        self, event: object, skip: frozenset[str], known: Mapping[str, str] | None = None
    ) -> Redaction | None:
        """Redact a freshly built (not yet shared) event in place; ``None`` if nothing was found.

        ``skip`` names fields that hold only tether's own identifiers and hashes; ``known``
        maps the secrets found earlier in the run to their kinds (see ``redact_text``).
        """
        known = run_scoped(known)
        found = Redaction()
        self._redact_fields(event, skip, found, known)
        secrets = known
        if found.values:
            secrets = _joined(known, found.values)
            if any(known is None or v not in known for v in found.values):
                # a secret this event revealed may stand bare elsewhere in it: once more
                self._redact_fields(event, skip, found, secrets)
        if found.count and secrets:  # a path may pass through a secret key
            found.fields[:] = dict.fromkeys(
                self._redact_known(f, None, secrets) for f in found.fields
            )
        return found if found.count else None

    def _redact_fields(
        self, event: object, skip: frozenset[str], found: Redaction, known: Mapping[str, str] | None
    ) -> None:
        for spec in fields(cast(Any, event)):
            if spec.name in skip:
                continue
            current = getattr(event, spec.name)
            new = self.redact_value(current, spec.name, found, known)
            if new is not current and new != current:
                object.__setattr__(event, spec.name, new)

    def _secret_by_name(self, name: str, item: object, path: str, found: Redaction) -> bool:
        """Whether ``item`` is a secret by its key's name (``{"password": "..."}``); noted.

        Any value but an empty one, a flag or a redaction: a number (``{"pin": 8765}``), a
        list of them or of strings (``{"api_keys": [...]}``), an object under a name that ends
        in the word (``{"secrets": {...}}``; ``{"secrets_backend": {...}}`` is walked) goes whole.
        """
        if not self._secrets:
            return False
        if not name.isascii():
            name = visible(name)  # "pass\u200bword" is "password"
        if (
            item is None
            or isinstance(item, bool)
            or (isinstance(item, Mapping) and _SECRET_GROUP.search(name) is None)
            or item in ("", [], {})
            or (isinstance(item, str) and item.startswith("[REDACTED:"))
            or (isinstance(item, list | tuple) and not all(map(_scalar, cast(list[object], item))))
            or _SECRET_KEY.search(name) is None
        ):
            return False
        self._note_by_name(cast(object, item), path, found, "password")
        return True

    def _token_by_name(self, name: object, item: object, path: str, found: Redaction) -> bool:
        """Whether ``item`` is a token by its key's name and its look; noted.

        ``refresh_token`` names one, ``next_token`` does not; a word is none (a model's log
        probabilities hold ``{"token": " world"}``).
        """
        if not (self._secrets and isinstance(name, str) and isinstance(item, str)):
            return False
        if not name.isascii():
            name = visible(name)
        if not (token_name(name) and looks_like_token(item)):
            return False
        self._note_by_name(item, path, found, "token")
        return True

    def _note_by_name(self, item: object, path: str, found: Redaction, kind: str) -> None:
        found.kinds[kind] = None
        found.count += 1
        for text in _texts(item):
            if not text.startswith("[REDACTED:"):
                _learn(found, text, kind)
        found.fields.append(path)

    def _redact_mapping(
        self, items: Mapping[Any, Any], path: str, found: Redaction, known: Mapping[str, str] | None
    ) -> dict[Any, Any]:
        out: dict[Any, Any] = {}
        for key, item in items.items():
            name = key
            if isinstance(key, str):
                before = found.count
                name = self.redact_text(key, found, known)
                if found.count != before:
                    found.fields.append(f"{path}.{name}")  # the key itself held it
                if self._secret_by_name(name, item, f"{path}.{name}", found):
                    out[name] = "[REDACTED:password]"  # {"password": "..."}: apart
                    continue
            new = out[name] = self.redact_value(item, f"{path}.{name}", found, known)
            if new == item and self._token_by_name(name, item, f"{path}.{name}", found):
                out[name] = "[REDACTED:token]"  # {"refresh_token": "..."}, no pattern's
        return out

    def redact_value(
        self, value: Any, path: str, found: Redaction, known: Mapping[str, str] | None = None
    ) -> Any:
        """``value`` with its strings redacted (dataclasses, dicts, lists and tuples walked)."""
        known = run_scoped(known)
        if isinstance(value, str):
            before = found.count
            text = self.redact_text(value, found, known)
            if found.count != before:
                found.fields.append(path)
            return text
        if isinstance(value, Mapping):
            return self._redact_mapping(cast(Mapping[Any, Any], value), path, found, known)
        if isinstance(value, list | tuple):
            items = cast(Iterable[Any], value)
            redacted = [
                self.redact_value(v, f"{path}[{i}]", found, known) for i, v in enumerate(items)
            ]
            return tuple(redacted) if isinstance(value, tuple) else redacted
        if is_dataclass(value) and not isinstance(value, type):
            changes: dict[str, Any] = {}
            for spec in fields(value):
                current = getattr(value, spec.name)
                new = self.redact_value(
                    current, f"{path}.{spec.name}" if path else spec.name, found, known
                )
                if new is not current and new != current:
                    changes[spec.name] = new
            return replace(value, **changes) if changes else value
        return value


class _Spans:
    """Stretches of a text taken so far (disjoint, in order)."""

    __slots__ = ("_ends", "_starts")

    def __init__(self) -> None:
        self._starts: list[int] = []
        self._ends: list[int] = []

    def add(self, start: int, end: int) -> bool:
        """Take ``[start, end)`` unless it overlaps one taken; whether it was taken."""
        i = bisect_right(self._starts, start)
        if (i and self._ends[i - 1] > start) or (i < len(self._starts) and self._starts[i] < end):
            return False
        self._starts.insert(i, start)
        self._ends.insert(i, end)
        return True


def _splice(text: str, spans: Sequence[tuple[int, int, str]]) -> str:
    """``text`` with each ``(start, end, kind)`` (in order, disjoint) replaced by its marker."""
    pieces: list[str] = []
    done = 0
    for start, end, kind in spans:
        pieces += (text[done:start], f"[REDACTED:{kind}]")
        done = end
    pieces.append(text[done:])
    return "".join(pieces)


def _joined(known: KnownSecrets | None, values: Mapping[str, str]) -> KnownSecrets:
    """``known`` and ``values`` (a run's secrets and those an event just revealed)."""
    return KnownSecrets(values) if known is None else known.joined(values)


def _learn(found: Redaction, value: str, kind: str) -> None:
    """Note ``value`` as a secret the run redacts wherever it appears again, encoded too."""
    if len(value) >= ECHO_MIN:
        found.values[value] = kind
        for form, suffix in encoded_forms(value).items():
            found.values.setdefault(form, kind + suffix)


def _scalar(value: object) -> bool:
    return isinstance(value, str | int | float) and not isinstance(value, bool)


def _texts(value: object) -> list[str]:
    """The strings (and numbers, as text) in a JSON value: what a secret's value reveals."""
    if isinstance(value, str):
        return [value]
    if isinstance(value, int | float) and not isinstance(value, bool):
        return [str(value)]
    if isinstance(value, Mapping):
        return [t for v in cast(Mapping[Any, Any], value).values() for t in _texts(v)]
    if isinstance(value, list | tuple):
        return [t for v in cast(Iterable[Any], value) for t in _texts(v)]
    return []
