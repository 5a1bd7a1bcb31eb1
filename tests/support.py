"""Tools and checks shared by the loop tests."""

from __future__ import annotations

import dataclasses
import importlib.util
import socket
import sys
import time
from collections import Counter
from collections.abc import Callable, Sequence
from pathlib import Path
from types import ModuleType
from typing import cast

from tether import Event, ModelRetry, tool
from tether.codec import compute_hash, seal
from tether.content import TextBlock
from tether.events import (
    GENESIS_HASH,
    ApprovalGiven,
    ModelResponded,
    PolicyDecided,
    RunFinished,
    ToolCallFinished,
    ToolCallRequested,
    ToolCallUnknown,
)
from tether.messages import CONTROL_TOOLS
from tether.stores import MemoryStore, RunStore, SqliteStore


@tool(read_only=True, idempotent=True, open_world=False, blocking=False)
def add(a: int, b: int) -> int:
    """Add two integers.

    Args:
        a: The first number.
        b: The second number.
    """
    return a + b


@tool(read_only=True, open_world=False)
async def lookup(key: str) -> str:
    """Look a word up in a tiny dictionary.

    Args:
        key: The word.
    """
    table = {"tether": "a rope that limits movement", "agent": "one who acts"}
    if key not in table:
        raise ModelRetry(f"unknown key {key!r}; known: {sorted(table)}")
    return table[key]


@tool(read_only=True, open_world=False)
async def explode(reason: str) -> str:
    """Always fails.

    Args:
        reason: What to say.
    """
    raise RuntimeError(reason)


def long_line(size: int) -> bytes:
    """A JSONL line of ``size`` bytes (its newline not counted) that begins like an event."""
    start = b'{"kind":"run_started","goal":"'
    return start + b"x" * (size - len(start) - 2) + b'"}'


def assert_protocol_valid(events: Sequence[Event]) -> None:  # noqa: C901 - one rule per kind
    """Every call the model made has exactly one result; executed calls were decided first."""
    called: list[str] = []
    results: Counter[str] = Counter()
    requested: set[str] = set()
    allowed: set[str] = set()
    for event in events:
        match event:
            case ModelResponded():
                if event.purpose is None:  # a thinking stage's calls are not the run's
                    called.extend(c.id for c in event.tool_calls)
            case ToolCallRequested():
                assert event.call_id in called, f"intent for unknown call {event.call_id}"
                requested.add(event.call_id)
            case PolicyDecided():
                assert event.call_id in requested, f"decision before intent for {event.call_id}"
                if event.decision == "allow":
                    allowed.add(event.call_id)
            case ApprovalGiven():
                if event.approved and event.arguments is None:
                    allowed.add(event.call_id)  # a human's approval is the allow
            case ToolCallFinished() | ToolCallUnknown():
                results[event.call_id] += 1
                if isinstance(event, ToolCallFinished) and not event.synthetic:
                    assert event.call_id in allowed, (
                        f"{event.call_id} ran without an allow decision"
                    )
            case _:
                pass
    last = events[-1]
    assert isinstance(last, RunFinished)
    waiting = last.status in ("waiting_for_approval", "waiting_for_user")
    for call_id in called:
        if waiting and results[call_id] == 0:
            continue
        assert results[call_id] == 1, f"call {call_id} has {results[call_id]} results"
    assert sum(results.values()) == sum(results[c] for c in called), (
        "a result for a call never made"
    )


def executed_tool_calls(events: Sequence[Event]) -> int:
    """Calls that the policy allowed to run (control tools excluded)."""
    return sum(
        1
        for e in events
        if isinstance(e, PolicyDecided) and e.decision == "allow" and e.tool not in CONTROL_TOOLS
    )


def reseal(events: Sequence[Event]) -> list[Event]:
    """Recompute every hash and prev_hash link so the chain is valid again (a forger's edit)."""
    sealed: list[Event] = []
    prev = GENESIS_HASH
    for event in events:
        linked = dataclasses.replace(event, prev_hash=prev, hash="")
        fixed = dataclasses.replace(linked, hash=compute_hash(linked))
        sealed.append(fixed)
        prev = fixed.hash
    return sealed


def open_store(kind: str, path: Path) -> RunStore:
    """A fresh store of backend ``kind`` (SQLite files live at ``path``)."""
    if kind == "memory":
        return MemoryStore()
    if kind == "sqlite":
        return SqliteStore(path)
    raise AssertionError(f"unknown backend {kind!r}")


def resealed_edit(events: Sequence[Event], tool_: str, text: str) -> tuple[list[Event], int]:
    """``tool_``'s first result changed to ``text``, then every hash made valid again with
    ``codec.seal``: the forgery an unkeyed chain cannot tell from the real log."""
    index = next(
        i for i, e in enumerate(events) if isinstance(e, ToolCallFinished) and e.tool == tool_
    )
    edited = list(events)
    edited[index] = dataclasses.replace(
        cast(ToolCallFinished, edited[index]), content=(TextBlock(text=text),)
    )
    sealed: list[Event] = []
    prev = GENESIS_HASH
    for event in edited:
        fixed = seal(dataclasses.replace(event, prev_hash=prev, hash=""))
        sealed.append(fixed)
        prev = fixed.hash
    return sealed, index


SENT: list[str] = []
"""The accounts ``send_money`` paid, in order (clear it first)."""


@tool(destructive=True, open_world=False)
def send_money(iban: str) -> str:
    """Sends money.

    Args:
        iban: The recipient's account.
    """
    SENT.append(iban)
    return "sent"


def free_port() -> int:
    """A loopback port nothing listens on now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_listening(port: int, alive: Callable[[], bool], *, seconds: float = 60) -> None:
    """Wait until something listens on the loopback ``port``, while ``alive()`` holds."""
    deadline = time.monotonic() + seconds
    while True:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1):
                return
        except OSError:
            assert alive(), f"the process meant to listen on {port} has ended"
            assert time.monotonic() < deadline, f"nothing listens on {port} after {seconds} s"
            time.sleep(0.1)


BENCH_DIR = Path(__file__).resolve().parents[1] / "bench"


def load_bench(script: str, name: str) -> ModuleType:
    """``bench/<script>.py`` imported as the module ``name`` (registered in ``sys.modules``)."""
    spec = importlib.util.spec_from_file_location(name, BENCH_DIR / f"{script}.py")
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module
