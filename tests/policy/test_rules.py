"""The rule values: argument conditions, globs, filters, validation and ``Rules + Rules``."""

from __future__ import annotations

import re
from dataclasses import fields
from typing import Any, cast

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tether.errors import ConfigError
from tether.jsontypes import JsonValue
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
    matches_any,
    require_approval,
)
from tether.tools.base import ToolAnnotations

ARGS: dict[str, JsonValue] = {
    "path": "docs/readme.md",
    "argv": ["rm", "-rf", "/"],
    "options": {"force": True, "depth": 3, "tags": ["a", "b"], "meta": {"k": "v"}},
    "count": 5,
    "ratio": 0.5,
    "flag": True,
    "none": None,
    "items": [{"name": "x"}, {"name": "y"}],
}

# (path, op, value, holds)
CONDITIONS: list[tuple[str, str, JsonValue, bool]] = [
    ("path", "eq", "docs/readme.md", True),
    ("path", "eq", "docs/other.md", False),
    ("path", "ne", "docs/other.md", True),
    ("path", "ne", "docs/readme.md", False),
    ("argv.0", "in", ["rm", "mv"], True),
    ("argv.0", "in", ["ls"], False),
    ("argv.0", "not_in", ["ls", "cat"], True),
    ("argv.0", "not_in", ["rm"], False),
    ("path", "glob", "docs/*", True),
    ("path", "glob", "src/*", False),
    ("path", "regex", r"\.md$", True),
    ("path", "regex", r"^readme", False),  # search, but anchored
    ("path", "contains", "readme", True),
    ("path", "contains", "secret", False),
    ("argv", "contains", "-rf", True),
    ("argv", "contains", "-r", False),  # list membership, not substring
    ("options", "contains", "force", True),  # a key of an object
    ("options", "contains", "missing", False),
    ("path", "startswith", "docs/", True),
    ("path", "startswith", "src/", False),
    ("count", "lt", 6, True),
    ("count", "lt", 5, False),
    ("count", "le", 5, True),
    ("count", "le", 4, False),
    ("count", "gt", 4, True),
    ("count", "gt", 5, False),
    ("count", "ge", 5, True),
    ("count", "ge", 6, False),
    ("ratio", "lt", 1, True),
    ("ratio", "gt", 0.5, False),
    ("path", "exists", None, True),
    ("nope", "exists", None, False),
    ("nope", "missing", None, True),
    ("path", "missing", None, False),
    ("none", "exists", None, True),  # null is a value, not a missing one
    ("none", "eq", None, True),
    # dotted paths into objects and lists
    ("options.force", "eq", True, True),
    ("options.depth", "ge", 3, True),
    ("options.tags.1", "eq", "b", True),
    ("options.meta.k", "eq", "v", True),
    ("items.1.name", "eq", "y", True),
    ("items.-1.name", "eq", "y", True),
    ("argv.-3", "eq", "rm", True),
    # missing values: every comparison fails, except the negations
    ("argv.3", "eq", "x", False),
    ("argv.-4", "eq", "rm", False),
    ("argv.x", "eq", "rm", False),
    ("argv.--1", "eq", "rm", False),  # not an index (used to raise ValueError)
    ("argv.\u00b2", "eq", "rm", False),  # a unicode digit is not an index either
    ("path.0", "eq", "d", False),  # no indexing into strings
    ("options.nope.deeper", "eq", 1, False),
    ("nope", "in", ["x"], False),
    ("nope", "glob", "*", False),
    ("nope", "regex", ".*", False),
    ("nope", "contains", "", False),
    ("nope", "startswith", "", False),
    ("nope", "lt", 10, False),
    ("nope", "ne", "x", True),
    ("nope", "not_in", ["x"], True),
    # JSON types: true is not 1, numbers are not strings
    ("flag", "eq", 1, False),
    ("count", "eq", 5.0, True),
    ("flag", "in", [1], False),
    ("count", "in", [True, 5], True),
    ("flag", "ne", 1, True),
    ("flag", "lt", 2, False),  # booleans are not numbers
    ("path", "lt", 2, False),
    ("argv", "contains", 1, False),
    ("count", "glob", "5", True),  # non-strings are compared as their text
]


@pytest.mark.parametrize(("path", "op", "value", "holds"), CONDITIONS)
def test_argument_conditions(path: str, op: str, value: JsonValue, holds: bool) -> None:
    condition = ArgCondition(path=path, op=cast(Any, op), value=value)
    assert condition.holds(ARGS) is holds


def test_every_op_is_in_the_table() -> None:
    from tether.policy.rules import ArgOp

    assert {op for _, op, _, _ in CONDITIONS} == set(cast(Any, ArgOp).__args__)


@pytest.mark.parametrize(
    ("path", "found", "expected"),
    [("count", 5, True), ("none", None, True), ("nope", None, False), ("options.depth", 3, True)],
)
def test_a_callable_test_replaces_op_and_never_sees_missing_values(
    path: str, found: object, expected: bool
) -> None:
    seen: list[object] = []

    def check(value: object) -> bool:
        seen.append(value)
        return True

    condition = ArgCondition(path=path, op="in", test=check)  # op/value ignored with test
    assert condition.holds(ARGS) is expected
    assert seen == ([found] if expected else [])


def test_a_callable_test_decides() -> None:
    condition = ArgCondition(path="count", test=lambda v: isinstance(v, int) and v > 4)
    assert condition.holds(ARGS)
    assert not ArgCondition(path="count", test=lambda v: False).holds(ARGS)


@pytest.mark.parametrize(
    ("op", "value", "message"),
    [
        ("bogus", None, "unknown argument operator 'bogus'"),
        ("in", "rm", "in needs a list"),
        ("not_in", None, "not_in needs a list"),
        ("regex", "(", "not a regex RE2 can run"),
        ("regex", "a(?=b)", "no lookaround"),
        ("glob", 1, "glob needs a string"),
        ("regex", None, "regex needs a string"),
        ("startswith", ["x"], "startswith needs a string"),
        ("lt", "5", "lt needs a number"),
        ("ge", True, "ge needs a number"),
    ],
)
def test_bad_conditions_are_config_errors(op: str, value: JsonValue, message: str) -> None:
    with pytest.raises(ConfigError, match=re.escape(message)):
        ArgCondition(path="x", op=cast(Any, op), value=value)


@pytest.mark.parametrize(
    ("name", "patterns", "matches"),
    [
        ("read_file", ["read_*"], True),
        ("read_file", ["read_file"], True),
        ("read_file", ["Read_*"], False),  # case-sensitive
        ("read_file", ["write_*", "*_file"], True),
        ("read_file", [], False),
        ("read_file", ["read_?ile"], True),
        ("read[1]", ["read[1]"], True),  # an exact name with glob characters
    ],
)
def test_matches_any(name: str, patterns: list[str], matches: bool) -> None:
    assert matches_any(name, patterns) is matches


def test_rule_helpers() -> None:
    rule = deny("shell", when=[ArgCondition(path="argv.0", op="in", value=["rm"])])
    assert rule == Rule(
        decision="deny",
        tools=("shell",),
        when=(ArgCondition(path="argv.0", op="in", value=["rm"]),),
        reason="denied by the policy",
    )
    assert rule.label == "deny:shell"
    assert allow(["a", "b*"]).label == "allow:a,b*"
    assert require_approval("x", name="mine").label == "mine"
    assert require_approval("x").reason == "a human must approve this call"
    assert rule.matches("shell", {"argv": ["rm"]})
    assert not rule.matches("shell", {"argv": ["ls"]})
    assert not rule.matches("shelly", {"argv": ["rm"]})
    with pytest.raises(ConfigError, match="at least one tool"):
        allow([])


def test_a_lone_string_is_one_glob_not_one_per_character() -> None:
    # "x*" as characters would be ("x", "*"), and "*" matches every tool
    assert RateLimit(tools=cast(Any, "x*"), max_calls=1).tools == ("x*",)
    assert Concurrency(tools=cast(Any, "x*"), max=1).tools == ("x*",)
    assert ContentFilter(patterns=cast(Any, "a*"), tools=cast(Any, "x*")).patterns == ("a*",)
    assert Provenance(allow=cast(Any, "kv_*")).allow == ("kv_*",)
    assert Trust(tools=cast(Any, "s*"), annotations=ToolAnnotations()).tools == ("s*",)
    assert Rule(decision="deny", tools=cast(Any, "x*")).tools == ("x*",)
    assert RateLimit(tools=cast(Any, ["a", "b"]), max_calls=1).tools == ("a", "b")


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda: RateLimit(max_calls=-1), "max_calls"),
        (lambda: RateLimit(max_calls=1, per_seconds=0), "per_seconds"),
        (lambda: Concurrency(max=0), "Concurrency.max"),
        (lambda: ContentFilter(), "patterns or checks"),
        (lambda: ContentFilter(patterns=("(",)), r"patterns\[0\]: '\(' is not a regex RE2"),
        (lambda: ContentFilter(patterns=("ok", r"(a)\1")), r"patterns\[1\].*backreferences"),
        (lambda: Sizes(max_argument_bytes=-1), "max_argument_bytes"),
        (lambda: Sizes(max_result_bytes=-5), "max_result_bytes"),
    ],
)
def test_bad_values_are_config_errors(make: Any, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        make()


def test_content_filter_patterns_with_global_flags() -> None:
    # the TOML example's pattern: joined into one alternation it does not compile
    flt = ContentFilter(patterns=("(?i)ignore (all )?previous instructions", "(?s)a.b"))
    assert flt.first_match("Please IGNORE previous instructions") == "a filtered pattern"
    assert flt.first_match("a\nb") == "a filtered pattern"
    assert flt.first_match("A\nB") is None
    assert flt.first_match("carry on") is None


def test_content_filter_checks_are_named_and_the_text_never_is() -> None:
    def has_key(text: str) -> bool:
        return "sk-" in text

    flt = ContentFilter(checks=(has_key,))
    assert flt.first_match("token sk-123") == "the check has_key"
    assert flt.first_match("nothing") is None
    assert flt.label == "content_filter"
    assert ContentFilter(patterns=("x",), name="secrets").label == "secrets"


# -- Rules + Rules ---------------------------------------------------------------------------


def test_adding_rules_joins_the_lists() -> None:
    a = Rules(
        rules=(deny("a"),),
        rate_limits=(RateLimit(max_calls=1),),
        concurrency=(Concurrency(max=1),),
        filters=(ContentFilter(patterns=("a",)),),
        trust=(Trust(tools=("a",), annotations=ToolAnnotations(read_only=True)),),
    )
    b = Rules(
        rules=(allow("b"),),
        rate_limits=(RateLimit(max_calls=2),),
        concurrency=(Concurrency(max=2),),
        filters=(ContentFilter(patterns=("b",)),),
        trust=(Trust(tools=("b",), annotations=ToolAnnotations(read_only=False)),),
    )
    c = a + b
    assert c.rules == (deny("a"), allow("b"))
    assert c.rate_limits == (RateLimit(max_calls=1), RateLimit(max_calls=2))
    assert c.concurrency == (Concurrency(max=1), Concurrency(max=2))
    assert c.filters == (*a.filters, *b.filters)
    assert c.trust == (*a.trust, *b.trust)


def test_the_right_sides_changed_settings_win() -> None:
    left = Rules(
        sizes=Sizes(max_argument_bytes=10),
        risk=RiskDefaults(destructive="needs_approval"),
        provenance=Provenance(allow=("kv_set",)),
    )
    right = Rules(
        sizes=Sizes(max_result_bytes=20),
        risk=RiskDefaults(destructive="allow", open_world="needs_approval"),
        provenance=Provenance(decision="deny"),
    )
    both = left + right
    assert both.sizes == Sizes(max_argument_bytes=10, max_result_bytes=20)
    assert both.risk == RiskDefaults(destructive="allow", open_world="needs_approval")
    assert both.provenance == Provenance(decision="deny", allow=("kv_set",))


def test_unchanged_defaults_do_not_override_the_left_side() -> None:
    left = Rules(
        sizes=Sizes(max_argument_bytes=None, large_results="error"),
        risk=RiskDefaults(unannotated="allow"),
        provenance=Provenance(enabled=False),
    )
    assert (left + Rules()).sizes == left.sizes
    assert (left + Rules()) == left
    assert (Rules() + left) == left
    assert (left + Rules(rules=(deny("x"),))).risk == RiskDefaults(unannotated="allow")


def test_adding_something_else_is_a_type_error() -> None:
    with pytest.raises(TypeError):
        _ = Rules() + cast(Any, 1)


decisions = st.sampled_from(["allow", "deny", "needs_approval"])
sizes = st.builds(
    Sizes,
    max_argument_bytes=st.none() | st.integers(0, 10**7),
    max_result_bytes=st.none() | st.integers(0, 10**7),
    large_results=st.sampled_from(["truncate", "error"]),
)
risks = st.builds(RiskDefaults, destructive=decisions, open_world=decisions, unannotated=decisions)
provenances = st.builds(
    Provenance,
    enabled=st.booleans(),
    decision=decisions,
    allow=st.lists(st.sampled_from(["a", "b*"]), max_size=2).map(tuple),
)
rule_sets = st.builds(
    Rules,
    rules=st.lists(st.sampled_from([deny("a"), allow("b"), require_approval("c")])).map(tuple),
    sizes=sizes,
    risk=risks,
    provenance=provenances,
)


@given(rule_sets, rule_sets, rule_sets)
def test_adding_is_associative_with_rules_as_identity(a: Rules, b: Rules, c: Rules) -> None:
    assert (a + b) + c == a + (b + c)
    assert a + Rules() == a
    assert Rules() + a == a
    assert (a + b).rules == a.rules + b.rules


@given(rule_sets, rule_sets)
def test_each_setting_comes_from_the_right_when_changed_else_the_left(a: Rules, b: Rules) -> None:
    both = a + b
    for name in ("sizes", "risk", "provenance"):
        default, left, right, got = (getattr(r, name) for r in (Rules(), a, b, both))
        for field in (f.name for f in fields(default)):
            expected = (
                getattr(right, field)
                if getattr(right, field) != getattr(default, field)
                else getattr(left, field)
            )
            assert getattr(got, field) == expected, (name, field)
