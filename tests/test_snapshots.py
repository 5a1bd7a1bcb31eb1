"""Whole event logs of representative runs, as inline snapshots.

Only what differs by nature between runs is left out (ids, times, hashes); everything the
loop decided is in the snapshot. Update with ``pytest --inline-snapshot=fix`` after an
intended change, and read the diff.
"""

from __future__ import annotations

import asyncio

from inline_snapshot import snapshot

from tether import Agent, Limits, tool
from tether.codec import event_to_dict
from tether.content import JsonValue
from tether.events import Event
from tether.testing import FakeClock, ScriptedModel, call, finish

from .support import add, explode, lookup

HIDDEN = {
    "run_id",
    "at",
    "hash",
    "prev_hash",
    "request_digest",
    "spec_digest",
    "instructions",
    "output_schema",
}


def log(events: tuple[Event, ...]) -> list[dict[str, JsonValue]]:
    return [{k: v for k, v in event_to_dict(e).items() if k not in HIDDEN} for e in events]


async def run(model: ScriptedModel, limits: Limits | None = None) -> tuple[Event, ...]:
    agent = Agent(name="snap", tools=[add, lookup, explode], limits=limits or Limits(max_steps=5))
    return (await agent.run("goal", model=model, run_id="run", clock=FakeClock())).events


async def test_two_tools() -> None:
    events = await run(
        ScriptedModel(
            [call("add", a=1, b=2), call("lookup", key="agent"), finish("3, one who acts")]
        )
    )
    assert log(events) == snapshot(
        [
            {
                "kind": "run_started",
                "seq": 0,
                "goal": "goal",
                "agent": "snap",
                "agent_ref": None,
                "model": "scripted",
                "tools": ["add", "lookup", "explode", "finish_task"],
                "limits": {
                    "max_steps": 5,
                    "max_tool_calls": 50,
                    "max_seconds": 600.0,
                    "tool_timeout": 120.0,
                    "max_tokens": None,
                    "max_cost": None,
                    "max_parallel_tools": 4,
                    "max_retries": 3,
                    "answer_max_tokens": 1024,
                },
                "parent_run_id": None,
                "tags": [],
                "context": None,
                "prompt": None,
                "thinking": None,
                "model_choice": None,
            },
            {
                "kind": "model_responded",
                "seq": 1,
                "step": 1,
                "model": "scripted",
                "text": "",
                "reasoning": None,
                "tool_calls": [
                    {
                        "id": "call_0_0",
                        "name": "add",
                        "arguments": {"a": 1, "b": 2},
                        "parse_error": None,
                    }
                ],
                "usage": {"input_tokens": 0, "output_tokens": 0, "requests": 0, "cost": None},
                "latency_s": 0.0,
                "final": False,
                "purpose": None,
                "cut_off": None,
            },
            {
                "kind": "tool_call_requested",
                "seq": 2,
                "call_id": "call_0_0",
                "tool": "add",
                "arguments": {"a": 1, "b": 2},
                "reason": None,
            },
            {
                "kind": "policy_decided",
                "seq": 3,
                "call_id": "call_0_0",
                "tool": "add",
                "decision": "allow",
                "rule": "default:safe",
                "reason": "read-only or declared harmless, and closed-world: allowed by default",
            },
            {
                "kind": "tool_call_finished",
                "seq": 4,
                "call_id": "call_0_0",
                "tool": "add",
                "content": [{"kind": "text", "text": "3"}],
                "structured": 3,
                "is_error": False,
                "error_type": None,
                "duration_s": 0.0,
                "synthetic": False,
                "untrusted": None,
            },
            {
                "kind": "model_responded",
                "seq": 5,
                "step": 2,
                "model": "scripted",
                "text": "",
                "reasoning": None,
                "tool_calls": [
                    {
                        "id": "call_1_0",
                        "name": "lookup",
                        "arguments": {"key": "agent"},
                        "parse_error": None,
                    }
                ],
                "usage": {"input_tokens": 0, "output_tokens": 0, "requests": 0, "cost": None},
                "latency_s": 0.0,
                "final": False,
                "purpose": None,
                "cut_off": None,
            },
            {
                "kind": "tool_call_requested",
                "seq": 6,
                "call_id": "call_1_0",
                "tool": "lookup",
                "arguments": {"key": "agent"},
                "reason": None,
            },
            {
                "kind": "policy_decided",
                "seq": 7,
                "call_id": "call_1_0",
                "tool": "lookup",
                "decision": "allow",
                "rule": "default:safe",
                "reason": "read-only or declared harmless, and closed-world: allowed by default",
            },
            {
                "kind": "tool_call_finished",
                "seq": 8,
                "call_id": "call_1_0",
                "tool": "lookup",
                "content": [{"kind": "text", "text": "one who acts"}],
                "structured": None,
                "is_error": False,
                "error_type": None,
                "duration_s": 0.0,
                "synthetic": False,
                "untrusted": None,
            },
            {
                "kind": "model_responded",
                "seq": 9,
                "step": 3,
                "model": "scripted",
                "text": "",
                "reasoning": None,
                "tool_calls": [
                    {
                        "id": "call_2_0",
                        "name": "finish_task",
                        "arguments": {"answer": "3, one who acts"},
                        "parse_error": None,
                    }
                ],
                "usage": {"input_tokens": 0, "output_tokens": 0, "requests": 0, "cost": None},
                "latency_s": 0.0,
                "final": False,
                "purpose": None,
                "cut_off": None,
            },
            {
                "kind": "tool_call_requested",
                "seq": 10,
                "call_id": "call_2_0",
                "tool": "finish_task",
                "arguments": {"answer": "3, one who acts"},
                "reason": None,
            },
            {
                "kind": "policy_decided",
                "seq": 11,
                "call_id": "call_2_0",
                "tool": "finish_task",
                "decision": "allow",
                "rule": "control_tool",
                "reason": "tether's own control tool",
            },
            {
                "kind": "tool_call_finished",
                "seq": 12,
                "call_id": "call_2_0",
                "tool": "finish_task",
                "content": [{"kind": "text", "text": "done"}],
                "structured": None,
                "is_error": False,
                "error_type": None,
                "duration_s": 0.0,
                "synthetic": False,
                "untrusted": None,
            },
            {
                "kind": "run_finished",
                "seq": 13,
                "status": "finished",
                "output": "3, one who acts",
                "answer": "3, one who acts",
                "error": None,
                "limit": None,
                "question": None,
                "usage": {"input_tokens": 0, "output_tokens": 0, "requests": 3, "cost": None},
                "steps": 3,
                "tool_calls": 2,
            },
        ]
    )


async def test_validation_retry() -> None:
    events = await run(
        ScriptedModel([call("add", a=1, b="two"), call("add", a=1, b=2), finish("3")])
    )
    assert log(events) == snapshot(
        [
            {
                "kind": "run_started",
                "seq": 0,
                "goal": "goal",
                "agent": "snap",
                "agent_ref": None,
                "model": "scripted",
                "tools": ["add", "lookup", "explode", "finish_task"],
                "limits": {
                    "max_steps": 5,
                    "max_tool_calls": 50,
                    "max_seconds": 600.0,
                    "tool_timeout": 120.0,
                    "max_tokens": None,
                    "max_cost": None,
                    "max_parallel_tools": 4,
                    "max_retries": 3,
                    "answer_max_tokens": 1024,
                },
                "parent_run_id": None,
                "tags": [],
                "context": None,
                "prompt": None,
                "thinking": None,
                "model_choice": None,
            },
            {
                "kind": "model_responded",
                "seq": 1,
                "step": 1,
                "model": "scripted",
                "text": "",
                "reasoning": None,
                "tool_calls": [
                    {
                        "id": "call_0_0",
                        "name": "add",
                        "arguments": {"a": 1, "b": "two"},
                        "parse_error": None,
                    }
                ],
                "usage": {"input_tokens": 0, "output_tokens": 0, "requests": 0, "cost": None},
                "latency_s": 0.0,
                "final": False,
                "purpose": None,
                "cut_off": None,
            },
            {
                "kind": "tool_call_requested",
                "seq": 2,
                "call_id": "call_0_0",
                "tool": "add",
                "arguments": {"a": 1, "b": "two"},
                "reason": None,
            },
            {
                "kind": "tool_call_finished",
                "seq": 3,
                "call_id": "call_0_0",
                "tool": "add",
                "content": [
                    {
                        "kind": "text",
                        "text": "invalid arguments: b: Input should be a valid integer, unable to parse string as an integer",
                    }
                ],
                "structured": None,
                "is_error": True,
                "error_type": "invalid_arguments",
                "duration_s": 0.0,
                "synthetic": True,
                "untrusted": None,
            },
            {
                "kind": "model_responded",
                "seq": 4,
                "step": 2,
                "model": "scripted",
                "text": "",
                "reasoning": None,
                "tool_calls": [
                    {
                        "id": "call_1_0",
                        "name": "add",
                        "arguments": {"a": 1, "b": 2},
                        "parse_error": None,
                    }
                ],
                "usage": {"input_tokens": 0, "output_tokens": 0, "requests": 0, "cost": None},
                "latency_s": 0.0,
                "final": False,
                "purpose": None,
                "cut_off": None,
            },
            {
                "kind": "tool_call_requested",
                "seq": 5,
                "call_id": "call_1_0",
                "tool": "add",
                "arguments": {"a": 1, "b": 2},
                "reason": None,
            },
            {
                "kind": "policy_decided",
                "seq": 6,
                "call_id": "call_1_0",
                "tool": "add",
                "decision": "allow",
                "rule": "default:safe",
                "reason": "read-only or declared harmless, and closed-world: allowed by default",
            },
            {
                "kind": "tool_call_finished",
                "seq": 7,
                "call_id": "call_1_0",
                "tool": "add",
                "content": [{"kind": "text", "text": "3"}],
                "structured": 3,
                "is_error": False,
                "error_type": None,
                "duration_s": 0.0,
                "synthetic": False,
                "untrusted": None,
            },
            {
                "kind": "model_responded",
                "seq": 8,
                "step": 3,
                "model": "scripted",
                "text": "",
                "reasoning": None,
                "tool_calls": [
                    {
                        "id": "call_2_0",
                        "name": "finish_task",
                        "arguments": {"answer": "3"},
                        "parse_error": None,
                    }
                ],
                "usage": {"input_tokens": 0, "output_tokens": 0, "requests": 0, "cost": None},
                "latency_s": 0.0,
                "final": False,
                "purpose": None,
                "cut_off": None,
            },
            {
                "kind": "tool_call_requested",
                "seq": 9,
                "call_id": "call_2_0",
                "tool": "finish_task",
                "arguments": {"answer": "3"},
                "reason": None,
            },
            {
                "kind": "policy_decided",
                "seq": 10,
                "call_id": "call_2_0",
                "tool": "finish_task",
                "decision": "allow",
                "rule": "control_tool",
                "reason": "tether's own control tool",
            },
            {
                "kind": "tool_call_finished",
                "seq": 11,
                "call_id": "call_2_0",
                "tool": "finish_task",
                "content": [{"kind": "text", "text": "done"}],
                "structured": None,
                "is_error": False,
                "error_type": None,
                "duration_s": 0.0,
                "synthetic": False,
                "untrusted": None,
            },
            {
                "kind": "run_finished",
                "seq": 12,
                "status": "finished",
                "output": "3",
                "answer": "3",
                "error": None,
                "limit": None,
                "question": None,
                "usage": {"input_tokens": 0, "output_tokens": 0, "requests": 3, "cost": None},
                "steps": 3,
                "tool_calls": 1,
            },
        ]
    )


async def test_failing_tool() -> None:
    events = await run(ScriptedModel([call("explode", reason="disk full"), finish("could not")]))
    assert log(events) == snapshot(
        [
            {
                "kind": "run_started",
                "seq": 0,
                "goal": "goal",
                "agent": "snap",
                "agent_ref": None,
                "model": "scripted",
                "tools": ["add", "lookup", "explode", "finish_task"],
                "limits": {
                    "max_steps": 5,
                    "max_tool_calls": 50,
                    "max_seconds": 600.0,
                    "tool_timeout": 120.0,
                    "max_tokens": None,
                    "max_cost": None,
                    "max_parallel_tools": 4,
                    "max_retries": 3,
                    "answer_max_tokens": 1024,
                },
                "parent_run_id": None,
                "tags": [],
                "context": None,
                "prompt": None,
                "thinking": None,
                "model_choice": None,
            },
            {
                "kind": "model_responded",
                "seq": 1,
                "step": 1,
                "model": "scripted",
                "text": "",
                "reasoning": None,
                "tool_calls": [
                    {
                        "id": "call_0_0",
                        "name": "explode",
                        "arguments": {"reason": "disk full"},
                        "parse_error": None,
                    }
                ],
                "usage": {"input_tokens": 0, "output_tokens": 0, "requests": 0, "cost": None},
                "latency_s": 0.0,
                "final": False,
                "purpose": None,
                "cut_off": None,
            },
            {
                "kind": "tool_call_requested",
                "seq": 2,
                "call_id": "call_0_0",
                "tool": "explode",
                "arguments": {"reason": "disk full"},
                "reason": None,
            },
            {
                "kind": "policy_decided",
                "seq": 3,
                "call_id": "call_0_0",
                "tool": "explode",
                "decision": "allow",
                "rule": "default:safe",
                "reason": "read-only or declared harmless, and closed-world: allowed by default",
            },
            {
                "kind": "tool_call_finished",
                "seq": 4,
                "call_id": "call_0_0",
                "tool": "explode",
                "content": [{"kind": "text", "text": "explode failed: RuntimeError: disk full"}],
                "structured": None,
                "is_error": True,
                "error_type": "exception",
                "duration_s": 0.0,
                "synthetic": False,
                "untrusted": None,
            },
            {
                "kind": "model_responded",
                "seq": 5,
                "step": 2,
                "model": "scripted",
                "text": "",
                "reasoning": None,
                "tool_calls": [
                    {
                        "id": "call_1_0",
                        "name": "finish_task",
                        "arguments": {"answer": "could not"},
                        "parse_error": None,
                    }
                ],
                "usage": {"input_tokens": 0, "output_tokens": 0, "requests": 0, "cost": None},
                "latency_s": 0.0,
                "final": False,
                "purpose": None,
                "cut_off": None,
            },
            {
                "kind": "tool_call_requested",
                "seq": 6,
                "call_id": "call_1_0",
                "tool": "finish_task",
                "arguments": {"answer": "could not"},
                "reason": None,
            },
            {
                "kind": "policy_decided",
                "seq": 7,
                "call_id": "call_1_0",
                "tool": "finish_task",
                "decision": "allow",
                "rule": "control_tool",
                "reason": "tether's own control tool",
            },
            {
                "kind": "tool_call_finished",
                "seq": 8,
                "call_id": "call_1_0",
                "tool": "finish_task",
                "content": [{"kind": "text", "text": "done"}],
                "structured": None,
                "is_error": False,
                "error_type": None,
                "duration_s": 0.0,
                "synthetic": False,
                "untrusted": None,
            },
            {
                "kind": "run_finished",
                "seq": 9,
                "status": "finished",
                "output": "could not",
                "answer": "could not",
                "error": None,
                "limit": None,
                "question": None,
                "usage": {"input_tokens": 0, "output_tokens": 0, "requests": 2, "cost": None},
                "steps": 2,
                "tool_calls": 1,
            },
        ]
    )


async def test_parallel_calls() -> None:
    events = await run(
        ScriptedModel(
            [
                [call("add", a=1, b=1), call("lookup", key="tether"), call("add", a=2, b=2)],
                finish("ok"),
            ]
        )
    )
    assert log(events) == snapshot(
        [
            {
                "kind": "run_started",
                "seq": 0,
                "goal": "goal",
                "agent": "snap",
                "agent_ref": None,
                "model": "scripted",
                "tools": ["add", "lookup", "explode", "finish_task"],
                "limits": {
                    "max_steps": 5,
                    "max_tool_calls": 50,
                    "max_seconds": 600.0,
                    "tool_timeout": 120.0,
                    "max_tokens": None,
                    "max_cost": None,
                    "max_parallel_tools": 4,
                    "max_retries": 3,
                    "answer_max_tokens": 1024,
                },
                "parent_run_id": None,
                "tags": [],
                "context": None,
                "prompt": None,
                "thinking": None,
                "model_choice": None,
            },
            {
                "kind": "model_responded",
                "seq": 1,
                "step": 1,
                "model": "scripted",
                "text": "",
                "reasoning": None,
                "tool_calls": [
                    {
                        "id": "call_0_0",
                        "name": "add",
                        "arguments": {"a": 1, "b": 1},
                        "parse_error": None,
                    },
                    {
                        "id": "call_0_1",
                        "name": "lookup",
                        "arguments": {"key": "tether"},
                        "parse_error": None,
                    },
                    {
                        "id": "call_0_2",
                        "name": "add",
                        "arguments": {"a": 2, "b": 2},
                        "parse_error": None,
                    },
                ],
                "usage": {"input_tokens": 0, "output_tokens": 0, "requests": 0, "cost": None},
                "latency_s": 0.0,
                "final": False,
                "purpose": None,
                "cut_off": None,
            },
            {
                "kind": "tool_call_requested",
                "seq": 2,
                "call_id": "call_0_0",
                "tool": "add",
                "arguments": {"a": 1, "b": 1},
                "reason": None,
            },
            {
                "kind": "tool_call_requested",
                "seq": 3,
                "call_id": "call_0_1",
                "tool": "lookup",
                "arguments": {"key": "tether"},
                "reason": None,
            },
            {
                "kind": "tool_call_requested",
                "seq": 4,
                "call_id": "call_0_2",
                "tool": "add",
                "arguments": {"a": 2, "b": 2},
                "reason": None,
            },
            {
                "kind": "policy_decided",
                "seq": 5,
                "call_id": "call_0_0",
                "tool": "add",
                "decision": "allow",
                "rule": "default:safe",
                "reason": "read-only or declared harmless, and closed-world: allowed by default",
            },
            {
                "kind": "policy_decided",
                "seq": 6,
                "call_id": "call_0_1",
                "tool": "lookup",
                "decision": "allow",
                "rule": "default:safe",
                "reason": "read-only or declared harmless, and closed-world: allowed by default",
            },
            {
                "kind": "policy_decided",
                "seq": 7,
                "call_id": "call_0_2",
                "tool": "add",
                "decision": "allow",
                "rule": "default:safe",
                "reason": "read-only or declared harmless, and closed-world: allowed by default",
            },
            {
                "kind": "tool_call_finished",
                "seq": 8,
                "call_id": "call_0_0",
                "tool": "add",
                "content": [{"kind": "text", "text": "2"}],
                "structured": 2,
                "is_error": False,
                "error_type": None,
                "duration_s": 0.0,
                "synthetic": False,
                "untrusted": None,
            },
            {
                "kind": "tool_call_finished",
                "seq": 9,
                "call_id": "call_0_1",
                "tool": "lookup",
                "content": [{"kind": "text", "text": "a rope that limits movement"}],
                "structured": None,
                "is_error": False,
                "error_type": None,
                "duration_s": 0.0,
                "synthetic": False,
                "untrusted": None,
            },
            {
                "kind": "tool_call_finished",
                "seq": 10,
                "call_id": "call_0_2",
                "tool": "add",
                "content": [{"kind": "text", "text": "4"}],
                "structured": 4,
                "is_error": False,
                "error_type": None,
                "duration_s": 0.0,
                "synthetic": False,
                "untrusted": None,
            },
            {
                "kind": "model_responded",
                "seq": 11,
                "step": 2,
                "model": "scripted",
                "text": "",
                "reasoning": None,
                "tool_calls": [
                    {
                        "id": "call_1_0",
                        "name": "finish_task",
                        "arguments": {"answer": "ok"},
                        "parse_error": None,
                    }
                ],
                "usage": {"input_tokens": 0, "output_tokens": 0, "requests": 0, "cost": None},
                "latency_s": 0.0,
                "final": False,
                "purpose": None,
                "cut_off": None,
            },
            {
                "kind": "tool_call_requested",
                "seq": 12,
                "call_id": "call_1_0",
                "tool": "finish_task",
                "arguments": {"answer": "ok"},
                "reason": None,
            },
            {
                "kind": "policy_decided",
                "seq": 13,
                "call_id": "call_1_0",
                "tool": "finish_task",
                "decision": "allow",
                "rule": "control_tool",
                "reason": "tether's own control tool",
            },
            {
                "kind": "tool_call_finished",
                "seq": 14,
                "call_id": "call_1_0",
                "tool": "finish_task",
                "content": [{"kind": "text", "text": "done"}],
                "structured": None,
                "is_error": False,
                "error_type": None,
                "duration_s": 0.0,
                "synthetic": False,
                "untrusted": None,
            },
            {
                "kind": "run_finished",
                "seq": 15,
                "status": "finished",
                "output": "ok",
                "answer": "ok",
                "error": None,
                "limit": None,
                "question": None,
                "usage": {"input_tokens": 0, "output_tokens": 0, "requests": 2, "cost": None},
                "steps": 2,
                "tool_calls": 3,
            },
        ]
    )


async def test_budget_exhaustion() -> None:
    events = await run(
        ScriptedModel([call("add", a=1, b=1), call("add", a=2, b=2), "Best effort: 2, 4."]),
        Limits(max_steps=2),
    )
    assert log(events) == snapshot(
        [
            {
                "kind": "run_started",
                "seq": 0,
                "goal": "goal",
                "agent": "snap",
                "agent_ref": None,
                "model": "scripted",
                "tools": ["add", "lookup", "explode", "finish_task"],
                "limits": {
                    "max_steps": 2,
                    "max_tool_calls": 50,
                    "max_seconds": 600.0,
                    "tool_timeout": 120.0,
                    "max_tokens": None,
                    "max_cost": None,
                    "max_parallel_tools": 4,
                    "max_retries": 3,
                    "answer_max_tokens": 1024,
                },
                "parent_run_id": None,
                "tags": [],
                "context": None,
                "prompt": None,
                "thinking": None,
                "model_choice": None,
            },
            {
                "kind": "model_responded",
                "seq": 1,
                "step": 1,
                "model": "scripted",
                "text": "",
                "reasoning": None,
                "tool_calls": [
                    {
                        "id": "call_0_0",
                        "name": "add",
                        "arguments": {"a": 1, "b": 1},
                        "parse_error": None,
                    }
                ],
                "usage": {"input_tokens": 0, "output_tokens": 0, "requests": 0, "cost": None},
                "latency_s": 0.0,
                "final": False,
                "purpose": None,
                "cut_off": None,
            },
            {
                "kind": "tool_call_requested",
                "seq": 2,
                "call_id": "call_0_0",
                "tool": "add",
                "arguments": {"a": 1, "b": 1},
                "reason": None,
            },
            {
                "kind": "policy_decided",
                "seq": 3,
                "call_id": "call_0_0",
                "tool": "add",
                "decision": "allow",
                "rule": "default:safe",
                "reason": "read-only or declared harmless, and closed-world: allowed by default",
            },
            {
                "kind": "tool_call_finished",
                "seq": 4,
                "call_id": "call_0_0",
                "tool": "add",
                "content": [{"kind": "text", "text": "2"}],
                "structured": 2,
                "is_error": False,
                "error_type": None,
                "duration_s": 0.0,
                "synthetic": False,
                "untrusted": None,
            },
            {"kind": "budget_warning", "seq": 5, "limit": "max_steps", "used": 1.0, "maximum": 2.0},
            {
                "kind": "model_responded",
                "seq": 6,
                "step": 2,
                "model": "scripted",
                "text": "",
                "reasoning": None,
                "tool_calls": [
                    {
                        "id": "call_1_0",
                        "name": "add",
                        "arguments": {"a": 2, "b": 2},
                        "parse_error": None,
                    }
                ],
                "usage": {"input_tokens": 0, "output_tokens": 0, "requests": 0, "cost": None},
                "latency_s": 0.0,
                "final": False,
                "purpose": None,
                "cut_off": None,
            },
            {
                "kind": "tool_call_requested",
                "seq": 7,
                "call_id": "call_1_0",
                "tool": "add",
                "arguments": {"a": 2, "b": 2},
                "reason": None,
            },
            {
                "kind": "policy_decided",
                "seq": 8,
                "call_id": "call_1_0",
                "tool": "add",
                "decision": "allow",
                "rule": "default:safe",
                "reason": "read-only or declared harmless, and closed-world: allowed by default",
            },
            {
                "kind": "tool_call_finished",
                "seq": 9,
                "call_id": "call_1_0",
                "tool": "add",
                "content": [{"kind": "text", "text": "4"}],
                "structured": 4,
                "is_error": False,
                "error_type": None,
                "duration_s": 0.0,
                "synthetic": False,
                "untrusted": None,
            },
            {
                "kind": "limit_reached",
                "seq": 10,
                "limit": "max_steps",
                "used": 2.0,
                "maximum": 2.0,
                "ask_for_answer": True,
            },
            {
                "kind": "model_responded",
                "seq": 11,
                "step": 2,
                "model": "scripted",
                "text": "Best effort: 2, 4.",
                "reasoning": None,
                "tool_calls": [],
                "usage": {"input_tokens": 0, "output_tokens": 0, "requests": 0, "cost": None},
                "latency_s": 0.0,
                "final": True,
                "purpose": None,
                "cut_off": None,
            },
            {
                "kind": "run_finished",
                "seq": 12,
                "status": "budget_exhausted",
                "output": None,
                "answer": "Best effort: 2, 4.",
                "error": None,
                "limit": "max_steps",
                "question": None,
                "usage": {"input_tokens": 0, "output_tokens": 0, "requests": 3, "cost": None},
                "steps": 2,
                "tool_calls": 2,
            },
        ]
    )


async def test_cancellation() -> None:
    started = asyncio.Event()

    @tool(read_only=True, open_world=False)
    async def wait() -> str:
        """Blocks until cancelled."""
        started.set()
        await asyncio.Event().wait()
        return "never"

    agent = Agent(name="snap", tools=[wait])
    stream = agent.stream(
        "goal", model=ScriptedModel([call("wait")]), run_id="run", clock=FakeClock()
    )

    async def consume() -> None:
        async for _ in stream:
            pass

    consumer = asyncio.ensure_future(consume())
    await started.wait()
    stream.cancel("stop requested")
    await consumer
    assert log(stream.outcome.events) == snapshot(
        [
            {
                "kind": "run_started",
                "seq": 0,
                "goal": "goal",
                "agent": "snap",
                "agent_ref": None,
                "model": "scripted",
                "tools": ["wait", "finish_task"],
                "limits": {
                    "max_steps": 25,
                    "max_tool_calls": 50,
                    "max_seconds": 600.0,
                    "tool_timeout": 120.0,
                    "max_tokens": None,
                    "max_cost": None,
                    "max_parallel_tools": 4,
                    "max_retries": 3,
                    "answer_max_tokens": 1024,
                },
                "parent_run_id": None,
                "tags": [],
                "context": None,
                "prompt": None,
                "thinking": None,
                "model_choice": None,
            },
            {
                "kind": "model_responded",
                "seq": 1,
                "step": 1,
                "model": "scripted",
                "text": "",
                "reasoning": None,
                "tool_calls": [
                    {"id": "call_0_0", "name": "wait", "arguments": {}, "parse_error": None}
                ],
                "usage": {"input_tokens": 0, "output_tokens": 0, "requests": 0, "cost": None},
                "latency_s": 0.0,
                "final": False,
                "purpose": None,
                "cut_off": None,
            },
            {
                "kind": "tool_call_requested",
                "seq": 2,
                "call_id": "call_0_0",
                "tool": "wait",
                "arguments": {},
                "reason": None,
            },
            {
                "kind": "policy_decided",
                "seq": 3,
                "call_id": "call_0_0",
                "tool": "wait",
                "decision": "allow",
                "rule": "default:safe",
                "reason": "read-only or declared harmless, and closed-world: allowed by default",
            },
            {
                "kind": "tool_call_finished",
                "seq": 4,
                "call_id": "call_0_0",
                "tool": "wait",
                "content": [
                    {
                        "kind": "text",
                        "text": "interrupted: stop requested while the tool was running; it may have had partial effects",
                    }
                ],
                "structured": None,
                "is_error": True,
                "error_type": "cancelled",
                "duration_s": 0.0,
                "synthetic": True,
                "untrusted": None,
            },
            {
                "kind": "run_finished",
                "seq": 5,
                "status": "cancelled",
                "output": None,
                "answer": None,
                "error": {"type": "Cancelled", "message": "stop requested"},
                "limit": None,
                "question": None,
                "usage": {"input_tokens": 0, "output_tokens": 0, "requests": 1, "cost": None},
                "steps": 1,
                "tool_calls": 1,
            },
        ]
    )
