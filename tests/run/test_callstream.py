"""A model's tool calls reach the caller's ``on_call`` callback, never less redacted than the log."""

from __future__ import annotations

from collections.abc import AsyncIterator

import orjson

from tests.support import add
from tether import Agent
from tether.events import ModelResponded
from tether.messages import ToolCall
from tether.models.base import (
    Model,
    ModelRequest,
    ModelResponse,
    ResponseDone,
    StreamEvent,
    TextDelta,
    ToolCallDelta,
)
from tether.testing import ScriptedModel, call, finish

KEY = "sk-" + "a1B2c3D4e5F6g7H8i9J0k1L2m3N4o5P6"


class Streaming(Model):
    """Streams each turn's calls in small pieces of their arguments' JSON, as providers do."""

    real = False

    def __init__(self, turns: list[tuple[ToolCall, ...]], piece: int = 4) -> None:
        self.turns = turns
        self.piece = piece
        self.at = 0
        self.streams = 0
        self.requests = 0

    @property
    def name(self) -> str:
        return "streaming-calls"

    def _response(self) -> ModelResponse:
        calls = self.turns[self.at]
        self.at += 1
        return ModelResponse(text="", tool_calls=calls)

    async def request(self, request: ModelRequest) -> ModelResponse:
        self.requests += 1
        return self._response()

    async def stream(self, request: ModelRequest) -> AsyncIterator[StreamEvent]:
        self.streams += 1
        response = self._response()
        yield TextDelta(text="Working. ")
        for index, c in enumerate(response.tool_calls):
            yield ToolCallDelta(index=index, name=c.name, id=c.id)
            raw = orjson.dumps(c.arguments).decode()
            for i in range(0, len(raw), self.piece):
                yield ToolCallDelta(index=index, arguments=raw[i : i + self.piece])
        yield ResponseDone(response=response)


def _joined(pieces: list[ToolCallDelta]) -> list[tuple[str, object]]:
    """Each call the pieces make up: its name and its parsed arguments, in order."""
    calls: dict[tuple[int, int], list[str]] = {}
    names: dict[tuple[int, int], str] = {}
    turn = -1
    for piece in pieces:
        if piece.name:
            if piece.index == 0:
                turn += 1
            names[(turn, piece.index)] = piece.name
        calls.setdefault((turn, piece.index), []).append(piece.arguments)
    return [(names[key], orjson.loads("".join(parts))) for key, parts in sorted(calls.items())]


def _recorded(events: object) -> list[tuple[str, object]]:
    return [
        (c.name, c.arguments)
        for e in events  # pyright: ignore[reportGeneralTypeIssues, reportUnknownVariableType]
        if isinstance(e, ModelResponded)
        for c in e.tool_calls
    ]


async def test_without_a_redactor_argument_pieces_go_out_live() -> None:
    pieces: list[ToolCallDelta] = []
    model = Streaming(
        [
            (ToolCall(id="a", name="add", arguments={"a": 20, "b": 22}),),
            (ToolCall(id="f", name="finish_task", arguments={"answer": "42"}),),
        ]
    )
    agent = Agent(name="live", model=model, tools=[add], redactor=None)
    outcome = await agent.run("20+22?", on_call=pieces.append)
    assert outcome.status == "finished"
    assert model.streams == 2
    assert sum(1 for p in pieces if not p.name) > 4  # in fragments, as they came
    assert _joined(pieces) == _recorded(outcome.events)


async def test_with_a_redactor_each_recorded_call_goes_out_whole_and_redacted() -> None:
    pieces: list[ToolCallDelta] = []
    text: list[str] = []
    model = Streaming(
        [
            (
                ToolCall(id="a", name="add", arguments={"a": 1, "b": 2}),
                ToolCall(id="b", name="add", arguments={"a": 3, "b": 4}),
            ),
            (ToolCall(id="f", name="finish_task", arguments={"answer": f"use {KEY}"}),),
        ]
    )
    outcome = await Agent(name="safe", model=model, tools=[add]).run(
        "sums", on_call=pieces.append, on_text=text.append
    )
    assert outcome.status == "finished"
    assert model.requests == 2  # not streamed: nothing goes out before the log has it
    assert [(p.index, p.name) for p in pieces] == [(0, "add"), (1, "add"), (0, "finish_task")]
    assert _joined(pieces) == _recorded(outcome.events)
    assert KEY not in "".join(p.arguments for p in pieces)
    assert "[REDACTED:" in pieces[-1].arguments


async def test_a_model_that_cannot_stream_gives_each_call_at_once() -> None:
    pieces: list[ToolCallDelta] = []
    model = ScriptedModel([call("add", a=1, b=2), finish("3")])
    outcome = await Agent(name="s", model=model, tools=[add], redactor=None).run(
        "1+2", on_call=pieces.append
    )
    assert outcome.status == "finished"
    assert [(p.name, orjson.loads(p.arguments)) for p in pieces] == [
        ("add", {"a": 1, "b": 2}),
        ("finish_task", {"answer": "3"}),
    ]


async def test_an_on_call_that_raises_gets_no_more_and_the_run_is_told() -> None:
    seen: list[ToolCallDelta] = []

    def broken(piece: ToolCallDelta) -> None:
        seen.append(piece)
        raise RuntimeError("display gone")

    model = ScriptedModel([call("add", a=1, b=2), finish("3")])
    outcome = await Agent(name="s", model=model, tools=[add]).run("1+2", on_call=broken)
    assert outcome.status == "finished"
    assert len(seen) == 1
    assert any(
        "the on_call callback" in w and "display gone" in w and "no more tool calls" in w
        for w in outcome.warnings
    )
