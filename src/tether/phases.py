"""Which phase of a run an event belongs to, read from what it is (never stored)."""

from __future__ import annotations

from typing import Literal, TypeAlias

__all__ = ["Phase", "phase_of"]

Phase: TypeAlias = Literal["start", "plan", "think", "act", "reflect", "respond", "record"]
"""The phase of a run an event belongs to (``EventBase.phase``)."""

_ACTING = frozenset({"compact", "grade", "rewrite"})
"""The purposes of requests that are part of acting (``think``), not a thinking stage's."""

_PHASES: dict[str, Phase] = {
    "run_started": "start",
    "run_resumed": "start",
    "user_replied": "start",
    "session_continued": "start",
    "plan_made": "plan",
    "plan_revised": "plan",
    "routed": "plan",
    "model_responded": "think",
    "model_failed": "think",
    "retry_prompted": "think",
    "memory_recalled": "think",
    "context_compacted": "think",
    "budget_warning": "think",
    "tool_call_requested": "act",
    "policy_decided": "act",
    "approval_requested": "act",
    "approval_given": "act",
    "tool_call_finished": "act",
    "tool_call_unknown": "act",
    "memory_written": "act",
    "knowledge_retrieved": "act",
    "reflected": "reflect",
    "limit_reached": "respond",
    "run_finished": "respond",
    "redacted": "record",
}


def phase_of(kind: str, final: bool = False, purpose: str | None = None) -> Phase:
    """The phase of an event of ``kind``: a model turn's depends on what it was for.

    The tool-free best-effort answer after a limit (``final``) is ``respond``; a thinking
    stage's request (``purpose``) is ``reflect`` or ``plan``; a compaction's summary is part
    of acting, ``think``, and so are a knowledge search's grading and rewriting.
    """
    if kind == "model_responded" or kind == "model_failed":
        if final:
            return "respond"
        if purpose is not None and purpose not in _ACTING:
            return "reflect" if purpose == "reflect" else "plan"
    return _PHASES[kind]
