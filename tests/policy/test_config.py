"""Policy rules from TOML: every table, the ``[policy]`` wrapper, every mistake, and round trips."""

from __future__ import annotations

import json
import re
import tempfile
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import cast

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tether.errors import ConfigError
from tether.jsontypes import JsonValue
from tether.policy.config import load_rules, rules_from_mapping
from tether.policy.gate import RulePolicy
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

FULL = """
[risk]
destructive = "needs_approval"
open_world = "allow"
unannotated = "deny"

[sizes]
max_argument_bytes = 100000
max_result_bytes = false
large_results = "error"

[provenance]
enabled = true
decision = "deny"
allow = ["kv_set"]

[[allow]]
tools = ["read_*"]
when = [{ arg = "path", op = "glob", value = "docs/*" }]
reason = "docs are public"

[[allow]]
tools = "calc"
name = "calculator"

[[deny]]
tools = ["shell"]
when = [
  { arg = "argv.0", op = "in", value = ["rm", "dd"] },
  { arg = "options.force", value = true },
]

[[require_approval]]
tools = ["pay"]
when = [{ arg = "amount", op = "gt", value = 100 }]
reason = "money"

[[rate_limit]]
tools = ["http_*"]
max_calls = 20
per_seconds = 60
scope = "run"

[[rate_limit]]
max_calls = 1000
scope = "process"
each_tool = false

[[concurrency]]
tools = ["http_*"]
max = 4

[[filter]]
on = "results"
patterns = ["(?i)ignore (all )?previous instructions"]
result_action = "block"

[[filter]]
patterns = "sk-[A-Za-z0-9]+"
on = "both"
tools = ["*"]
decision = "needs_approval"
result_action = "redact"
name = "secrets"
reason = "an API key"

[[trust]]
tools = ["search"]
read_only = true
open_world = true
"""

EXPECTED = Rules(
    rules=(
        allow(
            "read_*",
            when=[ArgCondition(path="path", op="glob", value="docs/*")],
            reason="docs are public",
        ),
        allow("calc", name="calculator"),
        deny(
            "shell",
            when=[
                ArgCondition(path="argv.0", op="in", value=["rm", "dd"]),
                ArgCondition(path="options.force", value=True),
            ],
        ),
        require_approval(
            "pay", when=[ArgCondition(path="amount", op="gt", value=100)], reason="money"
        ),
    ),
    rate_limits=(
        RateLimit(tools=("http_*",), max_calls=20, per_seconds=60, scope="run"),
        RateLimit(max_calls=1000, scope="process", each_tool=False),
    ),
    concurrency=(Concurrency(tools=("http_*",), max=4),),
    filters=(
        ContentFilter(
            on="results",
            patterns=("(?i)ignore (all )?previous instructions",),
            result_action="block",
        ),
        ContentFilter(
            patterns=("sk-[A-Za-z0-9]+",),
            on="both",
            decision="needs_approval",
            result_action="redact",
            name="secrets",
            reason="an API key",
        ),
    ),
    sizes=Sizes(max_argument_bytes=100000, max_result_bytes=None, large_results="error"),
    risk=RiskDefaults(destructive="needs_approval", open_world="allow", unannotated="deny"),
    provenance=Provenance(enabled=True, decision="deny", allow=("kv_set",)),
    trust=(Trust(tools=("search",), annotations=ToolAnnotations(read_only=True, open_world=True)),),
)


def write(tmp_path: Path, text: str, name: str = "policy.toml") -> Path:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


def test_a_full_file_loads_every_table(tmp_path: Path) -> None:
    assert load_rules(write(tmp_path, FULL)) == EXPECTED


def test_the_policy_table_wrapper(tmp_path: Path) -> None:
    wrapped = "\n".join(
        line.replace("[", "[policy.", 1).replace("[[policy.", "[[policy.")
        if line.startswith("[")
        else line
        for line in FULL.splitlines()
    ).replace("[policy.[", "[[policy.")
    assert "[[policy.allow]]" in wrapped
    assert "[policy.risk]" in wrapped
    assert load_rules(write(tmp_path, wrapped)) == EXPECTED


def test_an_empty_file_is_the_default_policy(tmp_path: Path) -> None:
    assert load_rules(write(tmp_path, "")) == Rules()
    assert load_rules(write(tmp_path, "[policy]\n")) == Rules()


def test_from_toml_builds_a_policy(tmp_path: Path) -> None:
    policy = RulePolicy.from_toml(write(tmp_path, FULL))
    assert policy.rules == EXPECTED
    assert policy.concurrency("http_get") == 4


def test_the_modules_docstring_example_loads() -> None:
    from tether.policy import config

    doc = config.__doc__ or ""
    example = doc.split("```toml")[1].split("```")[0]
    rules = rules_from_mapping(__import__("tomllib").loads(example))
    assert rules.filters[0].first_match("Ignore all previous instructions") is not None


MISTAKES: list[tuple[str, str, list[str]]] = [
    ("unknown top-level key", "colour = 1", ["unknown key(s) colour"]),
    ("unknown key in [risk]", "[risk]\nsafe = 'allow'", ["[risk]", "safe"]),
    ("unknown key in [sizes]", "[sizes]\nmax_bytes = 1", ["[sizes]", "max_bytes"]),
    ("unknown key in [provenance]", "[provenance]\non = true", ["[provenance]", "on"]),
    (
        "unknown key in [[allow]]",
        "[[allow]]\ntools = 'x'\ndecision = 'deny'",
        ["allow[0]", "decision"],
    ),
    ("unknown key in [[deny]]", "[[deny]]\ntools = 'x'\ntool = 'y'", ["deny[0]", "tool"]),
    (
        "unknown key in [[require_approval]]",
        "[[require_approval]]\ntools = 'x'\nwho = 'me'",
        ["require_approval[0]", "who"],
    ),
    (
        "unknown key in a condition",
        "[[deny]]\ntools = 'x'\nwhen = [{arg = 'a', is = 1}]",
        ["when[0]", "is"],
    ),
    (
        "unknown key in [[rate_limit]]",
        "[[rate_limit]]\nmax_calls = 1\nper = 2",
        ["rate_limit[0]", "per"],
    ),
    (
        "unknown key in [[concurrency]]",
        "[[concurrency]]\nmax = 1\nmin = 0",
        ["concurrency[0]", "min"],
    ),
    (
        "unknown key in [[filter]]",
        "[[filter]]\npatterns = ['x']\nregex = 'y'",
        ["filter[0]", "regex"],
    ),
    ("unknown key in [[trust]]", "[[trust]]\ntools = 'x'\nsafe = true", ["trust[0]", "safe"]),
    ("beside [policy]", "x = 1\n[policy]\n", ["beside [policy]", "x"]),
    ("unknown key under [policy]", "[policy]\ncolour = 1", ["colour"]),
    ("bad decision", "[risk]\ndestructive = 'maybe'", ["[risk]", "destructive", "'maybe'"]),
    (
        "bad decision in a filter",
        "[[filter]]\npatterns = ['x']\ndecision = 'no'",
        ["filter[0]", "decision"],
    ),
    ("bad provenance decision", "[provenance]\ndecision = 1", ["[provenance]", "decision"]),
    (
        "wrong type: enabled",
        "[provenance]\nenabled = 'yes'",
        ["[provenance]", "enabled", "true or false"],
    ),
    ("wrong type: allow globs", "[provenance]\nallow = [1]", ["[provenance]", "allow"]),
    (
        "wrong type: max_calls",
        "[[rate_limit]]\nmax_calls = '5'",
        ["rate_limit[0]", "max_calls", "integer"],
    ),
    (
        "wrong type: bool max_calls",
        "[[rate_limit]]\nmax_calls = true",
        ["rate_limit[0]", "max_calls"],
    ),
    (
        "wrong type: per_seconds",
        "[[rate_limit]]\nmax_calls = 1\nper_seconds = '1m'",
        ["per_seconds", "number"],
    ),
    ("bad scope", "[[rate_limit]]\nmax_calls = 1\nscope = 'global'", ["rate_limit[0]", "scope"]),
    ("wrong type: each_tool", "[[rate_limit]]\nmax_calls = 1\neach_tool = 1", ["each_tool"]),
    ("negative max_calls", "[[rate_limit]]\nmax_calls = -1", ["rate_limit[0]", "max_calls"]),
    (
        "zero per_seconds",
        "[[rate_limit]]\nmax_calls = 1\nper_seconds = 0",
        ["rate_limit[0]", "per_seconds"],
    ),
    (
        "missing max_calls",
        "[[rate_limit]]\ntools = 'x'",
        ["rate_limit[0]", "max_calls", "required"],
    ),
    ("missing max", "[[concurrency]]\ntools = 'x'", ["concurrency[0]", "max", "required"]),
    ("zero max", "[[concurrency]]\nmax = 0", ["concurrency[0]", "max"]),
    ("wrong type: max", "[[concurrency]]\nmax = 1.5", ["concurrency[0]", "max"]),
    (
        "wrong type: max_argument_bytes",
        "[sizes]\nmax_argument_bytes = '1MB'",
        ["[sizes]", "max_argument_bytes"],
    ),
    ("true is not a size", "[sizes]\nmax_result_bytes = true", ["[sizes]", "max_result_bytes"]),
    ("negative size", "[sizes]\nmax_result_bytes = -1", ["[sizes]", "max_result_bytes"]),
    ("bad large_results", "[sizes]\nlarge_results = 'drop'", ["[sizes]", "large_results"]),
    ("bad regex", "[[filter]]\npatterns = ['(']", ["filter[0]", "patterns[0]", "'('"]),
    (
        "a regex that needs backtracking",
        "[[filter]]\npatterns = ['ok', '(\\w+)\\1']",
        ["filter[0]", "patterns[1]", "backreferences", "rewrite the pattern"],
    ),
    (
        "lookaround in an argument regex",
        "[[deny]]\ntools = ['x']\nwhen = [{arg = 'url', op = 'regex', value = 'a(?!b)'}]",
        ["deny[0]", "'url'", "lookaround"],
    ),
    ("empty filter", "[[filter]]\non = 'results'", ["filter[0]", "patterns or checks"]),
    ("bad on", "[[filter]]\npatterns = ['x']\non = 'calls'", ["filter[0]", "on"]),
    (
        "bad result_action",
        "[[filter]]\npatterns = ['x']\nresult_action = 'drop'",
        ["result_action"],
    ),
    ("wrong type: filter name", "[[filter]]\npatterns = ['x']\nname = 1", ["filter[0]", "name"]),
    ("missing tools", "[[allow]]\nreason = 'x'", ["allow[0]", "tools is required"]),
    ("missing tools in trust", "[[trust]]\nread_only = true", ["trust[0]", "tools is required"]),
    ("empty tools", "[[deny]]\ntools = []", ["deny[0]", "tools"]),
    ("wrong type: tools", "[[deny]]\ntools = 1", ["deny[0]", "tools"]),
    ("wrong type: trust tools", "[[trust]]\ntools = 1", ["trust[0]", "tools"]),
    (
        "wrong type: rate tools",
        "[[rate_limit]]\nmax_calls = 1\ntools = [1]",
        ["rate_limit[0]", "tools"],
    ),
    ("wrong type: reason", "[[deny]]\ntools = 'x'\nreason = 1", ["deny[0]", "reason"]),
    ("wrong type: rule name", "[[deny]]\ntools = 'x'\nname = []", ["deny[0]", "name"]),
    (
        "wrong type: trust hint",
        "[[trust]]\ntools = 'x'\nread_only = 'yes'",
        ["trust[0]", "read_only"],
    ),
    (
        "bad op",
        "[[deny]]\ntools = 'x'\nwhen = [{arg = 'a', op = 'like'}]",
        ["deny[0]: when[0]", "op", "'like'"],
    ),
    (
        "wrong type: op",
        "[[deny]]\ntools = 'x'\nwhen = [{arg = 'a', op = 1}]",
        ["deny[0]: when[0]", "op"],
    ),
    (
        "in without a list",
        "[[deny]]\ntools = 'x'\nwhen = [{arg = 'a', op = 'in', value = 'b'}]",
        ["when[0]", "list"],
    ),
    (
        "bad regex value",
        "[[deny]]\ntools = 'x'\nwhen = [{arg = 'a', op = 'regex', value = '['}]",
        ["when[0]", "regex"],
    ),
    (
        "lt on text",
        "[[deny]]\ntools = 'x'\nwhen = [{arg = 'a', op = 'lt', value = '5'}]",
        ["when[0]", "number"],
    ),
    (
        "missing arg",
        "[[deny]]\ntools = 'x'\nwhen = [{op = 'exists'}]",
        ["when[0]", "arg is required"],
    ),
    ("wrong type: arg", "[[deny]]\ntools = 'x'\nwhen = [{arg = 1}]", ["when[0]", "arg"]),
    ("when not a list", "[[deny]]\ntools = 'x'\nwhen = {arg = 'a'}", ["deny[0]", "when"]),
    ("condition not a table", "[[deny]]\ntools = 'x'\nwhen = ['a']", ["when[0]", "table"]),
    ("risk not a table", "risk = 'deny'", ["[risk]", "table"]),
    ("own not a decision", "[risk]\nown = 'trust'", ["[risk]", "own", "'by_risk'"]),
    ("unknown provenance mode", "[provenance]\nmode = 'fine'", ["[provenance]", "mode"]),
    ("sensitive not a list", "[[trust]]\ntools = 'x'\nsensitive = 'to'", ["trust[0]", "sensitive"]),
    ("untrusted_output not a bool", "[[trust]]\ntools = 'x'\nuntrusted_output = 1", ["trust[0]"]),
    ("sizes not a table", "sizes = 1", ["[sizes]", "table"]),
    ("provenance not a table", "provenance = []", ["[provenance]", "table"]),
    ("policy not a table", "policy = 1", ["[policy]", "table"]),
    ("allow not an array", "allow = 'x'", ["allow", "array of tables"]),
    ("deny entries not tables", "deny = [1, 2]", ["deny[0]", "table"]),
    ("rate_limit entry not a table", "rate_limit = ['x']", ["rate_limit[0]", "table"]),
    ("filter not an array", "[filter]\npatterns = ['x']", ["filter", "array of tables"]),
    ("trust not an array", "trust = 1", ["trust", "array of tables"]),
    ("concurrency entry not a table", "concurrency = [1]", ["concurrency[0]", "table"]),
    ("invalid TOML", "[risk\n", ["is not valid TOML"]),
    ("duplicate key", "[risk]\ndestructive = 'deny'\ndestructive = 'allow'", ["is not valid TOML"]),
]


@pytest.mark.parametrize(("what", "text", "expected"), MISTAKES, ids=[m[0] for m in MISTAKES])
def test_every_mistake_is_a_config_error_naming_file_and_key(
    tmp_path: Path, what: str, text: str, expected: list[str]
) -> None:
    path = write(tmp_path, text, "my-policy.toml")
    with pytest.raises(ConfigError) as info:
        load_rules(path)
    message = str(info.value)
    assert str(path) in message, what
    for part in expected:
        assert part in message, (what, part, message)


def test_a_missing_file(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"no policy file at .*nope\.toml"):
        load_rules(tmp_path / "nope.toml")


def test_a_directory_or_binary_file(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=re.escape(f"cannot read the policy file {tmp_path}")):
        load_rules(tmp_path)
    binary = tmp_path / "bin.toml"
    binary.write_bytes(b"\xff\xfe[risk]")
    with pytest.raises(ConfigError, match=r"bin\.toml is not valid TOML"):
        load_rules(binary)


def test_a_mapping_names_its_source() -> None:
    with pytest.raises(ConfigError, match=r"^agent\.toml: unknown key"):
        rules_from_mapping({"x": 1}, source="agent.toml")


# -- round trips ---------------------------------------------------------------------------------


def _toml_value(value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    if isinstance(value, str):
        # JSON's escapes are TOML's; TOML also wants DEL escaped and no surrogate pairs
        return json.dumps(value, ensure_ascii=False).replace("\x7f", "\\u007f")
    if isinstance(value, list | tuple):
        return "[" + ", ".join(_toml_value(v) for v in cast(Sequence[object], value)) + "]"
    if isinstance(value, dict):
        table = cast(dict[str, object], value)
        return (
            "{" + ", ".join(f"{json.dumps(k)} = {_toml_value(v)}" for k, v in table.items()) + "}"
        )
    raise AssertionError(f"no TOML for {value!r}")


def to_toml(rules: Rules) -> str:
    """The TOML a user would write for ``rules`` (defaults written out, ``None`` as false)."""
    lines: list[str] = []
    lines += [
        "[risk]",
        *(
            f"{k} = {_toml_value(getattr(rules.risk, k))}"
            for k in ("own", "destructive", "open_world", "unannotated")
        ),
    ]
    sizes = rules.sizes
    lines += [
        "[sizes]",
        f"max_argument_bytes = {_toml_value(sizes.max_argument_bytes or False) if sizes.max_argument_bytes is not None else 'false'}",
        f"max_result_bytes = {_toml_value(sizes.max_result_bytes) if sizes.max_result_bytes is not None else 'false'}",
        f"large_results = {_toml_value(sizes.large_results)}",
    ]
    p = rules.provenance
    lines += [
        "[provenance]",
        f"enabled = {_toml_value(p.enabled)}",
        f"mode = {_toml_value(p.mode)}",
        f"decision = {_toml_value(p.decision)}",
        f"allow = {_toml_value(p.allow)}",
    ]
    for rule in rules.rules:
        table = {"allow": "allow", "deny": "deny", "needs_approval": "require_approval"}[
            rule.decision
        ]
        when = [
            {"arg": c.path, "op": c.op, **({} if c.value is None else {"value": c.value})}
            for c in rule.when
        ]
        lines += [
            f"[[{table}]]",
            f"tools = {_toml_value(rule.tools)}",
            f"when = {_toml_value(when)}",
            f"reason = {_toml_value(rule.reason)}",
            f"name = {_toml_value(rule.name)}",
        ]
    for limit in rules.rate_limits:
        lines += [
            "[[rate_limit]]",
            f"tools = {_toml_value(limit.tools)}",
            f"max_calls = {limit.max_calls}",
            f"scope = {_toml_value(limit.scope)}",
            f"each_tool = {_toml_value(limit.each_tool)}",
        ]
        if limit.per_seconds is not None:
            lines.append(f"per_seconds = {_toml_value(limit.per_seconds)}")
    for cap in rules.concurrency:
        lines += ["[[concurrency]]", f"tools = {_toml_value(cap.tools)}", f"max = {cap.max}"]
    for flt in rules.filters:
        lines += [
            "[[filter]]",
            f"patterns = {_toml_value(flt.patterns)}",
            f"on = {_toml_value(flt.on)}",
            f"tools = {_toml_value(flt.tools)}",
            f"decision = {_toml_value(flt.decision)}",
            f"result_action = {_toml_value(flt.result_action)}",
            f"name = {_toml_value(flt.name)}",
            f"reason = {_toml_value(flt.reason)}",
        ]
    for trust in rules.trust:
        hints = {
            k: getattr(trust.annotations, k)
            for k in ("read_only", "destructive", "idempotent", "open_world", "untrusted_output")
        }
        sensitive = trust.annotations.sensitive
        lines += [
            "[[trust]]",
            f"tools = {_toml_value(trust.tools)}",
            *(f"{k} = {_toml_value(v)}" for k, v in hints.items() if v is not None),
            *([f"sensitive = {_toml_value(sensitive)}"] if sensitive is not None else []),
        ]
    return "\n".join(lines) + "\n"


names = st.text(st.sampled_from("abcxyz_*?-"), min_size=1, max_size=6)
globs = st.lists(names, min_size=1, max_size=3).map(tuple)
texts = st.text(max_size=12)
decisions = st.sampled_from(["allow", "deny", "needs_approval"])
toml_scalars: st.SearchStrategy[JsonValue] = st.booleans() | st.integers(-1000, 1000) | texts
json_scalars = st.none() | toml_scalars  # null only as a missing value: TOML has no null
conditions = st.one_of(
    st.builds(
        ArgCondition, path=names, op=st.sampled_from(["eq", "ne", "contains"]), value=json_scalars
    ),
    st.builds(
        ArgCondition,
        path=names,
        op=st.sampled_from(["in", "not_in"]),
        value=st.lists(toml_scalars, max_size=3),
    ),
    st.builds(ArgCondition, path=names, op=st.sampled_from(["glob", "startswith"]), value=texts),
    st.builds(
        ArgCondition, path=names, op=st.just("regex"), value=st.sampled_from(["^a", "b+", "(?i)x"])
    ),
    st.builds(
        ArgCondition,
        path=names,
        op=st.sampled_from(["lt", "le", "gt", "ge"]),
        value=st.integers(-5, 5) | st.floats(-5, 5),
    ),
    st.builds(ArgCondition, path=names, op=st.sampled_from(["exists", "missing"])),
)


def _rules_of(decision: str) -> st.SearchStrategy[Rule]:
    return st.builds(
        Rule,
        decision=st.just(decision),
        tools=globs,
        when=st.lists(conditions, max_size=3).map(tuple),
        reason=texts,
        name=texts,
    )


rule_sets = st.builds(
    Rules,
    rules=st.tuples(
        st.lists(_rules_of("allow"), max_size=2),
        st.lists(_rules_of("deny"), max_size=2),
        st.lists(_rules_of("needs_approval"), max_size=2),
    ).map(lambda t: (*t[0], *t[1], *t[2])),  # the loader's order: allow, deny, approval
    rate_limits=st.lists(
        st.builds(
            RateLimit,
            tools=globs,
            max_calls=st.integers(0, 100),
            per_seconds=st.none() | st.floats(0.001, 1e6),
            scope=st.sampled_from(["run", "process"]),
            each_tool=st.booleans(),
        ),
        max_size=2,
    ).map(tuple),
    concurrency=st.lists(
        st.builds(Concurrency, tools=globs, max=st.integers(1, 50)), max_size=2
    ).map(tuple),
    filters=st.lists(
        st.builds(
            ContentFilter,
            patterns=st.lists(
                st.sampled_from(["a+", "(?i)secret", r"\d{3}", "x|y"]), min_size=1, max_size=3
            ).map(tuple),
            on=st.sampled_from(["arguments", "results", "both"]),
            tools=globs,
            decision=decisions,
            result_action=st.sampled_from(["block", "redact"]),
            name=texts,
            reason=texts,
        ),
        max_size=2,
    ).map(tuple),
    sizes=st.builds(
        Sizes,
        max_argument_bytes=st.none() | st.integers(1, 10**9),
        max_result_bytes=st.none() | st.integers(0, 10**9),
        large_results=st.sampled_from(["truncate", "error"]),
    ),
    risk=st.builds(
        RiskDefaults,
        own=decisions | st.just("by_risk"),
        destructive=decisions,
        open_world=decisions,
        unannotated=decisions,
    ),
    provenance=st.builds(
        Provenance,
        enabled=st.booleans(),
        mode=st.sampled_from(["dataflow", "coarse"]),
        decision=decisions,
        allow=st.lists(names, max_size=2).map(tuple),
    ),
    trust=st.lists(
        st.builds(
            Trust,
            tools=globs,
            annotations=st.builds(
                ToolAnnotations,
                read_only=st.none() | st.booleans(),
                destructive=st.none() | st.booleans(),
                idempotent=st.none() | st.booleans(),
                open_world=st.none() | st.booleans(),
                untrusted_output=st.none() | st.booleans(),
                sensitive=st.none() | st.lists(names, max_size=2).map(tuple),
            ),
        ),
        max_size=2,
    ).map(tuple),
)


@settings(max_examples=150, deadline=None)
@given(rule_sets)
def test_rules_written_as_toml_load_back_the_same(rules: Rules) -> None:
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "policy.toml"
        path.write_text(to_toml(rules), encoding="utf-8")
        loaded = load_rules(path)
    # reasons left empty get the helpers' defaults, as with allow()/deny() in Python
    defaults = {
        "allow": "allowed by the policy",
        "deny": "denied by the policy",
        "needs_approval": "a human must approve this call",
    }
    expected_rules = tuple(
        r
        if r.reason
        else Rule(
            decision=r.decision,
            tools=r.tools,
            when=r.when,
            reason=defaults[r.decision],
            name=r.name,
        )
        for r in rules.rules
    )
    assert loaded == replace(rules, rules=expected_rules)
