"""``RulePolicy.decide`` and ``check_result`` on hand-built logs: the decision order, step by step."""

from __future__ import annotations

import itertools
from collections.abc import Mapping
from dataclasses import replace

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tether.content import ImageBlock, ResourceBlock, TextBlock, ToolResult, content_text
from tether.events import (
    ApprovalGiven,
    Decision,
    PolicyDecided,
    ToolCallFinished,
    ToolCallRequested,
)
from tether.jsontypes import JsonValue
from tether.messages import ToolCall
from tether.policy import gate as gate_module
from tether.policy.base import PolicyContext, PolicyDecision
from tether.policy.gate import RulePolicy, effective_annotations
from tether.policy.rules import (
    ArgCondition,
    Concurrency,
    ContentFilter,
    Provenance,
    RateLimit,
    RiskDefaults,
    Rules,
    Sizes,
    Trust,
    allow,
    deny,
    require_approval,
)
from tether.run.journal import Journal
from tether.testing import FakeClock
from tether.tools.base import ToolAnnotations, ToolDefinition

SAFE = ToolAnnotations(read_only=True, open_world=False)
WRITER = ToolAnnotations(read_only=False, destructive=False, open_world=False)
DESTRUCTIVE = ToolAnnotations(read_only=False, destructive=True, open_world=False)
WEB = ToolAnnotations(read_only=True, open_world=True)
UNANNOTATED = ToolAnnotations()


def definition(
    name: str,
    annotations: ToolAnnotations = UNANNOTATED,
    origin: str | None = None,
    *,
    builtin: bool = True,
) -> ToolDefinition:
    """A tool gated by its risk: built-in by default (the developer's own tools run)."""
    return ToolDefinition(
        name=name,
        description=name,
        input_schema={"type": "object"},
        annotations=annotations,
        origin=origin,
        builtin=builtin and origin is None,
    )


class Log:
    """A run's log built by hand, decided the way the loop decides (intent, then decision)."""

    def __init__(self, run_id: str = "run-1", *tools: ToolDefinition) -> None:
        self.clock = FakeClock()
        self.journal = Journal(run_id, clock=self.clock)
        self.run_id = run_id
        self.tools: dict[str, ToolDefinition] = {t.name: t for t in tools}
        self.n = 0

    @property
    def context(self) -> PolicyContext:
        return PolicyContext(run_id=self.run_id, events=self.journal.events, tools=self.tools)

    def tick(self, seconds: float) -> None:
        self.journal.take()  # a new batch gets a new time
        self.clock.advance(seconds)

    def decide(
        self, policy: RulePolicy, tool: str, arguments: Mapping[str, JsonValue] | None = None
    ) -> PolicyDecision:
        self.n += 1
        call = ToolCall(id=f"c{self.n}", name=tool, arguments=dict(arguments or {}))
        self.journal.add(ToolCallRequested, call_id=call.id, tool=tool, arguments=call.arguments)
        definition_ = self.tools.get(tool) or definition(tool, SAFE)
        decision = policy.decide(call, definition_, self.context)
        self.journal.add(
            PolicyDecided,
            call_id=call.id,
            tool=tool,
            decision=decision.decision,
            rule=decision.rule,
            reason=decision.reason,
        )
        return decision

    def result(self, tool: str, *, synthetic: bool = False) -> None:
        self.n += 1
        self.journal.add(
            ToolCallFinished,
            call_id=f"c{self.n}",
            tool=tool,
            content=(TextBlock(text="output"),),
            synthetic=synthetic,
        )


def decide(
    policy: RulePolicy,
    tool: ToolDefinition,
    arguments: Mapping[str, JsonValue] | None = None,
    log: Log | None = None,
) -> PolicyDecision:
    log = log or Log("run-1", tool)
    log.tools.setdefault(tool.name, tool)
    call = ToolCall(id="x", name=tool.name, arguments=dict(arguments or {}))
    return policy.decide(call, tool, log.context)


# -- the default policy ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("annotations", "decision", "rule"),
    [
        (SAFE, "allow", "default:safe"),
        (
            ToolAnnotations(read_only=True, destructive=True, open_world=False),
            "allow",
            "default:safe",
        ),
        (WRITER, "allow", "default:safe"),  # declared harmless, closed-world
        (DESTRUCTIVE, "deny", "default:destructive"),
        (ToolAnnotations(read_only=False, open_world=False), "deny", "default:destructive"),
        (ToolAnnotations(idempotent=True), "deny", "default:destructive"),
        (WEB, "deny", "default:open_world"),
        (ToolAnnotations(read_only=True), "deny", "default:open_world"),
        (UNANNOTATED, "deny", "default:unannotated"),
    ],
)
def test_the_default_policy_by_risk(
    annotations: ToolAnnotations, decision: Decision, rule: str
) -> None:
    got = decide(RulePolicy(), definition("t", annotations))
    assert (got.decision, got.rule) == (decision, rule)
    assert got.reason


def test_the_unannotated_reason_says_how_to_fix_it() -> None:
    got = decide(RulePolicy(), definition("mystery"))
    assert "declares no annotations" in got.reason
    assert "allow('mystery')" in got.reason


@pytest.mark.parametrize("name", ["finish_task", "ask_user"])
def test_control_tools_are_always_allowed(name: str) -> None:
    strict = RulePolicy(
        Rules(
            rules=(deny("*"),),
            sizes=Sizes(max_argument_bytes=0),
            filters=(ContentFilter(patterns=(".",)),),
            rate_limits=(RateLimit(max_calls=0),),
        )
    )
    got = decide(strict, definition(name), {"answer": "x" * 100})
    assert (got.decision, got.rule) == ("allow", "control_tool")


# -- the risk defaults ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("risk", "annotations", "decision", "rule"),
    [
        (RiskDefaults(unannotated="allow"), UNANNOTATED, "allow", "default:unannotated"),
        (
            RiskDefaults(unannotated="needs_approval"),
            UNANNOTATED,
            "needs_approval",
            "default:unannotated",
        ),
        (RiskDefaults(destructive="allow"), DESTRUCTIVE, "allow", "default:destructive"),
        (
            RiskDefaults(destructive="needs_approval"),
            DESTRUCTIVE,
            "needs_approval",
            "default:destructive",
        ),
        (RiskDefaults(open_world="allow"), WEB, "allow", "default:open_world"),
        (RiskDefaults(open_world="needs_approval"), WEB, "needs_approval", "default:open_world"),
        # destructive and open-world at once: the stricter of the two defaults
        (
            RiskDefaults(destructive="allow"),
            ToolAnnotations(read_only=False, open_world=True),
            "deny",
            "default:open_world",
        ),
        (
            RiskDefaults(destructive="allow", open_world="needs_approval"),
            ToolAnnotations(read_only=False, open_world=True),
            "needs_approval",
            "default:open_world",
        ),
        (
            RiskDefaults(open_world="allow"),
            ToolAnnotations(read_only=False, open_world=True),
            "deny",
            "default:destructive",
        ),
        (
            RiskDefaults(open_world="allow", destructive="allow"),
            ToolAnnotations(read_only=False, open_world=True),
            "allow",
            "default:destructive",
        ),
        (RiskDefaults(unannotated="allow"), SAFE, "allow", "default:safe"),
    ],
)
def test_configured_risk_defaults(
    risk: RiskDefaults, annotations: ToolAnnotations, decision: Decision, rule: str
) -> None:
    got = decide(RulePolicy(Rules(risk=risk)), definition("t", annotations))
    assert (got.decision, got.rule) == (decision, rule)


# -- the decision order -------------------------------------------------------------------


def _everything(
    *,
    cap: bool = True,
    content: bool = True,
    denied: bool = True,
    limited: bool = True,
    approval: bool = True,
    provenance: bool = True,
    allowed: bool = True,
) -> RulePolicy:
    return RulePolicy(
        Rules(
            sizes=Sizes(max_argument_bytes=10 if cap else None),
            filters=(ContentFilter(patterns=("secret",), name="filter:secret"),) if content else (),
            rules=(
                *((deny("t", name="deny:t"),) if denied else ()),
                *((require_approval("t", name="approve:t"),) if approval else ()),
                *((allow("t", name="allow:t"),) if allowed else ()),
            ),
            rate_limits=(RateLimit(tools=("t",), max_calls=0),) if limited else (),
            provenance=Provenance(enabled=provenance, mode="coarse"),
        )
    )


STEPS = ["cap", "content", "denied", "limited", "approval", "provenance", "allowed"]
EXPECTED = [
    ("deny", "max_argument_bytes"),
    ("deny", "filter:secret"),
    ("deny", "deny:t"),
    ("deny", "rate_limit"),
    ("needs_approval", "approve:t"),
    ("needs_approval", "provenance"),
    ("allow", "allow:t"),
    ("deny", "default:unannotated"),
]


@pytest.mark.parametrize("removed", range(len(STEPS) + 1))
def test_the_first_step_that_matches_decides(removed: int) -> None:
    """Every step matches; with the first ``removed`` steps switched off, the next decides."""
    switches = {step: index >= removed for index, step in enumerate(STEPS)}
    policy = _everything(**switches)
    tool = definition("t", WRITER)
    log = Log("run-1", tool, definition("web", WEB))
    log.result("web")  # untrusted output in the context
    got = decide(policy, tool, {"text": "a secret, longer than ten bytes"}, log)
    expected = EXPECTED[removed]
    if removed == len(STEPS):  # nothing left but the risk default, for a harmless tool
        expected = ("allow", "default:safe")
    assert (got.decision, got.rule) == expected


def test_an_unannotated_tool_with_every_rule_off_is_denied() -> None:
    policy = _everything(**dict.fromkeys(STEPS, False))
    assert decide(policy, definition("t")).rule == "default:unannotated"


def test_the_size_cap_counts_json_bytes() -> None:
    policy = RulePolicy(Rules(sizes=Sizes(max_argument_bytes=12)))
    tool = definition("t", SAFE)
    assert decide(policy, tool, {"a": "1234"}).decision == "allow"  # {"a":"1234"} is 12
    got = decide(policy, tool, {"a": "12345"})
    assert (got.decision, got.rule) == ("deny", "max_argument_bytes")
    assert "13 bytes" in got.reason
    assert "allows 12" in got.reason
    assert decide(policy, tool, {"a": "\u00e9\u00e9"}).decision == "allow"  # 10 bytes
    assert decide(policy, tool, {"a": "\u00e9\u00e9\u00e9"}).decision == "deny"  # UTF-8: 14


@pytest.mark.parametrize(
    ("flt", "arguments", "decision", "rule"),
    [
        (ContentFilter(patterns=("rm -rf",)), {"cmd": "rm -rf /"}, "deny", "content_filter"),
        (ContentFilter(patterns=("rm -rf",)), {"cmd": "ls"}, "allow", "default:safe"),
        (
            ContentFilter(patterns=("(?i)password",), decision="needs_approval", name="pw"),
            {"note": "my PASSWORD is"},
            "needs_approval",
            "pw",
        ),
        (
            ContentFilter(checks=(lambda text: len(text) > 20,), name="long"),
            {"note": "x" * 30},
            "deny",
            "long",
        ),
        (ContentFilter(checks=(lambda text: False,)), {"note": "x"}, "allow", "default:safe"),
        # another tool's filter does not apply
        (ContentFilter(patterns=("x",), tools=("other",)), {"n": "x"}, "allow", "default:safe"),
        # a results-only filter does not look at arguments
        (ContentFilter(patterns=("x",), on="results"), {"n": "x"}, "allow", "default:safe"),
        (ContentFilter(patterns=("x",), on="both"), {"n": "x"}, "deny", "content_filter"),
        # keys are part of the JSON too
        (ContentFilter(patterns=('"token"',)), {"token": 1}, "deny", "content_filter"),
    ],
)
def test_argument_content_filters(
    flt: ContentFilter, arguments: dict[str, JsonValue], decision: Decision, rule: str
) -> None:
    got = decide(RulePolicy(Rules(filters=(flt,))), definition("t", SAFE), arguments)
    assert (got.decision, got.rule) == (decision, rule)
    if decision != "allow":
        assert "rm -rf" not in got.reason  # never the matched text
        assert got.reason.startswith("the arguments contain")


def test_a_filter_reason_is_used_when_given() -> None:
    flt = ContentFilter(patterns=("x",), reason="no x here")
    assert decide(RulePolicy(Rules(filters=(flt,))), definition("t"), {"a": "x"}).reason == (
        "no x here"
    )


SHELL = definition("shell", WRITER)


@pytest.mark.parametrize(
    ("condition", "arguments", "denied"),
    [
        (ArgCondition(path="argv.0", op="in", value=["rm", "dd"]), {"argv": ["rm", "x"]}, True),
        (ArgCondition(path="argv.0", op="in", value=["rm", "dd"]), {"argv": ["ls"]}, False),
        (ArgCondition(path="argv.0", op="not_in", value=["ls"]), {"argv": []}, True),
        (ArgCondition(path="opts.force", op="eq", value=True), {"opts": {"force": True}}, True),
        (ArgCondition(path="opts.force", op="eq", value=True), {"opts": {"force": 1}}, False),
        (ArgCondition(path="opts.force", op="eq", value=True), {}, False),
        (ArgCondition(path="opts.force", op="missing"), {}, True),
        (ArgCondition(path="cwd", op="glob", value="/etc*"), {"cwd": "/etc/x"}, True),
        (ArgCondition(path="cwd", op="regex", value="^/(etc|root)"), {"cwd": "/root"}, True),
        (ArgCondition(path="n", op="gt", value=100), {"n": 101}, True),
        (ArgCondition(path="n", op="gt", value=100), {"n": "101"}, False),
        (ArgCondition(path="argv", test=lambda v: "sudo" in str(v)), {"argv": ["sudo"]}, True),
        (ArgCondition(path="argv", test=lambda v: "sudo" in str(v)), {}, False),
    ],
)
def test_deny_rules_with_argument_predicates(
    condition: ArgCondition, arguments: dict[str, JsonValue], denied: bool
) -> None:
    policy = RulePolicy(Rules(rules=(deny("shell", when=[condition], reason="no"), allow("shell"))))
    got = decide(policy, SHELL, arguments)
    assert (got.decision, got.rule) == (
        ("deny", "deny:shell") if denied else ("allow", "allow:shell")
    )


def test_all_conditions_of_a_rule_must_hold() -> None:
    rule = deny(
        "shell",
        when=[
            ArgCondition(path="argv.0", op="eq", value="rm"),
            ArgCondition(path="argv.1", op="eq", value="-rf"),
        ],
    )
    policy = RulePolicy(Rules(rules=(rule, allow("shell"))))
    assert decide(policy, SHELL, {"argv": ["rm", "-rf"]}).decision == "deny"
    assert decide(policy, SHELL, {"argv": ["rm", "x"]}).decision == "allow"


def test_tool_globs_in_rules() -> None:
    policy = RulePolicy(deny("db_*"), allow("*"))
    assert decide(policy, definition("db_drop")).decision == "deny"
    assert decide(policy, definition("read")).decision == "allow"


def test_extra_rules_are_added_to_the_rules() -> None:
    policy = RulePolicy(Rules(risk=RiskDefaults(unannotated="allow")), deny("x"))
    assert decide(policy, definition("x")).decision == "deny"
    assert decide(policy, definition("y")).decision == "allow"
    assert policy.rules.risk.unannotated == "allow"
    assert "RulePolicy(Rules(" in repr(policy)


def test_approval_rules_by_arguments() -> None:
    rule = require_approval("pay", when=[ArgCondition(path="amount", op="gt", value=100)])
    policy = RulePolicy(Rules(rules=(rule, allow("pay"))))
    pay = definition("pay", DESTRUCTIVE)
    got = decide(policy, pay, {"amount": 500})
    assert (got.decision, got.rule, got.reason) == (
        "needs_approval",
        "needs_approval:pay",
        "a human must approve this call",
    )
    assert decide(policy, pay, {"amount": 5}).decision == "allow"


# -- rate limits --------------------------------------------------------------------------------


def test_a_run_rate_limit_counts_the_runs_allowed_calls() -> None:
    tool = definition("t", SAFE)
    policy = RulePolicy(Rules(rate_limits=(RateLimit(tools=("t",), max_calls=2),)))
    log = Log("run-1", tool)
    assert [log.decide(policy, "t").decision for _ in range(4)] == [
        "allow",
        "allow",
        "deny",
        "deny",
    ]
    denied = log.decide(policy, "t")
    assert denied.rule == "rate_limit"
    assert denied.reason == ("rate limit: t may be called 2 times in this run, and that is used up")
    # another run has its own budget
    assert Log("run-2", tool).decide(policy, "t").decision == "allow"


def test_denied_calls_and_control_tools_do_not_count() -> None:
    policy = RulePolicy(
        Rules(
            rules=(deny("t", when=[ArgCondition(path="no", op="exists")]),),
            rate_limits=(RateLimit(max_calls=1),),
        )
    )
    log = Log("run-1", definition("t", SAFE), definition("finish_task", SAFE))
    assert log.decide(policy, "t", {"no": 1}).decision == "deny"
    assert log.decide(policy, "finish_task").decision == "allow"
    assert log.decide(policy, "t").decision == "allow"
    assert log.decide(policy, "t").rule == "rate_limit"


def test_approved_calls_count() -> None:
    policy = RulePolicy(
        Rules(rules=(require_approval("t"),), rate_limits=(RateLimit(tools=("t",), max_calls=1),))
    )
    log = Log("run-1", definition("t", SAFE))
    assert log.decide(policy, "t").decision == "needs_approval"
    log.journal.add(ApprovalGiven, call_id=f"c{log.n}", approved=True)
    assert log.decide(policy, "t").rule == "rate_limit"
    # a denied approval does not count
    other = Log("run-2", definition("t", SAFE))
    other.decide(policy, "t")
    other.journal.add(ApprovalGiven, call_id=f"c{other.n}", approved=False)
    assert other.decide(policy, "t").decision == "needs_approval"


@pytest.mark.parametrize(("each_tool", "third"), [(True, "allow"), (False, "deny")])
def test_each_tool_or_a_shared_budget(each_tool: bool, third: Decision) -> None:
    limit = RateLimit(tools=("http_*",), max_calls=2, each_tool=each_tool)
    policy = RulePolicy(Rules(rate_limits=(limit,)))
    log = Log("run-1", definition("http_get", SAFE), definition("http_head", SAFE))
    assert log.decide(policy, "http_get").decision == "allow"
    assert log.decide(policy, "http_get").decision == "allow"
    got = log.decide(policy, "http_head")
    assert got.decision == third
    assert log.decide(policy, "http_get").decision == "deny"
    if not each_tool:
        assert "tools matching http_*" in got.reason
    assert log.decide(policy, "other").rule != "rate_limit"  # not matched by the limit


def test_a_window_counts_calls_by_event_time() -> None:
    policy = RulePolicy(Rules(rate_limits=(RateLimit(max_calls=2, per_seconds=10),)))
    log = Log("run-1", definition("t", SAFE))
    assert log.decide(policy, "t").decision == "allow"
    log.tick(4)
    assert log.decide(policy, "t").decision == "allow"
    log.tick(4)
    got = log.decide(policy, "t")
    assert (got.decision, got.rule) == ("deny", "rate_limit")
    assert "2 times per 10s in this run" in got.reason
    log.tick(3)  # 11s after the first call: it left the window
    assert log.decide(policy, "t").decision == "allow"
    assert log.decide(policy, "t").decision == "deny"
    log.tick(10)
    assert log.decide(policy, "t").decision == "allow"


def test_a_window_on_an_empty_log_does_not_fail() -> None:
    policy = RulePolicy(Rules(rate_limits=(RateLimit(max_calls=1, per_seconds=10),)))
    assert decide(policy, definition("t", SAFE), log=Log("empty")).decision == "allow"


def test_a_run_limit_is_rebuilt_from_the_log_by_a_new_policy() -> None:
    rules = Rules(rate_limits=(RateLimit(max_calls=2),))
    log = Log("run-1", definition("t", SAFE))
    first = RulePolicy(rules)
    log.decide(first, "t")
    log.decide(first, "t")
    assert log.decide(RulePolicy(rules), "t").rule == "rate_limit"


def test_another_log_under_the_same_run_id_starts_over() -> None:
    policy = RulePolicy(Rules(rate_limits=(RateLimit(max_calls=1),)))
    log = Log("run-1", definition("t", SAFE))
    log.decide(policy, "t")
    assert log.decide(policy, "t").decision == "deny"
    fresh = Log("run-1", definition("t", SAFE))  # same id, another chain
    assert fresh.decide(policy, "t").decision == "allow"
    shorter = Log("run-1", definition("t", SAFE))
    shorter.result("x")
    shorter.result("x")
    shorter.result("x")
    shorter.result("x")  # longer than what the policy saw, with other hashes
    assert shorter.decide(policy, "t").decision == "allow"


class _Monotonic:
    def __init__(self) -> None:
        self.now = 1000.0

    def monotonic(self) -> float:
        return self.now


def test_a_process_limit_counts_across_runs(monkeypatch: pytest.MonkeyPatch) -> None:
    clock = _Monotonic()
    monkeypatch.setattr(gate_module, "time", clock)
    limit = RateLimit(tools=("t",), max_calls=2, scope="process", per_seconds=60)
    policy = RulePolicy(Rules(rate_limits=(limit,)))
    one, two = Log("run-1", definition("t", SAFE)), Log("run-2", definition("t", SAFE))
    assert one.decide(policy, "t").decision == "allow"
    assert two.decide(policy, "t").decision == "allow"
    got = one.decide(policy, "t")
    assert (got.decision, got.rule) == ("deny", "rate_limit")
    assert "in this process" in got.reason
    assert Log("run-3").decide(policy, "t").decision == "deny"
    assert Log("run-3").decide(RulePolicy(Rules(rate_limits=(limit,))), "t").decision == "allow"
    clock.now += 61
    assert two.decide(policy, "t").decision == "allow"


def test_a_process_limit_without_a_window() -> None:
    policy = RulePolicy(Rules(rate_limits=(RateLimit(max_calls=1, scope="process"),)))
    assert Log("a").decide(policy, "t").decision == "allow"
    assert Log("b").decide(policy, "t").decision == "deny"
    assert Log("c").decide(policy, "u").decision == "allow"  # each tool its own budget


# -- provenance -----------------------------------------------------------------------------------


def _tainted_log(source: ToolDefinition, *tools: ToolDefinition, synthetic: bool = False) -> Log:
    log = Log("run-1", source, *tools)
    log.result(source.name, synthetic=synthetic)
    return log


PERMISSIVE = Rules(
    risk=RiskDefaults(destructive="allow", open_world="allow", unannotated="allow"),
    provenance=Provenance(mode="coarse"),
)
COARSE = Rules(provenance=Provenance(mode="coarse"))
OUTSIDE = ToolAnnotations(untrusted_output=True)  # an outside tool nobody vouched for


@pytest.mark.parametrize(
    ("source", "synthetic", "tainted"),
    [
        (definition("web", WEB), False, True),
        (definition("web", UNANNOTATED), False, True),
        (definition("web", WEB), True, False),  # tether's own error text is not untrusted
        (definition("calc", SAFE), False, False),
        # an outside tool's claim of being closed-world is not believed
        (definition("mcp_read", SAFE, origin="mcp:x"), False, True),
    ],
)
def test_provenance_after_untrusted_output(
    source: ToolDefinition, synthetic: bool, tainted: bool
) -> None:
    writer = definition("write", WRITER)
    log = _tainted_log(source, writer, synthetic=synthetic)
    got = decide(RulePolicy(PERMISSIVE), writer, log=log)
    if tainted:
        assert (got.decision, got.rule) == ("needs_approval", "provenance")
        assert f"output of {source.name}" in got.reason
    else:
        assert got.decision == "allow"


def test_a_result_of_a_tool_the_agent_no_longer_has_is_untrusted() -> None:
    writer = definition("write", WRITER)
    log = Log("run-1", writer)
    log.result("gone")
    assert decide(RulePolicy(COARSE), writer, log=log).rule == "provenance"


def test_read_only_tools_are_unaffected_by_provenance() -> None:
    log = _tainted_log(definition("web", WEB), definition("calc", SAFE))
    assert decide(RulePolicy(), definition("calc", SAFE), log=log).rule == "default:safe"
    got = decide(RulePolicy(PERMISSIVE), definition("web", WEB), log=log)
    assert got.decision == "allow"


@pytest.mark.parametrize(
    ("provenance", "decision", "rule"),
    [
        (Provenance(mode="coarse"), "needs_approval", "provenance"),
        (Provenance(mode="coarse", allow=("kv_*",)), "allow", "default:safe"),
        (Provenance(mode="coarse", enabled=False), "allow", "default:safe"),
        (Provenance(mode="coarse", decision="deny"), "deny", "provenance"),
    ],
)
def test_provenance_settings(provenance: Provenance, decision: Decision, rule: str) -> None:
    kv = definition("kv_set", WRITER)
    log = _tainted_log(definition("web", WEB), kv)
    got = decide(RulePolicy(Rules(provenance=provenance)), kv, log=log)
    assert (got.decision, got.rule) == (decision, rule)


def test_provenance_overrides_an_allow_rule() -> None:
    kv = definition("kv_set", WRITER)
    log = _tainted_log(definition("web", WEB), kv)
    assert decide(RulePolicy(COARSE, allow("kv_set")), kv, log=log).rule == "provenance"


def test_provenance_never_loosens_a_denial() -> None:
    """An unannotated tool is denied; untrusted output must not turn that into a question."""
    tool = definition("mystery")
    log = _tainted_log(definition("web", WEB), tool)
    assert decide(RulePolicy(), tool, log=log).rule == "default:unannotated"
    destructive = definition("rm", DESTRUCTIVE)
    log.tools["rm"] = destructive
    assert decide(RulePolicy(), destructive, log=log).rule == "default:destructive"
    # with a softer default, provenance still applies
    soft = RulePolicy(COARSE + Rules(risk=RiskDefaults(destructive="allow")))
    assert decide(soft, destructive, log=log).rule == "provenance"


def test_taint_is_folded_incrementally() -> None:
    writer = definition("write", WRITER)
    log = Log("run-1", writer, definition("web", WEB))
    policy = RulePolicy(COARSE)
    assert decide(policy, writer, log=log).decision == "allow"
    log.result("web")
    assert decide(policy, writer, log=log).rule == "provenance"


# -- trust and outside annotations ---------------------------------------------------------------------


def test_outside_claims_of_safety_are_ignored() -> None:
    mcp = definition("mcp_read", SAFE, origin="mcp:x")
    assert effective_annotations(mcp) == OUTSIDE
    assert decide(RulePolicy(), mcp).rule == "default:unannotated"
    assert RulePolicy().annotations(mcp) == OUTSIDE
    local = definition("local_read", SAFE)
    assert effective_annotations(local) == SAFE


def test_a_trust_rule_sets_the_baseline() -> None:
    trust = Trust(tools=("mcp_*",), annotations=SAFE)
    policy = RulePolicy(Rules(trust=(trust,)))
    silent = definition("mcp_read", UNANNOTATED, origin="mcp:x")
    # outside silence is no claim; its output stays untrusted unless the trust says not
    assert policy.annotations(silent) == replace(SAFE, untrusted_output=True)
    assert decide(policy, silent).rule == "default:safe"
    claims_safe = definition("mcp_read", SAFE, origin="mcp:x")
    assert policy.annotations(claims_safe) == replace(SAFE, untrusted_output=True)
    vouched = RulePolicy(
        Rules(trust=(Trust(tools=("mcp_*",), annotations=replace(SAFE, untrusted_output=False)),))
    )
    assert not vouched.annotations(silent).is_untrusted_output


@pytest.mark.parametrize(
    ("claim", "rule"),
    [
        (ToolAnnotations(read_only=False), "default:destructive"),
        (ToolAnnotations(read_only=False, destructive=True), "default:destructive"),
        (ToolAnnotations(read_only=False, destructive=False), "default:destructive"),
        (ToolAnnotations(open_world=True), "default:open_world"),
        (ToolAnnotations(read_only=True, open_world=True), "default:open_world"),
        (ToolAnnotations(read_only=True, open_world=False), "default:safe"),
    ],
)
def test_outside_claims_of_danger_are_kept(claim: ToolAnnotations, rule: str) -> None:
    # the baseline says nothing of destructive: a claim of harmlessness cannot add it
    base = ToolAnnotations(read_only=True, open_world=False)
    policy = RulePolicy(Rules(trust=(Trust(tools=("mcp_*",), annotations=base),)))
    assert decide(policy, definition("mcp_x", claim, origin="mcp:x")).rule == rule


def test_trust_replaces_a_local_tools_own_annotations() -> None:
    policy = RulePolicy(Rules(trust=(Trust(tools=("calc",), annotations=DESTRUCTIVE),)))
    assert decide(policy, definition("calc", SAFE)).rule == "default:destructive"
    first = RulePolicy(
        Rules(
            trust=(
                Trust(tools=("calc",), annotations=SAFE),
                Trust(tools=("*",), annotations=DESTRUCTIVE),
            )
        )
    )
    assert decide(first, definition("calc")).rule == "default:safe"  # the first match
    assert decide(first, definition("other", SAFE)).rule == "default:destructive"


def test_annotations_are_cached_per_definition() -> None:
    policy = RulePolicy()
    one = definition("t", SAFE)
    assert policy.annotations(one) == SAFE
    other = definition("t", DESTRUCTIVE)  # same name, new definition
    assert policy.annotations(other) == DESTRUCTIVE
    assert decide(policy, other).rule == "default:destructive"


HINTS: list[bool | None] = [None, True, False]
ALL_ANNOTATIONS = [
    ToolAnnotations(read_only=r, destructive=d, idempotent=i, open_world=o)
    for r, d, i, o in itertools.product(HINTS, repeat=4)
]


def _never_safer(got: ToolAnnotations, base: ToolAnnotations) -> None:
    assert got.is_read_only <= base.is_read_only
    assert got.is_destructive >= base.is_destructive
    assert got.is_idempotent <= base.is_idempotent
    assert got.is_open_world >= base.is_open_world
    assert got.is_untrusted_output  # from outside: untrusted unless the developer vouches
    if base == UNANNOTATED:
        assert got == OUTSIDE  # still the worst case (the unannotated default applies)


@given(
    base=st.none() | st.sampled_from(ALL_ANNOTATIONS),
    outside=st.sampled_from(ALL_ANNOTATIONS),
    origin=st.sampled_from(["mcp:x", "http:api"]),
)
def test_outside_annotations_never_make_a_tool_safer_than_the_baseline(
    base: ToolAnnotations | None, outside: ToolAnnotations, origin: str
) -> None:
    tool = definition("t", outside, origin=origin)
    trust = [] if base is None else [(("t",), base)]
    got = effective_annotations(tool, trust)
    _never_safer(got, base if base is not None else UNANNOTATED)
    # and the decisions follow: never looser than for the baseline itself
    strictness = {"allow": 0, "needs_approval": 1, "deny": 2}
    policy = RulePolicy(
        Rules(trust=(Trust(tools=("t",), annotations=base),) if base is not None else ())
    )
    baseline_tool = definition("t", base or UNANNOTATED)
    assert (
        strictness[decide(policy, tool).decision]
        >= strictness[decide(RulePolicy(), baseline_tool).decision]
    )


def test_outside_annotations_only_tighten_exhaustively() -> None:
    for base, outside in itertools.product(ALL_ANNOTATIONS, repeat=2):
        got = effective_annotations(definition("t", outside, origin="mcp:x"), [(("t",), base)])
        _never_safer(got, base)
        if outside in (UNANNOTATED, base):
            # silence, or agreement, keeps the baseline
            assert got == replace(base, untrusted_output=True)


# -- results --------------------------------------------------------------------------------------


def check(policy: RulePolicy, result: ToolResult, tool: str = "t") -> ToolResult | None:
    log = Log("run-1", definition(tool, SAFE))
    call = ToolCall(id="c", name=tool, arguments={})
    return policy.check_result(call, definition(tool, SAFE), result, log.context)


def text(value: str) -> ToolResult:
    return ToolResult(content=(TextBlock(text=value),))


def test_results_under_the_cap_are_kept() -> None:
    policy = RulePolicy(Rules(sizes=Sizes(max_result_bytes=10)))
    assert check(policy, text("x" * 10)) is None
    assert check(RulePolicy(), text("x" * 1000)) is None
    assert (
        check(RulePolicy(Rules(sizes=Sizes(max_result_bytes=None))), text("x" * 10**6 * 2)) is None
    )


def test_large_results_are_truncated() -> None:
    policy = RulePolicy(Rules(sizes=Sizes(max_result_bytes=10)))
    got = check(policy, ToolResult(content=(TextBlock(text="abcdefgh"), TextBlock(text="ijklmn"))))
    assert got is not None
    assert not got.is_error
    texts = [b.text for b in got.content if isinstance(b, TextBlock)]
    assert texts[:2] == ["abcdefgh", "ij"]
    assert "the result was 14 bytes, the limit is 10" in texts[-1]
    assert len(texts) == 3


def test_truncation_counts_utf8_bytes_and_keeps_whole_characters() -> None:
    policy = RulePolicy(Rules(sizes=Sizes(max_result_bytes=5)))
    got = check(policy, text("\u00e9\u00e9\u00e9"))  # 6 bytes
    assert got is not None
    assert content_text(got.content).startswith("\u00e9\u00e9\n")
    assert check(policy, text("\u00e9\u00e9")) is None  # 4 bytes


def test_structured_content_counts_and_is_dropped_when_truncated() -> None:
    policy = RulePolicy(Rules(sizes=Sizes(max_result_bytes=20)))
    result = ToolResult(content=(TextBlock(text="short"),), structured={"data": "x" * 30})
    got = check(policy, result)
    assert got is not None
    assert got.structured is None
    assert content_text(got.content).startswith("short\n[truncated")


def test_resource_text_counts_and_images_are_kept() -> None:
    policy = RulePolicy(Rules(sizes=Sizes(max_result_bytes=10)))
    image = ImageBlock(data="aGk=", mime_type="image/png")
    resource = ResourceBlock(uri="file:///x", text="y" * 50)
    got = check(policy, ToolResult(content=(image, resource)))
    assert got is not None
    assert got.content[0] == image
    assert got.content[1] == replace(resource, text="y" * 10)


def test_large_results_as_errors() -> None:
    policy = RulePolicy(Rules(sizes=Sizes(max_result_bytes=10, large_results="error")))
    got = check(policy, text("x" * 11))
    assert got is not None
    assert got.is_error
    assert "was 11 bytes; the policy allows 10" in content_text(got.content)


@pytest.mark.parametrize(
    ("flt", "withheld", "shown"),
    [
        (ContentFilter(patterns=("sk-[a-z0-9]+",), on="results"), True, None),
        (ContentFilter(patterns=("sk-[a-z0-9]+",), on="both"), True, None),
        (ContentFilter(patterns=("sk-[a-z0-9]+",), on="arguments"), False, None),
        (ContentFilter(patterns=("nothing",), on="results"), False, None),
        (
            ContentFilter(patterns=("sk-[a-z0-9]+",), on="results", result_action="redact"),
            False,
            "key [FILTERED] here",
        ),
        (
            ContentFilter(
                patterns=("(?i)KEY", "sk-[a-z0-9]+"), on="results", result_action="redact"
            ),
            False,
            "[FILTERED] [FILTERED] here",
        ),
        (  # callables cannot point at a match: redact falls back to withholding
            ContentFilter(checks=(lambda t: "sk-" in t,), on="results", result_action="redact"),
            True,
            None,
        ),
        (ContentFilter(patterns=("sk-",), on="results", tools=("other",)), False, None),
    ],
)
def test_result_filters(flt: ContentFilter, withheld: bool, shown: str | None) -> None:
    got = check(RulePolicy(Rules(filters=(flt,))), text("key sk-abc123 here"))
    if withheld:
        assert got is not None
        assert got.is_error
        message = content_text(got.content)
        assert message.startswith("the result was withheld by the policy (content_filter)")
        assert "sk-abc123" not in message
    elif shown is not None:
        assert got is not None
        assert not got.is_error
        assert content_text(got.content) == shown
    else:
        assert got is None


def test_redaction_reaches_structured_content_and_resources() -> None:
    flt = ContentFilter(patterns=("secret",), on="results", result_action="redact")
    result = ToolResult(
        content=(TextBlock(text="ok"), ResourceBlock(uri="file:///a", text="a secret")),
        structured={"v": "secret"},
    )
    got = check(RulePolicy(Rules(filters=(flt,))), result)
    assert got is not None
    assert "secret" not in content_text(got.content)
    assert got.structured is None


def test_a_match_left_after_redaction_withholds_the_result() -> None:
    # the match spans two blocks: redacting each block cannot remove it
    flt = ContentFilter(patterns=(r"top\nsecret",), on="results", result_action="redact")
    result = ToolResult(content=(TextBlock(text="top"), TextBlock(text="secret")))
    got = check(RulePolicy(Rules(filters=(flt,))), result)
    assert got is not None
    assert got.is_error


def test_a_filter_runs_before_the_size_cap_and_a_block_stops() -> None:
    block = ContentFilter(patterns=("x",), on="results", reason="no x")
    policy = RulePolicy(Rules(filters=(block,), sizes=Sizes(max_result_bytes=5)))
    got = check(policy, text("x" * 100))
    assert got is not None
    assert (
        content_text(got.content) == "the result was withheld by the policy (content_filter): no x"
    )
    redact = ContentFilter(patterns=("x",), on="results", result_action="redact")
    got = check(
        RulePolicy(Rules(filters=(redact,), sizes=Sizes(max_result_bytes=20))), text("x" * 3)
    )
    assert got is not None  # redacted to 30 bytes, then cut to 20
    shown = content_text(got.content)
    assert shown.startswith("[FILTERED][FILTERED]\n[truncated by the policy: the result was 30")


def test_concurrency_caps() -> None:
    policy = RulePolicy(
        Rules(
            concurrency=(
                Concurrency(tools=("http_*",), max=4),
                Concurrency(tools=("http_get",), max=2),
            )
        )
    )
    assert policy.concurrency("http_get") == 2
    assert policy.concurrency("http_head") == 4
    assert policy.concurrency("calc") is None
    assert RulePolicy().concurrency("anything") is None
