"""An agent module that a stored run's log names: its factory records each call."""

from __future__ import annotations

from dataclasses import replace

from tether import Agent, RulePolicy, require_approval
from tether.examples.demo import assistant

calls: list[str] = []
"""One entry per call of ``make_agent``."""


def _gated() -> Agent[str]:
    policy = RulePolicy(None, require_approval("calculate", reason="check the sum"))
    return replace(assistant(), policy=policy)


def make_agent() -> Agent[str]:
    """The demo assistant, its calculations held for approval; the call is recorded."""
    calls.append("make_agent")
    return _gated()


AGENT = _gated()
"""The same agent, made when the module is imported."""
