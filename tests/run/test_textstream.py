"""A model's text reaches the caller's callback, and never less redacted than the log."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from tether import Agent, Redactor
from tether.events import ModelResponded
from tether.models.base import (
    Model,
    ModelRequest,
    ModelResponse,
    ResponseDone,
    StreamEvent,
    TextDelta,
)
from tether.run.journal import Journal
from tether.run.textstream import TextStream
from tether.testing import FakeClock, ScriptedModel, finish

KEY = "sk-" + "a1B2c3D4e5F6g7H8i9J0k1L2m3N4o5P6"
PEM = (
    "-----BEGIN RSA PRIVATE KEY-----\n"
    "MIIEowIBAAKCAQEAx7Qs3vQ9bXkZ1m2n3o4p5q6r7s8t9u0v1w2x3y4z5A6B7C8D9\n"
    "-----END RSA PRIVATE KEY-----\n"
)


class Streaming(Model):
    """Streams its answer in small pieces (the pieces split words and secrets anywhere)."""

    real = False

    def __init__(self, text: str, piece: int = 3) -> None:
        self.text = text
        self.piece = piece
        self.streams = 0
        self.requests = 0

    @property
    def name(self) -> str:
        return "streaming"

    def _response(self) -> ModelResponse:
        return ModelResponse(text=self.text, tool_calls=(finish(self.text),))

    async def request(self, request: ModelRequest) -> ModelResponse:
        self.requests += 1
        return self._response()

    async def stream(self, request: ModelRequest) -> AsyncIterator[StreamEvent]:
        self.streams += 1
        for i in range(0, len(self.text), self.piece):
            yield TextDelta(text=self.text[i : i + self.piece])
        yield ResponseDone(response=self._response())


def _logged(events: object) -> list[str]:
    return [e.text for e in events if isinstance(e, ModelResponded)]  # pyright: ignore[reportGeneralTypeIssues, reportUnknownVariableType, reportUnknownMemberType]


async def test_without_a_redactor_pieces_go_out_live() -> None:
    got: list[str] = []
    model = Streaming("The sky is blue on a clear day.")
    agent = Agent(name="live", model=model, redactor=None)
    outcome = await agent.run("Sky?", on_text=got.append)
    assert outcome.status == "finished"
    assert model.streams == 1
    assert len(got) > 3  # in pieces, as they came
    assert "".join(got) == _logged(outcome.events)[0]


@pytest.mark.parametrize(
    ("text", "secret"),
    [
        (f"Here it is: {KEY} and done.", KEY),
        (f"The key:\n{PEM}Keep it safe.", "MIIEowIBAAKCAQEAx7Qs"),
        # found late in the answer: redacted in the log wherever it appears, before too
        ("Log in with hunter2abc now. The password: hunter2abc", "hunter2abc"),
    ],
)
async def test_with_a_redactor_the_callback_gets_each_answer_as_the_log_holds_it(
    text: str, secret: str
) -> None:
    got: list[str] = []
    model = Streaming(text, piece=2)
    outcome = await Agent(name="safe", model=model).run("Tell me.", on_text=got.append)
    assert outcome.status == "finished"
    assert got == _logged(outcome.events)  # whole answers, exactly what the log holds
    assert "[REDACTED:" in got[0]
    assert secret not in got[0]
    assert model.requests == 1  # not streamed: no piece can go out before all of it is seen


async def test_a_model_that_cannot_stream_gives_its_text_at_once() -> None:
    got: list[str] = []
    model = ScriptedModel([ModelResponse(text="All done.", tool_calls=(finish("ok"),))])
    outcome = await Agent(name="s", model=model, redactor=None).run("Go.", on_text=got.append)
    assert outcome.status == "finished"
    assert got == ["All done."]


def test_a_callback_that_raises_gets_no_more_and_the_run_is_told() -> None:
    journal = Journal("r", clock=FakeClock())
    calls: list[str] = []

    def flaky(text: str) -> None:
        calls.append(text)
        raise OSError("the socket closed")

    stream = TextStream(journal, flaky)
    assert stream.live
    stream.feed("one ")
    stream.feed("two ")
    stream.answered("one two")
    assert calls == ["one "]
    assert len(journal.warnings) == 1
    assert "raised OSError: the socket closed" in journal.warnings[0]


def test_with_a_redactor_pieces_wait_for_the_recorded_answer() -> None:
    journal = Journal("r", clock=FakeClock(), redactor=Redactor())
    got: list[str] = []
    stream = TextStream(journal, got.append)
    assert not stream.live
    stream.feed(f"the key {KEY}")
    assert got == []
    stream.answered("the key [REDACTED:api_key]")
    assert got == ["the key [REDACTED:api_key]"]
