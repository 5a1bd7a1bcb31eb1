"""The rules of the policy gate: plain frozen values, composable and loadable from TOML.

A ``Rules`` value holds every rule of a policy; ``RulePolicy`` (``tether.policy.gate``)
evaluates it. Rules combine with ``+`` (the right-hand side's scalar settings win, lists
are joined), so a team's base policy and an agent's additions stay separate values.

How a call is decided, first match wins (the strictest outcome comes first):

1. arguments too large (``Sizes``) -> deny
2. a content filter on the arguments matches -> its decision
3. a ``deny`` rule matches -> deny
4. a rate limit is reached -> deny
5. a ``require_approval`` rule matches -> needs_approval
6. provenance (unless ``Provenance.allow`` names the tool), by its ``mode``:
   ``dataflow`` (the default): a call that is not read-only, or that reaches the open
   world, whose sensitive arguments (what it acts on: recipients, accounts, URLs, paths,
   amounts) did not come from the goal, the user, the instructions or a trusted tool's
   result, while untrusted output is in the context -> needs_approval;
   ``coarse``: untrusted output is in the context and the tool is not read-only ->
   needs_approval. It never loosens: a call the risk defaults deny stays denied
7. an ``allow`` rule matches -> allow
8. the tool's risk (``RiskDefaults``): the developer's own tools (defined in this program,
   not built into tether, not from outside) -> ``own`` (allow unless changed);
   unannotated -> its default; else destructive and open-world -> the stricter of the two
   defaults that apply (deny unless changed)
9. otherwise (read-only or declared harmless, closed-world) -> allow
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import field, fields, replace
from fnmatch import fnmatchcase
from functools import cached_property
from typing import Literal, TypeAlias, TypeVar, cast

from tether._internal.frozen import frozen
from tether._internal.linearregex import LinearPattern, compile_linear
from tether.errors import ConfigError
from tether.events import Decision
from tether.jsontypes import JsonValue
from tether.tools.base import ToolAnnotations

__all__ = [
    "ArgCondition",
    "ArgOp",
    "Concurrency",
    "ContentFilter",
    "Provenance",
    "RateLimit",
    "RiskDefaults",
    "Rule",
    "Rules",
    "Sizes",
    "Trust",
    "allow",
    "deny",
    "matches_any",
    "require_approval",
]

ArgOp: TypeAlias = Literal[
    "eq",
    "ne",
    "in",
    "not_in",
    "glob",
    "regex",
    "contains",
    "startswith",
    "lt",
    "le",
    "gt",
    "ge",
    "exists",
    "missing",
]
"""How an argument is compared with a rule's value."""

_OPS: frozenset[str] = frozenset(ArgOp.__args__)  # pyright: ignore[reportAttributeAccessIssue]
_TEXT_OPS = frozenset({"glob", "regex", "startswith"})
_NUMBER_OPS = frozenset({"lt", "le", "gt", "ge"})
_MISSING = object()
_INDEX = re.compile(r"-?[0-9]+")


def matches_any(name: str, patterns: Sequence[str]) -> bool:
    """Whether ``name`` matches one of the shell-style globs (case-sensitive)."""
    return any(p == name or fnmatchcase(name, p) for p in patterns)


def _lookup(arguments: Mapping[str, JsonValue], path: str) -> object:
    """The value at a dotted path (``argv.0``, ``options.force``), or ``_MISSING``."""
    value: object = arguments
    for part in path.split("."):
        if isinstance(value, Mapping):
            value = cast(Mapping[str, object], value).get(part, _MISSING)
        elif isinstance(value, list | tuple) and _INDEX.fullmatch(part):
            items = cast(Sequence[object], value)
            index = int(part)
            value = items[index] if -len(items) <= index < len(items) else _MISSING
        else:
            return _MISSING
        if value is _MISSING:
            return _MISSING
    return value


def _as_text(value: object) -> str:
    return value if isinstance(value, str) else repr(value)


def _same(a: object, b: object) -> bool:
    """JSON equality: ``true`` is not ``1`` (Python's ``True == 1`` would let it match)."""
    if isinstance(a, bool) or isinstance(b, bool):
        return type(a) is type(b) and a == b
    if isinstance(a, list | tuple) and isinstance(b, list | tuple):
        xs, ys = cast(Sequence[object], a), cast(Sequence[object], b)
        return len(xs) == len(ys) and all(_same(x, y) for x, y in zip(xs, ys, strict=True))
    if isinstance(a, Mapping) and isinstance(b, Mapping):
        ma, mb = cast(Mapping[object, object], a), cast(Mapping[object, object], b)
        return ma.keys() == mb.keys() and all(_same(ma[k], mb[k]) for k in ma)
    return a == b


def _member(item: object, items: object) -> bool:
    return any(_same(item, x) for x in cast(Sequence[object], items))


def _globs(value: str | Sequence[str]) -> tuple[str, ...]:
    """Globs as a tuple: a lone string is one glob (not one glob per character)."""
    return (value,) if isinstance(value, str) else tuple(value)


def _normalize(obj: object, *names: str) -> None:
    for name in names:
        value = getattr(obj, name)
        if not isinstance(value, tuple):
            object.__setattr__(obj, name, _globs(cast(Sequence[str], value)))


@frozen(slots=False)
class ArgCondition:
    """A predicate on one argument: ``ArgCondition(path="argv.0", op="in", value=["rm"])``.

    ``path`` is dotted (list items by index); ``test``, a callable, replaces ``op`` and
    ``value`` (Python only; it must be deterministic and fast).
    """

    path: str
    """Where the argument is: ``url``, ``argv.0``, ``options.force``."""
    op: ArgOp = "eq"
    """The comparison."""
    value: JsonValue = None
    """What to compare with (a list for ``in``/``not_in``, a pattern for ``glob``/``regex``)."""
    test: Callable[[object], bool] | None = None
    """A predicate on the value (missing values are never passed to it: they fail it)."""

    def __post_init__(self) -> None:
        if self.op not in _OPS:
            raise ConfigError(
                f"unknown argument operator {self.op!r}; use one of {', '.join(sorted(_OPS))}"
            )
        if self.test is not None:
            return  # the callable replaces op and value
        if self.op in ("in", "not_in") and not isinstance(self.value, list):
            raise ConfigError(f"argument condition on {self.path!r}: {self.op} needs a list")
        if self.op in _TEXT_OPS and not isinstance(self.value, str):
            raise ConfigError(
                f"argument condition on {self.path!r}: {self.op} needs a string value, "
                f"not {self.value!r}"
            )
        if self.op in _NUMBER_OPS and (
            isinstance(self.value, bool) or not isinstance(self.value, int | float)
        ):
            raise ConfigError(
                f"argument condition on {self.path!r}: {self.op} needs a number value, "
                f"not {self.value!r}"
            )
        if self.op == "regex":
            try:
                compile_linear(str(self.value))
            except ValueError as exc:
                raise ConfigError(f"argument condition on {self.path!r}: {exc}") from None

    @cached_property
    def _regex(self) -> LinearPattern:
        return compile_linear(str(self.value))

    def holds(self, arguments: Mapping[str, JsonValue]) -> bool:  # noqa: C901 - one flat table
        """Whether the condition holds for these arguments.

        A missing value fails every comparison except the negations (``ne``, ``not_in``):
        a value that is not there is not equal to anything and in no list.
        """
        found = _lookup(arguments, self.path)
        op = self.op
        if self.test is not None:
            return found is not _MISSING and bool(self.test(found))
        if op == "exists":
            return found is not _MISSING
        if op == "missing":
            return found is _MISSING
        if found is _MISSING:
            return op in ("ne", "not_in")
        value = self.value
        match op:
            case "eq":
                return _same(found, value)
            case "ne":
                return not _same(found, value)
            case "in":
                return _member(found, value)
            case "not_in":
                return not _member(found, value)
            case "glob":
                return fnmatchcase(_as_text(found), str(value))
            case "regex":
                return self._regex.search(_as_text(found)) is not None
            case "contains":
                if isinstance(found, str):
                    return isinstance(value, str) and value in found
                if isinstance(found, dict):
                    return isinstance(value, str) and value in found
                return isinstance(found, list | tuple) and _member(value, cast(object, found))
            case "startswith":
                return isinstance(found, str) and found.startswith(str(value))
            case _:  # lt, le, gt, ge
                return _compare(op, found, value)


def _compare(op: str, found: object, value: object) -> bool:
    if not isinstance(found, int | float) or isinstance(found, bool):
        return False
    if not isinstance(value, int | float) or isinstance(value, bool):
        return False
    return {
        "lt": found < value,
        "le": found <= value,
        "gt": found > value,
        "ge": found >= value,
    }[op]


@frozen(slots=False)
class Rule:
    """An allow, deny or approval rule: which tools, and optionally which arguments."""

    decision: Decision
    """What the rule decides when it matches."""
    tools: tuple[str, ...] = ("*",)
    """Tool-name globs."""
    when: tuple[ArgCondition, ...] = ()
    """Argument conditions; all must hold."""
    reason: str = ""
    """Why, in words (shown to the model and in the audit)."""
    name: str = ""
    """The rule's name in ``policy_decided`` (default: ``DECISION:TOOLS``)."""

    def __post_init__(self) -> None:
        _normalize(self, "tools")
        if not isinstance(self.when, tuple):  # pyright: ignore[reportUnnecessaryIsInstance]
            object.__setattr__(self, "when", tuple(self.when))

    @property
    def label(self) -> str:
        """The name recorded in ``policy_decided``."""
        return self.name or f"{self.decision}:{','.join(self.tools)}"

    def matches(self, tool: str, arguments: Mapping[str, JsonValue]) -> bool:
        """Whether the rule applies to this call."""
        return matches_any(tool, self.tools) and all(c.holds(arguments) for c in self.when)


def _rule(
    decision: Decision,
    tools: str | Sequence[str],
    when: Sequence[ArgCondition],
    reason: str,
    name: str,
) -> Rule:
    globs = (tools,) if isinstance(tools, str) else tuple(tools)
    if not globs:
        raise ConfigError(f"a {decision} rule needs at least one tool name or glob")
    return Rule(decision=decision, tools=globs, when=tuple(when), reason=reason, name=name)


def allow(
    tools: str | Sequence[str],
    *,
    when: Sequence[ArgCondition] = (),
    reason: str = "",
    name: str = "",
) -> Rule:
    """Allow calls to these tools (glob names), optionally only with matching arguments."""
    return _rule("allow", tools, when, reason or "allowed by the policy", name)


def deny(
    tools: str | Sequence[str],
    *,
    when: Sequence[ArgCondition] = (),
    reason: str = "",
    name: str = "",
) -> Rule:
    """Deny calls to these tools, optionally only with matching arguments."""
    return _rule("deny", tools, when, reason or "denied by the policy", name)


def require_approval(
    tools: str | Sequence[str],
    *,
    when: Sequence[ArgCondition] = (),
    reason: str = "",
    name: str = "",
) -> Rule:
    """Calls to these tools wait for a human's approval."""
    return _rule("needs_approval", tools, when, reason or "a human must approve this call", name)


@frozen(slots=False)
class RateLimit:
    """At most ``max_calls`` calls of matching tools, per run or across runs, per window.

    ``scope="run"`` counts the run's own log (durable: a resumed run keeps its count);
    ``scope="process"`` counts every run that uses this policy object in this process.
    ``per_seconds=None`` counts over the whole run (or the process's life).
    """

    tools: tuple[str, ...] = ("*",)
    """Tool-name globs; the matching tools share one budget unless ``each_tool``."""
    max_calls: int
    """Calls allowed in the window."""
    per_seconds: float | None = None
    """The sliding window; ``None``: no window."""
    scope: Literal["run", "process"] = "run"
    """Whose calls count."""
    each_tool: bool = True
    """Count each tool separately (a per-tool limit) or all matching tools together."""

    def __post_init__(self) -> None:
        _normalize(self, "tools")
        if self.max_calls < 0:
            raise ConfigError("RateLimit.max_calls must be >= 0")
        if self.per_seconds is not None and self.per_seconds <= 0:
            raise ConfigError("RateLimit.per_seconds must be > 0")


@frozen(slots=False)
class Concurrency:
    """At most ``max`` calls of each matching tool run at once (across this process's runs)."""

    tools: tuple[str, ...] = ("*",)
    """Tool-name globs."""
    max: int
    """Concurrent executions per tool."""

    def __post_init__(self) -> None:
        _normalize(self, "tools")
        if self.max < 1:
            raise ConfigError("Concurrency.max must be >= 1")


@frozen(slots=False)
class Sizes:
    """Caps on a call's arguments and a result's size (bytes of JSON / text)."""

    max_argument_bytes: int | None = 1_000_000
    """Larger arguments are denied."""
    max_result_bytes: int | None = 1_000_000
    """Larger results are truncated (or refused, see ``large_results``)."""
    large_results: Literal["truncate", "error"] = "truncate"
    """What happens to a result over the cap."""

    def __post_init__(self) -> None:
        for name in ("max_argument_bytes", "max_result_bytes"):
            cap = getattr(self, name)
            if cap is not None and cap < 0:
                raise ConfigError(f"Sizes.{name} must be >= 0 (or None for no cap)")


@frozen(slots=False)
class ContentFilter:
    """Patterns (regexes) and callables checked against a call's arguments or its result.

    On arguments, a match decides ``decision`` (deny by default). On results, ``block``
    replaces the result with an error and ``redact`` replaces each match with a marker.
    """

    patterns: tuple[str, ...] = ()
    """Regexes, run on RE2 in linear time (Python-style syntax without backreferences or
    lookaround); matched against the JSON of the arguments or the result text."""
    checks: tuple[Callable[[str], bool], ...] = ()
    """Callables given the same text; ``True`` is a match (Python only)."""
    on: Literal["arguments", "results", "both"] = "arguments"
    """What is checked."""
    tools: tuple[str, ...] = ("*",)
    """Tool-name globs."""
    decision: Decision = "deny"
    """For arguments: what a match decides."""
    result_action: Literal["block", "redact"] = "block"
    """For results: what a match does."""
    name: str = ""
    """The rule's name (default ``content_filter``)."""
    reason: str = ""
    """Why, in words."""

    def __post_init__(self) -> None:
        _normalize(self, "patterns", "tools")
        if not isinstance(self.checks, tuple):  # pyright: ignore[reportUnnecessaryIsInstance]
            object.__setattr__(self, "checks", tuple(self.checks))
        if not self.patterns and not self.checks:
            raise ConfigError("a ContentFilter needs patterns or checks")
        for index, pattern in enumerate(self.patterns):
            try:
                compile_linear(pattern)
            except ValueError as exc:
                raise ConfigError(f"patterns[{index}]: {exc}") from None

    @cached_property
    def regexes(self) -> tuple[LinearPattern, ...]:
        """The patterns, compiled one by one (RE2: linear in the text, whatever the pattern).

        Not joined into one alternation: a pattern with global flags (``(?i)...``, as in
        the TOML example) applies to the whole of its own regex only.
        """
        return tuple(compile_linear(p) for p in self.patterns)

    @property
    def label(self) -> str:
        """The name recorded in events."""
        return self.name or "content_filter"

    def first_match(self, text: str) -> str | None:
        """A description of the first match in ``text`` (never the matched text), or None."""
        for regex in self.regexes:
            if regex.search(text) is not None:
                return "a filtered pattern"
        for check in self.checks:
            if check(text):
                return f"the check {getattr(check, '__name__', 'check')}"
        return None


@frozen(slots=False)
class RiskDefaults:
    """What happens to calls no rule decided, by the tool's risk (its annotations)."""

    own: Decision | Literal["by_risk"] = "allow"
    """The developer's own tools: defined in this program (``@tool``, ``Tool.from_schema``),
    neither built into tether (``tether.tools.builtin``) nor from outside (MCP). Allowed by
    default (the provenance rule still holds their side effects when what they act on
    came from untrusted output); ``"by_risk"`` gates them by their annotations like every
    other tool (the defaults below)."""

    destructive: Decision = "deny"
    """Tools that may change or destroy things (not declared read-only or non-destructive)."""
    open_world: Decision = "deny"
    """Tools that reach systems outside the agent's control."""
    unannotated: Decision = "deny"
    """Tools that declare nothing (read as the worst case)."""


@frozen(slots=False)
class Provenance:
    """Side effects driven by untrusted output wait for a human (or are denied).

    Untrusted output is what tools declared ``untrusted_output`` (by default the open-world
    ones: the web, an API, an unannotated tool) return. In ``dataflow`` mode a call waits
    only when what it acts on came from such output; in ``coarse`` mode every call that is
    not read-only waits once any such output is in the context. ``allow`` names tools
    exempt from the rule.
    """

    enabled: bool = True
    """Whether the rule applies."""
    mode: Literal["dataflow", "coarse"] = "dataflow"
    """``dataflow``: hold a call (not read-only, or open-world) whose sensitive arguments
    appear in no trusted source (the goal, the user's replies, the instructions, trusted
    tools' results) once untrusted output is in the context; the decision names the
    argument and the event its value came from. ``coarse``: hold every call that is not
    read-only once untrusted output is in the context."""
    decision: Decision = "needs_approval"
    """What such a call gets (``needs_approval`` or ``deny``)."""
    allow: tuple[str, ...] = ()
    """Tools explicitly allowed to act after untrusted output (globs)."""

    def __post_init__(self) -> None:
        _normalize(self, "allow")


@frozen(slots=False)
class Trust:
    """The developer's own statement of what tools do, replacing their declared annotations.

    Annotations that come from outside (a tool whose ``ToolDefinition.origin`` is set, such
    as an MCP server's) can then only make a tool look riskier, never safer.
    """

    tools: tuple[str, ...]
    """Tool-name globs."""
    annotations: ToolAnnotations
    """What the tools do."""

    def __post_init__(self) -> None:
        _normalize(self, "tools")


def _join(a: tuple[object, ...], b: tuple[object, ...]) -> tuple[object, ...]:
    return (*a, *b)


_S = TypeVar("_S", Sizes, RiskDefaults, Provenance)


def _merge(left: _S, right: _S, default: _S) -> _S:
    """``left`` with every field ``right`` changed from its default (field by field)."""
    changed = {
        f.name: getattr(right, f.name)
        for f in fields(right)
        if getattr(right, f.name) != getattr(default, f.name)
    }
    return replace(left, **changed) if changed else left


@frozen(slots=False)
class Rules:
    """Every rule of a policy. Combine with ``+``; load from TOML with ``load_rules``."""

    rules: tuple[Rule, ...] = ()
    """Allow, deny and approval rules (see the module docstring for the order)."""
    rate_limits: tuple[RateLimit, ...] = ()
    """Rate limits."""
    concurrency: tuple[Concurrency, ...] = ()
    """Concurrency caps."""
    filters: tuple[ContentFilter, ...] = ()
    """Content filters on arguments and results."""
    sizes: Sizes = field(default_factory=Sizes)
    """Size caps."""
    risk: RiskDefaults = field(default_factory=RiskDefaults)
    """Defaults for calls no rule decided."""
    provenance: Provenance = field(default_factory=Provenance)
    """The untrusted-output rule."""
    trust: tuple[Trust, ...] = ()
    """The developer's annotations of tools."""

    def __add__(self, other: Rules) -> Rules:
        """Both rule sets: lists joined, ``other``'s changed settings winning.

        A field of sizes, risk or provenance that ``other`` changed from its default
        replaces ``self``'s; a field ``other`` left at its default keeps ``self``'s.
        """
        if not isinstance(other, Rules):  # pyright: ignore[reportUnnecessaryIsInstance]
            return NotImplemented
        return replace(
            self,
            rules=cast(tuple[Rule, ...], _join(self.rules, other.rules)),
            rate_limits=cast(tuple[RateLimit, ...], _join(self.rate_limits, other.rate_limits)),
            concurrency=cast(tuple[Concurrency, ...], _join(self.concurrency, other.concurrency)),
            filters=cast(tuple[ContentFilter, ...], _join(self.filters, other.filters)),
            sizes=_merge(self.sizes, other.sizes, _DEFAULT_SIZES),
            risk=_merge(self.risk, other.risk, _DEFAULT_RISK),
            provenance=_merge(self.provenance, other.provenance, _DEFAULT_PROVENANCE),
            trust=cast(tuple[Trust, ...], _join(self.trust, other.trust)),
        )


_DEFAULT_SIZES = Sizes()
_DEFAULT_RISK = RiskDefaults()
_DEFAULT_PROVENANCE = Provenance()
