"""One dispatch over the event kinds: every handler covers every kind, and gets each one."""

from __future__ import annotations

import inspect

import pytest

from tether.cli.render import _Describer, describe  # pyright: ignore[reportPrivateUsage]
from tether.eventdispatch import EventHandler
from tether.events import EVENT_TYPES, UserReplied
from tether.state import StateBuilder


def test_a_method_for_every_kind_and_nothing_else() -> None:
    abstract = {name for name in EventHandler.__abstractmethods__}
    assert abstract == {f"on_{kind}" for kind in EVENT_TYPES}
    for handler in (StateBuilder, _Describer):
        assert not inspect.isabstract(handler), handler


def test_a_handler_that_forgets_a_kind_cannot_be_made() -> None:
    class Forgetful(EventHandler[None]):
        def on_user_replied(self, event: UserReplied) -> None:
            pass

    with pytest.raises(TypeError, match="abstract"):
        Forgetful()  # pyright: ignore[reportAbstractUsage]


def test_handle_calls_the_method_of_the_events_kind() -> None:
    seen: list[str] = []

    class Recorder(StateBuilder):
        def on_user_replied(self, event: UserReplied) -> None:
            seen.append(event.text)

    from datetime import UTC, datetime

    event = UserReplied(run_id="r", seq=3, at=datetime.now(UTC), prev_hash="x", text="yes")
    Recorder().apply(event)
    assert seen == ["yes"]
    assert describe(event) == "user replied 'yes'"
