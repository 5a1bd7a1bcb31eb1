"""Tool calls written as text, read leniently (the parser of prompted tool calling).

Small models stray from any format, so replies are read leniently: ``<tool_call>`` tags,
code fences or bare JSON amid prose, several calls, the common key names, arguments as a JSON
string, and as a last resort trailing commas and Python-literal dicts (``ast.literal_eval``,
never ``eval``). JSON is found with a real decoder (``raw_decode``), never by matching braces.
"""

from __future__ import annotations

import ast
import json
import math
import re
import warnings
from collections.abc import Collection, Sequence
from typing import Literal, cast

from tether._internal.frozen import frozen
from tether.jsontypes import JsonObject, JsonValue
from tether.messages import ToolCall
from tether.tools.base import ToolDefinition

__all__ = [
    "ParseResult",
    "ToolNames",
    "format_guide",
    "parse_tool_calls",
    "render_tool_call",
]


@frozen
class ParseResult:
    """The tool calls read from a model's text reply."""

    calls: tuple[ToolCall, ...] = ()
    """Every call the reply attempted, in order, with ids ``call_1``, ``call_2``...; one that
    could not be read has ``parse_error`` set, one to an unknown tool keeps its written name."""
    text: str = ""
    """The reply's prose outside the calls, stripped."""
    error: str | None = None
    """What was wrong, written for the model, with the format to use instead; ``None`` when
    the reply is usable (a plain-text reply without calls is usable)."""


def render_tool_call(call: ToolCall) -> str:
    """A call in the format the model is asked to write: ``<tool_call>{...}</tool_call>``."""
    body = json.dumps({"name": call.name, "arguments": call.arguments}, ensure_ascii=False)
    return f"<tool_call>{body}</tool_call>"


# -- reading JSON leniently ------------------------------------------------------------------


def _finite(literal: str) -> float:
    value = float(literal)
    if not math.isfinite(value):
        raise ValueError(f"the number {literal} is out of range")
    return value


def _no_constant(name: str) -> object:
    raise ValueError(f"{name} is not valid JSON")


# NaN, Infinity and overflowing numbers are refused: arguments must survive a JSON round trip.
_DECODER = json.JSONDecoder(parse_float=_finite, parse_constant=_no_constant)
_DECODE_ERRORS = (ValueError, RecursionError, MemoryError)  # JSONDecodeError is a ValueError
_LENIENT_MAX = 100_000  # characters; the fallbacks are for model-sized replies
_INVALID = object()
_DOUBLE = re.compile(r'[^"\\]*(?:\\.[^"\\]*)*"', re.S)  # the rest of a "..." string
_SINGLE = re.compile(r"[^'\\]*(?:\\.[^'\\]*)*'", re.S)
_STRUCTURE = re.compile(r"[\"'{}\[\]]")
_PYTHON_WORDS = {"true": "True", "false": "False", "null": "None"}


@frozen
class _Decoded:
    value: object
    start: int
    end: int


@frozen
class _Failed:
    reason: str
    start: int
    end: int


def _string_end(text: str, quote_at: int) -> int | None:
    """Where the string opened at ``quote_at`` ends (after its quote); ``None`` if never."""
    rest = (_DOUBLE if text[quote_at] == '"' else _SINGLE).match(text, quote_at + 1)
    return rest.end() if rest else None


def _span(text: str, start: int) -> tuple[Literal["ok", "unclosed", "mismatch"], int]:
    """Where the bracketed value at ``start`` ends, skipping brackets inside quoted strings."""
    closers: list[str] = []
    pos = start
    while (token := _STRUCTURE.search(text, pos)) is not None:
        at, char = token.start(), token.group()
        if char in "\"'":
            end = _string_end(text, at)
            if end is None:
                break
            pos = end
            continue
        pos = at + 1
        if char in "{[":
            closers.append("}" if char == "{" else "]")
        elif not closers or closers.pop() != char:
            return "mismatch", pos
        elif not closers:
            return "ok", pos
    return "unclosed", len(text)


def _tidy(source: str, *, python: bool) -> str:
    """Drop trailing commas; with ``python``, spell ``true``/``false``/``null`` as Python."""
    out: list[str] = []
    pos, size = 0, len(source)
    while pos < size:
        char = source[pos]
        if char in "\"'":
            end = _string_end(source, pos) or size
            out.append(source[pos:end])
            pos = end
            continue
        if char == ",":
            after = pos + 1
            while after < size and source[after].isspace():
                after += 1
            if after < size and source[after] in "}]":
                pos += 1
                continue
        elif python and char.isalpha():
            end = pos
            while end < size and (source[end].isalnum() or source[end] == "_"):
                end += 1
            word = source[pos:end]
            out.append(_PYTHON_WORDS.get(word, word))
            pos = end
            continue
        out.append(char)
        pos += 1
    return "".join(out)


def _jsonable(value: object) -> JsonValue:
    """A Python literal as JSON, or ``ValueError`` (sets, bytes, non-string keys...)."""
    if value is None or isinstance(value, bool | int | str):
        return value
    if isinstance(value, float):
        return _finite(repr(value))
    if isinstance(value, list | tuple):
        return [_jsonable(item) for item in cast(Sequence[object], value)]
    if isinstance(value, dict):
        out: JsonObject = {}
        for key, item in cast(dict[object, object], value).items():
            if not isinstance(key, str):
                raise ValueError("object keys must be strings")
            out[key] = _jsonable(item)
        return out
    raise ValueError(f"{type(value).__name__} is not a JSON value")


def _lenient(source: str) -> object:
    """``source`` read as JSON with trailing commas, then as a Python literal; or ``_INVALID``."""
    if len(source) > _LENIENT_MAX:
        return _INVALID
    try:
        return _DECODER.decode(_tidy(source, python=False))
    except _DECODE_ERRORS:
        pass
    try:
        with warnings.catch_warnings():  # invalid escapes in a literal warn, and tests error
            warnings.simplefilter("ignore")
            return _jsonable(ast.literal_eval(_tidy(source, python=True)))
    except Exception:  # literal_eval raises a zoo (SyntaxError, ValueError, TypeError...)
        return _INVALID


def _decode_whole(source: str) -> object:
    try:
        return _DECODER.decode(source)
    except _DECODE_ERRORS:
        return _lenient(source)


def _decode_at(text: str, start: int, *, lenient: bool) -> _Decoded | _Failed:
    """The JSON value that starts at ``start`` (a bracket), strictly and then leniently."""
    try:
        value, end = _DECODER.raw_decode(text, start)
        return _Decoded(value=value, start=start, end=end)
    except RecursionError:  # nesting deeper than any call: skip the whole value, once
        return _Failed(
            reason="the JSON is nested too deeply", start=start, end=_span(text, start)[1]
        )
    except _DECODE_ERRORS as exc:
        detail = exc.msg if isinstance(exc, json.JSONDecodeError) else str(exc)
    if not lenient:
        return _Failed(reason=f"invalid JSON ({detail})", start=start, end=start + 1)
    status, end = _span(text, start)
    if status == "unclosed":
        return _Failed(reason="the JSON is cut off before its end", start=start, end=end)
    if status == "ok" and (value := _lenient(text[start:end])) is not _INVALID:
        return _Decoded(value=value, start=start, end=end)
    return _Failed(reason=f"invalid JSON ({detail})", start=start, end=end)


# -- recognising calls -----------------------------------------------------------------------

_NAME_KEYS = ("function", "tool", "name", "tool_name")
_ARG_KEYS = ("arguments", "parameters", "args", "input", "params")
_LIST_KEYS = ("tool_calls", "calls", "function_calls")
_SNIPPET = 200


class ToolNames:
    """The tools a reply may call: their names, and their schemas (for examples)."""

    def __init__(self, tools: Sequence[ToolDefinition] | Collection[str]) -> None:
        items: Collection[ToolDefinition | str] = [tools] if isinstance(tools, str) else tools
        self.schemas: dict[str, JsonObject] = {}
        for item in items:
            if isinstance(item, str):
                self.schemas.setdefault(item, {})
            else:
                self.schemas.setdefault(item.name, item.input_schema)
        folded: dict[str, list[str]] = {}
        for name in self.schemas:
            folded.setdefault(name.casefold(), []).append(name)
        self._folded = {key: names[0] for key, names in folded.items() if len(names) == 1}

    def resolve(self, written: str) -> str | None:
        """The tool ``written`` means: exact, without a ``functions.`` prefix, or by case."""
        for candidate in (written, written.removeprefix("functions.")):
            name = candidate.strip()
            if name in self.schemas:
                return name
            if (folded := self._folded.get(name.casefold())) is not None:
                return folded
        return None


@frozen
class _Found:
    """One attempted call: resolved, unknown, or unreadable (``problem``)."""

    name: str
    arguments: JsonObject
    raw: str
    problem: str | None = None
    known: bool = True


def _arguments(raw: object) -> JsonObject | str:
    """The call's arguments as an object, or what is wrong with them."""
    if raw is None:
        return {}
    if isinstance(raw, str):
        source = raw.strip()
        if not source:
            return {}
        raw = _decode_whole(source)
        if isinstance(raw, str):  # encoded twice
            raw = _decode_whole(raw.strip())
        if raw is _INVALID:
            return "the arguments are a string that is not valid JSON"
    if isinstance(raw, dict):
        return cast(JsonObject, raw)
    kind = "an array" if isinstance(raw, list) else f"{json.dumps(raw)[:40]}"
    return f"the arguments must be a JSON object, not {kind}"


def _call_from(obj: dict[str, object], tools: ToolNames, raw: str) -> _Found | None:
    """The call an object describes, or ``None`` when it is not a call at all."""
    source, name_key = obj, ""
    written: object = None
    for key in _NAME_KEYS:
        if key not in obj:
            continue
        value = obj[key]
        nested = cast(dict[str, object], value) if isinstance(value, dict) else None
        if nested is not None and "name" in nested:  # {"function": {"name", "arguments"}}
            source, name_key, written = nested, "name", nested["name"]
        else:
            name_key, written = key, obj[key]
        break
    arg_key = next((k for k in _ARG_KEYS if k in source), None)
    if arg_key is None and source is not obj:
        source, arg_key = obj, next((k for k in _ARG_KEYS if k in obj), None)
    # Only these mark a call to a tool we do not know; "input" or "args" are common in data.
    explicit = name_key != "name" or source is not obj or arg_key in ("arguments", "parameters")
    if written is None:
        if "arguments" in obj or "parameters" in obj:
            return _Found(name="", arguments={}, raw=raw, problem="the call has no tool name")
        return None
    if not isinstance(written, str) or not written.strip():
        if not explicit:
            return None
        return _Found(name="", arguments={}, raw=raw, problem="the tool name must be a string")
    name = tools.resolve(written)
    if name is None and not explicit:
        return None  # {"name": "Alice", "age": 3} is data, not a call
    if arg_key is not None:
        arguments = _arguments(source[arg_key])
    else:  # {"name": "get_weather", "city": "Paris"}: the arguments written inline
        arguments = {
            k: cast(JsonValue, v)
            for k, v in source.items()
            if k != name_key and k != "id" and not (k == "type" and v == "function")
        }
    if isinstance(arguments, str):
        return _Found(name=name or written, arguments={}, raw=raw, problem=arguments)
    return _Found(name=name or written, arguments=arguments, raw=raw, known=name is not None)


def _calls_in(value: object, tools: ToolNames, raw: str) -> list[_Found] | None:
    """The calls a JSON value holds (a call, a list of them, ``{"tool_calls": [...]}``)."""
    if isinstance(value, dict):
        obj = cast(dict[str, object], value)
        for key in _LIST_KEYS:
            if isinstance(obj.get(key), list):
                return _calls_in(obj[key], tools, raw)
        call = _call_from(obj, tools, raw)
        return None if call is None else [call]
    if isinstance(value, list):
        items = cast(list[object], value)
        found = [
            call
            for item in items
            if isinstance(item, dict)
            and (call := _call_from(cast(dict[str, object], item), tools, raw)) is not None
        ]
        return found or None
    return None


# -- finding calls in a reply ----------------------------------------------------------------

_TAG_OPEN = re.compile(r"<(tool_call|function_call)\s*>", re.I)
_FENCE_OPEN = re.compile(r"```[ \t]*[\w.+-]*[ \t]*\r?\n?")
_FENCE_CLOSE = re.compile(r"```")
_BRACKET = re.compile(r"[{\[]")
_THINKING = re.compile(r"\s*<(think|thinking)>.*?(?:</\1\s*>|\Z)", re.I | re.S)
_WRITTEN_NAME = re.compile(
    r"""["']?(?:name|tool|tool_name|function)["']?\s*:\s*["']([\w.-]+)["']"""
)
_JSON_START = re.compile(r"""\{\s*["}]|\[\s*(?:["{\[\]\-\d]|true|false|null)""")
_CALL_LIKE = re.compile(
    r"""\[?\s*\{\s*["']?(?:name|tool|tool_name|function|arguments|parameters)["']?\s*:"""
)

_Kind = Literal["tag", "fence", "bare"]


@frozen
class _Region:
    """A stretch of the reply that holds calls."""

    start: int
    end: int
    kind: _Kind
    found: tuple[_Found, ...]


class _Next:
    """The next match of a pattern at or after a position, searched again only when passed."""

    def __init__(self, pattern: re.Pattern[str], text: str) -> None:
        self._pattern, self._text = pattern, text
        self._match = pattern.search(text)

    def at(self, pos: int) -> re.Match[str] | None:
        if self._match is not None and self._match.start() < pos:
            self._match = self._pattern.search(self._text, pos)
        return self._match


def _skip(text: str, pos: int) -> int:
    """The first position at or after ``pos`` that is not whitespace or a comma."""
    while pos < len(text) and (text[pos].isspace() or text[pos] == ","):
        pos += 1
    return pos


def _block(
    text: str, start: int, closer: re.Pattern[str], *, inner_fence: bool
) -> tuple[list[_Decoded | _Failed], int]:
    """The JSON values of a tag's or fence's body, and where the block ends."""
    pos = _skip(text, start)
    fence = _FENCE_OPEN.match(text, pos) if inner_fence else None
    if fence:  # <tool_call>```json {...} ```</tool_call>
        pos = _skip(text, fence.end())
    items: list[_Decoded | _Failed] = []
    while pos < len(text) and text[pos] in "{[":
        item = _decode_at(text, pos, lenient=True)
        items.append(item)
        if isinstance(item, _Failed):
            close = closer.search(text, pos)
            return items, close.end() if close else len(text)
        pos = _skip(text, item.end)
    if fence and text.startswith("```", pos):
        pos = _skip(text, pos + 3)
    if close := closer.match(text, pos):
        return items, close.end()
    if not items and (close := closer.search(text, pos)):
        return items, close.end()
    return items, pos


def _found_in(
    items: list[_Decoded | _Failed], text: str, tools: ToolNames, *, strict: bool
) -> list[_Found]:
    """The calls of a block's values; ``strict`` (a tag) makes every value a call attempt."""
    found: list[_Found] = []
    for item in items:
        raw = text[item.start : min(item.end, item.start + _SNIPPET)]
        if isinstance(item, _Failed):
            if strict or _CALL_LIKE.match(text, item.start):
                written = _WRITTEN_NAME.search(raw)  # name the tool even when the JSON is cut off
                name = (tools.resolve(written.group(1)) or "") if written else ""
                found.append(_Found(name=name, arguments={}, raw=raw, problem=item.reason))
            continue
        calls = _calls_in(item.value, tools, raw)
        if calls is not None:
            found.extend(calls)
        elif strict:
            problem = 'it is not a tool call (expected {"name": ..., "arguments": {...}})'
            found.append(_Found(name="", arguments={}, raw=raw, problem=problem))
    return found


def _scan(text: str, tools: ToolNames) -> list[_Region]:
    """Every region of the reply that attempts calls, left to right."""
    regions: list[_Region] = []
    thinking = _THINKING.match(text)
    pos = thinking.end() if thinking else 0  # calls a model only thinks about are not made
    tags, fences, brackets = (_Next(p, text) for p in (_TAG_OPEN, _FENCE_OPEN, _BRACKET))
    while True:
        tag, fence, bracket = tags.at(pos), fences.at(pos), brackets.at(pos)
        first = min((m for m in (tag, fence, bracket) if m), key=lambda m: m.start(), default=None)
        if first is None:
            return regions
        start = first.start()
        if first is tag:
            closer = re.compile(rf"</{first.group(1)}\s*>", re.I)
            items, end = _block(text, first.end(), closer, inner_fence=True)
            found = _found_in(items, text, tools, strict=True)
            if not items:
                problem = "the <tool_call> block holds no JSON object"
                raw = text[start:end][:_SNIPPET]
                found = [_Found(name="", arguments={}, raw=raw, problem=problem)]
            regions.append(_Region(start=start, end=end, kind="tag", found=tuple(found)))
            pos = end
        elif first is fence:
            items, end = _block(text, first.end(), _FENCE_CLOSE, inner_fence=False)
            found = _found_in(items, text, tools, strict=False)
            if found:
                regions.append(_Region(start=start, end=end, kind="fence", found=tuple(found)))
            pos = end if found else first.end()
        else:
            lenient = bool(_CALL_LIKE.match(text, start))
            if not lenient and not _JSON_START.match(text, start):
                pos = start + 1  # prose, like "{ it's" or "[1]": nothing to decode here
                continue
            item = _decode_at(text, start, lenient=lenient)
            found = _found_in([item], text, tools, strict=False)
            if found:
                regions.append(_Region(start=start, end=item.end, kind="bare", found=tuple(found)))
            pos = item.end


def _tool_call(found: _Found, number: int) -> ToolCall:
    call_id = f"call_{number}"
    if found.problem is None:
        return ToolCall(id=call_id, name=found.name, arguments=found.arguments)
    wrote = f"; the call was written as: {found.raw.strip()}" if found.raw.strip() else ""
    return ToolCall(id=call_id, name=found.name, parse_error=found.problem + wrote)


_EXAMPLE_VALUES: dict[str, JsonValue] = {
    "string": "...",
    "integer": 1,
    "number": 1.5,
    "boolean": True,
    "array": [],
    "object": {},
}


def _example(tools: ToolNames) -> str:
    """An example call of the first tool, with placeholder values of the right types."""
    if not tools.schemas:
        return render_tool_call(ToolCall(id="", name="TOOL_NAME", arguments={"ARG": "VALUE"}))
    name, schema = next(iter(tools.schemas.items()))
    properties = schema.get("properties")
    arguments: JsonObject = {}
    if isinstance(properties, dict):
        for key, sub in list(properties.items())[:3]:
            kind = sub.get("type") if isinstance(sub, dict) else None
            arguments[key] = _EXAMPLE_VALUES.get(kind if isinstance(kind, str) else "", "...")
    return render_tool_call(ToolCall(id="", name=name, arguments=arguments))


def format_guide(tools: ToolNames, *, plain_text: bool = False) -> str:
    """How to write a call: the format, an example, and the tools there are."""
    names = ", ".join(tools.schemas) or "(none)"
    lead = "Reply with plain text, or call a tool" if plain_text else "Write each tool call"
    return (
        f"{lead} as one JSON object inside <tool_call></tool_call> tags, with the tool's "
        f"name and its arguments, exactly like this:\n{_example(tools)}\n"
        "Write one <tool_call> block per call (several blocks for several calls), use valid "
        f"JSON with double quotes, and call only these tools: {names}."
    )


def parse_tool_calls(text: str, tools: Sequence[ToolDefinition] | Collection[str]) -> ParseResult:
    """Read the tool calls a model wrote as text; never raises.

    Calls are read from ``<tool_call>`` tags if there are any, else from code fences, else
    from JSON in the prose; ``tools`` (definitions or names) are the tools that may be called.
    """
    known = ToolNames(tools)
    try:
        regions = _scan(text, known)
    except RecursionError:  # nesting deeper than any call: read the reply as prose
        regions = []
    for kind in ("tag", "fence", "bare"):
        chosen = [r for r in regions if r.kind == kind]
        if chosen:
            break
    else:
        chosen = []
    prose: list[str] = []
    pos = 0
    for region in chosen:
        prose.append(text[pos : region.start])
        pos = region.end
    prose.append(text[pos:])
    found = [f for region in chosen for f in region.found]
    calls = tuple(_tool_call(f, n) for n, f in enumerate(found, 1))
    problems = [
        f"- tool call {n}: {f.problem or f'there is no tool named {f.name!r}'}."
        for n, f in enumerate(found, 1)
        if f.problem or not f.known
    ]
    error = None
    if problems:
        error = "\n".join(["Your reply could not be used:", *problems, format_guide(known)])
    elif not text.strip():
        error = "Your reply was empty. " + format_guide(known, plain_text=True)
    return ParseResult(calls=calls, text="".join(prose).strip(), error=error)
