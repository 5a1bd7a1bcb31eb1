"""A model's streamed text reaches the caller live, and never less redacted than the log."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from tether import Agent, Redactor
from tether.messages import ToolCall
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


def _stream(redactor: Redactor | None) -> tuple[TextStream, list[str], Journal]:
    journal = Journal("r", clock=FakeClock(), redactor=redactor)
    got: list[str] = []
    return TextStream(journal, got.append), got, journal


def test_without_a_redactor_pieces_go_out_as_they_come() -> None:
    stream, got, _ = _stream(None)
    for piece in ("Hel", "lo wor", "ld"):
        stream.feed(piece)
    stream.end()
    assert got == ["Hel", "lo wor", "ld"]


def test_with_a_redactor_whole_words_go_out_once_they_pass() -> None:
    stream, got, _ = _stream(Redactor())
    stream.feed("The answer ")
    assert got == ["The answer "]
    stream.feed("is forty")
    assert got == ["The answer ", "is "]  # "forty" may go on: it waits for its end
    stream.feed("-two.")
    stream.end()
    assert "".join(got) == "The answer is forty-two."


@pytest.mark.parametrize("cut", range(1, len(KEY) + 8))
def test_a_secret_split_anywhere_never_goes_out(cut: int) -> None:
    stream, got, _ = _stream(Redactor())
    text = f"Use the key {KEY} to call it.\nThen stop."
    start = text.index(KEY)
    for piece in (text[: start + cut], text[start + cut :]):
        stream.feed(piece)
    stream.end()
    out = "".join(got)
    assert KEY not in out
    for size in range(8, len(KEY)):  # not even a long part of it
        assert all(KEY[i : i + size] not in out for i in range(len(KEY) - size + 1))
    assert out.startswith("Use the key ")
    assert "[REDACTED:" in out
    assert out.endswith("Then stop.")


def test_a_secret_the_run_learned_is_held_too() -> None:
    stream, got, journal = _stream(Redactor())
    journal._learn({"hunter2-correct-horse": "password"})  # pyright: ignore[reportPrivateUsage]
    stream.feed("the password hunter2-correct-horse works ")
    stream.end()
    assert "hunter2-correct-horse" not in "".join(got)


def test_a_callback_that_raises_gets_no_more_and_the_run_is_told() -> None:
    journal = Journal("r", clock=FakeClock())
    calls: list[str] = []

    def flaky(text: str) -> None:
        calls.append(text)
        raise OSError("the socket closed")

    stream = TextStream(journal, flaky)
    stream.feed("one ")
    stream.feed("two ")
    stream.end()
    assert calls == ["one "]
    assert len(journal.warnings) == 1
    assert "raised OSError: the socket closed" in journal.warnings[0]


class Streaming(Model):
    """Streams its text in small pieces, then answers with it and a call of finish_task."""

    real = False

    def __init__(self, text: str, piece: int = 3) -> None:
        self.text = text
        self.piece = piece
        self.calls = 0

    @property
    def name(self) -> str:
        return "streaming"

    async def request(self, request: ModelRequest) -> ModelResponse:
        raise AssertionError("a run with on_text streams")

    async def stream(self, request: ModelRequest) -> AsyncIterator[StreamEvent]:
        self.calls += 1
        for i in range(0, len(self.text), self.piece):
            yield TextDelta(text=self.text[i : i + self.piece])
        call: ToolCall = finish(self.text)
        yield ResponseDone(response=ModelResponse(text=self.text, tool_calls=(call,)))


async def test_a_run_streams_its_text_to_the_callback_and_logs_it_whole() -> None:
    got: list[str] = []
    text = f"Here it is: {KEY} and done.\n"
    model = Streaming(text)
    outcome = await Agent(name="s", model=model).run("Go.", on_text=got.append)
    assert outcome.status == "finished"
    assert model.calls == 1
    streamed = "".join(got)
    assert KEY not in streamed
    responded = [e for e in outcome.events if e.kind == "model_responded"]
    assert len(responded) == 1
    assert streamed == responded[0].text  # pyright: ignore[reportAttributeAccessIssue]


async def test_a_model_that_cannot_stream_gives_its_answer_at_once() -> None:
    got: list[str] = []
    model = ScriptedModel([ModelResponse(text="All done.", tool_calls=(finish("ok"),))])
    outcome = await Agent(name="s", model=model).run("Go.", on_text=got.append)
    assert outcome.status == "finished"
    assert "".join(got) == "All done."  # it streams nothing: its text comes at once
