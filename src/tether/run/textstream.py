"""A model's text and tool calls, to the caller's callbacks (``on_text``, ``on_call``).

``agent.run(goal, on_text=..., on_call=...)``. They are never less redacted than the log. The log records each whole answer
(``model_responded``), redacted. Without a redactor (``Agent(redactor=None)``) the pieces a
model streams go out as they come, live: text to ``on_text``, the fragments of each tool
call's arguments to ``on_call`` (``ToolCallDelta``: the call's name on its first piece); a
model that cannot stream gives its answer at once, and the pieces of an attempt that failed
are followed by those of the retry. With a redactor (the default) each answer goes out once
it is recorded, exactly as the log holds it (each call as one ``ToolCallDelta`` with its
whole arguments): a secret's redaction can depend on the whole answer (a value the redactor
finds later in it, or in the answer's tool calls, is redacted wherever it appears, and a key
can arrive in any number of pieces), so no piece of an answer is safe to send before all of
it was seen.

A callback that raises stops getting anything for the rest of the run; the outcome's
warnings say so once, and the run goes on.
"""

from __future__ import annotations

from collections.abc import Callable

import orjson

from tether.messages import ToolCall
from tether.models.base import ToolCallDelta
from tether.run.journal import Journal

__all__ = ["CallCallback", "TextCallback", "TextStream"]

TextCallback = Callable[[str], object]
"""Takes each piece of a model's text (its return value is ignored)."""

CallCallback = Callable[[ToolCallDelta], object]
"""Takes each piece of a model's tool calls (its return value is ignored)."""


class TextStream:
    """One run's model text and calls, delivered to its callbacks (see the module docstring)."""

    __slots__ = ("_calls_fed", "_journal", "_on_call", "_on_text", "_text_fed", "live")

    def __init__(
        self, journal: Journal, on_text: TextCallback | None, on_call: CallCallback | None = None
    ) -> None:
        self._journal = journal
        self._on_text: TextCallback | None = on_text
        self._on_call: CallCallback | None = on_call
        self._text_fed = False
        self._calls_fed = False
        self.live = journal.redactor is None
        """Whether pieces go out as they stream (no redactor), not whole recorded answers."""

    def feed(self, text: str) -> None:
        """A piece of the answer being generated arrived (passed on only when ``live``)."""
        if self.live and text and self._on_text is not None:
            self._text_fed = True
            self._deliver_text(text)

    def feed_call(self, piece: ToolCallDelta) -> None:
        """A piece of a tool call being generated arrived (passed on only when ``live``)."""
        if self.live and self._on_call is not None:
            self._calls_fed = True
            self._deliver_call(piece)

    def answered(self, text: str, calls: tuple[ToolCall, ...] = ()) -> None:
        """An answer was recorded, ``text`` and ``calls`` as the log holds them."""
        fed, self._text_fed = self._text_fed, False
        if text and self._on_text is not None and not (self.live and fed):
            self._deliver_text(text)
        fed, self._calls_fed = self._calls_fed, False
        if calls and self._on_call is not None and not (self.live and fed):
            for index, call in enumerate(calls):
                arguments = orjson.dumps(call.arguments).decode()
                self._deliver_call(
                    ToolCallDelta(index=index, arguments=arguments, name=call.name, id=call.id)
                )
                if self._on_call is None:
                    break

    def _deliver_text(self, text: str) -> None:
        callback = self._on_text
        assert callback is not None
        try:
            callback(text)
        except Exception as exc:
            self._on_text = None  # it failed once: it gets no more of this run
            self._failed("on_text", callback, exc, "text")

    def _deliver_call(self, piece: ToolCallDelta) -> None:
        callback = self._on_call
        assert callback is not None
        try:
            callback(piece)
        except Exception as exc:
            self._on_call = None
            self._failed("on_call", callback, exc, "tool calls")

    def _failed(self, role: str, callback: object, exc: Exception, what: str) -> None:
        name = getattr(callback, "__qualname__", None) or repr(callback)
        self._journal.warnings.append(
            f"the {role} callback {name} raised {type(exc).__name__}: {exc}; it got no "
            f"more {what} of this run (the log has every answer)"
        )
