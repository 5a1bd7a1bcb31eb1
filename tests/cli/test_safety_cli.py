"""``tether approve`` continues a waiting run; ``tether audit`` catches a tampered log."""

from __future__ import annotations

import asyncio
import sqlite3
from pathlib import Path

import pytest
from typer.testing import CliRunner

from tests.support import long_line
from tether import Agent, tool
from tether.cli.app import app
from tether.codec import MAX_LINE_BYTES
from tether.messages import ToolCall, ToolResultMessage
from tether.models.base import ModelRequest, ModelResponse
from tether.outcome import RunOutcome
from tether.policy import RulePolicy, require_approval
from tether.stores import SqliteStore
from tether.testing import FunctionModel

sent: list[str] = []


@tool(open_world=False, blocking=False)
def send(to: str) -> str:
    """Sends a note.

    Args:
        to: The recipient.
    """
    sent.append(to)
    return f"sent to {to}"


def _model(request: ModelRequest) -> ModelResponse:
    results = [m for m in request.messages if isinstance(m, ToolResultMessage)]
    if results:
        said = " | ".join(b.text for m in results for b in m.content if b.kind == "text")
        return ModelResponse(
            tool_calls=(ToolCall(id="f", name="finish_task", arguments={"answer": said}),)
        )
    return ModelResponse(
        tool_calls=(
            ToolCall(id="c1", name="send", arguments={"to": "ann"}),
            ToolCall(id="c2", name="send", arguments={"to": "bob"}),
        )
    )


AGENT = Agent(
    name="sender",
    model=FunctionModel(_model),
    tools=[send],
    policy=RulePolicy(None, require_approval("send", reason="notes leave the building")),
)
REF = "tests.cli.test_safety_cli:AGENT"


def cli(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(app, list(args))
    return result.exit_code, result.output


def waiting_run(db: Path) -> RunOutcome[str]:
    async def go() -> RunOutcome[str]:
        store = SqliteStore(db)
        try:
            from dataclasses import replace

            return await replace(AGENT, store=store).run("send the notes", agent_ref=REF)
        finally:
            await store.close()

    outcome = asyncio.run(go())
    assert outcome.status == "waiting_for_approval"
    return outcome


def test_approve_decides_calls_one_by_one_and_continues_the_run(tmp_path: Path) -> None:
    sent.clear()
    db = tmp_path / "t.db"
    run_id = waiting_run(db).run_id
    code, output = cli("approve", run_id, "--agent", REF, "c1", "--by", "ops", "--db", str(db))
    assert code == 1, output  # still waiting for c2: not finished
    assert "waiting for approval c2: send" in output
    # the way on names the agent: the log's name for it is not loaded by itself
    assert f"--agent {REF}" in " ".join(output.partition("decide with:")[2].split())
    assert sent == []
    code, output = cli(
        "approve",
        run_id[:10],
        "--agent",
        REF,
        "c2",
        "--deny",
        "--reason",
        "not bob",
        "--db",
        str(db),
    )
    assert code == 0, output
    assert sent == ["ann"]
    assert "denied by a human: not bob" in output
    code, output = cli("approve", run_id, "--agent", REF, "c1", "--db", str(db))
    assert code == 2
    assert "does not wait for approvals" in output
    assert sent == ["ann"]  # approving again never runs it again


def test_approve_all_and_edited_arguments(tmp_path: Path) -> None:
    sent.clear()
    db = tmp_path / "t.db"
    run_id = waiting_run(db).run_id
    code, output = cli(
        "approve", run_id, "--agent", REF, "c1", "c2", "--args", '{"to": "carol"}', "--db", str(db)
    )
    assert code == 2
    assert "edits one call" in output
    code, output = cli("approve", run_id, "--agent", REF, "c1", "--args", "[1]", "--db", str(db))
    assert code == 2
    assert "JSON object" in output
    code, output = cli(
        "approve", run_id, "--agent", REF, "c1", "--args", '{"to": "carol"}', "--db", str(db)
    )
    assert code == 1, output
    code, output = cli("approve", run_id, "--agent", REF, "--all", "--db", str(db))
    assert code == 0, output
    assert sent == ["carol", "bob"]


def test_approve_without_calls_lists_what_is_pending(tmp_path: Path) -> None:
    db = tmp_path / "t.db"
    run_id = waiting_run(db).run_id
    code, output = cli("approve", run_id, "--agent", REF, "--db", str(db))
    assert code == 2
    assert "pending: c1 (send), c2 (send)" in output


def test_resume_with_an_answer_for_a_run_waiting_for_approval_exits_2(tmp_path: Path) -> None:
    sent.clear()
    db = tmp_path / "t.db"
    run_id = waiting_run(db).run_id

    code, output = cli("resume", run_id, "--answer", "yes", "--db", str(db))

    assert code == 2
    assert " ".join(output.split()) == (
        f"error: run {run_id} does not wait for an answer: it waits for approvals, so --answer "
        f"was not used; see its calls with `tether show {run_id}`, then `tether approve {run_id} "
        "CALL`"
    )
    assert sent == []


def test_audit_prints_every_decision_of_an_untampered_run(tmp_path: Path) -> None:
    db = tmp_path / "t.db"
    run_id = waiting_run(db).run_id
    cli("approve", run_id, "--agent", REF, "--all", "--by", "ops", "--db", str(db))
    code, output = cli("audit", run_id, "--db", str(db))
    assert code == 0, output
    assert "chain verified" in output
    for expected in ("needs_approval", "requested", "approved", "by ops", "control_tool"):
        assert expected in output


def _tamper(db: Path, sql: str) -> None:
    with sqlite3.connect(db) as conn:
        conn.executescript(sql)


@pytest.mark.parametrize(
    ("sql", "bad_seq", "problem"),
    [
        (
            "UPDATE events SET body = replace(body, 'notes leave', 'notes stay') WHERE seq = 4",
            4,
            "edited",
        ),
        (
            "UPDATE events SET seq = -1 WHERE seq = 3; UPDATE events SET seq = 3 WHERE seq = 5;"
            " UPDATE events SET seq = 5 WHERE seq = -1;",
            3,
            "reordered",
        ),
        ("DELETE FROM events WHERE seq = 6", 6, "removed"),
        ("UPDATE events SET body = substr(body, 1, 20) WHERE seq = 2", 2, "does not decode"),
        ("DELETE FROM events WHERE seq = (SELECT max(seq) FROM events)", None, "cut"),
    ],
)
def test_audit_finds_the_first_bad_event_of_a_tampered_store(
    tmp_path: Path, sql: str, bad_seq: int | None, problem: str
) -> None:
    db = tmp_path / "t.db"
    run_id = waiting_run(db).run_id
    events = cli("audit", run_id, "--db", str(db))
    assert events[0] == 0
    _tamper(db, sql)
    code, output = cli("audit", run_id, "--db", str(db))
    assert code == 1, output
    assert "tampered" in output
    assert problem in output
    if bad_seq is not None:
        assert f"first bad event at seq {bad_seq}" in output


def test_audit_of_a_jsonl_log(tmp_path: Path) -> None:
    sent.clear()

    async def go() -> RunOutcome[str]:
        from dataclasses import replace

        return await replace(AGENT, log_dir=tmp_path).run("send the notes")

    outcome = asyncio.run(go())
    log = tmp_path / f"{outcome.run_id}.jsonl"
    assert cli("audit", str(log))[0] == 0
    renamed = log.rename(tmp_path / "run.log")  # a log by any name, as show and replay take it
    assert cli("audit", str(renamed))[0] == 0
    log = renamed.rename(log)
    lines = log.read_bytes().splitlines()
    log.write_bytes(b"\n".join([*lines[:3], *lines[4:]]) + b"\n")  # one cut out of the middle
    code, output = cli("audit", str(log))
    assert code == 1
    assert "first bad event at seq 3" in output


@pytest.mark.parametrize("content", [b"", b"\n \n"], ids=["empty", "blank"])
def test_audit_of_a_jsonl_log_without_events_fails(tmp_path: Path, content: bytes) -> None:
    log = tmp_path / "run.jsonl"
    log.write_bytes(content)

    code, output = cli("audit", str(log))

    assert code == 2
    assert " ".join(output.split()).startswith(f"error: the log {log} holds no events")
    assert "verified" not in output


def test_audit_of_a_jsonl_log_with_a_line_over_the_cap_fails(tmp_path: Path) -> None:
    log = tmp_path / "run.jsonl"
    log.write_bytes(long_line(MAX_LINE_BYTES + 1) + b"\n")

    code, output = cli("audit", str(log))

    assert code == 2
    flat = " ".join(output.split())
    assert flat.startswith(f"error: {log}: a line is longer than 16 MiB")
    assert flat.endswith("(line 1)")
