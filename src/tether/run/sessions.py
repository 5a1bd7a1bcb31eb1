"""Sessions: a conversation that continues across runs, by a session id.

``agent.run(goal, session="chat-42")`` reads the session's earlier turns (each an earlier
finished run's goal and answer) from the run store's key-value table, within the agent's
``SessionHistory`` bounds (each agent's sessions apart from every other's), and records them as ``session_continued`` before the first turn:
the model reads them as the conversation so far, and a resumed or replayed run reads them
from its log, never from the table. When the run finishes, its goal and answer, as its log
holds them (redacted), become the session's newest turn.

Each turn is one key (``<session>/<inverted start time in µs>:<run id>``), so runs of one session
never overwrite each other's turns and the newest turns are the first keys listed.
"""

from __future__ import annotations

import hashlib
from datetime import UTC, datetime
from typing import Any, Generic

from tether.jsontypes import JsonValue
from tether.memoryevents import SessionContinued
from tether.models.tokens import estimate_tokens
from tether.run.base import OutputT
from tether.run.context import RunContext
from tether.run.remembering import why
from tether.stores.kv import KeyValueStore

__all__ = ["Sessions", "forget_session", "namespace_of"]


def namespace_of(agent: str) -> str:
    """The key-value namespace that holds the sessions of the agent named ``agent``.

    One per agent: an agent never reads another's conversations as its user's words.
    """
    namespace = f"tether:sessions:{agent}"
    if len(namespace) <= 256:
        return namespace
    # cut, two long names with one start would share one: the name's hash keeps them apart
    digest = hashlib.sha256(agent.encode("utf-8", "surrogatepass")).hexdigest()[:32]
    return f"{namespace[:223]}:{digest}"


_NEWEST = 10**17  # a start time in microseconds, inverted: newer turns list first


class Sessions(Generic[OutputT]):
    """The run's session: its earlier turns at the start, its own turn at the end."""

    __slots__ = ("_ctx", "_namespace", "_store", "history", "session")

    def __init__(self, ctx: RunContext[OutputT], store: KeyValueStore, session: str | None) -> None:
        self._ctx = ctx
        self._store = store
        self.session = session
        """The session a new run joins (``None`` for a resumed run: its log says)."""
        self.history = ctx.spec.session_history
        self._namespace = namespace_of(ctx.spec.name)

    async def begin(self) -> None:
        """Before the first turn, once per run: the session's earlier turns."""
        st = self._ctx.state
        if self.session is None or st.session is not None or st.steps > 0:
            return
        try:
            turns, complete = await self._earlier()
        except Exception as exc:  # a session never fails a run: the log says what went wrong
            self._ctx.add(
                SessionContinued,
                session=self.session,
                complete=False,
                warning=f"the session's earlier turns could not be read: {why(exc)}",
            )
            return
        self._ctx.add(
            SessionContinued,
            session=self.session,
            run_ids=tuple(t[0] for t in turns),
            goals=tuple(t[1] for t in turns),
            answers=tuple(t[2] for t in turns),
            complete=complete,
        )

    async def _earlier(self) -> tuple[list[tuple[str, str, str]], bool]:
        """The newest turns within the bounds, oldest first; and whether that is all."""
        assert self.session is not None
        wanted = self.history.turns
        if wanted == 0:
            return [], True
        keys = await self._store.kv_list(self._namespace, f"{self.session}/", wanted + 1)
        complete = len(keys) <= wanted
        budget = self.history.tokens
        turns: list[tuple[str, str, str]] = []
        max_age = self.history.max_age
        started = self._ctx.state.started_at or datetime.now(UTC)
        for key in keys[:wanted]:  # newest first
            entry = await self._store.kv_get(self._namespace, key)
            turn = _turn(entry.value if entry is not None else None)
            if entry is None or turn is None:
                continue  # deleted meanwhile, or not a turn: skipped
            if max_age is not None and started - entry.updated_at > max_age:
                complete = False  # this one and every older one: the conversation went idle
                break
            cost = estimate_tokens(len(turn[1]) + len(turn[2]) + 8)
            if cost > budget:
                complete = False
                break
            budget -= cost
            turns.append(turn)
        turns.reverse()
        return turns, complete

    async def end(self, answer: str) -> None:
        """The finished run's goal and ``answer`` become the session's newest turn.

        A failure is an outcome warning: the run has its answer either way.
        """
        ctx, st = self._ctx, self._ctx.state
        if st.session is None:
            return
        session = st.session.session
        started = st.started_at or datetime.now().astimezone()
        inverted = _NEWEST - int(started.timestamp() * 1_000_000)
        key = f"{session}/{inverted:017d}:{ctx.run_id}"
        value: dict[str, JsonValue] = {
            "run_id": ctx.run_id,
            "goal": st.goal,  # as the log holds it: redacted
            "answer": ctx.journal.redacted(answer),
        }
        try:
            await self._store.kv_set(self._namespace, key, value)
            # forgotten since this run began: the turn goes too (written, then checked: a
            # forget between the two has the turn to delete, or leaves its mark to see)
            if await _forgotten_at(self._store, self._namespace, session) >= started.timestamp():
                await self._store.kv_delete(self._namespace, key)
        except Exception as exc:
            ctx.journal.warnings.append(
                f"session {session}: this run's turn was not kept, the next run of the "
                f"session will not see it: {why(exc)}"
            )


def _mark(session: str) -> str:
    """The key of when ``session`` was last forgotten (no turn's key: those have a '/')."""
    return f"{session}|forgotten"


async def _forgotten_at(store: KeyValueStore, namespace: str, session: str) -> float:
    """When ``session`` was last forgotten (a POSIX time; never: minus infinity)."""
    entry = await store.kv_get(namespace, _mark(session))
    at = entry.value.get("at") if entry is not None and isinstance(entry.value, dict) else None
    return float(at) if isinstance(at, int | float) else float("-inf")


def _turn(value: Any) -> tuple[str, str, str] | None:
    if not isinstance(value, dict):
        return None
    run_id, goal, answer = (value.get(k) for k in ("run_id", "goal", "answer"))  # pyright: ignore[reportUnknownMemberType, reportUnknownVariableType]
    if not (isinstance(run_id, str) and isinstance(goal, str) and isinstance(answer, str)):
        return None
    return run_id, goal, answer


async def forget_session(store: KeyValueStore, agent: str, session: str) -> int:
    """Delete every kept turn of ``session`` of the agent named ``agent``; returns how many.

    The runs' own logs stay (they are the record); later runs of the session start afresh.
    """
    namespace = namespace_of(agent)
    gone = 0
    # first: a run of the session still going sees it when it ends, and keeps no turn
    await store.kv_set(namespace, _mark(session), {"at": datetime.now(UTC).timestamp()})
    while keys := await store.kv_list(namespace, f"{session}/", 500):
        for key in keys:
            gone += await store.kv_delete(namespace, key)
    return gone
