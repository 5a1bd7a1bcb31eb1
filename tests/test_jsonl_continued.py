"""A run's JSONL log is whole whatever process continued the run, and no start leaves a stub.

Before: a run continued with ``run(run_id=...)`` from another directory wrote a file that
began mid-run (``audit``: tampered); ``resume`` wrote no JSONL at all; a file the process
died before finishing stayed cut with a gap after it; a start that failed (a store that is
not one) left an empty ``<run_id>.jsonl`` behind.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from tether import Agent
from tether.cli.app import app
from tether.codec import read_jsonl
from tether.outcome import RunOutcome
from tether.stores import MemoryStore
from tether.testing import ScriptedModel, call, finish


def _asking(store: MemoryStore, log_dir: Path | None) -> Agent[str]:
    return Agent(
        model=ScriptedModel([call("ask_user", question="which one?"), finish("done")]),
        can_ask_user=True,
        store=store,
        log_dir=log_dir,
    )


async def _waiting(store: MemoryStore, log_dir: Path) -> RunOutcome[str]:
    waiting = await _asking(store, log_dir).run("pick one", run_id="r1")
    assert waiting.status == "waiting_for_user"
    return waiting


@pytest.mark.parametrize("where", ["same", "another"])
async def test_resume_writes_the_whole_log_where_the_agent_logs(tmp_path: Path, where: str) -> None:
    store = MemoryStore()
    await _waiting(store, tmp_path / "a")
    log_dir = tmp_path / ("a" if where == "same" else "b")
    done = await _asking(store, log_dir).resume("r1", answer="the red one")
    assert done.status == "finished", done.error
    assert read_jsonl(log_dir / "r1.jsonl") == await store.read("r1")


async def test_a_log_cut_by_a_crash_is_completed_not_continued_after_a_gap(tmp_path: Path) -> None:
    store = MemoryStore()
    await _waiting(store, tmp_path)
    log = tmp_path / "r1.jsonl"
    lines = log.read_bytes().splitlines(keepends=True)
    log.write_bytes(b"".join(lines[:-2]))  # the process died between the store and the file
    done = await _asking(store, tmp_path).resume("r1", answer="the red one")
    assert done.status == "finished", done.error
    assert read_jsonl(log) == await store.read("r1")


@pytest.mark.parametrize("cut", [0, 40, 1], ids=["whole", "torn", "no-newline"])
async def test_a_file_with_another_history_is_left_alone_and_the_outcome_says_so(
    tmp_path: Path, cut: int
) -> None:
    store = MemoryStore()
    await _waiting(store, tmp_path / "a")
    other = tmp_path / "b"
    other.mkdir()
    elsewhere = await Agent(model=ScriptedModel([finish("x")]), log_dir=other).run("another")
    (other / f"{elsewhere.run_id}.jsonl").rename(other / "r1.jsonl")
    whole = (other / "r1.jsonl").read_bytes()
    (other / "r1.jsonl").write_bytes(whole[: len(whole) - cut])  # even cut, it is not ours
    before = (other / "r1.jsonl").read_bytes()
    done = await _asking(store, other).resume("r1", answer="the red one")
    assert done.status == "finished", done.error
    assert (other / "r1.jsonl").read_bytes() == before
    assert any("holds another history of this run" in w for w in done.warnings)


def test_a_start_that_fails_leaves_no_log_file(tmp_path: Path) -> None:
    not_a_store = tmp_path / "notes.txt"
    not_a_store.write_text("my notes\n")
    script = tmp_path / "script.json"
    script.write_text('[{"tool_calls": [{"name": "finish_task", "arguments": {"answer": "x"}}]}]')
    logs = tmp_path / "logs"
    result = CliRunner().invoke(
        app,
        [
            "run",
            "hi",
            "--db",
            str(not_a_store),
            "--log-dir",
            str(logs),
            "--model",
            f"scripted:{script}",
        ],
    )
    assert result.exit_code == 2, result.output
    assert "is not a tether run store" in result.stderr
    assert list(logs.glob("*")) == []


@pytest.mark.parametrize("cut", [40, 1], ids=["mid-line", "only-its-newline"])
async def test_a_last_line_cut_by_a_crash_is_dropped_then_the_log_completed(
    tmp_path: Path, cut: int
) -> None:
    store = MemoryStore()
    await _waiting(store, tmp_path)
    log = tmp_path / "r1.jsonl"
    log.write_bytes(log.read_bytes()[:-cut])  # the process died while writing it
    done = await _asking(store, tmp_path).resume("r1", answer="the red one")
    assert done.status == "finished", done.error
    assert done.warnings == ()
    assert read_jsonl(log) == await store.read("r1")
