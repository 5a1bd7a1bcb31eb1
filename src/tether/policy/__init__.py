"""Policy: the one gate between a model's tool call and its execution."""

from tether.policy.base import AllowAll, Policy, PolicyDecision

__all__ = ["AllowAll", "Policy", "PolicyDecision"]
