"""Driving a run from the command line: the live status line and the closing report."""

from __future__ import annotations

import os
import signal
import threading
from collections.abc import Callable
from pathlib import Path
from types import FrameType
from typing import Any

import orjson
from rich.console import Console
from rich.markup import escape

from tether.cli.render import describe
from tether.events import (
    Event,
    ModelResponded,
    RunFinished,
    RunStarted,
    ToolCallFinished,
    ToolCallRequested,
    ToolCallUnknown,
)
from tether.loop import AgentRun
from tether.models.base import ToolCallDelta
from tether.outcome import RunOutcome
from tether.run.loopmonitor import exit_process, monitor

__all__ = ["DEFAULT_LOG_DIR", "Lines", "again_with", "drive", "exit_code", "log_dir_of", "report"]

out = Console()
err = Console(stderr=True)


class _Status:
    """The live status line: step k/N, the run's phase and what it does, tokens."""

    def __init__(self, max_steps: int) -> None:
        self.max_steps = max_steps
        self.step = 0
        self.tokens = 0
        self.phase = "starting"
        self.pending: set[str] = set()
        """The calls of the model's last answer still without a result."""

    def update(self, event: Event) -> str:
        """The line after ``event``: what the run does now (the model, once every result is in)."""
        if isinstance(event, ModelResponded):
            self.step = event.step
            self.tokens += event.usage.input_tokens + event.usage.output_tokens
            self.phase = "answering" if event.final else "model answered"
            self.pending = {call.id for call in event.tool_calls}
        elif isinstance(event, ToolCallRequested):
            self.phase = f"tool {event.tool}"
        elif isinstance(event, ToolCallFinished | ToolCallUnknown):
            self.pending.discard(event.call_id)
            self.phase = f"tool {event.tool} done" if self.pending else "model thinking"
        elif isinstance(event, RunStarted):
            self.phase = "thinking"
        elif isinstance(event, RunFinished):
            self.phase = event.status
        else:
            self.phase = event.kind.replace("_", " ")
        return (
            f"step {self.step}/{self.max_steps} · {event.phase}: {self.phase} · "
            f"{self.tokens} tokens"
        )


class Lines:
    """The model's streamed text and calls (``--stream``), whole lines above the status line.

    A call shows as ``→ name {arguments}`` once its last piece is in (long arguments cut).
    """

    def __init__(self) -> None:
        self._partial = ""
        self._call: list[str] = []

    def __call__(self, text: str) -> None:
        """Take a piece of text; print the lines it completes."""
        self._end_call()
        lines = (self._partial + text).split("\n")
        self._partial = lines.pop()
        for line in lines:
            err.print(f"[cyan]│[/] {escape(line)}", highlight=False)

    def call(self, piece: ToolCallDelta) -> None:
        """Take a piece of a tool call; print the call before it once it is whole."""
        if piece.name:
            self._end_call()
            if self._partial:  # the text before the call ends its line first
                self("\n")
            self._call = [piece.name, " "]
        if self._call:
            self._call.append(piece.arguments)

    def _end_call(self) -> None:
        if self._call:
            name, *arguments = self._call
            shown = "".join(arguments).strip()
            if len(shown) > _CALL_SHOWN:
                shown = f"{shown[:_CALL_SHOWN]}…"
            err.print(f"[cyan]│[/] [bold]→ {escape(name)}[/] {escape(shown)}", highlight=False)
            self._call = []

    def flush(self) -> None:
        """Print what is left: the last call, the last line."""
        self._end_call()
        if self._partial:
            self("\n")


_CALL_SHOWN = 300
"""Characters of a call's arguments ``--stream`` shows."""


DEFAULT_LOG_DIR = Path(".tether") / "runs"
"""Where a command writes a run's JSONL log, unless told (``--log-dir``, ``$TETHER_LOG_DIR``)."""


def log_dir_of(option: Path | None, disabled: bool) -> Path | None:
    """The folder a command writes its run's log to (``None``: ``--no-log``)."""
    if disabled:
        return None
    return option or Path(os.environ.get("TETHER_LOG_DIR") or DEFAULT_LOG_DIR)


async def drive(run: AgentRun[Any], *, verbose: bool, max_steps: int) -> RunOutcome[Any]:
    """Consume a run with a live status line (and every event, when ``verbose``).

    The command owns its process: a tool that holds the event loop past its deadline ends
    it (exit 2, with a message) rather than hanging it, and the run resumes as after a crash.
    """
    monitor.exit_on_hang = exit_process
    restore = _say_ctrl_c(run.run_id)
    status = _Status(max_steps)
    with err.status("starting…", spinner="dots") as live:
        async for event in run:
            live.update(escape(status.update(event)))
            if verbose:
                err.print(f"[dim]{event.seq:>3}[/] {describe(event)}")
    restore()  # not cancelled: nothing is waited for on the way out
    return run.outcome


def _say_ctrl_c(run_id: str) -> Callable[[], None]:
    """Ctrl-C says what it does; a second one quits at once.

    asyncio's own handler cancels the run, which is then recorded as cancelled; a tool
    running in a thread cannot be stopped: it is recorded as ``tool_call_unknown`` and left
    behind (tether's threads do not hold up the exit). This handler (left in place until the
    process exits) says so first, and a second Ctrl-C ends the process there: the run is
    then as a crash leaves it (``tether show``, ``tether resume``).
    Returns what puts the previous handler back, for a run that ends without a Ctrl-C.
    """
    previous = signal.getsignal(signal.SIGINT)
    if not callable(previous) or threading.current_thread() is not threading.main_thread():
        return lambda: None
    pressed = 0

    def on_sigint(signum: int, frame: FrameType | None) -> None:
        nonlocal pressed
        pressed += 1
        if pressed > 1:
            err.print(f"quitting now: see the run with `tether show {run_id}`")
            os._exit(130)
        err.print(
            f"cancelling (Ctrl-C): run {run_id} stops and is recorded as cancelled (see it "
            f"with `tether show {run_id}`); a tool running in a thread cannot be stopped: its "
            "outcome is recorded as unknown. Ctrl-C again to quit at once"
        )
        previous(signum, frame)

    signal.signal(signal.SIGINT, on_sigint)

    def restore() -> None:
        if pressed == 0 and signal.getsignal(signal.SIGINT) is on_sigint:
            signal.signal(signal.SIGINT, previous)

    return restore


def exit_code(outcome: RunOutcome[Any]) -> int:
    """0: finished; 3: finished, but without calls the policy denied; 1: anything else."""
    if not outcome.success:
        return 1
    return 3 if outcome.unresolved_denials else 0


def again_with(agent_ref: str | None) -> str:
    """What a command that continues a run needs added (``--agent REF``), if anything.

    Nothing when the log's name for the agent is one tether loads by itself (``trusted_ref``).
    """
    from tether.replay import trusted_ref

    return "" if agent_ref is None or trusted_ref(agent_ref) else f" --agent {agent_ref}"


def report(
    outcome: RunOutcome[Any], log_dir: Path | None, as_json: bool, agent_ref: str | None = None
) -> None:
    """The answer on stdout; status, usage, pending approvals and warnings on stderr."""
    if as_json:
        out.print_json(
            orjson.dumps(
                {
                    "run_id": outcome.run_id,
                    "status": outcome.status,
                    "answer": outcome.answer,
                    "steps": outcome.steps,
                    "tool_calls": outcome.tool_calls,
                    "usage": outcome.usage,
                    "error": outcome.error,
                    "limit": outcome.limit,
                    "denied": [
                        {"call_id": d.call_id, "tool": d.tool, "rule": d.rule, "reason": d.reason}
                        for d in outcome.denied
                    ],
                    "unresolved_denials": [d.call_id for d in outcome.unresolved_denials],
                }
            ).decode()
        )
        return
    if outcome.answer:
        out.print(escape(outcome.answer), soft_wrap=True)
    color = "green" if outcome.success else "red"
    detail = f" ({outcome.limit})" if outcome.limit else ""
    if outcome.error is not None:
        detail += f": {outcome.error.type}: {outcome.error.message}"
    u = outcome.usage
    cost = "unknown" if u.cost is None else f"${u.cost:.4f}"
    err.print(
        f"[{color}]{outcome.status}[/]{escape(detail)} · {outcome.steps} steps · {outcome.tool_calls} tool calls · "
        f"{u.input_tokens}+{u.output_tokens} tokens · cost {cost} · {outcome.duration_s:.2f}s"
    )
    for denied in outcome.denied:  # a call that did not run is never a footnote
        err.print(
            f"[red]denied by policy[/] {escape(denied.call_id)}: {escape(denied.tool)} "
            f"({escape(denied.rule)}: {escape(denied.reason)})",
            soft_wrap=True,
        )
    unresolved = outcome.unresolved_denials
    if outcome.success and unresolved:
        calls = ", ".join(f"{escape(d.call_id)} ({escape(d.tool)})" for d in unresolved)
        err.print(
            f"[red]the answer was given without {len(unresolved)} call(s) the policy denied "
            f"and nothing made up for: {calls}[/] (exit code 3). Allow the tool in the policy "
            "if the call was wanted, or check the answer",
            soft_wrap=True,
        )
    for pending in outcome.pending:
        shown = orjson.dumps(pending.arguments).decode()
        err.print(
            f"[yellow]waiting for approval[/] {escape(pending.call_id)}: {escape(pending.tool)} "
            f"{escape(shown)} [dim]({escape(pending.rule)}: {escape(pending.reason)})[/]"
        )
    if outcome.pending:
        err.print(
            f"[dim]decide with: tether approve {outcome.run_id} CALL "
            f"{escape(again_with(agent_ref).lstrip())} [--deny --reason ...] (or --all)[/]"
        )
    for warning in outcome.warnings:
        err.print(f"[yellow]warning:[/] {escape(warning)}")
    if log_dir is not None:
        err.print(f"[dim]log: {log_dir / (outcome.run_id + '.jsonl')}[/]")
