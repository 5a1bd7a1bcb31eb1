"""Policy rules from TOML. Every key is checked: a typo is an error, never silently ignored.

```toml
[risk]                      # calls no rule decided, by the tool's annotations
own = "allow"               # the developer's own tools; or "by_risk" (the keys below)
destructive = "deny"        # "allow" | "deny" | "needs_approval"
open_world = "needs_approval"
unannotated = "deny"

[sizes]
max_argument_bytes = 100000
max_result_bytes = 200000
large_results = "truncate"  # or "error"

[provenance]
enabled = true
mode = "dataflow"           # or "coarse": hold every side effect after untrusted output
decision = "needs_approval"
allow = ["kv_set"]          # may act after untrusted output without approval

[[allow]]                   # also [[deny]] and [[require_approval]]
tools = ["read_*"]
when = [{ arg = "path", op = "glob", value = "docs/*" }]
reason = "docs are public"

[[rate_limit]]
tools = ["http_*"]
max_calls = 20
per_seconds = 60
scope = "run"               # or "process"

[[concurrency]]
tools = ["http_*"]
max = 4

[[filter]]
on = "results"              # "arguments" | "results" | "both"
patterns = ["(?i)ignore (all )?previous instructions"]
result_action = "block"     # or "redact"

[[trust]]                   # the developer's own annotations of a tool
tools = ["search"]
read_only = true
open_world = true
untrusted_output = true     # what it returns was written by others
sensitive = ["query"]       # the arguments the data-flow rule traces
```

The same tables may sit under a ``[policy]`` table (for a larger agent file).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import MISSING, fields
from pathlib import Path
from typing import Any, TypeVar, cast

from tether._internal.optionkinds import wrong_kind
from tether.errors import ConfigError
from tether.policy.rules import (
    ArgCondition,
    Concurrency,
    ContentFilter,
    Provenance,
    RateLimit,
    RiskDefaults,
    Rule,
    Rules,
    Sizes,
    Trust,
    allow,
    deny,
    require_approval,
)
from tether.tools.base import ToolAnnotations

__all__ = ["load_rules", "rules_from_mapping"]

T = TypeVar("T")

_TOP = {
    "risk",
    "sizes",
    "provenance",
    "allow",
    "deny",
    "require_approval",
    "rate_limit",
    "concurrency",
    "filter",
    "trust",
}


def load_rules(path: str | Path) -> Rules:
    """Read policy rules from a TOML file.

    Raises:
        ConfigError: the file is missing, is not TOML, or holds an unknown key or bad value
            (the message names the file and the key).
    """
    from tether._internal.configfiles import read_toml

    return rules_from_mapping(read_toml(path, "policy file"), source=str(Path(path)))


def rules_from_mapping(data: Mapping[str, Any], *, source: str = "<policy>") -> Rules:
    """Policy rules from parsed TOML (or any mapping of the same shape)."""
    if "policy" in data:
        extra = set(data) - {"policy"}
        if extra:
            raise ConfigError(f"{source}: beside [policy], unknown keys {sorted(extra)}")
        data = _table(data["policy"], f"{source}: [policy]")
    _known(data, _TOP, source)
    try:
        return Rules(
            rules=(
                *_rules(data, "allow", allow, source),
                *_rules(data, "deny", deny, source),
                *_rules(data, "require_approval", require_approval, source),
            ),
            rate_limits=tuple(
                _build(RateLimit, t, f"{source}: rate_limit[{i}]", _RATE)
                for i, t in enumerate(_tables(data, "rate_limit", source))
            ),
            concurrency=tuple(
                _build(
                    Concurrency,
                    t,
                    f"{source}: concurrency[{i}]",
                    {"tools": _globs, "max": _integer},
                )
                for i, t in enumerate(_tables(data, "concurrency", source))
            ),
            filters=tuple(
                _build(ContentFilter, t, f"{source}: filter[{i}]", _FILTER)
                for i, t in enumerate(_tables(data, "filter", source))
            ),
            sizes=_build(
                Sizes,
                _table(data.get("sizes", {}), f"{source}: [sizes]"),
                f"{source}: [sizes]",
                _SIZES,
            ),
            risk=_build(
                RiskDefaults,
                _table(data.get("risk", {}), f"{source}: [risk]"),
                f"{source}: [risk]",
                _RISK,
            ),
            provenance=_build(
                Provenance,
                _table(data.get("provenance", {}), f"{source}: [provenance]"),
                f"{source}: [provenance]",
                _PROVENANCE,
            ),
            trust=tuple(
                _trust(t, f"{source}: trust[{i}]")
                for i, t in enumerate(_tables(data, "trust", source))
            ),
        )
    except ConfigError:
        raise
    except (TypeError, ValueError) as exc:
        raise ConfigError(f"{source}: {exc}") from None


# -- value checks ------------------------------------------------------------------------


def _decision(value: object) -> str:
    if value not in ("allow", "deny", "needs_approval"):
        raise ConfigError(f"must be 'allow', 'deny' or 'needs_approval', not {value!r}")
    return cast(str, value)


def _own(value: object) -> str:
    if value == "by_risk":
        return "by_risk"
    try:
        return _decision(value)
    except ConfigError:
        raise ConfigError(
            f"must be 'allow', 'deny', 'needs_approval' or 'by_risk', not {value!r}"
        ) from None


def _globs(value: object) -> tuple[str, ...]:
    if isinstance(value, str):
        return (value,)
    if isinstance(value, list) and all(isinstance(v, str) for v in cast(list[object], value)):
        return tuple(cast(list[str], value))
    raise ConfigError(f"must be a string or a list of strings, not {value!r}")


def _names(value: object) -> tuple[str, ...]:
    if isinstance(value, list) and all(isinstance(v, str) for v in cast(list[object], value)):
        return tuple(cast(list[str], value))
    raise ConfigError(f"must be a list of argument names, not {value!r}")


def _choice(*options: str) -> Callable[[object], str]:
    def check(value: object) -> str:
        if value not in options:
            raise ConfigError(f"must be one of {', '.join(map(repr, options))}, not {value!r}")
        return cast(str, value)

    return check


def _number(value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ConfigError(f"must be a number, not {value!r}")
    return float(value)


def _optional_int(value: object) -> int | None:
    if value is None or value is False:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise ConfigError(f"must be an integer (or false for no limit), not {value!r}")
    return value


def _integer(value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ConfigError(f"must be an integer, not {value!r}")
    return value


def _boolean(value: object) -> bool:
    if not isinstance(value, bool):
        raise ConfigError(f"must be true or false, not {value!r}")
    return value


def _text(value: object) -> str:
    if not isinstance(value, str):
        raise ConfigError(f"must be a string, not {value!r}")
    return value


_RATE: dict[str, Callable[[object], object]] = {
    "tools": _globs,
    "max_calls": _integer,
    "per_seconds": _number,
    "scope": _choice("run", "process"),
    "each_tool": _boolean,
}
_FILTER: dict[str, Callable[[object], object]] = {
    "patterns": _globs,
    "on": _choice("arguments", "results", "both"),
    "tools": _globs,
    "decision": _decision,
    "result_action": _choice("block", "redact"),
    "name": _text,
    "reason": _text,
}
_SIZES: dict[str, Callable[[object], object]] = {
    "max_argument_bytes": _optional_int,
    "max_result_bytes": _optional_int,
    "large_results": _choice("truncate", "error"),
}
_RISK: dict[str, Callable[[object], object]] = {
    "own": _own,
    "destructive": _decision,
    "open_world": _decision,
    "unannotated": _decision,
}
_PROVENANCE: dict[str, Callable[[object], object]] = {
    "enabled": _boolean,
    "mode": _choice("dataflow", "coarse"),
    "decision": _decision,
    "allow": _globs,
}
_CONDITION: dict[str, Callable[[object], object]] = {
    "arg": _text,
    "op": _text,
    "value": lambda v: v,
}
_RULE: dict[str, Callable[[object], object]] = {
    "tools": _globs,
    "when": lambda v: v,
    "reason": _text,
    "name": _text,
}
_HINTS = ("read_only", "destructive", "idempotent", "open_world", "untrusted_output")


# -- tables --------------------------------------------------------------------------------


def _known(table: Mapping[str, Any], keys: set[str] | Mapping[str, object], where: str) -> None:
    unknown = sorted(set(table) - set(keys))
    if unknown:
        raise ConfigError(
            f"{where}: unknown key(s) {', '.join(unknown)}; known: {', '.join(sorted(keys))}"
        )


def _table(value: object, where: str) -> Mapping[str, Any]:
    if not isinstance(value, dict):
        raise wrong_kind("", where, value, "a table")
    return cast(Mapping[str, Any], value)


def _tables(data: Mapping[str, Any], key: str, source: str) -> list[Mapping[str, Any]]:
    value = data.get(key, [])
    if not isinstance(value, list):
        raise wrong_kind(source, key, value, f"an array of tables ([[{key}]])")
    return [_table(t, f"{source}: {key}[{i}]") for i, t in enumerate(cast(list[object], value))]


def _build(
    cls: Callable[..., T],
    table: Mapping[str, Any],
    where: str,
    schema: Mapping[str, Callable[[object], object]],
) -> T:
    _known(table, schema, where)
    values: dict[str, object] = {}
    for key, raw in table.items():
        try:
            values[key] = schema[key](raw)
        except ConfigError as exc:
            raise ConfigError(f"{where}: {key} {exc}") from None
    missing = sorted(
        f.name
        for f in fields(cast(Any, cls))
        if f.default is MISSING and f.default_factory is MISSING and f.name not in values
    )
    if missing:
        raise ConfigError(f"{where}: {', '.join(missing)} is required")
    try:
        return cls(**values)
    except ConfigError as exc:
        raise ConfigError(f"{where}: {exc}") from None


def _rules(data: Mapping[str, Any], key: str, make: Callable[..., Rule], source: str) -> list[Rule]:
    out: list[Rule] = []
    for index, table in enumerate(_tables(data, key, source)):
        where = f"{source}: {key}[{index}]"
        _known(table, _RULE, where)
        if "tools" not in table:
            raise ConfigError(f"{where}: tools is required (a name or glob, or a list of them)")
        try:
            tools = _globs(table["tools"])
        except ConfigError as exc:
            raise ConfigError(f"{where}: tools {exc}") from None
        when_raw = table.get("when", [])
        if not isinstance(when_raw, list):
            expected = 'an array of inline tables such as [{ arg = "path", op = "glob", value = "docs/*" }]'
            raise wrong_kind(where, "when", when_raw, expected)
        conditions: list[ArgCondition] = []
        for j, raw in enumerate(cast(list[object], when_raw)):
            at = f"{where}: when[{j}]"
            cond = _table(raw, at)
            _known(cond, _CONDITION, at)
            if "arg" not in cond:
                raise ConfigError(f"{at}: arg is required (the argument's path)")
            path = _checked(_text, cond["arg"], at, "arg")
            op = _checked(_text, cond.get("op", "eq"), at, "op")
            try:
                conditions.append(ArgCondition(path=path, op=op, value=cond.get("value")))  # pyright: ignore[reportArgumentType]
            except ConfigError as exc:
                raise ConfigError(f"{at}: op/value: {exc}") from None
        reason = _checked(_text, table.get("reason", ""), where, "reason")
        name = _checked(_text, table.get("name", ""), where, "name")
        try:
            out.append(make(tools, when=conditions, reason=reason, name=name))
        except ConfigError as exc:
            raise ConfigError(f"{where}: tools: {exc}") from None
    return out


def _checked(check: Callable[[object], T], value: object, where: str, key: str) -> T:
    try:
        return check(value)
    except ConfigError as exc:
        raise ConfigError(f"{where}: {key} {exc}") from None


def _trust(table: Mapping[str, Any], where: str) -> Trust:
    _known(table, {"tools", "sensitive", *_HINTS}, where)
    if "tools" not in table:
        raise ConfigError(f"{where}: tools is required")
    hints: dict[str, bool] = {}
    for hint in _HINTS:
        if hint in table:
            try:
                hints[hint] = _boolean(table[hint])
            except ConfigError as exc:
                raise ConfigError(f"{where}: {hint} {exc}") from None
    tools = _checked(_globs, table["tools"], where, "tools")
    sensitive = (
        _checked(_names, table["sensitive"], where, "sensitive") if "sensitive" in table else None
    )
    return Trust(tools=tools, annotations=ToolAnnotations(**hints, sensitive=sensitive))
