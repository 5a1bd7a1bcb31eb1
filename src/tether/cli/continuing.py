"""Continuing a stored run from the command line (``tether resume``, ``tether approve``)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.console import Console

from tether.cli.driving import drive, exit_code
from tether.errors import ConfigError, TetherError, UserError
from tether.events import Event, RunFinished, RunStarted
from tether.outcome import RunOutcome
from tether.policy.approvals import Approval

if TYPE_CHECKING:
    from tether.stores.sqlite import SqliteStore

__all__ = [
    "AgentOption",
    "ModelOption",
    "PolicyOption",
    "RunArgument",
    "VerboseOption",
    "continue_and_report",
    "continue_run",
]

RunArgument = Annotated[str, typer.Argument(help="The run's id (or a unique prefix of it).")]
AgentOption = Annotated[
    str | None,
    typer.Option(
        "--agent",
        help="The agent that ran the run: module:attribute, an agent file (x.toml) or "
        "pack:PACK/AGENT (default: the recorded one, only if it is one of tether's examples "
        "or an installed pack's: a log's words are not run as code).",
    ),
]
ModelOption = Annotated[
    str | None, typer.Option(help="Model string (default: the recorded model, if it resolves).")
]
PolicyOption = Annotated[
    Path | None,
    typer.Option(help="A policy TOML file (default: the agent's own policy).", dir_okay=False),
]
VerboseOption = Annotated[
    bool, typer.Option("--verbose", "-v", help="Print every new event as it is committed.")
]
LogDirOption = Annotated[
    Path | None,
    typer.Option(help="Where the run's JSONL log is (default: .tether/runs, $TETHER_LOG_DIR)."),
]
NoLogOption = Annotated[bool, typer.Option("--no-log", help="Do not write a JSONL log.")]

Decide = Callable[[str, list[Event]], Sequence[Approval]]
"""Given the run id and its log, the approvals to resume with."""


def continue_run(
    run: str,
    *,
    db: Path | None,
    agent_ref: str | None,
    model: str | None,
    policy: Path | None,
    verbose: bool,
    answer: str | None = None,
    decide: Decide | None = None,
    busy_timeout: float | None = None,
    log_dir: Path | None = None,
) -> RunOutcome[Any]:
    """Resume a stored run with the agent that ran it; ``TetherError`` for the caller to show.

    The agent is ``--agent``, else the one the run recorded if ``trusted_ref`` trusts it
    (tether's examples, installed packs), with the run's limits;
    the model is the recorded one when it still resolves, else the agent's own. The run's
    JSONL log in ``log_dir`` is brought up to date and continued (``None``: none written).
    """
    from tether.cli.failures import store_failure
    from tether.cli.store_commands import open_store

    store = open_store(db, busy_timeout=busy_timeout)
    try:
        outcome = _continue(store, run, agent_ref, model, policy, verbose, answer, decide, log_dir)
    except BaseException:
        with contextlib.suppress(TetherError):  # the first failure is the one to report
            asyncio.run(store.close())
        raise
    try:
        asyncio.run(store.close())
    except TetherError:
        if store_failure(outcome) is None:
            raise  # else the run's own failure says more: how to go on with it
    return outcome


def _continue(
    store: SqliteStore,
    run: str,
    agent_ref: str | None,
    model: str | None,
    policy: Path | None,
    verbose: bool,
    answer: str | None,
    decide: Decide | None,
    log_dir: Path | None,
) -> RunOutcome[Any]:
    from tether.cli.store_commands import resolve_run_id
    from tether.directcall import DIRECT_PREFIX, direct_agent
    from tether.models.registry import resolve_model
    from tether.policy.gate import RulePolicy
    from tether.replay import load_agent

    run_id = asyncio.run(resolve_run_id(store, run))
    events = asyncio.run(store.read(run_id))
    if answer is not None:
        _check_waits_for_answer(run_id, events)
    last = events[-1]
    if decide is None and isinstance(last, RunFinished) and not last.status.startswith("wait"):
        # Ended for good (finished, failed, abandoned...): its log says how; no agent
        # needs loading to report it.
        Console(stderr=True).print(
            f"run {run_id} has ended already ({last.status}): resuming it changes nothing",
            soft_wrap=True,
        )
        return _ended(run_id, events, last)
    started = events[0]
    if not isinstance(started, RunStarted):
        raise ConfigError(f"run {run_id!r} does not begin with run_started")
    ref = agent_ref or started.agent_ref
    if ref is None:
        raise ConfigError(
            "the run does not record which agent ran it: pass --agent package.module:attr"
        )
    # the log's name for the agent is data (a run can be imported from anywhere): only
    # what the user passes, or what replay would trust too, is imported or called
    agent = load_agent(ref, recorded=agent_ref is None)
    if started.model.startswith(DIRECT_PREFIX):  # one call of one tool (mcp serve --tools)
        agent = direct_agent(agent, started.model.removeprefix(DIRECT_PREFIX))
    agent = replace(agent, store=store, limits=started.limits, log_dir=log_dir)
    if policy is not None:
        agent = replace(agent, policy=RulePolicy.from_toml(policy))
    chosen = model
    if chosen is None:
        try:
            resolve_model(started.model)
            chosen = started.model
        except TetherError:
            chosen = None  # fall back to the agent's own model
    approvals = decide(run_id, events) if decide is not None else ()
    stream = agent.resume_stream(run_id, answer=answer, approvals=approvals, model=chosen)
    return asyncio.run(drive(stream, verbose=verbose, max_steps=agent.limits.max_steps))


def _ended(run_id: str, events: Sequence[Event], last: RunFinished) -> RunOutcome[Any]:
    """The outcome of a run that has ended, as its ``run_finished`` records it."""
    return RunOutcome[Any](
        run_id=run_id,
        status=last.status,
        output=last.output,
        answer=last.answer,
        usage=last.usage,
        steps=last.steps,
        tool_calls=last.tool_calls,
        events=tuple(events),
        started_at=events[0].at,
        finished_at=last.at,
        error=last.error,
        limit=last.limit,
    )


def _check_waits_for_answer(run_id: str, events: Sequence[Event]) -> None:
    """Refuse ``--answer`` for a run that does not wait for the user, saying what to do."""
    last = events[-1] if events else None
    status = last.status if isinstance(last, RunFinished) else None
    if status == "waiting_for_user":
        return
    if status is None:
        state = "has not stopped (it crashed, or another process is running it)"
        then = f"continue it without --answer: `tether resume {run_id}`"
    elif status == "waiting_for_approval":
        state = "waits for approvals"
        then = f"see its calls with `tether show {run_id}`, then `tether approve {run_id} CALL`"
    else:
        state, then = f"ended {status}", f"see how with `tether show {run_id}`"
    raise UserError(
        f"run {run_id} does not wait for an answer: it {state}, so --answer was not used; {then}"
    )


def continue_and_report(run: str, **options: Any) -> None:
    """``continue_run``, then the report; exits 0 if the run finished, 1 if not, 2 on errors.

    A run that its store failed is an error: one ``error:`` line, exit 2.
    """
    from tether.cli.driving import report
    from tether.cli.failures import fail, store_failure

    try:
        outcome = continue_run(run, **options)
    except TetherError as exc:
        raise fail(exc) from None
    failure = store_failure(outcome)
    if failure is not None:
        raise fail(failure)
    report(outcome, None, False, options.get("agent_ref"))
    raise typer.Exit(exit_code(outcome))
