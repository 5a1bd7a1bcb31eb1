"""The data-flow rule: where the values a call acts on came from.

A run's sources are in its log: the goal and the developer's instructions
(``run_started``), the user's replies, arguments a human gave at an approval, and every
tool result, trusted or not (a tool declares ``untrusted_output``; by default the
open-world ones are untrusted). Once untrusted output is in the context, a call that has
side effects (or reaches the open world, where its arguments are the exfiltration
channel) may act only on values found in a trusted source. What a call acts on is its
*sensitive* arguments: declared per tool (``ToolAnnotations.sensitive``), else chosen by
name (recipients, accounts, URLs, paths, amounts, ids, passwords, addresses, ...) and by
JSON Schema format (``email``, ``uri``, ``hostname``, ...). Free text (a subject, a body)
is data, not a target, except for the links and email addresses written in it: where a
message sends its readers is traced like a recipient.

One more way an amount is traced to the user: the sum or the difference of two numbers
of one text the user wrote (the goal, a reply, arguments given at an approval), so
``send_money(amount=20)`` runs when the goal says "she sent me 60 for a ticket that cost
40: send her back the difference". Only for amounts (a parameter named ``amount``,
``price``, ``total``, ``quantity``...), never an id or a path; years (1900-2100) are no
operand, and a text with more than 12 numbers makes none.

A value is found in a source when it appears there as a whole token (case and runs of
whitespace ignored; numbers compared by value, ``1,250.00`` = ``1250``, and only numbers
standing alone count: the ``01`` of a date or the ``2`` of ``v2`` is no source of an id).
A value found in
no trusted source is held, with the argument and the untrusted event it came from (or the
fact that it came from nowhere) in the decision's reason.

What it does not see: an injected instruction that makes the model act on values a
trusted source already holds (delete a file the user's own trusted listing names), values
that happen to match (a small number written in a trusted text, or an amount two of the
user's numbers add up to), and what a message says
beyond its links and addresses. Tools whose outside-written text is declared
honestly, and ``require_approval`` for the calls that must never run unasked, cover those.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import cast

import orjson

from tether.content import content_text
from tether.events import (
    ApprovalGiven,
    Event,
    MemoryRecalled,
    RunStarted,
    ToolCallFinished,
    UserReplied,
)
from tether.jsontypes import JsonObject, JsonValue
from tether.tools.base import ToolDefinition

__all__ = [
    "SENSITIVE_FORMATS",
    "SENSITIVE_WORDS",
    "Source",
    "Sources",
    "described",
    "sensitive_values",
    "untraced",
]

SENSITIVE_WORDS = frozenset(
    {
        # who receives
        "to", "cc", "bcc", "recipient", "recipients", "receiver", "receivers", "email",
        "emails", "address", "addresses", "addr", "phone", "user", "users", "username",
        "member", "members", "participant", "participants", "attendee", "attendees",
        "invitee", "invitees", "channel", "channels", "payee", "beneficiary", "owner",
        # where money goes
        "account", "accounts", "iban", "bic", "swift", "card", "wallet",
        # how much
        "amount", "amounts", "price", "total", "quantity", "qty",
        # where on the network
        "url", "urls", "uri", "uris", "link", "links", "href", "endpoint", "webhook",
        "host", "hostname", "domain", "ip",
        # what is touched
        "path", "paths", "file", "files", "filename", "filenames", "dir", "directory",
        "folder", "dest", "destination", "target", "key", "id", "ids", "repo",
        # what runs
        "command", "cmd", "argv", "query", "sql",
        # what unlocks, and where someone lives
        "password", "passwd", "passphrase", "passcode", "pin", "secret", "token",
        "credential", "credentials", "street", "city", "zip", "postcode", "postal",
    }
)  # fmt: skip
"""Words that make a parameter sensitive when they appear in its name (split at ``_``,
``-`` and camelCase: ``recipient_iban``, ``fileId``)."""

SENSITIVE_FORMATS = frozenset(
    {
        "email", "idn-email", "uri", "url", "iri", "uri-reference", "iri-reference",
        "hostname", "idn-hostname", "ipv4", "ipv6",
    }
)  # fmt: skip
"""JSON Schema formats that make a parameter sensitive whatever its name."""

_CAMEL = re.compile(r"([a-z0-9])([A-Z])")
_WORD = re.compile(r"[a-z]+|[0-9]+")
_SPACE = re.compile(r"\s+")
# a number standing alone: not a piece of a date (2026-01-22, 01/22), a time (10:30), a
# version (1.2.3), an identifier (v2, a1b2) or a word
_NUMBER = re.compile(r"(?<!\d[-/:])(?<![\w.])[-+]?\d+(?:,\d{3})*(?:\.\d+)?(?!\w|[-/:]\d|\.\d)")
# links and addresses inside free text: where a message sends its readers
_EMBEDDED = re.compile(r"(?i)\b(?:https?|ftp)://[^\s<>\"'`]+|[\w.+-]+@[\w-]+(?:\.[\w-]+)+")
_NUMERIC = re.compile(r"^[-+]?(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?$")
_MAX_VALUES = 256  # a call with more sensitive leaves is traced on its first ones only
_MAX_OPERANDS = 12  # a user's text with more numbers makes no amount (too many would match)
_AMOUNT_WORDS = frozenset({"amount", "amounts", "price", "total", "quantity", "qty"})


def _words(name: str) -> list[str]:
    return _WORD.findall(_CAMEL.sub(r"\1_\2", name).lower())


def _is_sensitive_name(name: str) -> bool:
    return any(word in SENSITIVE_WORDS for word in _words(name))


def _format_of(schema: JsonObject, name: str) -> str | None:
    properties = schema.get("properties")
    if not isinstance(properties, dict):
        return None
    prop = cast(Mapping[str, JsonValue], properties).get(name)
    if not isinstance(prop, dict):
        return None
    prop = cast(Mapping[str, JsonValue], prop)
    items = prop.get("items")
    found = prop.get("format")
    if found is None and isinstance(items, dict):
        found = cast(Mapping[str, JsonValue], items).get("format")
    return found if isinstance(found, str) else None


Leaf = str | int | float


def sensitive_values(
    arguments: JsonObject, schema: JsonObject, declared: Sequence[str] | None
) -> list[tuple[str, Leaf]]:
    """``(path, value)`` of each scalar a call acts on (see the module's docstring).

    ``declared`` (parameter names, or dotted paths) replaces the defaults by name and format.
    """
    found: list[tuple[str, Leaf]] = []
    for name, value in arguments.items():
        if declared is not None:
            for entry in declared:
                head, _, rest = entry.partition(".")
                if head == name:
                    _leaves(_at(value, rest), entry, True, False, found)
            continue
        sensitive = _is_sensitive_name(name) or _format_of(schema, name) in SENSITIVE_FORMATS
        _leaves(value, name, sensitive, True, found)
    return found[:_MAX_VALUES]


def _at(value: JsonValue, path: str) -> JsonValue:
    for part in path.split(".") if path else ():
        if not isinstance(value, dict):
            return None
        value = cast(Mapping[str, JsonValue], value).get(part)
    return value


def _leaves(
    value: JsonValue, path: str, sensitive: bool, by_name: bool, out: list[tuple[str, Leaf]]
) -> None:
    if isinstance(value, bool) or value is None:
        return
    if isinstance(value, str):
        if sensitive and value.strip():
            out.append((path, value))
        elif by_name and ("@" in value or "://" in value):
            out.extend(  # where a message sends its readers
                (f"{path} (a link in it)", m.group().rstrip(".,;:!?)]}'\""))
                for m in _EMBEDDED.finditer(value)
            )
    elif isinstance(value, int | float):
        if sensitive:
            out.append((path, value))
    elif isinstance(value, list):
        for index, item in enumerate(cast(list[JsonValue], value)):
            _leaves(item, f"{path}[{index}]", sensitive, by_name, out)
    else:
        for key, item in value.items():
            nested = sensitive or (by_name and _is_sensitive_name(key))
            _leaves(item, f"{path}.{key}", nested, by_name, out)


def _normal(text: str) -> str:
    return _SPACE.sub(" ", text.casefold())


def _number(value: Leaf) -> float | None:
    if isinstance(value, int | float):
        return float(value)
    text = value.strip()
    if _NUMERIC.match(text):
        return float(text.replace(",", ""))
    return None


def _numbers_in(text: str) -> set[float]:
    """Every number standing alone in ``text``; ``1,250`` is 1250 (and, as JSON, 1 and 250)."""
    found: set[float] = set()
    for match in _NUMBER.finditer(text):
        written = match.group()
        found.add(float(written.replace(",", "")))
        if "," in written:  # [100,200] in JSON reads like a thousands separator
            found.update(float(part) for part in written.split(","))
    return found


def _is_year(number: float) -> bool:
    return number.is_integer() and 1900 <= number <= 2100


def _is_amount(path: str) -> bool:
    """Whether the argument at ``path`` (``amount``, ``items[0].price``) names an amount."""
    name = path.rsplit(".", 1)[-1].split("[", 1)[0]
    return any(word in _AMOUNT_WORDS for word in _words(name))


def _has_token(text: str, token: str) -> bool:
    """``token`` occurs in ``text`` not glued to letters or digits on either side."""
    if not token:
        return False
    check_start, check_end = token[0].isalnum(), token[-1].isalnum()
    start = text.find(token)
    while start >= 0:
        end = start + len(token)
        if (not check_start or start == 0 or not text[start - 1].isalnum()) and (
            not check_end or end == len(text) or not text[end].isalnum()
        ):
            return True
        start = text.find(token, start + 1)
    return False


@dataclass(slots=True)
class Source:
    """One text the model has read, trusted or not: an event of the log, or a text outside it.

    It holds the event's place, never the event: a policy keeps these for many runs, and a
    finished run's log must not stay in memory because of them.
    """

    seq: int
    """The event's place in the log (``-1`` for a text outside it)."""
    label: str
    """What it is, in words (``the goal``, ``read_inbox``)."""
    trusted: bool
    """Written by the user, the developer or a trusted tool."""
    raw: int | Callable[[], str]
    """The event's index in the log, or what makes the text (read on first use only)."""
    user: bool = False
    """Written by the user (the goal, a reply, arguments given at an approval)."""
    _text: str | None = field(default=None, repr=False)
    _numbers: frozenset[float] | None = field(default=None, repr=False)


def _text_of(event: Event) -> str:
    match event:
        case RunStarted():
            return f"{event.goal}\n{event.instructions}"
        case UserReplied():
            return event.text
        case MemoryRecalled():
            return "\n".join(event.texts)
        case ApprovalGiven():
            return orjson.dumps(event.arguments).decode()
        case ToolCallFinished():
            text = content_text(event.content)
            if event.structured is not None:
                text += "\n" + orjson.dumps(event.structured).decode()
            return text
        case _:
            return ""


class Sources:
    """The sources of one run's log, in order, and the values found in them."""

    __slots__ = ("_events", "items", "untrusted", "user")

    def __init__(self) -> None:
        self.items: list[Source] = []
        self.untrusted: list[Source] = []
        self.user: list[Source] = []
        self._events: Sequence[Event] = ()

    def add(
        self,
        text: int | Callable[[], str],
        seq: int,
        label: str,
        *,
        trusted: bool,
        user: bool = False,
    ) -> None:
        """Record a text the model has read: the log's event at index ``text``, or ``text()``.

        ``user``: the user wrote it (its numbers may add up to an amount).
        """
        source = Source(seq=seq, label=label, trusted=trusted, raw=text, user=user and trusted)
        self.items.append(source)
        if not trusted:
            self.untrusted.append(source)
        if source.user:
            self.user.append(source)

    def bind(self, events: Sequence[Event]) -> None:
        """Read the texts of log events from ``events`` (the run's log) until ``release``."""
        self._events = events

    def release(self) -> None:
        """Forget the log bound last (nothing here keeps a run's events alive)."""
        self._events = ()

    def forget(self) -> None:
        """Drop the texts read so far (they are read again when needed)."""
        for source in self.items:
            source._text = None  # pyright: ignore[reportPrivateUsage]
            source._numbers = None  # pyright: ignore[reportPrivateUsage]

    def text(self, source: Source) -> str:
        """``source``'s text, normalized (case folded, whitespace collapsed)."""
        if source._text is None:  # pyright: ignore[reportPrivateUsage]
            raw = source.raw
            source._text = _normal(raw() if callable(raw) else _text_of(self._events[raw]))  # pyright: ignore[reportPrivateUsage]
        return source._text  # pyright: ignore[reportPrivateUsage]

    def numbers(self, source: Source) -> frozenset[float]:
        """Every number standing alone in ``source``'s text."""
        if source._numbers is None:  # pyright: ignore[reportPrivateUsage]
            source._numbers = frozenset(_numbers_in(self.text(source)))  # pyright: ignore[reportPrivateUsage]
        return source._numbers  # pyright: ignore[reportPrivateUsage]

    def holds(self, source: Source, value: Leaf) -> bool:
        """Whether ``value`` appears in ``source``."""
        number = _number(value)
        if number is not None:  # by value; never a digit inside a date or an id
            return number in self.numbers(source)
        if isinstance(value, str):
            text, token = self.text(source), _normal(value.strip())
            return _has_token(text, token) or (
                token.endswith("/") and _has_token(text, token.rstrip("/"))
            )
        return False

    def trusted_source(self, value: Leaf) -> Source | None:
        """The first trusted source holding ``value``."""
        return next((s for s in self.items if s.trusted and self.holds(s, value)), None)

    def untrusted_source(self, value: Leaf) -> Source | None:
        """The last untrusted source holding ``value`` (the likeliest origin)."""
        return next((s for s in reversed(self.untrusted) if self.holds(s, value)), None)

    def added_up(self, value: Leaf) -> str | None:
        """How two numbers of one text of the user's add up to ``value`` (``60 - 40``)."""
        target = _number(value)
        if target is None:
            return None
        for source in self.user:
            numbers = sorted(n for n in self.numbers(source) if not _is_year(n))
            if len(numbers) > _MAX_OPERANDS:
                continue
            for i, a in enumerate(numbers):
                for b in numbers[i + 1 :]:
                    for made, how in ((a + b, f"{a:g} + {b:g}"), (b - a, f"{b:g} - {a:g}")):
                        if math.isclose(made, target, rel_tol=1e-9, abs_tol=0.005):
                            return f"{how}, both in {source.label}"
        return None

    def __iter__(self) -> Iterator[Source]:
        return iter(self.items)


def described(tools: Mapping[str, ToolDefinition]) -> str:
    """What the developer's and tether's own tool definitions say.

    Names, descriptions and schemas: the programs a shell tool allows, an enum of accounts.
    Definitions from outside (``origin`` set) are not included: a server's description is
    its own text.
    """
    return "\n".join(
        f"{d.name}: {d.description}\n{orjson.dumps(d.input_schema).decode()}"
        for d in tools.values()
        if d.origin is None
    )


_TRUSTED = (
    "the goal, the user's replies, the instructions, the tools' own descriptions or a "
    "trusted tool's result"
)


def _show(value: Leaf) -> str:
    text = repr(value)
    return text if len(text) <= 80 else f"{text[:77]}..."


def _where(source: Source) -> str:
    return source.label if source.seq < 0 else f"{source.label} (event {source.seq})"


def untraced(
    name: str,
    arguments: JsonObject,
    schema: JsonObject,
    declared: Sequence[str] | None,
    sources: Sources,
    events: Sequence[Event],
) -> tuple[str | None, str]:
    """Trace a call's sensitive values: why it must wait (or ``None``), and where they came from.

    The first is the first value no trusted source holds, with the untrusted event it
    appears in; the second says, for a call that may go on, which trusted source each value
    was found in (``iban from contacts (event 7)``), for its decision's reason. Call it only
    once untrusted output is in the context.
    """
    sources.bind(events)
    try:
        return _trace(name, sensitive_values(arguments, schema, declared), sources)
    finally:
        sources.release()


def _trace(
    name: str, values: Sequence[tuple[str, Leaf]], sources: Sources
) -> tuple[str | None, str]:
    traced: list[str] = []
    for path, value in values:
        source = sources.trusted_source(value)
        if source is not None:
            traced.append(f"{path} from {_where(source)}")
            continue
        how = sources.added_up(value) if _is_amount(path) else None
        if how is not None:
            traced.append(f"{path} is {how}")
            continue
        origin = sources.untrusted_source(value)
        if origin is not None:
            where = (
                f"appears in the output of {origin.label} (event {origin.seq}, untrusted) and "
                f"in none of {_TRUSTED}"
            )
        elif sources.untrusted:
            last = sources.untrusted[-1]
            where = (
                f"appears in none of {_TRUSTED}, and untrusted output ({last.label}, event "
                f"{last.seq}) is in the context"
            )
        else:
            where = f"appears in none of {_TRUSTED}, and untrusted output is in the context"
        why = (
            f"argument {path} of {name} is {_show(value)}, which {where}: a human must "
            "confirm the user asked for it (or declare the source trusted)"
        )
        return why, ""
    return None, ", ".join(traced)
