"""``tether replay RUN``: a run from the store (id or unique prefix), as ``show`` reads it."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from tests.cli import log_named
from tests.cli.test_cli import (  # _isolated: every command in tmp_path, nothing from the env
    CALCULATE_THEN_FINISH,
    _isolated,  # pyright: ignore[reportPrivateUsage, reportUnusedImport]  # noqa: F401
    default_logs,
    demo_log,
    flat,
    invoke,
    write_script,
)
from tests.support import reseal
from tether.codec import read_jsonl, write_jsonl
from tether.events import RunStarted


def stored_run(tmp_path: Path) -> tuple[str, Path]:
    """A run of the demo assistant, in the default store and its log: its id and log."""
    script = write_script(tmp_path, CALCULATE_THEN_FINISH)
    ran = invoke("run", "What is 2+2?", "--model", f"scripted:{script}")
    assert ran.exit_code == 0, ran.output
    [log] = default_logs(tmp_path)
    return read_jsonl(log)[0].run_id, log


def test_replay_of_a_stored_run_matches_as_the_replay_of_its_log_does(tmp_path: Path) -> None:
    run_id, log = stored_run(tmp_path)
    expected = f"replay matches: {len(read_jsonl(log))} events reproduced"
    assert flat(invoke("replay", str(log)).stderr) == expected

    by_id = invoke("replay", run_id)
    by_prefix = invoke("replay", run_id[:13])
    with_db = invoke("replay", run_id, "--db", str(tmp_path / ".tether" / "tether.db"))

    for result in (by_id, by_prefix, with_db):
        assert result.exit_code == 0, result.output
        assert flat(result.stderr) == expected


def test_replay_of_a_stored_run_loads_only_an_agent_it_may_trust(tmp_path: Path) -> None:
    # the store holds what `tether import` was given: a log naming any module is imported
    events = read_jsonl(demo_log(tmp_path))
    started = events[0]
    assert isinstance(started, RunStarted)
    named_by_log = dataclasses.replace(started, agent_ref="tests.cli.log_named:make_agent")
    write_jsonl(tmp_path / "forged.jsonl", reseal([named_by_log, *events[1:]]))
    imported = invoke("import", "forged.jsonl")
    assert imported.exit_code == 0, imported.output
    calls = list(log_named.calls)

    refused = invoke("replay", started.run_id)

    assert refused.exit_code == 2, refused.output
    assert "a log's words are not run as code" in flat(refused.stderr)
    assert log_named.calls == calls  # nothing the log names was imported or called
    named = invoke("replay", started.run_id, "--agent", "tether.examples.demo:assistant")
    assert named.exit_code == 0, named.output
    assert flat(named.stderr).startswith("replay matches: ")


def test_replay_of_a_run_id_without_a_store_says_what_to_pass(tmp_path: Path) -> None:
    result = invoke("replay", "abc")

    assert result.exit_code == 2
    assert flat(result.stderr) == (
        f"error: no run store at {Path('.tether') / 'tether.db'}: pass --db PATH or set "
        "$TETHER_DB to the store's file"
    )
    assert not (tmp_path / ".tether").exists()


def test_replay_of_an_unknown_run_or_a_missing_file_exits_2(tmp_path: Path) -> None:
    stored_run(tmp_path)

    unknown = invoke("replay", "zzz")
    missing = invoke("replay", "logs/missing.jsonl")

    assert (unknown.exit_code, missing.exit_code) == (2, 2)
    assert flat(unknown.stderr) == "error: no run 'zzz' in the store (see `tether runs`)"
    assert flat(missing.stderr) == (
        "error: the file logs/missing.jsonl does not exist (and it is not a run id)"
    )
