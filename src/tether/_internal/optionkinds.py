"""What an option of a configuration file takes, checked against what the file gives.

A TOML value of the wrong kind (``root = 5`` for a folder, ``allow = "ls"`` for a list)
reached the function it configures and failed there, as ``TypeError: 'int' object is not
iterable``: no key, no hint of what was wanted. Here the option's type annotation says what
it takes, and a value that is not that is a ``ConfigError`` of one shape, from one place:

    agent.toml: [[tools]] #1 (files): root must be a path string such as "./data", or a table
    of path strings by name such as { docs = "./docs" }, not 5 (a whole number)

A table given for a dataclass option (``limits = { cpu_seconds = 5 }``) is made into it,
checked the same way. What a file cannot hold (a callable, an object) is not described as
something to write; a value the annotation cannot judge is left to the function itself.
"""

from __future__ import annotations

import dataclasses
import datetime
import inspect
import os
import re
import types
import typing
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path, PurePath
from typing import Any, Literal, cast

import orjson

from tether.errors import ConfigError

__all__ = ["checked_options", "described", "shown", "wrong_kind"]

_ARRAYS: frozenset[object] = frozenset(
    {list, tuple, set, frozenset, Sequence, Collection, Iterable}
)
_TABLES: frozenset[object] = frozenset({dict, Mapping})
_SHOWN_CHARS = 60
_SECRET_KEY = re.compile(
    r"env|header|passw|secret|token|key|auth|credential|cookie|session|signature|private",
    re.IGNORECASE,
)
"""What in an option's name (anywhere in it: ``auth_token``, ``client_secret``) makes a
message name its value only by kind: it may hold a credential."""


def wrong_kind(
    where: str, key: str, given: object, expected: str, *, show: bool = True
) -> ConfigError:
    """The error for ``key`` given a value that is not what it takes.

    Args:
        where: The file and the table: ``agent.toml: [[tools]] #1 (files)`` (or ``""``).
        key: The option, dotted below the table: ``root``, ``allow.ls.max_args``.
        given: The value the file holds.
        expected: What the option takes, with an example: ``a path string such as "./data"``.
        show: Whether the message may quote the value (not for values that may be secrets:
            then only its kind is named).
    """
    at = f"{where}: {key}" if where else key
    if given is None:  # TOML has no null: the key is not there
        return ConfigError(f"{at} must be {expected} (it is missing)")
    what = shown(given) if show else _kind_of(given)
    return ConfigError(f"{at} must be {expected}, not {what}")


def shown(value: object) -> str:
    """A value as the file wrote it, cut short, and its kind: ``"yes" (a string)``."""
    text = _toml(value)
    if len(text) > _SHOWN_CHARS:
        text = text[: _SHOWN_CHARS - 1] + "…"
    return f"{text} ({_kind_of(value)})"


def described(annotation: object, *, path: bool = False) -> str | None:
    """What a file writes for an option of type ``annotation`` (``None``: it cannot).

    Args:
        annotation: The option's type.
        path: The option is a path even where its type says only ``str``.
    """
    options = _members(annotation)
    path = path or any(_is_path_type(m) for m in options)
    said: list[str] = []
    for member in options:
        text = _described_one(member, path=path)
        if text is not None and text not in said:
            said.append(text)
    return ", or ".join(said) if said else None


def checked_options(
    kind: Callable[..., Any],
    table: Mapping[str, Any],
    where: str,
    *,
    options_of: Callable[..., Any] | None = None,
    paths: Collection[str] = (),
) -> dict[str, Any]:
    """``table`` checked against the parameters of ``kind`` (or ``options_of``), ready for it.

    Args:
        kind: What the table configures: a function or a class.
        table: The options the file gives.
        where: The file and the table, for errors.
        options_of: The function whose parameters are the options, if not ``kind``'s own (a
            wrapper's ``**options``).
        paths: The keys that name paths, where the type says only ``str``.

    Returns:
        The options, with a table given for a dataclass option made into it.

    Raises:
        ConfigError: an unknown key (unless the function takes ``**options``), or a value of
            the wrong kind; the message names ``where``, the key, the value and what it takes.
    """
    shape = options_of or kind
    parameters = inspect.signature(shape).parameters
    open_ended = any(p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters.values())
    named = {
        name
        for name, p in parameters.items()
        if p.kind not in (inspect.Parameter.VAR_KEYWORD, inspect.Parameter.VAR_POSITIONAL)
    }
    unknown = sorted(set(table) - named)
    if unknown and not open_ended:
        raise ConfigError(f"{where}: unknown keys {unknown} (known: {', '.join(sorted(named))})")
    hints = _hints(shape)
    checked = dict(table)
    for key, value in table.items():
        if key in hints and key in named:
            checked[key] = _converted(hints[key], value, key, where, path=key in paths)
    return checked


@dataclass(frozen=True, kw_only=True)
class _Misfit:
    """A value that is not what its option takes (what ``_fitted`` returns then)."""

    key: str
    """The option, dotted down to the part at fault: ``limits.cpu_seconds``, ``allow[1]``."""
    given: object
    """The value there."""
    expected: str | None
    """What it takes, in words (``None``: nothing a file can write)."""


def _converted(annotation: object, value: object, key: str, where: str, *, path: bool) -> object:
    try:
        fitted = _fitted(annotation, value, key, path=path)
    except ConfigError as exc:  # a table made into a dataclass refused it
        raise ConfigError(f"{where}: {exc}") from None
    if not isinstance(fitted, _Misfit):
        return fitted
    secret = _SECRET_KEY.search(fitted.key) is not None
    if fitted.expected is None:
        raise wrong_kind(
            where, fitted.key, fitted.given, "left out (it takes a Python object)", show=not secret
        )
    raise wrong_kind(where, fitted.key, fitted.given, fitted.expected, show=not secret)


def _fitted(annotation: object, value: object, key: str, *, path: bool) -> object:
    """``value`` as the option takes it, or a ``_Misfit`` naming the innermost key at fault."""
    options = _members(annotation)
    path = path or any(_is_path_type(m) for m in options)
    inner: _Misfit | None = None
    for member in options:
        fitted = _fitted_one(member, value, key, path=path)
        if not isinstance(fitted, _Misfit):
            return fitted
        if fitted.key != key and inner is None:  # the value's shape fits; a part does not
            inner = fitted
    return inner or _Misfit(key=key, given=value, expected=described(annotation, path=path))


def _first_misfit(values: Iterable[object]) -> _Misfit | None:
    return next((v for v in values if isinstance(v, _Misfit)), None)


def _fitted_one(annotation: object, value: object, key: str, *, path: bool) -> object:  # noqa: C901 - one case per kind of type
    declared = annotation  # before the checks below narrow it
    origin = _origin(annotation)
    args = typing.get_args(annotation)
    if annotation is Any or annotation is object or isinstance(annotation, typing.TypeVar):
        return value
    if annotation is None or annotation is types.NoneType:
        if value is None:
            return value
    elif origin is Literal:
        if any(type(value) is type(a) and value == a for a in args):
            return value
    elif annotation is bool:
        if isinstance(value, bool):
            return value
    elif annotation is int:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
    elif annotation is float:
        if isinstance(value, int | float) and not isinstance(value, bool):
            return value
    elif annotation is str:
        if isinstance(value, str):
            return value
    elif _is_path_type(annotation):
        if isinstance(value, str | PurePath):
            return value
    elif origin in _TABLES:
        if isinstance(value, Mapping):
            item = args[1] if len(args) == 2 else Any
            table = cast(Mapping[object, object], value)
            fitted = {k: _fitted(item, v, f"{key}.{k}", path=path) for k, v in table.items()}
            return _first_misfit(fitted.values()) or fitted
    elif origin in _ARRAYS:
        if isinstance(value, list | tuple):
            item = Any if not args or (origin is tuple and args[-1] is not Ellipsis) else args[0]
            items = cast(Sequence[object], value)
            fitted = [_fitted(item, v, f"{key}[{i}]", path=path) for i, v in enumerate(items)]
            return _first_misfit(fitted) or (tuple(fitted) if isinstance(value, tuple) else fitted)
    elif isinstance(annotation, type) and dataclasses.is_dataclass(annotation):
        if isinstance(value, annotation):
            return value
        if isinstance(value, Mapping):
            return _made(annotation, cast(Mapping[str, Any], value), key)
    elif origin is Callable:
        if callable(value):
            return value
    elif isinstance(annotation, type):
        try:
            if isinstance(value, annotation):
                return value
        except TypeError:  # a Protocol that cannot be checked at run time: the callee will
            return value
    else:  # a forward reference, a NewType, a type alias the checks do not know
        return value
    return _Misfit(key=key, given=value, expected=described(declared, path=path))


def _made(kind: type, table: Mapping[str, Any], key: str) -> object:
    """The dataclass ``kind`` made from a table, each option checked (misfits under ``key``)."""
    hints = _hints(kind)
    names = {f.name for f in dataclasses.fields(kind) if f.init}
    unknown = sorted(set(table) - names)
    if unknown:
        raise ConfigError(
            f"{key}: unknown keys {unknown} for {kind.__name__} (known: {', '.join(sorted(names))})"
        )
    options = {k: _fitted(hints.get(k, Any), v, f"{key}.{k}", path=False) for k, v in table.items()}
    wrong = _first_misfit(options.values())
    if wrong is not None:
        return wrong
    try:
        return kind(**options)
    except ConfigError as exc:
        raise ConfigError(f"{key}: {exc}") from None
    except (TypeError, ValueError) as exc:  # its own checks of a value's range
        raise ConfigError(f"{key}: {type(exc).__name__}: {exc}") from None


def _described_one(annotation: object, *, path: bool) -> str | None:  # noqa: C901 - one case per kind
    origin = _origin(annotation)
    args = typing.get_args(annotation)
    if annotation is None or annotation is types.NoneType:
        return None  # TOML has no null: the key is left out
    if origin is Literal:
        shown_args = [_toml(a) for a in args]
        if len(shown_args) == 1:
            return shown_args[0]
        return f"one of {', '.join(shown_args[:-1])} or {shown_args[-1]}"
    if annotation is bool:
        return "true or false"
    if annotation is int:
        return "a whole number such as 10"
    if annotation is float:
        return "a number such as 2.5"
    if annotation is str or _is_path_type(annotation):
        return 'a path string such as "./data"' if path else "a string"
    if origin in _TABLES:
        item = args[1] if len(args) == 2 else Any
        if all(m is str or _is_path_type(m) for m in _members(item)):
            if path:
                return 'a table of path strings by name such as { docs = "./docs" }'
            return 'a table of strings such as { NAME = "value" }'
        inner = described(item, path=path)
        return None if inner is None else f"a table of names, each to {inner}"
    if origin in _ARRAYS:
        item = args[0] if args and not (origin is tuple and args[-1] is not Ellipsis) else Any
        if item is str:
            return (
                'an array of path strings such as ["./data"]'
                if path
                else ('an array of strings such as ["a", "b"]')
            )
        inner = described(item, path=path) if item is not Any else None
        return "an array" if inner is None else f"an array whose every item is {inner}"
    if isinstance(annotation, type) and dataclasses.is_dataclass(annotation):
        names = [f.name for f in dataclasses.fields(annotation) if f.init]
        return f"a table of {annotation.__name__} options ({', '.join(names)})"
    if annotation is datetime.datetime or annotation is datetime.date:
        return "a date such as 2025-01-31"
    return None  # a callable, an object: nothing a file can write


def _origin(annotation: object) -> object:
    """``list`` for ``list[str]``, and for a bare ``list`` or ``Mapping`` too."""
    origin = typing.get_origin(annotation)
    if origin is None and (annotation in _ARRAYS or annotation in _TABLES):
        return annotation
    return origin


def _members(annotation: object) -> list[object]:
    """The types of a union (``X | None``, ``Optional[X]``), or the one type."""
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        return list(typing.get_args(annotation))
    return [annotation]


def _is_path_type(annotation: object) -> bool:
    return annotation is os.PathLike or (
        isinstance(annotation, type) and issubclass(annotation, PurePath)
    )


def _hints(kind: Callable[..., Any]) -> dict[str, Any]:
    """The resolved parameter types of ``kind`` (a dataclass's fields, a class's ``__init__``)."""
    target: object = kind
    if isinstance(kind, type) and not dataclasses.is_dataclass(kind):
        target = cast(object, kind.__init__)  # pyright: ignore[reportUnknownMemberType]
    try:
        return typing.get_type_hints(target)
    except (NameError, TypeError, AttributeError):  # a name only a type checker sees: unchecked
        return {}


def _kind_of(value: object) -> str:
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int):
        return "a whole number"
    if isinstance(value, float):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list | tuple):
        return "an array"
    if isinstance(value, Mapping):
        return "a table"
    if isinstance(value, datetime.date | datetime.time):
        return "a date or time"
    return type(value).__name__


def _toml(value: object) -> str:
    """``value`` written as TOML would write it (near enough for a message)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return orjson.dumps(value).decode()
    if isinstance(value, list | tuple):
        return "[" + ", ".join(_toml(v) for v in cast(Sequence[object], value)) + "]"
    if isinstance(value, Mapping):
        items = cast(Mapping[object, object], value).items()
        return "{ " + ", ".join(f"{k} = {_toml(v)}" for k, v in items) + " }" if items else "{}"
    if isinstance(value, datetime.date | datetime.time):
        return value.isoformat()
    if isinstance(value, Path):
        return orjson.dumps(str(value)).decode()
    return repr(value)
