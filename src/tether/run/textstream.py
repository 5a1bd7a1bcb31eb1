"""A model's text, to the caller's callback (``agent.run(goal, on_text=...)``).

It is never less redacted than the log. The log records each whole answer (``model_responded``), redacted. Without a redactor
(``Agent(redactor=None)``) the pieces a model streams go out as they come, live; a model
that cannot stream gives its text at once, and the pieces of an attempt that failed are
followed by those of the retry. With a redactor (the default) each answer's text goes out
once it is recorded, exactly as the log holds it: a secret's redaction can depend on the
whole answer (a value the redactor finds later in it, or in the answer's tool calls, is
redacted wherever it appears, and a key can arrive in any number of pieces), so no piece
of an answer is safe to send before all of it was seen.

A callback that raises stops getting text for the rest of the run; the outcome's warnings
say so once, and the run goes on.
"""

from __future__ import annotations

from collections.abc import Callable

from tether.run.journal import Journal

__all__ = ["TextCallback", "TextStream"]

TextCallback = Callable[[str], object]
"""Takes each piece of a model's text (its return value is ignored)."""


class TextStream:
    """One run's model text, delivered to its callback (see the module docstring)."""

    __slots__ = ("_callback", "_fed", "_journal", "live")

    def __init__(self, journal: Journal, callback: TextCallback) -> None:
        self._journal = journal
        self._callback: TextCallback | None = callback
        self._fed = False
        self.live = journal.redactor is None
        """Whether pieces go out as they stream (no redactor), not whole recorded answers."""

    def feed(self, text: str) -> None:
        """A piece of the answer being generated arrived (passed on only when ``live``)."""
        if self.live and text and self._callback is not None:
            self._fed = True
            self._deliver(text)

    def answered(self, text: str) -> None:
        """An answer was recorded, ``text`` as the log holds it."""
        fed, self._fed = self._fed, False
        if text and self._callback is not None and not (self.live and fed):
            self._deliver(text)

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
