"""The ``tether`` command: run agents, watch them, replay their logs."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, cast

import typer
from rich.console import Console
from rich.markup import escape

from tether.cli.continuing import (
    AgentOption,
    LogDirOption,
    ModelOption,
    NoLogOption,
    PolicyOption,
    RunArgument,
    VerboseOption,
)
from tether.cli.driving import Lines, again_with, drive, exit_code, log_dir_of, report
from tether.cli.failures import fail, store_failure
from tether.cli.model_commands import model_app
from tether.cli.pack_commands import pack_app
from tether.cli.safety_commands import safety_app
from tether.cli.server_commands import keys_app, mcp_app, server_app
from tether.cli.store_commands import BusyTimeoutOption, DbOption, read_run, store_app
from tether.errors import TetherError, UserError
from tether.limits import Limits

if TYPE_CHECKING:
    from tether.outcome import RunOutcome
    from tether.stores.sqlite import SqliteStore

__all__ = ["app", "main"]

app = typer.Typer(
    name="tether",
    help="tether: a small, durable, safe runtime for LLM agents. The log is the run.",
    no_args_is_help=True,
    add_completion=False,
)
app.add_typer(store_app)  # runs, show, export, import, prune, abandon, cancel (cli.store_commands)
app.add_typer(model_app)  # models (tether.cli.model_commands)
app.add_typer(safety_app)  # approve, audit (tether.cli.safety_commands)
app.add_typer(server_app)  # serve (tether.cli.server_commands)
app.add_typer(keys_app)  # keys create/list/revoke (tether.cli.server_commands)
app.add_typer(mcp_app)  # mcp serve (tether.cli.server_commands)
app.add_typer(pack_app)  # packs (tether.cli.pack_commands)
out = Console()
err = Console(stderr=True)

DEFAULT_AGENT = "tether.examples.demo:assistant"


@app.command("run")
def _run(
    goal: Annotated[str, typer.Argument(help="The task, in words.")],
    agent_ref: Annotated[
        str,
        typer.Option(
            "--agent",
            help="The agent: module:attribute, an agent file (x.toml) or pack:PACK/AGENT.",
        ),
    ] = DEFAULT_AGENT,
    model: Annotated[
        str | None,
        typer.Option(help="Model string, e.g. 'scripted:script.json' (default: $TETHER_MODEL)."),
    ] = None,
    max_steps: Annotated[int | None, typer.Option(help="Override the agent's max_steps.")] = None,
    limit: Annotated[
        list[str] | None,
        typer.Option(
            "--limit",
            help="Set a limit, NAME=VALUE (repeatable; none: no limit): a Limits field "
            "(max_seconds=120) or a phase's own (think.timeout=30, reflect.max_steps=2).",
        ),
    ] = None,
    log_dir: Annotated[
        Path | None,
        typer.Option(help="Where run logs go (default: .tether/runs or $TETHER_LOG_DIR)."),
    ] = None,
    no_log: Annotated[bool, typer.Option("--no-log", help="Do not write a JSONL log.")] = False,
    verbose: Annotated[
        bool, typer.Option("--verbose", "-v", help="Print every event as it is committed.")
    ] = False,
    as_json: Annotated[bool, typer.Option("--json", help="Print the outcome as JSON.")] = False,
    db: Annotated[
        Path | None,
        typer.Option(help="The run store (default: .tether/tether.db or $TETHER_DB)."),
    ] = None,
    no_store: Annotated[
        bool, typer.Option("--no-store", help="Do not make the run durable (no resume).")
    ] = False,
    policy: Annotated[
        Path | None,
        typer.Option(
            help="A policy TOML file (default: the agent's own policy, else tether's safe default).",
            dir_okay=False,
        ),
    ] = None,
    busy_timeout: BusyTimeoutOption = None,
    run_id: Annotated[
        str | None,
        typer.Option(
            "--run-id",
            help="Run under this id: if a run is stored under it, continue it (after a crash) "
            "or report how it ended, instead of starting another. A supervisor can re-issue "
            "the same command.",
        ),
    ] = None,
    context: Annotated[
        str | None,
        typer.Option(
            help="Structured context given with the goal: a JSON object, or @FILE to read "
            "one from a file. The model reads it with the goal; run_started records it.",
        ),
    ] = None,
    stream_text: Annotated[
        bool,
        typer.Option(
            "--stream",
            help="Print the model's text and tool calls as they stream (on stderr, redacted "
            "as the log is).",
        ),
    ] = False,
    session: Annotated[
        str | None,
        typer.Option(
            help="Continue this conversation (any id: a chat, a user): the model reads the "
            "session's earlier goals and answers first, and this run becomes its newest turn.",
        ),
    ] = None,
) -> None:
    """Run an agent on a goal, with a live status line; exit 0 only if it finished.

    Exit codes: 0 finished; 3 finished, but the answer was given without a call the
    policy denied (and no later call of that tool ran); 1 any other end; 2 an error.

    The run is durable by default: every event is committed to the run store, so a run
    that is interrupted can be continued with `tether resume RUN`.
    """
    from dataclasses import replace

    from tether.cli.limitoptions import with_limits
    from tether.cli.store_commands import open_store
    from tether.replay import load_agent

    store = None
    directory: Path | None = None
    error: TetherError | None = None
    outcome: RunOutcome[Any] | None = None
    try:
        given = None if context is None else _context_option(context)  # before anything opens
        agent = load_agent(agent_ref)
        directory = log_dir_of(log_dir, no_log)
        limits: Limits = (
            agent.limits if max_steps is None else replace(agent.limits, max_steps=max_steps)
        )
        limits = with_limits(limits, limit or ())
        store = None if no_store else open_store(db, create=True, busy_timeout=busy_timeout)
        agent = replace(
            agent, model=model or agent.model, limits=limits, log_dir=directory, store=store
        )
        if policy is not None:
            from tether.policy.gate import RulePolicy

            agent = replace(agent, policy=RulePolicy.from_toml(policy))
        if run_id is not None and store is None:
            raise UserError("--run-id needs the run store: drop --no-store")
        if session is not None and store is None:
            raise UserError("--session keeps its turns in the run store: drop --no-store")
        lines = Lines() if stream_text else None
        stream = agent.stream(
            goal,
            context=given,
            on_text=lines,
            on_call=None if lines is None else lines.call,
            agent_ref=agent_ref,
            run_id=run_id,
            session=session,
        )
        try:
            outcome = asyncio.run(drive(stream, verbose=verbose, max_steps=limits.max_steps))
        finally:
            if lines is not None:
                lines.flush()
    except TetherError as exc:
        error = exc
    finally:
        closing = _close(store)
    # one line, the one that says most: what stopped the command, what stopped the run (it
    # says how to go on with it), or what the store could not take when it closed
    if error is not None:
        raise fail(error)
    assert outcome is not None
    failure = store_failure(outcome)
    if failure is not None:
        raise fail(failure)  # the store, not the run, needs fixing: it says how to go on
    if closing is not None:
        raise fail(closing)
    report(outcome, directory, as_json, agent_ref)
    if store is not None and outcome.status == "waiting_for_user":  # a cancelled run has ended
        again = escape(again_with(agent_ref))
        err.print(f"[dim]continue it with: tether resume {outcome.run_id}{again} --answer ...[/]")
    raise typer.Exit(exit_code(outcome))


_CONTEXT_MAX = 2**20
"""The largest ``--context @FILE`` read (1 MiB)."""


def _context_option(text: str) -> dict[str, Any]:
    """``--context``: a JSON object, or ``@FILE`` holding one.

    Raises:
        UserError: the file cannot be read, is over 1 MiB, or it is not a JSON object.
    """
    import orjson

    where = "--context"
    if text.startswith("@"):
        where = text[1:]
        try:
            with Path(where).open("rb") as fh:
                data = fh.read(_CONTEXT_MAX + 1)  # a device or a huge file is not read whole
            if len(data) > _CONTEXT_MAX:
                raise UserError(
                    f"the context file {where} is over {_CONTEXT_MAX // 2**20} MiB: give the "
                    "model what the task needs (it reads all of it with the goal)"
                )
            text = data.decode("utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise UserError(f"cannot read the context file {where}: {exc}") from None
    try:
        value: object = orjson.loads(text)
    except orjson.JSONDecodeError as exc:
        raise UserError(f"{where} is not JSON ({exc}); give a JSON object") from None
    if not isinstance(value, dict):
        raise UserError(f"{where} must be a JSON object ({{...}}), not {type(value).__name__}")
    return cast(dict[str, Any], value)


def _close(store: SqliteStore | None) -> TetherError | None:
    """Close the store; what it could not do (records kept in its pending files), if any."""
    if store is None:
        return None
    try:
        asyncio.run(store.close())
    except TetherError as exc:
        return exc
    return None


@app.command("resume")
def _resume(
    run: RunArgument,
    answer: Annotated[
        str | None, typer.Option(help="The answer, for a run waiting for the user.")
    ] = None,
    agent_ref: AgentOption = None,
    model: ModelOption = None,
    db: Annotated[
        Path | None,
        typer.Option(help="The run store (default: .tether/tether.db or $TETHER_DB)."),
    ] = None,
    verbose: VerboseOption = False,
    policy: PolicyOption = None,
    busy_timeout: BusyTimeoutOption = None,
    log_dir: LogDirOption = None,
    no_log: NoLogOption = False,
) -> None:
    """Continue a stored run: after a crash, or with the answer it waits for.

    Completed model turns and tool calls are never repeated; a side-effecting call that was
    in flight at a crash is re-run only if that is safe, else recorded as unknown. The run's
    JSONL log is brought up to date and continued.
    """
    from tether.cli.continuing import continue_and_report

    continue_and_report(
        run,
        db=db,
        agent_ref=agent_ref,
        model=model,
        policy=policy,
        verbose=verbose,
        answer=answer,
        busy_timeout=busy_timeout,
        log_dir=log_dir_of(log_dir, no_log),
    )


@app.command("demo")
def _demo(
    log_dir: Annotated[
        Path | None, typer.Option(help="Where the run log goes (default: .tether/runs).")
    ] = None,
    no_log: Annotated[bool, typer.Option("--no-log", help="Do not write a JSONL log.")] = False,
    verbose: Annotated[
        bool, typer.Option("--verbose/--quiet", "-v/-q", help="Print every event (or not).")
    ] = True,
) -> None:
    """Run the bundled example agent on its SCRIPTED model (no AI): calculator + clock tools."""
    from dataclasses import replace

    from tether.examples.demo import DEMO_GOAL, demo_agent

    directory = log_dir_of(log_dir, no_log)
    agent = replace(demo_agent, log_dir=directory)
    err.print(
        f"[dim]goal:[/] {DEMO_GOAL}\n[dim]model: a scripted stand-in (deterministic, not a language model)[/]"
    )
    try:
        stream = agent.stream(DEMO_GOAL, agent_ref="tether.examples.demo:demo_agent")
        outcome = asyncio.run(drive(stream, verbose=verbose, max_steps=agent.limits.max_steps))
    except TetherError as exc:
        raise fail(exc) from None
    report(outcome, directory, False)
    raise typer.Exit(exit_code(outcome))


@app.command("replay")
def _replay(
    run: Annotated[
        str,
        typer.Argument(
            help="A run id (or a unique prefix of one) in the store, or a run's JSONL log."
        ),
    ],
    agent_ref: Annotated[
        str | None,
        typer.Option("--agent", help="module:attribute of the Agent (default: the one recorded)."),
    ] = None,
    db: DbOption = None,
    busy_timeout: BusyTimeoutOption = None,
) -> None:
    """Re-run a recorded run with its recorded model responses and tool results.

    The run comes from the store or from a JSONL log, as for `tether show`. The agent the
    run names is loaded only if it is one of tether's examples or an installed pack's; any
    other is named with --agent. Exits 0 if the new log matches the recording, 1 naming the
    first divergence.
    """
    from tether.replay import load_agent
    from tether.replay import replay as do_replay

    try:
        events = read_run(run, db, busy_timeout)
        agent = load_agent(agent_ref) if agent_ref else None
        report = asyncio.run(do_replay(events, agent=agent))
    except TetherError as exc:
        raise fail(exc) from None
    if report.ok:
        err.print(f"[green]replay matches[/]: {len(report.replayed)} events reproduced")
        raise typer.Exit(0)
    err.print(f"[red]replay diverged[/]: {escape(report.divergence or '')}")
    raise typer.Exit(1)


@app.command("version")
def _version() -> None:
    """Print tether's version."""
    from tether import __version__

    out.print(__version__)


def main() -> None:
    """Entry point of the ``tether`` console script."""
    app()
