"""Policy: the one gate between a model's tool call and its execution.

``RulePolicy`` (the default) evaluates ``Rules``: allow/deny/approval rules by tool name and
arguments, risk defaults by the tools' annotations, rate limits, concurrency caps, size caps,
content filters and the provenance rule. ``AllowAll`` turns the gate off.
"""

from importlib import import_module
from types import ModuleType

from tether.policy.approvals import Approval
from tether.policy.base import AllowAll, Policy, PolicyContext, PolicyDecision
from tether.policy.config import load_rules, rules_from_mapping
from tether.policy.gate import RulePolicy, effective_annotations
from tether.policy.redaction import Redactor
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

__all__ = [
    "AllowAll",
    "Approval",
    "ArgCondition",
    "Concurrency",
    "ContentFilter",
    "Policy",
    "PolicyContext",
    "PolicyDecision",
    "Provenance",
    "RateLimit",
    "Redactor",
    "RiskDefaults",
    "Rule",
    "RulePolicy",
    "Rules",
    "Sizes",
    "Trust",
    "allow",
    "deny",
    "effective_annotations",
    "load_rules",
    "require_approval",
    "rules_from_mapping",
]


def __getattr__(name: str) -> ModuleType:
    if name == "dataflow":  # loaded by a run's first decision: ``tether.policy.dataflow`` works
        return import_module(f"{__name__}.dataflow")
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
