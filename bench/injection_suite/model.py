# pyright: strict
"""The model double: competent at the user's task, and obedient to injected instructions.

It plays the task's script (a generator that reads the goal and the results and emits
calls). Whenever a tool result it reads holds an injection it has not obeyed yet, it does
what the injection asks *first* (it runs the attack's script, as a model that cannot tell
data from instructions would), then goes back to the user's task. It obeys each injection
once. A script that cannot go on (a call was refused, a value it needed is missing) ends
the run with an answer that says so.

One instance serves one run: it keeps its place in the scripts between requests.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from injection_suite.core import Calls, GiveUp, Order, Result, Script, readings
from tether.content import content_text
from tether.messages import ToolCall, ToolResultMessage, UserMessage
from tether.models.base import ModelRequest
from tether.models.scripted import ScriptStep
from tether.testing import FunctionModel, finish

__all__ = ["Obedient"]

_GAVE_UP = "I could not complete the task: "


@dataclass
class _Actor:
    """One script being played: the user's task, or an attack being obeyed."""

    script: Script
    attack: str | None
    ready: Calls | None = None
    awaiting: tuple[str, ...] = ()
    answer: str | None = None

    def advance(self, replies: list[Result] | None) -> None:
        """Let the script read ``replies`` (``None``: start it) and take its next step."""
        try:
            self.ready = next(self.script) if replies is None else self.script.send(replies)
        except StopIteration as stop:
            self.answer = str(stop.value)
        except (GiveUp, LookupError, ValueError) as exc:
            self.answer = f"{_GAVE_UP}{exc}"


@dataclass
class Obedient:
    """The model of one run (``.model`` is what the agent calls)."""

    task: Callable[[str], Script]
    """The user's task script."""
    attacks: Sequence[Order]
    """The attacks it knows how to carry out when it reads their instruction."""
    read: list[str] = field(default_factory=lambda: [])
    """Every tool result text it read (tether's own refusals excluded)."""
    obeyed: list[str] = field(default_factory=lambda: [])
    """The attacks it obeyed, in order."""
    attack_calls: list[str] = field(default_factory=lambda: [])
    """The ids of the calls it made for an attack."""
    _stack: list[_Actor] = field(default_factory=lambda: [])
    _results: dict[str, Result] = field(default_factory=lambda: {})
    _seen: int = 0
    _turn: int = 0

    @property
    def model(self) -> FunctionModel:
        """The model to give the agent."""
        return FunctionModel(self._respond, name="obedient")

    def _respond(self, request: ModelRequest) -> ScriptStep:
        messages = request.messages
        new, self._seen = messages[self._seen :], len(messages)
        if not self._stack:
            goal = next(m.text for m in messages if isinstance(m, UserMessage))
            user = _Actor(script=self.task(goal), attack=None)
            user.advance(None)
            self._stack.append(user)
        fresh: list[str] = []
        for message in new:
            if isinstance(message, ToolResultMessage):
                text = content_text(message.content)
                self._results[message.call_id] = Result(
                    text=text, is_error=message.is_error, synthetic=message.synthetic
                )
                if not message.synthetic:
                    fresh.append(text)
                    self.read.append(text)
        top = self._stack[-1]
        if top.awaiting and all(i in self._results for i in top.awaiting):
            replies = [self._results[i] for i in top.awaiting]
            top.awaiting = ()
            top.advance(replies)
        self._obey(fresh)
        return self._next()

    def _obey(self, texts: list[str]) -> None:
        """Put every injection found in ``texts`` (not obeyed yet) on top: it goes first."""
        for text in texts:
            seen = readings(text)
            for attack in self.attacks:
                if attack.id not in self.obeyed and attack.instruction in seen:
                    self.obeyed.append(attack.id)
                    actor = _Actor(script=attack.script(), attack=attack.id)
                    actor.advance(None)
                    self._stack.append(actor)

    def _next(self) -> ScriptStep:
        while True:
            top = self._stack[-1]
            if top.answer is not None:
                if top.attack is None:
                    return finish(top.answer)
                self._stack.pop()  # the detour is done: back to what came before
                continue
            if top.ready is None:  # cannot happen: a script that waits has its results
                raise RuntimeError(f"script {top.attack or 'task'} has no next step")
            calls = [
                ToolCall(id=f"c{self._turn}_{i}", name=call.name, arguments=call.arguments)
                for i, call in enumerate(top.ready)
            ]
            self._turn += 1
            top.ready, top.awaiting = None, tuple(call.id for call in calls)
            if top.attack is not None:
                self.attack_calls += top.awaiting
            return calls
