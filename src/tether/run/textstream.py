"""A model's text as it streams, to the caller's callback: live, and never less redacted than the log.

The log records the whole answer (``model_responded``), redacted; the pieces that stream
before it reach only the callback (``agent.run(goal, on_text=...)``). Without a redactor
they go out as they come. With one, text goes out a few whole words at a time, once the
redactor's probe passes them together with the text just before them; from the first words
that may hold a secret, the rest of the answer is held and goes out redacted, whole, when
the answer ends: a secret split across pieces, or across lines (a PEM key), never goes out
before the redactor saw all of it.

A callback that raises stops getting text for the rest of the run; the outcome's warnings
say so once, and the run goes on.
"""

from __future__ import annotations

from collections.abc import Callable

from tether.run.journal import Journal

__all__ = ["TextCallback", "TextStream"]

_CONTEXT = 96
"""Characters of text already out that the probe of the next words sees with them."""

TextCallback = Callable[[str], object]
"""Takes each piece of a model's streamed text (its return value is ignored)."""


class TextStream:
    """One run's streamed text, delivered to its callback (see the module docstring)."""

    __slots__ = ("_buffer", "_callback", "_holding", "_journal", "_tail")

    def __init__(self, journal: Journal, callback: TextCallback) -> None:
        self._journal = journal
        self._callback: TextCallback | None = callback
        self._buffer = ""
        self._holding = False
        self._tail = ""

    def feed(self, text: str) -> None:
        """A piece of the answer arrived."""
        if self._callback is None or not text:
            return
        if self._journal.redactor is None:
            self._deliver(text)
            return
        buffer = self._buffer + text
        if not self._holding:
            cut = max(buffer.rfind(" "), buffer.rfind("\n")) + 1  # whole words only
            if cut > 0:
                words = buffer[:cut]
                # with what went out just before: a match across the cut is probed whole
                if self._journal.seen(self._tail + words):
                    self._deliver(words)
                    self._tail = (self._tail + words)[-_CONTEXT:]
                    buffer = buffer[cut:]
                else:
                    self._holding = True  # it may hold a secret: the rest waits for the end
        self._buffer = buffer

    def end(self) -> None:
        """The answer is complete (or failed): what was held goes out, redacted."""
        held, self._buffer, self._holding, self._tail = self._buffer, "", False, ""
        if held and self._callback is not None:
            self._deliver(self._journal.redact_text(held))

    def _deliver(self, text: str) -> None:
        callback = self._callback
        assert callback is not None
        try:
            callback(text)
        except Exception as exc:
            self._callback = None  # it failed once: it gets no more of this run
            name = getattr(callback, "__qualname__", None) or repr(callback)
            self._journal.warnings.append(
                f"the on_text callback {name} raised {type(exc).__name__}: {exc}; it got no "
                "more text of this run (the log has every answer)"
            )
