"""``tether approve`` and ``tether audit``: humans in the loop, and checking a log's integrity."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Annotated, cast

import orjson
import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from tether.auditkey import ENV_KEY, ENV_KEY_FILE, AuditKey, audit_key_from_env
from tether.cli.continuing import (
    AgentOption,
    LogDirOption,
    ModelOption,
    NoLogOption,
    PolicyOption,
    RunArgument,
    VerboseOption,
)
from tether.cli.driving import log_dir_of
from tether.cli.failures import fail
from tether.cli.store_commands import BusyTimeoutOption, DbOption
from tether.codec import iter_jsonl_lines
from tether.errors import EmptyLog, TetherError, UserError
from tether.events import ApprovalGiven, ApprovalRequested, Event
from tether.jsontypes import JsonObject
from tether.policy.approvals import Approval
from tether.policy.audit import AuditReport, audit_encoded, audit_stored
from tether.policy.redaction import Redactor

__all__ = ["safety_app"]

safety_app = typer.Typer()
"""The commands of this module; ``tether.cli.app`` merges them into ``tether``."""
out = Console()
err = Console(stderr=True)


def _waiting(events: list[Event]) -> dict[str, ApprovalRequested]:
    requested: dict[str, ApprovalRequested] = {}
    for event in events:
        if isinstance(event, ApprovalRequested):
            requested[event.call_id] = event
        elif isinstance(event, ApprovalGiven):
            requested.pop(event.call_id, None)
    return requested


@safety_app.command("approve")
def _approve(
    run: RunArgument,
    calls: Annotated[
        list[str] | None,
        typer.Argument(help="The pending calls to decide (ids; see `tether show RUN`)."),
    ] = None,
    all_calls: Annotated[
        bool, typer.Option("--all", help="Decide every call the run waits for.")
    ] = False,
    deny: Annotated[bool, typer.Option("--deny", help="Deny instead of approving.")] = False,
    reason: Annotated[str, typer.Option(help="Why (the model reads it for a denial).")] = "",
    args: Annotated[
        str | None,
        typer.Option(
            "--args",
            help="Edited arguments as a JSON object (one call only); the policy checks them again.",
        ),
    ] = None,
    by: Annotated[str, typer.Option(help="Who decides (recorded in the log).")] = "",
    db: DbOption = None,
    agent_ref: AgentOption = None,
    model: ModelOption = None,
    policy: PolicyOption = None,
    verbose: VerboseOption = False,
    busy_timeout: BusyTimeoutOption = None,
    log_dir: LogDirOption = None,
    no_log: NoLogOption = False,
) -> None:
    """Approve (or --deny) calls a run waits for, then continue the run.

    Each decision binds to the run, the call and the exact arguments the log shows (their
    hash). Calls left undecided keep the run waiting; decide them in a later `approve`.
    """
    from tether.cli.continuing import continue_and_report

    edited: JsonObject | None = None
    if args is not None:
        try:
            parsed = orjson.loads(args)
        except orjson.JSONDecodeError as exc:
            raise fail(UserError(f"--args is not valid JSON: {exc}")) from None
        if not isinstance(parsed, dict):
            raise fail(UserError("--args must be a JSON object of the tool's arguments"))
        if deny:
            raise fail(UserError("--args edits what is approved; it cannot go with --deny"))
        edited = cast(JsonObject, parsed)

    def decide(run_id: str, events: list[Event]) -> list[Approval]:
        waiting = _waiting(events)
        chosen = list(waiting) if all_calls else list(calls or [])
        if not chosen:
            listing = ", ".join(f"{c} ({r.tool})" for c, r in waiting.items()) or "none"
            raise UserError(f"name the calls to decide, or --all; pending: {listing}")
        if edited is not None and len(chosen) != 1:
            raise UserError("--args edits one call: name exactly one")
        decisions: list[Approval] = []
        for call_id in chosen:
            request = waiting.get(call_id)
            decisions.append(
                Approval(
                    call_id=call_id,
                    approved=not deny,
                    run_id=run_id,
                    arguments_hash=request.arguments_hash if request is not None else None,
                    arguments=edited,
                    by=by,
                    reason=reason,
                )
            )
            if request is not None:
                verb = "deny" if deny else "approve"
                shown = orjson.dumps(edited if edited is not None else request.arguments).decode()
                shown = Redactor().redact_text(shown)  # arguments given in full hold secrets
                err.print(
                    f"[dim]{verb} {escape(call_id)}: {escape(request.tool)} {escape(shown)}[/]"
                )
        return decisions

    continue_and_report(
        run,
        db=db,
        agent_ref=agent_ref,
        model=model,
        policy=policy,
        verbose=verbose,
        decide=decide,
        log_dir=log_dir_of(log_dir, no_log),
        busy_timeout=busy_timeout,
    )


@safety_app.command("audit")
def _audit(
    run: Annotated[
        str, typer.Argument(help="A run id (or unique prefix) in the store, or a .jsonl log.")
    ],
    db: DbOption = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the report as JSON.")] = False,
    key_file: Annotated[
        Path | None,
        typer.Option(
            "--key-file",
            dir_okay=False,
            help=f"The audit key's file: every event's MAC must verify under it (default: "
            f"${ENV_KEY_FILE}, else ${ENV_KEY}; without a key only the chain's consistency "
            "is checked).",
        ),
    ] = None,
    busy_timeout: BusyTimeoutOption = None,
) -> None:
    """Verify a run's hash chain (and MACs) and list every policy decision and approval.

    Exits 0 when the chain verifies, 1 naming the first bad event when the log was edited,
    reordered or cut (a cut at the very end shows only against the store's index). Without
    an audit key that is all it shows: anyone can edit a log and compute its hashes again.
    With the key, every event must also carry its MAC under the key, or the audit fails.
    """
    try:
        key = AuditKey.from_file(key_file) if key_file is not None else audit_key_from_env()
        result = _audit_report(run, db, busy_timeout, key)
    except TetherError as exc:
        raise fail(exc) from None
    if as_json:
        out.print_json(orjson.dumps(result).decode())
    else:
        _print_report(result)
    raise typer.Exit(0 if result.ok else 1)


def _audit_report(
    run: str, db: Path | None, busy_timeout: float | None, key: AuditKey | None
) -> AuditReport:
    path = Path(run)
    if path.is_file():  # as show and replay take it: a file by any name
        report = audit_encoded((line for _, line in iter_jsonl_lines(path)), key=key)
        if not report.events:
            raise EmptyLog(run)
        return report
    if path.exists():
        raise UserError(f"{run} is not a file: give a run id or a run's JSONL log")
    from tether.cli.store_commands import looks_like_a_path, open_store, resolve_run_id

    if looks_like_a_path(run):  # as show: not "no run 'x.jsonl' in the store"
        raise UserError(f"the file {run} does not exist (and it is not a run id)")

    async def go() -> AuditReport:
        store = open_store(db, busy_timeout=busy_timeout)
        try:
            run_id = await resolve_run_id(store, run)
            expected = (await store.info(run_id)).events
            # a page at a time: the log and its MACs are never held whole, only the decisions
            return await audit_stored(store, run_id, expected_events=expected, key=key)
        finally:
            await store.close()

    return asyncio.run(go())


def _print_report(result: AuditReport) -> None:
    table = Table(title=f"decisions in run {result.run_id}", show_lines=False)
    for column in ("seq", "event", "call", "tool", "decision", "why / who"):
        table.add_column(column)
    for entry in result.entries:
        table.add_row(
            str(entry.seq),
            escape(entry.kind),
            escape(entry.call_id),
            escape(entry.tool),
            escape(entry.decision),
            escape(entry.detail),
        )
    out.print(table)
    for line in _verdict(result):
        err.print(line, soft_wrap=True)


def _verdict(result: AuditReport) -> list[str]:
    """What the audit proves, one line each: the verdict first, then what it does not show."""
    lines: list[str] = []
    through = result.verified_through
    vouched = (
        f"events through seq {through} are authenticated (the MAC of seq {through} vouches "
        "for every event up to it)"
        if through is not None
        else "no event is authenticated"
    )
    if result.ok and result.keyed:
        lines.append(
            f"[green]chain verified and authenticated[/]: {result.events} events, every MAC "
            f"verified under key {result.key_id} (verified through seq {through}); last hash "
            f"{result.last_hash}"
        )
    elif result.ok:
        lines.append(
            f"[green]chain verified[/]: {result.events} events; last hash {result.last_hash}"
        )
        unchecked = f"; the log carries {result.macs} MACs, not checked" if result.macs else ""
        lines.append(
            "[yellow]note:[/] no audit key was given, so only the chain's internal consistency "
            "was checked, not its authenticity: anyone can edit a log and compute its hashes "
            f"again. Audit with --key-file or ${ENV_KEY_FILE} to check its MACs{unchecked}"
        )
    elif result.bad_mac:
        lines.append(
            f"[red]not authenticated[/]: seq {result.bad_seq}: {escape(result.problem or '')}"
        )
        lines.append(f"{vouched}; nothing from seq {result.bad_seq} on is")
    else:
        lines.append(
            f"[red]tampered[/]: first bad event at seq {result.bad_seq}: "
            f"{escape(result.problem or '')}"
        )
        if result.keyed:
            lines.append(vouched)
    if result.ok and not result.ended:
        macs = " and valid MACs" if result.keyed else ""
        lines.append(
            f"[yellow]warning:[/] the log ends at seq {result.events - 1} without run_finished: "
            f"the run is still running, or its end was cut off (a cut leaves a valid chain{macs} "
            "behind)"
        )
    return lines
